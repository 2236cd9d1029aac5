"""How much an op with weights can amplify an error on its inputs (`Value.gain`, read by `qflow.impact`).

In the infinity norm: a linear layer's output moves by at most its largest row sum of absolute
weights times the input's error, a convolution's by its largest output channel's sum, a product
with a constant by the constant's largest magnitude. A product of two activations (``mul``,
``bmm``) is bilinear: with both operands within their domains' ranges (at most ``M`` in
magnitude, errors at most ``2 M``), ``|ab - a'b'| <= K (M e_b + M e_a + e_a e_b) <= 3 K M (e_a + e_b)``
over a contraction of length ``K``. None when an operand is neither a constant qflow can read
nor a value of a fixed per-tensor domain.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import fx

from qflow.ir import activations
from qflow.ir.fx_nodes import Consts, qdq_domain, static_shape, target_name, val_of
from qflow.ops import OpClass, base_name, classify

_WEIGHTED = activations.PRODUCERS
_PRODUCTS = frozenset({"mul", "mul_"})
_MATMULS = frozenset({"bmm", "matmul", "mm"})
_SUMS = frozenset({"add", "add_", "sub", "sub_", "rsub"})
#: Normalisations along one dimension: over a dimension of one element their output is a constant
#: (softmax 1, log-softmax 0), whatever the input's codes — the decomposition subtracts the row's
#: own maximum first — so no error on the input reaches it.
_ROW_NORMALISED = frozenset({"softmax", "_softmax", "_safe_softmax", "log_softmax", "_log_softmax"})


def gain(node: fx.Node, consts: Consts, weights: tuple[tuple[float, float, float], ...] | None = None) -> float | None:
    """`node`'s gain from its activation inputs to its output, or None when qflow cannot bound it.
    A linear layer's / convolution's is its largest row sum of absolute weights, from its
    `channels` (`weights`, read once by the caller)."""
    name = base_name(target_name(node))
    args = node.args
    if name in _WEIGHTED:
        return max(p - n for _, p, n in weights) if weights else None
    if name in _SUMS:
        alpha = node.kwargs.get("alpha", 1)
        return max(1.0, abs(float(alpha))) if isinstance(alpha, (int, float)) else None
    if name in _PRODUCTS and len(args) == 2:
        return _product(args[0], args[1], consts, 1)
    if name in _ROW_NORMALISED and len(args) >= 2 and isinstance(args[0], fx.Node) and isinstance(args[1], int):
        shape = static_shape(val_of(args[0]))
        return 0.0 if shape and -len(shape) <= args[1] < len(shape) and shape[args[1]] == 1 else None
    if name in _MATMULS and len(args) == 2:
        a, b = (_constant(x, consts) for x in args)
        if b is not None and a is None and b.dim() >= 2:  # x @ B: each output sums a column of B
            return float(b.abs().sum(-2).max())
        if a is not None and b is None and a.dim() >= 2:
            return float(a.abs().sum(-1).max())
        shape = static_shape(val_of(args[0])) if isinstance(args[0], fx.Node) else None
        return _product(args[0], args[1], consts, shape[-1]) if shape else None
    return None


def terms(node: fx.Node) -> int | None:
    """A matrix product's contraction length, when its first operand's shape is static."""
    if base_name(target_name(node)) not in _MATMULS or len(node.args) != 2 or not isinstance(node.args[0], fx.Node):
        return None
    shape = static_shape(val_of(node.args[0]))
    return shape[-1] if shape else None


def channels(node: fx.Node, consts: Consts) -> tuple[tuple[float, float, float], ...] | None:
    """A linear layer's / convolution's output channels as (bias, sum of positive weights, sum of
    negative weights), or None when its weights are not constants qflow can read."""
    name = base_name(target_name(node))
    args = node.args
    if name not in _WEIGHTED or len(args) < 2 or (name == "convolution" and len(args) > 6 and args[6]):
        return None
    w = _constant(args[1], consts)
    if w is None or w.dim() < 2:
        return None
    w = w.flatten(1)
    b = _constant(args[2], consts) if len(args) > 2 and args[2] is not None else torch.zeros(w.shape[0])
    if b is None or b.numel() != w.shape[0]:
        return None
    pos, neg = w.clamp(min=0).sum(1), w.clamp(max=0).sum(1)
    return tuple(zip(b.flatten().tolist(), pos.tolist(), neg.tolist(), strict=True))


def clamp(node: fx.Node) -> tuple[float, float] | None:
    """An activation's real bounds, unbounded sides as infinities; None when they are not numbers."""
    try:
        b = activations.bounds(node)
        if b is None:
            return None
        return (-math.inf if b[0] is None else float(b[0])), (math.inf if b[1] is None else float(b[1]))
    except (TypeError, ValueError):  # (a clamp.Tensor's bounds are tensors)
        return None


#: Reductions over dimensions: which ones (`Value.reduced`) tells whether two of them reduce the same rows.
_REDUCTIONS = frozenset({"amax", "amin", "sum", "mean"})


def reduced(node: fx.Node) -> tuple[int, ...] | None:
    """The dimensions a reduction reduces, non-negative and sorted (all of them for an empty list), or
    None when `node` is no reduction with static dimensions, or a maximum / minimum not kept in its
    rows' place (`keepdim`: what `x - amax(x)` subtracts from each element is then its row's)."""
    name = base_name(target_name(node))
    if name not in _REDUCTIONS or not node.args or not isinstance(node.args[0], fx.Node):
        return None
    if name in ("amax", "amin") and not (node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)):
        return None
    shape = static_shape(val_of(node.args[0]))
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", ())
    if shape is None or dims is None:
        return tuple(range(len(shape))) if shape is not None else None
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not all(isinstance(d, int) and -len(shape) <= d < max(len(shape), 1) for d in dims):
        return None
    return tuple(sorted({d % max(len(shape), 1) for d in dims})) if dims else tuple(range(len(shape)))


