"""xnnpack's contract against the ExecuTorch runtime, and qflow's verdicts on the probe's programs."""

from __future__ import annotations

import checks
import probe
import pytest

from qflow import targets

#: Ops the runtime has no kernel for, float or quantized: every program with one is refused at load.
NO_KERNEL = {"erfinv"}
CASES = [c for c in probe.CASES if c.name not in NO_KERNEL]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_xnnpack_contract(xnnpack_table, case: probe.Case) -> None:
    checks.check(xnnpack_table, "xnnpack", case)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_xnnpack_verdicts_match_the_measurement(xnnpack_table, verdicts, case: probe.Case) -> None:
    checks.check_verdicts(xnnpack_table, "xnnpack", case, verdicts)


@pytest.mark.parametrize("name", sorted(NO_KERNEL))
def test_an_op_without_a_runtime_kernel_is_refused_at_load(xnnpack_table, name: str) -> None:
    """Loud, whatever the domains: the runtime names the missing operator."""
    for variant in probe.VARIANTS:
        m = xnnpack_table[(name, variant)]
        assert m.outcome == probe.REFUSED_LOAD, m.row()
        assert "Missing operator" in m.detail or "Failed to load method" in m.detail, m.row()


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
