"""A comparison's outcome over the values both sides hold, and the where it selects with.

The transformer menu's ``where(x > c, x, 2.0)`` compares x with a constant quantized into x's own domain.
Where c is the top of that domain, the comparison is false on every code x can have, so the where is the
constant whatever codes reach x: a requant dropped upstream moves no output (campaign case
03110-tx-arm-custom, measured exact on the TOSA reference model; tests/test_soundness_campaign.py). Where
the comparison can flip, a wrong code upstream moves the output by anything: the condition depends on the
values it compares (it had no edge from them, and impact took it for exact)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from qflow import impact, ranges
from qflow.domain import Domain
from qflow.graph import Definition, DefKind, DomainGraph, Value
from qflow.ops import OpClass

X = Domain.quantized("int8", 0.00706, 56, -128, 127)  # reals [-1.299, 0.501]
COARSE = Domain.quantized("int8", 0.02, 0, -128, 127)
Q, DQ = "quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default"
TOP, BOTTOM = X.scale * (X.qmax - X.zero_point), X.scale * (X.qmin - X.zero_point)


def _adder(dg: DomainGraph) -> Any:
    """add(name, target, op class, *inputs, domain=, **value fields): a value of 8 elements reading `inputs`
    as args[0], args[1], ..."""

    def add(name, target, cls, *ins, domain=None, **fields):
        d = Definition(DefKind.FACT, domain) if domain is not None else Definition(DefKind.FREE, reason="op")
        dg.add_value(Value(name, target, cls, d, numel=8, **fields))
        for k, src in enumerate(ins):
            dg.add_use(src, name, f"args[{k}]")

    return add


def _masked(compare: str = "aten.gt.Tensor", c: float = TOP, c_domain: Domain = X, swap: bool = False) -> DomainGraph:
    """x (codes of X) → dequantize; c (a constant in `c_domain`) → dequantize; m = compare(x, c) (or
    (c, x) when `swap`); w = where(m, x, 2.0) → quantize to X: the program's output."""
    dg = DomainGraph(form="qdq")
    add = _adder(dg)

    add("x", "placeholder", OpClass.UNKNOWN, domain=X)
    add("dx", DQ, OpClass.DEQUANTIZE, "x", domain=X)
    add("c", "placeholder", OpClass.CONSTANT)
    add("dc", DQ, OpClass.DEQUANTIZE, "c", domain=c_domain, values=(c, c))
    add("m", compare, OpClass.COMPUTE, *(("dc", "dx") if swap else ("dx", "dc")))
    add("w", "aten.where.ScalarOther", OpClass.PASSTHROUGH, "m", "dx")
    add("q", Q, OpClass.QUANTIZE, "w", domain=X)
    dg.outputs = ["q"]
    return dg


@pytest.mark.parametrize(
    ("compare", "c", "swap", "outcome"),
    [
        ("aten.gt.Tensor", TOP, False, (0.0, 0.0)),  # x > top: never
        ("aten.gt.Tensor", TOP - X.scale, False, (0.0, 1.0)),  # x > one code below: on the top code
        ("aten.le.Tensor", TOP, False, (1.0, 1.0)),  # x <= top: always
        ("aten.lt.Tensor", TOP, True, (0.0, 0.0)),  # top < x: never
        ("aten.ge.Tensor", BOTTOM, False, (1.0, 1.0)),  # x >= bottom: always
        ("aten.ge.Tensor", BOTTOM, True, (0.0, 1.0)),  # bottom >= x: on the bottom code
        ("aten.lt.Tensor", BOTTOM, False, (0.0, 0.0)),  # x < bottom: never
        ("aten.eq.Tensor", TOP, False, (0.0, 1.0)),
        ("aten.ne.Tensor", TOP, False, (0.0, 1.0)),
    ],
)
def test_a_comparison_on_one_grid_has_one_outcome_only_over_codes_it_separates(compare, c, swap, outcome) -> None:
    assert ranges.value_ranges(_masked(compare, c, swap=swap))["m"] == outcome


