"""The real values each value of the quantized program can hold: an interval analysis.

A dropped requant moves codes only where its input reaches; a later requant
loses nothing where both the program and the backend saturate it. Both need
to know which values can occur: every quantize clamps to its domain's range,
a ReLU or clamp cuts at its bounds (``Value.clamp``), a linear layer maps an input interval through its
weights (``Value.channels``: each output channel's bias and sums of positive
and negative weights), a sigmoid lands in ``(0, 1)``, a comparison is 0 or 1 (one of them
where the values it compares never cross). Each transfer is a sound
over-approximation over whole tensors (one interval per value); anything not
modelled is unbounded until the next quantize clamps it. The same transfers bound what a backend
computes from wrong codes (`given`), as the ops after them compute right. Torch-free.
"""

from __future__ import annotations

import heapq
import math
from collections import ChainMap, deque
from collections.abc import Callable, Collection, Iterator, Mapping

import networkx as nx

from qflow.domain import Domain
from qflow.graph import RETURNED, DefKind, DomainGraph, Value
from qflow.ops import CASTS, MULTI_INPUT_IDENTITY, SELECT_INPUTS, OpClass, base_name

Interval = tuple[float, float]
UNBOUNDED: Interval = (-math.inf, math.inf)
#: How near a tie an interval's end may round either way, in grid steps and relative to the end: the
#: ends are computed in float64, the program in float32 (a long sum's rounding grows with its values).
TIE_SLACK = (0.01, 1e-5)


def rounded_span(lo: float, hi: float) -> tuple[float, float]:
    """The grid points (in steps) that values in ``[lo, hi]`` (in steps) round to, to nearest — a
    value within `TIE_SLACK` of a tie either way. (Rounding outward to the next point would add a code
    no value reaches: a sigmoid of values >= 0 lands on codes >= 0.5 / scale, not one below.)"""
    near, rel = TIE_SLACK
    return (
        math.ceil(lo - 0.5 - near - rel * abs(lo)) if math.isfinite(lo) else lo,
        math.floor(hi + 0.5 + near + rel * abs(hi)) if math.isfinite(hi) else hi,
    )


_MONOTONE = {
    "sigmoid": lambda x: 1 / (1 + math.exp(-x)) if x > -700 else 0.0,
    "tanh": math.tanh,
    "exp": lambda x: math.exp(x) if x < 700 else math.inf,
    "hardsigmoid": lambda x: min(max(x / 6 + 0.5, 0.0), 1.0),
    "erf": math.erf,
}
#: Functions falling then rising: where their least value is, that value or just below it (SiLU's
#: -0.27846 at x = -1.2785; GELU's -0.16997, its tanh approximation's -0.17004, at x ≈ -0.752;
#: hardswish's -0.375 at -1.5), and how far the function may be off (GELU's tanh form: within 5e-4).
_DIPPING: dict[str, tuple[Callable[[float], float], float, float, float]] = {
    "silu": (lambda x: x / (1 + math.exp(-x)) if x > -700 else 0.0, -1.2785, -0.2785, 0.0),
    "gelu": (lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2))), -0.752, -0.1701, 1e-3),
    "hardswish": (lambda x: x * min(max(x + 3, 0.0), 6.0) / 6, -1.5, -0.375, 0.0),
}
#: Ops whose output lies in a fixed interval whatever their input.
_BOUNDED: dict[str, Interval] = {"softmax": (0.0, 1.0), "_softmax": (0.0, 1.0), "_safe_softmax": (0.0, 1.0),
                                 "sin": (-1.0, 1.0), "cos": (-1.0, 1.0)}  # fmt: skip
#: Ops whose output lies within the hull of their data inputs.
_WITHIN = frozenset({"mean", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
                     "upsample_nearest2d", "upsample_bilinear2d", "maximum", "minimum"})  # fmt: skip
#: Pass-through ops that can add values of their own (a pad value, a fill, an index's default).
_ADDS_VALUES = frozenset({"constant_pad_nd", "pad", "masked_fill", "index_put", "index_put_"})


def domain_range(d: Domain | None) -> Interval | None:
    """The real values a fixed per-tensor integer domain can hold."""
    if d is None or d.is_float or d.per_channel or d.opaque is not None or not isinstance(d.scale, float):
        return None
    if not isinstance(d.zero_point, int) or not math.isfinite(d.scale):
        return None
    return d.scale * (d.qmin - d.zero_point), d.scale * (d.qmax - d.zero_point)


def _hull(xs: list[Interval]) -> Interval:
    return min(x[0] for x in xs), max(x[1] for x in xs)