def constant_values(node: fx.Node, consts: Consts) -> tuple[float, float] | None:
    """The real values a float constant or a dequantized one holds (their hull), or None when `node` is
    neither: a calibrated weight's domain spans more than the weight holds, and a float operand (an
    added 0.5) is no interval at all."""
    leaf, fill = node.op in ("placeholder", "get_attr"), base_name(target_name(node)) in _FILLS
    if (like := _like_fill(node)) is not None:
        return like, like
    if not leaf and not fill and classify(target_name(node)) is not OpClass.DEQUANTIZE:
        return None
    if leaf and type(consts.tensor(node)) not in (torch.Tensor, torch.nn.Parameter):
        return None  # (a tensor subclass, torchao's quantized weights: its codes are no reals)
    c = _evaluated(node, consts, 1) if fill else _constant(node, consts)
    c = c.float() if c is not None and c.is_floating_point() else None
    if c is None or not c.numel() or not bool(c.isfinite().all()):
        return None
    return float(c.min()), float(c.max())


def _product(a: Any, b: Any, consts: Consts, k: int) -> float | None:
    for x, y in ((a, b), (b, a)):
        if isinstance(y, (int, float)) and not isinstance(y, bool):
            return abs(float(y)) * k
        c = _constant(y, consts) if isinstance(x, fx.Node) else None
        if c is not None and c.numel():
            return float(c.abs().max()) * k
    ma, mb = _magnitude(a, consts), _magnitude(b, consts)
    return 3.0 * k * max(ma, mb) if ma is not None and mb is not None else None


def _magnitude(x: Any, consts: Consts) -> float | None:
    """The largest magnitude a dequantized operand can hold (its fixed per-tensor domain's range)."""
    if not isinstance(x, fx.Node) or classify(target_name(x)) is not OpClass.DEQUANTIZE:
        return None
    d = qdq_domain(x, consts)
    if d.is_float or d.per_channel or not isinstance(d.scale, float) or not isinstance(d.zero_point, int):
        return None
    return d.scale * max(abs(d.qmin - d.zero_point), abs(d.qmax - d.zero_point))


def _constant(x: Any, consts: Consts) -> torch.Tensor | None:
    """The float value of a constant operand: a parameter, buffer or lifted constant, or its dequantize."""
    if not isinstance(x, fx.Node):
        return None
    t = consts.tensor(x)
    if t is not None:
        return t.detach().float() if t.is_floating_point() else consts.reals.get(x.name)
    t = _evaluated(x, consts, 3) if classify(target_name(x)) is OpClass.DEQUANTIZE else None
    return t.float() if t is not None else None


#: Factory ops whose values their arguments say (a mask's threshold, ``full([1], 0.5)``).
_FILLS = frozenset({"full", "scalar_tensor", "zeros", "ones"})


#: Factory ops shaped like their input, and the value they fill it with (None: their second argument).
_LIKE_FILLS = {"full_like": None, "zeros_like": 0.0, "ones_like": 1.0}


def _like_fill(node: fx.Node) -> float | None:
    """The value a ``full_like(x, v)`` / ``zeros_like`` / ``ones_like`` holds everywhere (a masked_fill's
    fill, written as a where of a filled tensor), whatever its input holds."""
    name = base_name(target_name(node))
    if name not in _LIKE_FILLS:
        return None
    v = _LIKE_FILLS[name]
    if v is None:
        v = node.args[1] if len(node.args) > 1 else node.kwargs.get("fill_value")
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def _evaluated(x: fx.Node, consts: Consts, depth: int) -> torch.Tensor | None:
    """The value of `x` computed from constants: a constant, or a dequantize / quantize / fill of
    them (up to `depth` ops deep); None for anything else."""
    t = consts.tensor(x)
    if t is not None or depth == 0:
        return t
    op = x.target if isinstance(x.target, torch._ops.OpOverload) else getattr(x.target, "_op", None)
    # (the edge dialect's EdgeOpOverload wraps the aten op in `_op`)
    cls, name = classify(target_name(x)), base_name(target_name(x))
    if not isinstance(op, torch._ops.OpOverload) or not (
        cls in (OpClass.DEQUANTIZE, OpClass.QUANTIZE) or name in _FILLS
    ):
        return None
    if any(isinstance(v, fx.Node) for v in x.kwargs.values()):
        return None  # (an out variant writes memory the program plans: nothing to evaluate here)
    resolved: list[Any] = []
    for a in x.args:
        if isinstance(a, fx.Node):
            a = _evaluated(a, consts, depth - 1)
            if a is None:
                return None
        resolved.append(a)
    if not _reads_its_dtype(cls, resolved, x.kwargs):
        return None
    with torch.no_grad():
        return op(*resolved, **x.kwargs)


def _reads_its_dtype(cls: OpClass, args: list[Any], kwargs: dict[str, Any]) -> bool:
    """Whether a (de)quantize's operand has the dtype the op declares: a folded Arm partition can hand
    ``dequantize(..., int16)`` a float fill the fold pass left unquantized, whose value qflow cannot know."""
    if cls is OpClass.QUANTIZE:
        return not isinstance(args[0], torch.Tensor) or args[0].is_floating_point()
    if cls is not OpClass.DEQUANTIZE:
        return True
    declared = kwargs.get("dtype", next((a for a in args if isinstance(a, torch.dtype)), None))
    return not isinstance(args[0], torch.Tensor) or declared is None or args[0].dtype == declared
