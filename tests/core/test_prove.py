"""The prover on hand-built domain graphs: proved / violated / unproven."""

from __future__ import annotations

import pytest
from builder import A, B, C, G, seed000_folded

from qflow.analysis import analyze_graph
from qflow.errors import InputError


def test_consistent_chain_is_proved() -> None:
    g = G()
    g.fact("mul", A)
    g.passthrough("cat", "mul", claim=A)
    g.use("cat", "add", A)
    r = analyze_graph(g.dg)
    assert r.proved and not r.findings
    assert r.obligations == {"proved": 2, "violated": 0, "unproven": 0}


def test_passthrough_claiming_a_change_is_violated_with_both_domains() -> None:
    g = seed000_folded()
    r = analyze_graph(g.dg)
    assert not r.proved
    [f] = r.findings
    assert (f.kind, f.node, f.severity) == ("passthrough-domain-change", "cat", "error")
    assert f.produced["zero_point"] == 102 and f.produced["dtype"] == "int8"
    assert f.expected["zero_point"] == 0 and f.expected["dtype"] == "int16"
    # the consumer trusts the claim: one root-cause finding, not two
    assert r.obligations["violated"] == 1


def test_consumer_mismatch() -> None:
    g = G()
    g.fact("conv", A)
    g.use("conv", "linear", C)
    [f] = analyze_graph(g.dg).findings
    assert f.kind == "domain-mismatch" and f.node == "linear" and f.edge == ["conv", "linear"]


def test_mixed_cat_inputs() -> None:
    g = G()
    g.fact("a", A)
    g.fact("b", C)
    g.passthrough("cat", "a", "b")
    g.use("cat", "out", A)
    r = analyze_graph(g.dg)
    assert [f.kind for f in r.findings] == ["mixed-input-domains"]


def test_unknown_op_between_domains_is_unproven_never_proved() -> None:
    g = G()
    g.fact("conv", A)
    g.free("mystery", blocking=True)
    g.dg.add_use("conv", "mystery", "args[0]")
    g.use("mystery", "linear", A)
    r = analyze_graph(g.dg)
    assert not r.proved
    assert r.obligations["unproven"] == 1 and r.obligations["violated"] == 0
    [f] = r.findings
    assert f.kind == "unknown-op" and f.status == "unproven"


def test_constants_are_domain_free_but_not_blocking() -> None:
    g = G()
    g.free("weight", blocking=False)
    g.fact("x", A)
    g.passthrough("cat", "x", "weight")
    g.use("cat", "out", A)
    # the SAME_AS_FIRST against a non-blocking free value has a model: adapters
    # never create one (uses of constants are skipped); the prover reports it
    # violated rather than silently proved.
    r = analyze_graph(g.dg)
    assert not r.proved


def test_regions_are_solved_separately() -> None:
    g = G()
    for i in range(20):
        g.fact(f"p{i}", A)
        g.passthrough(f"v{i}", f"p{i}")
        g.use(f"v{i}", f"c{i}", A)
    r = analyze_graph(g.dg)
    assert r.proved
    assert r.stats["regions"] == 20
    assert r.stats["solver_checks"] == 1  # independent regions that all hold: one call


def test_one_failing_region_among_many_is_isolated() -> None:
    g = G()
    for i in range(40):
        g.fact(f"p{i}", A)
        g.passthrough(f"v{i}", f"p{i}", claim=B if i == 17 else A)
    r = analyze_graph(g.dg)
    assert r.obligations == {"proved": 39, "violated": 1, "unproven": 0}
    assert [f.node for f in r.findings] == ["v17"]
    assert r.stats["solver_checks"] < 40  # bisection, not one call per region


def test_cycle_is_a_clear_error() -> None:
    g = G()
    g.passthrough("a", "b")
    g.passthrough("b", "a")
    with pytest.raises(InputError, match="cycle"):
        analyze_graph(g.dg)


def test_json_shape() -> None:
    g = G()
    g.fact("mul", A)
    g.passthrough("cat", "mul", claim=B)
    j = analyze_graph(g.dg).to_json()
    assert j["proved"] is False
    assert j["obligations"] == {"proved": 0, "violated": 1, "unproven": 0}
    assert {"kind", "node", "severity", "message"} <= set(j["findings"][0])
    assert j["schema"] == "qflow.report/1"
