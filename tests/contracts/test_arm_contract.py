"""arm-tosa's contract against the TOSA reference model, and qflow's verdicts on the probe's programs."""

from __future__ import annotations

import checks
import probe
import pytest


@pytest.mark.parametrize("case", probe.CASES, ids=checks.CASE_NAMES)
def test_arm_tosa_contract(arm_table, case: probe.Case) -> None:
    checks.check(arm_table, "arm-tosa", case)


@pytest.mark.parametrize("case", probe.CASES, ids=checks.CASE_NAMES)
def test_arm_tosa_verdicts_match_the_measurement(arm_table, verdicts, case: probe.Case) -> None:
    checks.check_verdicts(arm_table, "arm-tosa", case, verdicts)
