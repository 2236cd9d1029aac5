"""Value ranges split on a source's codes: what two paths of one element share.

One interval per value loses that a mask and the value it selects come from the same element:
``x.masked_fill(x > t, 0)`` is never above ``max(t, 0)``, but with the mask taken as "either" its
interval is x's whole range. `ranges.correlated` takes each code of x alone and keeps the hull (campaign
case 00338-mk-arm-custom: a neg whose input a mask two ops up makes 0 everywhere; measured exact on the
TOSA reference model, bounded at 255 output LSB without it; tests/test_soundness_campaign.py)."""

from __future__ import annotations

import pytest

from qflow import ranges
from qflow.domain import Domain
from qflow.graph import Definition, DefKind, DomainGraph, Value
from qflow.ops import OpClass

X = Domain.quantized("int8", 0.00706, 56, -128, 127)  # reals [-1.299, 0.501]
DQ = "quantized_decomposed.dequantize_per_tensor.default"
COMPARE = {"aten.gt.Scalar": lambda a, b: a > b, "aten.lt.Scalar": lambda a, b: a < b}


def _filled(compare: str, t: float, fill: float, numel: int = 8) -> DomainGraph:
    """x (codes of X) → dequantize dx; m = compare(dx, t); w = dx.masked_fill(m, fill): the output. `numel`:
    the mask's size (another than x's: a broadcast mask, not x's own elements)."""
    dg = DomainGraph(form="qdq")
    dg.add_value(Value("x", "placeholder", OpClass.UNKNOWN, Definition(DefKind.FACT, X), numel=8))
    dg.add_value(Value("dx", DQ, OpClass.DEQUANTIZE, Definition(DefKind.FACT, X), numel=8))
    dg.add_use("x", "dx", "args[0]")
    free = Definition(DefKind.FREE, reason="op")
    dg.add_value(Value("m", compare, OpClass.COMPUTE, free, numel=numel, scalars=(("args[1]", t),)))
    dg.add_use("dx", "m", "args[0]")
    dg.add_value(
        Value("w", "aten.masked_fill.Scalar", OpClass.PASSTHROUGH, free, numel=8, scalars=(("args[2]", fill),))
    )
    dg.add_use("dx", "w", "args[0]")
    dg.add_use("m", "w", "args[1]")
    dg.outputs = ["w"]
    return dg


def _every_code(compare: str, t: float, fill: float) -> tuple[float, float]:
    """The hull of what the program computes, code by code."""
    ws = []
    for c in range(X.qmin, X.qmax + 1):
        x = X.scale * (c - X.zero_point)
        ws.append(fill if COMPARE[compare](x, t) else x)
    return min(ws), max(ws)


@pytest.mark.parametrize(
    ("compare", "t", "fill"),
    [("aten.gt.Scalar", 0.0, 0.0), ("aten.gt.Scalar", -0.5, -0.25), ("aten.lt.Scalar", 0.2, 0.3),
     ("aten.lt.Scalar", -1.0, 0.0), ("aten.gt.Scalar", 0.6, 0.0)],
)  # fmt: skip
def test_split_ranges_hold_every_code_and_no_more(compare: str, t: float, fill: float) -> None:
    dg = _filled(compare, t, fill)
    whole = ranges.value_ranges(dg)
    split = ranges.correlated(dg, whole, ["w"])
    lo, hi = _every_code(compare, t, fill)
    assert split["w"][0] <= lo + 1e-9 and hi - 1e-9 <= split["w"][1]  # (sound: every code's value)
    assert split["w"] == pytest.approx((lo, hi), abs=1e-6)  # (and tight: no value no code gives)
    assert whole["w"][0] <= split["w"][0] and split["w"][1] <= whole["w"][1]


def test_the_whole_interval_loses_what_one_element_shares() -> None:
    """x.masked_fill(x > 0, 0) is never above 0; one interval per value says up to x's top."""
    dg = _filled("aten.gt.Scalar", 0.0, 0.0)
    whole = ranges.value_ranges(dg)
    assert whole["w"][1] == pytest.approx(X.scale * (X.qmax - X.zero_point))
    assert ranges.correlated(dg, whole, ["w"])["w"][1] == 0.0


def test_a_mask_of_other_elements_splits_nothing() -> None:
    """A mask of another size (broadcast) does not hold x's own elements: no element-wise relation."""
    dg = _filled("aten.gt.Scalar", 0.0, 0.0, numel=1)
    whole = ranges.value_ranges(dg)
    assert ranges.correlated(dg, whole, ["w"]) == whole
