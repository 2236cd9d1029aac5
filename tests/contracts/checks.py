"""Contracts are measured, not believed (the checks; tests in test_*_contract.py).

Every single-op program of `probe.CASES` is quantized with the target's stock
quantizer, its output domain moved away from its input's (zero point only, then
scale only), lowered with the real backend and run (TOSA reference model /
ExecuTorch runtime with the XNNPACK delegate). The target's contract must
predict what the backend did:

* RESCALE   → exact (within 1 LSB) whatever the output domain;
* ZP_ONLY   → exact when only the zero point moves, wrong (or refused) when the scale does;
* CODE_COPY → wrong or refused whenever the output domain moves;
* CPU_FLOAT → the partitioner leaves the op on the CPU (exact);

and the stock annotation must lower exactly. When an ExecuTorch upgrade changes
a lowering, this fails, not a user. Each target's table is one batched program
per variant (`probe.measure_batch`; XNNPACK's in programs of 17 cases), built once per session.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import probe
import pytest

from qflow import targets
from qflow.ops import OpClass, classify
from qflow.targets import OpRule

WRONG = {probe.MISCOMPILE, probe.REFUSED_LOWERING, probe.REFUSED_LOAD}

#: Ops the Arm partitioner does not delegate on their own (a partition of no-op
#: nodes is rejected); in the batch they share a partition with the other cases.
CASE_NAMES = [c.name for c in probe.CASES]


def expected_rule(target: str, op: str) -> OpRule:
    """The target's rule, or the PT2E default qflow applies without one."""
    rule = targets.get(target).rule(op)
    if rule is not None:
        return rule
    return OpRule.RESCALE if classify(op) is OpClass.COMPUTE else OpRule.CODE_COPY


def table(backend: probe.Backend, custom_forced: bool) -> dict[tuple[str, str], probe.Measurement]:
    table = {}
    for variant in probe.VARIANTS:
        custom = custom_forced and variant != "stock"
        for m in probe.measure_batch(backend, list(probe.CASES), variant, custom=custom):
            table[(m.case, variant)] = m
    if dump := os.environ.get("QFLOW_CONTRACTS_DUMP"):  # the raw rows, for benchmarks/contracts.py --merge
        rows = [m.row() for m in table.values()]
        path = Path(dump)
        old = json.loads(path.read_text())["rows"] if path.exists() else []
        keep = [r for r in old if r["target"] != backend.name]
        path.write_text(json.dumps({"rows": keep + rows}, indent=1, default=str))
    return table


def check(table: dict[tuple[str, str], probe.Measurement], target: str, case: probe.Case) -> None:
    stock, zp, scale = (table[(case.name, v)] for v in probe.VARIANTS)
    rule = expected_rule(target, stock.moved or case.op)
    where = f"{target} {case.name} (rule {rule.name}): " + ", ".join(
        f"{m.variant}={m.outcome} {m.lsb} {m.detail}".strip() for m in (stock, zp, scale)
    )
    assert stock.outcome in (probe.EXACT, probe.CPU), where
    if zp.outcome == probe.NOT_QUANTIZED:
        pytest.fail(f"the probe could not quantize the op's output: {where}")
    if case.op in targets.get(target).unwritten_gemm_weights and all(len(s) == 2 for s in case.shapes):
        # left on the CPU reading an operand its delegate never writes: wrong whatever the output domain
        assert zp.outcome == probe.MISCOMPILE and scale.outcome == probe.MISCOMPILE, where
        return
    marked = targets.get(target).lowers_only_marked
    if marked is not None and not (stock.custom_meta.get(marked[0]) or {}).get(marked[1], False):
        # the target lowers only nodes its quantizer marked: an unmarked op stays on the CPU in float
        assert (stock.outcome, zp.outcome, scale.outcome) == (probe.CPU,) * 3, f"unmarked op delegated: {where}"
        return
    if rule in (OpRule.CPU_FLOAT, OpRule.RESCALE):  # exact, in the delegate or on the CPU
        for m in (zp, scale):
            assert m.outcome in (probe.EXACT, probe.CPU) and m.lsb <= 1 + probe.TOLERANCE, where
        if rule is OpRule.CPU_FLOAT:
            assert probe.CPU in (zp.outcome, scale.outcome), f"delegated, not on the CPU: {where}"
    elif rule is OpRule.ZP_ONLY:
        assert zp.outcome == probe.EXACT and scale.outcome in WRONG, where
    else:  # CODE_COPY
        assert zp.outcome in WRONG and scale.outcome in WRONG, where


# --------------------------------------------------------------------------- qflow on the probe's programs
# The contract table is what qflow's verdicts rest on; these tests check the verdicts themselves on the
# very programs the probe measured: every branch the backend got wrong is an error in every form qflow
# reads (before partitioning, the lowered program, each partition after the Arm fold), and no branch it
# computed exactly is. Findings are attributed to a branch by their nn.Module path (`branches.<i>`).


def branch(finding) -> int | None:
    m = re.match(r"branches\.(\d+)", finding.module or "")
    return int(m.group(1)) if m else None


def _forms(m: probe.Measurement) -> dict[str, list]:
    p = m.programs
    assert p is not None, m.row()
    forms = {"before partitioning": [p.qdq]}
    if p.lowered is not None:
        forms["lowered"] = [p.lowered]
    if p.folded:
        forms["folded partition"] = list(p.folded)
    return forms


def check_verdicts(table, target: str, case: probe.Case, verdicts) -> None:
    for variant in probe.VARIANTS:
        m = table[(case.name, variant)]
        if m.outcome in WRONG:
            for form, programs in _forms(m).items():
                kinds = set().union(*(verdicts(obj, target).get(m.branch, set()) for obj in programs))
                assert kinds, f"{target} {case.name} {variant}: {m.outcome} {m.lsb} LSB, but no error {form}"
        elif m.outcome in (probe.EXACT, probe.CPU):
            for form, programs in _forms(m).items():
                kinds = set().union(*(verdicts(obj, target).get(m.branch, set()) for obj in programs))
                assert not kinds, f"{target} {case.name} {variant}: exact ({m.lsb} LSB), but {sorted(kinds)} {form}"
