"""arm-tosa's int16 column (Arm's stock a16w8 config, TOSA-1.0+INT+int16) against the TOSA
reference model: the contract the rules and `Target.validated["int16"]` state is measured here
in the suite, not only by benchmarks/contracts.py.

int16 zero points are 0 on TOSA, so only the scale can be moved (`stock` and `scale`). A stock
lowering that is wrong is allowed only for an op the target does not validate at int16 — and
then qflow must say so before partitioning (an `unvalidated-lowering` finding), never prove it.
"""

from __future__ import annotations

import json
from pathlib import Path

import checks
import probe
import pytest

import qflow
from qflow import targets
from qflow.ops import OpClass, classify
from qflow.targets import OpRule

ARM = targets.get("arm-tosa")
VARIANTS = ("stock", "scale")
_ROWS = json.loads((Path(__file__).parents[2] / "benchmarks" / "contracts.json").read_text())["rows"]
_INT16 = [r for r in _ROWS if r["target"] == "arm-tosa+int16"]
#: Ops the backend refuses at int16 (measured: cumsum), each lowered alone: one would split the batch.
REFUSED = {r["case"] for r in _INT16 if r["variant"] == "stock" and r["outcome"] == probe.REFUSED_LOWERING}
#: The cases of the published int16 column (the batch stays one program per variant).
CASES = [c for c in probe.CASES if c.name not in REFUSED and any(r["case"] == c.name for r in _INT16)]


@pytest.fixture(scope="module")
def int16_table() -> dict[tuple[str, str], probe.Measurement]:
    pytest.importorskip("tosa_reference_model")
    backend = probe.ArmBackend("TOSA-1.0+INT+int16", int16=True)
    return {(m.case, v): m for v in VARIANTS for m in probe.measure_batch(backend, CASES, v)}


def test_the_int16_column_covers_the_transformer_steps() -> None:
    assert {"bmm", "reciprocal", "conv2d", "linear", "cat", "neg"} <= {c.name for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_arm_tosa_int16_contract(int16_table, case: probe.Case) -> None:
    stock, scale = (int16_table[(case.name, v)] for v in VARIANTS)
    rule = checks.expected_rule("arm-tosa", stock.moved or case.op)
    where = (
        f"arm-tosa+int16 {case.name} (rule {rule.name}): "
        f"stock={stock.outcome} {stock.lsb}, scale={scale.outcome} {scale.lsb}"
    )
    marked = ARM.lowers_only_marked
    if marked is not None and not (stock.custom_meta.get(marked[0]) or {}).get(marked[1], False):
        # the quantizer did not mark the op quantized: it stays on the CPU in float (relu6 alone)
        assert (stock.outcome, scale.outcome) == (probe.CPU, probe.CPU), f"unmarked op delegated: {where}"
        return
    compute = classify(case.op) is OpClass.COMPUTE
    if not compute or ARM.lowering_validated(case.op, "int16"):
        assert stock.outcome in (probe.EXACT, probe.CPU) and stock.lsb <= 1 + probe.TOLERANCE, where
    if stock.outcome not in (probe.EXACT, probe.CPU):
        assert compute and not ARM.lowering_validated(case.op, "int16"), f"a wrong stock lowering validated: {where}"
        return  # (the scale variant of an op that is wrong as it stands proves nothing about rescaling)
    if rule in (OpRule.CPU_FLOAT, OpRule.RESCALE):
        assert scale.outcome in (probe.EXACT, probe.CPU) and scale.lsb <= 1 + probe.TOLERANCE, where
    else:  # ZP_ONLY or CODE_COPY: the scale is kept, a moved scale miscomputes
        assert scale.outcome in checks.WRONG, where


@pytest.mark.parametrize("case", [c for c in probe.CASES if c.name in REFUSED], ids=lambda c: c.name)
def test_an_op_refused_at_int16_is_refused_and_never_validated(case: probe.Case) -> None:
    pytest.importorskip("tosa_reference_model")
    (m,) = probe.measure_batch(probe.ArmBackend("TOSA-1.0+INT+int16", int16=True), [case], "stock")
    assert m.outcome == probe.REFUSED_LOWERING, m.detail
    assert not ARM.lowering_validated(case.op, "int16")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_qflow_never_proves_an_int16_branch_the_backend_gets_wrong(int16_table, case: probe.Case) -> None:
    for variant in VARIANTS:
        m = int16_table[(case.name, variant)]
        if m.programs is None:
            continue
        report = _report(m.programs.qdq)
        kinds = {f.kind for f in report.findings if checks.branch(f) == m.branch and f.severity != "info"}
        errors = {f.kind for f in report.errors if checks.branch(f) == m.branch}
        where = f"arm-tosa+int16 {case.name} {variant}: {m.outcome} {m.lsb} LSB, findings {sorted(kinds)}"
        if m.outcome in checks.WRONG:
            assert errors or "unvalidated-lowering" in kinds, where
        elif m.outcome in (probe.EXACT, probe.CPU):
            assert not errors, where


_REPORTS: dict[int, qflow.Report] = {}


def _report(program: object) -> qflow.Report:
    """qflow's arm-tosa report of a probe program, made once."""
    if id(program) not in _REPORTS:
        _REPORTS[id(program)] = qflow.analyze(program, target="arm-tosa")
    return _REPORTS[id(program)]