def test_on_two_grids_the_operands_must_be_a_step_of_the_coarser_apart() -> None:
    """A backend rescales two grids to one before it compares: values closer than a step may swap."""
    assert ranges.value_ranges(_masked(c=TOP + 0.5 * COARSE.scale, c_domain=COARSE))["m"] == (0.0, 1.0)
    assert ranges.value_ranges(_masked(c=TOP + COARSE.scale, c_domain=COARSE))["m"] == (0.0, 0.0)


def test_a_where_with_one_outcome_holds_its_branch() -> None:
    dg = _masked("aten.le.Tensor")  # (always true: the where is x)
    assert ranges.value_ranges(dg)["w"] == ranges.value_ranges(dg)["dx"]


def _reach(dg: DomainGraph, backend: ranges.Interval) -> impact.Impact:
    """The output error when the codes at x are 3 steps off and the backend's reals there lie in `backend`."""
    return impact.output_error(dg, {"dx": 3 * X.scale}, backend={"dx": backend})


def test_a_wrong_code_the_condition_never_sees_moves_no_output() -> None:
    """x > top is false on both sides whatever x's codes: the where is 2.0, and so is the output."""
    assert _reach(_masked(), (-1.0, TOP)).lsb == 0.0


def test_a_wrong_code_that_can_flip_the_condition_is_unbounded() -> None:
    """x > c with c inside x's range: three steps can move x across c, and the where from x to 2.0."""
    dg = _masked(c=0.2)
    assert ranges.value_ranges(dg)["m"] == (0.0, 1.0)
    assert math.isinf(_reach(dg, (-1.0, TOP)).lsb)


def test_a_condition_the_wrong_codes_decide_differently_is_unbounded() -> None:
    """Always false in the program, but the backend's values reach above c: the outcome differs."""
    dg = _masked(c=0.2)
    dg.value("dx").values = (-1.0, 0.0)  # (the program's x: below c everywhere)
    assert ranges.value_ranges(dg)["m"] == (0.0, 0.0)
    assert math.isinf(impact.output_error(dg, {"dx": 3 * X.scale}, backend={"dx": (0.3, TOP)}).lsb)


def _thresholded(c: float, fill: float, then: float | None = None) -> DomainGraph:
    """dx (x's reals) → m = gt(dx, c) (a scalar operand) → f = masked_fill(dx, m, fill) → (t = gt(f, then)
    → w = where(t, dx, 2.0)) → quantize to X."""
    dg = DomainGraph(form="qdq")
    add = _adder(dg)

    add("x", "placeholder", OpClass.UNKNOWN, domain=X)
    add("dx", DQ, OpClass.DEQUANTIZE, "x", domain=X)
    add("m", "aten.gt.Scalar", OpClass.COMPUTE, "dx", scalars=(("args[1]", c),))
    add("f", "aten.masked_fill.Scalar", OpClass.PASSTHROUGH, "dx", "m", scalars=(("args[2]", fill),))
    last = "f"
    if then is not None:
        add("t", "aten.gt.Scalar", OpClass.COMPUTE, "f", scalars=(("args[1]", then),))
        add("w", "aten.where.ScalarOther", OpClass.PASSTHROUGH, "t", "dx", scalars=(("args[2]", 2.0),))
        last = "w"
    add("q", Q, OpClass.QUANTIZE, last, domain=X)
    dg.outputs = ["q"]
    return dg


@pytest.mark.parametrize(
    ("c", "outcome"),
    [(TOP + 1e-5, (0.0, 0.0)), (BOTTOM - 1e-5, (1.0, 1.0)), (0.0, (0.0, 1.0)), (TOP, (0.0, 1.0))],
)
def test_a_comparison_with_a_scalar_has_one_outcome_only_beyond_float32s_rounding(c, outcome) -> None:
    """x > top is either in float32: the dequantized top and the threshold each round their own way."""
    assert ranges.value_ranges(_thresholded(c, 0.0))["m"] == outcome


