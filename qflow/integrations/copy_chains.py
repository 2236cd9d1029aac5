"""Requants a code-copying target drops, and when dropping them is exact.

On a target that lowers a view, a slice or an activation as a copy of its
input's codes (Arm), the quantize after it is folded away: the codes stay in
the input's domain A while the graph declares B. That is a miscompile only if
some op *reads* the codes as B. When every path from the quantize runs through
more code copies into further quantizes (which drop their requants too), the
codes are still in A there, and the requant back into A that one of them
declares is exact — the pair cancels (campaign case 00061: a slice requantizes
A → B, the relu after it B → A).

A dropped requant is *carried* when, besides nobody reading B:
- A and B are per-tensor and of one dtype (a copy cannot change the dtype);
- B's range holds every value that survives the clamps downstream (the
  reference clips to B, the target does not);
- B's rounding cannot move a code of A: the grid of A lies in B's, or the half
  steps of all carried grids on the chain stay under half a step of A;
- an activation copies codes with bounds quantized in its *output* domain
  (Arm's QuantizeClampArgumentsPass): those codes must be the bounds in A.
The read at the end of the chain is an ordinary fold check against A.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch.fx as fx

from qflow.domain import Domain
from qflow.integrations import activations

#: A predicate on FX nodes: does the target lower this node as a copy of its single input's codes?
CopiesCodes = Callable[[fx.Node], bool]


@dataclass(frozen=True)
class Carry:
    """A requant dropped and carried: the codes are still in `actual`."""

    source: str  # the code copy at the chain's start, whose input codes are in `actual`
    actual: Domain
    rounding: float  # the sum of the half steps of the carried grids on the chain (real units)


def _is(node: fx.Node, name: str) -> bool:
    from qflow.integrations.fx import target_name
    from qflow.ops import base_name

    return node.op == "call_function" and base_name(target_name(node)) == name


def is_quantize(node: fx.Node) -> bool:
    return _is(node, "quantize_per_tensor")


def is_dequantize(node: fx.Node) -> bool:
    return _is(node, "dequantize_per_tensor")


def upstream_quantize(x: fx.Node) -> fx.Node | None:
    """The quantize whose codes copy `x` reads (``Q → DQ → x``), if that is its input."""
    dq = x.args[0] if x.args else None
    if isinstance(dq, fx.Node) and is_dequantize(dq) and isinstance(dq.args[0], fx.Node) and is_quantize(dq.args[0]):
        return dq.args[0]
    return None


def readers_and_clamps(q: fx.Node, copies: CopiesCodes) -> tuple[list[str], float, float] | None:
    """Follow quantize `q` through ``DQ → code copy → Q`` steps.

    Returns (the quantizes reached, the lowest lower bound and the highest
    upper bound of the clamps on the way), or None if anything else reads the
    codes: a consumer of a dequantize that is no code copy into quantizes, a
    graph output, any other user.
    """
    reached: list[str] = []
    lo, hi = math.inf, -math.inf
    for dq in q.users:
        if not is_dequantize(dq):
            return None
        for w in dq.users:
            if not copies(w) or not w.users or not all(is_quantize(u) for u in w.users):
                return None
            b = activations.bounds(w) or (None, None)
            lo = min(lo, -math.inf if b[0] is None else b[0])
            hi = max(hi, math.inf if b[1] is None else b[1])
            reached.extend(u.name for u in w.users)
    return (reached, lo, hi) if reached else None


def real_range(d: Domain) -> tuple[float, float]:
    return (d.qmin - d.zero_point) * d.scale, (d.qmax - d.zero_point) * d.scale  # type: ignore[operator]


def _grid_inside(a: Domain, b: Domain) -> bool:
    """Every real value on grid a is on grid b (both contain 0: a's step is a multiple of b's)."""
    k = a.scale / b.scale  # type: ignore[operator]
    return k >= 1 - 1e-9 and abs(k - round(k)) <= 1e-6 * k


def _bound_codes_agree(x: fx.Node, actual: Domain, declared: Domain) -> str | None:
    """An activation's bounds quantized in `declared`, applied to codes in `actual`: a reason if wrong."""
    b = activations.bounds(x)
    if b is None:
        return None
    for v, side in ((b[0], "lower"), (b[1], "upper")):
        if v is None:
            continue
        used = min(max(activations.code(declared, v, 0), declared.qmin), declared.qmax)
        meant = activations.code(actual, v, 0)
        # beyond the code range of `actual` a bound clamps nothing, wherever it lies
        used, meant = (min(max(c, actual.qmin), actual.qmax) for c in (used, meant))
        if used != meant:
            return f"its {side} bound {v:g} is code {used} in {declared} but code {meant} in {actual}"
    return None


def why_not_carried(
    q: fx.Node, x: fx.Node, actual: Domain, declared: Domain, upstream: Carry | None, copies: CopiesCodes
) -> tuple[str | None, float, list[str]]:
    """(None if the requant `actual` → `declared` dropped at quantize `q` after
    copy `x` is exact because it is carried, else the reason; the chain's
    rounding so far; the quantizes that take the codes on)."""
    if actual.per_channel or declared.per_channel or actual.is_float or declared.is_float:
        return "a per-channel or float domain", 0.0, []
    if actual.dtype != declared.dtype:
        return f"a copy cannot turn {actual.dtype} codes into {declared.dtype}", 0.0, []
    walk = readers_and_clamps(q, copies)
    if walk is None:
        return f"the codes are read as {declared}", 0.0, []
    reached, lo, hi = walk
    if (why := _bound_codes_agree(x, actual, declared)) is not None:
        return f"{x.name} clamps the codes in {actual}, but {why}", 0.0, reached
    own = activations.bounds(x) or (None, None)
    a_lo, a_hi = real_range(actual)
    lo = max(a_lo, lo, -math.inf if own[0] is None else own[0])
    hi = min(a_hi, hi, math.inf if own[1] is None else own[1])
    b_lo, b_hi = real_range(declared)
    if b_lo > lo or b_hi < hi:
        return f"{declared} clips values in [{lo:.6g}, {hi:.6g}] that the chain keeps", 0.0, reached
    rounding = (upstream.rounding if upstream else 0.0) + (
        0.0 if _grid_inside(actual, declared) else declared.scale / 2  # type: ignore[operator]
    )
    if rounding >= actual.scale / 2:  # type: ignore[operator]
        return f"rounding to {declared} can move a code of {actual}", rounding, reached
    return None, rounding, reached
