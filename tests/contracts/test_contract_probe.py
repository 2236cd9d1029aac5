"""Contracts are measured, not believed.

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
per variant (`probe.measure_batch`), built once per session.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import probe  # noqa: E402

from qflow import targets  # noqa: E402
from qflow.ops import OpClass, classify  # noqa: E402
from qflow.targets import OpRule  # noqa: E402

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


def _table(backend: probe.Backend, custom_forced: bool) -> dict[tuple[str, str], probe.Measurement]:
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


@pytest.fixture(scope="session")
def arm_table() -> dict[tuple[str, str], probe.Measurement]:
    pytest.importorskip("tosa_reference_model")
    return _table(probe.ArmBackend(), custom_forced=False)


@pytest.fixture(scope="session")
def xnnpack_table() -> dict[tuple[str, str], probe.Measurement]:
    # Forced variants annotate ops the stock XNNPACKQuantizer leaves float (a custom annotation).
    return _table(probe.XnnpackBackend(), custom_forced=True)


def check(table: dict[tuple[str, str], probe.Measurement], target: str, case: probe.Case) -> None:
    stock, zp, scale = (table[(case.name, v)] for v in probe.VARIANTS)
    rule = expected_rule(target, case.op)
    where = f"{target} {case.name} (rule {rule.name}): " + ", ".join(
        f"{m.variant}={m.outcome} {m.lsb} {m.detail}".strip() for m in (stock, zp, scale)
    )
    assert stock.outcome in (probe.EXACT, probe.CPU), where
    if zp.outcome == probe.NOT_QUANTIZED:
        pytest.fail(f"the probe could not quantize the op's output: {where}")
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


@pytest.mark.parametrize("case", probe.CASES, ids=CASE_NAMES)
def test_arm_tosa_contract(arm_table, case: probe.Case) -> None:
    check(arm_table, "arm-tosa", case)


@pytest.mark.parametrize("case", probe.CASES, ids=CASE_NAMES)
def test_xnnpack_contract(xnnpack_table, case: probe.Case) -> None:
    check(xnnpack_table, "xnnpack", case)


@pytest.fixture(scope="session")
def xnnpack_fusion() -> dict[str, probe.Measurement]:
    return {m.case: m for m in probe.measure_batch(probe.XnnpackBackend(), list(probe.FUSION_CASES), "stock")}


@pytest.mark.parametrize("case", probe.FUSION_CASES, ids=[c.name for c in probe.FUSION_CASES])
def test_xnnpack_clamps_in_code_space(xnnpack_fusion, case: probe.Case) -> None:
    """conv/linear → relu → cat(·, signed): the relu shares the cat's domain, whose zero point
    is above qmin, and XNNPACK still computes it within 1 LSB (Fusion.CODE_CLAMP)."""
    m = xnnpack_fusion[case.name]
    assert m.out_qparams is not None and m.out_qparams[1] > -128, m.row()
    assert m.outcome == probe.EXACT, m.row()
    assert targets.get("xnnpack").fusion is targets.Fusion.CODE_CLAMP


def test_xnnpack_refuses_a_cat_that_changes_domain_at_load(xnnpack_table) -> None:
    """A cat whose output quantize differs from its inputs' is refused when the runtime loads it."""
    for variant in ("zp", "scale"):
        m = xnnpack_table[("cat", variant)]
        assert m.outcome == probe.REFUSED_LOAD, m.row()
        # benchmarks/contracts.py records the runtime's log ("Failed to create cat2 node ...");
        # under pytest's fd capture only the pybinding's message may reach us
        assert "Failed to create cat" in m.detail or "Failed to load method" in m.detail, m.row()
    assert targets.get("xnnpack").outcome is targets.Outcome.REFUSED_AT_LOAD
