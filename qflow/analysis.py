"""From a domain graph to a Report: propagate, prove, explain (torch-free)."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator, Mapping

import networkx as nx

from qflow import targets
from qflow.bounds import Bound
from qflow.errors import InputError
from qflow.gc_pause import paused_gc
from qflow.graph import DomainGraph, ObligationKind
from qflow.impact import Impact
from qflow.lattice import propagate
from qflow.lattice.elements import Elem
from qflow.ops import OpClass
from qflow.report.kinds import kind
from qflow.report.model import NOTHING_QUANTIZED, SEVERITIES, Finding, Report
from qflow.solvers.prove import Result, Side, Status, prove
from qflow.targets import Outcome

_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+)')
_LIBRARY_PATHS = ("/torch/", "/torchao/", "/executorch/", "<frozen", "<string>")


def _side(s: Side | None) -> dict[str, object] | None:
    if s is None or s.domain is None:
        return None
    d = s.domain.to_dict()
    if s.real and not s.domain.is_float:
        d["real"] = True
    return d


def _source(stack_trace: str | None) -> str | None:
    """The innermost user frame of an FX stack trace, as file:line."""
    if not stack_trace:
        return None
    frames = [f for f in _FRAME_RE.findall(stack_trace) if not any(p in f[0] for p in _LIBRARY_PATHS)]
    return f"{frames[-1][0]}:{frames[-1][1]}" if frames else None


def _describe(dg: DomainGraph, r: Result) -> tuple[str, str]:
    """(finding kind, message) for a failed obligation."""
    ob = r.obligation
    prod = str(r.produced.domain) if r.produced and r.produced.domain else "?"
    exp = str(r.expected.domain) if r.expected and r.expected.domain else "?"
    if r.produced and r.produced.real and r.produced.domain and not r.produced.domain.is_float:
        prod = f"real numbers on the grid {prod}"
    if r.status is Status.UNPROVEN and ob.kind is ObligationKind.STRUCTURAL:  # (decided on numbers qflow lacks)
        return ob.finding_kind, f"unproven: {ob.detail}"
    if r.status is Status.UNPROVEN:
        blocker = r.blockers[0] if r.blockers else "an unknown value"
        root = blocker.split(": ", 1)[0]  # (blockers read "value: reason"; a name may hold ":")
        value = dg.get(root)
        if value is not None and value.definition.blocks_as is not None:  # a known cause: its own words
            return value.definition.blocks_as, f"unproven: {value.definition.reason}."
        k = "unknown-op" if value is not None and value.op_class is OpClass.UNKNOWN else "missing-domain"
        what = {
            ObligationKind.USE: f"{ob.node} {ob.arg} expects {ob.expected}",
            ObligationKind.CLAIM: f"{ob.node} claims output domain {ob.expected}",
            ObligationKind.SAME_AS_FIRST: f"{ob.node}'s inputs {ob.value} and {ob.other} must share a domain",
            ObligationKind.NO_FOLD_CHANGE: f"the quantize after {ob.node} must not change its domain",
        }.get(ob.kind, ob.node)
        return k, f"unproven: {what}, but {'; '.join(r.blockers) or blocker}."
    v = dg.value(ob.value)
    if ob.kind is ObligationKind.STRUCTURAL:
        return ob.finding_kind, ob.detail
    if ob.kind is ObligationKind.CLAIM and ob.finding_kind == "unenforced-narrow-range":
        claimed = r.expected.domain if r.expected and r.expected.domain else None
        rng = f"[{claimed.qmin}, {claimed.qmax}]" if claimed else "?"
        return ob.finding_kind, (
            f"{ob.node} ({v.target}) claims output range {rng} in {exp}, but its rescale saturates "
            f"only to {prod}: no clamp enforces the narrowed range (an activation fused by moving qmin, "
            "ExecuTorch Arm FuseQuantizedActivationPass)."
        )
    if ob.kind is ObligationKind.CLAIM:
        return ob.finding_kind, (
            f"{ob.node} ({v.target}) is a {v.op_class.value} op: it copies the codes of its input, which are "
            f"in {prod}, yet claims output domain {exp}. No node converts the codes."
        )
    if ob.kind is ObligationKind.NO_FOLD_CHANGE and ob.arg == ob.node:  # (a lowered clamp: no quantize left)
        return ob.finding_kind, (
            f"{ob.node} ({dg.value(ob.node).target}) writes codes of {prod} that the program reads in {exp}: the "
            f"requant across the activation was dropped ({ob.detail})."
        )
    if ob.kind is ObligationKind.NO_FOLD_CHANGE:
        q = ob.arg
        carried = "" if ob.value == ob.node else f" (the codes are still those of {ob.value}'s input)"
        text = (
            f"the quantize {q} after {ob.node} ({dg.value(ob.node).target}, a pass-through op) is a real "
            f"requant{carried}: {prod} → {exp}. It must not be folded into {ob.node}; a fold pass that does "
            "(ExecuTorch Arm FoldAndAnnotateQParamsPass ≤ 1.5.1) miscompiles it."
        )
        return ob.finding_kind, f"{text} {ob.detail}" if ob.detail else text
    if ob.kind is ObligationKind.SAME_AS_FIRST and ob.finding_kind == "merged-duplicate-users":
        return ob.finding_kind, (
            f"{ob.node} computes what {ob.other} computes (same op, same input), in the fixed domain {prod} "
            f"where {ob.other} has {exp}. The backend merges them after folding the Q/DQ nodes (Arm "
            f"FuseDuplicateUsersPass): {ob.node}'s consumers would read {ob.other}'s codes."
        )
    if ob.kind is ObligationKind.SAME_AS_FIRST and dg.form == "annotated":
        return ob.finding_kind, (
            f"before calibration, the input edge {ob.value} of {ob.node} (a pass-through op) and its output "
            f"are not forced into one domain: z3 finds calibration outcomes where they differ, e.g. {prod} "
            f"vs {exp}. Nothing between them can convert the codes."
        )
    if ob.kind is ObligationKind.SAME_AS_FIRST:
        return ob.finding_kind, (
            f"{ob.node} copies its inputs into one tensor, but input {ob.value} is in {prod} "
            f"while input {ob.other} is in {exp}."
        )
    return ob.finding_kind, f"{ob.node} {ob.arg} expects {exp}, but its producer {ob.value} produces {prod}."


def _within_rounding(r: Result, bound: Bound) -> str:
    """The message of a domain change a code copy drops that moves no output code."""
    ob = r.obligation
    if ob.kind is ObligationKind.STRUCTURAL:  # (its detail weighs it already)
        return f"{ob.detail} That is within the rounding of the requant itself: it computes right."
    prod = str(r.produced.domain) if r.produced and r.produced.domain else "?"
    exp = str(r.expected.domain) if r.expected and r.expected.domain else "?"
    return (
        f"{ob.node} copies codes in {prod} into {exp}, a domain change the lowering drops; over every code "
        f"its input can hold that {bound}, within the rounding of the requant itself: it computes right."
    )


def _masked(dg: DomainGraph, r: Result) -> str:
    """The message of a violation that moves no program output beyond its rounding."""
    k, what = _describe(dg, r)
    assert r.masked is not None
    reach = (
        f"reaches {r.masked.output} at {r.masked.lsb:.3g} output LSB at most before rounding, within the "
        "rounding of the output itself"
        if r.masked.output is not None
        else "reaches no program output (no output depends on it, or every requant on its way saturates on both sides)"
    )
    return (
        f"{what} Downstream it is masked: followed through every op to the program's outputs (clamps, "
        f"weights, value ranges, requant ranges), its error {reach}: it computes right."
    )


def _reach(dg: DomainGraph, worst: Impact) -> str:
    """How far all the violations together move the program's outputs (`Result.reach`)."""
    codes = math.ceil(worst.lsb - 1e-9)  # (a real error e moves a rounded code by at most ceil(e))
    return (
        f"With every violation of the program followed through every op to its outputs (clamps, weights, "
        f"value ranges, requant ranges), the outputs move by up to {codes} LSB ({worst.lsb:.3g} output LSB "
        f"before rounding, at output {dg.outputs.index(worst.output)}: {worst.output})."
    )


