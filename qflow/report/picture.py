"""A picture of the domain graph around each finding (Graphviz DOT / SVG).

A report says *that* a consumer misreads its codes; the picture shows *where*:
the values a few hops around each finding, coloured by the status of their
obligations, each edge labelled with the domain that flows on it, and the
requants the repair plan would insert drawn on their edges. Large graphs are
cut to those neighbourhoods, so the picture stays readable at 100k nodes.

DOT is written with the `graphviz` package (quoting and escaping are its job);
SVG needs the Graphviz `dot` program. Torch-free, like the rest of the report.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import graphviz
import networkx as nx

from qflow.domain import DTYPE_RANGE, Domain
from qflow.graph import DomainGraph
from qflow.lattice import Elem, ElemKind, propagate
from qflow.ops import base_name
from qflow.report.model import Finding, Report
from qflow.report.text import VERDICTS
from qflow.solvers.repair import Plan, Requant

SUFFIXES = (".svg", ".dot")
HOPS = 3  # how far around a finding the picture reaches (a Q/DQ pair costs two hops)
MAX_NODES = 60  # per program: past this the neighbourhood shrinks (hops 3 → 2 → 1 → 0)
INSTALL_HINT = (
    "rendering SVG needs the Graphviz `dot` program, which is not on PATH. Install Graphviz "
    "(Debian/Ubuntu: `sudo apt-get install graphviz`; macOS: `brew install graphviz`; conda: "
    "`conda install -c conda-forge graphviz`; others: https://graphviz.org/download/), or ask for "
    "a .dot file and render it elsewhere with `dot -Tsvg graph.dot -o graph.svg`."
)

#: status → (fill, border): the three verdicts of an obligation, and values without one.
COLOURS = {
    "violated": ("#f4a6a6", "#b71c1c"),
    "unproven": ("#ffe08a", "#b26a00"),
    "proved": ("#c8e6c9", "#2e7d32"),
    "none": ("#ffffff", "#9e9e9e"),
}
REQUANT = ("#bbdefb", "#0d47a1")  # planned requants and other planned changes


class DotNotFound(RuntimeError):
    """SVG was asked for and Graphviz's `dot` is not installed."""

    def __init__(self) -> None:
        super().__init__(INSTALL_HINT)


@dataclass
class Program:
    """One program to draw: its report, the domain graph it was proved on, and
    the repair plan (None when the program proves or was not planned)."""

    report: Report
    graph: DomainGraph
    plan: Plan | None = None


# -- labels ---------------------------------------------------------------------------------------


def short_domain(d: Domain | dict[str, Any] | None, real: bool = False) -> str:
    """A domain in a few words for an edge label: the range only when it is not the dtype's."""
    if d is None:
        return "?"
    if isinstance(d, dict):
        real = real or bool(d.get("real"))
        d = _from_dict(d)
    if d.is_float:
        return d.dtype
    lo, hi = DTYPE_RANGE.get(d.dtype, (d.qmin, d.qmax))
    rng = "" if (d.qmin, d.qmax) in ((lo, hi), (lo + 1, hi)) else f" [{d.qmin},{d.qmax}]"
    if d.opaque is not None or d.per_channel:
        n = f"{len(d.scale)} ch" if d.per_channel else d.opaque  # type: ignore[arg-type]
        text = f"{d.dtype} per-channel axis={d.axis} ({n}){rng}"
    else:
        text = f"{d.dtype} s={d.scale:.4g} zp={d.zero_point}{rng}"
    return f"real on {text}" if real else text


def _from_dict(d: dict[str, Any]) -> Domain:
    if "scale" not in d:
        return Domain(str(d.get("dtype", "float32")))
    scale, zp = d["scale"], d.get("zero_point", 0)
    if isinstance(scale, list):
        return Domain(d["dtype"], tuple(scale), tuple(zp), d.get("qmin", 0), d.get("qmax", 0), d.get("axis"))
    return Domain(d["dtype"], scale, zp, d.get("qmin", 0), d.get("qmax", 0))