def _meet(a: Interval, b: Interval | None) -> Interval:
    if b is None:
        return a
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    if lo > hi:  # (disjoint: the clamp pins every value at the nearer end)
        return (b[1], b[1]) if a[0] > b[1] else (b[0], b[0])
    return lo, hi


def _mul(a: Interval, b: Interval) -> Interval:
    ps = [x * y for x in a for y in b if not (math.isinf(x) and y == 0) and not (math.isinf(y) and x == 0)]
    return (min(ps), max(ps)) if len(ps) == 4 else UNBOUNDED


def _dipping(name: str, x: Interval) -> Interval:
    f, at, least, slack = _DIPPING[name]
    ends = [
        f(x[0]) if math.isfinite(x[0]) else (0.0 if x[0] < 0 else math.inf),
        f(x[1]) if math.isfinite(x[1]) else math.inf,
    ]
    lo = least if x[0] <= at <= x[1] else min(ends) - slack
    return lo, max(ends) + slack


def _positive(name: str, x: Interval) -> Interval:
    """sqrt / log rise, rsqrt / reciprocal fall, over positive inputs (anything else: unbounded)."""
    lo, hi = x
    if name == "reciprocal" and hi < 0:
        return 1.0 / hi, (1.0 / lo if math.isfinite(lo) else 0.0)
    if hi <= 0 or lo < 0:
        return UNBOUNDED
    if name == "sqrt":
        return math.sqrt(lo), math.sqrt(hi)
    if name == "log":
        return (math.log(lo) if lo > 0 else -math.inf), math.log(hi)
    f = (lambda t: t**-0.5) if name == "rsqrt" else (lambda t: 1.0 / t)
    return (f(hi) if math.isfinite(hi) else 0.0), (f(lo) if lo > 0 else math.inf)


def _affine(v: Value, x: Interval) -> Interval:
    """A linear layer / convolution over an input in `x` (a convolution's padding adds zeros)."""
    assert v.channels is not None
    lo, hi = x
    if base_name(v.target) != "linear":
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    if math.isinf(lo) or math.isinf(hi):
        return UNBOUNDED
    los = [b + p * lo + n * hi for b, p, n in v.channels]
    his = [b + p * hi + n * lo for b, p, n in v.channels]
    return min(los), max(his)


#: The producer `ranges` names for a scalar operand (`Value.scalars`): no value of the graph.
SCALAR = ""
#: Comparisons (a bool result, 0 or 1), and each one's operands swapped.
COMPARISONS = {"gt": "lt", "lt": "gt", "ge": "le", "le": "ge", "eq": "eq", "ne": "ne"}
_NOT_KNOWN: Interval = (0.0, 1.0)


def _compared(dg: DomainGraph, name: str, ins: list[tuple[str, str, Interval]]) -> Interval:
    """A comparison of two tensors, where it has one outcome over the values both can hold: (0, 0)
    always false, (1, 1) always true, else (0, 1). On one grid it compares codes (the program's
    dequantized floats are monotone in them, Arm's ``GREATER`` reads them); across two grids the
    operands must be a step of the coarser one apart (a backend rescales both before it compares)."""
    by = {lab: (p, i) for p, lab, i in ins}
    if "args[0]" not in by or "args[1]" not in by:
        return _NOT_KNOWN
    (pa, a), (pb, b) = by["args[0]"], by["args[1]"]
    if pb == SCALAR:
        return _against(name, a, b[0])
    ca, cb = _codes(dg, pa), _codes(dg, pb)
    if ca is None or cb is None:
        return _NOT_KNOWN
    if ca[1] == cb[1]:  # (the reals a dequantize holds are its codes' steps: count them)
        a, b, gap = _steps(a, ca[1].scale), _steps(b, ca[1].scale), 0.0
    else:
        gap = max(ca[1].scale, cb[1].scale)
    if name in ("lt", "le"):
        name, a, b = COMPARISONS[name], b, a
    below, above = a[1] + gap <= b[0], a[0] - gap >= b[1]  # (a <= b everywhere, a >= b everywhere)
    under, over = a[1] + gap < b[0], a[0] - gap > b[1]
    if name == "gt":
        return (0.0, 0.0) if below else (1.0, 1.0) if over else _NOT_KNOWN
    if name == "ge":
        return (1.0, 1.0) if above else (0.0, 0.0) if under else _NOT_KNOWN
    if under or over:
        return (0.0, 0.0) if name == "eq" else (1.0, 1.0)
    if gap == 0.0 and a[0] == a[1] == b[0] == b[1]:
        return (1.0, 1.0) if name == "eq" else (0.0, 0.0)
    return _NOT_KNOWN


