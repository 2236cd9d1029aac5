"""Reading a program after `CortexMPassManager` (issue #29), node by node: a `cortex_m::` kernel is
checked by its rule (`kernel_rules`); an aten activation, comparison or arithmetic op the passes
left on codes, and a pad they wrote for another layout, are obligations of their own; anything
else is a float op or read as usual."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from qflow.bounds import Bound, CodeErrors
from qflow.domain import FLOAT, Domain
from qflow.graph import Definition, DefKind, DomainGraph, Obligation, ObligationKind, float_fact
from qflow.ir.fx_nodes import (
    Consts,
    arg_label,
    eager_layout_differs,
    is_float,
    quant_args_domain,
    target_name,
    tensor_args,
)
from qflow.ops import OpClass, base_name, classify
from qflow.targets.cortex_m.kernel_rules import (
    KIND,
    READERS,
    Add,
    Kernel,
    Linear,
    Reference,
    clamp_on_codes,
    code_bounds,
    code_of,
    constant_clamp,
    declared_domain,
    hardswish_clamp,
    hardswish_clamp_of,
    in_out_shapes,
    node_names,
    node_value,
    one_code,
    read_as,
)


class PassRun:
    """What `CortexMPassManager` does with a program before the passes, measured by running them
    on a copy (lazily: only when a question needs it, as lowering costs ~2 s against the reading's
    ~30 ms). Which activations it leaves as written on codes depends on the dtype each producer's
    folded output has when the activation passes run, which no table of producers predicts
    (campaign cases 00439-cm-custom, 00628-cm, 00872-cm, 00918-cm)."""

    def __init__(self, lower: Callable[[], tuple[Any, Any]]) -> None:
        self._lower = lower
        self._measured = False
        self._left: frozenset[str] | None = None
        self._pads: dict[str, list[tuple[tuple[int, ...], ...]]] = {}
        self._clamps: dict[str, tuple[int, int]] = {}
        self._one_codes: dict[str, int] = {}

    def left_on_codes(self) -> frozenset[str] | None:
        """The activations (by their name before the passes) the passes left on codes with their
        bounds in real units; None when the passes refuse the program (nothing to measure)."""
        if not self._measured:
            self._measured = True
            try:
                before, after = self._lower()
            except Exception:  # noqa: BLE001 (the passes refusing the program: the prediction stands)
                return None
            self._left, self._pads, self._clamps, self._one_codes = _read_run(before, after)
        return self._left

    def clamp_codes(self, name: str) -> tuple[int, int] | None:
        """The codes the clamp the passes made of activation `name` keeps (its integer bounds, on codes
        of a folded domain), or None (no such clamp, or the passes refuse the program)."""
        return None if self.left_on_codes() is None else self._clamps.get(name)

    def one_code(self, name: str) -> int | None:
        """The one code the clamp the passes made of activation `name` outputs whatever it reads
        (`kernel_rules.one_code`), or None."""
        return None if self.left_on_codes() is None else self._one_codes.get(name)

    def pads(self, name: str) -> list[tuple[tuple[int, ...], tuple[int, ...]]] | None:
        """(input shape, output shape) of each `cortex_m.pad` the passes made of node `name`; None
        when the passes refuse the program."""
        return None if self.left_on_codes() is None else self._pads.get(name, [])


def _read_run(
    before: Any, after: Any
) -> tuple[frozenset[str], dict[str, Any], dict[str, tuple[int, int]], dict[str, int]]:
    """(the activations left on codes, each pad's `cortex_m.pad` shapes, the code bounds of each clamp on
    codes the passes made of an activation, the one code of each that outputs one whatever it reads), by their
    names before the passes."""
    names = {n.name for n in before.graph.nodes}
    left: set[str] = set()
    pads: dict[str, list[tuple[tuple[int, ...], ...]]] = {}
    clamps: dict[str, tuple[int, int]] = {}
    one_codes: dict[str, int] = {}
    for n in after.graph.nodes:
        if n.op != "call_function" or (origin := _origin(n, names)) is None:
            continue
        op = base_name(target_name(n))
        if (kept := one_code(n)) is not None:
            one_codes[origin] = kept
        if op in _CLAMPS and _left_as_written(n, op) is not None:
            left.add(origin)
        elif op in _CLAMPS and (codes := code_bounds(n, op)) is not None:
            clamps[origin] = codes
        elif target_name(n).startswith("cortex_m.pad") and (shapes := in_out_shapes(n.args[0], n)) is not None:
            pads.setdefault(origin, []).append(shapes)
    return frozenset(left), pads, clamps, one_codes


def _origin(node: fx.Node, names: set[str]) -> str | None:
    """The node of the program before the passes that `node` was made from (its provenance chain)."""
    sources = node.meta.get("from_node") or []
    while sources:
        if sources[-1].name in names:
            return sources[-1].name
        sources = sources[-1].from_node
    return None


def read_reference(ep: Any) -> Reference:
    """The converted PT2E program's linears: linear(DQ(x), DQ(int8 weight), DQ(int32 bias))."""
    consts = Consts(ep.graph_module, ep)

    def codes(n: Any) -> tuple[torch.Tensor | None, int]:
        if not isinstance(n, fx.Node) or "dequantize_per_tensor" not in target_name(n):
            return None, 0
        src = n.args[0]
        return (consts.tensor(src) if isinstance(src, fx.Node) else None), int(n.args[2])

    def scale(n: Any) -> float | None:
        return float(n.args[1]) if isinstance(n, fx.Node) and "quantize_per_tensor" in target_name(n) else None

    linears, adds, pads, clamps, variants = [], [], [], [], []
    activations: dict[str, list[tuple[float, int]]] = {"hardsigmoid": [], "hardswish": []}
    for n in ep.graph.nodes:
        op = base_name(target_name(n)) if n.op == "call_function" else ""
        if (padded := _padded(n, op)) is not None:
            pads.append(padded)
        if op in _CLAMPS and (bounds := _real_bounds(n, op)) is not None:
            clamps.append((node_names(n), bounds))
        if op == "gelu" and n.kwargs:
            variants.append((node_names(n), tuple(sorted(n.kwargs.items()))))
        if op == "linear" and len(n.args) >= 2:
            weight, zp = codes(n.args[1])
            bias = codes(n.args[2])[0] if len(n.args) > 2 else None
            if weight is not None:
                linears.append(Linear(weight, zp, bias))
        elif op in ("add", "sub") and len(n.args) >= 2 and len(n.users) == 1:
            out = next(iter(n.users))
            if base_name(target_name(out)) in _CLAMPS and len(out.users) == 1:
                out = next(iter(out.users))  # (annotated with its activation, which fusion folds in)
            found = (scale(n.args[0]), scale(n.args[1]), scale(out))
            alpha = n.kwargs.get("alpha", n.args[2] if len(n.args) > 2 else 1)
            if None not in found and isinstance(alpha, int):
                adds.append(Add(found, -alpha if op == "sub" else alpha))  # type: ignore[arg-type]
        elif op in activations and len(n.users) == 1 and scale(q := next(iter(n.users))) is not None:
            activations[op].append((float(q.args[1]), int(q.args[2])))
    return Reference(
        tuple(linears),
        tuple(adds),
        tuple(activations["hardsigmoid"]),
        tuple(activations["hardswish"]),
        tuple(pads),
        tuple(clamps),
        tuple(variants),
    )