def test_a_masked_fill_holds_its_fill_where_the_mask_can_hold() -> None:
    got = ranges.value_ranges(_thresholded(0.0, 1.5))["f"]
    assert got == pytest.approx((BOTTOM, 1.5))
    assert ranges.value_ranges(_thresholded(TOP + 1e-5, 1.5))["f"] == pytest.approx((BOTTOM, TOP))  # (never filled)


def test_a_flipped_mask_moves_a_select_by_the_span_of_what_it_picks() -> None:
    """The backend's mask can be either anywhere (a comparison of codes, `landing`): where the two sides
    disagree one holds x, the other the fill 0 — at most |bottom| apart."""
    dg = _thresholded(0.0, 0.0)
    reach = impact.output_error(dg, {"m": 1.0}, backend={"m": (0.0, 1.0)})
    assert reach.output == "q" and reach.lsb == pytest.approx((0.0 - BOTTOM) / X.scale)


def test_a_flipped_mask_no_later_comparison_sees_moves_no_output() -> None:
    """Filled or not, f stays below 0.6: the where after it is 2.0 on both sides. Against -0.5 the where can
    pick x on one side and 2.0 on the other: (2.0 - bottom) / scale before the output's grid clamps it."""
    assert impact.output_error(_thresholded(0.0, 0.0, then=0.6), {"m": 1.0}, backend={"m": (0.0, 1.0)}).lsb == 0.0
    reach = impact.output_error(_thresholded(0.0, 0.0, then=-0.5), {"m": 1.0}, backend={"m": (0.0, 1.0)})
    assert reach.lsb == pytest.approx((2.0 - BOTTOM) / X.scale)


def test_values_aligned_with_a_source_stop_at_a_reduction_and_at_what_reads_one() -> None:
    """On the elements where x flips m, f and its quantize are computed from those elements only; a row
    maximum of f is not, nor is anything that adds it back (its error is on every element)."""
    dg = _thresholded(0.0, 0.0)
    assert ranges.aligned(dg, "x", "m") == {"x", "dx", "m", "f", "q"}
    dg.add_value(Value("r", "aten.amax.default", OpClass.COMPUTE, Definition(DefKind.FREE, reason="op"), numel=1))
    dg.add_use("f", "r", "args[0]")
    dg.add_value(Value("s", "aten.add.Tensor", OpClass.COMPUTE, Definition(DefKind.FREE, reason="op"), numel=8))
    dg.add_use("dx", "s", "args[0]")
    dg.add_use("r", "s", "args[1]")
    assert ranges.aligned(dg, "x", "m") == {"x", "dx", "m", "f", "q"}
    assert "s" in ranges.aligned(dg, "x", "q")  # (no error from the flip reaches r: s reads x's elements)


def test_a_flipped_mask_multiplied_in_moves_the_product_by_what_it_multiplies() -> None:
    """``x * (x > 0).float()``: the cast keeps 0 and 1, so a flip moves the product by at most |x| (|bottom|)."""
    dg = DomainGraph(form="qdq")
    add = _adder(dg)
    add("x", "placeholder", OpClass.UNKNOWN, domain=X)
    add("dx", DQ, OpClass.DEQUANTIZE, "x", domain=X, dtype="float32")
    add("m", "aten.gt.Scalar", OpClass.COMPUTE, "dx", dtype="bool", scalars=(("args[1]", 0.0),))
    add("f", "aten.to.dtype", OpClass.COMPUTE, "m", dtype="float32")
    add("p", "aten.mul.Tensor", OpClass.COMPUTE, "dx", "f", dtype="float32")
    add("q", Q, OpClass.QUANTIZE, "p", domain=X)
    dg.outputs = ["q"]
    assert ranges.value_ranges(dg)["f"] == (0.0, 1.0)
    reach = impact.output_error(dg, {"m": 1.0}, backend={"m": (0.0, 1.0)})
    assert reach.output == "q" and reach.lsb == pytest.approx(-BOTTOM / X.scale)