def _against(name: str, a: Interval, c: float) -> Interval:
    """A comparison of values in `a` with the number `c`, where it has one outcome: the ends are
    computed in float64 and the program compares float32, so only values further from `c` than float32's
    rounding decide (but 0, which every rounding keeps: a value <= 0 stays <= 0)."""
    near = 0.0 if c == 0.0 else 1e-6 * max(1.0, abs(c), *(abs(x) for x in a if math.isfinite(x)))
    below, above = a[1] <= c - near, a[0] >= c + near
    under, over = a[1] < c - near, a[0] > c + near
    outcome = {
        "gt": (0.0, 0.0) if below else (1.0, 1.0) if over else None,
        "ge": (1.0, 1.0) if above else (0.0, 0.0) if under else None,
        "lt": (1.0, 1.0) if under else (0.0, 0.0) if above else None,
        "le": (0.0, 0.0) if over else (1.0, 1.0) if below else None,
        "eq": (0.0, 0.0) if under or over else None,
        "ne": (1.0, 1.0) if under or over else None,
    }[name]
    return outcome or _NOT_KNOWN


def _steps(x: Interval, scale: float) -> Interval:
    """The grid steps (multiples of `scale`) that values of a dequantize in `x` can be."""
    if not math.isfinite(x[0] + x[1]):
        return x
    return math.ceil(x[0] / scale - 1e-6), math.floor(x[1] / scale + 1e-6)


def selected(cond: Interval | None) -> str | None:
    """The branch a ``where`` takes everywhere, by its condition's interval: ``args[1]`` where it
    always holds, ``args[2]`` where it never does, else None."""
    return {(1.0, 1.0): "args[1]", (0.0, 0.0): "args[2]"}.get(cond) if cond is not None else None  # type: ignore[arg-type]


def bool_cast(dg: DomainGraph, v: Value, sources: list[str]) -> bool:
    """A cast of one bool tensor to a float dtype (a mask multiplied in): 0 and 1 exactly."""
    return (
        base_name(v.target) in CASTS
        and len(sources) == 1
        and dg.value(sources[0]).dtype == "bool"
        and (v.dtype or "").startswith(("float", "bfloat"))
    )


def _compute(dg: DomainGraph, v: Value, ins: list[tuple[str, str, Interval]]) -> Interval:
    name = v.stands_for or base_name(v.target)
    data = [i for _, lab, i in ins if lab in ("args[0]", "args[1]")]
    if bool_cast(dg, v, [p for p, _, _ in ins]):
        return ins[0][2]
    if name in _BOUNDED:
        return _BOUNDED[name]
    if name in COMPARISONS:
        return _compared(dg, name, ins)
    if len(ins) == 1 and ins[0][1] == "args[0]":
        x = ins[0][2]
        if name in _MONOTONE:
            return _MONOTONE[name](x[0]), _MONOTONE[name](x[1])
        if name in _WITHIN:
            return x
        if name in _DIPPING:
            return _dipping(name, x)
        if name in ("sqrt", "log", "rsqrt", "reciprocal"):
            return _positive(name, x)
        if name == "neg":
            return -x[1], -x[0]
        if name == "abs":
            return (0.0 if x[0] <= 0 <= x[1] else min(abs(x[0]), abs(x[1]))), max(abs(x[0]), abs(x[1]))
        if name == "sum" and v.numel and dg.value(ins[0][0]).numel:
            k = dg.value(ins[0][0]).numel // v.numel  # type: ignore[operator]  # (each output sums k inputs)
            return _mul(x, (float(k), float(k)))
    if name in ("linear", "conv1d", "conv2d", "conv3d", "convolution") and v.channels is not None:
        first = [i for _, lab, i in ins if lab == "args[0]"]
        return _affine(v, first[0]) if first else UNBOUNDED
    if name in _WITHIN and data:
        return _hull(data)
    by_label = {lab: i for _, lab, i in ins}
    if v.operands is not None:  # (a kernel's operands, as the op it stands for orders them)
        by_label = {f"args[{k}]": by_label[lab] for k, lab in enumerate(v.operands) if lab in by_label}
    if v.terms and "args[0]" in by_label and "args[1]" in by_label:  # (a matrix product: sums of products)
        p = _mul(by_label["args[0]"], by_label["args[1]"])
        return _mul(p, (float(v.terms), float(v.terms)))
    if name in ("add", "sub", "mul") and "args[0]" in by_label and "args[1]" in by_label:
        a, b = by_label["args[0]"], by_label["args[1]"]
        if name == "add":
            return a[0] + b[0], a[1] + b[1]
        if len({p for p, _, _ in ins}) == 1:  # x * x, x - x (one value on both sides: the same reals)
            if name == "sub":
                return 0.0, 0.0
            if name == "mul":
                top = max(a[0] ** 2, a[1] ** 2)
                return (0.0 if a[0] <= 0 <= a[1] else min(a[0] ** 2, a[1] ** 2)), top
        return (a[0] - b[1], a[1] - b[0]) if name == "sub" else _mul(a, b)
    return UNBOUNDED


