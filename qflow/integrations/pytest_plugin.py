"""pytest plugin (entry point `pytest11: qflow`): one line adds a proof to a test.

    def test_lowering(qflow_prove):
        edge = to_edge_transform_and_lower(...)
        qflow_prove(edge)            # fails the test with the rendered report

`--qflow-report=DIR` writes every checked program's report as JSON, and the
session's reports as one SARIF file and one JUnit file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from qflow.report.model import Report

_REPORTS_KEY = pytest.StashKey[list[Report]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("qflow")
    group.addoption(
        "--qflow-report",
        metavar="DIR",
        default=None,
        help="write a qflow report (JSON per program; SARIF and JUnit for the session) to DIR",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_REPORTS_KEY] = []


@pytest.fixture
def qflow_prove(request: pytest.FixtureRequest) -> Callable[..., Report]:
    """Prove a program (anything `qflow.analyze` takes); fail the test unless proved."""

    def prove(program: Any, name: str | None = None, form: str | None = None) -> Report:
        from qflow.api import analyze

        label = name or request.node.nodeid
        report = analyze(program, form=form, name=label)
        request.config.stash[_REPORTS_KEY].append(report)
        _write_one(request.config, report)
        if not report.proved:
            pytest.fail(f"qflow could not prove {label}:\n{report}", pytrace=False)
        return report

    return prove


def _report_dir(config: pytest.Config) -> Path | None:
    opt = config.getoption("--qflow-report", default=None)
    if not opt:
        return None
    d = Path(opt)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _write_one(config: pytest.Config, report: Report) -> None:
    d = _report_dir(config)
    if d is None:
        return
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", report.name).strip("_") or "program"
    (d / f"{stem}.json").write_text(json.dumps(report.to_json(), indent=2))


def pytest_sessionfinish(session: pytest.Session) -> None:
    d = _report_dir(session.config)
    reports = session.config.stash.get(_REPORTS_KEY, [])
    if d is None or not reports:
        return
    from qflow.report.junit import render_junit
    from qflow.report.sarif import render_sarif

    (d / "qflow.sarif").write_text(json.dumps(render_sarif(reports), indent=2))
    (d / "qflow-junit.xml").write_text(render_junit(reports))
