"""FX node facts both the program readers and the backends' checks read: canonical op
names, dtypes, shapes, where a quantize's arguments point, and the domain they name.

Knows no backend and builds no domain graph: the toolkit under `qflow.integrations`
(the readers) and `qflow.targets.<backend>` (artifact checks, boundary prediction).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.fx as fx

from qflow.domain import DTYPE_RANGE, Domain
from qflow.errors import InputError
from qflow.ops import OpClass, base_name, classify

#: Tensors of these dtypes hold indices, masks or sizes: no quantization domain.
DOMAIN_FREE_DTYPES = frozenset({torch.int64, torch.bool, torch.uint16, torch.uint32, torch.uint64})


#: Ops whose output is a size of their tensor argument, never its values.
SHAPE_OPS = frozenset({"sym_size", "sym_numel", "sym_stride", "sym_storage_offset"})


def is_shape_scalar(node: fx.Node) -> bool:
    """A scalar (an int, a SymInt / SymBool) that is a size of a tensor (`aten.sym_size`), or computed from such
    scalars only (the ``torch._check`` comparisons `export` writes for a data-dependent size): no domain."""
    val = node.meta.get("val")
    if node.op != "call_function" or isinstance(val, torch.Tensor) or val is None:
        return False
    if base_name(target_name(node)) in SHAPE_OPS:
        return True
    return bool(node.all_input_nodes) and all(is_shape_scalar(a) for a in node.all_input_nodes)


def target_name(node: fx.Node) -> str:
    """Canonical string of an FX target: ``aten.cat.default``,
    ``quantized_decomposed.quantize_per_tensor.default``, ``operator.getitem``."""
    t = node.target
    if isinstance(t, str):
        return t
    # every node of an op shares its target object: name it once (keyed by identity,
    # holding the object so its id cannot be reused by another)
    hit = _TARGET_NAMES.get(id(t))
    if hit is not None and hit[0] is t:
        return hit[1]
    name = _target_name(t)
    if len(_TARGET_NAMES) >= _CACHE_MAX:
        _TARGET_NAMES.clear()
    _TARGET_NAMES[id(t)] = (t, name)
    return name


def _target_name(t: Any) -> str:
    name = getattr(t, "__name__", None)
    module = getattr(t, "__module__", "") or ""
    if isinstance(t, torch._ops.OpOverload):
        return str(t)
    if name and ("EdgeOpOverload" in type(t).__name__ or "." in name):
        return name
    if name:
        mod = module.split(".")[-1] if module else ""
        return f"{mod}.{name}" if mod in ("operator", "_operator") else name
    return str(t)


_CACHE_MAX = 4096
_TARGET_NAMES: dict[int, tuple[Any, str]] = {}
_DTYPE_NAMES: dict[Any, str] = {}


def dtype_name(dt: Any) -> str:
    if isinstance(dt, torch.dtype):  # a handful of interned objects: name each once
        s = _DTYPE_NAMES.get(dt)
        if s is None:
            s = _DTYPE_NAMES[dt] = _dtype_name(dt)
        return s
    return _dtype_name(dt)


def _dtype_name(dt: Any) -> str:
    s = str(dt)
    return s[len("torch.") :] if s.startswith("torch.") else s


#: Ops whose scalar operands bound what they output (`Value.scalars`).
_SCALAR_READERS = frozenset({"gt", "lt", "ge", "le", "eq", "ne", "where", "masked_fill"})


def scalar_operands(node: fx.Node) -> tuple[tuple[str, float], ...] | None:
    """(edge label, value) of each finite number `node` reads as an operand, for a comparison, a
    ``where`` or a ``masked_fill`` (a bool or an infinite fill bounds nothing); None when it has none."""
    if node.op != "call_function" or base_name(target_name(node)) not in _SCALAR_READERS:
        return None
    out = tuple(
        (f"args[{i}]", float(a))
        for i, a in enumerate(node.args)
        if isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a)
    )
    return out or None


def val_of(node: fx.Node) -> Any:
    return node.meta.get("val")


def val_dtype(node: fx.Node) -> torch.dtype | None:
    v = val_of(node)
    return getattr(v, "dtype", None)


def numel_of(v: Any) -> int | None:
    """A tensor's element count, or None when its shape is symbolic: `int()` of a SymInt would install
    a guard that specializes the program's shape environment, which the caller's program shares."""
    n = v.numel() if hasattr(v, "numel") else None
    return static_int(n)


def static_int(n: Any) -> int | None:
    """`n` as an int when it is one (or a SymInt with no free symbol), else None; never guards."""
    if isinstance(n, int):
        return n
    if isinstance(n, torch.SymInt) and n.node.expr.is_number:
        return int(n.node.expr)
    return None


def static_shape(v: Any) -> tuple[int, ...] | None:
    shape = getattr(v, "shape", None)
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(shape)


def gemm_weight(node: fx.Node, weights: Mapping[str, int]) -> fx.Node | None:
    """The weight operand of `node` when it is a 2-D GEMM listed in `weights` (op base name → its weight's
    argument position; a batched matmul, lowered as a bmm, is not one)."""
    k = weights.get(base_name(target_name(node))) if node.op == "call_function" else None
    w = node.args[k] if k is not None and k < len(node.args) else None
    if not isinstance(w, fx.Node) or ((shape := static_shape(val_of(node))) is not None and len(shape) != 2):
        return None
    return w


SLICES = frozenset({"slice", "slice_copy"})


def _layout_ambiguous(shape: tuple[int, ...]) -> bool:
    """Is a 4-d tensor of `shape` laid out the same in NCHW and NHWC (one channel, or one pixel)?"""
    return shape[1] == 1 or shape[2] == shape[3] == 1


def eager_layout_differs(node: fx.Node) -> str | None:
    """Why the tensor `node` reads (its first argument, through quantizes and dequantizes) may reach it
    in another memory layout when the program runs in eager than its fake tensor records, or None: the
    fake tensor of a `cat` of inputs laid out alike in both (one channel) is channels-last, eager
    `torch.cat` returns it contiguous (measured: campaign case 00736-cm). A kernel whose arguments a
    lowering writes in the memory order the fake tensor has then acts on other dimensions."""
    src = node.args[0] if node.args else None
    while isinstance(src, fx.Node) and classify(target_name(src)) in (OpClass.QUANTIZE, OpClass.DEQUANTIZE):
        src = src.args[0] if src.args else None
    if not isinstance(src, fx.Node) or base_name(target_name(src)) != "cat":
        return None
    val = val_of(src)
    shape = static_shape(val)
    if shape is None or len(shape) != 4 or _layout_ambiguous(shape) or list(val.dim_order()) != [0, 2, 3, 1]:
        return None
    parts = src.args[0] if src.args and isinstance(src.args[0], (list, tuple)) else []
    shapes = [static_shape(val_of(a)) for a in parts if isinstance(a, fx.Node)]
    if not any(s is not None and len(s) == 4 and _layout_ambiguous(s) for s in shapes):
        return None
    return (
        f"{src.name} (cat) is channels-last in its fake tensor while eager torch.cat of its inputs (laid out alike "
        "in NCHW and NHWC) returns it contiguous"
    )


def removed_by_to_edge(node: fx.Node) -> bool:
    """Is `node` a slice that keeps its input's whole (static) shape?

    ExecuTorch's `to_edge` removes it (exir RemoveNoopPass, run by every
    lowering before any partitioner), so no backend ever sees it: a quantize
    after it becomes a requant of its input's dequantize, which the backend
    realises. (Measured: campaign case 00105, exact on the TOSA reference model.)"""
    if node.op != "call_function" or base_name(target_name(node)) not in SLICES:
        return False
    src = node.args[0] if node.args else None
    shape = static_shape(val_of(node))
    return isinstance(src, fx.Node) and shape is not None and shape == static_shape(val_of(src))


def module_path(node: fx.Node) -> str | None:
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return None
    path, _ = next(reversed(stack.values())) if isinstance(stack, dict) else list(stack.values())[-1]
    return str(path)


def detect_form(gm: fx.GraphModule) -> str:
    """'folded' if the Arm fold pass annotated the graph, 'lowered' if it calls
    a delegate, else 'qdq'.

    A node annotated with qparams that still reads a dequantize was not folded: lowering a
    Q/DQ program leaves the fold's annotations on the very nodes it exported (the node meta is
    shared), so a program analysed after it was lowered is still the Q/DQ program it is."""
    lowered = False
    for n in gm.graph.nodes:
        if ("input_qparams" in n.meta or "output_qparams" in n.meta) and not _reads_dequantize(n):
            return "folded"
        lowered = lowered or (n.op == "call_function" and classify(target_name(n)) is OpClass.DELEGATE)
    return "lowered" if lowered else "qdq"


def _reads_dequantize(n: fx.Node) -> bool:
    return any(a.op == "call_function" and classify(target_name(a)) is OpClass.DEQUANTIZE for a in n.all_input_nodes)


def is_float(node: fx.Node) -> bool:
    dt = val_dtype(node)
    return dt is not None and dt.is_floating_point


def all_float_outputs(node: fx.Node) -> bool:
    """Is every tensor `node` returns floating point (one tensor, or a tuple: aten.lstm's
    output and states)?"""
    v = val_of(node)
    leaves = list(v) if isinstance(v, (tuple, list)) else [v]
    dtypes = [getattr(t, "dtype", None) for t in leaves if t is not None]
    return bool(dtypes) and all(d is not None and d.is_floating_point for d in dtypes)


class Consts:
    """Resolves scale / zero-point arguments given as literals or tensor nodes."""

    def __init__(self, gm: fx.GraphModule, ep: Any | None) -> None:
        self.gm, self.ep = gm, ep
        self._placeholder_targets: dict[str, str] = {}
        #: qdq_domain's results by (target, argument types, arguments after the input)
        self.domains: dict[tuple[Any, ...], Domain] = {}
        #: the real values of integer constants whose readers all declare one domain for them (a folded
        #: Arm partition keeps its weights as codes), by node name: what a weight's gain is read from
        self.reals: dict[str, torch.Tensor] = {}
        if ep is not None:
            sig = ep.graph_signature
            for mapping in (sig.inputs_to_buffers, sig.inputs_to_parameters):
                self._placeholder_targets.update(mapping)
            self._placeholder_targets.update(getattr(sig, "inputs_to_lifted_tensor_constants", {}))

    def tensor(self, node: fx.Node) -> torch.Tensor | None:
        if node.op == "get_attr":
            obj: Any = self.gm
            for part in str(node.target).split("."):
                obj = getattr(obj, part, None)
            return obj if isinstance(obj, torch.Tensor) else None
        if node.op == "placeholder" and self.ep is not None:
            key = self._placeholder_targets.get(node.name)
            if key is None:
                return None
            if key in self.ep.state_dict:
                return self.ep.state_dict[key]
            return self.ep.constants.get(key)
        return None

    def value(self, x: Any, where: fx.Node, what: str) -> Any:
        if isinstance(x, fx.Node):
            t = self.tensor(x)
            if t is None:
                raise InputError(
                    f"{what} is node {x.name!r}, whose value qflow cannot resolve "
                    "(pass the ExportedProgram that owns this graph, not its bare graph module)",
                    where.name,
                )
            return t.tolist() if t.dim() > 0 else t.item()
        return x

    def is_constant(self, node: fx.Node) -> bool:
        if node.op == "get_attr":
            return True
        return node.op == "placeholder" and node.name in self._placeholder_targets


def qdq_domain(node: fx.Node, consts: Consts) -> Domain:
    """The domain named by a quantize / dequantize node's arguments.

    A quantize and its dequantizes name one domain with the same arguments (and
    every copy of a weight's dequantize reads the same tensors): read each
    argument list once per graph. The key holds each argument's type, so only
    arguments that are the same values of the same types share an entry, and
    whether the op is per channel, the one thing the op itself decides."""
    cache: dict[tuple[Any, ...], Domain] | None = getattr(consts, "domains", None)  # (any resolver may come)
    rest = node.args[1:]
    if cache is None or any(type(a) is float and not a for a in rest):
        return _qdq_domain(node, consts)  # (±0.0 compare equal but print apart)
    # (a quantize and its dequantize read the same argument list the same way)
    key = (base_name(target_name(node)).endswith("per_channel"), tuple(map(type, rest)), rest)
    try:
        hit = cache.get(key)
    except TypeError:  # an unhashable argument
        return _qdq_domain(node, consts)
    if hit is None:
        hit = cache[key] = _qdq_domain(node, consts)
    return hit


def _qdq_domain(node: fx.Node, consts: Consts) -> Domain:
    name = base_name(target_name(node))
    args = list(node.args)
    if name.endswith("_affine"):
        return _affine_domain(node, args)
    per_channel = name.endswith("per_channel")
    need = 7 if per_channel else 6
    if len(args) < need:
        raise InputError(
            f"{target_name(node)} has {len(args)} arguments, expected {need} "
            "(input, scale, zero_point, " + ("axis, " if per_channel else "") + "qmin, qmax, dtype)",
            node.name,
        )
    if not per_channel and isinstance(args[1], fx.Node) and consts.tensor(args[1]) is None:
        # dynamic quantization: qparams computed at run time (choose_qparams);
        # the run-time tensors stand for their value, so a Q and a DQ that read
        # the same ones share a domain, and any other pairing is not proved
        if len(args) < 6:
            raise InputError(f"{target_name(node)} has {len(args)} arguments, expected 6", node.name)
        zp = args[2].name if isinstance(args[2], fx.Node) else str(args[2])
        return Domain.run_time(dtype_name(args[5]), f"{args[1].name}, {zp}", int(args[3]), int(args[4]))
    try:
        if per_channel:
            if isinstance(args[1], fx.Node) and consts.tensor(args[1]) is None:
                # a transform pass sees lifted buffers without their values
                return Domain(dtype_name(args[6]), (), (), int(args[4]), int(args[5]), int(args[3]), args[1].name)
            scale = consts.value(args[1], node, "scale")
            zp = consts.value(args[2], node, "zero_point") if args[2] is not None else [0] * len(scale)
            axis, qmin, qmax, dtype = args[3], args[4], args[5], args[6]
            return Domain.quantized(dtype_name(dtype), tuple(scale), tuple(zp), qmin, qmax, int(axis))
        scale = consts.value(args[1], node, "scale")
        zp = consts.value(args[2], node, "zero_point")
        return Domain.quantized(dtype_name(args[5]), float(scale), int(zp), int(args[3]), int(args[4]))
    except InputError:
        raise
    except (TypeError, ValueError) as e:
        raise InputError(f"cannot read the quantization arguments of {target_name(node)}: {e}", node.name) from e


def _affine_domain(node: fx.Node, args: list[Any]) -> Domain:
    """torchao's (de)quantize_affine(x, block_size, scale, zero_point, dtype, qmin, qmax): one
    scale and zero point per block (per token for a dynamic activation, per group of inputs
    for a weight). The tensors that hold them stand for their value, as for dynamic
    quantization: a quantize and a dequantize that read the same ones share a domain."""
    if len(args) < 5:
        raise InputError(f"{target_name(node)} has {len(args)} arguments, expected at least 5", node.name)
    block, scale, zp, dtype = args[1], args[2], args[3], dtype_name(args[4])
    lo, hi = DTYPE_RANGE.get(dtype, (0, 0))
    qmin = int(args[5]) if len(args) > 5 and args[5] is not None else lo
    qmax = int(args[6]) if len(args) > 6 and args[6] is not None else hi

    def held(a: Any) -> str:
        return a.name if isinstance(a, fx.Node) else str(a)

    return Domain.run_time(dtype, f"block {list(block)}: {held(scale)}, {held(zp)}", qmin, qmax)


def quant_args_domain(qa: Any, node: fx.Node) -> Domain:
    """A Domain from an Arm ``QuantArgs`` (or anything with its fields)."""
    try:
        if getattr(qa, "per_channel", False):
            return Domain.quantized(dtype_name(qa.dtype), tuple(qa.scale), tuple(qa.zp), qa.qmin, qa.qmax, int(qa.axis))
        return Domain.quantized(dtype_name(qa.dtype), float(qa.scale), int(qa.zp), qa.qmin, qa.qmax)
    except (AttributeError, TypeError, ValueError) as e:
        raise InputError(f"malformed quantization parameters {qa!r}: {e}", node.name) from e


def dequantized(codes: torch.Tensor, d: Domain) -> torch.Tensor | None:
    """``scale * (codes - zero_point)`` in float64, per channel along the domain's axis; None when `d` has no
    numbers for it (float, opaque) or its channels do not fit `codes`."""
    if d.is_float or d.opaque is not None:
        return None
    if d.axis is None:
        return (codes.double() - float(d.zero_point)) * float(d.scale)  # type: ignore[arg-type]
    if not -codes.dim() <= d.axis < codes.dim() or codes.shape[d.axis] != len(d.scale):  # type: ignore[arg-type]
        return None
    shape = [1] * codes.dim()
    shape[d.axis] = -1
    scale = torch.tensor(d.scale, dtype=torch.float64).reshape(shape)
    zp = torch.tensor(d.zero_point, dtype=torch.float64).reshape(shape)
    return (codes.double() - zp) * scale


def tensor_args(node: fx.Node) -> Iterator[tuple[int, int | None, fx.Node]]:
    """(arg position, list index or None, node) for each node in args."""
    for i, a in enumerate(node.args):
        if isinstance(a, fx.Node):
            yield i, None, a
        elif isinstance(a, (list, tuple)):
            for j, e in enumerate(a):
                if isinstance(e, fx.Node):
                    yield i, j, e


def control_flow_operands(node: fx.Node) -> list[Any] | None:
    """What a cond / while_loop / wrap_with_set_grad_enabled hands its subgraphs, in their placeholders'
    order (a loop's carried variables, then its additional inputs); None for any other node, or one not
    written as torch writes them."""
    what = base_name(target_name(node)) if node.op == "call_function" else None
    if what == "wrap_with_set_grad_enabled":  # (enabled, subgraph, *operands): runs it once
        return list(node.args[2:])
    if what not in ("cond", "while_loop") or len(node.args) != 4:
        return None
    lists = node.args[2:] if what == "while_loop" else node.args[3:]
    if not all(isinstance(a, (tuple, list)) for a in lists):
        return None
    return [o for a in lists for o in a]


def arg_label(i: int, j: int | None) -> str:
    return f"args[{i}]" if j is None else f"args[{i}][{j}]"


def constant_nodes(graph: fx.Graph, consts: Consts) -> set[fx.Node]:
    """The nodes computed from constants only (a factory op, a weight's reshape): what a lowering
    computes ahead of time. One pass: a graph lists each node's inputs before it."""
    found: set[fx.Node] = set()
    for n in graph.nodes:
        if n.op in ("placeholder", "get_attr"):
            if consts.is_constant(n):
                found.add(n)
        elif n.op == "call_function" and all(a in found for a in n.all_input_nodes):
            found.add(n)
    return found
