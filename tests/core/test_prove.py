"""The prover on hand-built domain graphs: proved / violated / unproven."""

from __future__ import annotations

import random

import pytest
from builder import A, B, C, G, noq, seed000_folded

from qflow.analysis import analyze_graph
from qflow.domain import FLOAT, Domain
from qflow.errors import InputError
from qflow.graph import Definition, DefKind, Obligation, ObligationKind, Symbolic, Value
from qflow.ops import OpClass
from qflow.solvers.prove import Status, prove


def test_consistent_chain_is_proved() -> None:
    g = G()
    g.fact("mul", A)
    g.passthrough("cat", "mul", claim=A)
    g.use("cat", "add", A)
    r = analyze_graph(g.dg)
    assert r.proved and not r.findings
    assert r.obligations == {"proved": 2, "violated": 0, "unproven": 0}


def test_the_report_carries_the_name_it_was_given() -> None:
    g = seed000_folded()
    assert analyze_graph(g.dg, name="model.pt2").name == "model.pt2"


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


#: A and C over a narrower code range: codes in them fit A / C without being the same literal,
#: so an obligation between the two needs z3 (it is no tautology).
AN = Domain.quantized("int8", 0.1, 102, -100, 127)
CN = Domain.quantized("int8", 0.05, -3, -100, 127)


def test_regions_are_solved_separately() -> None:
    g = G()
    for i in range(20):
        g.fact(f"p{i}", AN)
        g.passthrough(f"v{i}", f"p{i}")
        g.use(f"v{i}", f"c{i}", A)
    r = analyze_graph(g.dg)
    assert r.proved
    assert r.stats["regions"] == 20
    assert r.stats["solver_checks"] == 1  # independent regions that all hold: one call


def test_tautologies_need_no_solver_call() -> None:
    """A use that declares exactly the literal its producer is: no z3 call, still proved."""
    g = G()
    for i in range(20):
        g.fact(f"p{i}", A)
        g.passthrough(f"v{i}", f"p{i}")
        g.use(f"v{i}", f"c{i}", A)
    r = analyze_graph(g.dg)
    assert r.proved and r.obligations["proved"] == 20
    assert r.stats["regions"] == 20 and r.stats["solver_checks"] == 0
    results, stats = prove(g.dg, tautologies=False)
    assert all(x.status is Status.PROVED for x in results) and stats.solver_checks == 1


def test_one_failing_region_among_many_is_isolated() -> None:
    g = G()
    for i in range(40):
        g.fact(f"p{i}", AN)
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


# -- the SMT-LIB text prover against the reference encoding ---------------------------------

PC = Domain.quantized("int8", (0.1, 0.2, 0.3), (0, 0, 0), -127, 127, axis=0)
DOMAINS = [A, B, C, PC, FLOAT, Domain.quantized("int8", 0.1, 102, -100, 127), Domain.quantized("uint8", 0.1, 0, 0, 255)]


def _random_graph(seed: int) -> G:
    """Every definition kind, claims, per-channel and float domains, symbolic groups, every
    obligation kind (structural ones with a precomputed verdict): many proved, violated and
    unproven obligations, many regions."""
    rng = random.Random(seed)
    g = G(form="annotated" if seed % 3 == 0 else "folded")
    names: list[str] = []
    for i in range(rng.randint(5, 40)):
        name, r = f"n{i}", rng.random()
        if r < 0.3 or not names:
            d = rng.choice(DOMAINS)
            g.fact(name, d, real=d.is_float or rng.random() < 0.3)
        elif r < 0.4:
            g.free(name, blocking=rng.random() < 0.5)
        elif r < 0.55:
            sym = Symbolic(f"grp{rng.randint(0, 3)}", "int8", -128, 127, symmetric=rng.random() < 0.3)
            g.dg.add_value(Value(name, f"t.{name}", OpClass.COMPUTE, Definition(DefKind.SYMBOLIC, symbolic=sym)))
        elif r < 0.75:
            srcs = rng.sample(names, k=min(len(names), rng.randint(1, 3)))
            g.passthrough(name, *srcs, claim=rng.choice([None, A, B, PC]))
        elif r < 0.85:
            noq(g, name, rng.choice(names), rng.choice(DOMAINS[:4]))
            continue
        else:
            g.use(rng.choice(names), name, rng.choice(DOMAINS), real=rng.choice([None, False, True]))
            continue
        names.append(name)
        if rng.random() < 0.3:
            g.use(name, f"c{i}", rng.choice(DOMAINS), real=rng.choice([None, False, True]))
        if rng.random() < 0.1:
            holds = rng.random() < 0.5
            g.dg.oblige(Obligation(ObligationKind.STRUCTURAL, name, name, expected=A, holds=holds))
    return g