def _transfer(dg: DomainGraph, v: Value, ins: list[tuple[str, str, Interval]]) -> Interval:
    name, cls = base_name(v.target), v.op_class
    ins = ins + [(SCALAR, lab, (c, c)) for lab, c in v.scalars or ()]
    own = domain_range(v.definition.domain) if v.definition.kind is DefKind.FACT else None
    if cls is OpClass.QUANTIZE and own is not None and ins:
        return _on_grid(_hull([i for _, _, i in ins]), v.definition.domain.scale, own)  # type: ignore[union-attr]
    if cls in (OpClass.DEQUANTIZE, OpClass.CONSTANT) and v.values is not None:
        out = v.values  # (a constant's own values)
    elif cls is OpClass.DEQUANTIZE and ins and ins[0][1] == "args[0]":
        out = ins[0][2]
    elif cls is OpClass.PASSTHROUGH and name == "masked_fill":
        by_label = {lab: i for _, lab, i in ins}
        x, fill = by_label.get("args[0]", UNBOUNDED), by_label.get("args[2]", UNBOUNDED)
        out = {"args[1]": fill, "args[2]": x}.get(selected(by_label.get("args[1]")) or "", _hull([x, fill]))
    elif cls is OpClass.PASSTHROUGH and name not in _ADDS_VALUES:
        sel = SELECT_INPUTS.get(name)
        by_label = {lab: i for _, lab, i in ins}
        if name == "where" and (branch := selected(by_label.get("args[0]"))) is not None:
            out = by_label.get(branch, UNBOUNDED)  # (a scalar branch: its value is not recorded)
        elif sel is not None:
            labels = {f"args[{k}]" for k in sel}
            data = [i for _, lab, i in ins if lab in labels]
            out = _hull(data) if len(data) == len(sel) else UNBOUNDED
        elif name in MULTI_INPUT_IDENTITY:
            out = _hull([i for _, lab, i in ins if lab.startswith("args[0]")] or [UNBOUNDED])
        else:
            first = [i for _, lab, i in ins if lab == "args[0]"]
            out = first[0] if first else UNBOUNDED
    elif cls is OpClass.ACTIVATION and v.clamp is not None and ins:
        out = clamped(ins[0][2], v.clamp)
    elif cls is OpClass.COMPUTE and ins:
        out = _compute(dg, v, ins)
        if own is not None:  # (an integer kernel: its result on its grid)
            return _on_grid(out, v.definition.domain.scale, own)  # type: ignore[union-attr]
    elif returned := [i for _, lab, i in ins if lab == RETURNED]:
        out = returned[0]  # (a delegate's output: the partition's value it returns)
    else:
        out = UNBOUNDED
    return _meet(out, own)


def _on_grid(x: Interval, scale: float, own: Interval) -> Interval:
    """`x` rounded to the nearest multiples of `scale` (the grid of a domain with an integer zero
    point), within its range `own`."""
    lo, hi = rounded_span(x[0] / scale, x[1] / scale)
    return _meet((scale * lo, scale * hi), own)


def clamped(x: Interval, bounds: Interval) -> Interval:
    lo, hi = bounds
    return min(max(x[0], lo), hi), min(max(x[1], lo), hi)


def value_ranges(dg: DomainGraph, given: Mapping[str, Interval] | None = None) -> dict[str, Interval]:
    """Every value's interval, in one pass in program order. `given`: values whose
    interval is known otherwise (the codes a backend really writes there); what follows them is
    computed from them."""
    out: dict[str, Interval] = {}
    g = dg.g
    for name in dg.in_order():
        if given is not None and name in given:
            out[name] = given[name]
            continue
        ins = [(p, lab, out[p]) for p, data in g._pred[name].items() for lab in data["args"]]
        out[name] = _meet(_transfer(dg, dg.value(name), ins), _rows(dg, name, out, given or {}))
        if (parent := dg.fed.get(name)) in out:  # (a partition's input: what its call feeds it)
            out[name] = _meet(out[name], out[parent])
    return out