#: Unproven finding kinds whose cause is no domain pair (no produced / expected side to show).
_NO_SIDES = frozenset({"reference-needed", "unvalidated-lowering"})


#: Finding kinds that break a target's op contract: how they break is the target's to say.
_CONTRACT_KINDS = frozenset(
    {"requant-after-passthrough", "requant-across-activation", "dropped-scale", "passthrough-domain-change"}
)


def _breaks_on(target: str, where: tuple[str, ...], kind_id: str) -> dict[str, str]:
    """target name → how the program breaks there."""
    t = targets.get(target)
    names = where or t.members or (t.name,)
    how = {n: targets.get(n).outcome if kind_id in _CONTRACT_KINDS else Outcome.MISCOMPILE for n in names}
    return {n: o.value for n, o in how.items()}


class DomainTexts(Mapping[str, str]):
    """Each value's propagated element as text, written when first read: a report
    of a 100k-value graph is mostly never asked for them (pictures and debugging).
    propagate shares one element among the values of one fact: each is written once."""

    def __init__(self, env: dict[str, Elem]) -> None:
        self._env = env
        self._texts: dict[int, str] = {}

    def __getitem__(self, name: str) -> str:
        e = self._env[name]
        text = self._texts.get(id(e))  # (the elements live in `_env`: ids are not reused)
        if text is None:
            text = self._texts[id(e)] = str(e)
        return text

    def __iter__(self) -> Iterator[str]:
        return iter(self._env)

    def __len__(self) -> int:
        return len(self._env)

    def __repr__(self) -> str:
        return repr(dict(self))


