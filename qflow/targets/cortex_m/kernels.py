"""Reading the `cortex_m::` kernels of a program after `CortexMPassManager` (issue #29).

Each kernel gets integers folded from the program's domains; the fold records those domains on
the node (`input_qparams` / `output_qparams`, as Arm's FoldAndAnnotateQParamsPass does). A kernel
is read as a value in its declared output domain that reads its inputs in their declared
domains (ordinary obligations on its producers), plus one obligation per folded integer that it
realises them, by the arithmetic of the Cortex-M dialect's reference kernels
(`executorch/backends/cortex_m/ops/operators.py`):

* `requantize_cmsis(x, m, s)` multiplies by the real ratio m · 2^(s − 31);
* `quantized_add`: each input is (q − zp) · 2^20 · ratio_i and the sum is requantized by the
  output ratio, so ratio_i · ratio_out · 2^20 = s_i / s_out; zero points subtracted / added; the
  add's alpha (−alpha for a sub, also a `quantized_add`) multiplies the second ratio and is read
  from the program before the passes (`reference=`);
* `quantized_mul`: ratio_out = s_a · s_b / s_out;
* `quantized_activation`: a 256-entry LUT that must tabulate the activation the node replaced
  (`original_aten`) from the input's domain into the output's, entry by entry;
* `quantized_batch_matmul`: offsets are negated zero points; ratio_out = s_lhs · s_rhs / s_out;
* `quantized_linear`: offsets are negated zero points (input, filter) and the output zero point;
  ratio = s_in · s_w / s_out; the bias (on MVE folded into `kernel_sum` with input_offset · Σw)
  is checked against the program it came from (`reference=`), else unproven;
* `quantized_conv2d`: input_offset = −input zero point, output_offset = output zero point; the
  weights are read with no offset, so their zero points must be 0; per output channel c,
  ratio_c = s_in · s_w[c] / s_out; the int32 bias is added to the accumulator, so its declared
  domain is s_in · s_w[c] with zero point 0;
* `quantized_depthwise_conv2d`: as `quantized_conv2d` (IHWO weights, depth_multiplier before the
  offsets);
* `quantized_transpose_conv2d`: as `quantized_conv2d`;
* `quantized_div`: plain zero points, output_scale = s_a / (s_b · s_out); a divisor at real 0 gives the
  output zero point where the program saturates (unproven);
* `quantized_max_pool2d`: the max of codes, in the input's domain (zero points in and out);
* `quantized_avg_pool2d`: the codes' domain is kept (its zero point and multiplier / shift
  dequantize and requantize with themselves: a mutated one moves codes by at most one, measured);
* `softmax`: the input scale as ratio(multiplier, shift) / 2^26 (CMSIS-NN's Q5.26 input; the input zero
  point cancels); the output is CMSIS-NN's fixed domain, scale 1/256 and zero point −128;
* `pad` / `transpose`: copies of codes; a pad with any padding writes `pad_value`;
* an `aten.clamp` on codes (a relu folded by QuantizedClampActivationPass): bounds in codes;
* a hardsigmoid fused into its producer (ActivationFusionPass) is a requantize into 6·s and
  z + round(1/2s): its consumers read the producer's codes in the hardsigmoid's domain (s, z);
  a decomposed hardswish (DecomposeHardswishPass) is mul(x, minimum(x, code of 3)) with the +3
  in the mul's second zero point and the /6 in its output scale. Both are checked against the
  program the passes were given (`reference=`), which has the activation.

What a mutated integer does to the output is measured by `tests/test_cortex_m.py`; the rules
above are what survived that measurement. Anything else is unproven, never proved.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.fx as fx

from qflow.bounds import Bound, CodeErrors
from qflow.domain import FLOAT, Domain
from qflow.graph import Definition, DefKind, DomainGraph, Obligation, ObligationKind, Value, float_fact
from qflow.impact import LIPSCHITZ
from qflow.ir.fx_nodes import (
    Consts,
    dtype_name,
    eager_layout_differs,
    is_float,
    module_path,
    numel_of,
    quant_args_domain,
    static_shape,
    target_name,
)
from qflow.ops import OpClass, base_name, classify
from qflow.ranges import domain_range

KIND = "kernel-argument-mismatch"
#: Multipliers are 31-bit fixed point: two of them differ from the real ratio by < 2^-29.
RATIO_TOLERANCE = 1e-6
_SHIFT_INT8 = 20


def ratio(multiplier: int, shift: int) -> float:
    """The real factor CMSIS-NN's requantize applies."""
    return multiplier * 2.0 ** (shift - 31)


@dataclass(frozen=True)
class Linear:
    """A quantized linear of the program before the passes: its weight codes and zero point, and
    its bias codes (int32, in the input scale × weight scale)."""

    weight: torch.Tensor
    weight_zero_point: int
    bias: torch.Tensor | None


@dataclass(frozen=True)
class Add:
    """A quantized add / sub of the program before the passes: its input and output scales and
    the coefficient of its second input (the add's alpha; −alpha for a sub), which the passes
    fold into that input's multiplier and do not record otherwise."""

    scales: tuple[float, float, float]
    coefficient: int


@dataclass(frozen=True)
class Reference:
    """What the PT2E program a Cortex-M program was rewritten from declares, for the checks
    the rewritten one cannot decide alone."""

    linears: tuple[Linear, ...]
    adds: tuple[Add, ...] = ()
    #: (scale, zero point) of each hardsigmoid's output: a fused one leaves no node to say so
    hardsigmoids: tuple[tuple[float, int], ...] = ()
    hardswishes: tuple[tuple[float, int], ...] = ()
    #: (input shape, output shape) of each pad (a constant_pad_nd, an avg_pool2d's padding)
    pads: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = ()
    #: each relu / hardtanh / clamp: the names it goes by (its own, those it was made from) and its bounds
    #: in real units, as written
    activations: tuple[tuple[frozenset[str], tuple[float | None, float | None]], ...] = ()

    def linear(self, weight: torch.Tensor) -> Linear | None:
        """The one linear whose weight codes are `weight`'s (None: none, or several)."""
        hits = [lin for lin in self.linears if lin.weight.shape == weight.shape and torch.equal(lin.weight, weight)]
        return hits[0] if len(hits) == 1 else None

    def add_coefficient(self, scales: tuple[float, float, float]) -> int | None:
        """The second input's coefficient of the adds in these domains, when they agree on one."""
        hits = {a.coefficient for a in self.adds if all(_close(x, y) for x, y in zip(a.scales, scales, strict=True))}
        return hits.pop() if len(hits) == 1 else None


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

    def left_on_codes(self) -> frozenset[str] | None:
        """The activations (by their name before the passes) the passes left on codes with their
        bounds in real units; None when the passes refuse the program (nothing to measure)."""
        if not self._measured:
            self._measured = True
            try:
                before, after = self._lower()
            except Exception:  # noqa: BLE001 (the passes refusing the program: the prediction stands)
                return None
            self._left, self._pads, self._clamps = _read_run(before, after)
        return self._left

    def clamp_codes(self, name: str) -> tuple[int, int] | None:
        """The codes the clamp the passes made of activation `name` keeps (its integer bounds, on codes
        of a folded domain), or None (no such clamp, or the passes refuse the program)."""
        return None if self.left_on_codes() is None else self._clamps.get(name)

    def pads(self, name: str) -> list[tuple[tuple[int, ...], tuple[int, ...]]] | None:
        """(input shape, output shape) of each `cortex_m.pad` the passes made of node `name`; None
        when the passes refuse the program."""
        return None if self.left_on_codes() is None else self._pads.get(name, [])


