"""The bound on a dropped requant against every code of int8 and int16, enumerated."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qflow.bounds import COPY, ZP_ONLY, dropped_requant
from qflow.domain import DTYPE_RANGE, Domain


def _requant(v: float, zo: int, lo: int, hi: int) -> int:
    return min(max(round(v) + zo, lo), hi)


def _moved(d_in: Domain, d_out: Domain, how: str) -> tuple[float, int]:
    """(max real error, max code moved) over every input code, by enumeration."""
    r = d_in.scale / d_out.scale
    zi, zo = d_in.zero_point, d_out.zero_point
    dlo, dhi = DTYPE_RANGE[d_out.dtype]
    worst_real, worst_code = 0.0, 0
    for c in range(d_in.qmin, d_in.qmax + 1):
        if how == COPY:
            wrote, asked = c, r * (c - zi) + zo
        else:  # negate: the worst zero-point-only op for a symmetric bound is either sign
            v = -(c - zi)
            wrote, asked = min(max(v + zo, dlo), dhi), r * v + zo
        clamped = min(max(asked, d_out.qmin), d_out.qmax)
        worst_real = max(worst_real, abs(wrote - clamped))
        worst_code = max(worst_code, abs(wrote - _requant(asked - zo, zo, d_out.qmin, d_out.qmax)))
    return worst_real, worst_code


def _domain(dtype: str, scale: float, zp: int, narrow: int = 0) -> Domain:
    lo, hi = DTYPE_RANGE[dtype]
    return Domain.quantized(dtype, scale, zp, lo + narrow, hi)


domains = st.tuples(
    st.sampled_from(["int8", "int16"]),
    st.floats(1e-4, 1.0),
    st.floats(0.97, 1.03),
    st.integers(-20, 20),
    st.integers(-3, 3),
    st.integers(0, 40),
)


@settings(max_examples=60, deadline=None)
@given(domains, st.sampled_from([COPY, ZP_ONLY]))
def test_the_bound_covers_every_code_and_is_reached_at_the_ends(case, how) -> None:
    dtype, scale, ratio, zp, dzp, narrow = case
    zp = zp * (1 if dtype == "int8" else 100)
    d_in = _domain(dtype, scale, zp)
    d_out = _domain(dtype, scale / ratio, zp + dzp, narrow)
    bound = dropped_requant(d_in, d_out, how)
    assert bound is not None
    real, code = _moved(d_in, d_out, how)
    assert real <= bound.lsb + 1e-9  # sound: no code errs more than the bound
    assert code <= bound.codes or (code == bound.codes + 1 and math.isclose(bound.lsb % 1, 0.5))
    if how == COPY:  # exact at the integer ends and breakpoints: the enumeration reaches it up to one code step
        assert bound.lsb <= real + abs(1 - d_in.scale / d_out.scale) + 1e-9
    if bound.within_rounding:
        assert code <= 1 and (code == 0 or math.isclose(bound.lsb, 0.5))


@pytest.mark.parametrize(
    ("d_out", "codes"),
    [
        (_domain("int8", 0.0201 * 1.001, 3), 0),  # two observers of one range: 0.1 % apart, nothing moves
        (_domain("int8", 0.0201 * 1.012, 3), 2),  # campaign case 00169's 1.2 %: moves codes
        (_domain("int16", 0.0201 * 1.001, 0), None),  # another dtype: the buffer differs, no bound
    ],
)
def test_a_negate_with_a_scale_a_hair_apart(d_out, codes) -> None:
    bound = dropped_requant(_domain("int8", 0.0201, 3), d_out, ZP_ONLY)
    if codes is None:
        assert bound is None
    else:
        assert bound is not None and bound.codes == codes and bound.within_rounding is (codes == 0)
        assert _moved(_domain("int8", 0.0201, 3), d_out, ZP_ONLY)[1] <= codes


def test_no_bound_for_what_has_no_fixed_numbers() -> None:
    d = _domain("int8", 0.1, 0)
    pc = Domain.quantized("int8", (0.1, 0.2), (0, 0), -128, 127, axis=0)
    assert dropped_requant(d, pc, COPY) is None and dropped_requant(pc, d, COPY) is None
    assert dropped_requant(Domain("float32"), d, COPY) is None
