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
- A and B are per-tensor (of any integer dtype: Arm keeps the codes in A's);
- B's range holds every value that survives the clamps downstream (the
  reference clips to B, the target does not);
- B's rounding moves a code of A by at most one: the grid of A lies in B's, or
  the half steps of all carried grids on the chain stay under a step of A;
- an activation copies codes with bounds quantized in its *output* domain
  (Arm's QuantizeClampArgumentsPass): those codes must be the bounds in A.
  Consecutive activations are one clamp (FuseConsecutiveClampsPass): their
  composed bounds are quantized in the last one's output domain.
The read at the end of the chain is an ordinary fold check against A.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch.fx as fx

from qflow.domain import Domain
from qflow.ir import activations
from qflow.ir.fx_nodes import target_name
from qflow.ops import base_name

#: A predicate on FX nodes: does the target lower this node as a copy of its single input's codes?
CopiesCodes = Callable[[fx.Node], bool]


@dataclass(frozen=True)
class Carry:
    """A requant dropped and carried: the codes are still in `actual`."""

    source: str  # the code copy at the chain's start, whose input codes are in `actual`
    actual: Domain
    lo: float  # the real values the codes can hold (the clamps upstream cut A's range)
    hi: float
    rounding: float  # the sum of the half steps of the skipped grids (real units)


def _is(node: fx.Node, name: str) -> bool:
    return node.op == "call_function" and base_name(target_name(node)) == name


def is_quantize(node: fx.Node) -> bool:
    return _is(node, "quantize_per_tensor")


def is_dequantize(node: fx.Node) -> bool:
    return _is(node, "dequantize_per_tensor")


def _pure(node: fx.Node, copies: CopiesCodes) -> bool:
    """A code copy that clamps nothing (a view, a slice): it may sit between a DQ and the copy a Q follows."""
    return copies(node) and activations.bounds(node) is None


def upstream_quantize(x: fx.Node, copies: CopiesCodes) -> fx.Node | None:
    """The quantize whose codes copy `x` reads (``Q → DQ → pure copies → x``), if any."""
    node = x.args[0] if x.args else None
    while isinstance(node, fx.Node) and _pure(node, copies) and node.args and isinstance(node.args[0], fx.Node):
        node = node.args[0]
    if isinstance(node, fx.Node) and is_dequantize(node) and isinstance(node.args[0], fx.Node):
        return node.args[0] if is_quantize(node.args[0]) else None
    return None


def dequant_leaves(
    x: fx.Node, sources: Callable[[fx.Node], list[fx.Node]], copies: CopiesCodes
) -> list[fx.Node] | None:
    """The dequantizes whose codes `x` copies (through pure copies, cat and stack), or None if it copies others."""
    out: list[fx.Node] = []
    todo = list(sources(x))
    while todo:
        n = todo.pop()
        if is_dequantize(n):
            out.append(n)
        elif _pure(n, copies):
            todo.extend(sources(n))
        else:
            return None
    return out or None


def _sole_user(node: fx.Node) -> fx.Node | None:
    return next(iter(node.users)) if len(node.users) == 1 else None


def fuses_into_next_clamp(x: fx.Node, fuse: bool = True) -> bool:
    """Arm's FuseConsecutiveClampsPass: an activation whose quantize → dequantize
    feed only another activation becomes one clamp with the second's output
    qparams; the requant between them is dropped and its bounds are quantized
    in the second's output domain. `fuse`: does the target do that at all?"""
    if not fuse or activations.bounds(x) is None:
        return False
    q = _sole_user(x)
    dq = _sole_user(q) if q is not None and is_quantize(q) else None
    nxt = _sole_user(dq) if dq is not None and is_dequantize(dq) else None
    return nxt is not None and activations.bounds(nxt) is not None and nxt.args[0] is dq


def fused_bounds(x: fx.Node, fuse: bool = True) -> tuple[float | None, float | None] | None:
    """The bounds of activation `x` composed with those of the activations fused into it."""
    b = activations.bounds(x)
    if b is None or not fuse:
        return b
    lo, hi = b
    dq = x.args[0]
    q = dq.args[0] if isinstance(dq, fx.Node) and is_dequantize(dq) else None
    prev = q.args[0] if isinstance(q, fx.Node) and is_quantize(q) else None
    if isinstance(prev, fx.Node) and fuses_into_next_clamp(prev):
        plo, phi = fused_bounds(prev)  # type: ignore[misc]
        lo = plo if lo is None else lo if plo is None else max(lo, plo)
        hi = phi if hi is None else hi if phi is None else min(hi, phi)
    return lo, hi


def _clamp_of(w: fx.Node, lo: float, hi: float) -> tuple[float, float]:
    b = activations.bounds(w) or (None, None)
    return (lo if b[0] is None else max(lo, b[0])), (hi if b[1] is None else min(hi, b[1]))


def _copy_step(dq: fx.Node, copies: CopiesCodes) -> list[tuple[fx.Node, list[fx.Node]]] | None:
    """The ``DQ → pure copies → code copy → Q`` steps below a dequantize (as
    (the copy the quantizes follow, the quantizes)), or None if a user reads its codes."""
    out = []
    todo = list(dq.users)
    while todo:
        w = todo.pop()
        if not copies(w) or not w.users:
            return None
        if all(is_quantize(u) for u in w.users):
            out.append((w, list(w.users)))
        elif _pure(w, copies) and not any(is_quantize(u) for u in w.users):
            todo.extend(w.users)
        else:  # a clamp with no quantize after it, or a copy read both ways
            return None
    return out


def readers_and_clamps(q: fx.Node, copies: CopiesCodes) -> tuple[list[str], float, float] | None:
    """Follow quantize `q` through ``DQ → code copy → Q`` steps.

    Returns (the quantizes one step down, and the loosest interval the clamps
    on any path keep, down to where the path's codes are read), or None if
    anything but such a step reads `q`'s codes: a consumer of a dequantize
    that is no code copy into quantizes, a graph output, any other user.
    """
    reached: list[str] = []
    lo, hi = math.inf, -math.inf
    todo: list[tuple[fx.Node, float, float, bool]] = [(q, -math.inf, math.inf, True)]
    while todo:
        node, plo, phi, first = todo.pop()
        steps: list[tuple[fx.Node, list[fx.Node]]] | None = []
        if not node.users or not all(is_dequantize(u) for u in node.users):
            steps = None
        else:
            for dq in node.users:
                step = _copy_step(dq, copies)
                if step is None:
                    steps = None
                    break
                steps.extend(step)  # type: ignore[union-attr]
        if steps is None or not steps:  # the codes are read here: the path ends
            if first:
                return None
            lo, hi = min(lo, plo), max(hi, phi)
            continue
        for w, qs in steps:
            wlo, whi = _clamp_of(w, plo, phi)
            if first:
                reached.extend(u.name for u in qs)
            todo.extend((u, wlo, whi, False) for u in qs)
    return reached, lo, hi


def value_range(
    x: fx.Node, actual: Domain, upstream: Carry | None, sources: list[fx.Node], fuse: bool = True
) -> tuple[float, float]:
    """The real values copy `x` passes on: A's range, cut by the clamps before it and its own."""
    if upstream is not None:
        lo, hi = upstream.lo, upstream.hi
    else:
        lo, hi = math.inf, -math.inf
        a_lo, a_hi = real_range(actual)
        for dq in sources:  # Q(activation(...)) → DQ → x: the activation's bounds hold
            q = dq.args[0] if is_dequantize(dq) else None
            prev = q.args[0] if isinstance(q, fx.Node) and is_quantize(q) else None
            b = fused_bounds(prev, fuse) if isinstance(prev, fx.Node) else None
            s_lo = a_lo if b is None or b[0] is None else max(a_lo, b[0])
            s_hi = a_hi if b is None or b[1] is None else min(a_hi, b[1])
            lo, hi = min(lo, s_lo), max(hi, s_hi)
    return _clamp_of(x, lo, hi)


def real_range(d: Domain) -> tuple[float, float]:
    return (d.qmin - d.zero_point) * d.scale, (d.qmax - d.zero_point) * d.scale  # type: ignore[operator]


def _grid_inside(a: Domain, b: Domain) -> bool:
    """Every real value on grid a is on grid b (both contain 0: a's step is a multiple of b's)."""
    k = a.scale / b.scale  # type: ignore[operator]
    return k >= 1 - 1e-9 and abs(k - round(k)) <= 1e-6 * k


def _bound_codes_agree(x: fx.Node, actual: Domain, declared: Domain, fuse: bool) -> str | None:
    """An activation's bounds quantized in `declared`, applied to codes in `actual`: a reason if wrong."""
    if fuses_into_next_clamp(x, fuse):
        return None  # its bounds are quantized with the next activation's (checked there)
    b = fused_bounds(x, fuse)
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


def carry(
    q: fx.Node,
    x: fx.Node,
    actual: Domain,
    declared: Domain,
    upstream: Carry | None,
    sources: list[fx.Node],
    copies: CopiesCodes,
    fuse_clamps: bool = True,
) -> tuple[Carry | None, str, list[str]]:
    """Is the requant `actual` → `declared` that the fold of quantize `q` into
    copy `x` drops cancelled further down? (the Carry, or None and why not;
    the quantizes that take the codes on). `fuse_clamps`: the target makes
    consecutive activations one clamp (`Target.fuses_consecutive_clamps`)."""
    if actual.per_channel or declared.per_channel or actual.is_float or declared.is_float:
        return None, "a per-channel or float domain", []
    walk = readers_and_clamps(q, copies)
    if walk is None:
        return None, f"the codes are read as {declared}", []
    reached, down_lo, down_hi = walk
    if (why := _bound_codes_agree(x, actual, declared, fuse_clamps)) is not None:
        return None, f"{x.name} clamps the codes in {actual}, but {why}", reached
    lo, hi = value_range(x, actual, upstream, sources, fuse_clamps)
    keep_lo, keep_hi = max(lo, down_lo), min(hi, down_hi)
    b_lo, b_hi = real_range(declared)
    if keep_lo <= keep_hi and (b_lo > keep_lo or b_hi < keep_hi):
        return None, f"{declared} clips values in [{keep_lo:.6g}, {keep_hi:.6g}] that the chain keeps", reached
    inside = _grid_inside(actual, declared)
    rounding = (upstream.rounding if upstream else 0.0) + (0.0 if inside else declared.scale / 2)  # type: ignore[operator]
    # Skipping roundings moves a value by at most their half steps: no code of A when at most half its
    # step. More is not carried: the codes the target keeps then differ from the reference's by a code
    # of A or more, for many values, not only ties — weighed to the outputs as any dropped requant is
    # (transformer campaign 03214-tx-arm-custom: an A → B → A round trip through a 1.3x coarser B, one
    # code of A into a matmul, 210 output LSB off on the TOSA reference model; 00130-tx-arm-custom: a
    # 96x coarser B, 53 LSB off)
    if rounding > actual.scale / 2:  # type: ignore[operator]
        return None, f"skipping the roundings to {declared} and before moves values by up to {rounding:.4g}", reached
    source = upstream.source if upstream else x.name
    return Carry(source, actual, lo, hi, rounding), "", reached