def _edges_go_forward(g: nx.DiGraph) -> bool:
    """Does every edge go forward in the order the nodes were added?"""
    order = {n: i for i, n in enumerate(g)}
    for u, succ in g._succ.items():  # (networkx's own dict: no view per node)
        i = order[u]
        for v in succ:
            if order[v] <= i:
                return False
    return True


def _check_acyclic(dg: DomainGraph) -> None:
    # an adapter adds values in its program's (topological) order: when every edge goes
    # forward in that order the graph has no cycle, and one linear pass shows it
    if _edges_go_forward(dg.g):
        return
    if not nx.is_directed_acyclic_graph(dg.g):
        cycle = nx.find_cycle(dg.g)
        raise InputError(f"the graph has a cycle: {' → '.join(u for u, _ in cycle)}", cycle[0][0])


@paused_gc()
def analyze_graph(dg: DomainGraph, name: str = "") -> Report:
    """Prove every obligation of a domain graph and explain the failures."""
    t0 = time.perf_counter()
    _check_acyclic(dg)
    defs = {n: v.definition for n, v in dg.by_name().items()}
    for value, d in defs.items():
        for s in d.sources:
            if s not in dg.g:
                raise InputError(f"alias source {s!r} is not a value of the graph", value)
    t1 = time.perf_counter()
    env = propagate(defs)
    t2 = time.perf_counter()
    results, stats = prove(dg)
    t3 = time.perf_counter()

    counts = dict.fromkeys(Status, 0)
    findings: dict[tuple[str, str], Finding] = {}
    proved = Status.PROVED
    for r in results:
        counts[r.status] += 1
        bound = r.bound or r.obligation.bound
        if r.status is proved and not r.obligation.inform and bound is None and r.masked is None:
            continue
        if r.masked is not None:  # a wrong read no output sees beyond rounding
            k, msg = r.obligation.finding_kind, _masked(dg, r)
            bound = Bound(r.masked.lsb, 0)
        elif r.status is proved and bound is not None:  # a domain change a copy drops, within rounding
            k, msg = r.obligation.finding_kind, _within_rounding(r, bound)
        else:
            k, msg = _describe(dg, r)
            if bound is not None and r.obligation.kind is not ObligationKind.STRUCTURAL:
                msg = f"{msg} Over every code its input can hold, that {bound}."
            if r.reach is not None:
                msg = f"{msg} {_reach(dg, r.reach)}"
        spec = kind(k)
        if r.status is Status.PROVED:  # an obligation that holds but is worth knowing about
            severity = r.obligation.severity or "info"
        else:
            severity = r.obligation.severity or spec.severity
        key = (k, r.obligation.node)
        if key in findings:
            continue
        node = dg.value(r.obligation.node) if r.obligation.node in dg.g else None
        findings[key] = Finding(
            kind=k,
            node=r.obligation.node,
            severity=severity,
            message=msg,
            status=r.status.value,
            produced=_side(r.produced) if k not in _NO_SIDES else None,
            expected=_side(r.expected) if k not in _NO_SIDES else None,
            edge=list(r.obligation.edge) if r.obligation.edge else None,
            fix=spec.fix,
            source=_source(node.stack_trace) if node else None,
            module=node.module_path if node else None,
            targets=_breaks_on(dg.target, r.obligation.targets, k),
            bound_lsb=round(bound.lsb, 3) if bound is not None else None,
            output_lsb=round(r.reach.lsb, 3) if r.reach is not None else None,
        )
    quantized = dg.quantized()
    report = Report(
        proved=quantized and counts[Status.VIOLATED] == 0 and counts[Status.UNPROVEN] == 0,
        # the worst first: by severity, then by how far the output moves (stable otherwise)
        findings=sorted(findings.values(), key=lambda f: (SEVERITIES.index(f.severity), -(f.bound_lsb or 0.0))),
        obligations={s.value: n for s, n in counts.items()},
        form=dg.form,
        name=name,
        target=dg.target,
        notes=list(dg.notes)
        if quantized or counts[Status.UNPROVEN] or counts[Status.VIOLATED]
        else [NOTHING_QUANTIZED, *dg.notes],
        quantized=quantized,
        stats={
            "values": len(dg),
            "regions": stats.regions,
            "largest_region": stats.largest_region,
            "solver_checks": stats.solver_checks,
            "check_s": round(t1 - t0, 6),
            "propagate_s": round(t2 - t1, 6),
            "prove_s": round(t3 - t2, 6),
        },
    )
    report.domains = DomainTexts(env)
    return report