# -- the elements where one thing happens: ranges conditioned on a source's values -------------------

#: Ops whose output element i reads only element i of each operand of its own size.
ELEMENTWISE = frozenset({
    "add", "add_", "sub", "sub_", "rsub", "mul", "mul_", "div", "neg", "abs", "sigmoid", "tanh", "exp", "gelu",
    "silu", "hardswish", "hardsigmoid", "erf", "sqrt", "rsqrt", "reciprocal", "log", "maximum", "minimum",
    "relu", "relu_", "relu6", "hardtanh", "hardtanh_", "clamp", "clamp_", "clamp_min", "clamp_max",
    *COMPARISONS, "where", "masked_fill", "to", "_to_copy", "_to_dim_order_copy", "clone", "_clone_dim_order",
    "quantize_per_tensor", "dequantize_per_tensor",
})  # fmt: skip


def aligned(
    dg: DomainGraph, source: str, erring: str | None = None, index: Mapping[str, int] | None = None
) -> frozenset[str]:
    """The values computed element by element from `source` (same size, no broadcast of it, through
    `ELEMENTWISE` ops only), so that on the elements where `source` lies in some interval, their ranges
    computed from that interval hold there (`value_ranges` with `source` given it, every other value given
    its own range). Not one that reads, beside, a value an error starting at `erring` reaches by another
    path: that error is on other elements too. Walks out from `source` only (`index`: each value's place in
    program order, when the caller has it)."""
    n = dg.value(source).numel
    if n is None:
        return frozenset({source})
    index = index if index is not None else {name: i for i, name in enumerate(dg.in_order())}
    reached = nx.descendants(dg.g, erring) | {erring} if erring is not None else set()
    fed_by: dict[str, list[str]] = {}
    for child, parent in dg.fed.items():
        fed_by.setdefault(parent, []).append(child)
    out, seen = {source}, {source}
    todo = [(index[s], s) for s in [*dg.g._succ[source], *fed_by.get(source, ())]]
    heapq.heapify(todo)
    while todo:  # (in program order: every value a candidate reads is decided before it)
        _, name = heapq.heappop(todo)
        if name in seen:
            continue
        seen.add(name)
        if dg.value(name).numel != n or not _aligned_step(dg, name, out, reached):
            continue
        out.add(name)
        for s in [*dg.g._succ[name], *fed_by.get(name, ())]:
            if s not in seen:
                heapq.heappush(todo, (index[s], s))
    return frozenset(out)


def _aligned_step(dg: DomainGraph, name: str, out: Collection[str], reached: Collection[str]) -> bool:
    """Does `name` hold, element by element, what values in `out` hold there: a delegate's input (what its
    call feeds it) or output (what it returns), or an element-wise op of them reading no value `reached`."""
    preds = dg.g._pred[name]
    returned = [p for p, data in preds.items() if RETURNED in data["args"]]
    if dg.fed.get(name) in out or (returned and returned[0] in out):
        return True
    v = dg.value(name)
    if (v.stands_for or base_name(v.target)) not in ELEMENTWISE:  # (a kernel, as the op it stands for)
        return False
    return not any(p in reached and p not in out for p in preds)


#: How many pieces a source's codes are split into at most (an int8 source: one code each), and how many
#: transfers one split may take (a wide element-wise region gets coarser pieces: still sound).
PIECES, TRANSFERS = 256, 100_000
#: How many sources `correlated` splits on at most, the nearest to the values it is asked about first.
SOURCES = 16


