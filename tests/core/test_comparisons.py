"""A comparison's outcome over the values both sides hold, and the where it selects with.

The transformer menu's ``where(x > c, x, 2.0)`` compares x with a constant quantized into x's own domain.
Where c is the top of that domain, the comparison is false on every code x can have, so the where is the
constant whatever codes reach x: a requant dropped upstream moves no output (campaign case
03110-tx-arm-custom, measured exact on the TOSA reference model; tests/test_soundness_campaign.py). Where
the comparison can flip, a wrong code upstream moves the output by anything: the condition depends on the
values it compares (it had no edge from them, and impact took it for exact)."""

from __future__ import annotations

import math

import pytest

from qflow import impact, ranges
from qflow.domain import Domain
from qflow.graph import Definition, DefKind, DomainGraph, Value
from qflow.ops import OpClass

X = Domain.quantized("int8", 0.00706, 56, -128, 127)  # reals [-1.299, 0.501]
COARSE = Domain.quantized("int8", 0.02, 0, -128, 127)
Q, DQ = "quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default"
TOP, BOTTOM = X.scale * (X.qmax - X.zero_point), X.scale * (X.qmin - X.zero_point)


def _masked(compare: str = "aten.gt.Tensor", c: float = TOP, c_domain: Domain = X, swap: bool = False) -> DomainGraph:
    """x (codes of X) → dequantize; c (a constant in `c_domain`) → dequantize; m = compare(x, c) (or
    (c, x) when `swap`); w = where(m, x, 2.0) → quantize to X: the program's output."""
    dg = DomainGraph(form="qdq")

    def add(name, target, cls, *ins, domain=None, values=None):
        d = Definition(DefKind.FACT, domain) if domain is not None else Definition(DefKind.FREE, reason="op")
        dg.add_value(Value(name, target, cls, d, numel=8, values=values))
        for k, src in enumerate(ins):
            dg.add_use(src, name, f"args[{k}]")

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
