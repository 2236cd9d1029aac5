"""The public entry points. Imports torch lazily so `import qflow` stays light."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qflow import targets
from qflow.analysis import analyze_graph
from qflow.errors import InputError, ProofError
from qflow.gc_pause import paused_gc
from qflow.graph import DomainGraph
from qflow.report.model import Report
from qflow.solvers.repair import Plan, plan_repair
from qflow.targets import Target


def domain_graph(
    obj: Any,
    form: str | None = None,
    target: str | Target | None = None,
    carry: bool = True,
    reference: Any = None,
) -> DomainGraph:
    """The domain graph qflow builds for `obj` (see `analyze` for what it accepts).
    `carry=False`: every requant a code copy drops is an obligation of its own
    (the graph repairs are planned on; see `qflow.ir.copy_chains`)."""
    if isinstance(obj, DomainGraph):
        return obj
    t = targets.get(target)  # an unknown name fails before any torch import
    pte_bytes = isinstance(obj, (bytes, bytearray)) and bytes(obj[4:6]) == b"ET"
    if pte_bytes or (isinstance(obj, (str, Path)) and str(obj).endswith(".pte")):  # as shipped: torch-free
        from qflow.integrations import pte

        if form not in (None, "lowered"):
            what = "the .pte bytes" if pte_bytes else str(obj)
            raise InputError(f"{what}: an ExecuTorch program is read as shipped (form 'lowered'), not {form!r}")
        if reference is None:
            dg = pte.build(obj)
        else:
            from qflow.integrations import embedding_tables

            owner = _owner(reference)
            dg = pte.build(obj, owner, lambda: embedding_tables.read(owner))
        if target is not None and t.name not in (dg.target, "generic"):
            dg.notes.append(f"target {t.name} was given: a .pte is read by the targets of its own delegates "
                            f"and kernels ({dg.target})")  # fmt: skip
        return dg
    read_reference = t.hook("read_reference") if reference is not None else None
    if reference is not None and read_reference is None:
        raise InputError(
            f"reference: applies to an ExecuTorch .pte program, or to a lowered program of a target that "
            f"reads one (arm-tosa, cortex-m), not to {type(obj).__name__} for target {t.name}"
        )
    from qflow.ir.quiet import library_noise

    with library_noise():  # (the libraries' imports and reads log what a qflow user cannot act on)
        from qflow.integrations import annotated
        from qflow.integrations.fx import build
        from qflow.ir.load import graph_module_of

        gm, ep = graph_module_of(obj)
        if form == "annotated" or (form is None and annotated.is_annotated(gm) and not _has_qdq(gm)):
            return annotated.build(gm, t)
        return build(gm, ep, form, t, carry, read_reference(_owner(reference)) if read_reference else None)


def _owner(reference: Any) -> Any:
    """The ExportedProgram a `reference=` names (an ExportedProgram or a .pt2 path)."""
    from qflow.ir.load import graph_module_of

    _, owner = graph_module_of(reference)
    if owner is None:
        raise InputError("reference: pass the ExportedProgram the program came from (or its .pt2), not a bare graph")
    return owner


def _has_qdq(gm: Any) -> bool:
    return any("quantize_per_" in str(n.target) for n in gm.graph.nodes if n.op == "call_function")


def analyze(
    obj: Any, form: str | None = None, name: str = "", target: str | Target | None = None, reference: Any = None
) -> Report:
    """Prove that every consumer in `obj` sees the domain it declares.

    `obj` is a torch.fx.GraphModule (annotated, PT2E Q/DQ, or Arm-folded), a
    torch.export.ExportedProgram, an ExecuTorch EdgeProgramManager, a path to
    a .pt2 file, an ExecuTorch .pte program (its path or its bytes, e.g.
    ``to_executorch().buffer``: read as shipped, with its delegate payloads;
    no torch needed), or a DomainGraph. `form` overrides the detected IR form
    ("annotated", "qdq", "folded" or "lowered"; a lowered program that
    delegates nothing looks like a Q/DQ graph, so say "lowered" for it).
    `target` names the backend whose contract the program is proved against
    ("arm-tosa", "xnnpack", or an ExecuTorch partitioner object; None or
    "generic": arm-tosa and xnnpack at once; "cortex-m"). A lowered program's partitions
    are always read by their own delegate's target, and a .pte by its delegates' (the
    report names it).

    `reference`: the PT2E program `obj` came from (its ExportedProgram or a .pt2 path), for
    a .pte, or for a program a target rewrites in place (cortex-m, after CortexMPassManager).
    A TOSA payload keeps its weights as bare codes; each one whose values are those of exactly
    one quantized constant of the reference takes that constant's scales, and each CLAMP must
    be one of the reference's activations, so the artifact check can prove what depends on
    them: that the .pte computes the reference's declared domains. A CPU quantized embedding
    kernel's table (codes unpacked, scales, zero points) must be one of the reference's. A
    Cortex-M linear's bias (in `kernel_sum` on MVE) is checked against the reference's quantized bias, and a Cortex-M
    .pte against the reference lowered again: its kernels' integers are checked as the .pte has
    them (`qflow.targets.cortex_m.pte_plan`).
    """
    # one GC pause over building and proving: the graph is garbage by the time the
    # collector runs again, so it is freed by reference counting, never traversed
    with paused_gc():
        return analyze_graph(domain_graph(obj, form, target, reference=reference), name=name)


def plan(obj: Any, form: str | None = None, objective: str = "count", target: str | Target | None = None) -> Plan:
    """The minimal requant plan for `obj` (nothing is modified)."""
    t = targets.get(target)
    dg = domain_graph(obj, form, t, carry=False)  # (as repair_with_plan)
    return plan_repair(dg, objective, int16_zero_point_zero=t.int16_zero_point_zero)


def repair(obj: Any, form: str | None = None, objective: str = "count", target: str | Target | None = None) -> Any:
    """A copy of `obj`, of the same kind, with the minimal set of requants inserted.

    `obj` is anything `analyze` takes; a `.pt2` path is loaded and the repaired
    `ExportedProgram` returned. `objective` is "count" (fewest requants) or
    "bytes" (least data moved); `target` names the backend whose rules a
    requant must respect (int16 zero point 0 on TOSA and the generic target).
    A proved program with no warning is returned unchanged (the same object):
    repair never touches a program it can already vouch for. Raises
    `ProofError` (carrying the report, whose notes say what blocks the repair)
    when the repaired graph still does not prove, nothing can repair it, or
    nothing in `obj` is quantized (`Report.status` "nothing-quantized"). A
    change inside a delegate of a lowered program is made on its partition,
    which the same backend then lowers again; `InputError` names the delegate
    when that is impossible.
    """
    fixed, _, _ = repair_with_plan(obj, form, objective, target)
    return fixed


def repair_with_plan(
    obj: Any, form: str | None = None, objective: str = "count", target: Any = None, name: str = ""
) -> tuple[Any, Plan, Report]:
    """`repair`, also returning the plan carried out and the repaired program's
    report (its JSON has a ``"repair"`` entry counting every change)."""
    from qflow.ir.quiet import library_noise

    with library_noise():  # (deep copies and re-lowering warn inside torch)
        return _repair_with_plan(obj, form, objective, target, name)


def _repair_with_plan(obj: Any, form: str | None, objective: str, target: Any, name: str) -> tuple[Any, Plan, Report]:
    import copy

    from qflow.integrations.rewrite import apply_plan, relower_delegates, split_plan
    from qflow.ir.load import graph_module_of, load_program

    if isinstance(obj, (str, Path)):
        obj = load_program(obj)
    t = targets.get(target)
    before = analyze_graph(domain_graph(obj, form, t), name=name)
    if before.status == "nothing-quantized":  # nothing to repair is no proof either
        before.notes = [*before.notes, "repair blocked: nothing is quantized, so there is nothing to repair"]
        raise ProofError(before)
    # planned with every dropped requant on its own: a chain the repair leaves carried could
    # otherwise carry codes into a requant it inserts
    dg = domain_graph(obj, form, t, carry=False)
    p = plan_repair(dg, objective, int16_zero_point_zero=t.int16_zero_point_zero)
    # an activation's own domain must keep the numbers (else the finding stays)
    p.activation_domains = {
        q: d for q, d in p.activation_domains.items() if _activation_of(dg, q) is None or _same_meaning(*d)
    }
    if before.proved:
        # never repair what already proves; only a warning's own fix (an
        # activation given a domain of the same meaning) is carried out
        warned = {f.node for f in before.findings if f.severity in ("error", "warning")}
        own = {q: d for q, d in p.activation_domains.items() if _activation_of(dg, q) in warned}
        p = Plan(activation_domains=own, objective=objective)
        if p.empty:
            before.repair = p.to_json()
            return obj, p, before
    elif p.empty:
        raise ProofError(_blocked(before, p))
    repaired = copy.deepcopy(obj)
    gm, _ = graph_module_of(repaired)
    parent, inside = split_plan(p)
    relower_delegates(gm, inside)  # a change inside a delegate: its partition, lowered again
    apply_plan(gm, parent)
    after = analyze(repaired, form=dg.form, name=name, target=t)
    after.repair = p.to_json()
    if not after.proved:
        raise ProofError(_blocked(after, p))
    return repaired, p, after


def _activation_of(dg: DomainGraph, q: str) -> str | None:
    """The activation whose quantize `q` is (the node its finding names)."""
    for ob in dg.obligations:
        if ob.finding_kind == "non-fuseable-activation" and ob.edge and ob.edge[1] == q:
            return ob.node
    return None


def _same_meaning(old: Any, own: Any) -> bool:
    """An activation's own domain keeps the numbers: zero point at qmin (the
    clamp at 0 is exact), a grid no coarser than the old one (at most one
    extra rounding step), the same dtype."""
    return own.dtype == old.dtype and own.zero_point == own.qmin and float(own.scale) <= float(old.scale)


def _blocked(report: Report, p: Plan) -> Report:
    """`report` with notes saying why no repair makes it prove."""
    why = p.reasons or [f"{ob.node}: {ob.finding_kind} ({ob.arg or ob.value})" for ob in p.unrepairable]
    if not why:
        why = [f"{f.node}: {f.kind} ({f.status})" for f in report.findings if f.status != "proved"]
    report.notes = [*report.notes, *(f"repair blocked: {w}" for w in why or ["no requant discharges the failures"])]
    return report
