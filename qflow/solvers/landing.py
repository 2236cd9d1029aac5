"""Where a violation's wrong codes land, and how wrong they are there (for `impact`).

A dropped requant hands its quantize the codes of its input's domain: they are off by at most the
copy's bound (`bounds.dropped_requant`), in steps of the declared domain. A chain of them (a reshape
then a view, each with its own requant) hands the last one the first one's source codes, weighed as a
whole (`bounds.copied_through`: a round trip through a finer grid is exact). Where qflow knows only
that the codes are of the right dtype (a clamp on the way, a merged duplicate), they are anywhere in
the declared domain's range. A comparison of codes with a real threshold (Cortex-M) lands a bool that can be
either, where its input reaches the codes it flips on; alone, it is weighed on the elements it flips. A
violation no program output depends on lands nothing. Any other violation has no bound: nothing is weighed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import networkx as nx

from qflow import bounds, impact, ranges
from qflow.bounds import Bound
from qflow.domain import DTYPE_RANGE, Domain
from qflow.graph import DomainGraph, Obligation, ObligationKind
from qflow.ops import OpClass, base_name
from qflow.ranges import Interval


@dataclass(frozen=True)
class Read:
    """A violated obligation: the domain produced, the one declared, and whether the backend copies
    the codes across it (a dropped requant; not a claim about a real tensor on a grid)."""

    obligation: Obligation
    produced: Domain | None
    expected: Domain | None
    copied: bool


@dataclass(frozen=True)
class Landed:
    """Where wrong codes land: value → the real error of its codes and the interval the backend's
    values there lie in; the values whose error already holds what they inherit (a chain's end)."""

    errors: dict[str, float]
    backend: dict[str, Interval]
    replaced: frozenset[str]
    #: a chain's end → the value whose codes the chain copies: the error those carry from upstream reaches
    #: the end too (the chain's own error is only what its dropped requants add)
    inherits: dict[str, str] = field(default_factory=dict)
    #: the program's value ranges to weigh with, where they are narrower than the whole program's (on the
    #: elements one flipped comparison picks: `_on_flipped`); `backend` then holds every value's
    program: dict[str, Interval] | None = None


def land(dg: DomainGraph, reads: list[Read], rng: Mapping[str, Interval], alone: bool = True) -> Landed | None:
    """Where each violation lands, or None when one has no bound. A copy is weighed over the codes
    its source can reach (`rng`, the program's value ranges). `alone`: a lone flipped comparison is
    weighed on the elements it flips (`_on_flipped`)."""
    copies = {  # the quantize a dropped requant lands on → its read
        r.obligation.edge[1]: r
        for r in reads
        if r.obligation.kind is ObligationKind.NO_FOLD_CHANGE and r.obligation.edge and r.produced and r.expected
        and r.obligation.edge[1] in dg.g
    }  # fmt: skip
    errors: dict[str, float] = {}
    backend: dict[str, Interval] = {}
    replaced = set()
    inherits: dict[str, str] = {}
    merges = set()  # (a merged duplicate has one obligation per duplicate a repair changes: one read)
    for r in reads:
        if r.obligation.finding_kind == "merged-duplicate-users":
            if (r.obligation.node, r.obligation.other) in merges:
                continue
            merges.add((r.obligation.node, r.obligation.other))
        spot = r.obligation.edge[1] if r.obligation.edge else None
        chain = _chain(dg, copies, spot) if spot in copies and copies[spot] is r else None
        if chain is not None and (len(chain[0]) > 2 or chain[1] != [None]):  # (more than one copy, or a clamp)
            domains, clamps, start = chain
            codes = _source_codes(dg, reads, domains[0], start, rng)
            eps = bounds.copied_through(domains[0], domains[1:], clamps, codes)
            if eps is not None:  # (the codes of the chain's source, clamped on the way, read as its end's)
                lo, hi = codes or (domains[0].qmin, domains[0].qmax)
                for c in clamps:
                    lo, hi = (lo, hi) if c is None else (min(max(x, c.codes[0]), c.codes[1]) for x in (lo, hi))
                errors[spot], backend[spot] = eps, _read_as(domains[-1], (lo, hi))  # type: ignore[index]
                replaced.add(spot)  # type: ignore[arg-type]
                inherits[spot] = _inherited(dg, start, copies)  # type: ignore[index]
                continue
        if (back := _claim_round_trip(dg, r, reads, rng)) is not None:  # (a folded partition's dropped requant, undone)
            spot, eps, read, start = back
            errors[spot], backend[spot], inherits[spot] = eps, read, start
            replaced.add(spot)
            continue
        at = _landing(dg, r, rng)
        if at is None:
            return None
        if at[0] in errors:  # (two violations at one value: their errors add up, anywhere)
            replaced.discard(at[0])
        elif at[3]:
            replaced.add(at[0])
        errors[at[0]] = errors.get(at[0], 0.0) + at[1]
        backend[at[0]] = at[2] if at[0] not in backend else ranges.UNBOUNDED
    if any(e > 0 and not _linked(dg, n) for n, e in errors.items()):
        return None  # (`impact` follows no edge out of it to what the program returns)
    others = {_spot(r.obligation) for r in reads if r.obligation.finding_kind != "mixed-input-domains"}
    for r in reads:  # (a misread input of a copy: the copy also carries what its first input carries)
        ob = r.obligation
        if ob.finding_kind != "mixed-input-domains" or not ob.other or ob.node in others | replaced:
            continue
        wrong = {n for n, e in errors.items() if e > 0 and n != ob.node}
        tainted = wrong.union(*(nx.descendants(dg.g, n) for n in wrong))
        if ob.node in errors and not any(p in tainted for p in dg.g._pred[ob.node] if p != ob.other):
            replaced.add(ob.node)
            inherits[ob.node] = ob.other
    landed = Landed(errors, backend, frozenset(replaced), inherits)
    erring = [n for n, e in errors.items() if e > 0]
    flips = [r.obligation for r in reads if is_flip(r.obligation) and r.obligation.node in erring]
    if alone and len(erring) == 1 and len(flips) == 1 and (on := _on_flipped(dg, flips[0], rng, backend)) is not None:
        return replace(landed, program=on[0], backend=on[1])
    return landed


def _read_as(d: Domain, codes: tuple[int, int]) -> Interval:
    """The real values codes in `codes` stand for, read in `d`."""
    zp = int(d.zero_point)  # type: ignore[arg-type]
    return d.scale * (codes[0] - zp), d.scale * (codes[1] - zp)  # type: ignore[operator]


def _read_by_outputs(dg: DomainGraph, node: str) -> bool:
    """Might a program output depend on `node`? No only for a top-level value of a Q/DQ program none
    of whose outputs it reaches (a subgraph's or a delegate's values, `a/b`, are linked by their call)."""
    return dg.form != "qdq" or "/" in node or _linked(dg, node)


def _linked(dg: DomainGraph, node: str) -> bool:
    """Is `node` a program output or does an edge path lead from it to one? Not a value of a subgraph
    (`a/b`) its call reads with no edge from it — so a delegate's returned values are linked to their
    `getitem` (measured: a dropped requant inside a delegate, 63 output LSB off on the TOSA reference
    model, weighed as reaching no output and proved before they were)."""
    outputs = set(dg.outputs)
    return node in outputs or not outputs.isdisjoint(nx.descendants(dg.g, node))


def _chain(
    dg: DomainGraph, copies: dict[str, Read], spot: str
) -> tuple[list[Domain], list[bounds.Clamp | None], str] | None:
    """([the codes' source domain, then each requant the program asks for], [the clamp of each on the
    way, None for a pass-through op's], the first one's op) along the dropped requants that end at
    `spot`: each one's op reads, through dequantizes and pass-through ops only, the value the one
    before lands on. None for an activation whose clamp of the codes is not known."""
    r = copies[spot]
    assert r.produced is not None and r.expected is not None
    clamp = _clamp(dg, r.obligation)
    if clamp is None and r.obligation.finding_kind == "requant-across-activation":
        return None  # (it clamps the codes by bounds in another domain qflow does not know: no copy)
    cur = r.obligation.node
    for _ in range(64 if dg.value(cur).op_class in (OpClass.PASSTHROUGH, OpClass.ACTIVATION) else 0):
        preds = dg.g._pred[cur]
        if len(preds) != 1:
            break
        cur = next(iter(preds))
        if cur in copies:
            up = _chain(dg, copies, cur)
            if up is None:
                break
            domains, clamps, start = up
            return [*domains, r.expected], [*clamps, clamp], start
        if dg.value(cur).op_class not in (OpClass.DEQUANTIZE, OpClass.PASSTHROUGH):
            break
    return [r.produced, r.expected], [clamp], r.obligation.node


def _claim_round_trip(
    dg: DomainGraph, r: Read, reads: list[Read], rng: Mapping[str, Interval]
) -> tuple[str, float, Interval, str] | None:
    """A folded partition's pass-through op claiming a domain its input's codes are not in (the requant the fold
    dropped), whose codes reach, through copies only, one claiming their own domain back (a slice into a finer
    domain, then a clamp back: campaign case 00495-arm-custom). The backend copies the codes all the way (an
    activation clamps them with its bounds in its own domain); the program requantizes at each claim: as a chain
    of dropped requants in the Q/DQ form, weighed as a whole on its last copy (`bounds.copied_through`).
    (that copy, its error, the interval the backend's values lie in there, the value whose codes it copies), or
    None (the chain ends elsewhere, or a copy on the way is read by anything else)."""
    ob = r.obligation
    src, claim = r.produced, r.expected
    if ob.kind is not ObligationKind.CLAIM or src is None or claim is None or ob.node not in dg.g:
        return None
    preds = list(dg.g._pred[ob.node])
    if dg.value(ob.node).op_class is not OpClass.PASSTHROUGH or len(preds) != 1:
        return None
    hops, clamps, cur = [claim], [None], ob.node
    while hops[-1] != src and len(hops) < 64:
        succs = list(dg.g._succ[cur])
        if len(succs) != 1 or (v := dg.value(succs[0])).op_class not in (OpClass.PASSTHROUGH, OpClass.ACTIVATION):
            return None
        d = v.own_domain
        if d is None or d.is_float or d.per_channel or not isinstance(d.scale, float):
            return None
        clamp = None
        if v.op_class is OpClass.ACTIVATION:  # (Arm quantizes its bounds in its output domain)
            if v.clamp is None:
                return None
            clamp = bounds.Clamp(v.clamp, _codes_in(v.clamp, d))
        hops.append(d)
        clamps.append(clamp)
        cur = succs[0]
    # (the codes the copy reads, its input's; every code, where another violation lands upstream)
    codes = None if _landed_upstream(dg, reads, ob.node) else reach(src, rng.get(preds[0]))
    eps = bounds.copied_through(src, hops, clamps, codes) if hops[-1] == src else None
    if eps is None:
        return None
    lo, hi = codes or (src.qmin, src.qmax)
    for c in clamps:
        lo, hi = (lo, hi) if c is None else (min(max(x, c.codes[0]), c.codes[1]) for x in (lo, hi))
    return cur, eps, _read_as(src, (lo, hi)), preds[0]


def _codes_in(real: Interval, d: Domain) -> tuple[int, int]:
    """Real bounds as codes of `d` (an unbounded side: the end of its range)."""
    zp = int(d.zero_point)  # type: ignore[arg-type]
    lo = d.qmin if math.isinf(real[0]) else min(max(round(real[0] / d.scale) + zp, d.qmin), d.qmax)  # type: ignore[operator]
    hi = d.qmax if math.isinf(real[1]) else min(max(round(real[1] / d.scale) + zp, d.qmin), d.qmax)  # type: ignore[operator]
    return lo, hi


def _clamp(dg: DomainGraph, ob: Obligation) -> bounds.Clamp | None:
    """An activation's dropped requant: its real bounds and the codes the backend clamps to, when known."""
    bounds_ = dg.value(ob.node).clamp if ob.node in dg.g else None
    if ob.finding_kind != "requant-across-activation" or ob.codes is None or bounds_ is None:
        return None
    return bounds.Clamp(bounds_, ob.codes)


def _inherited(dg: DomainGraph, start: str, copies: Mapping[str, Read]) -> str:
    """The value whose error the codes a chain copies carry from upstream: its first op's output, or its
    input where that op lands an error of its own (after the Cortex-M passes a clamp on codes is both the
    activation and its dropped requant)."""
    preds = list(dg.g._pred[start])
    return preds[0] if start in copies and len(preds) == 1 else start


def _source_codes(
    dg: DomainGraph, reads: list[Read], src: Domain, start: str, rng: Mapping[str, Interval]
) -> tuple[int, int] | None:
    """The codes of `src` a chain starting at op `start` reads (the program's), or None (every code)
    when another violation lands upstream of it: then the backend's codes there are not the program's."""
    if _landed_upstream(dg, reads, start):
        return None
    v = dg.value(start)
    first = dg.producer(start, "args[0]") if v.op_class is OpClass.ACTIVATION else start
    return reach(src, rng.get(first)) if first is not None else None


def _landed_upstream(dg: DomainGraph, reads: list[Read], node: str) -> bool:
    """Does one of the violations `reads` land upstream of `node`? Then the backend's codes there are not the
    program's."""
    upstream = nx.ancestors(dg.g, node)
    return any(r.obligation.node in upstream or (r.obligation.edge and r.obligation.edge[1] in upstream) for r in reads)


def reach(d: Domain | None, r: Interval | None) -> tuple[int, int] | None:
    """The codes of `d` that values in `r` round to."""
    if d is None or r is None or d.is_float or d.per_channel or not isinstance(d.scale, float):
        return None
    if not isinstance(d.zero_point, int) or math.isinf(r[0]) or math.isinf(r[1]):
        return None
    lo, hi = ranges.rounded_span(r[0] / d.scale + d.zero_point, r[1] / d.scale + d.zero_point)
    lo, hi = max(d.qmin, int(lo)), min(d.qmax, int(hi))
    return (lo, hi) if lo <= hi else None


def _negated(dg: DomainGraph, node: str, d: Domain, rng: Mapping[str, Interval]) -> tuple[int, int]:
    """The codes a `neg` lowered with zero points only (TOSA NEGATE) writes in `d`'s dtype: its input's
    reachable codes negated about the two zero points, clamped to the dtype (any op else: the dtype)."""
    lo, hi = DTYPE_RANGE[d.dtype]
    read = _neg_input(dg, node, rng)
    if read is None or not isinstance(d.zero_point, int):
        return lo, hi
    (src, codes), zo = read, d.zero_point
    zi = int(src.zero_point)  # type: ignore[arg-type]
    return min(max(-(codes[1] - zi) + zo, lo), hi), min(max(-(codes[0] - zi) + zo, lo), hi)


def _neg_input(dg: DomainGraph, node: str, rng: Mapping[str, Interval]) -> tuple[Domain, tuple[int, int]] | None:
    """(the domain a `neg` reads its input's codes in, the codes of it the program reaches)."""
    preds = list(dg.g._pred[node]) if node in dg.g else []
    if dg.get(node) is None or base_name(dg.value(node).target) != "neg" or len(preds) != 1:
        return None
    src = dg.value(preds[0]).definition.domain
    codes = reach(src, rng.get(preds[0]))
    return (src, codes) if src is not None and codes is not None else None


def _widened(r: Read, codes: tuple[int, int] | None) -> Bound | None:
    """A copy of narrower codes into a wider dtype's domain (int8 codes read as int16): the codes keep
    their values, read in the wider domain (the Arm TOSA artifact's RESCALE reads the int8 tensor with
    the int16 domain's zero point), so the copy's bound holds over the narrower code range."""
    p, e = r.produced, r.expected
    if p is None or e is None or p.is_float or e.is_float or p.dtype == e.dtype:
        return None
    if not (e.qmin <= p.qmin and p.qmax <= e.qmax):
        return None
    return bounds.dropped_requant(replace(p, dtype=e.dtype), e, bounds.COPY, codes or (p.qmin, p.qmax))


def indexing_codes(dg: DomainGraph, ob: Obligation, rng: Mapping[str, Interval]) -> tuple[int, int] | None:
    """The input codes `rng` reaches at the op whose per-code errors (`off_by_code`) `ob` carries; None where
    qflow cannot read them (`ob` is not at that op, or its input has no range on that grid)."""
    off = ob.off_by_code
    if off is None or not (ob.value == off.node or ob.value.endswith(f"/{off.node}")):
        return None
    src = dg.producer(ob.value)
    return reach(off.domain, rng.get(src)) if src is not None else None


def _off_where_reached(dg: DomainGraph, ob: Obligation, rng: Mapping[str, Interval]) -> float:
    """How many codes a violation with an error per input code is off over the input codes `rng` reaches —
    narrower than its recorded bound where `rng` is one piece of a split source (`by_code`); the bound
    where qflow cannot read them."""
    whole = float(ob.bound.codes) if ob.bound is not None else math.inf
    codes = indexing_codes(dg, ob, rng)
    if codes is None or ob.off_by_code is None:
        return whole
    return min(whole, math.ceil(ob.off_by_code.worst(codes)[0] - 1e-9))


def _spot(ob: Obligation) -> str:
    """The value a violation's wrong codes land on."""
    return ob.edge[1] if ob.edge and ob.kind is not ObligationKind.CLAIM else ob.node


def _landing(dg: DomainGraph, r: Read, rng: Mapping[str, Interval]) -> tuple[str, float, Interval, bool] | None:
    """(the value whose codes a violation makes wrong, their real error at most, the interval the
    backend's values there lie in, whether that holds whatever error reaches the value), or None when
    qflow cannot bound it."""
    ob = r.obligation
    codes = reach(r.produced, rng.get(ob.value))
    spot = _spot(ob)
    if spot not in dg.g:
        return None
    if not _read_by_outputs(dg, spot):  # (whatever it computes, no output reads it: dead code)
        return spot, 0.0, ranges.UNBOUNDED, False
    if ob.finding_kind == "merged-duplicate-users":
        return _merged(dg, ob, rng)
    if ob.finding_kind == "mixed-input-domains":
        # (a copy of several inputs' codes reads this one's as the first one's domain: a dropped requant of
        # them, landing on the copy beside what the other inputs give it. Not across dtypes: the backend
        # casts there, which is no copy (measured: 02068-tx-arm-custom, int8 into an int16 where, 105 output
        # LSB beyond the band, more than a copy's bound))
        if r.produced is None or r.expected is None or r.produced.dtype != r.expected.dtype:
            return None
        bound = bounds.dropped_requant(r.produced, r.expected, bounds.COPY, codes)
        at = _as_copy(ob.node, r.produced, r.expected, codes, bound)
        whole = rng.get(ob.node)
        if at is None or whole is None:
            return None
        return ob.node, at[1], (min(at[2][0], whole[0]), max(at[2][1], whole[1])), False
    if ob.finding_kind == "requant-across-activation":
        # (the backend clamps the codes on the way: anywhere in the declared dtype's range)
        declared = r.expected
        if declared is None or not math.isfinite(impact.width(declared)):
            return None
        if ob.codes is not None and (program := rng.get(spot)) is not None:
            # (measured: the backend keeps codes `ob.codes` of the declared domain; the program's lie in `program`)
            lo, hi = _read_as(declared, ob.codes)
            return spot, max(hi, program[1]) - min(lo, program[0]), (lo, hi), True  # (a clamp: whatever reaches it)
        return spot, impact.width(declared), _read_as(declared, DTYPE_RANGE[declared.dtype]), False
    if is_flip(ob):
        return _flipped(dg, ob, rng)
    if ob.finding_kind == "real-constant-on-codes" and ob.codes is not None and ob.bound is not None:
        # (an activation on codes with its bounds as written: its codes, each at most `bound.codes` off —
        # or what the input codes `rng` reaches give, where it knows each code's error)
        at, d = _codes_of(dg, ob.node), ob.expected
        if at is None or d is None or at[1] != d:
            return None
        e, written = _off_where_reached(dg, ob, rng) * d.scale, _read_as(d, ob.codes)  # type: ignore[operator]
        program = rng.get(at[0]) if ob.off_by_code is not None else None
        near = (max(program[0] - e, written[0]), min(program[1] + e, written[1])) if program is not None else written
        return at[0], e, near if near[0] <= near[1] else written, False  # (the codes it writes, within e of ours)
    if ob.off_by_code is not None and ob.bound is not None:
        # (an op the backend computes off, by up to `bound` codes where the program's input reaches: its
        # codes are the program's, that far off either way)
        at, d = _codes_of(dg, ob.value), ob.expected
        program = rng.get(at[0]) if at is not None else None
        if at is None or d is None or at[1] != d or program is None or (span := ranges.domain_range(d)) is None:
            return None
        e = _off_where_reached(dg, ob, rng) * d.scale  # type: ignore[operator]
        return at[0], e, (max(program[0] - e, span[0]), min(program[1] + e, span[1])), False
    if ob.finding_kind == "dropped-scale" and ob.bound is not None and ob.expected is not None:
        # (zero points only, a bound over every code as a copy's; the backend writes the op's codes
        # clamped to the dtype: anywhere in it. On its requant in a Q/DQ program, on the op itself once folded)
        d = ob.expected
        if not math.isfinite(impact.width(d)):
            return None
        read = _neg_input(dg, ob.node, rng)  # (over the codes its input reaches, where it is known)
        reached = bounds.dropped_requant(read[0], d, bounds.ZP_ONLY, read[1]) if read is not None else None
        codes = min(ob.bound.codes, reached.codes) if reached is not None else ob.bound.codes
        return spot, codes * d.scale, _read_as(d, _negated(dg, ob.node, d, rng)), False  # type: ignore[operator]
    if not r.copied or r.produced is None or r.expected is None or not math.isfinite(impact.width(r.expected)):
        return None
    bound = bounds.dropped_requant(r.produced, r.expected, bounds.COPY, codes) or _widened(r, codes)
    return _as_copy(spot, r.produced, r.expected, codes, bound)


def _flipped(dg: DomainGraph, ob: Obligation, rng: Mapping[str, Interval]) -> tuple[str, float, Interval, bool] | None:
    """A comparison of codes with a threshold written for reals: its outcome flips on codes `ob.codes` of
    its input's domain. None of them reached: the program's mask. Else a bool that can be either (`impact`
    weighs what a select it picks does with it)."""
    src = compared_codes(dg, ob)
    reached = reach(ob.expected, rng.get(src)) if src is not None else None
    if reached is None or ob.codes is None:
        return None
    if reached[1] < ob.codes[0] or ob.codes[1] < reached[0]:
        return ob.node, 0.0, rng.get(ob.node, ranges.UNBOUNDED), False
    return ob.node, 1.0, (0.0, 1.0), False


def compared_codes(dg: DomainGraph, ob: Obligation) -> str | None:
    """The value whose codes the comparison `ob` reads: its dequantize's input, or after the passes its input."""
    read = dg.producer(ob.node, "args[0]")
    return dg.producer(read, "args[0]") if read and dg.value(read).op_class is OpClass.DEQUANTIZE else read


def is_flip(ob: Obligation) -> bool:
    """A comparison of codes with a real threshold, whose outcome flips on codes `ob.codes`."""
    return ob.finding_kind == "real-constant-on-codes" and ob.arg in ranges.COMPARISONS and ob.expected is not None


def _on_flipped(
    dg: DomainGraph, ob: Obligation, rng: Mapping[str, Interval], landed: Mapping[str, Interval]
) -> tuple[dict[str, Interval], dict[str, Interval]] | None:
    """(the program's value ranges, the backend's) on the elements where the comparison `ob` flips — its
    input's codes in `ob.codes` —, the only elements a lone flip makes wrong: there the program's outcome is
    the real comparison's and the backend's the other, and every value computed element by element from the
    comparison's input (`ranges.aligned`) lies where those codes take it (a flipped ``x > 0`` fills only
    where x <= 0, so a later ``> 0.5`` of the filled values is false on both sides). Elsewhere, each value's
    whole range (the backend's from what every violation `landed`). None when the comparison reads no codes of
    its domain."""
    src = compared_codes(dg, ob)
    reached = reach(ob.expected, rng.get(src)) if src is not None else None
    if src is None or dg.value(src).own_domain != ob.expected or reached is None or ob.codes is None:
        return None
    codes = max(reached[0], ob.codes[0]), min(reached[1], ob.codes[1])
    on = ranges.aligned(dg, src, ob.node)
    if ob.node not in on or codes[0] > codes[1]:
        return None
    given = {src: _read_as(ob.expected, codes)}  # type: ignore[arg-type]
    program = ranges.value_ranges(dg, {**{n: r for n, r in rng.items() if n not in on}, **given})
    outcome = ranges.selected(program[ob.node])
    if outcome is None:
        return None
    whole = ranges.value_ranges(dg, {**landed, ob.node: (0.0, 1.0)})  # (the backend's, on every element)
    other = (1.0, 1.0) if outcome == "args[2]" else (0.0, 0.0)
    backend = ranges.value_ranges(dg, {**{n: r for n, r in whole.items() if n not in on}, **given, ob.node: other})
    return program, backend


def _as_copy(
    spot: str, produced: Domain, expected: Domain, codes: tuple[int, int] | None, bound: Bound | None
) -> tuple[str, float, Interval, bool] | None:
    """A copy's landing: each code moves by at most `bound.codes` steps; the backend's are the source's
    codes (`codes`, or all of them), read as declared."""
    if bound is None:
        return None
    read = _read_as(expected, codes or (produced.qmin, produced.qmax))
    return spot, bound.codes * expected.scale, read, False  # type: ignore[operator]


def _codes_of(dg: DomainGraph, name: str) -> tuple[str, Domain] | None:
    """(the value holding `name`'s codes, their fixed per-tensor domain): `name` itself when it has one
    (a folded op's output qparams), else its one quantize (in a Q/DQ program)."""
    for n in [name, *(s for s in dg.g._succ.get(name, ()) if dg.value(s).op_class is OpClass.QUANTIZE)]:
        d = dg.value(n).own_domain
        if ranges.domain_range(d) is not None:
            return n, d  # type: ignore[return-value]
    return None


def _merged(dg: DomainGraph, ob: Obligation, rng: Mapping[str, Interval]) -> tuple[str, float, Interval, bool] | None:
    """A duplicate merged into its representative (`ob.other`): its consumers read the representative's
    codes as its own — a dropped requant from the one domain to the other, over the codes the
    representative reaches (measured: the Arm merge hands the codes on unchanged, whatever both domains)."""
    at, src = _codes_of(dg, ob.node), _codes_of(dg, ob.other) if ob.other else None
    if at is None or src is None or at[1].dtype != src[1].dtype:
        return None
    codes = reach(src[1], rng.get(src[0]))
    return _as_copy(at[0], src[1], at[1], codes, bounds.dropped_requant(src[1], at[1], bounds.COPY, codes))
