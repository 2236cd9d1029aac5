"""cortex-m's contract against the Cortex-M dialect's reference kernels (CortexMQuantizer →
to_edge → CortexMPassManager for an M55, each program run by its own module), and qflow's verdicts
on the probe's programs: before the passes, and the program the passes return."""

from __future__ import annotations

import checks
import probe
import pytest

import qflow

#: The stock program itself does not compute right (each has its own test below).
STOCK_FAILS = {"where", "masked_fill", "hardswish"}
CASES = [c for c in probe.CASES if c.name not in STOCK_FAILS]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_cortex_m_contract(cortex_m_table, case: probe.Case) -> None:
    checks.check(cortex_m_table, "cortex-m", case)


RUNS = [c for c in probe.CASES if c.name != "hardswish"]


@pytest.mark.parametrize("case", RUNS, ids=[c.name for c in RUNS])
def test_cortex_m_verdicts_match_the_measurement(cortex_m_table, verdicts, case: probe.Case) -> None:
    checks.check_verdicts(cortex_m_table, "cortex-m", case, verdicts)


@pytest.mark.parametrize("name", ["where", "masked_fill"])
def test_a_comparison_with_a_real_threshold_runs_on_codes(cortex_m_table, verdicts, name: str) -> None:
    """`where(x > 0, x, y)` and `x.masked_fill(y > 0.5, -1)` with the stock CortexMQuantizer: the
    passes fold the dequantize into the comparison (the quantizer marked it quantized) and no kernel
    lowers it, so the portable kernel compares codes with 0 / 0.5. Measured far off; qflow says so
    before the passes and after them, at the comparison."""
    m = cortex_m_table[(name, "stock")]
    assert m.outcome == probe.MISCOMPILE and m.lsb > 50, m.row()  # measured: 122, 109 LSB
    p = m.programs
    for program in (p.qdq, p.lowered):
        assert verdicts(program, "cortex-m").get(m.branch) == {"real-constant-on-codes"}, m.row()


def test_a_hardswish_after_a_quantize_is_refused(cortex_m_table, verdicts) -> None:
    """A hardswish no kernel precedes stays an aten op on int8 codes, which the portable kernel
    refuses when the program runs: loud, so no silent miscompile, and unproven (never proved)."""
    m = cortex_m_table[("hardswish", "stock")]
    assert m.outcome == probe.REFUSED_LOAD and "not implemented for 'Char'" in m.detail, m.row()
    for program in (m.programs.qdq, m.programs.lowered):
        report = qflow.analyze(program, target="cortex-m")
        assert not report.proved and not report.errors, str(report)
        assert any(f.kind == "unvalidated-lowering" and "refused" in f.message for f in report.findings), str(report)
