"""`qflow check --graph`: the picture of the domain graph around each finding.

Hand-built domain graphs check colours, labels and requant marks on the DOT
source; the bundled seed 000 programs go through the real CLI to .dot and to
.svg (rendered by Graphviz `dot`, which .ci/run installs). Without `dot` the SVG
tests skip and say why, except on CI (CI=true), where a skip would hide them: there
they fail.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from builder import A, B, C, G, seed000_folded

from qflow.analysis import analyze_graph
from qflow.cli import main
from qflow.domain import Domain
from qflow.graph import DomainGraph
from qflow.report import picture
from qflow.report.picture import COLOURS, REQUANT, Program, short_domain, to_dot, write_picture
from qflow.solvers.repair import plan_repair

EXAMPLES = Path(__file__).resolve().parents[1] / "qflow" / "examples"
FAILING = str(EXAMPLES / "seed000_cat_requant.pt2")
CONTROL = str(EXAMPLES / "seed000_control.pt2")
SVG = "{http://www.w3.org/2000/svg}"

_ATTR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s\]]+)')


def program(dg: DomainGraph, name: str = "p") -> Program:
    r = analyze_graph(dg, name=name)
    return Program(r, dg, None if r.proved else plan_repair(dg))


@pytest.fixture
def needs_dot() -> None:
    require_dot()


def require_dot() -> None:
    """Graphviz `dot`, or a visible skip on a machine without it (a failure on CI, which installs it)."""
    if picture.dot_available():
        return
    if os.environ.get("CI") == "true":
        pytest.fail("Graphviz `dot` is missing on CI (.ci/run installs it): the SVG tests would not run")
    pytest.skip("Graphviz `dot` is not installed (apt-get install graphviz / brew install graphviz): SVG not rendered")


def parse(dot: str) -> tuple[dict[str, dict[str, str]], list[tuple[str, str, dict[str, str]]]]:
    """Nodes (id → attrs) and edges of the DOT our picture writes (one statement a line)."""

    def attrs(text: str) -> dict[str, str]:
        return {k: v[1:-1] if v.startswith('"') else v for k, v in _ATTR.findall(text)}

    nodes, edges = {}, []
    for line in dot.splitlines():
        if m := re.match(r"^\s*(\w+) -> (\w+) \[(.*)\]$", line):
            edges.append((m[1], m[2], attrs(m[3])))
        elif m := re.match(r"^\s*(p\w+) \[(.*)\]$", line):
            nodes[m[1]] = attrs(m[2])
    return nodes, edges


def by_name(nodes: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Node attrs keyed by the first line of the label (the value's name)."""
    return {a["label"].split("\\n")[0]: a for a in nodes.values()}


# -- hand-built graphs (torch-free) ----------------------------------------------------------------


def test_violation_is_red_edges_carry_domains_and_the_requant_is_marked() -> None:
    nodes, edges = parse(to_dot([program(seed000_folded().dg)]))
    named = by_name(nodes)
    cat = named["cat"]
    assert (cat["fillcolor"], cat["class"]) == (COLOURS["violated"][0], "violated")
    assert "claims int16 s=3.052e-05 zp=0" in cat["label"] and "VIOLATED: passthrough-domain-change" in cat["label"]
    assert "plan: claim int8 s=0.1 zp=102" in cat["label"]  # the plan corrects the claim
    assert named["add"]["fillcolor"] == COLOURS["proved"][0]
    assert named["mul"]["fillcolor"] == COLOURS["none"][0]  # no obligation at a producer
    ids = {a["label"].split("\\n")[0]: i for i, a in nodes.items()}
    assert {e[2]["label"] for e in edges if e[1] == ids["cat"]} == {"int8 s=0.1 zp=102"}
    rq = named["planned requant"]
    assert rq["fillcolor"] == REQUANT[0] and "int8 s=0.1 zp=102\\n→ int16 s=3.052e-05 zp=0" in rq["label"]
    rq_id = ids["planned requant"]
    assert (ids["cat"], rq_id) in {(a, b) for a, b, _ in edges}
    assert [e[2]["label"] for e in edges if e[:2] == (rq_id, ids["add"])] == ["int16 s=3.052e-05 zp=0"]


def test_failed_edge_is_labelled_produced_and_expected() -> None:
    g = G()
    g.fact("a", A)
    g.fact("b", C)
    g.passthrough("cat", "a", "b")
    g.use("cat", "add", A)
    nodes, edges = parse(to_dot([program(g.dg)]))
    ids = {a["label"].split("\\n")[0]: i for i, a in nodes.items()}
    red = [e for e in edges if e[0] == ids["b"]]
    assert len(red) == 1 and red[0][2]["color"] == COLOURS["violated"][1]
    assert red[0][2]["label"] == "produced int8 s=0.05 zp=-3\\nexpected int8 s=0.1 zp=102"
    assert red[0][1] == ids["planned requant"]  # the requant sits on the offending input


