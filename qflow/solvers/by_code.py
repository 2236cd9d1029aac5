"""Violations weighed one code of a source at a time, on the program's side and the backend's.

A comparison a backend runs on codes with its threshold as written flips on some codes; whole ranges say
only that its bool can be either. Two such comparisons of one input (``x > 0`` selects, ``x > -1.5``
fills), or one that reads codes a dropped requant copied, can agree with the program on every element
although neither does alone. Taken one code of their common source at a time, every value computed
element by element from it is a point on both sides, and each comparison has one outcome on each:
where they agree the bool is right, where they differ it is the other one. The same for an op the
backend computes off by input code (an activation a kernel runs on codes with its bounds as written, an
int16 TABLE): one code of the source gives it the error of the codes it reaches there alone (a relu on
codes is off only below its code 0, where an add of its input beside it may already saturate the output:
campaign case 00226-cm). Sound for every element
(each element's source has one code), as long as nothing that varies from code to code — a value's
interval or its error — leaves the values computed element by element from the source on its way to an
output: a reduction or a product over many elements mixes codes, and is weighed once with whole ranges
(`ranges.correlated` splits only the program's side; this splits both).
"""

from __future__ import annotations

import math
from collections import ChainMap
from collections.abc import Collection, Mapping

import networkx as nx

from qflow import impact, ranges
from qflow.graph import DomainGraph, Obligation
from qflow.ops import base_name
from qflow.ranges import Interval
from qflow.solvers import landing

#: How many sources to try, nearest to the violations first.
SOURCES = 4


def weighed(dg: DomainGraph, reads: list[landing.Read], rng: Mapping[str, Interval]) -> impact.Impact | None:
    """How far the violations `reads` move the outputs, taken one code of a source at a time on both
    sides; None when no source splits them (none among them whose outcome or error varies by code — a
    comparison that flips, an op off by input code —, or one has no bound)."""
    whole = landing.land(dg, reads, rng, alone=False)
    varying = [r.obligation for r in reads if landing.is_flip(r.obligation) or r.obligation.off_by_code is not None]
    if whole is None or not varying:
        return None
    erring = {n for n, e in whole.errors.items() if e > 0}
    tainted = erring.union(*(nx.descendants(dg.g, n) for n in erring))
    index = {name: i for i, name in enumerate(dg.in_order())}
    backend = ranges.value_ranges(dg, whole.backend)
    best, tried = None, 0
    for src in ranges.sources(dg, [ob.node for ob in varying]):
        if src in tainted:  # (the backend's codes there are not the program's)
            continue
        on = _with_tails(dg, ranges.aligned(dg, src, index=index), index)
        if not any(ob.node in on for ob in varying) or not _contained(dg, on, tainted):
            continue
        tried += 1
        got = _pieces(dg, reads, rng, backend, src, on, index)
        if got is not None and (best is None or got.lsb < best.lsb):
            best = got
        if tried == SOURCES or (best is not None and best.within_rounding):
            break
    return best


#: Ops each of whose output elements is one element of their one input, by shape alone.
_MOVES = frozenset(
    """view view_copy _unsafe_view reshape permute permute_copy transpose transpose_copy t t_copy
squeeze squeeze_copy unsqueeze unsqueeze_copy slice slice_copy select select_copy expand expand_copy flatten
unflatten clone contiguous alias alias_copy detach detach_copy movedim moveaxis flip roll narrow repeat tile
pixel_shuffle pixel_unshuffle _clone_dim_order""".split()
)


def _with_tails(dg: DomainGraph, on: frozenset[str], index: Mapping[str, int]) -> frozenset[str]:
    """`on` and the values that follow it through ops of one input that move or map elements one by one
    (a permute, a requant): each of their elements holds what one element of `on` does. Not one read by
    a value of `on` (that one would pair elements of two layouts)."""
    tails: set[str] = set()
    for name in sorted({s for n in on for s in dg.g._succ[n]} - on, key=index.__getitem__):
        todo = [name]
        while todo:
            n = todo.pop()
            preds = dg.g._pred[n]
            v = dg.value(n)
            op = v.stands_for or base_name(v.target)
            one = len(preds) == 1 and all(len(data["args"]) == 1 for data in preds.values())
            if n in tails or n in on or not one or not (op in _MOVES or op in ranges.ELEMENTWISE):
                continue
            if not set(preds) <= on | tails or dg.value(n).numel is None:
                continue
            tails.add(n)
            todo.extend(dg.g._succ[n])
    return on | {t for t in tails if not any(s in on for s in dg.g._succ[t])}


