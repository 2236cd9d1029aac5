"""Which requantizes the Arm backend skips: `FuseConsecutiveRescalesPass` (executorch 1.5.1).

`InsertRescaleInt32Pass` computes add, sub, mul, sum, abs, maximum / minimum and the comparisons
on int32 operands: a RESCALE (int8/int16 → int32) before each input and one (int32 → int8/int16)
after the result. When one such op feeds another, `FuseConsecutiveRescalesPass` removes the pair
between them whenever the two rescales compose to 1.0 (|product − 1| < 1e-6, zero points 0 on
the int32 side): the consumer then reads the producer's exact int32 result, never rounded to the
producer's declared output domain nor clamped to its range. The pass's own docstring allows "up
to ~120 INT8 steps" near the clamp and tests with a tolerance of one step; a following steep op
multiplies it — `x + c` into a LayerNorm (its `sub` reads the unrounded sum) is 3-7 output LSB
off the fake-quantized model on the TOSA reference model (soundness campaign case
00892-tx-arm-pc; tests/test_rescale_fusion.py).

The int32 scales are the pass's (`insert_rescales_pass.py`): add / sub rescale both operands to
2·max(s_a, s_b) / 2^20 (2^12 at int16) and keep it; mul and sum keep each operand's scale, mul's
result is s_a·s_b; abs, maximum, minimum and the comparisons use the smallest operand scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch.fx as fx

from qflow.domain import Domain
from qflow.ir.fx_nodes import Consts, qdq_domain, quant_args_domain, target_name
from qflow.ops import OpClass, base_name, classify

#: ops whose result InsertRescaleInt32Pass rescales from int32 to the op's int8 / int16 output domain
PRODUCERS = frozenset({"add", "sub", "mul", "sum", "abs", "maximum", "minimum"})
#: ops whose operands it rescales to int32
CONSUMERS = PRODUCERS | {"eq", "ge", "gt", "le", "lt"}
_MIN_SCALE = frozenset({"abs", "maximum", "minimum", "eq", "ge", "gt", "le", "lt"})
_SHIFT = {"int8": 20, "int16": 12}


@dataclass(frozen=True)
class SkippedRequant:
    """`consumer` reads `producer`'s result where the program declares it rounded to `domain`;
    `instead` says what the backend hands it instead, and which pass made it so."""

    producer: str
    consumer: str
    arg: int
    domain: Domain
    instead: str
    #: a witness that the skipped clamp moves a program output, and by how many output LSB
    moves: str | None = None
    moves_lsb: float | None = None

    @property
    def detail(self) -> str:
        if self.moves:
            return f"{self.consumer} reads {self.producer} in {self.domain}, but {self.instead}: {self.moves}"
        return (
            f"{self.consumer} reads {self.producer} in {self.domain}, but {self.instead}: not rounded to that domain "
            "(up to half an LSB off) nor clamped to its range (any amount off when the result leaves it); qflow "
            "does not bound what that does to the output"
        )


def _fused_pair(producer: str, consumer: str, arg: int, domain: Domain) -> SkippedRequant:
    return SkippedRequant(
        producer,
        consumer,
        arg,
        domain,
        "the Arm backend computes both on int32 and its FuseConsecutiveRescalesPass removes the rescale pair "
        f"between them (their scales compose to 1.0): {consumer} reads {producer}'s exact int32 result",
    )


def _input_scales(op: str, scales: list[float], dtype: str) -> list[float] | None:
    """The int32 scale each operand is rescaled to (None: the pass raises or skips the op)."""
    if op in _MIN_SCALE:
        return [min(scales)] * len(scales)
    if op in ("add", "sub"):
        if len(scales) != 2 or dtype not in _SHIFT:
            return None
        return [2 * max(scales) / (1 << _SHIFT[dtype])] * 2
    if op in ("mul", "sum"):
        return list(scales)
    return None


def _output_scale(op: str, scales: list[float], dtype: str) -> float | None:
    """The scale of the int32 result the pass rescales to the op's output domain."""
    ins = _input_scales(op, scales, dtype)
    if ins is None or op in ("eq", "ge", "gt", "le", "lt"):
        return None
    return math.prod(ins) if op == "mul" else ins[0]


def _per_tensor(d: Domain | None) -> bool:
    return d is not None and not d.is_float and not d.per_channel and d.dtype in _SHIFT