def _proofs(g: G, engine: str, tautologies: bool = True) -> tuple[list[tuple[object, ...]], int]:
    results, stats = prove(g.dg, engine=engine, tautologies=tautologies)
    sides = [[None if s is None else (s.domain, s.real) for s in (r.produced, r.expected)] for r in results]
    rows = [(r.obligation.node, r.status, r.blockers, side) for r, side in zip(results, sides, strict=True)]
    return rows, stats.solver_checks


@pytest.mark.parametrize("seed", range(40))
def test_text_prover_matches_the_reference_encoding(seed: int) -> None:
    g = _random_graph(seed)
    assert _proofs(g, "text") == _proofs(g, "api")


@pytest.mark.parametrize("seed", range(40))
def test_tautologies_change_no_verdict(seed: int) -> None:
    """Regions of tautologies skipped or asked: the same verdicts, counterexamples and blockers."""
    g = _random_graph(seed)
    assert _proofs(g, "text")[0] == _proofs(g, "text", tautologies=False)[0] == _proofs(g, "api", False)[0]


def test_every_tautology_is_proved_by_z3() -> None:
    """`Prover.tautology` says true only of obligations z3 proves (each asked alone), and it
    does say true of some (the shortcut is not vacuous), in every obligation kind it covers."""
    from qflow.solvers.prove import Prover

    kinds = set()
    for seed in range(40):
        g = _random_graph(seed)
        p = Prover(g.dg)
        results, _ = prove(g.dg, engine="api", tautologies=False)
        for r in results:
            o = r.obligation
            if o.kind is not ObligationKind.STRUCTURAL and p.tautology(o):
                assert r.status is Status.PROVED, (seed, o)
                kinds.add(o.kind)
    assert kinds == {ObligationKind.USE, ObligationKind.CLAIM, ObligationKind.SAME_AS_FIRST} | {
        ObligationKind.NO_FOLD_CHANGE
    }


def test_a_float_consumer_of_codes_is_no_tautology() -> None:
    """`lhs.real` is the formula of a float consumer: true for real numbers, false for codes."""
    from qflow.solvers.prove import Prover

    g = G()
    g.fact("dq", A, real=True)
    g.fact("q", A)
    g.use("dq", "mul", FLOAT, real=True)
    g.use("q", "add", FLOAT, real=True)
    p = Prover(g.dg)
    assert [p.tautology(o) for o in g.dg.obligations] == [True, False]
    statuses = [r.status for r in prove(g.dg)[0]]
    assert statuses == [Status.PROVED, Status.VIOLATED]


def test_random_graphs_cover_every_verdict() -> None:
    """The comparison above is not vacuous."""
    seen = {r[1] for s in range(40) for r in _proofs(_random_graph(s), "text")[0]}
    assert seen == set(Status)


def test_one_batch_of_regions_is_one_z3_query() -> None:
    g = G()
    for i in range(300):  # more regions than one batch (none of them tautologies)
        g.fact(f"p{i}", AN if i % 2 else CN)
        g.passthrough(f"v{i}", f"p{i}", claim=B if i == 257 else (A if i % 2 else C))
    (rows, checks), (ref_rows, ref_checks) = _proofs(g, "text"), _proofs(g, "api")
    assert rows == ref_rows and checks == ref_checks
    assert [r[0] for r in rows if r[1] is Status.VIOLATED] == ["v257"]