def _elem(e: Elem | None) -> str:
    if e is None or e.kind is ElemKind.BOTTOM:
        return ""
    if e.kind is ElemKind.TOP:
        return "conflict (⊤)"
    if e.kind is ElemKind.FREE:
        return "no domain"
    if e.group is not None:
        return f"symbolic {e.group}"
    return short_domain(e.domain, e.real)


def _text(*lines: str, end: str = "\\n") -> str:
    """A multi-line DOT label (`end="\\l"`: left-justified lines); backslashes
    in names must not become escapes."""
    text = end.join(line.replace("\\", "\\\\") for line in lines if line)
    return text + end if end != "\\n" else text


# -- what to draw ---------------------------------------------------------------------------------


def statuses(report: Report, dg: DomainGraph) -> dict[str, str]:
    """node → "violated" | "unproven" | "proved" for every node an obligation is reported at.

    A node with no failed finding and at least one obligation is proved: the
    analyzer reports every failed obligation at its node.
    """
    out = {ob.node: "proved" for ob in dg.obligations}
    for f in report.findings:
        if f.status in ("violated", "predicted"):
            out[f.node] = "violated"
        elif f.status == "unproven" and out.get(f.node) != "violated":
            out[f.node] = "unproven"
    return out


def focus(report: Report, plan: Plan | None) -> list[str]:
    """The nodes the picture is about: each finding's node and edge, each planned change."""
    names: list[str] = []
    for f in report.findings:
        names += [f.node, *(f.edge or [])]
    if plan is not None:
        for rq in plan.requants:
            names += list(rq.edge)
        names += [*plan.reclaims, *plan.activation_domains, *plan.boundaries]
    return list(dict.fromkeys(names))


def neighbourhood(dg: DomainGraph, centre: Iterable[str], hops: int = HOPS, max_nodes: int = MAX_NODES) -> set[str]:
    """The values within `hops` uses (either direction) of `centre`, fewer hops
    when that would exceed `max_nodes`; the centre itself is always kept."""
    seeds = [n for n in centre if n in dg.g]
    und = dg.g.to_undirected(as_view=True)
    for r in range(hops, 0, -1):
        out: set[str] = set(seeds)
        for n in seeds:
            out.update(nx.single_source_shortest_path_length(und, n, cutoff=r))
            if len(out) > max_nodes:
                break
        if len(out) <= max_nodes:
            return out
    return set(seeds)


# -- drawing --------------------------------------------------------------------------------------


