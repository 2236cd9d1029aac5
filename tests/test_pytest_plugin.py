"""The pytest plugin, exercised with pytester on the bundled real programs."""

from __future__ import annotations

import json
from pathlib import Path

pytest_plugins = ["pytester"]

EXAMPLES = Path(__file__).parent.parent / "qflow" / "examples"


def test_plugin_fails_seed000_passes_control_and_writes_reports(pytester) -> None:
    pytester.makepyfile(
        f"""
        def test_seed000(qflow_prove):
            qflow_prove(r"{EXAMPLES / "seed000_cat_requant.pt2"}", name="seed000")

        def test_control(qflow_prove):
            report = qflow_prove(r"{EXAMPLES / "seed000_control.pt2"}", name="control")
            assert report.proved
        """
    )
    out = pytester.mkdir("reports")
    result = pytester.runpytest_subprocess(f"--qflow-report={out}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*qflow could not prove seed000*", "*requant-after-passthrough*"])
    assert json.loads((out / "seed000.json").read_text())["proved"] is False
    assert json.loads((out / "control.json").read_text())["proved"] is True
    sarif = json.loads((out / "qflow.sarif").read_text())
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["requant-after-passthrough"]
    assert "<testsuites" in (out / "qflow-junit.xml").read_text()