def _read_run(before: Any, after: Any) -> tuple[frozenset[str], dict[str, Any], dict[str, tuple[int, int]]]:
    """(the activations left on codes, each pad's `cortex_m.pad` shapes, the code bounds of each clamp on
    codes the passes made of an activation), by their names before the passes."""
    names = {n.name for n in before.graph.nodes}
    left: set[str] = set()
    pads: dict[str, list[tuple[tuple[int, ...], ...]]] = {}
    clamps: dict[str, tuple[int, int]] = {}
    for n in after.graph.nodes:
        if n.op != "call_function" or (origin := _origin(n, names)) is None:
            continue
        op = base_name(target_name(n))
        if op in _CLAMPS and _left_as_written(n, op) is not None:
            left.add(origin)
        elif op in _CLAMPS and (codes := _code_bounds(n, op)) is not None:
            clamps[origin] = codes
        elif target_name(n).startswith("cortex_m.pad") and (shapes := _shapes(n.args[0], n)) is not None:
            pads.setdefault(origin, []).append(shapes)
    return frozenset(left), pads, clamps


def _code_bounds(node: fx.Node, op: str) -> tuple[int, int] | None:
    """The codes a clamp with integer bounds keeps of a folded int8 domain (QuantizedClampActivationPass's)."""
    qout = (node.meta.get("output_qparams") or {}).get(0)
    if not (node.meta.get("input_qparams") or {}) or qout is None or op not in ("clamp", "clamp_"):
        return None
    given = [*node.args[1:3], None, None][:2]
    given = [node.kwargs.get(k, g) for k, g in zip(("min", "max"), given, strict=True)]
    if not all(g is None or isinstance(g, int) for g in given):
        return None
    lo, hi = (int(qout.qmin) if given[0] is None else given[0]), (int(qout.qmax) if given[1] is None else given[1])
    return (max(lo, int(qout.qmin)), min(hi, int(qout.qmax))) if lo <= hi else None


def _relu_bounds(lo: Any, hi: Any, d: Domain) -> tuple[float | None, float | None] | None:
    """The real bounds of clamp codes [lo, hi] of `d` that are a relu's (none, or real 0; no upper), else None."""
    if lo not in (None, d.qmin, d.zero_point) or hi not in (None, d.qmax):
        return None
    return (0.0 if lo == d.zero_point else None), None


def _names(node: fx.Node) -> frozenset[str]:
    """`node`'s name and those of the nodes it was made from (its provenance chain)."""
    out, sources = {node.name}, node.meta.get("from_node") or []
    while sources:
        out.add(sources[-1].name)
        sources = sources[-1].from_node
    return frozenset(out)


def _origin(node: fx.Node, names: set[str]) -> str | None:
    """The node of the program before the passes that `node` was made from (its provenance chain)."""
    sources = node.meta.get("from_node") or []
    while sources:
        if sources[-1].name in names:
            return sources[-1].name
        sources = sources[-1].from_node
    return None


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= RATIO_TOLERANCE * max(abs(a), abs(b))


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

    linears, adds, pads, clamps = [], [], [], []
    activations: dict[str, list[tuple[float, int]]] = {"hardsigmoid": [], "hardswish": []}
    for n in ep.graph.nodes:
        op = base_name(target_name(n)) if n.op == "call_function" else ""
        if (padded := _padded(n, op)) is not None:
            pads.append(padded)
        if op in _CLAMPS and (bounds := _real_bounds(n, op)) is not None:
            clamps.append((_names(n), bounds))
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
    )