class _Drawer:
    """Draws one program into a cluster of the picture."""

    def __init__(self, index: int, prog: Program, hops: int, max_nodes: int) -> None:
        self.p, self.prefix = prog, f"p{index}_"
        self.r, self.dg = prog.report, prog.graph
        self.hops, self.max_nodes = hops, max_nodes
        self.ids: dict[str, str] = {}

    def id(self, name: str) -> str:
        """Node ids are synthetic: FX names may hold ':' (a DOT port) or repeat across programs."""
        return self.ids.setdefault(name, f"{self.prefix}{len(self.ids)}")

    def title(self, extra: str = "") -> str:
        r, ob = self.r, self.r.obligations
        verdict = VERDICTS.get(r.status, "NOT PROVED")
        counts = f"{ob.get('proved', 0)} proved, {ob.get('violated', 0)} violated, {ob.get('unproven', 0)} unproven"
        return _text(f"{r.name or '(unnamed)'}: {verdict} ({r.form} graph)", counts, extra, end="\\l")

    def draw(self, g: graphviz.Digraph) -> None:
        centre = focus(self.r, self.p.plan)
        cut = len(centre) > self.max_nodes  # hundreds of findings: the first ones make the point
        centre = centre[: self.max_nodes]
        if centre:
            nodes = neighbourhood(self.dg, centre, self.hops, self.max_nodes)
            note = f"around {len(self.r.findings)} finding(s): {len(nodes)} of {len(self.dg)} values"
            note += f" (only the first {self.max_nodes} finding and plan nodes)" if cut else ""
        elif len(self.dg) <= self.max_nodes:
            nodes, note = set(self.dg.g), f"all {len(self.dg)} values"
        else:
            nodes, note = set(), ""
        with g.subgraph(name=f"cluster_{self.prefix}") as c:
            c.attr(label=self.title(note), labeljust="l", labelloc="t", style="rounded", color="#757575", fontsize="12")
            if not nodes and not centre:
                c.node(
                    self.id("(summary)"),
                    _text(
                        f"{len(self.dg)} values, every obligation proved:",
                        "no finding to draw around, too many values to draw whole",
                    ),
                    shape="note",
                    style="filled",
                    fillcolor=COLOURS["proved"][0],
                    color=COLOURS["proved"][1],
                    **{"class": "proved summary"},
                )
                return
            self._nodes(c, nodes, centre)
            self._edges(c, nodes)

    def _nodes(self, c: graphviz.Digraph, nodes: set[str], centre: list[str]) -> None:
        status = statuses(self.r, self.dg)
        by_node: dict[str, list[Finding]] = {}
        for f in self.r.findings:
            by_node.setdefault(f.node, []).append(f)
        plan = self.p.plan
        order = [n for n in self.dg.g if n in nodes] + [n for n in centre if n not in self.dg.g]
        for name in order:
            st = status.get(name, "none")
            fill, border = COLOURS[st]
            lines = [name]
            tooltip = [name]
            if name in self.dg.g:
                v = self.dg.value(name)
                op = base_name(v.target)
                if not name.startswith(op):
                    lines.append(op)
                tooltip.append(v.target)
                if v.claim is not None:
                    lines.append(f"claims {short_domain(v.claim)}")
                cut = any(m not in nodes for m in nx.all_neighbors(self.dg.g, name))
            else:
                cut = False
            for f in by_node.get(name, []):
                lines.append(f"{f.status.upper()}: {f.kind}")
                if not f.edge and (f.produced or f.expected):
                    lines += [f"produced {short_domain(f.produced)}", f"expected {short_domain(f.expected)}"]
                tooltip.append(f.message)
            if plan is not None:
                if name in plan.reclaims:
                    lines.append(f"plan: claim {short_domain(plan.reclaims[name])}")
                if name in plan.activation_domains:
                    own = plan.activation_domains[name][1]
                    lines.append(f"plan: activation gets {short_domain(own)}, requant after")
                if name in plan.boundaries:
                    lines.append(f"plan: declare {short_domain(plan.boundaries[name])}")
            style = "rounded,filled" + (",dashed" if cut else "") + (",bold" if st == "violated" else "")
            c.node(
                self.id(name),
                _text(*lines),
                shape="box",
                style=style,
                fillcolor=fill,
                color=border,
                penwidth="2.5" if st == "violated" else "1",
                tooltip=_text(*tooltip),
                **{"class": st},  # SVG: <g class="node violated">, for styling and tests
            )

    def _edges(self, c: graphviz.Digraph, nodes: set[str]) -> None:
        env = propagate({v.name: v.definition for v in self.dg.values()})
        failed = {tuple(f.edge): f for f in self.r.findings if f.edge and f.status != "proved"}
        plan = self.p.plan
        requants = {rq.edge: rq for rq in (plan.requants if plan else [])}
        for q, (old, own) in (plan.activation_domains if plan else {}).items():
            # the quantize after the activation takes its own domain; a requant back follows it
            for b in self.dg.g.successors(q) if q in self.dg.g else ():
                requants.setdefault((q, b), Requant((q, b), own, old))
        edges = [*self.dg.g.edges, *failed, *requants]
        for a, b in dict.fromkeys(e for e in edges if e[0] in nodes and e[1] in nodes):
            f, rq = failed.get((a, b)), requants.get((a, b))
            label, attrs = _elem(env.get(a)), {"fontsize": "10"}
            if f is not None:
                produced = short_domain(f.produced) if f.produced else label or "?"
                label = _text(f"produced {produced}", f"expected {short_domain(f.expected)}")
                ink = COLOURS["violated" if f.status != "unproven" else "unproven"][1]
                attrs |= {"color": ink, "fontcolor": ink, "penwidth": "2.5"}
            if rq is None:
                c.edge(self.id(a), self.id(b), label=label, **attrs)
                continue
            mid = self.id(f"(requant {a} -> {b})")
            c.node(
                mid,
                _text("planned requant", short_domain(rq.source, rq.source_real), f"→ {short_domain(rq.target)}"),
                shape="box",
                style="filled,bold",
                fillcolor=REQUANT[0],
                color=REQUANT[1],
                fontcolor=REQUANT[1],
                penwidth="2",
                **{"class": "requant"},
            )
            c.edge(self.id(a), mid, label=label, **attrs)
            to = short_domain(rq.target)
            c.edge(mid, self.id(b), label=to, color=REQUANT[1], fontcolor=REQUANT[1], fontsize="10")


