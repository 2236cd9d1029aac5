"""pytest plugin (entry point `pytest11: qflow`): one line adds a proof to a test.

    def test_lowering(qflow_prove):
        edge = to_edge_transform_and_lower(...)
        qflow_prove(edge)            # fails the test with the rendered report

`--qflow-observe` (or loading the plugin explicitly with `-p qflow`) attaches
qflow to an unmodified suite instead: every program ExecuTorch lowers during a
test is proved (`qflow.integrations.observe`) and reported, without failing
the test unless `--qflow-strict` asks for it.

`--qflow-report=DIR` writes every checked program's report as JSON (observed
tests: one JSON per test under DIR/observed/ plus DIR/qflow-observe.json with
the session totals), and the session's reports as one SARIF file and one
JUnit file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from qflow.report.model import Report

if TYPE_CHECKING:  # the observer is imported only when observing
    from qflow.integrations.observe import Observer, TestRecord

_REPORTS_KEY = pytest.StashKey[list[Report]]()
_OBSERVER_KEY: pytest.StashKey[Observer] = pytest.StashKey()
_RECORD_KEY: pytest.StashKey[TestRecord] = pytest.StashKey()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("qflow")
    group.addoption(
        "--qflow-report",
        metavar="DIR",
        default=None,
        help="write a qflow report (JSON per program; SARIF and JUnit for the session) to DIR",
    )
    group.addoption(
        "--qflow-observe",
        action="store_true",
        default=False,
        help="prove every program ExecuTorch lowers during each test (also on with an explicit -p qflow)",
    )
    group.addoption(
        "--qflow-strict",
        action="store_true",
        default=False,
        help="with --qflow-observe: fail a passing test whose lowered programs have an error finding",
    )


def _explicitly_loaded(config: pytest.Config) -> bool:
    """True when the command line names the plugin with `-p qflow` / `-pqflow`."""
    args = [str(a) for a in config.invocation_params.args]
    return "-pqflow" in args or any(a == "-p" and b == "qflow" for a, b in zip(args, args[1:], strict=False))


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_REPORTS_KEY] = []
    if config.getoption("--qflow-observe", default=False) or _explicitly_loaded(config):
        from qflow.integrations.observe import Observer

        config.stash[_OBSERVER_KEY] = Observer()


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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    """Observe the test body; a strict run fails a passing test whose programs do not prove."""
    observer = item.config.stash.get(_OBSERVER_KEY, None)
    if observer is None:
        return (yield)
    with observer.observe(item.nodeid) as rec:
        item.stash[_RECORD_KEY] = rec
        result = yield
    if item.config.getoption("--qflow-strict", default=False) and rec.failed:
        lines = [f"{f.kind} at {f.node}: {f.message}" for p in rec.failed for f in p.report.errors]  # type: ignore[union-attr]
        pytest.fail("qflow --qflow-strict: lowered program not proved:\n" + "\n".join(lines), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """Once the test's outcome is known, its observation record is complete: write it."""
    report = yield
    rec = item.stash.get(_RECORD_KEY, None)
    if rec is not None and report.when == "call":
        rec.outcome = report.outcome
        if hasattr(report, "wasxfail"):
            rec.outcome = {"passed": "xpassed", "skipped": "xfailed"}.get(report.outcome, report.outcome)
        reports = [p.report for p in rec.programs if p.report is not None]
        item.config.stash[_REPORTS_KEY].extend(reports)
        d = _report_dir(item.config)
        if d is not None:
            (d / "observed").mkdir(exist_ok=True)
            (d / "observed" / f"{_stem(rec.nodeid)}.json").write_text(json.dumps(rec.to_json(), indent=2))
    return report


def _report_dir(config: pytest.Config) -> Path | None:
    opt = config.getoption("--qflow-report", default=None)
    if not opt:
        return None
    d = Path(opt)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "program"


def _write_one(config: pytest.Config, report: Report) -> None:
    d = _report_dir(config)
    if d is None:
        return
    (d / f"{_stem(report.name)}.json").write_text(json.dumps(report.to_json(), indent=2))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line of totals (and each error finding) when observing."""
    observer = config.stash.get(_OBSERVER_KEY, None)
    if observer is None:
        return
    from qflow.integrations.observe import summarize

    s = summarize(observer.tests)
    ob, fi = s["obligations"], s["findings"]
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(s["programs_by_kind"].items())) or "none"
    terminalreporter.write_sep("-", "qflow observe")
    terminalreporter.write_line(
        f"qflow: {s['tests_with_programs']}/{s['tests']} tests lowered {s['programs']} programs ({kinds}), "
        f"{s['proved_programs']} proved; obligations {ob['proved']} proved / {ob['violated']} violated / "
        f"{ob['unproven']} unproven; findings {fi['error']} error / {fi['warning']} warning / {fi['info']} info; "
        f"{s['analysis_errors']} analysis errors; {s['qflow_seconds']:.1f} s in qflow"
    )
    if s["unknown_ops"]:
        terminalreporter.write_line("qflow: unknown ops: " + ", ".join(sorted(s["unknown_ops"])))
    for f in s["error_findings"][:20]:
        terminalreporter.write_line(f"qflow: ERROR {f['program']} ({f['outcome']}): {f['kind']} at {f['node']}")
    for e in s["errors"][:20]:
        terminalreporter.write_line(f"qflow: analysis error {e['program']}: {e['error'][:200]}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    d = _report_dir(session.config)
    observer = session.config.stash.get(_OBSERVER_KEY, None)
    if d is not None and observer is not None:
        from qflow.integrations.observe import summarize

        (d / "qflow-observe.json").write_text(json.dumps(summarize(observer.tests), indent=2))
    reports = session.config.stash.get(_REPORTS_KEY, [])
    if d is None or not reports:
        return
    from qflow.report.junit import render_junit
    from qflow.report.sarif import render_sarif

    (d / "qflow.sarif").write_text(json.dumps(render_sarif(reports), indent=2))
    (d / "qflow-junit.xml").write_text(render_junit(reports))
