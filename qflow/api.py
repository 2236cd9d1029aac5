"""The public entry points. Imports torch lazily so `import qflow` stays light."""

from __future__ import annotations

from typing import Any

from qflow import targets
from qflow.analysis import analyze_graph
from qflow.errors import ProofError
from qflow.graph import DomainGraph
from qflow.report.model import Report
from qflow.solvers.repair import Plan, plan_repair
from qflow.targets import Target


def domain_graph(obj: Any, form: str | None = None, target: str | Target | None = None) -> DomainGraph:
    """The domain graph qflow builds for `obj` (see `analyze` for what it accepts)."""
    if isinstance(obj, DomainGraph):
        return obj
    t = targets.get(target)  # an unknown name fails before any torch import
    from qflow.integrations import annotated
    from qflow.integrations.fx import build
    from qflow.integrations.load import graph_module_of

    gm, ep = graph_module_of(obj)
    if form == "annotated" or (form is None and annotated.is_annotated(gm) and not _has_qdq(gm)):
        return annotated.build(gm, t)
    return build(gm, ep, form, t)


def _has_qdq(gm: Any) -> bool:
    return any("quantize_per_" in str(n.target) for n in gm.graph.nodes if n.op == "call_function")


def analyze(obj: Any, form: str | None = None, name: str = "", target: str | Target | None = None) -> Report:
    """Prove that every consumer in `obj` sees the domain it declares.

    `obj` is a torch.fx.GraphModule (annotated, PT2E Q/DQ, or Arm-folded), a
    torch.export.ExportedProgram, an ExecuTorch EdgeProgramManager, a path to
    a .pt2 file, or a DomainGraph. `form` overrides the detected IR form
    ("annotated", "qdq", "folded" or "lowered"; a lowered program that
    delegates nothing looks like a Q/DQ graph, so say "lowered" for it).
    `target` names the backend whose contract the program is proved against
    ("arm-tosa", "xnnpack"; None or "generic": every shipped target at once).
    A lowered program's partitions are always read by their own delegate's
    target.
    """
    return analyze_graph(domain_graph(obj, form, target), name=name)


def plan(obj: Any, form: str | None = None, objective: str = "count", target: str | Target | None = None) -> Plan:
    """The minimal requant plan for `obj` (nothing is modified)."""
    return plan_repair(domain_graph(obj, form, target), objective)


def repair(obj: Any, form: str | None = None, objective: str = "count", target: str | Target | None = None) -> Any:
    """A copy of `obj`, of the same kind, with the minimal set of requants inserted.

    `objective` is "count" (fewest requants) or "bytes" (least data moved).
    An already-proved graph is returned unchanged (the same object). Raises
    `ProofError` when the repaired graph still does not prove (unknown ops,
    missing facts), so a repair never hands back a graph it cannot vouch for.
    """
    import copy

    from qflow.integrations.load import graph_module_of
    from qflow.integrations.rewrite import apply_plan

    dg = domain_graph(obj, form, target)
    p = plan_repair(dg, objective)
    if p.empty:
        return obj
    repaired = copy.deepcopy(obj)
    gm, _ = graph_module_of(repaired)
    apply_plan(gm, p)
    report = analyze(repaired, form=dg.form, target=target)
    if not report.proved:
        raise ProofError(report)
    return repaired