def _legend() -> str:
    cells = "".join(
        f'<TD BGCOLOR="{COLOURS[s][0]}" COLOR="{COLOURS[s][1]}">{s}</TD>' for s in ("violated", "unproven", "proved")
    )
    cells += '<TD COLOR="#9e9e9e">no obligation</TD>'
    cells += f'<TD BGCOLOR="{REQUANT[0]}" COLOR="{REQUANT[1]}">planned requant</TD>'
    cells += "<TD>dashed: graph goes on</TD><TD>edge: the domain that flows</TD>"
    return f'<<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="4"><TR>{cells}</TR></TABLE>>'


def to_graphviz(programs: Iterable[Program], hops: int = HOPS, max_nodes: int = MAX_NODES) -> graphviz.Digraph:
    """The picture of `programs`, one cluster each (see the module docstring)."""
    g = graphviz.Digraph("qflow")
    g.attr(rankdir="TB", fontname="Helvetica", label=_legend(), labelloc="b", nodesep="0.3", ranksep="0.45")
    g.attr("node", fontname="Helvetica", fontsize="11")
    g.attr("edge", fontname="Helvetica")
    for i, prog in enumerate(programs):
        _Drawer(i, prog, hops, max_nodes).draw(g)
    return g


def to_dot(programs: Iterable[Program], hops: int = HOPS, max_nodes: int = MAX_NODES) -> str:
    """The DOT source of the picture (no Graphviz install needed)."""
    return to_graphviz(programs, hops, max_nodes).source


def dot_available() -> bool:
    return shutil.which("dot") is not None


def write_picture(path: str | Path, programs: Iterable[Program], hops: int = HOPS, max_nodes: int = MAX_NODES) -> None:
    """Write the picture to `path`: DOT source for .dot, an SVG rendered by
    Graphviz `dot` for .svg (raises DotNotFound when it is not installed)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"a picture is .svg or .dot, not {path.name!r}")
    g = to_graphviz(programs, hops, max_nodes)
    if suffix == ".dot":
        path.write_text(g.source, encoding="utf-8")
        return
    if not dot_available():
        raise DotNotFound()
    try:
        svg = g.pipe(format="svg", encoding="utf-8")
    except graphviz.ExecutableNotFound as e:
        raise DotNotFound() from e
    path.write_text(svg, encoding="utf-8")


__all__ = [
    "COLOURS",
    "INSTALL_HINT",
    "SUFFIXES",
    "DotNotFound",
    "Program",
    "dot_available",
    "focus",
    "neighbourhood",
    "short_domain",
    "statuses",
    "to_dot",
    "to_graphviz",
    "write_picture",
]