def test_unproven_is_yellow() -> None:
    g = G()
    g.fact("conv", A)
    g.free("mystery", blocking=True)
    g.dg.add_use("conv", "mystery", "args[0]")
    g.use("mystery", "linear", A)
    nodes, edges = parse(to_dot([program(g.dg)]))
    linear = by_name(nodes)["linear"]
    assert linear["fillcolor"] == COLOURS["unproven"][0] and "UNPROVEN: unknown-op" in linear["label"]
    assert not any(a["fillcolor"] == COLOURS["violated"][0] for a in nodes.values())
    [into] = [e for e in edges if e[2].get("color") == COLOURS["unproven"][1]]
    assert "produced no domain" in into[2]["label"]


def chain(n: int, bad_at: int | None) -> DomainGraph:
    """x → v0 → … → v{n-1} → out, pass-throughs; a claim of B at `bad_at` is the one violation."""
    g = G()
    prev = g.fact("x", A)
    for i in range(n):
        prev = g.passthrough(f"v{i}", prev, claim=B if i == bad_at else None)
    g.use(prev, "out", A)
    return g.dg


def test_a_large_graph_is_cut_to_the_neighbourhood_of_the_finding() -> None:
    nodes, _ = parse(to_dot([program(chain(500, bad_at=250))]))
    named = by_name(nodes)
    assert {f"v{i}" for i in range(247, 254)} <= set(named) <= {f"v{i}" for i in range(246, 255)} | {"planned requant"}
    assert named["v250"]["class"] == "violated"
    assert "dashed" in named["v247"]["style"] and "dashed" not in named["v250"]["style"]  # the graph goes on
    nodes, _ = parse(to_dot([program(chain(500, bad_at=250))], hops=3, max_nodes=4))
    assert set(by_name(nodes)) <= {"v249", "v250", "v251", "planned requant"}  # fewer hops past max_nodes


def test_many_findings_stay_a_bounded_picture() -> None:
    g = G()
    for i in range(200):
        g.fact(f"a{i}", A)
        g.use(f"a{i}", f"b{i}", C)
    p = program(g.dg)
    assert len(p.report.findings) == 200
    dot = to_dot([p], max_nodes=20)
    nodes, _ = parse(dot)
    assert len(nodes) <= 30 and "only the first 20 finding and plan nodes" in dot


def test_clean_programs_small_whole_large_as_a_summary() -> None:
    small, large = program(chain(5, None), "small"), program(chain(500, None), "large")
    nodes, edges = parse(to_dot([small, large]))
    assert sum(a["label"].startswith("v") for a in nodes.values()) == 5
    assert not any(a["class"] == "violated" for a in nodes.values())
    [summary] = [a for a in nodes.values() if a.get("shape") == "note"]
    assert summary["label"].startswith("502 values, every obligation proved")
    assert "subgraph cluster_p0_" in to_dot([small, large]) and "subgraph cluster_p1_" in to_dot([small, large])


def test_short_domains() -> None:
    assert short_domain(A) == "int8 s=0.1 zp=102"
    assert short_domain(B) == "int16 s=3.052e-05 zp=0"  # the symmetric range is not news
    assert short_domain(Domain.quantized("int8", 0.1, -128, -128, 0)) == "int8 s=0.1 zp=-128 [-128,0]"
    assert short_domain(A, real=True) == "real on int8 s=0.1 zp=102"
    assert short_domain({"dtype": "float32"}) == "float32"
    pc = Domain.quantized("int8", [0.1, 0.2], [0, 0], -127, 127, axis=0)
    assert short_domain(pc) == "int8 per-channel axis=0 (2 ch)"
    assert short_domain(pc.to_dict()) == short_domain(pc)


def test_odd_names_render(tmp_path, needs_dot) -> None:
    g = G()
    g.fact('a"b\\c:d', A)
    g.use('a"b\\c:d', "x:y", C)
    dest = tmp_path / "odd.svg"
    write_picture(dest, [program(g.dg)])
    root = ET.parse(dest).getroot()
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert 'a"b\\c:d' in texts and "x:y" in texts


def test_suffix_and_missing_dot(tmp_path, monkeypatch) -> None:
    with pytest.raises(ValueError, match=r"\.svg or \.dot"):
        write_picture(tmp_path / "p.png", [program(chain(2, None))])
    monkeypatch.setattr(picture, "dot_available", lambda: False)
    with pytest.raises(picture.DotNotFound, match="apt-get install graphviz"):
        write_picture(tmp_path / "p.svg", [program(chain(2, None))])
    write_picture(tmp_path / "p.dot", [program(chain(2, None))])  # DOT never needs Graphviz
    assert (tmp_path / "p.dot").read_text(encoding="utf-8").startswith("digraph qflow {")
    assert not (tmp_path / "p.svg").exists()


