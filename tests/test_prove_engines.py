"""The SMT-LIB text prover against the reference (Python-API) encoding: same verdicts,
same counterexamples, same blockers, obligation by obligation, on the real models in
every form qflow reads and on the synthetic benchmark graphs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from qflow.api import domain_graph
from qflow.examples import models
from qflow.graph import DomainGraph
from qflow.solvers.prove import prove
from qflow.targets.arm import pipeline as arm

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


def _outcome(dg: DomainGraph, engine: str, tautologies: bool = True) -> tuple[list[tuple[Any, ...]], int]:
    results, stats = prove(dg, engine=engine, tautologies=tautologies)
    rows = []
    for r in results:
        sides = tuple(None if s is None else (s.domain, s.real) for s in (r.produced, r.expected))
        rows.append((r.obligation.kind, r.obligation.node, r.status, sides, tuple(r.blockers)))
    return rows, stats.solver_checks


def assert_same_proofs(dg: DomainGraph) -> list[tuple[Any, ...]]:
    fast, fast_checks = _outcome(dg, "text")
    ref, ref_checks = _outcome(dg, "api")
    assert fast == ref
    assert fast_checks == ref_checks
    # and z3 asked about every obligation, tautologies included (the reference of the benchmark)
    assert _outcome(dg, "api", tautologies=False)[0] == fast
    return fast


def _annotated(name: str) -> Any:
    ex = models.MODELS[name]()
    q = ex.make_quantizer() if ex.make_quantizer else arm.default_quantizer(ex.spec)
    g = q.transform_for_annotation(arm.export_module(ex.model, ex.inputs))
    q.annotate(g)
    return g


@pytest.mark.parametrize("name", models.names())
def test_real_models_every_form(built, name) -> None:
    b = built(name)
    statuses = set()
    programs = [
        (b.converted, None),
        (b.edge, None),
        (b.folded, None),
        (b.lowered, "lowered"),
        *((p, None) for p in b.partitions),
        (_annotated(name), "annotated"),
    ]
    for program, form in programs:
        rows = assert_same_proofs(domain_graph(program, form))
        statuses |= {r[2].value for r in rows}
    assert "proved" in statuses


def test_real_violations_are_compared_too(built) -> None:
    """The comparison above is not vacuous: seed 000 has violations with counterexamples."""
    rows = assert_same_proofs(domain_graph(built("seed000_probe").folded))
    violated = [r for r in rows if r[2].value == "violated"]
    assert violated and all(r[3][0] is not None and r[3][1] is not None for r in violated)


@pytest.fixture(scope="module")
def synthetic() -> Any:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import synth
    finally:
        sys.path.remove(str(BENCHMARKS))
    seed = synth.quantize_block()
    edge = synth.replicate(seed.edge, synth.copies_for(3000, synth.nodes_per_copy(seed.edge)))
    return edge, arm.fold_qparams(edge, spec=synth.SPEC)


def test_synthetic_benchmark_graphs(synthetic) -> None:
    edge, folded = synthetic
    for ep in (edge, folded):
        dg = domain_graph(ep)
        assert len(dg) > 900
        rows = assert_same_proofs(dg)
        assert len(rows) > 500


def test_synthetic_graph_with_broken_copies(synthetic) -> None:
    """Every 7th declared domain changed: failing regions spread over several batches, so the
    text prover bisects and hands single regions to the reference for the counterexamples."""
    from dataclasses import replace

    from qflow.domain import Domain
    from qflow.graph import ObligationKind

    for ep in synthetic:
        dg = domain_graph(ep)
        declared = [
            i
            for i, o in enumerate(dg.obligations)
            if o.expected is not None and not o.expected.is_float and o.kind is not ObligationKind.STRUCTURAL
        ]
        assert len(declared) > 50
        broken = declared[::7]
        for i in broken:
            wrong = Domain.quantized("int16", 0.5, 3, -32768, 32767)
            dg.obligations[i] = replace(dg.obligations[i], expected=wrong)
        rows = assert_same_proofs(dg)
        # (a quantize of a real tensor holds whatever it declares: not every change breaks)
        violated = [i for i in broken if rows[i][2].value == "violated"]
        assert len(violated) > 10 and all(rows[i][3][0] is not None for i in violated)
