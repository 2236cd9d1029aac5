"""The public entry points. Imports torch lazily so `import qflow` stays light."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qflow.analysis import analyze_graph
from qflow.errors import InputError, ProofError
from qflow.graph import DomainGraph
from qflow.report.model import Report
from qflow.solvers.repair import Plan, plan_repair


def domain_graph(obj: Any, form: str | None = None) -> DomainGraph:
    """The domain graph qflow builds for `obj` (see `analyze` for what it accepts)."""
    if isinstance(obj, DomainGraph):
        return obj
    pte_bytes = isinstance(obj, (bytes, bytearray)) and bytes(obj[4:6]) == b"ET"
    if pte_bytes or (isinstance(obj, (str, Path)) and str(obj).endswith(".pte")):  # as shipped: torch-free
        from qflow.integrations import pte

        if form not in (None, "lowered"):
            what = "the .pte bytes" if pte_bytes else str(obj)
            raise InputError(f"{what}: an ExecuTorch program is read as shipped (form 'lowered'), not {form!r}")
        return pte.build(obj)
    from qflow.integrations import annotated
    from qflow.integrations.fx import build
    from qflow.integrations.load import graph_module_of

    gm, ep = graph_module_of(obj)
    if form == "annotated" or (form is None and annotated.is_annotated(gm) and not _has_qdq(gm)):
        return annotated.build(gm)
    return build(gm, ep, form)


def _has_qdq(gm: Any) -> bool:
    return any("quantize_per_" in str(n.target) for n in gm.graph.nodes if n.op == "call_function")


def analyze(obj: Any, form: str | None = None, name: str = "") -> Report:
    """Prove that every consumer in `obj` sees the domain it declares.

    `obj` is a torch.fx.GraphModule (annotated, PT2E Q/DQ, or Arm-folded), a
    torch.export.ExportedProgram, an ExecuTorch EdgeProgramManager, a path to
    a .pt2 file, an ExecuTorch .pte program (its path or its bytes, e.g.
    ``to_executorch().buffer``: read as shipped, with its delegate payloads;
    no torch needed), or a DomainGraph. `form` overrides the detected IR form
    ("annotated", "qdq", "folded" or "lowered"; a lowered program that
    delegates nothing looks like a Q/DQ graph, so say "lowered" for it).
    """
    return analyze_graph(domain_graph(obj, form), name=name)


def plan(obj: Any, form: str | None = None, objective: str = "count") -> Plan:
    """The minimal requant plan for `obj` (nothing is modified)."""
    return plan_repair(domain_graph(obj, form), objective)


def repair(obj: Any, form: str | None = None, objective: str = "count") -> Any:
    """A copy of `obj`, of the same kind, with the minimal set of requants inserted.

    `objective` is "count" (fewest requants) or "bytes" (least data moved).
    An already-proved graph is returned unchanged (the same object). Raises
    `ProofError` when the repaired graph still does not prove (unknown ops,
    missing facts), so a repair never hands back a graph it cannot vouch for.
    """
    import copy

    from qflow.integrations.load import graph_module_of
    from qflow.integrations.rewrite import apply_plan

    dg = domain_graph(obj, form)
    p = plan_repair(dg, objective)
    if p.empty:
        return obj
    repaired = copy.deepcopy(obj)
    gm, _ = graph_module_of(repaired)
    apply_plan(gm, p)
    report = analyze(repaired, form=dg.form)
    if not report.proved:
        raise ProofError(report)
    return repaired