def _padded(n: fx.Node, op: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(input shape, padded shape) of a pad the passes make a `cortex_m.pad` of (a constant pad, an
    avg_pool2d's padding: count_include_pad, so the pass pads H and W by it), logical NCHW order."""
    if op not in _PADS or (shapes := _shapes(n.args[0], n)) is None:
        return None
    in_shape, out_shape = shapes
    if op == "avg_pool2d":
        ph, pw = (list(n.args[3] if len(n.args) > 3 else [0]) * 2)[:2]
        out_shape = (*in_shape[:-2], in_shape[-2] + 2 * ph, in_shape[-1] + 2 * pw)
    return in_shape, out_shape


#: Ops before the passes that they lower to a `cortex_m.pad` (aten.pad stays aten.pad in an exported program).
_PADS = {"constant_pad_nd", "pad", "avg_pool2d"}


def _shapes(src: Any, node: fx.Node) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(input shape, output shape) of `node` as its fake tensors say (logical, NCHW order)."""
    a, b = (x.meta.get("val") if isinstance(x, fx.Node) else None for x in (src, node))
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return None
    sa, sb = static_shape(a), static_shape(b)
    return (sa, sb) if sa is not None and sb is not None else None


def read_node(dg: DomainGraph, node: fx.Node, consts: Consts, reference: Reference | PassRun | None) -> bool:
    """Read `node` if it is a kernel this backend emits (True), else leave it (False). `reference`:
    after the passes, what the program they were given declares; before them, their measured run."""
    name = target_name(node)
    op = base_name(name)
    if name.startswith("cortex_m.") and op in _READERS:
        _READERS[op](_Kernel(dg, node, consts, reference))
        return True
    if name.startswith("cortex_m.") and op == "minimum" and any(_hardswish_clamp_of(u) is node for u in node.users):
        _hardswish_clamp(_Kernel(dg, node, consts, reference))
        return True
    if op in _CLAMPS and not name.startswith("cortex_m."):
        _activation_left_on_codes(dg, node, op, reference)  # (an obligation; the node is read as usual)
    if op in _PADS and isinstance(reference, PassRun) and _marked(node):
        _pad_as_lowered(dg, node, op, reference)  # (an obligation; the node is read as usual)
    if op == "clamp" and node.meta.get("output_qparams"):
        _clamp(_Kernel(dg, node, consts, reference))
        return True
    if op in _COMPARISONS and _comparison(dg, node):
        return True
    if op in _NEEDS_KERNEL and node.meta.get("input_qparams"):
        _left_on_codes(dg, node, op)  # (an obligation; the node is read as usual)
    return _float_op(dg, node)


def _left_on_codes(dg: DomainGraph, node: fx.Node, op: str) -> None:
    """A folded op the passes did not make a kernel: AtenToCortexMPass skips one without its own
    output_qparams (an activation annotated with it that ActivationFusionPass declined), and the
    portable kernel then computes it on the codes as if they were reals (measured: sub → relu into a
    shared domain, 102 output LSB; a linear's int32 codes are refused when it runs)."""
    dg.oblige(
        Obligation(ObligationKind.STRUCTURAL, node.name, node.name, finding_kind="domain-mismatch", holds=False,
                   arg=op, detail=(f"{node.name} ({op}) has its inputs' dequantizes folded into it (input_qparams) "
                                   "but is no cortex_m kernel: the portable kernel computes it on the codes as if "
                                   "they were real numbers."))
    )  # fmt: skip


def _float_op(dg: DomainGraph, node: fx.Node) -> bool:
    """After the passes, an aten op they left between a `cortex_m` dequantize and quantize (not
    folded: no ``input_qparams``) runs on the portable kernels in float, whatever it is: a domain
    change across it is an ordinary requantize (measured: relu6's hardtanh, exact)."""
    ins = node.all_input_nodes
    if target_name(node).startswith("cortex_m.") or node.meta.get("input_qparams") or node.meta.get("output_qparams"):
        return False
    if not any(target_name(a).startswith("cortex_m.dequantize") for a in ins) or not all(map(is_float, ins)):
        return False
    dg.add_value(_node_value(node, float_fact(), classify(base_name(target_name(node)))))
    for i, a in enumerate(node.args):
        if isinstance(a, fx.Node) and a.name in dg.g:
            dg.add_use(a.name, node.name, f"args[{i}]")
            if not dg.value(a.name).definition.domain_free:
                dg.oblige(Obligation(ObligationKind.USE, node=node.name, value=a.name, expected=FLOAT,
                                     expected_real=True, edge=(a.name, node.name), arg=f"args[{i}]"))  # fmt: skip
    return True


def _node_value(node: fx.Node, d: Definition, cls: OpClass = OpClass.COMPUTE) -> Value:
    """`node`'s value, located as the FX reader locates every node (its module path and source)."""
    val = node.meta.get("val")
    dt = dtype_name(val.dtype) if isinstance(val, torch.Tensor) else None
    where = {"stack_trace": node.meta.get("stack_trace"), "module_path": module_path(node)}
    return Value(node.name, target_name(node), cls, d, dtype=dt, numel=numel_of(val), **where)


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
    lo, hi = args[:2]
    if not all(b is None or isinstance(b, (int, float)) for b in (lo, hi)):
        return None
    return (None if lo is None else float(lo)), (None if hi is None else float(hi))


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
    if len(users) != 1 or (d_in := _read_as(dq, dq)) is None or d_out is None:
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


def _code_of(d: Domain, v: float) -> int:
    """The code a real number quantizes to in `d` (rounding half up, clamped: quantize_val's)."""
    return max(d.qmin, min(d.qmax, math.floor(v / float(d.scale) + 0.5) + int(d.zero_point)))  # type: ignore[arg-type]


def _fuses(bounds: tuple[float | None, float | None], d: Domain) -> bool:
    """Do the bounds span the domain's whole code range (ActivationFusionPass's precondition)?"""
    lo, hi = bounds
    return (lo is None or _code_of(d, lo) == d.qmin) and (hi is None or _code_of(d, hi) == d.qmax)


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
            return (d.qmin if lo is None else _code_of(d, lo)), (d.qmax if hi is None else _code_of(d, hi))
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
        if (codes := _code_bounds(p, op)) is not None and max(codes[0], d.qmin) <= min(codes[1], d.qmax):
            return max(codes[0], d.qmin), min(codes[1], d.qmax)
        ins = p.all_input_nodes
        if classify(op) is not OpClass.PASSTHROUGH or len(ins) != 1:
            break
        p = ins[0]
    return d.qmin, d.qmax


def _read_as_quantized(node: fx.Node) -> Domain | None:
    """The domain of the one quantize reading `node` (None: not exactly one)."""
    qs = [u for u in node.users if "quantize_per_tensor" in target_name(u) and "dequant" not in target_name(u)]
    return _qdq_domain(qs[0]) if len(qs) == 1 else None


def _qdq_domain(node: fx.Node) -> Domain | None:
    """The domain a per-tensor quantize / dequantize names in its arguments."""
    if len(node.args) < 6:
        return None
    scale, zp, qmin, qmax, dtype = node.args[1:6]
    return Domain.quantized(dtype_name(dtype), float(scale), int(zp), int(qmin), int(qmax))  # type: ignore[arg-type]


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
        return _read_as(a, a)
    return None


def _comparison(dg: DomainGraph, node: fx.Node) -> bool:
    """A comparison the passes fold onto codes: no kernel lowers it, so the portable kernel compares
    the codes themselves — with the threshold as written (a real number), or with the other operand's
    codes. Measured (tests/contracts/, cortex-m): `where(x > 0, x, y)` 122 output LSB off."""
    domains = [_codes_read(node, i) for i in range(2)]
    if domains == [None, None]:
        return False  # (on reals: a float comparison)
    dg.add_value(_node_value(node, Definition(DefKind.FREE, reason="domain-free bool tensor")))
    for a in node.all_input_nodes:
        if a.name in dg.g:
            dg.add_use(a.name, node.name, "args")
    op = base_name(target_name(node))
    other = node.args[1] if len(node.args) > 1 else None
    d = domains[0] or domains[1]
    assert d is not None
    if isinstance(other, fx.Node):
        holds = domains[0] is not None and domains[0] == domains[1]
        detail = f"compares codes of {domains[0] or 'reals'} with codes of {domains[1] or 'reals'}"
    else:
        holds, detail = _threshold(_COMPARISONS[op], d, float(other))  # type: ignore[arg-type]
    dg.oblige(
        Obligation(ObligationKind.STRUCTURAL, node.name, node.name, finding_kind="real-constant-on-codes",
                   holds=holds, arg=op, detail=f"{node.name} ({op}) {detail}.")
    )  # fmt: skip
    return True


def _threshold(compare: Any, d: Domain, c: float) -> tuple[bool, str]:
    """Does comparing codes with `c` as written give the real comparison, on every code of `d`?"""
    codes = torch.arange(d.qmin, d.qmax + 1, dtype=torch.int32)
    reals = (codes - int(d.zero_point)).to(torch.float32) * float(d.scale)  # type: ignore[arg-type]
    wrong = codes[compare(codes.to(torch.float32), c) != compare(reals, c)]
    if not len(wrong):
        return True, f"compares codes of {d} with {c:g}: the same mask as the reals on every code"
    q = int(wrong[0])
    return False, (
        f"compares codes of {d} with {c:g} as written: the mask differs from the real comparison on "
        f"{len(wrong)} of {len(codes)} codes (code {q}, real {(q - int(d.zero_point)) * float(d.scale):.4g})"  # type: ignore[arg-type]
    )


class _Kernel:
    """One kernel node: its declared domains, and the obligations it adds."""

    def __init__(self, dg: DomainGraph, node: fx.Node, consts: Consts, reference: Reference | None) -> None:
        self.dg, self.node, self.name = dg, node, node.name
        self.consts, self.reference = consts, reference
        qin, qout = node.meta.get("input_qparams") or {}, node.meta.get("output_qparams") or {}
        self.ins = {i: quant_args_domain(q, node) for i, q in qin.items()}
        self.out = quant_args_domain(qout[0], node) if 0 in qout else None

    def arg(self, i: int) -> Any:
        return self.node.args[i] if i < len(self.node.args) else self.node.kwargs.get(str(i))

    def value(self, copies: fx.Node | None = None, fused: Domain | None = None) -> None:
        """The kernel's output: a fact in its declared domain (or the codes of `copies`, or the
        domain `fused` its consumers read after the passes fused an activation into it)."""
        if copies is not None and copies.name in self.dg.g:
            why = f"{base_name(target_name(self.node))} copies codes"
            d = Definition(DefKind.ALIAS, sources=(copies.name,), reason=why)
            self.dg.add_value(_node_value(self.node, d, OpClass.PASSTHROUGH))
            self.dg.add_use(copies.name, self.name, "args[0]")  # (the codes it copies: `impact` follows them)
            return
        if self.out is not None:
            d = Definition(DefKind.FACT, fused or self._fused_hardsigmoid() or self.out)
        else:
            d = Definition(DefKind.FREE, blocking=True, reason=f"{self.name} has no output_qparams to check it against")
        self.dg.add_value(_node_value(self.node, d))

    def _fused_hardsigmoid(self) -> Domain | None:
        """The domain its consumers read when the passes fused a hardsigmoid into this kernel
        (ActivationFusionPass: hardsigmoid(x) = clamp(x / 6 + 1/2, 0, 1) is a requantize into
        scale 6·s and zero point z + round(1 / 2s) when the hardsigmoid's output domain (s, z)
        maps 0 and 1 to the code range's ends), else None. The fused node is gone, so that it
        was a hardsigmoid is checked against the program it came from; unproven without it."""
        out, users = self.out, list(self.node.users)
        seen = {_read_as(u, self.node) for u in users}
        if out is None or out.per_channel or len(seen) != 1 or None in seen:
            return None
        (d,) = seen
        s, z = float(d.scale), int(d.zero_point)  # type: ignore[arg-type]
        fused_zp = max(d.qmin, min(d.qmax, z + round(1 / (2 * s))))
        if d == out or not (_close(float(out.scale), 6 * s) and out.zero_point == fused_zp):  # type: ignore[arg-type]
            return None
        # (only then is hardsigmoid's own clamp to [0, 1] the requantize's clamp to the code range)
        ends = z <= d.qmin and z + 1 / s >= d.qmax - 0.5
        self.check("fused hardsigmoid range", ends, f"{d} maps real 0 to code {z} and 1 to {z + 1 / s:.1f}: "
                   f"the fused requantize clamps to [{d.qmin}, {d.qmax}], which must be those ends")  # fmt: skip
        if self.reference is None:
            self.unproven(f"its consumers read its codes in {d}: a hardsigmoid the passes fused into its output "
                          "domain, which only the program it came from states (pass it: reference=)")  # fmt: skip
        else:
            found = any(_close(hs, s) and hz == z for hs, hz in self.reference.hardsigmoids)
            self.check("fused hardsigmoid", found, f"its consumers read its codes in {d}, a hardsigmoid fused into "
                       f"its output domain {out}; the program it came from has {'one' if found else 'no'} "
                       "hardsigmoid with that output domain")  # fmt: skip
        return d

    def reads(self, arg: int, declared: int, domain: Domain | None = None) -> Domain | None:
        """Input `arg` must be in the declared domain `declared` (or `domain`); returns that domain."""
        src, d = self.arg(arg), domain or self.ins.get(declared)
        if not isinstance(src, fx.Node) or src.name not in self.dg.g:
            return d
        v = self.dg.value(src.name)
        if d is not None and not v.definition.domain_free:
            self.dg.add_use(src.name, self.name, f"args[{arg}]")
            self.dg.oblige(
                Obligation(ObligationKind.USE, node=self.name, value=src.name, expected=d, expected_real=False,
                           edge=(src.name, self.name), arg=f"args[{arg}]")
            )  # fmt: skip
        return d

    def constant(self, arg: int, d: Domain | None) -> None:
        """Input `arg` as a value of its own when it is a constant tensor of codes in `d` (the passes
        fold a constant operand into a buffer): `ranges` reads its real values."""
        src = self.arg(arg)
        codes = self.consts.tensor(src) if isinstance(src, fx.Node) else None
        if codes is None or not codes.numel() or d is None or domain_range(d) is None or codes.is_floating_point():
            return
        real = (codes.double() - int(d.zero_point)) * d.scale  # type: ignore[arg-type, operator]
        free = Definition(DefKind.FREE, reason="a constant")
        held = self.dg.get(src.name) or _node_value(src, free, OpClass.CONSTANT)
        self.dg.add_value(replace(held, values=(float(real.min()), float(real.max()))))
        self.dg.add_use(src.name, self.name, f"args[{arg}]")

    def stands_for(self, op: str, operands: tuple[str, ...]) -> None:
        """The kernel computes `op` of its operands (edge labels, in `op`'s order), each read in its
        declared domain, rounded into its output's: `ranges` bounds it as that op."""
        if self.name in self.dg.g:
            self.dg.add_value(replace(self.dg.value(self.name), stands_for=op, operands=operands))

    def check(self, what: str, holds: bool, detail: str) -> None:
        self.dg.oblige(
            Obligation(ObligationKind.STRUCTURAL, self.name, self.name, finding_kind=KIND, holds=holds,
                       arg=what, detail=f"{self.name} {what}: {detail}.")
        )  # fmt: skip

    def gains(self, g: float | None) -> None:
        """How much the kernel can amplify an error on its inputs, in the infinity norm (`Value.gain`:
        `impact` follows a wrong code through it to the outputs; None: it cannot)."""
        if g is not None and math.isfinite(g) and self.name in self.dg.g:
            self.dg.add_value(replace(self.dg.value(self.name), gain=g))

    def magnitude(self, arg: int, d: Domain | None) -> float | None:
        """The largest real magnitude input `arg` can hold: a constant's own codes, else its domain's range."""
        held = domain_range(d)
        if d is None or held is None:
            return None
        src = self.arg(arg)
        codes = self.consts.tensor(src) if isinstance(src, fx.Node) else None
        if codes is not None and codes.numel():
            return float((codes.double() - int(d.zero_point)).abs().max()) * d.scale  # type: ignore[arg-type, operator]
        return max(abs(held[0]), abs(held[1]))

    def weight_sum(self, arg: int, w: Domain | None) -> float | None:
        """A weighted kernel's gain: the largest sum of absolute real weights one output reads. Both the
        first and the last dimension are taken as the output channel (OHWI or IHWO weights, a linear's
        either way), and the largest scale for every channel: an upper bound whatever the layout."""
        src = self.arg(arg)
        codes = self.consts.tensor(src) if isinstance(src, fx.Node) else None
        if w is None or codes is None or codes.dim() < 2:
            return None
        zps = w.zero_point if w.per_channel else [w.zero_point]
        scales = w.scale if w.per_channel else [w.scale]
        if any(z != 0 for z in zps):  # type: ignore[union-attr]
            return None
        a = codes.double().abs()
        sums = max(float(a.flatten(1).sum(1).max()), float(a.flatten(0, -2).sum(0).max()))
        return sums * max(float(x) for x in scales)  # type: ignore[union-attr]

    def keeps_domain(self) -> None:
        """A kernel that copies codes: the output domain the fold recorded on it must be its input's."""
        d = self.ins.get(0)
        if d is not None and self.out is not None and d != self.out:
            self.check("output domain", False, f"the kernel copies codes of {d}; the program declares {self.out}")

    def zero_point(self, what: str, got: int, d: Domain | None, sign: int = 1) -> None:
        if d is None:
            return self.unproven(f"{what} has no declared domain", needs_reference=False)
        want = sign * int(d.zero_point)  # type: ignore[arg-type]
        self.check(what, got == want, f"is {got}; the declared domain {d} needs {want}")

    def ratio_is(self, what: str, got: float, want: float) -> None:
        holds = math.isfinite(want) and want > 0 and abs(got - want) <= RATIO_TOLERANCE * want
        self.check(what, holds, f"realises the scale ratio {got:.9g}; the declared domains need {want:.9g}")

    def bounds(self, lo: int, hi: int) -> None:
        """Activation bounds: the output domain's code range, else a fused activation the
        program after the passes does not record (unproven until checked against the program)."""
        d = self.out
        if d is not None and (lo, hi) == (d.qmin, d.qmax):
            return self.check("activation bounds", True, f"[{lo}, {hi}] is the output's code range")
        if d is not None and (lo > hi or lo < d.qmin or hi > d.qmax):
            return self.check("activation bounds", False, f"[{lo}, {hi}] is not within the output's codes {d}")
        self.unproven(f"activation bounds [{lo}, {hi}] cut into the output's code range: a fused activation "
                      "the program after the passes does not record")  # fmt: skip

    def unproven(self, why: str, needs_reference: bool = True) -> None:
        """What the program after the passes does not state (a fused activation, a pad constant,
        a bias) is unproven: the program it came from states it."""
        blocker = f"{self.name}?{len(self.dg.obligations)}"
        kind = "reference-needed" if needs_reference else None
        d = Definition(DefKind.FREE, blocking=True, reason=f"{self.name}: {why}", blocks_as=kind)
        self.dg.add_value(Value(blocker, target_name(self.node), OpClass.UNKNOWN, d))
        self.dg.oblige(
            Obligation(ObligationKind.USE, node=self.name, value=blocker, expected=FLOAT, expected_real=True,
                       arg="its arguments")
        )  # fmt: skip


def _read_as(user: fx.Node, node: fx.Node) -> Domain | None:
    """The domain `user` reads `node`'s codes in: a per-tensor dequantize's arguments, a kernel's
    ``input_qparams`` (indexed by tensor argument); None when it does not say."""
    if "dequantize_per_tensor" in target_name(user):
        return _qdq_domain(user)
    tensors = [a for a in user.args if isinstance(a, fx.Node)]
    qin = user.meta.get("input_qparams") or {}
    if tensors.count(node) != 1 or tensors.index(node) not in qin:
        return None
    return quant_args_domain(qin[tensors.index(node)], user)


def _scale(d: Domain | None) -> float:
    return float(d.scale) if d is not None and not d.per_channel else math.nan  # type: ignore[arg-type]


def _add(k: _Kernel) -> None:
    k.constant(0, k.ins.get(0))
    k.constant(4, k.ins.get(1))
    a, b = k.reads(0, 0), k.reads(4, 1)
    k.value()
    zp_a, m_a, sh_a, zp_b, m_b, sh_b, zp_o, m_o, sh_o, lo, hi = (k.arg(i) for i in (1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12))
    k.zero_point("self_zero_point", zp_a, a)
    k.zero_point("other_zero_point", zp_b, b)
    k.zero_point("output_zero_point", zp_o, k.out)
    out = ratio(m_o, sh_o) * 2**_SHIFT_INT8
    k.ratio_is("self_multiplier/shift", ratio(m_a, sh_a) * out, _scale(a) / _scale(k.out))
    got_b, want_b = ratio(m_b, sh_b) * out, _scale(b) / _scale(k.out)
    coefficient = _add_coefficient(k, (_scale(a), _scale(b), _scale(k.out)), got_b / want_b)
    if coefficient is not None:
        k.ratio_is("other_multiplier/shift", got_b / coefficient, want_b)
        k.gains(max(1.0, abs(coefficient)))
        if coefficient in (1, -1):
            k.stands_for("add" if coefficient == 1 else "sub", ("args[0]", "args[4]"))
    k.bounds(lo, hi)


def _add_coefficient(k: _Kernel, scales: tuple[float, float, float], realised: float) -> int | None:
    """The coefficient the passes folded into the second input's multiplier: the add's alpha
    (−alpha for a sub), which only the program before the passes states. Without it, a realised
    ratio that is an integer multiple other than 1 (a sub's −1, an alpha) is unproven, not an
    error; any other ratio is checked as coefficient 1."""
    if k.reference is not None and (found := k.reference.add_coefficient(scales)) is not None:
        return found
    whole = round(realised) if math.isfinite(realised) else 0
    if whole in (0, 1) or not _close(realised, whole):
        return 1
    why = "no add of the program it came from has these domains" if k.reference else "pass it (reference=)"
    k.unproven(f"other_multiplier/shift realises {whole} x the declared scale ratio: an alpha or a sub the passes "
               f"folded into it, which only the program it came from states ({why})")  # fmt: skip
    return None


def _mul(k: _Kernel) -> None:
    clamp = _hardswish_clamp_of(k.node)
    if clamp is None:
        k.constant(0, k.ins.get(0))
        k.constant(2, k.ins.get(1))
        a, b = k.reads(0, 0), k.reads(2, 1)
        k.value()
        k.stands_for("mul", ("args[0]", "args[2]"))
        ma, mb = k.magnitude(0, a), k.magnitude(2, b)
        if ma is not None and mb is not None:  # (|ab - a'b'| <= M (e_a + e_b) + e_a e_b, each e <= 2 M)
            k.gains(3 * max(ma, mb))
    else:
        a, b = _hardswish(k, clamp)
    k.zero_point("self_zero_point", k.arg(1), a)
    k.zero_point("other_zero_point", k.arg(3), b)
    k.zero_point("output_zero_point", k.arg(4), k.out)
    k.ratio_is("output_multiplier/shift", ratio(k.arg(5), k.arg(6)), _scale(a) * _scale(b) / _scale(k.out))


#: The functions `quantized_activation`'s LUT may tabulate (AtenToCortexMPass), in double precision.
_LUT_FUNCTIONS: dict[str, Any] = {
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu,
    "log": torch.log, "log2": torch.log2, "log10": torch.log10, "log1p": torch.log1p, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
}  # fmt: skip


def _activation(k: _Kernel) -> None:
    """A 256-entry LUT indexed by the input code + 128: entry q must be the activation of q read in the
    input's declared domain, quantized into the output's (round half away from zero, clamped; a pole
    to the rail). Entries whose real input lies outside the function's domain (log, sqrt of a
    negative) are not checked: the fake-quantized program has no number there either."""
    d = k.reads(0, 0)
    k.value()
    original = k.node.meta.get("original_aten")
    fn = _LUT_FUNCTIONS.get(base_name(str(original))) if original is not None else None
    k.gains(LIPSCHITZ.get(base_name(str(original))) if original is not None else None)
    lut = k.consts.tensor(k.arg(1)) if isinstance(k.arg(1), fx.Node) else None
    if d is None or k.out is None or fn is None or lut is None or d.per_channel or k.out.per_channel:
        return k.unproven("a LUT whose function or domains the program after the passes does not record")
    codes = torch.arange(-128, 128, dtype=torch.float64)
    with torch.no_grad():
        y = fn((codes - int(d.zero_point)) * float(d.scale))  # type: ignore[arg-type]
    scaled = y / float(k.out.scale) + int(k.out.zero_point)  # type: ignore[arg-type]
    want = (torch.sign(scaled) * torch.floor(scaled.abs() + 0.5)).nan_to_num(posinf=127, neginf=-128)
    want = want.clamp(k.out.qmin, k.out.qmax)
    got = lut.flatten().to(torch.float64)
    tie = ((scaled.abs() - scaled.abs().floor()) - 0.5).abs() < 1e-6  # (float error may round either way)
    bad = ~scaled.isnan() & (got != want) & ~(tie & ((got - want).abs() <= 1))
    name = base_name(str(original))
    if not bad.any():
        if k.name in k.dg.g:  # (its output: the function's over its input's reals, rounded)
            k.dg.add_value(replace(k.dg.value(k.name), stands_for=name))
        return k.check("LUT", True, f"tabulates {name} from {d} into {k.out}")
    q = int(bad.nonzero()[0])
    k.check("LUT", False, f"{int(bad.sum())} of 256 entries are not {name} from {d} into {k.out} (code {q - 128}: "
            f"the LUT gives {int(got[q])}, the domains need {int(want[q])})")  # fmt: skip


def _batch_matmul(k: _Kernel) -> None:
    """lhs @ rhs of codes offset by the negated zero points, requantized by s_lhs · s_rhs / s_out; the
    rhs is read transposed (a `cortex_m.transpose` of it, or a constant the passes transposed)."""
    a, b = k.reads(0, 0), k.reads(2, 1)
    k.value()
    k.zero_point("lhs_zero_point", k.arg(1), a, sign=-1)
    k.zero_point("rhs_zero_point", k.arg(3), b, sign=-1)
    k.zero_point("output_zero_point", k.arg(4), k.out)
    k.ratio_is("output_multiplier/shift", ratio(k.arg(5), k.arg(6)), _scale(a) * _scale(b) / _scale(k.out))


def _hardswish_clamp_of(mul: fx.Node) -> fx.Node | None:
    """DecomposeHardswishPass writes hardswish(x) as mul(x, minimum(x, code of 3)) with the +3 and
    the /6 in the mul's domains: the minimum, when `mul` is that."""
    m = mul.args[2] if len(mul.args) > 2 else None
    if isinstance(m, fx.Node) and target_name(m).startswith("cortex_m.") and base_name(target_name(m)) == "minimum":
        return m if m.args and m.args[0] is mul.args[0] else None
    return None


def _hardswish_clamp(k: _Kernel) -> None:
    """The minimum of a decomposed hardswish: min(x, 3) on x's codes, in x's domain (the node's
    input_qparams are a copy of x's producer's, not x's domain)."""
    d = k.out
    k.reads(0, 0, domain=d)
    k.value()
    three = k.consts.tensor(k.arg(1)) if isinstance(k.arg(1), fx.Node) else None
    if d is None or d.per_channel or three is None or three.numel() != 1:
        return k.unproven("its clamp constant or domain is not readable", needs_reference=False)
    want = max(d.qmin, min(d.qmax, round(3 / float(d.scale)) + int(d.zero_point)))  # type: ignore[arg-type]
    got = int(three.item())
    k.check("hardswish clamp", got == want, f"clamps at code {got}; 3 is code {want} in {d}")


def _hardswish(k: _Kernel, clamp: fx.Node) -> tuple[Domain | None, Domain | None]:
    """hardswish(x) = x · (min(x, 3) + 3) / 6 for x ≥ −3 (ClampHardswishPass quantizes x's
    producer from −3 up): the mul reads min(x, 3) in x's scale with the zero point moved by
    round(3 / s) (the +3), and writes into 6× the scale its consumers read (the /6). That the
    program had a hardswish there is checked against the program it came from."""
    a = k.reads(0, 0)
    b, m = k.ins.get(1), k.dg.value(clamp.name).definition.domain if clamp.name in k.dg.g else None
    if a is None or b is None or m is None or a.per_channel or b.per_channel:
        k.value()
        k.unproven("a decomposed hardswish whose domains are not readable", needs_reference=False)
        return a, b
    s, z = float(a.scale), int(a.zero_point)  # type: ignore[arg-type]
    k.reads(2, 1, domain=m)
    k.check("hardswish +3", m == a and _close(float(b.scale), s) and b.zero_point == z - round(3 / s),
            f"reads min(x, 3) in {b}; x + 3 in x's domain {a} is zero point {z - round(3 / s)}")  # fmt: skip
    k.check("hardswish domain", (a.qmin - z) * s >= -3 - s, f"x's domain {a} reaches {(a.qmin - z) * s:.4g}, and "
            "the decomposition holds for x ≥ -3 only")  # fmt: skip
    seen = {_read_as(u, k.node) for u in k.node.users}
    out, d = k.out, next(iter(seen)) if len(seen) == 1 else None
    sixth = d is not None and out is not None and _close(float(out.scale), 6 * float(d.scale))  # type: ignore[arg-type]
    if not sixth or out.zero_point != d.zero_point:  # type: ignore[union-attr]
        k.value()
        return a, b
    k.value(fused=d)
    if k.reference is None:
        k.unproven(f"a hardswish the passes decomposed (its consumers read {d}), which only the program it came "
                   "from states (pass it: reference=)")  # fmt: skip
    else:
        found = any(_close(hs, float(d.scale)) and hz == d.zero_point for hs, hz in k.reference.hardswishes)  # type: ignore[arg-type]
        k.check("decomposed hardswish", found, f"the program it came from has {'a' if found else 'no'} hardswish "
                f"with output domain {d}")  # fmt: skip
    return a, b


def _linear(k: _Kernel) -> None:
    x, w = k.reads(0, 0), k.ins.get(1)
    k.value()
    kernel_sum = k.arg(3)
    if kernel_sum is None:  # DSP / scalar: offsets and bias are read
        k.zero_point("input_offset", k.arg(4), x, sign=-1)
    k.zero_point("filter_offset", k.arg(5), w, sign=-1)
    k.zero_point("output_offset", k.arg(6), k.out)
    mults, shifts = k.arg(7), k.arg(8)
    if not isinstance(mults, Sequence) or len(mults) != 1 or w is None or w.per_channel:
        k.unproven("per-channel requantization is not read yet", needs_reference=False)
    else:
        k.ratio_is("requantize_multipliers/shifts", ratio(mults[0], shifts[0]), _scale(x) * _scale(w) / _scale(k.out))
    k.bounds(k.arg(10), k.arg(9))
    _bias(k, x, w, kernel_sum)
    k.gains(k.weight_sum(1, w))


def _channels(d: Domain | None, n: int) -> list[float]:
    """A domain's scale per channel (a per-tensor one repeated)."""
    if d is None:
        return [math.nan] * n
    return [float(s) for s in d.scale] if d.per_channel else [float(d.scale)] * n  # type: ignore[union-attr]


def _conv2d(k: _Kernel, at: int = 6) -> None:
    """`at`: the position of input_offset (the depthwise kernel has depth_multiplier before it)."""
    x, w, b = k.reads(0, 0), k.ins.get(1), k.ins.get(2)
    k.value()
    k.gains(k.weight_sum(1, w))  # (a transposed conv's output sums at most its kernel's weights too)
    k.zero_point("input_offset", k.arg(at), x, sign=-1)
    k.zero_point("output_offset", k.arg(at + 1), k.out)
    k.bounds(k.arg(at + 4), k.arg(at + 5))
    mults, shifts = (k.consts.tensor(a) if isinstance(a, fx.Node) else None for a in (k.arg(at + 2), k.arg(at + 3)))
    if w is None or x is None or mults is None or shifts is None:
        return k.unproven(
            "its weight domain or requantize multipliers / shifts are not readable", needs_reference=False
        )
    zps = list(w.zero_point) if w.per_channel else [w.zero_point]  # type: ignore[arg-type]
    k.check("weight zero point", all(z == 0 for z in zps), f"the kernel reads weights with no offset; declared {w}")
    n = len(mults)
    want = [_scale(x) * sw / _scale(k.out) for sw in _channels(w, n)]
    got = [ratio(int(m), int(s)) for m, s in zip(mults.tolist(), shifts.tolist(), strict=True)]
    worst = max(range(n), key=lambda c: abs(got[c] - want[c]) / want[c] if want[c] > 0 else math.inf)
    k.ratio_is(f"requantize_multipliers/shifts[{worst}] (worst of {n} channels)", got[worst], want[worst])
    if k.arg(2) is not None and b is None:
        bias = k.consts.tensor(k.arg(2)) if isinstance(k.arg(2), fx.Node) else None
        if bias is not None and not bool(bias.any()):  # (synthesized for a bias-free grouped / depthwise conv)
            k.check("bias domain", True, "the bias has no declared domain, and it is all zeros: zero in any domain")
        else:
            k.unproven("its bias has no declared domain (input_qparams[2])", needs_reference=False)
    elif k.arg(2) is not None:
        acc = [_scale(x) * sw for sw in _channels(w, n)]
        have = _channels(b, n)
        holds = all(z == 0 for z in (b.zero_point if b.per_channel else [b.zero_point]))  # type: ignore[union-attr]
        holds = holds and all(abs(h - a) <= RATIO_TOLERANCE * a for h, a in zip(have, acc, strict=True))
        k.check("bias domain", holds, f"the accumulator is s_in · s_w per channel; the bias is declared in {b}")


def _bias(k: _Kernel, x: Domain | None, w: Domain | None, kernel_sum: Any) -> None:
    """The bias is a constant only the program before the passes states. On MVE it is folded
    with the offsets into kernel_sum = bias + input_offset · Σw + input_offset · filter_offset · K
    (the reference kernel adds filter_offset · Σx at run time); elsewhere the bias is read."""
    weights = k.arg(1)
    w_codes = k.consts.tensor(weights) if isinstance(weights, fx.Node) else None
    ref = k.reference.linear(w_codes) if k.reference is not None and w_codes is not None else None
    if ref is None:
        why = (
            "no linear of the program it came from has these weight codes"
            if k.reference
            else ("pass the program it came from (reference=)")
        )
        return k.unproven(f"its bias{' / kernel_sum' if kernel_sum is not None else ''} values need the program "
                          f"it came from to check: {why}")  # fmt: skip
    if x is None or w is None:
        return k.unproven("its input or weight has no declared domain", needs_reference=False)
    rows = w_codes.to(torch.int64)
    zeros = torch.zeros(rows.shape[0], dtype=torch.int64)
    want = ref.bias.to(torch.int64).reshape(-1) if ref.bias is not None else zeros
    if kernel_sum is not None:
        io, fo = -int(x.zero_point), -int(w.zero_point)  # type: ignore[arg-type]
        want = want + io * rows.sum(dim=1) + io * fo * rows.shape[1]
        got, what = k.consts.tensor(kernel_sum), "kernel_sum"
    else:
        bias, what = k.arg(2), "bias"
        got = zeros if bias is None else k.consts.tensor(bias) if isinstance(bias, fx.Node) else None
    if got is None:
        return k.unproven(f"its {what} is not a constant qflow can read", needs_reference=False)
    got = got.to(torch.int64).reshape(-1)
    holds = got.shape == want.shape and torch.equal(got, want)
    off = int((got - want).abs().max()) if got.shape == want.shape else -1
    how = "" if holds else f" by up to {off} (accumulator codes)" if off >= 0 else f": shape {tuple(got.shape)}"
    terms = " + input_offset · Σw" if kernel_sum is not None else ""
    k.check(what, holds, f"{'equals' if holds else 'differs from'} the reference's bias{terms}{how}")


def _avg_pool2d(k: _Kernel) -> None:
    d = k.reads(0, 0)
    k.value()
    k.gains(1.0)  # (each output a mean of its inputs)
    # (its zero point and multiplier / shift dequantize and requantize with themselves: a
    # mutated one moves codes by at most one, measured — rounding, not a domain)
    if d is not None and k.out is not None and d != k.out:
        k.check("output domain", False, f"the kernel keeps the codes' domain {d}, the program declares {k.out}")


def _depthwise_conv2d(k: _Kernel) -> None:
    """A conv2d whose weights are IHWO, one output channel per input channel × depth_multiplier."""
    _conv2d(k, at=7)


def _transpose_conv2d(k: _Kernel) -> None:
    """As `quantized_conv2d` (OHWI weights; stride, padding, output_padding, dilation before the offsets)."""
    _conv2d(k, at=7)


def _div(k: _Kernel) -> None:
    """(a − zp_a) / (b − zp_b) in float, times output_scale = s_a / (s_b · s_out), plus the output zero
    point. A divisor code at its zero point (real 0) gives the output zero point, where the program's
    quantize of ±inf gives a rail: unproven, unless that code cannot occur (not known here)."""
    a, b = k.reads(0, 0), k.reads(2, 1)
    k.value()
    k.zero_point("self_zero_point", k.arg(1), a)
    k.zero_point("other_zero_point", k.arg(3), b)
    k.zero_point("output_zero_point", k.arg(4), k.out)
    k.ratio_is("output_scale", float(k.arg(5)), _scale(a) / (_scale(b) * _scale(k.out)))
    k.unproven(f"a divisor code {'at its zero point' if b is None else b.zero_point} (real 0) gives the output "
               "zero point, the program a rail (±inf quantized)", needs_reference=False)  # fmt: skip


def _max_pool2d(k: _Kernel) -> None:
    """The max of codes: the kernel neither rescales nor moves a zero point (it refuses different
    input and output zero points), so the output is the input's codes in the input's domain."""
    d = k.reads(0, 0)
    k.value()
    k.gains(1.0)  # (a max moves by at most its inputs' largest error)
    k.zero_point("input_zero_point", k.arg(6), d)
    k.zero_point("output_zero_point", k.arg(7), k.out)
    # (a fused relu narrows the output's code range: the activation bounds clamp to it)
    if d is not None and k.out is not None and d.widened() != k.out.widened():
        k.check("output domain", False, f"the kernel keeps the codes' domain {d}, the program declares {k.out}")
    k.bounds(k.arg(8), k.arg(9))


#: arm_softmax_s8 writes probabilities in this domain (CMSIS-NN's fixed output), whatever is declared.
_SOFTMAX_OUT_SCALE, _SOFTMAX_OUT_ZP = 1 / 256, -128
#: Its input is read as a Q5.26 fixed-point number: the multiplier / shift carry s_in · 2^26.
_SOFTMAX_INPUT_FRACTION_BITS = 26


def _softmax(k: _Kernel) -> None:
    """softmax(input, dim, input_zero_point, output_zero_point, input_multiplier, input_shift, diff_min):
    the codes minus the input zero point times ratio(multiplier, shift) / 2^26 are the reals it takes
    the softmax of, and the result is written with scale 1/256 and the output zero point. The input
    zero point cancels (softmax is shift-invariant: measured, a mutated one moves no code), and
    `diff_min` (CMSIS-NN's cut-off for exp underflow) is not read by the reference kernels: neither
    is checked."""
    d = k.reads(0, 0)
    k.value()
    k.zero_point("output_zero_point", k.arg(3), k.out)
    if d is not None and not d.per_channel:
        got = ratio(k.arg(4), k.arg(5)) / 2**_SOFTMAX_INPUT_FRACTION_BITS
        k.ratio_is("input_multiplier/shift", got, float(d.scale))  # type: ignore[arg-type]
    if k.out is not None:
        fixed = _close(float(k.out.scale), _SOFTMAX_OUT_SCALE) and k.out.zero_point == _SOFTMAX_OUT_ZP  # type: ignore[arg-type]
        k.check("output domain", fixed, f"the kernel writes scale 1/256 zero point {_SOFTMAX_OUT_ZP}; the program "
                f"declares {k.out}")  # fmt: skip


def _pad(k: _Kernel) -> None:
    src = k.arg(0)
    k.value(copies=src if isinstance(src, fx.Node) else None)
    k.keeps_domain()
    shapes = _shapes(src, k.node)
    if k.reference is not None and shapes is not None and shapes[0] != shapes[1]:
        # (pre / post pads are in memory order for a channels-last input: written for another layout,
        # they pad other dimensions — measured, campaign case 00158-cm: C and W where H and W were meant)
        wanted = [out for inp, out in k.reference.pads if inp == shapes[0]]
        k.check("shape", shapes[1] in wanted, f"pads {list(shapes[0])} to {list(shapes[1])}; the program it "
                f"came from pads that shape to {' or '.join(map(str, map(list, wanted))) or 'nothing'}")  # fmt: skip
    pads = [*k.arg(1), *k.arg(2)]
    if any(pads) and (why := eager_layout_differs(k.node)) is not None:
        k.check("pads", False, f"in the memory order of its input's fake tensor, but {why}: run in eager, it pads "
                "other dimensions")  # fmt: skip
    if any(pads) and isinstance(src, fx.Node):
        d = k.dg.value(src.name).definition.domain if src.name in k.dg.g else None
        if d is None:
            return k.unproven("pads codes of a domain not known here", needs_reference=False)
        holds = k.arg(3) == d.zero_point
        k.check("pad_value", holds, f"is {k.arg(3)}; padding with 0.0 in {d} writes {d.zero_point}") if holds else (
            k.unproven(f"pad_value {k.arg(3)} is not the zero point {d.zero_point}: a constant the program "
                       "after the passes does not record")
        )  # fmt: skip


def _copy(k: _Kernel) -> None:
    src = k.arg(0)
    k.value(copies=src if isinstance(src, fx.Node) else None)
    k.keeps_domain()


def _clamp(k: _Kernel) -> None:
    """A relu / relu6 folded onto codes: its bounds are codes of the declared domain."""
    d = k.reads(0, 0)
    k.value()
    lo, hi = k.arg(1), k.arg(2)
    if d is not None and k.out is not None and k.out != d and not (d.per_channel or k.out.per_channel):
        return _clamp_across(k, d, k.out)
    if d is None or k.out != d:
        return k.check("domain", False, f"a clamp copies codes, but declares {d} in and {k.out} out")
    ok_lo = lo is None or lo in (d.qmin, d.zero_point)  # (none, or relu: real 0)
    ok_hi = hi is None or hi == d.qmax
    if not (ok_lo and ok_hi):
        k.unproven(f"clamp bounds [{lo}, {hi}] are not a relu's in {d}: an activation the program after the "
                   "passes does not record")  # fmt: skip
    if not d.per_channel:  # (what it computes: its codes clamped, the reals of those bounds in `d`)
        z, s = int(d.zero_point), float(d.scale)  # type: ignore[arg-type]
        real = (-math.inf if lo is None else (lo - z) * s, math.inf if hi is None else (hi - z) * s)
        k.dg.add_value(replace(k.dg.value(k.name), op_class=OpClass.ACTIVATION, clamp=real))


def _clamp_across(k: _Kernel, d: Domain, out: Domain) -> None:
    """A clamp on codes of `d` whose result the program reads in `out`: the passes dropped the requant
    across the activation it was made of, and quantized its bounds into `out`. Its codes are the input's,
    bounded by those codes: a dropped requant (`requant-across-activation`) whose result lies in them, as
    before the passes. That the bounds are the activation's, the program it came from says."""
    known = k.reference.activations if isinstance(k.reference, Reference) else ()
    made_of = [(names, bounds) for names, bounds in known if names & _names(k.node)]
    src, got = k.arg(0), _code_bounds(k.node, "clamp")
    if not isinstance(src, fx.Node) or src.name not in k.dg.g or got is None:
        return k.check("domain", False, f"a clamp copies codes, but declares {d} in and {out} out")
    relu = _relu_bounds(k.arg(1), k.arg(2), out)
    if len({bounds for _, bounds in made_of}) == 1:
        origin, (lo, hi) = min(made_of[0][0], key=len), made_of[0][1]  # (the name it was exported with)
    elif relu is not None:  # (as a clamp in one domain: a relu's bounds are known without the program)
        origin, (lo, hi) = "a relu", relu
    else:  # (weighed with its own bounds; that they are its activation's stays unproven)
        k.unproven(f"a clamp on codes of {d} whose result is read in {out}: whether its bounds are its "
                   "activation's, only the program it came from states")  # fmt: skip
        z, s = int(out.zero_point), float(out.scale)  # type: ignore[arg-type]
        origin = "its activation"
        lo = None if got[0] <= out.qmin else (got[0] - z) * s
        hi = None if got[1] >= out.qmax else (got[1] - z) * s
    want = (out.qmin if lo is None else _code_of(out, lo), out.qmax if hi is None else _code_of(out, hi))
    if got != want:
        return k.check("bounds", False, f"clamps codes to {list(got)}; {origin}'s bounds [{lo}, {hi}] are codes "
                       f"{list(want)} in {out}")  # fmt: skip
    real = (-math.inf if lo is None else lo, math.inf if hi is None else hi)
    k.dg.add_value(replace(k.dg.value(k.name), op_class=OpClass.ACTIVATION, clamp=real))
    k.dg.oblige(
        Obligation(ObligationKind.NO_FOLD_CHANGE, node=k.name, value=src.name, expected=out, edge=(src.name, k.name),
                   arg=k.name, allow_float=True, finding_kind="requant-across-activation", codes=want,
                   detail=f"the passes made {origin} a clamp of codes of {d} to {list(want)}, read in {out}")
    )  # fmt: skip


_READERS = {
    "quantized_add": _add,
    "quantized_mul": _mul,
    "quantized_batch_matmul": _batch_matmul,
    "quantized_activation": _activation,
    "quantized_transpose_conv2d": _transpose_conv2d,
    "quantized_div": _div,
    "quantized_linear": _linear,
    "quantized_conv2d": _conv2d,
    "quantized_avg_pool2d": _avg_pool2d,
    "quantized_depthwise_conv2d": _depthwise_conv2d,
    "quantized_max_pool2d": _max_pool2d,
    "pad": _pad,
    "softmax": _softmax,
    "transpose": _copy,
}