class OperandForm:
    """The int8 / int16 domains an op reads and writes once folded, read from a Q/DQ graph (each
    operand a dequantize, the result's one user a quantize) or a folded one (`input_qparams` /
    `output_qparams`)."""

    def __init__(self, consts: Consts, folded: bool) -> None:
        self.consts, self.folded = consts, folded

    def inputs(self, node: fx.Node) -> dict[int, tuple[fx.Node, Domain]] | None:
        """Operand position → (the node it reads once folded, its domain); None if any is unknown."""
        out: dict[int, tuple[fx.Node, Domain]] = {}
        if self.folded:
            iq = node.meta.get("input_qparams")
            if not isinstance(iq, dict) or not iq:
                return None
            for k, qa in iq.items():
                a = node.args[int(k)] if int(k) < len(node.args) else None
                if not isinstance(a, fx.Node):
                    return None
                out[int(k)] = (a, quant_args_domain(qa, node))
            return out
        for k, a in enumerate(node.args):
            if not isinstance(a, fx.Node):
                continue
            if classify(target_name(a)) is not OpClass.DEQUANTIZE or not isinstance(q := a.args[0], fx.Node):
                return None
            src = q.args[0] if classify(target_name(q)) is OpClass.QUANTIZE and isinstance(q.args[0], fx.Node) else q
            out[k] = (src, qdq_domain(a, self.consts))
        return out or None

    def output(self, node: fx.Node) -> Domain | None:
        if self.folded:
            oq = node.meta.get("output_qparams")
            return quant_args_domain(oq[min(oq)], node) if isinstance(oq, dict) and oq else None
        q = self.quantize_of(node)
        return qdq_domain(q, self.consts) if q is not None else None

    @staticmethod
    def quantize_of(node: fx.Node) -> fx.Node | None:
        """The one quantize of `node`'s result in a Q/DQ graph."""
        qs = [u for u in node.users if classify(target_name(u)) is OpClass.QUANTIZE]
        return qs[0] if len(qs) == 1 else None


def skipped_requants(gm: fx.GraphModule, consts: Consts, folded: bool) -> list[SkippedRequant]:
    """Each (producer, consumer operand) pair whose rescales FuseConsecutiveRescalesPass removes."""
    form = OperandForm(consts, folded)
    found = []
    for c in gm.graph.nodes:
        op = base_name(target_name(c)) if c.op == "call_function" else ""
        if op not in CONSUMERS or (ins := form.inputs(c)) is None:
            continue
        doms = [d for _, d in ins.values()]
        if not all(_per_tensor(d) for d in doms) or len({d.dtype for d in doms}) != 1:
            continue
        wanted = _input_scales(op, [float(d.scale) for d in doms], doms[0].dtype)  # type: ignore[arg-type]
        if wanted is None:
            continue
        for (k, (p, d)), want in zip(ins.items(), wanted, strict=True):
            p_op = base_name(target_name(p)) if p.op == "call_function" else ""
            if p_op not in PRODUCERS or (p_ins := form.inputs(p)) is None or form.output(p) != d:
                continue
            p_doms = [x for _, x in p_ins.values()]
            if not all(_per_tensor(x) for x in p_doms) or len({x.dtype for x in p_doms}) != 1:
                continue
            have = _output_scale(p_op, [float(x.scale) for x in p_doms], p_doms[0].dtype)  # type: ignore[arg-type]
            if have is not None and abs(have / want - 1.0) < 1e-6:
                found.append(_fused_pair(p.name, c.name, k, d))
    return found


#: Ops whose int32 scale is far below an activation scale: add / sub work at 2·max(s_a, s_b) / 2^20 (2^12
#: at int16); a product's s_a·s_b is of that magnitude only at int16 (2^-11 of an operand scale is within a
#: product's reach, 2^-19 is not); sum, abs, maximum / minimum keep an operand's scale.
_FINE_OPERAND = frozenset({"add", "sub"})
_FINE_RESULT = {"int8": _FINE_OPERAND, "int16": _FINE_OPERAND | {"mul"}}


def before_calibration(gm: fx.GraphModule, annotated: Callable[[fx.Node], str | None]) -> list[tuple[str, str]]:
    """(producer, consumer) pairs of an annotated graph whose rescales may compose to 1.0 once calibrated.
    Whether they do is a matter of the calibrated scales (00892-tx-arm-pc: `x + c` keeps the width of its
    range, so its output scale equals its input's, 1e-7 apart), decided only after calibration. A pair is
    kept when the producer's int32 scale and the one the consumer rescales its operand to are of one
    magnitude (both far below an activation scale, or both an activation scale): every pair the Q/DQ form
    found fused in the campaigns is of that kind (sum → mul, add / sub → add / sub, and at int16
    mul → sub), and none of the others (sub → mul would need an output range 2^19 times narrower than its
    inputs').
    `annotated`: a node's annotated output dtype (None: not annotated for integer codes)."""
    pairs = []
    for c in gm.graph.nodes:
        c_op = base_name(target_name(c)) if c.op == "call_function" else ""
        if c_op not in CONSUMERS or annotated(c) not in _SHIFT:
            continue
        for p in dict.fromkeys(a for a in c.args if isinstance(a, fx.Node)):
            p_op = base_name(target_name(p)) if p.op == "call_function" else ""
            dtype = annotated(p)
            if p_op in PRODUCERS and dtype in _SHIFT and (p_op in _FINE_RESULT[dtype]) == (c_op in _FINE_OPERAND):
                pairs.append((p.name, c.name))
    return pairs
