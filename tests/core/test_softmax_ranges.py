"""A softmax's decomposition keeps relations one interval per value cannot: `x - amax(x)` is never
above half a step of the maximum's domain, and a row's sum of exps holds the maximum's exp(0). Arm's
int16 exp and reciprocal TABLEs are thousands of LSB off exactly where these say a softmax never goes
(tests/test_unvalidated_lowering.py measures the lowered program); here, on hand-built Q/DQ graphs, the
intervals hold every row the quantized decomposition computes, and the relation is dropped wherever it
could fail."""

from __future__ import annotations

import math
import random

from qflow import ranges
from qflow.domain import Domain
from qflow.graph import Definition, DefKind, DomainGraph, Value
from qflow.ops import OpClass

X = Domain.quantized("int8", 0.05, 0, -128, 127)
SUB = Domain.quantized("int8", 0.06, 127, -128, 127)  # (x - amax(x) is at most ~0: its top codes)
EXP = Domain.quantized("int8", 1 / 255, -128, -128, 127)
SUM = Domain.quantized("int8", 8 / 255, -128, -128, 127)
ROW = 8


def _softmax(amax_domain: Domain = X, amax_dims: tuple[int, ...] | None = (1,), sum_dims=(1,), same_codes=True):
    """x → q → (dq, dq → amax → q → dq) → sub → q → dq → exp → q → dq → sum → q, over rows of ROW."""
    dg = DomainGraph(form="qdq")

    def add(name, target, cls, *ins, domain=None, numel=ROW, reduced=None):
        d = Definition(DefKind.FACT, domain) if domain is not None else Definition(DefKind.FREE, reason="op")
        dg.add_value(Value(name, target, cls, d, numel=numel, reduced=reduced))
        for k, src in enumerate(ins):
            dg.add_use(src, name, f"args[{k}]")

    q, dq = "quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default"
    add("x", "placeholder", OpClass.UNKNOWN)
    add("qx", q, OpClass.QUANTIZE, "x", domain=X)
    add("qy", q, OpClass.QUANTIZE, "x", domain=X)  # (other codes: a wrong read may change them alone)
    add("a", dq, OpClass.DEQUANTIZE, "qx", domain=X)
    add("b", dq, OpClass.DEQUANTIZE, "qx" if same_codes else "qy", domain=X)
    add("m", "aten.amax.default", OpClass.PASSTHROUGH, "b", numel=1, reduced=amax_dims)
    add("qm", q, OpClass.QUANTIZE, "m", domain=amax_domain, numel=1)
    add("dm", dq, OpClass.DEQUANTIZE, "qm", domain=amax_domain, numel=1)
    add("s", "aten.sub.Tensor", OpClass.COMPUTE, "a", "dm")
    add("qs", q, OpClass.QUANTIZE, "s", domain=SUB)
    add("ds", dq, OpClass.DEQUANTIZE, "qs", domain=SUB)
    add("e", "aten.exp.default", OpClass.COMPUTE, "ds")
    add("qe", q, OpClass.QUANTIZE, "e", domain=EXP)
    add("de", dq, OpClass.DEQUANTIZE, "qe", domain=EXP)
    add("t", "aten.sum.dim_IntList", OpClass.COMPUTE, "de", numel=1, reduced=sum_dims)
    return dg


def _quantize(v: float, d: Domain) -> float:
    code = min(max(round(v / d.scale) + d.zero_point, d.qmin), d.qmax)  # type: ignore[operator]
    return d.scale * (code - d.zero_point)  # type: ignore[operator]


def test_the_intervals_hold_every_row_the_quantized_softmax_computes() -> None:
    r = ranges.value_ranges(_softmax())
    assert r["s"][1] == X.scale / 2  # type: ignore[operator]  # (not X's whole span: 12.75)
    assert r["t"][0] > 0.9  # (not near 0, where a reciprocal TABLE is off: exp(-0.055) rounded)
    rng = random.Random(0)
    for _ in range(2000):
        width = rng.choice([0.01, 0.5, 3.0, 20.0])
        row = [_quantize(rng.uniform(-width, width), X) for _ in range(ROW)]
        m = _quantize(max(row), X)
        terms = [_quantize(math.exp(_quantize(v - m, SUB)), EXP) for v in row]
        assert all(v - m <= r["s"][1] for v in row) and r["t"][0] <= sum(terms) <= r["t"][1]


def test_the_relation_is_dropped_wherever_it_could_fail() -> None:
    wide = ranges.value_ranges(_softmax())["s"][1]
    narrow_max = Domain.quantized("int8", 0.01, 0, -128, 127)  # (clamps a maximum above 1.27)
    cases = {
        "a maximum its domain clamps": _softmax(amax_domain=narrow_max),
        "a maximum not kept in its row's place": _softmax(amax_dims=None),
        "a maximum of other codes": _softmax(same_codes=False),
    }
    for why, dg in cases.items():
        assert ranges.value_ranges(dg)["s"][1] > 1.0 > wide, why
    assert ranges.value_ranges(_softmax(sum_dims=(0,)))["t"][0] < 0.5  # (a sum over other rows)
