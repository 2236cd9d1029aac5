"""What each `cortex_m::` kernel of a program after `CortexMPassManager` must hold (issue #29).

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
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.fx as fx

from qflow.domain import FLOAT, Domain
from qflow.graph import Definition, DefKind, DomainGraph, Obligation, ObligationKind, Value
from qflow.impact import LIPSCHITZ
from qflow.ir.fx_nodes import (
    Consts,
    dtype_name,
    eager_layout_differs,
    module_path,
    numel_of,
    quant_args_domain,
    scalar_operands,
    static_shape,
    target_name,
)
from qflow.ops import OpClass, base_name
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
    #: each op with a variant argument (a gelu's `approximate`): the names it goes by and its kwargs
    variants: tuple[tuple[frozenset[str], tuple[tuple[str, Any], ...]], ...] = ()

    def variant(self, node: fx.Node, argument: str) -> Any:
        """The `argument` the program before the passes gave the op `node` was made from (None: not known)."""
        found = {dict(kw).get(argument) for names, kw in self.variants if names & node_names(node)}
        return found.pop() if len(found) == 1 else None

    def linear(self, weight: torch.Tensor) -> Linear | None:
        """The one linear whose weight codes are `weight`'s (None: none, or several)."""
        hits = [lin for lin in self.linears if lin.weight.shape == weight.shape and torch.equal(lin.weight, weight)]
        return hits[0] if len(hits) == 1 else None

    def add_coefficient(self, scales: tuple[float, float, float]) -> int | None:
        """The second input's coefficient of the adds in these domains, when they agree on one."""
        hits = {a.coefficient for a in self.adds if all(_close(x, y) for x, y in zip(a.scales, scales, strict=True))}
        return hits.pop() if len(hits) == 1 else None


def code_bounds(node: fx.Node, op: str) -> tuple[int, int] | None:
    """The codes a clamp with integer bounds keeps of a folded int8 domain (QuantizedClampActivationPass's)."""
    qout = (node.meta.get("output_qparams") or {}).get(0)
    if not (node.meta.get("input_qparams") or {}) or qout is None or op not in ("clamp", "clamp_"):
        return None
    given = _int_bounds(node)
    if given is None:
        return None
    lo, hi = (int(qout.qmin) if given[0] is None else given[0]), (int(qout.qmax) if given[1] is None else given[1])
    return (max(lo, int(qout.qmin)), min(hi, int(qout.qmax))) if lo <= hi else None


def _int_bounds(node: fx.Node) -> tuple[int | None, int | None] | None:
    """A clamp's (min, max) as written, when each is an integer or absent; else None."""
    given = [*node.args[1:3], None, None][:2]
    lo, hi = (node.kwargs.get(k, g) for k, g in zip(("min", "max"), given, strict=True))
    return (lo, hi) if all(b is None or isinstance(b, int) for b in (lo, hi)) else None


def one_code(node: fx.Node) -> int | None:
    """The one code a clamp with integer bounds outputs for every value of its input's integer dtype (a lower
    bound at or above the dtype's top, an upper one at or below its bottom), or None. What it reads — codes
    in any domain, or an aten op's result on codes — then cannot reach an output through it."""
    if base_name(target_name(node)) not in ("clamp", "clamp_") or not node.args:
        return None
    x = node.args[0].meta.get("val") if isinstance(node.args[0], fx.Node) else None
    dtype = getattr(x, "dtype", None)
    if dtype is None or dtype.is_floating_point or dtype == torch.bool:
        return None
    if (given := _int_bounds(node)) is None:
        return None
    (lo, hi), info = given, torch.iinfo(dtype)
    if lo is not None and lo >= info.max and (hi is None or hi >= lo):
        return info.max
    if hi is not None and hi <= info.min and (lo is None or lo <= hi):
        return info.min
    return None