def _contained(dg: DomainGraph, on: Collection[str], tainted: Collection[str]) -> bool:
    """Does no value that carries an error to an output read one computed element by element from the
    source without being one (so that what is true of one code of the source reaches the outputs whole)?"""
    outputs = set(dg.outputs)
    read = outputs.union(*(nx.ancestors(dg.g, o) for o in outputs))
    return not any(w not in on and w in read and any(p in on for p in dg.g._pred[w]) for w in tainted)


def _pieces(
    dg: DomainGraph,
    reads: list[landing.Read],
    rng: Mapping[str, Interval],
    backend: Mapping[str, Interval],
    src: str,
    on: Collection[str],
    index: Mapping[str, int],
) -> impact.Impact | None:
    """The worst output over every code (or run of codes) `src` reaches: each taken alone on both sides."""
    d, have = ranges.grid_of(dg, src), rng.get(src)
    if d is None or have is None or not all(map(math.isfinite, have)):
        return None
    codes = landing.reach(d, have)
    if codes is None:
        return None
    order = sorted(set(on) - {src}, key=index.__getitem__)
    flips = {r.obligation.node: r.obligation for r in reads if landing.is_flip(r.obligation)}
    pieces = min(ranges.PIECES, max(16, ranges.TRANSFERS // max(1, len(dg.g))))
    step = max(1, math.ceil((codes[1] - codes[0] + 1) / pieces))
    zp, worst = int(d.zero_point), impact.Impact(None, 0.0)  # type: ignore[arg-type]
    for first in range(codes[0], codes[1] + 1, step):
        piece = (d.scale * (first - zp), d.scale * (min(first + step - 1, codes[1]) - zp))  # type: ignore[operator]
        program: dict[str, Interval] = {src: piece}
        seen = ChainMap(program, rng)
        for name in order:
            program[name] = ranges.transfer(dg, name, seen)
        landed = landing.land(dg, reads, seen, alone=False)
        if landed is None:
            return None
        errors, replaced = dict(landed.errors), set(landed.replaced)
        theirs: dict[str, Interval] = {src: piece}
        back = ChainMap(theirs, landed.backend, backend)
        for name in order:
            if name in landed.backend:
                theirs[name] = landed.backend[name]
            else:
                theirs[name] = ranges.transfer(dg, name, back)
            if name in flips and (outcome := _on_codes(dg, flips[name], back)) is not None:
                theirs[name] = outcome  # (what the backend's codes give, whatever reached them)
                errors[name] = 0.0 if outcome == seen[name] and ranges.selected(outcome) else 1.0
                replaced.add(name)
        got = impact.output_error(dg, errors, frozenset(replaced), seen, inherits=landed.inherits, backend_ranges=back)
        if got.lsb > worst.lsb or worst.output is None:
            worst = got
        if not math.isfinite(worst.lsb):
            break
    return worst


def _on_codes(dg: DomainGraph, ob: Obligation, back: Mapping[str, Interval]) -> Interval | None:
    """The outcome of the comparison `ob` on the backend's codes `back`: the real comparison of the values
    they stand for, the other one where they lie among the codes it flips on; None where it has none."""
    at = landing.compared_codes(dg, ob)
    codes = landing.reach(ob.expected, back.get(at)) if at is not None else None
    real = ranges.selected(ranges.transfer(dg, ob.node, back))
    if codes is None or ob.codes is None or real is None:
        return None
    if codes[1] < ob.codes[0] or ob.codes[1] < codes[0]:
        flipped = False
    elif ob.codes[0] <= codes[0] and codes[1] <= ob.codes[1]:
        flipped = True
    else:
        return None
    return (1.0, 1.0) if (real == "args[1]") != flipped else (0.0, 0.0)
