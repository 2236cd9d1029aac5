"""Google Model Explorer overlays: qflow's verdicts on the graph viewer people already open.

Model Explorer (`ai-edge-model-explorer`) shows a `torch.export.save`d program
with its PyTorch adapter, one graph node per FX node (node id = FX node name).
qflow writes *node data* next to the program, built with Model Explorer's own
`model_explorer.node_data_builder`:

* `NAME.qflow-status.json` — each node coloured by the status of the
  obligations reported at it (red violated, yellow unproven, green proved,
  blue where the repair plan puts a change), its value the status in words;
* `NAME.qflow-domains.json` — the same colours, its value the domain the node
  produces, what a failed consumer expected, and the planned requant.

`model-explorer NAME.pt2 --node_data_paths=NAME.qflow-status.json,NAME.qflow-domains.json`
opens both. Torch-free; needs the `explorer` extra.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qflow.graph import DomainGraph
from qflow.lattice import propagate
from qflow.report.model import Report
from qflow.report.picture import COLOURS, REQUANT, _elem, short_domain, statuses
from qflow.solvers.repair import Plan

#: The graph id Model Explorer's PyTorch ExportedProgram adapter gives the program's graph.
GRAPH_ID = "graph"
INSTALL_HINT = (
    "the Model Explorer overlay needs ai-edge-model-explorer: pip install -c constraints.txt 'qflow[explorer]'"
)


@dataclass(frozen=True)
class Overlay:
    """What was written for one program: the program copy and its node-data files."""

    program: Path
    status: Path
    domains: Path

    def command(self) -> str:
        """The one command that opens the program with both overlays."""
        return f"model-explorer {self.program} --node_data_paths={self.status},{self.domains}"


def _plan_notes(plan: Plan | None) -> dict[str, list[str]]:
    """node → what the repair plan changes there (a requant goes on the producer of its edge)."""
    out: dict[str, list[str]] = {}
    if plan is None:
        return out
    for rq in plan.requants:
        out.setdefault(rq.edge[0], []).append(
            f"plan: requant to {rq.edge[1]}: {short_domain(rq.source, rq.source_real)} → {short_domain(rq.target)}"
        )
    for name, d in plan.reclaims.items():
        out.setdefault(name, []).append(f"plan: claim {short_domain(d)}")
    for name, (_, own) in plan.activation_domains.items():
        out.setdefault(name, []).append(f"plan: activation gets {short_domain(own)}, requant after")
    for name, d in plan.boundaries.items():
        out.setdefault(name, []).append(f"plan: declare {short_domain(d)}")
    return out


def node_data(report: Report, dg: DomainGraph, plan: Plan | None = None) -> tuple[Any, Any]:
    """(status, domains) as Model Explorer `ModelNodeData`, one result per value of the graph."""
    from model_explorer import node_data_builder as ndb

    status = statuses(report, dg)
    env = propagate({v.name: v.definition for v in dg.values()})
    planned = _plan_notes(plan)
    failed: dict[str, list[str]] = {}
    for f in report.findings:
        if f.status == "proved":
            continue
        produced = short_domain(f.produced) if f.produced else "no domain of its own"
        expected = short_domain(f.expected) if f.expected else "no domain declared"
        failed.setdefault(f.node, []).append(f"{f.kind}: produced {produced}, expected {expected}")
    st_results: dict[str, Any] = {}
    dom_results: dict[str, Any] = {}
    for name in dg.g:
        st = status.get(name, "none")
        fill, ink = (REQUANT if name in planned and st != "violated" else COLOURS[st])[0], None
        if st == "violated":
            ink = COLOURS["violated"][1]
        words = st if st != "none" else "no obligation"
        if name in planned:
            words += " · repair planned"
        st_results[name] = ndb.NodeDataResult(value=words, bgColor=fill, textColor=ink)
        parts = failed.get(name) or [_elem(env.get(name)) or "no domain"]
        dom_results[name] = ndb.NodeDataResult(value="; ".join(parts + planned.get(name, [])), bgColor=fill)
    status_data = ndb.ModelNodeData(graphsData={GRAPH_ID: ndb.GraphNodeData(name="qflow status", results=st_results)})
    domain_data = ndb.ModelNodeData(graphsData={GRAPH_ID: ndb.GraphNodeData(name="qflow domains", results=dom_results)})
    return status_data, domain_data


def write_overlay(
    directory: str | Path, program: str | Path, report: Report, dg: DomainGraph, plan: Plan | None
) -> Overlay:
    """Copy `program` into `directory` and write its two node-data files beside it."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    src = Path(program)
    copy = out / src.name
    if src.resolve() != copy.resolve():
        shutil.copyfile(src, copy)
    status_data, domain_data = node_data(report, dg, plan)
    overlay = Overlay(copy, out / f"{src.stem}.qflow-status.json", out / f"{src.stem}.qflow-domains.json")
    status_data.save_to_file(str(overlay.status))
    domain_data.save_to_file(str(overlay.domains))
    return overlay