def constant_clamp(node: fx.Node) -> int | None:
    """`one_code` of a clamp the passes declare an output domain for and no input domain: what it reads is
    an aten op's result on codes (read as a constant: `clamp_on_codes`)."""
    declared = 0 in (node.meta.get("output_qparams") or {}) and 0 not in (node.meta.get("input_qparams") or {})
    return one_code(node) if declared else None


def _relu_bounds(lo: Any, hi: Any, d: Domain) -> tuple[float | None, float | None] | None:
    """The real bounds of clamp codes [lo, hi] of `d` that are a relu's (none, or real 0; no upper), else None."""
    if lo not in (None, d.qmin, d.zero_point) or hi not in (None, d.qmax):
        return None
    return (0.0 if lo == d.zero_point else None), None


def node_names(node: fx.Node) -> frozenset[str]:
    """`node`'s name and those of the nodes it was made from (its provenance chain)."""
    out, sources = {node.name}, node.meta.get("from_node") or []
    while sources:
        out.add(sources[-1].name)
        sources = sources[-1].from_node
    return frozenset(out)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= RATIO_TOLERANCE * max(abs(a), abs(b))


def in_out_shapes(src: Any, node: fx.Node) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(input shape, output shape) of `node` as its fake tensors say (logical, NCHW order)."""
    a, b = (x.meta.get("val") if isinstance(x, fx.Node) else None for x in (src, node))
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return None
    sa, sb = static_shape(a), static_shape(b)
    return (sa, sb) if sa is not None and sb is not None else None


def node_value(node: fx.Node, d: Definition, cls: OpClass = OpClass.COMPUTE) -> Value:
    """`node`'s value, located as the FX reader locates every node (its module path and source)."""
    val = node.meta.get("val")
    dt = dtype_name(val.dtype) if isinstance(val, torch.Tensor) else None
    where = {"stack_trace": node.meta.get("stack_trace"), "module_path": module_path(node)}
    return Value(node.name, target_name(node), cls, d, dtype=dt, numel=numel_of(val), scalars=scalar_operands(node),
                 **where)  # fmt: skip


def code_of(d: Domain, v: float) -> int:
    """The code a real number quantizes to in `d` (rounding half up, clamped: quantize_val's)."""
    return max(d.qmin, min(d.qmax, math.floor(v / float(d.scale) + 0.5) + int(d.zero_point)))  # type: ignore[arg-type]


def declared_domain(node: fx.Node) -> Domain | None:
    """The domain a per-tensor quantize / dequantize names in its arguments."""
    if len(node.args) < 6:
        return None
    scale, zp, qmin, qmax, dtype = node.args[1:6]
    return Domain.quantized(dtype_name(dtype), float(scale), int(zp), int(qmin), int(qmax))  # type: ignore[arg-type]


class Kernel:
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
            self.dg.add_value(node_value(self.node, d, OpClass.PASSTHROUGH))
            self.dg.add_use(copies.name, self.name, "args[0]")  # (the codes it copies: `impact` follows them)
            return
        if self.out is not None:
            d = Definition(DefKind.FACT, fused or self._fused_hardsigmoid() or self.out)
        else:
            d = Definition(DefKind.FREE, blocking=True, reason=f"{self.name} has no output_qparams to check it against")
        self.dg.add_value(node_value(self.node, d))

    def _fused_hardsigmoid(self) -> Domain | None:
        """The domain its consumers read when the passes fused a hardsigmoid into this kernel
        (ActivationFusionPass: hardsigmoid(x) = clamp(x / 6 + 1/2, 0, 1) is a requantize into
        scale 6·s and zero point z + round(1 / 2s) when the hardsigmoid's output domain (s, z)
        maps 0 and 1 to the code range's ends), else None. The fused node is gone, so that it
        was a hardsigmoid is checked against the program it came from; unproven without it."""
        out, users = self.out, list(self.node.users)
        seen = {read_as(u, self.node) for u in users}
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
        held = self.dg.get(src.name) or node_value(src, free, OpClass.CONSTANT)
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


