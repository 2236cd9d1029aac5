"""How far a wrong code travels: the error it leaves at each program output.

A requant a lowering drops (or a duplicate it merges) hands its consumer codes
in the wrong domain; `bounds` says by how much. Whether the program then
computes wrong is decided at its outputs: a later clamp to a narrow range, a
small weight or a saturating activation can leave every output code where the
quantized program puts it (issue #27's false alarms: "0 LSB at every output").

This module follows the real error, in the infinity norm, from where it lands
to the outputs through sound per-op bounds: pass-through ops and ``relu`` /
``clamp`` keep it, ``add`` / ``sub`` add it up, an elementwise function scales
it by its Lipschitz constant, an op with a constant operand (or a target's
kernel) by the gain its adapter measured (``Value.gain``, e.g. a linear layer's
largest row sum of absolute weights), a product of two operands by the values each can hold, and
a requant rounds it by at most one step and clamps it to its range's width — none at all where every value
either side can reach rounds to one code (a sum beside a right operand on a grid: for each of its codes),
a comparison with one outcome on both sides ends it (and a ``where`` on it
keeps only its branch's), a ``where`` / ``masked_fill`` whose mask can flip is as far off as
the branch one side picks can be from the other's, and a delegate call hands it to the partition input
it feeds. Whatever is not modelled (norms, a comparison that can flip feeding anything but a select,
indices, unknown ops, a delegate's other inputs) makes it unbounded. An output is safe when the error
reaching its last rounding is at most half an output LSB (`bounds.TOLERANCE_LSB`,
the rule a dropped requant's own bound obeys). Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from qflow.bounds import TOLERANCE_LSB
from qflow.domain import Domain
from qflow.graph import RETURNED, DefKind, DomainGraph, Obligation, ObligationKind, OneCode, Value
from qflow.ops import MULTI_INPUT_IDENTITY, SELECT_INPUTS, OpClass, base_name
from qflow.ranges import (
    COMPARISONS,
    UNBOUNDED,
    Interval,
    bool_cast,
    domain_range,
    same_source,
    selected,
    value_ranges,
)

#: ∞-norm Lipschitz constants of real elementwise functions (max |f'|): GELU's derivative peaks at
#: 1.129, SiLU's at 1.0998, hardswish's at 1.5; softmax's Jacobian diag(p) - ppᵀ has row sums
#: 2 p_i (1 - p_i) <= 1/2, log-softmax's I - 1pᵀ has 2 (1 - p_i) <= 2.
LIPSCHITZ: dict[str, float] = {
    "sigmoid": 0.25, "tanh": 1.0, "gelu": 1.13, "silu": 1.1, "hardswish": 1.5, "hardsigmoid": 1 / 6,
    "elu": 1.0, "sin": 1.0, "cos": 1.0, "erf": 1.13, "atan": 1.0,
    "softmax": 0.5, "_softmax": 0.5, "_safe_softmax": 0.5, "log_softmax": 2.0, "_log_softmax": 2.0,
    "neg": 1.0, "abs": 1.0, "mean": 1.0, "avg_pool1d": 1.0, "avg_pool2d": 1.0, "adaptive_avg_pool1d": 1.0,
    "adaptive_avg_pool2d": 1.0, "upsample_nearest2d": 1.0, "maximum": 1.0, "minimum": 1.0,
    "upsample_bilinear2d": 1.0,  # (each output a convex combination of its input's: weights >= 0, sum 1)
}  # fmt: skip
#: Ops whose output error is at most the sum of their inputs' errors.
SUMS = frozenset({"add", "add_", "sub", "sub_", "rsub"})
#: Ops whose gain their adapter measures from constant operands or operand ranges.
GAINED = frozenset({"linear", "conv1d", "conv2d", "conv3d", "convolution", "mul", "mul_", "bmm", "matmul", "mm"})
#: Products of two operands, elementwise or summed over a contraction (`Value.terms`).
_PRODUCTS = frozenset({"mul", "mul_", "bmm", "matmul", "mm"})
#: Selects: (the mask, the branch taken where it holds, the other), by edge label.
_BRANCHES = {"where": ("args[0]", "args[1]", "args[2]"), "masked_fill": ("args[1]", "args[2]", "args[0]")}
#: Pass-through ops' arguments that carry data (any other tensor argument is an index or a mask:
#: an error there moves values by anything).
_DATA_ARGS = {name: tuple(f"args[{i}]" for i in pos) for name, pos in SELECT_INPUTS.items()} | {
    "masked_fill": ("args[0]",),
}


@dataclass(frozen=True)
class Impact:
    """The worst output a set of landed errors reaches."""

    output: str | None  # None: the error reaches no output
    lsb: float  # the real error reaching its last rounding, in its LSB (inf: unbounded)

    @property
    def within_rounding(self) -> bool:
        return self.lsb <= TOLERANCE_LSB


def _grid(d: Domain | None) -> tuple[float, float] | None:
    """(scale, width of the real range) of a fixed per-tensor integer domain."""
    r = domain_range(d)
    return (d.scale, r[1] - r[0]) if r is not None and d.scale > 0 else None  # type: ignore[union-attr, operator]


def _on_grid(own: tuple[float, float], grids: list[tuple[float, float] | None]) -> bool:
    """Are the values quantized onto `own` codes of grids it divides (a requantize after a relu or a copy,
    onto its input's grid)? Then both sides round exactly and the codes move only as far as the values."""
    for g in grids:
        k = g[0] / own[0] if g is not None else 0.0
        if k < 1.0 or abs(k - round(k)) > 1e-9 * k:
            return False
    return bool(grids)


def width(d: Domain) -> float:
    """The width of `d`'s real range (inf when it has no fixed one)."""
    g = _grid(d)
    return g[1] if g is not None else math.inf


def _data_edge(name: str, label: str) -> bool:
    allowed = _DATA_ARGS.get(name)
    if allowed is not None:
        return label in allowed
    if name in MULTI_INPUT_IDENTITY:
        return label.startswith("args[0]")
    return label == "args[0]"


@dataclass(frozen=True)
class _Ranges:
    """The program's value ranges and the backend's (computed from the codes it really has)."""

    program: Mapping[str, Interval]
    backend: Mapping[str, Interval]

    def both(self, name: str, e: float) -> tuple[Interval, Interval]:
        """(the program's interval, the backend's) at `name`, whose error is at most `e`."""
        p, b = self.program[name], self.backend[name]
        lo, hi = max(b[0], p[0] - e), min(b[1], p[1] + e)  # (the backend is within `e` of the program)
        return p, ((lo, hi) if lo <= hi else (p[0] - e, p[1] + e))

    def hull(self, name: str, e: float) -> Interval:
        p, b = self.both(name, e)
        return min(p[0], b[0]), max(p[1], b[1])

    def pinned(self, name: str, e: float, lo: float, hi: float, within: float = 0.0) -> bool:
        """Do both sides lie beyond one end of [lo, hi] (a clamp there gives both the same value), or
        nearer to it than `within` (half a quantize's step: it rounds both to its end code)?"""
        p, b = self.both(name, e)
        if within > 0:
            return (p[0] > hi - within and b[0] > hi - within) or (p[1] < lo + within and b[1] < lo + within)
        return (p[0] >= hi and b[0] >= hi) or (p[1] <= lo and b[1] <= lo)


def _sloped(name: str, r: tuple[float, float] | None) -> float | None:
    """The Lipschitz constant of a function steep somewhere, over the input range `r` (both the
    program's and the backend's input lie in it: codes of one domain)."""
    if r is None:
        return None
    lo, hi = r
    if name == "exp":
        return math.exp(hi) if hi < 80 else None
    if name == "reciprocal" and (lo > 0 or hi < 0):
        return 1.0 / min(abs(lo), abs(hi)) ** 2
    if lo <= 0:
        return None
    return {"rsqrt": 0.5 * lo**-1.5, "sqrt": 0.5 * lo**-0.5, "log": 1.0 / lo}.get(name)


def _op_error(
    dg: DomainGraph, v: Value, errs: list[tuple[str, str, float]], rng: _Ranges, landed: Mapping[str, float]
) -> float:
    """The real error of `v`'s op result from its inputs' errors ((producer, edge label, error))."""
    name = base_name(v.target)
    total, worst = sum(e for _, _, e in errs), max(e for _, _, e in errs)
    if name in ("sub", "sub_") and len(errs) == 2 and _same_codes(dg, v, errs[0][0], errs[1][0], landed):
        return 0.0  # x - x: 0 on both sides, whatever codes x has
    if v.op_class is OpClass.ACTIVATION and v.clamp is not None and len(errs) == 1:
        return 0.0 if rng.pinned(errs[0][0], worst, *v.clamp) else worst
    if name in COMPARISONS:  # (one outcome on both sides: no error; else a flipped bool, anything)
        outcome = rng.program.get(v.name)
        return 0.0 if selected(outcome) is not None and rng.backend.get(v.name) == outcome else math.inf
    if name in ("maximum", "minimum") and v.gain is None:  # (|max(a', b') - max(a, b)| <= max(|a' - a|, |b' - b|))
        kept = _kept(dg, v, errs, rng)
        return kept if kept is not None else worst
    if name == "where" and (branch := _taken(dg, v, errs, rng)) is not None:
        return max((e for _, lab, e in errs if lab == branch), default=0.0)
    if bool_cast(dg, v, [p for p, _, _ in errs]):  # (0 and 1 exactly)
        return worst
    if name in _BRANCHES and any(lab == _BRANCHES[name][0] and e > 0 for _, lab, e in errs):
        return _swapped(dg, v, errs, rng)  # (a mask that can flip)
    if v.op_class in (OpClass.PASSTHROUGH, OpClass.DEQUANTIZE, OpClass.QUANTIZE, OpClass.ACTIVATION):
        if v.op_class is OpClass.PASSTHROUGH and not all(_data_edge(name, lab) for _, lab, e in errs if e > 0):
            return math.inf
        return worst
    if v.op_class is OpClass.DELEGATE and all(lab == RETURNED for _, lab, e in errs if e > 0):
        return worst  # (what a delegate returns: its output's codes)
    if v.op_class is not OpClass.COMPUTE:
        return math.inf
    if name in GAINED:  # (a product: the tighter of its operands' values and its adapter's gain)
        by_values = _product_error(dg, v, errs, rng) if name in _PRODUCTS else None
        by_gain = v.gain * total if v.gain is not None else math.inf
        return by_gain if by_values is None else min(by_values, by_gain)
    if name in SUMS:  # (an `alpha` scales the second operand: its adapter's gain)
        return total * (v.gain if v.gain is not None else 1.0)
    if name == "sum":  # each output adds up numel(input) / numel(output) inputs
        n_in, n_out = dg.value(errs[0][0]).numel, v.numel
        return total * (n_in // n_out) if n_in and n_out and len(errs) == 1 else math.inf
    k = v.gain if v.gain is not None else LIPSCHITZ.get(name)  # (an adapter's gain: a target's kernel)
    if k is None and len(errs) == 1:
        k = _sloped(name, rng.hull(errs[0][0], errs[0][2]))
    return k * total if k is not None else math.inf


#: How far from a rounding boundary a value must lie for a backend to round it as the program does: the
#: operand precision of an integer add (TOSA's and CMSIS-NN's int16 add shift their operands by 15 bits
#: before rescaling them onto one grid, int8 by 20), widened 8-fold, in the coarser operand's LSB; and,
#: relative to the value, a RESCALE's coarsest multiplier (16 bits, for an int48 accumulator) and float32's.
_OPERAND_PRECISION = 2.0**-12
_RELATIVE_PRECISION = 2.0**-14
#: How near a float32 interval's end must lie to a code to be read as that code (-127.00001 is code -127).
_ON_CODE = 1e-3


def _absorbed(dg: DomainGraph, at: str, out: Domain, rng: _Ranges, err: Mapping[str, float]) -> bool:
    """Is `at` a sum whose rounding onto `out` gives one code whatever its one erring operand holds? Its other
    operand, right on both sides, holds codes of its grid; for each such code, the values the erring
    operand holds on either side (their hull) may span no rounding boundary of `out`, with a margin for
    how precisely the backend and the program form the sum. A score beside a mask added on a grid a
    thousand times coarser (campaign case 05038-tx-arm-custom): whatever codes the score has, the sum
    rounds to the mask's code."""
    s = dg.value(at)
    name = base_name(s.target)
    if s.op_class is not OpClass.COMPUTE or name not in ("add", "sub") or s.gain not in (None, 1.0):
        return False
    by_label = {lab: p for p, data in dg.g._pred[at].items() for lab in data["args"]}
    if set(by_label) != {"args[0]", "args[1]"}:
        return False
    erring = [lab for lab, p in by_label.items() if err.get(p, 0.0) > 0]
    if len(erring) != 1:
        return False
    a, b = by_label[erring[0]], by_label["args[1]" if erring[0] == "args[0]" else "args[0]"]
    db = dg.value(b).own_domain
    if dg.value(b).definition.kind is not DefKind.FACT or _grid(db) is None:
        return False
    assert db is not None and isinstance(db.scale, float) and isinstance(db.zero_point, int)
    lo, hi = rng.hull(a, err[a])
    if name == "sub" and erring[0] == "args[1]":
        lo, hi = -hi, -lo
    sign = -1.0 if name == "sub" and erring[0] == "args[0]" else 1.0
    blo, bhi = rng.program[b]
    if not all(map(math.isfinite, (lo, hi, blo, bhi))):
        return False
    first = max(db.qmin, math.ceil(blo / db.scale + db.zero_point - _ON_CODE))
    last = min(db.qmax, math.floor(bhi / db.scale + db.zero_point + _ON_CODE))
    if not first <= last <= first + (1 << 16):  # (no code: its interval is no set of codes qflow can read)
        return False
    da = dg.value(a).own_domain
    coarse = max(db.scale, da.scale if _grid(da) is not None else max(abs(lo), abs(hi)))  # type: ignore[union-attr]
    for c in range(first, last + 1):
        bc = sign * db.scale * (c - db.zero_point)
        if not _one_code(bc + lo, bc + hi, out, _OPERAND_PRECISION * coarse / out.scale):  # type: ignore[operator]
            return False
    return True


def _one_code(lo: float, hi: float, out: Domain, margin: float = 0.0) -> bool:
    """Do all reals in [lo, hi] quantize onto `out` (fixed, per tensor) to one code, `margin` (in its LSB)
    and the backend's relative precision away from a rounding boundary? Then a wrong value anywhere in it
    moves nothing (campaign case 02016-tx-arm-custom: a score x 0.25 onto a grid of 2.09, code 0 on both sides
    whatever codes the score has)."""
    assert isinstance(out.scale, float) and isinstance(out.zero_point, int)
    t_lo, t_hi = lo / out.scale, hi / out.scale
    if not (math.isfinite(t_lo) and math.isfinite(t_hi)):
        return False
    margin += _RELATIVE_PRECISION * max(abs(t_lo), abs(t_hi))
    qmin, qmax = out.qmin - out.zero_point, out.qmax - out.zero_point  # (codes less the zero point)
    ends = [min(qmax, max(qmin, math.floor(t + 0.5))) for t in (t_lo - margin, t_hi + margin)]
    return ends[0] == ends[1]


def _carried_in(dg: DomainGraph, name: str, err: Mapping[str, float]) -> float | None:
    """The error of what a delegate returns at `name` (a delegate output), when its call reads wrong
    codes only where the partition takes them in (`DomainGraph.fed`: one domain on both sides) —
    `output_error` followed them in, and the partition's value it returns holds all its error —, or None."""
    preds = dg.g._pred[name]
    inner = [p for p, data in preds.items() if RETURNED in data["args"]]
    calls = [p for p, data in preds.items() if any(lab.startswith("output ") for lab in data["args"])]
    if len(inner) != 1 or len(calls) != 1 or "/" not in inner[0]:
        return None
    prefix = inner[0].split("/", 1)[0] + "/"
    taken = {src for ph, src in dg.fed.items() if ph.startswith(prefix)}
    if any(err.get(p, 0.0) > 0 and p not in taken for p in dg.g._pred[calls[0]]):
        return None
    return err.get(inner[0], 0.0)


def _taken(dg: DomainGraph, v: Value, errs: list[tuple[str, str, float]], rng: _Ranges) -> str | None:
    """The branch a ``where`` takes everywhere on both sides (its condition has no error and one
    outcome), or None."""
    cond = dg.producer(v.name, "args[0]")
    if cond is None or any(lab == "args[0]" and e > 0 for _, lab, e in errs):
        return None
    branch = selected(rng.program.get(cond))
    return branch if branch is not None and selected(rng.backend.get(cond)) == branch else None


def _kept(dg: DomainGraph, v: Value, errs: list[tuple[str, str, float]], rng: _Ranges) -> float | None:
    """A maximum / minimum one of whose operands is the larger / smaller on both sides (the program's
    values and the backend's): that operand's error, or None."""
    by_label = {lab: p for p, data in dg.g._pred[v.name].items() for lab in data["args"]}
    if set(by_label) != {"args[0]", "args[1]"}:
        return None
    err = {lab: e for _, lab, e in errs}
    a, b = (rng.hull(by_label[lab], err.get(lab, 0.0)) for lab in ("args[0]", "args[1]"))
    high = "args[1]" if a[1] <= b[0] else "args[0]" if b[1] <= a[0] else None
    if high is None:
        return None
    kept = high if base_name(v.target) == "maximum" else ({"args[0]", "args[1]"} - {high}).pop()
    return err.get(kept, 0.0)


def _swapped(dg: DomainGraph, v: Value, errs: list[tuple[str, str, float]], rng: _Ranges) -> float:
    """A select whose mask can differ: where both sides pick one branch, that branch's error; where they
    pick apart, as far as the program's one branch and the backend's other can be (a bool mask is either
    outcome, however it went wrong)."""
    _, true, false = _BRANCHES[base_name(v.target)]
    scalars = dict(v.scalars or ())
    by_label = {lab: p for p, data in dg.g._pred[v.name].items() for lab in data["args"]}
    err = {lab: e for _, lab, e in errs}

    def sides(lab: str) -> tuple[Interval, Interval]:
        if lab in scalars:
            return (scalars[lab], scalars[lab]), (scalars[lab], scalars[lab])
        p = by_label.get(lab)
        return (rng.program[p], rng.backend[p]) if p is not None else (UNBOUNDED, UNBOUNDED)

    (pt, bt), (pf, bf) = sides(true), sides(false)
    apart = max(pt[1] - bf[0], bf[1] - pt[0], pf[1] - bt[0], bt[1] - pf[0])
    return max(apart, err.get(true, 0.0), err.get(false, 0.0))


def _product_error(dg: DomainGraph, v: Value, errs: list[tuple[str, str, float]], rng: _Ranges) -> float | None:
    """A product's error from its operands' values: ``|a'b' - ab| <= |a'| |b' - b| + |b| |a' - a|``
    per term, over the values each side can hold (None: an operand has no bounded interval)."""
    by_label = {lab: p for p, data in dg.g._pred[v.name].items() for lab in data["args"]}
    if "args[0]" not in by_label or "args[1]" not in by_label:
        return None
    err = {lab: e for _, lab, e in errs}
    ea, eb = err.get("args[0]", 0.0), err.get("args[1]", 0.0)
    a, b = rng.hull(by_label["args[0]"], ea), rng.hull(by_label["args[1]"], eb)
    ma, mb = max(abs(a[0]), abs(a[1])), max(abs(b[0]), abs(b[1]))
    if math.isinf(ma) or math.isinf(mb):
        return None
    return (v.terms or 1) * (ma * eb + mb * ea)


def output_error(
    dg: DomainGraph,
    landed: Mapping[str, float],
    replaced: frozenset[str] = frozenset(),
    rng: Mapping[str, Interval] | None = None,
    backend: Mapping[str, Interval] | None = None,
    inherits: Mapping[str, str] | None = None,
    backend_ranges: Mapping[str, Interval] | None = None,
) -> Impact:
    """The worst program output the errors `landed` (value → real error of its codes, rounding
    included) reach. A value that lands an error and inherits one
    is unbounded (a wrong read of already wrong codes), unless its landed error already accounts
    for what it inherits (`replaced`: the end of a chain of copies, weighed as a whole; it still carries
    the error of the codes the chain copies, at the value `inherits` names). `backend_ranges`: the backend's
    value ranges, where the caller computed them (else from `backend`, what each violation lands)."""
    program = rng if rng is not None else value_ranges(dg)
    known = backend_ranges is not None or bool(backend)  # (else the backend's are taken as the program's)
    if backend_ranges is None:
        backend_ranges = value_ranges(dg, backend) if backend else program
    ranges = _Ranges(program, backend_ranges)
    err: dict[str, float] = {}  # real error of each value reached
    pre: dict[str, float] = {}  # the error before its last rounding
    grid: dict[str, tuple[float, float] | None] = {}  # (scale, width) of its last rounding
    g = dg.g
    worst = Impact(None, 0.0)
    outputs = frozenset(dg.outputs)
    for name in dg.in_order():
        incoming = [(p, lab, err[p]) for p, data in g._pred[name].items() if p in err for lab in data["args"]]
        if name in landed:
            if name not in replaced and any(e > 0 for _, _, e in incoming):
                err[name] = pre[name] = math.inf
            else:  # (a chain's end also carries what the codes it copies carry from upstream)
                err[name] = pre[name] = landed[name] + err.get((inherits or {}).get(name, ""), 0.0)
            grid[name] = _grid(dg.value(name).own_domain)
        elif name in dg.fed and err.get(dg.fed[name], 0.0) > 0:  # (a partition's input: the codes fed in)
            err[name] = pre[name] = err[dg.fed[name]]
            grid[name] = _grid(dg.value(name).own_domain)
        elif not incoming or all(e == 0 for _, _, e in incoming):
            continue
        else:
            v = dg.value(name)
            carried = _carried_in(dg, name, err) if v.op_class is OpClass.DELEGATE else None
            e = _op_error(dg, v, incoming, ranges, landed) if carried is None else carried
            reached = [p for p in g._pred[name] if p in err]
            first = reached[0]
            own = _grid(v.own_domain) if v.op_class not in (OpClass.DEQUANTIZE, OpClass.PASSTHROUGH) else None
            if v.op_class is OpClass.QUANTIZE and own is None:  # (a per-channel or run-time grid)
                pre[name], grid[name], err[name] = math.inf, None, math.inf
            elif carried is not None:  # (a delegate's output: the codes its partition returns, copied)
                inner = next(p for p, data in g._pred[name].items() if RETURNED in data["args"])
                pre[name], grid[name], err[name] = pre.get(inner, e), grid.get(inner), e
            elif own is not None and v.definition.kind is DefKind.FACT and v.op_class is not OpClass.ACTIVATION:
                # rounds once more: one step, clamped to its range, where both sides can be
                at = first if v.op_class is OpClass.QUANTIZE else name
                qlo, qhi = domain_range(v.own_domain) or (-math.inf, math.inf)
                # (at a kernel's own result the intervals are of its codes, a step further apart than its error)
                apart = e if at != name else e + own[0]
                if ranges.pinned(at, apart, qlo, qhi, own[0] / 2):  # both saturate at one end: the same code
                    e = 0.0
                elif known and _absorbed(dg, at, v.own_domain, ranges, err):  # type: ignore[arg-type]
                    e = 0.0  # (a sum beside a right operand on a grid: one code for each of its codes)
                lo, hi = ranges.hull(at, e)
                if e and known and at != name and _one_code(lo, hi, v.own_domain, _OPERAND_PRECISION):  # type: ignore[arg-type]
                    e = 0.0  # (a quantize of values both sides hold within one rounding cell: the same code)
                step = 0.0 if v.op_class is OpClass.QUANTIZE and _on_grid(own, [grid[p] for p in reached]) else own[0]
                pre[name], grid[name] = e, own
                err[name] = min(e + step, own[1], min(qhi, hi) - max(qlo, lo) + step) if e else 0.0
            elif v.op_class is OpClass.COMPUTE:  # an unrounded result
                pre[name], grid[name], err[name] = e, None, e
            else:  # a copy or clamp of rounded values: codes at most as far apart as its input's (none, when
                # a clamp pins both sides to one end: a folded partition's activation can be its output)
                pre[name], grid[name], err[name] = (max(pre[p] for p in reached) if e else 0.0), grid[first], e
        if name in outputs or (not outputs and not g._succ[name]):  # an output (a sink, when none are known)
            gr = grid[name]
            lsb = pre[name] / gr[0] if gr is not None else (math.inf if pre[name] else 0.0)
            if lsb > worst.lsb or worst.output is None:
                worst = Impact(name, lsb)
    return worst


def amplified(dg: DomainGraph, value: str, rng: Mapping[str, Interval] | None = None) -> Impact | None:
    """Where one code of `value`'s own grid goes, when it moves some output by more than one output LSB
    (None otherwise, or when `value` has no per-tensor grid). A backend one code off the program is
    within what the contract probe calls exact; what follows can make that code many (a steep table, a
    finer grid, an argmax), and that no single-op measurement sees. `rng`: the graph's value ranges, when
    the caller asks about several values."""
    d = dg.value(value).own_domain if value in dg.g else None
    if d is None or d.is_float or d.per_channel or not isinstance(d.scale, float):
        return None
    reach = output_error(dg, {value: d.scale}, rng=rng)
    return reach if reach.output is not None and not reach.lsb <= 1.0 else None


def oblige_one_codes(dg: DomainGraph) -> None:
    """A node of `dg.one_code` is unproven where what follows makes one of its values' one code more than one
    output LSB (the finding says how far), else told about when it says what (`OneCode.otherwise`); then the
    list is done. Run on the whole program's graph."""
    rng = value_ranges(dg) if dg.one_code else None
    louder: dict[tuple[str, str], tuple[OneCode, Impact | None]] = {}
    for c in dg.one_code:  # (a node's first value that what follows amplifies decides; the rest need no weighing)
        key = (c.node, c.kind)
        if c.node in dg.g and (key not in louder or louder[key][1] is None):
            louder[key] = (c, amplified(dg, c.value, rng))
    for (node, kind), (c, reach) in louder.items():
        if reach is not None:
            dg.oblige_unbounded(node, "its rounding", kind, f"{c.detail}; {one_code_text(reach)}", c.targets)
        elif c.otherwise is not None:
            dg.oblige(Obligation(ObligationKind.STRUCTURAL, node, node, finding_kind=kind, holds=True, inform=True,
                                 targets=c.targets, detail=f"{c.detail}, and {c.otherwise}."))  # fmt: skip
    dg.one_code.clear()


def one_code_text(reach: Impact) -> str:
    """What `amplified` found, for a finding."""
    bound = f"up to {reach.lsb:.3g} LSB" if math.isfinite(reach.lsb) else "an amount qflow cannot bound"
    return f"what follows moves output {reach.output} by {bound} for that one code"


def _same_codes(dg: DomainGraph, v: Value, a: str, b: str, landed: Mapping[str, float]) -> bool:
    """Are `a` and `b`, the operands of the elementwise `v`, one tensor's codes on both sides (`same_source`),
    with no error landing between (a wrong read on one side only breaks it)? Element by element: no
    broadcast widens either."""
    sizes = {v.numel, dg.value(a).numel, dg.value(b).numel}
    if len(sizes) != 1 or None in sizes:
        return False
    ra, rb = same_source(dg, a, landed), same_source(dg, b, landed)
    return ra is not None and ra == rb