def split(
    dg: DomainGraph, source: str, rng: Mapping[str, Interval], index: Mapping[str, int] | None = None
) -> dict[str, Interval]:
    """`rng` narrowed on the values computed element by element from `source` (`aligned`): each piece of
    the codes `source` reaches taken alone, and the hull of what every piece gives. One interval per value
    cannot say that two values of one element move together — where a mask computed from x decides what
    x's product holds, ``x * (x > t)`` — and one code at a time can (input splitting, as verifiers of
    networks do). Sound for every element: each element's source lies in one piece, and every value not
    aligned with it keeps its whole range."""
    d, have = grid_of(dg, source), rng.get(source)
    if d is None or have is None or not all(map(math.isfinite, have)):
        return dict(rng)
    span = domain_range(d)
    lo, hi = rounded_span(have[0] / d.scale, have[1] / d.scale)  # type: ignore[union-attr, operator]
    lo, hi = max(int(lo), round(span[0] / d.scale)), min(int(hi), round(span[1] / d.scale))  # type: ignore[index, union-attr, operator]
    index = index if index is not None else {name: i for i, name in enumerate(dg.in_order())}
    order = sorted(aligned(dg, source, index=index) - {source}, key=index.__getitem__)
    if lo > hi or not order:
        return dict(rng)
    pieces = min(PIECES, max(16, TRANSFERS // len(order)))
    step = max(1, math.ceil((hi - lo + 1) / pieces))
    hull: dict[str, Interval] = {}
    for first in range(lo, hi + 1, step):
        piece = {source: (d.scale * first, d.scale * min(first + step - 1, hi))}  # type: ignore[union-attr, operator]
        out = ChainMap(piece, rng)
        for name in order:
            piece[name] = transfer(dg, name, out)
        for name in order:
            hull[name] = _hull([hull[name], piece[name]]) if name in hull else piece[name]
    sharper = dict(rng)
    for name, r in hull.items():
        whole = rng.get(name, UNBOUNDED)
        if max(r[0], whole[0]) <= min(r[1], whole[1]):  # (disjoint only by float slack: keep the whole)
            sharper[name] = max(r[0], whole[0]), min(r[1], whole[1])
    return sharper


def grid_of(dg: DomainGraph, name: str) -> Domain | None:
    """The fixed per-tensor integer grid `name`'s reals lie on (codes times a scale), so that its codes split
    its values with nothing between them: a quantize or dequantize, a folded op's output, a lowered tensor's
    domain, or a copy of one value's codes (a reduction of codes after the Cortex-M passes: an alias)."""
    v = dg.value(name)
    if v.definition.kind is DefKind.FACT:
        return v.definition.domain if domain_range(v.definition.domain) is not None else None
    data = [p for p, data in dg.g._pred[name].items() if "args[0]" in data["args"]]
    if v.definition.kind is DefKind.ALIAS and v.op_class is OpClass.PASSTHROUGH and len(dg.g._pred[name]) == 1:
        return grid_of(dg, data[0]) if data else None
    return None


def correlated(dg: DomainGraph, rng: Mapping[str, Interval], near: Collection[str]) -> dict[str, Interval]:
    """`rng` split (`split`) on values upstream of `near` whose aligned values read them twice — the only
    place one interval per value loses what two paths of one element share: the `SOURCES` nearest, each
    a value on its grid (not a dequantize: its quantize's reals), applied in program order."""
    index = {name: i for i, name in enumerate(dg.in_order())}
    chosen = []
    for n in sources(dg, near):
        on = aligned(dg, n, index=index)
        if any(sum(len(data["args"]) for p, data in dg.g._pred[m].items() if p in on) > 1 for m in on):
            chosen.append(n)
            if len(chosen) == SOURCES:
                break
    sharper = dict(rng)
    for name in sorted(chosen, key=index.__getitem__):
        sharper = split(dg, name, sharper, index)
    return sharper


def sources(dg: DomainGraph, near: Collection[str]) -> Iterator[str]:
    """The values upstream of `near` (across delegate boundaries) that can be split on their codes: each
    on a fixed per-tensor grid (`grid_of`; not a dequantize: its quantize's reals), nearest first, at most
    16 * `SOURCES` of them."""
    seen, todo, looked = set(near), deque(n for n in near if n in dg.g), 0
    while todo and looked < 16 * SOURCES:
        n = todo.popleft()
        v = dg.value(n)
        if v.op_class is not OpClass.DEQUANTIZE and v.numel is not None and grid_of(dg, n) is not None:
            looked += 1
            yield n
        for p in [*dg.g._pred[n], *([dg.fed[n]] if n in dg.fed else [])]:  # (across a delegate's boundary)
            if p not in seen:
                seen.add(p)
                todo.append(p)


def transfer(dg: DomainGraph, name: str, out: Mapping[str, Interval]) -> Interval:
    """`name`'s interval from its inputs' in `out` (one step of `value_ranges`)."""
    ins = [(p, lab, out[p]) for p, data in dg.g._pred[name].items() for lab in data["args"]]
    r = _meet(_transfer(dg, dg.value(name), ins), _rows(dg, name, out, {}))
    parent = dg.fed.get(name)  # (a delegate's input: what its call feeds it)
    return _meet(r, out.get(parent)) if parent is not None else r


# -- one value read twice: what one interval per value cannot say ---------------------------------

#: Reductions that are the identity when every reduced dimension has one element (numel kept).
_REDUCTIONS = frozenset({"amax", "amin", "mean", "sum"})
#: Pass-through ops that keep every element where it is in memory order (a reshape, not a permute).
_IN_ORDER = frozenset({"view", "view_copy", "reshape", "_unsafe_view", "squeeze", "squeeze_copy", "unsqueeze",
                       "unsqueeze_copy", "flatten", "clone", "contiguous"})  # fmt: skip


def _identity_on(v: Value, x: Interval | None) -> bool:
    """Is `v` the identity on the reals `x` its input holds: an abs computed in float of values >= 0, or a
    ReLU / clamp that copies its input's codes and whose bounds hold them?"""
    d = v.definition
    if x is None:
        return False
    if base_name(v.target) == "abs":
        return d.kind is DefKind.FACT and d.domain is not None and d.domain.is_float and x[0] >= 0
    return (
        v.op_class is OpClass.ACTIVATION
        and d.kind is DefKind.ALIAS
        and v.clamp is not None
        and v.clamp[0] <= x[0]
        and x[1] <= v.clamp[1]
    )


def _carried(dg: DomainGraph, v: Value, ranges: Mapping[str, Interval] | None = None) -> str | None:
    """The input whose reals `v` holds unchanged, element by element in memory order: a reshape, a
    reduction over dimensions of one element, a product with a constant that is exactly 1.0 (a mean's
    1/n over one element), or — given the values' intervals — an abs or clamp that is the identity on
    what its input holds (``abs(t) - t`` is 0 where ``t >= 0``)."""
    name = base_name(v.target)
    preds = [(p, lab) for p, data in dg.g._pred[v.name].items() for lab in data["args"]]
    single = len(preds) == 1 and preds[0][1] == "args[0]"
    if single and (name in _REDUCTIONS or name in _IN_ORDER):
        src = preds[0][0]
    elif single and ranges is not None and _identity_on(v, ranges.get(preds[0][0])):
        src = preds[0][0]
    elif name in ("mul", "mul_") and len(preds) == 2:
        ones = [p for p, _ in preds if dg.value(p).values == (1.0, 1.0)]
        src = next((p for p, _ in preds if p not in ones), None) if ones else None
    else:
        return None
    return src if src is not None and dg.value(src).numel == v.numel else None


def same_source(
    dg: DomainGraph, name: str, avoid: Collection[str] = (), ranges: Mapping[str, Interval] | None = None
) -> tuple[str, Domain] | None:
    """(the value whose codes `name` carries unchanged — through dequantizes, requantizes to that same
    domain and `_carried` ops: a softmax's ``x - amax(x)`` or a LayerNorm's ``x - mean(x)`` over one
    element —, the domain they are read in), or None. Two values with one source hold the same reals on
    both sides of a comparison of the program with its backend, unless a wrong code lands on the way
    (`avoid`). `ranges`: the values' intervals, where an op that is the identity on them carries too."""
    grid: Domain | None = None
    while True:
        v = dg.value(name)
        if v.op_class in (OpClass.QUANTIZE, OpClass.DEQUANTIZE):
            d = v.own_domain
            if d is None or (grid is not None and d != grid):
                return None
            grid = d
            src = dg.producer(name, "args[0]")
            if src is None:
                return None
            computed = not (dg.value(src).op_class is OpClass.DEQUANTIZE or _carried(dg, dg.value(src), ranges))
            if v.op_class is OpClass.QUANTIZE and computed:
                return name, d  # (its input is computed here: the root both operands must share)
            if v.op_class is OpClass.DEQUANTIZE and dg.value(src).op_class is not OpClass.QUANTIZE:
                return (src, d) if name not in avoid else None  # (codes no quantize here wrote: an input)
        elif (src := _carried(dg, v, ranges)) is None:
            return None
        if name in avoid:
            return None
        name = src


def _one_value(dg: DomainGraph, name: str, given: Mapping[str, Interval], out: Mapping[str, Interval]) -> bool:
    """Is `name` a difference of one value's reals with themselves, element by element?"""
    v = dg.value(name)
    a, b = dg.producer(name, "args[0]"), dg.producer(name, "args[1]")
    if base_name(v.target) not in ("sub", "sub_") or a is None or b is None:
        return False
    if len({v.numel, dg.value(a).numel, dg.value(b).numel}) != 1 or v.numel is None:
        return False
    root = same_source(dg, a, given, out)
    return root is not None and root == same_source(dg, b, given, out)


# -- a softmax's rows ------------------------------------------------------------------------------


def _codes(dg: DomainGraph, name: str | None, rounded: bool = False) -> tuple[str, Domain] | None:
    """(the value a dequantize reads, the domain it reads it in): two such pairs that are equal are the
    same reals. `rounded`: only a quantize's codes, read in its own domain (a value rounded to it)."""
    v = dg.value(name) if name is not None else None
    if v is None or v.op_class is not OpClass.DEQUANTIZE or v.definition.kind is not DefKind.FACT:
        return None
    src, d = dg.producer(name, "args[0]"), v.definition.domain  # type: ignore[arg-type]
    if src is None or domain_range(d) is None:
        return None
    q = dg.value(src)
    if rounded and (
        q.op_class is not OpClass.QUANTIZE or q.definition.kind is not DefKind.FACT or q.definition.domain != d
    ):
        return None
    return src, d  # type: ignore[return-value]


def _row_max_gap(
    dg: DomainGraph, sub: str, out: Mapping[str, Interval], given: Mapping[str, Interval]
) -> tuple[float, str, tuple[int, ...]] | None:
    """`x - amax(x)` (a softmax's first step): (how far above 0 it can be — the row maximum is
    requantized, half a step of its domain —, the amax, its dimensions), or None for any other sub."""
    v = dg.value(sub)
    if base_name(v.target) != "sub":
        return None
    x, m_codes = _codes(dg, dg.producer(sub, "args[0]")), _codes(dg, dg.producer(sub, "args[1]"), rounded=True)
    m = dg.producer(m_codes[0]) if m_codes is not None else None
    if x is None or m is None or base_name(dg.value(m).target) != "amax" or dg.value(m).reduced is None:
        return None
    if _codes(dg, dg.producer(m, "args[0]")) != x or {x[0], m_codes[0], m} & set(given):  # type: ignore[index]
        return None  # (not the same codes, or wrong ones the backend writes: no relation left)
    d = m_codes[1]  # type: ignore[index]
    span, reach = domain_range(d), out.get(m)
    if span is None or reach is None or not (span[0] <= reach[0] and reach[1] <= span[1]):
        return None  # (a maximum the amax's domain clamps can be far below the row's)
    return d.scale / 2, m, dg.value(m).reduced  # type: ignore[operator, return-value]


def _rows(dg: DomainGraph, name: str, out: Mapping[str, Interval], given: Mapping[str, Interval]) -> Interval | None:
    """What a softmax's decomposition keeps of its rows: `x - amax(x)` is at most half a step of the
    maximum's domain above 0, and a sum over the same rows of the exp of it holds the row maximum's
    term, exp(0) rounded twice. Arm's int16 exp and reciprocal TABLEs are thousands of LSB off on
    positive exponents and on sums near 0, which a softmax never reaches (measured on the TOSA
    reference model: the a16w8 softmax computes right)."""
    v = dg.value(name)
    if _one_value(dg, name, given, out):
        return 0.0, 0.0
    gap = _row_max_gap(dg, name, out, given)
    if gap is not None:
        return -math.inf, gap[0]
    if base_name(v.target) != "sum" or v.reduced is None:
        return None
    terms = _codes(dg, dg.producer(name, "args[0]"), rounded=True)
    e = dg.producer(terms[0], "args[0]") if terms is not None else None
    if e is None or base_name(dg.value(e).target) != "exp" or {terms[0], e} & set(given):  # type: ignore[index]
        return None
    sub = _codes(dg, dg.producer(e, "args[0]"), rounded=True)
    s = dg.producer(sub[0], "args[0]") if sub is not None else None
    gap = _row_max_gap(dg, s, out, given) if s is not None and sub[0] not in given else None  # type: ignore[index]
    if gap is None or gap[2] != v.reduced or dg.value(gap[1]).numel != v.numel:
        return None
    lo = -gap[0] - sub[1].scale / 2  # type: ignore[index, operator]  # (rounded into the sub's domain)
    top = math.exp(lo) - terms[1].scale / 2  # type: ignore[index, operator]  # (and the exp's)
    if domain_range(sub[1])[1] < -gap[0] or domain_range(terms[1])[1] < math.exp(lo):  # type: ignore[index]
        return None  # (a domain whose top is below the row maximum's term clamps it)
    rest = out.get(terms[0], UNBOUNDED)[0]  # type: ignore[index]
    if not math.isfinite(rest) or not v.numel or not dg.value(e).numel:
        return None
    k = dg.value(e).numel // v.numel  # type: ignore[operator]
    return top + (k - 1) * min(rest, 0.0), math.inf