def read_as(user: fx.Node, node: fx.Node) -> Domain | None:
    """The domain `user` reads `node`'s codes in: a per-tensor dequantize's arguments, a kernel's
    ``input_qparams`` (indexed by tensor argument); None when it does not say."""
    if "dequantize_per_tensor" in target_name(user):
        return declared_domain(user)
    tensors = [a for a in user.args if isinstance(a, fx.Node)]
    qin = user.meta.get("input_qparams") or {}
    if tensors.count(node) != 1 or tensors.index(node) not in qin:
        return None
    return quant_args_domain(qin[tensors.index(node)], user)


def _scale(d: Domain | None) -> float:
    return float(d.scale) if d is not None and not d.per_channel else math.nan  # type: ignore[arg-type]


def _add(k: Kernel) -> None:
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


def _add_coefficient(k: Kernel, scales: tuple[float, float, float], realised: float) -> int | None:
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


def _mul(k: Kernel) -> None:
    clamp = hardswish_clamp_of(k.node)
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


def _activation(k: Kernel) -> None:
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
    if not bad.any() and name == "gelu" and isinstance(k.reference, Reference):
        _tanh_gelu(k, got, codes, d)
    if not bad.any():
        if k.name in k.dg.g:  # (its output: the function's over its input's reals, rounded)
            k.dg.add_value(replace(k.dg.value(k.name), stands_for=name))
        return k.check("LUT", True, f"tabulates {name} from {d} into {k.out}")
    q = int(bad.nonzero()[0])
    k.check("LUT", False, f"{int(bad.sum())} of 256 entries are not {name} from {d} into {k.out} (code {q - 128}: "
            f"the LUT gives {int(got[q])}, the domains need {int(want[q])})")  # fmt: skip


def _tanh_gelu(k: Kernel, got: torch.Tensor, codes: torch.Tensor, d: Domain) -> None:
    """The table tabulates the exact GELU (the passes build it so, whatever `approximate` says); where the
    program before the passes asked for the tanh one, entries one code from it are its ignored variant, which
    the Q/DQ form weighs and this form leaves unproven (`Target.ignored_variants`)."""
    if k.reference.variant(k.node, "approximate") != "tanh" or k.out is None:  # type: ignore[union-attr]
        return
    with torch.no_grad():
        y = torch.nn.functional.gelu((codes - int(d.zero_point)) * float(d.scale), approximate="tanh")  # type: ignore[arg-type]
    scaled = y / float(k.out.scale) + int(k.out.zero_point)  # type: ignore[arg-type]
    want = (torch.sign(scaled) * torch.floor(scaled.abs() + 0.5)).clamp(k.out.qmin, k.out.qmax)
    off = int((got != want).sum())
    if off:
        why = (f"{k.name} tabulates the exact GELU; the program asked for approximate='tanh', {off} of 256 entries "
               "one code from it, which what follows may make many (the Q/DQ form weighs it)")  # fmt: skip
        k.dg.oblige_unbounded(k.name, "its table", "ignored-op-variant", why, ("cortex-m",))


def _batch_matmul(k: Kernel) -> None:
    """lhs @ rhs of codes offset by the negated zero points, requantized by s_lhs · s_rhs / s_out; the
    rhs is read transposed (a `cortex_m.transpose` of it, or a constant the passes transposed)."""
    a, b = k.reads(0, 0), k.reads(2, 1)
    k.value()
    k.zero_point("lhs_zero_point", k.arg(1), a, sign=-1)
    k.zero_point("rhs_zero_point", k.arg(3), b, sign=-1)
    k.zero_point("output_zero_point", k.arg(4), k.out)
    k.ratio_is("output_multiplier/shift", ratio(k.arg(5), k.arg(6)), _scale(a) * _scale(b) / _scale(k.out))


def hardswish_clamp_of(mul: fx.Node) -> fx.Node | None:
    """DecomposeHardswishPass writes hardswish(x) as mul(x, minimum(x, code of 3)) with the +3 and
    the /6 in the mul's domains: the minimum, when `mul` is that."""
    m = mul.args[2] if len(mul.args) > 2 else None
    if isinstance(m, fx.Node) and target_name(m).startswith("cortex_m.") and base_name(target_name(m)) == "minimum":
        return m if m.args and m.args[0] is mul.args[0] else None
    return None


