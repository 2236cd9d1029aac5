"""How far a dropped requant moves the output, in output LSB.

When a backend lowers an op by copying codes (cat, view, a clamp) or by
applying the zero points only (TOSA NEGATE), a requant across it is lost: the
consumer reads codes of the input domain as if they were in the declared
output domain. Whether that computes wrong is a question of numbers, not of
equal domains: two observers of one range give scales 0.1 % apart, and no
reachable code moves. This module answers it exactly, for every code the
input can hold.

For an input code ``c`` in ``[lo, hi]`` (the input domain's code range, or a
tighter reachable range), the program as quantized asks for the output code
``clamp(round(r * (c - zp_in)) + zp_out, qmin_out, qmax_out)`` with
``r = s_in / s_out``. The backend writes ``c`` itself (code copy), or, applying
the zero points only to an op ``v = f(c - zp_in)`` with ``|f(v)| <= |v|``
(negate, abs, pooling), ``clamp(v + zp_out)`` to its dtype where the program
asks for ``clamp(round(r * v) + zp_out, qmin_out, qmax_out)``. The real error
before the final rounding, in output LSB, is piecewise linear in ``c`` (or
``v``): its largest magnitude is at an end of the range or where a clamp
starts to bite, so evaluating it there bounds it over every code, exactly up
to the integer grid. When it is at most half an LSB (the rounding of the
requant itself), every code the backend writes is one the requant would round
to, up to a tie: the program computes right. Otherwise codes move, by up to
``floor(max |e| + 1/2)``.

Torch-free and solver-free: the tests compare it with every code of int8 and
int16 enumerated.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass

from qflow.domain import DTYPE_RANGE, Domain

#: The obligation holds when the real error stays within the rounding of one requant.
TOLERANCE_LSB = 0.5
#: How the backend realises the op the requant was dropped across.
COPY, ZP_ONLY = "code-copy", "zp-only"


@dataclass(frozen=True)
class Bound:
    """The worst-case error a dropped requant causes, over every reachable input code."""

    lsb: float  # max |e| in output LSB, before the final rounding
    codes: int  # the most any output code moves

    @property
    def within_rounding(self) -> bool:
        return self.lsb <= TOLERANCE_LSB

    def __str__(self) -> str:
        if self.codes == 0:
            return f"moves no output code (at most {self.lsb:.3g} output LSB before rounding)"
        return f"moves output codes by up to {self.codes} LSB ({self.lsb:.3g} output LSB before rounding)"


@dataclass(frozen=True)
class CodeErrors:
    """How far a backend's op is off the op it stands for, in output LSB, for each input code of
    `domain` from its qmin up (`errors`: float32s, packed; an int16 TABLE's 65535). `prove` reads the
    worst over the codes the program reaches."""

    #: The program's op the errors are of, and the domain of its input codes (`errors` index them).
    node: str
    domain: Domain
    errors: bytes
    #: Under how far off the op still counts as computing right (the target's measured band).
    within: float = TOLERANCE_LSB
    #: Was the op's lowering measured off on the target (then off beyond `within` where the program
    #: reaches is an error), or measured right on other inputs (then it is unproven)?
    measured_off: bool = True

    def worst(self, codes: tuple[int, int] | None = None) -> tuple[float, int]:
        """(the largest error over `codes` — every code when None —, a code where it is)."""
        errors = array("f", self.errors)
        lo, hi = codes if codes is not None else (self.domain.qmin, self.domain.qmax)
        lo, hi = max(lo, self.domain.qmin) - self.domain.qmin, min(hi, self.domain.qmax) - self.domain.qmin
        if lo > hi:
            return 0.0, self.domain.qmin
        span = errors[lo : hi + 1]
        at = max(range(len(span)), key=span.__getitem__)
        return float(span[at]), at + lo + self.domain.qmin


def dropped_requant(d_in: Domain, d_out: Domain, how: str, code_range: tuple[int, int] | None = None) -> Bound | None:
    """The bound for codes of `d_in` read as `d_out` across an op lowered as `how`
    (COPY or ZP_ONLY), over `code_range` (default: `d_in`'s whole range). None
    when the question has no fixed answer (a float, per-channel, run-time or
    symbolic side, no scale, or another dtype: then the buffer itself differs)."""
    for d in (d_in, d_out):
        if d.is_float or d.per_channel or d.opaque is not None or not isinstance(d.scale, float) or d.scale <= 0:
            return None
    if d_in.dtype != d_out.dtype or how not in (COPY, ZP_ONLY):
        return None
    lo, hi = code_range if code_range is not None else (d_in.qmin, d_in.qmax)
    r = d_in.scale / d_out.scale
    zi, zo = int(d_in.zero_point), int(d_out.zero_point)  # type: ignore[arg-type]
    qlo, qhi = d_out.qmin, d_out.qmax
    if how == COPY:  # in terms of c: the backend writes c
        xs = [lo, hi, *(zi + (q - zo) / r for q in (qlo, qhi))]
        xs = [x for x in xs if lo <= x <= hi]

        def err(c: float) -> float:
            return c - min(max(r * (c - zi) + zo, qlo), qhi)

    else:  # in terms of v = f(c - zi), |v| <= m: the backend writes clamp(v + zo) to the dtype
        m = max(abs(lo - zi), abs(hi - zi))
        dlo, dhi = DTYPE_RANGE[d_out.dtype]
        xs = [-m, m, *((q - zo) / r for q in (qlo, qhi)), dlo - zo, dhi - zo]
        xs = [x for x in xs if -m <= x <= m]

        def err(v: float) -> float:
            return min(max(v + zo, dlo), dhi) - min(max(r * v + zo, qlo), qhi)

    worst = max(xs, key=lambda x: abs(err(x)))
    e = abs(err(worst))
    return Bound(lsb=e, codes=0 if e < 0.5 else math.floor(e + 0.5))


@dataclass(frozen=True)
class Clamp:
    """An activation a chain of dropped requants passes: the program clamps the reals to `real` before it
    requantizes; the backend clamps the codes it copies to `codes` (the bounds in the requant's domain, as
    the lowering wrote them: Cortex-M's QuantizedClampActivationPass)."""

    real: tuple[float, float]
    codes: tuple[int, int]


def copied_through(
    src: Domain,
    hops: list[Domain],
    clamps: list[Clamp | None] | None = None,
    codes: tuple[int, int] | None = None,
) -> float | None:
    """The largest real error of codes of `src` copied through a chain of dropped requants (each hop's
    activation, `clamps`, clamping them on the way) and read in the last hop's domain, against the
    program's chain of requants (each rounding half to even, and both ways within 1e-6 of a tie), over
    the codes of `src` in `codes` (default: all). A round trip through a finer grid (int8 → int16 →
    int8) is exact; through a coarser one the backend is the more precise. None when a side has no
    fixed per-tensor domain or the codes do not fit the last one."""
    last = hops[-1]
    for d in (src, *hops):
        if d.is_float or d.per_channel or d.opaque is not None or not isinstance(d.scale, float) or d.scale <= 0:
            return None
    if not (DTYPE_RANGE[last.dtype][0] <= src.qmin and src.qmax <= DTYPE_RANGE[last.dtype][1]):
        return None
    steps = list(zip(hops, clamps or [None] * len(hops), strict=True))
    lo, hi = codes if codes is not None else (src.qmin, src.qmax)
    worst = 0.0
    for c in range(max(lo, src.qmin), min(hi, src.qmax) + 1):
        xs, b = {src.scale * (c - int(src.zero_point))}, c  # type: ignore[arg-type, operator]
        for d, clamp in steps:
            if clamp is not None:
                xs = {min(max(x, clamp.real[0]), clamp.real[1]) for x in xs}
                b = min(max(b, clamp.codes[0]), clamp.codes[1])
            xs = {_requant(x, d, k) for x in xs for k in _roundings(x / d.scale)}  # type: ignore[operator]
        got = last.scale * (b - int(last.zero_point))  # type: ignore[arg-type, operator]
        worst = max(worst, *(abs(got - x) for x in xs))
    return worst


def _roundings(t: float) -> tuple[int, ...]:
    f = math.floor(t)
    near_tie = abs(t - f - 0.5) < 1e-6
    return (f, f + 1) if near_tie else (round(t),)


def _requant(x: float, d: Domain, k: int) -> float:
    zp = int(d.zero_point)  # type: ignore[arg-type]
    return d.scale * (min(max(k + zp, d.qmin), d.qmax) - zp)  # type: ignore[operator]