def _padded(n: fx.Node, op: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(input shape, padded shape) of a pad the passes make a `cortex_m.pad` of (a constant pad, an
    avg_pool2d's padding: count_include_pad, so the pass pads H and W by it), logical NCHW order."""
    if op not in _PADS or (shapes := in_out_shapes(n.args[0], n)) is None:
        return None
    in_shape, out_shape = shapes
    if op == "avg_pool2d":
        ph, pw = (list(n.args[3] if len(n.args) > 3 else [0]) * 2)[:2]
        out_shape = (*in_shape[:-2], in_shape[-2] + 2 * ph, in_shape[-1] + 2 * pw)
    return in_shape, out_shape


#: Ops before the passes that they lower to a `cortex_m.pad` (aten.pad stays aten.pad in an exported program).
_PADS = {"constant_pad_nd", "pad", "avg_pool2d"}


def read_node(dg: DomainGraph, node: fx.Node, consts: Consts, reference: Reference | PassRun | None) -> bool:
    """Read `node` if it is a kernel this backend emits (True), else leave it (False). `reference`:
    after the passes, what the program they were given declares; before them, their measured run."""
    name = target_name(node)
    op = base_name(name)
    if name.startswith("cortex_m.") and op in READERS:
        READERS[op](Kernel(dg, node, consts, reference))
        return True
    if name.startswith("cortex_m.") and op == "minimum" and any(hardswish_clamp_of(u) is node for u in node.users):
        hardswish_clamp(Kernel(dg, node, consts, reference))
        return True
    if op in _CLAMPS and not name.startswith("cortex_m."):
        _activation_left_on_codes(dg, node, op, reference)  # (an obligation; the node is read as usual)
    if op in _PADS and isinstance(reference, PassRun) and _marked(node):
        _pad_as_lowered(dg, node, op, reference)  # (an obligation; the node is read as usual)
    if op == "clamp" and node.meta.get("output_qparams"):
        clamp_on_codes(Kernel(dg, node, consts, reference))
        return True
    if op in _COMPARISONS and _comparison(dg, node):
        return True
    if op in _NEEDS_KERNEL and node.meta.get("input_qparams"):
        _left_on_codes(dg, node, op, _kept_by(node))  # (an obligation; the node is read as usual)
    return _float_op(dg, node)


def _left_on_codes(dg: DomainGraph, node: fx.Node, op: str, kept: str | None) -> None:
    """A folded op the passes did not make a kernel: AtenToCortexMPass skips one without its own
    output_qparams (an activation annotated with it that ActivationFusionPass declined), and the
    portable kernel then computes it on the codes as if they were reals (measured: sub → relu into a
    shared domain, 102 output LSB; a linear's int32 codes are refused when it runs). Unless its only
    readers are clamps that keep one code of anything they read (`kept`: what they output)."""
    detail = (f"{node.name} ({op}) has its inputs' dequantizes folded into it (input_qparams) but is no cortex_m "
              "kernel: the portable kernel computes it on the codes as if they were real numbers")  # fmt: skip
    if kept is not None:
        detail += f"; no output sees it: {kept}"
    dg.oblige(
        Obligation(ObligationKind.STRUCTURAL, node.name, node.name, finding_kind="domain-mismatch",
                   holds=kept is not None, inform=kept is not None, arg=op, detail=f"{detail}.")
    )  # fmt: skip


def _kept_by(node: fx.Node) -> str | None:
    """When every reader of `node` is a clamp that outputs one code whatever it reads: which, else None."""
    users = list(node.users)
    codes = [constant_clamp(u) if base_name(target_name(u)) == "clamp" else None for u in users]
    if not users or None in codes:
        return None
    clamps = ", ".join(f"{u.name} outputs code {c}" for u, c in zip(users, codes, strict=True))
    return f"{clamps} of every value it can read"


def _float_op(dg: DomainGraph, node: fx.Node) -> bool:
    """After the passes, an aten op they left between a `cortex_m` dequantize and quantize (not
    folded: no ``input_qparams``) runs on the portable kernels in float, whatever it is: a domain
    change across it is an ordinary requantize (measured: relu6's hardtanh, exact)."""
    ins = node.all_input_nodes
    if target_name(node).startswith("cortex_m.") or node.meta.get("input_qparams") or node.meta.get("output_qparams"):
        return False
    if not any(target_name(a).startswith("cortex_m.dequantize") for a in ins) or not all(map(is_float, ins)):
        return False
    dg.add_value(node_value(node, float_fact(), classify(base_name(target_name(node)))))
    for i, a in enumerate(node.args):
        if isinstance(a, fx.Node) and a.name in dg.g:
            dg.add_use(a.name, node.name, f"args[{i}]")
            if not dg.value(a.name).definition.domain_free:
                dg.oblige(Obligation(ObligationKind.USE, node=node.name, value=a.name, expected=FLOAT,
                                     expected_real=True, edge=(a.name, node.name), arg=f"args[{i}]"))  # fmt: skip
    return True


#: Activations QuantizedClampActivationPass rewrites into an `aten.clamp` with bounds in codes.
_CLAMPS = {"relu", "relu_", "hardtanh", "hardtanh_", "clamp", "clamp_"}
#: Producers whose folded output is not int8 when the activation passes run: a linear with an (int32)
#: bias promotes the codes' dtype until AtenToCortexMPass makes it a kernel (a convolution keeps its
#: input's dtype: measured, campaign case 00062-cm). ActivationFusionPass
#: fuses an activation into one only when its bounds span the output's whole code range and the
#: producer has no other user; QuantizedClampActivationPass rewrites only an activation whose input is
#: int8: after one of these an activation it did not fuse stays as written, bounds in real units, on
#: codes (after an add / sub / mul / conv / quantize it becomes a clamp on codes, measured).
_PROMOTES = {"linear"}
#: Ops whose output on int8 codes is float until AtenToCortexMPass makes them kernels (the LUT
#: activations, a true division): an activation after them is not rewritten either (00022-cm).
_TO_FLOAT = {"sigmoid", "tanh", "silu", "gelu", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "div"}
#: Ops that compute on reals: folded (``input_qparams``) but not made a kernel, the portable kernel
#: computes them on the codes.
_NEEDS_KERNEL = {"add", "sub", "mul", "linear", "convolution", "bmm", "matmul"} | _TO_FLOAT


def _real_bounds(node: fx.Node, op: str) -> tuple[float | None, float | None] | None:
    """The activation's bounds in real units, as written (None: not constants)."""
    if op.startswith("relu"):
        return 0.0, None
    args = [*node.args[1:3]]
    if op.startswith("hardtanh"):
        args += [-1.0, 1.0][len(args) :]
    else:
        args += [node.kwargs.get("min"), node.kwargs.get("max")][len(args) :]
    lo, hi = (_constant_bound(b) if isinstance(b, fx.Node) else b for b in args[:2])
    if not all(b is None or isinstance(b, (int, float)) for b in (lo, hi)):
        return None
    return (None if lo is None else float(lo)), (None if hi is None else float(hi))


def _constant_bound(node: fx.Node) -> float | None:
    """A `clamp.Tensor` bound that is a constant tensor (``full_like`` / ``full``, through the quantizes
    and dequantizes the quantizer put on it): the real value the program clamps to, each rounding applied."""
    chain = []
    while classify(target_name(node)) in (OpClass.QUANTIZE, OpClass.DEQUANTIZE) and isinstance(node.args[0], fx.Node):
        chain.append(node)
        node = node.args[0]
    fill = node.args[1] if base_name(target_name(node)) in ("full_like", "full") and len(node.args) > 1 else None
    if not isinstance(fill, (int, float)):
        return None
    value = float(fill)
    for q in reversed(chain):
        if classify(target_name(q)) is OpClass.QUANTIZE and (d := declared_domain(q)) is not None:
            value = (code_of(d, value) - int(d.zero_point)) * float(d.scale)  # type: ignore[arg-type]
    return value


def _marked(node: fx.Node) -> bool:
    info = (node.meta.get("custom") or {}).get("_arm_annotation_info") or {}
    return bool(info.get("quantized"))


def _left_as_written(node: fx.Node, op: str) -> tuple[Domain, Domain] | None:
    """(input, output) domains of an activation the passes left on codes with its bounds in real
    units: a relu / hardtanh (never rewritten: that makes a clamp) that was folded."""
    qin, qout = node.meta.get("input_qparams") or {}, node.meta.get("output_qparams") or {}
    if not qin or (op.startswith("clamp") and not _float_bounds(node)) or 0 not in qout:
        return None  # (a clamp with integer bounds: QuantizedClampActivationPass's, in codes)
    return quant_args_domain(qin[0], node), quant_args_domain(qout[0], node)


def _before_passes(node: fx.Node) -> tuple[Domain, Domain] | None:
    """(input, output) domains of a marked activation before the passes, which the fold will make
    read its producer's codes (through one per-tensor dequantize, into one quantize)."""
    dq = node.args[0] if node.args else None
    if not (_marked(node) and isinstance(dq, fx.Node) and "dequantize_per_tensor" in target_name(dq)):
        return None
    users = [u for u in node.users if "quantize_per_tensor" in target_name(u)]
    d_out = _read_as_quantized(node)
    if len(users) != 1 or (d_in := read_as(dq, dq)) is None or d_out is None:
        return None
    return d_in, d_out


def _predicted_left(node: fx.Node, op: str, d_out: Domain) -> bool:
    """Will the passes leave this activation on codes as written (when they cannot be run)? After a
    producer whose folded output is not int8 and that it is not fused into."""
    dq = node.args[0]
    producer = _producer(dq)  # type: ignore[arg-type]
    if producer is None or not _promoted(producer):
        return False  # (int8 codes: rewritten into a clamp on codes)
    bounds = _real_bounds(node, op)
    readers = sum(len(d.users) for d in dq.args[0].users)  # type: ignore[union-attr]
    fusable = base_name(target_name(producer)) in _PROMOTES and readers == 1
    return not (bounds is not None and fusable and _fuses(bounds, d_out))  # (else fused: the producer narrows)


def _producer(dq: fx.Node) -> fx.Node | None:
    """The op whose codes a dequantize reads (through its quantize), once the fold removes both."""
    q = dq.args[0] if "dequantize_per_tensor" in target_name(dq) and dq.args else None
    p = q.args[0] if isinstance(q, fx.Node) and "quantize_per_tensor" in target_name(q) and q.args else None
    return p if isinstance(p, fx.Node) and p.op == "call_function" else None


def _promoted(node: fx.Node) -> bool:
    """Is `node`'s folded output not int8 when the activation passes run: a linear with a bias, a LUT
    activation, or pass-through ops (stack, view, ...) and unrewritten activations of one, which keep
    its dtype (measured: 00066-cm, 00088-cm), or an add / sub / mul, a convolution or a bias-free
    linear of one (aten's type promotion; measured: 00118-cm, an add of a tanh's codes)."""
    seen: set[fx.Node] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if n in seen or not _marked(n):
            continue
        seen.add(n)
        op = base_name(target_name(n))
        if (op in _PROMOTES and len(n.args) > 2 and n.args[2] is not None) or op in _TO_FLOAT:
            return True
        if op.startswith("clamp") and _float_bounds(n):
            return True  # (aten.clamp of int8 by a float scalar is float; hardtanh keeps int8: 00088-cm, 00074-cm)
        if classify(op) in (OpClass.PASSTHROUGH, OpClass.ACTIVATION) or op in _PROMOTE_FROM_INPUTS:
            todo += [p for a in n.all_input_nodes if (p := _producer(a)) is not None]
    return False


#: Ops whose folded output dtype is their inputs' (promoted) when the activation passes run.
_PROMOTE_FROM_INPUTS = {"add", "sub", "mul", "linear", "convolution", "conv2d"}


def _float_bounds(node: fx.Node) -> bool:
    """Is one of the clamp's bounds written as a float (aten.clamp of int8 by a float scalar is float)?"""
    given = [*node.args[1:3], *(node.kwargs.get(k) for k in ("min", "max"))]
    return any(isinstance(b, float) for b in given)


def _fuses(bounds: tuple[float | None, float | None], d: Domain) -> bool:
    """Do the bounds span the domain's whole code range (ActivationFusionPass's precondition)?"""
    lo, hi = bounds
    return (lo is None or code_of(d, lo) == d.qmin) and (hi is None or code_of(d, hi) == d.qmax)


def _reachable_codes(node: fx.Node, d: Domain) -> tuple[int, int]:
    """The codes of `d` the activation's input can hold: all of them, or, when a clamp-like activation
    upstream (through pass-through ops, in the same domain) bounds them, its bounds' codes (campaign
    cases 00056-cm, 00095-cm-custom: a clamp after a clamp that already holds its codes in range;
    after the passes, the clamp on codes they made of it: 00148-cm)."""
    dq = node.args[0] if node.args else None
    if isinstance(dq, fx.Node) and "dequantize_per_tensor" not in target_name(dq):
        return _clamped_codes(dq, d)
    p = _producer(dq) if isinstance(dq, fx.Node) else None
    while p is not None and _marked(p):
        op = base_name(target_name(p))
        if op in _CLAMPS and (bounds := _real_bounds(p, op)) is not None and _read_as_quantized(p) == d:
            lo, hi = bounds
            return (d.qmin if lo is None else code_of(d, lo)), (d.qmax if hi is None else code_of(d, hi))
        ins = p.all_input_nodes
        if classify(op) is not OpClass.PASSTHROUGH or len(ins) != 1:
            break
        p = _producer(ins[0])
    return d.qmin, d.qmax


def _clamped_codes(p: fx.Node, d: Domain) -> tuple[int, int]:
    """After the passes: the codes of `d` that `p` (through pass-through ops) can hold — a clamp
    with integer bounds there is QuantizedClampActivationPass's, bounds in codes."""
    while p.op == "call_function":
        op = base_name(target_name(p))
        if (codes := code_bounds(p, op)) is not None and max(codes[0], d.qmin) <= min(codes[1], d.qmax):
            return max(codes[0], d.qmin), min(codes[1], d.qmax)
        ins = p.all_input_nodes
        if classify(op) is not OpClass.PASSTHROUGH or len(ins) != 1:
            break
        p = ins[0]
    return d.qmin, d.qmax


def _read_as_quantized(node: fx.Node) -> Domain | None:
    """The domain of the one quantize reading `node` (None: not exactly one)."""
    qs = [u for u in node.users if "quantize_per_tensor" in target_name(u) and "dequant" not in target_name(u)]
    return declared_domain(qs[0]) if len(qs) == 1 else None


def _activation_left_on_codes(dg: DomainGraph, node: fx.Node, op: str, passes: Any) -> None:
    """An activation the portable kernel runs on codes with its bounds as written: its output must
    be, code by code, the activation of the input's reals quantized into the output's domain.
    Before the passes, whether they leave it so is measured by running them (`passes`, a `PassRun`)
    where the answer matters (some code would come out wrong), else predicted."""
    before = not node.meta.get("input_qparams")
    found = _before_passes(node) if before else _left_as_written(node, op)
    bounds = _real_bounds(node, op)
    if found is None or bounds is None:
        return
    d_in, d_out = found
    first, last = _reachable_codes(node, d_in)
    every = torch.arange(d_in.qmin, d_in.qmax + 1, dtype=torch.float64)
    lo, hi = bounds
    got = every.clamp(lo, hi).trunc()  # (the portable kernel's clamp of int8 codes by the bounds)
    real = ((every - int(d_in.zero_point)) * float(d_in.scale)).clamp(lo, hi)  # type: ignore[arg-type]
    scaled = real / float(d_out.scale) + int(d_out.zero_point)  # type: ignore[arg-type]
    want = (torch.sign(scaled) * torch.floor(scaled.abs() + 0.5)).clamp(d_out.qmin, d_out.qmax)
    # (off by input code, 0 where a clamp upstream keeps the input: `prove` weighs the codes the program reaches)
    per_code = (got - want).abs() * ((every >= first) & (every <= last))
    reached = slice(first - d_in.qmin, last - d_in.qmin + 1)
    codes, got, want = every[reached], got[reached], want[reached]
    bad = (got - want).abs() > 0
    shown = f"[{'' if lo is None else f'{lo:g}'}, {'' if hi is None else f'{hi:g}'}]"
    detail = f"{node.name} ({op}) runs on codes of {d_in} with its bounds {shown} as written (not fused, not rewritten)"
    if before:
        left = passes.left_on_codes() if isinstance(passes, PassRun) and bad.any() else None
        if not (node.name in left if left is not None else _predicted_left(node, op, d_out)):
            return
        detail += " by CortexMPassManager" + (" (measured: the passes were run on a copy)" if left is not None else "")
    off = 0
    if bad.any():
        i = int(bad.nonzero()[0])
        off = int((got - want).abs().max())
        detail += (f": its output differs from the activation in {d_out} on {int(bad.sum())} of {len(codes)} codes "
                   f"(code {int(codes[i])} gives {int(got[i])}, the domains need {int(want[i])})")  # fmt: skip
    # (its codes, read in `d_out`, and how far each is off: `landing` follows them to the outputs)
    read = (max(d_out.qmin, int(got.min())), min(d_out.qmax, int(got.max()))) if len(codes) else None
    errors = CodeErrors(node.name, d_in, per_code.to(torch.float32).numpy().tobytes()) if off else None
    dg.oblige(
        Obligation(ObligationKind.STRUCTURAL, node.name, node.name, finding_kind="real-constant-on-codes",
                   holds=not bad.any(), arg=op, detail=detail if off else detail + ".", expected=d_out, codes=read,
                   bound=Bound(float(off), off) if off else None, off_by_code=errors)
    )  # fmt: skip


def _pad_as_lowered(dg: DomainGraph, node: fx.Node, op: str, passes: PassRun) -> None:
    """Before the passes: the `cortex_m.pad` they make of this pad must pad the shape it pads
    (its pads are in memory order: written for the other layout they pad other dimensions,
    measured, campaign case 00158-cm). Measured by running the passes."""
    padded = _padded(node, op)
    lowered = passes.pads(node.name)
    if padded is None or padded[0] == padded[1] or not lowered:
        return
    if (why := eager_layout_differs(node)) is not None:
        dg.oblige(
            Obligation(ObligationKind.STRUCTURAL, node.name, node.name, finding_kind=KIND, holds=False, arg="pads",
                       detail=f"{node.name} ({op}): the cortex_m.pad CortexMPassManager makes of it pads in the memory "
                       f"order of its input's fake tensor, but {why}: run in eager, the reference kernels pad other "
                       "dimensions (measured, campaign case 00736-cm; a device, whose tensors follow the .pte's dim "
                       "orders, is not measured here).")
        )  # fmt: skip
        return
    bad = [out for inp, out in lowered if (inp, out) != padded]
    shown = " and ".join(f"{list(i)} to {list(o)}" for i, o in lowered) or "nothing"
    dg.oblige(
        Obligation(ObligationKind.STRUCTURAL, node.name, node.name, finding_kind="kernel-argument-mismatch",
                   holds=not bad, arg="pads",
                   detail=(f"{node.name} ({op}) pads {list(padded[0])} to {list(padded[1])}; the cortex_m.pad "
                           f"CortexMPassManager makes of it (measured: the passes were run on a copy) pads {shown}."))
    )  # fmt: skip


#: Comparisons, as the portable kernels compute them.
_COMPARISONS: dict[str, Any] = {
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
}  # fmt: skip


def _codes_read(node: fx.Node, i: int) -> Domain | None:
    """The domain of the codes `node`'s argument `i` holds when the kernel reads them: its folded
    ``input_qparams`` (after the passes), or, before them, a dequantize the fold will remove
    (FoldAndAnnotateQParamsPass folds every node the quantizer marked quantized); None: reals."""
    qin = node.meta.get("input_qparams") or {}
    if i in qin:
        return quant_args_domain(qin[i], node)
    a = node.args[i] if i < len(node.args) else None
    if isinstance(a, fx.Node) and _marked(node) and "dequantize_per_tensor" in target_name(a):
        return read_as(a, a)
    return None


def _comparison(dg: DomainGraph, node: fx.Node) -> bool:
    """A comparison the passes fold onto codes: no kernel lowers it, so the portable kernel compares
    the codes themselves — with the threshold as written (a real number), or with the other operand's
    codes. Measured (tests/contracts/, cortex-m): `where(x > 0, x, y)` 122 output LSB off."""
    domains = [_codes_read(node, i) for i in range(2)]
    if domains == [None, None]:
        return False  # (on reals: a float comparison)
    dg.add_value(node_value(node, Definition(DefKind.FREE, reason="domain-free bool tensor")))
    for i, j, a in tensor_args(node):
        if a.name in dg.g:
            dg.add_use(a.name, node.name, arg_label(i, j))
    op = base_name(target_name(node))
    other = node.args[1] if len(node.args) > 1 else None
    d = domains[0] or domains[1]
    assert d is not None
    wrong = None
    if isinstance(other, fx.Node):
        holds = domains[0] is not None and domains[0] == domains[1]
        detail = f"compares codes of {domains[0] or 'reals'} with codes of {domains[1] or 'reals'}"
    else:
        wrong, detail = _threshold(_COMPARISONS[op], d, float(other))  # type: ignore[arg-type]
        holds = wrong is None
    # (with a threshold: the codes whose outcome flips, `landing` weighs what the flip moves downstream)
    dg.oblige(
        Obligation(ObligationKind.STRUCTURAL, node.name, node.name, finding_kind="real-constant-on-codes",
                   holds=holds, arg=op, detail=f"{node.name} ({op}) {detail}.", codes=wrong,
                   expected=d if wrong is not None and domains[0] is not None else None)
    )  # fmt: skip
    return True


def _threshold(compare: Any, d: Domain, c: float) -> tuple[tuple[int, int] | None, str]:
    """Does comparing codes with `c` as written give the real comparison, on every code of `d`? (the
    first and last code it does not give it on, or None; what it found)"""
    codes = torch.arange(d.qmin, d.qmax + 1, dtype=torch.int32)
    reals = (codes - int(d.zero_point)).to(torch.float32) * float(d.scale)  # type: ignore[arg-type]
    wrong = codes[compare(codes.to(torch.float32), c) != compare(reals, c)]
    if not len(wrong):
        return None, f"compares codes of {d} with {c:g}: the same mask as the reals on every code"
    q = int(wrong[0])
    return (q, int(wrong[-1])), (
        f"compares codes of {d} with {c:g} as written: the mask differs from the real comparison on "
        f"{len(wrong)} of {len(codes)} codes (code {q}, real {(q - int(d.zero_point)) * float(d.scale):.4g})"  # type: ignore[arg-type]
    )