def hardswish_clamp(k: Kernel) -> None:
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


def _hardswish(k: Kernel, clamp: fx.Node) -> tuple[Domain | None, Domain | None]:
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
    seen = {read_as(u, k.node) for u in k.node.users}
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


def _linear(k: Kernel) -> None:
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


def _conv2d(k: Kernel, at: int = 6) -> None:
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


def _bias(k: Kernel, x: Domain | None, w: Domain | None, kernel_sum: Any) -> None:
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


def _avg_pool2d(k: Kernel) -> None:
    d = k.reads(0, 0)
    k.value()
    k.gains(1.0)  # (each output a mean of its inputs)
    # (its zero point and multiplier / shift dequantize and requantize with themselves: a
    # mutated one moves codes by at most one, measured — rounding, not a domain)
    if d is not None and k.out is not None and d != k.out:
        k.check("output domain", False, f"the kernel keeps the codes' domain {d}, the program declares {k.out}")


def _depthwise_conv2d(k: Kernel) -> None:
    """A conv2d whose weights are IHWO, one output channel per input channel × depth_multiplier."""
    _conv2d(k, at=7)


def _transpose_conv2d(k: Kernel) -> None:
    """As `quantized_conv2d` (OHWI weights; stride, padding, output_padding, dilation before the offsets)."""
    _conv2d(k, at=7)


def _div(k: Kernel) -> None:
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


def _max_pool2d(k: Kernel) -> None:
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


def _softmax(k: Kernel) -> None:
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


def _pad(k: Kernel) -> None:
    src = k.arg(0)
    k.value(copies=src if isinstance(src, fx.Node) else None)
    k.keeps_domain()
    shapes = in_out_shapes(src, k.node)
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


def _copy(k: Kernel) -> None:
    src = k.arg(0)
    k.value(copies=src if isinstance(src, fx.Node) else None)
    k.keeps_domain()


def clamp_on_codes(k: Kernel) -> None:
    """A relu / relu6 folded onto codes, or an activation the program it came from names: its bounds are
    codes of the declared domain."""
    if (kept := constant_clamp(k.node)) is not None and k.out is not None:
        return _one_code(k, kept, k.out)  # (what it reads has no domain: an aten op left on codes)
    d = k.reads(0, 0)
    k.value()
    lo, hi = k.arg(1), k.arg(2)
    if d is not None and k.out is not None and k.out != d and not (d.per_channel or k.out.per_channel):
        return _clamp_across(k, d, k.out)
    if d is None or k.out != d:
        return k.check("domain", False, f"a clamp copies codes, but declares {d} in and {k.out} out")
    ok_lo = lo is None or lo in (d.qmin, d.zero_point)  # (none, or relu: real 0)
    ok_hi = hi is None or hi == d.qmax
    made_of, got = (_made_of(k), code_bounds(k.node, "clamp")) if not (ok_lo and ok_hi) else (None, None)
    if not (ok_lo and ok_hi) and (made_of is None or got is None):
        k.unproven(f"clamp bounds [{lo}, {hi}] are not a relu's in {d}: an activation the program after the "
                   "passes does not record")  # fmt: skip
    elif made_of is not None and got is not None:  # (the program it came from says which activation it is)
        origin, (rlo, rhi) = made_of
        want = (d.qmin if rlo is None else code_of(d, rlo), d.qmax if rhi is None else code_of(d, rhi))
        k.check("bounds", got == want, f"clamps codes to {list(got)}; {origin}'s bounds [{rlo}, {rhi}] are codes "
                f"{list(want)} in {d}")  # fmt: skip
    if isinstance(lo, float) or isinstance(hi, float):  # (bounds in real units, left on codes as written:
        #   what the program computes is its reals clamped there; what the backend does, an obligation says)
        real = (-math.inf if lo is None else float(lo), math.inf if hi is None else float(hi))
        k.dg.add_value(replace(k.dg.value(k.name), op_class=OpClass.ACTIVATION, clamp=real))
    elif not d.per_channel:  # (what it computes: its codes clamped, the reals of those bounds in `d`)
        z, s = int(d.zero_point), float(d.scale)  # type: ignore[arg-type]
        real = (-math.inf if lo is None else (lo - z) * s, math.inf if hi is None else (hi - z) * s)
        k.dg.add_value(replace(k.dg.value(k.name), op_class=OpClass.ACTIVATION, clamp=real))