# -- the real bundled programs through the CLI --------------------------------------------------------


def svg_nodes(path: Path) -> dict[str, tuple[str, str]]:
    """SVG node groups: the text of each node → (its status class, its fill colour)."""
    out = {}
    for g in ET.parse(path).getroot().iter(f"{SVG}g"):
        cls = g.get("class", "")
        if not cls.startswith("node"):
            continue
        text = "\n".join(t.text or "" for t in g.iter(f"{SVG}text"))
        shape = next(e for e in g.iter() if e.tag in (f"{SVG}path", f"{SVG}polygon"))
        out[text] = (cls.split()[-1], shape.get("fill", ""))
    return out


def test_seed000_through_the_cli_to_svg(capsys, tmp_path, needs_dot) -> None:
    dest = tmp_path / "seed000.svg"
    assert main(["check", FAILING, "--graph", str(dest)]) == 1
    err = capsys.readouterr().err
    assert f"picture of 1 program(s), 1 finding(s) written to {dest}" in err
    nodes = svg_nodes(dest)
    violated = {t: v for t, v in nodes.items() if v[0] == "violated"}
    assert violated == {"cat\nVIOLATED: requant-after-passthrough": ("violated", COLOURS["violated"][0])}
    [requant] = [t for t, v in nodes.items() if v[0] == "requant"]
    assert requant == "planned requant\nreal on int8 s=0.1 zp=102\n→ int16 s=3.052e-05 zp=0"
    texts = [t.text for t in ET.parse(dest).getroot().iter(f"{SVG}text")]
    assert "produced real on int8 s=0.1 zp=102" in texts and "expected int16 s=3.052e-05 zp=0" in texts
    assert "int16 s=3.052e-05 zp=0" in texts  # the edge after the requant


def test_bundled_examples_through_the_cli_to_dot(capsys, tmp_path) -> None:
    dest = tmp_path / "both.dot"
    assert main(["check", "--graph", str(dest), "--format", "json", "-o", str(tmp_path / "r.json")]) == 1
    dot = dest.read_text(encoding="utf-8")
    nodes, edges = parse(dot)
    failing = {i: a for i, a in nodes.items() if i.startswith("p0_")}
    control = {i: a for i, a in nodes.items() if i.startswith("p1_")}
    assert [a["label"].split("\\n")[0] for a in failing.values() if a["class"] == "violated"] == ["cat"]
    assert sum(a["class"] == "requant" for a in failing.values()) == 1
    assert len(failing) < 30  # the neighbourhood, not the whole program
    assert control and not any(a["class"] in ("violated", "unproven", "requant") for a in control.values())
    assert "seed000_control.pt2: PROVED" in dot and "seed000_cat_requant.pt2: NOT PROVED" in dot
    assert any(e[2].get("label") == "real on int8 s=0.1 zp=102" for e in edges)


def test_control_through_the_cli_renders_with_no_violation(capsys, tmp_path, needs_dot) -> None:
    dest = tmp_path / "control.svg"
    assert main(["check", CONTROL, "--graph", str(dest)]) == 0
    statuses = {v[0] for v in svg_nodes(dest).values()}
    assert statuses <= {"proved", "none"} and "proved" in statuses


def test_cli_rejects_other_suffixes_and_says_how_to_install_dot(capsys, tmp_path, monkeypatch) -> None:
    with pytest.raises(SystemExit) as e:
        main(["check", CONTROL, "--graph", str(tmp_path / "x.png")])
    assert e.value.code == 2 and "the picture is .svg" in capsys.readouterr().err
    monkeypatch.setattr(picture, "dot_available", lambda: False)
    assert main(["check", CONTROL, "--graph", str(tmp_path / "x.svg")]) == 2
    err = capsys.readouterr().err
    assert "Graphviz" in err and "apt-get install graphviz" in err and "brew install graphviz" in err
    assert not (tmp_path / "x.svg").exists()
    assert main(["check", CONTROL, "--graph", str(tmp_path / "x.dot")]) == 0  # .dot needs no Graphviz
    assert main(["check", CONTROL, "--graph", str(tmp_path / "no" / "dir" / "x.dot")]) == 2
    assert "cannot write the picture" in capsys.readouterr().err


def test_help_documents_graph(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for words in ("--graph PATH", ".svg", ".dot", "Graphviz", "proved", "violated", "unproven", "requant"):
        assert words in out



def test_without_dot_the_svg_tests_skip_visibly_and_fail_on_ci(monkeypatch) -> None:
    """What a fresh machine without Graphviz and CI each get from the fixture's rule."""
    monkeypatch.setattr(picture, "dot_available", lambda: False)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="Graphviz `dot` is not installed"):
        require_dot()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="missing on CI"):
        require_dot()
    monkeypatch.setattr(picture, "dot_available", lambda: True)
    require_dot()  # installed: the test runs