def _one_code(k: Kernel, kept: int, out: Domain) -> None:
    """A clamp that outputs code `kept` whatever its input holds: a constant in its declared domain, which
    reads nothing (measured: campaign case 00047-cm-custom, an add left on codes behind such a clamp, exact
    on the reference kernels). That the program's activation outputs that code too, the program the passes
    were given says (`reference=`)."""
    k.value()
    k.dg.add_value(replace(k.dg.value(k.name), values=((kept - out.zero_point) * out.scale,) * 2))  # type: ignore[operator]
    made_of = _made_of(k)
    if made_of is None:
        return k.unproven(f"it outputs code {kept} of {out} whatever it reads; that its activation does too, only "
                          "the program it came from states")  # fmt: skip
    origin, (lo, hi) = made_of
    top, bottom = lo is not None and code_of(out, lo) >= out.qmax, hi is not None and code_of(out, hi) <= out.qmin
    one = out.qmax if top else out.qmin if bottom else None
    gives = f"code {one}" if one is not None else "more than one code"
    k.check("bounds", one == kept, f"it outputs code {kept} whatever it reads; {origin}'s bounds [{lo}, {hi}] "
            f"give {gives} of {out} for every input")  # fmt: skip


def _made_of(k: Kernel) -> tuple[str, tuple[float | None, float | None]] | None:
    """(its name, its real bounds as written) of the one activation the program the passes were given made
    this clamp of (`reference=`), or None."""
    known = k.reference.activations if isinstance(k.reference, Reference) else ()
    made_of = [(names, bounds) for names, bounds in known if names & node_names(k.node)]
    if len({bounds for _, bounds in made_of}) != 1:
        return None
    return min(made_of[0][0], key=len), made_of[0][1]  # (the name it was exported with)


def _clamp_across(k: Kernel, d: Domain, out: Domain) -> None:
    """A clamp on codes of `d` whose result the program reads in `out`: the passes dropped the requant
    across the activation it was made of, and quantized its bounds into `out`. Its codes are the input's,
    bounded by those codes: a dropped requant (`requant-across-activation`) whose result lies in them, as
    before the passes. That the bounds are the activation's, the program it came from says."""
    made_of = _made_of(k)
    src, got = k.arg(0), code_bounds(k.node, "clamp")
    if not isinstance(src, fx.Node) or src.name not in k.dg.g or got is None:
        return k.check("domain", False, f"a clamp copies codes, but declares {d} in and {out} out")
    relu = _relu_bounds(k.arg(1), k.arg(2), out)
    if made_of is not None:
        origin, (lo, hi) = made_of
    elif relu is not None:  # (as a clamp in one domain: a relu's bounds are known without the program)
        origin, (lo, hi) = "a relu", relu
    else:  # (weighed with its own bounds; that they are its activation's stays unproven)
        k.unproven(f"a clamp on codes of {d} whose result is read in {out}: whether its bounds are its "
                   "activation's, only the program it came from states")  # fmt: skip
        z, s = int(out.zero_point), float(out.scale)  # type: ignore[arg-type]
        origin = "its activation"
        lo = None if got[0] <= out.qmin else (got[0] - z) * s
        hi = None if got[1] >= out.qmax else (got[1] - z) * s
    want = (out.qmin if lo is None else code_of(out, lo), out.qmax if hi is None else code_of(out, hi))
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


READERS = {
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
