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

`--qflow-check PATH` turns a model zoo into a test suite: every program file
under PATH (`.pt2`, and `.pte` checked against a `.pt2` of the same name beside
it when there is one; more suffixes with `register_loader`) is one test item
that fails unless the program proves, so `-n auto` spreads a zoo over cores.

pytest-xdist: what a test observed or proved travels on its own `TestReport`
(the `qflow` attribute, a JSON string: pytest serializes a report's extra
attributes to the controller), which collects them in
`pytest_runtest_logreport` and alone writes every file and the summary, so
`-n auto`, `--tx ssh=...` hosts and a serial run produce the same reports.
Workers write nothing; a serial run hands the objects over directly.
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


_OBSERVER_KEY: pytest.StashKey[Observer] = pytest.StashKey()
_RECORD_KEY: pytest.StashKey[TestRecord] = pytest.StashKey()
_PROVED_KEY = pytest.StashKey[list[Report]]()  # this item's qflow_prove reports, not yet sent
_CONTROLLER = "qflow-controller"  # the plugin name of the _Controller (absent on xdist workers)


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
        "--qflow-check",
        metavar="PATH",
        action="append",
        default=[],
        help="collect every program file (.pt2, .pte) under PATH (a directory or a file) as one test each; repeatable",
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


def _is_worker(config: pytest.Config) -> bool:
    """A pytest-xdist worker: it sends its results to the controller and writes nothing."""
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--qflow-observe", default=False) or _explicitly_loaded(config):
        from qflow.integrations.observe import Observer

        config.stash[_OBSERVER_KEY] = Observer(keep=False)
    if not _is_worker(config):
        config.pluginmanager.register(_Controller(config), _CONTROLLER)
    checks = [str(p) for p in config.getoption("--qflow-check", default=[])]
    if checks:
        # the zoo is what this run collects: its paths replace the default ones (testpaths, the
        # cwd) and join any given on the command line
        explicit = config.args_source is pytest.Config.ArgsSource.ARGS
        config.args[:] = [*(config.args if explicit else []), *(c for c in checks if c not in config.args)]


# -- a model zoo as a test suite (--qflow-check) ------------------------------------------

#: Loader = Callable[[Path], Report]: proves one program file; see `register_loader`.
Loader = Callable[[Path], Report]


def _check_pt2(path: Path) -> Report:
    from qflow.api import analyze

    return analyze(path, name=path.name)


def _check_pte(path: Path) -> Report:
    """A shipped .pte; checked against the PT2E program it was lowered from when
    that sits beside it as a .pt2 of the same name (`qflow check --reference`),
    since a TOSA payload alone keeps no weight scales to prove against."""
    from qflow.api import analyze

    reference = path.with_suffix(".pt2")
    return analyze(path, name=path.name, reference=reference if reference.is_file() else None)


#: file suffix → the function that proves a program file of that kind
LOADERS: dict[str, Loader] = {".pt2": _check_pt2, ".pte": _check_pte}


def register_loader(suffix: str, loader: Loader) -> None:
    """Teach `--qflow-check` another program file kind, e.g. `register_loader(".bin", my_check)`:
    `loader(path)` returns the file's Report (raise `qflow.InputError` on a bad file)."""
    LOADERS[suffix if suffix.startswith(".") else "." + suffix] = loader


def _under(path: Path, roots: list[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    checks = parent.config.getoption("--qflow-check", default=[])
    if not checks or file_path.suffix not in LOADERS:
        return None
    if not _under(file_path.resolve(), [Path(c).resolve() for c in checks]):
        return None
    return ProgramFile.from_parent(parent, path=file_path)


class ProgramFile(pytest.File):
    """One program file: one item."""

    def collect(self) -> list[pytest.Item]:
        return [ProgramItem.from_parent(self, name=self.path.name)]


class ProgramItem(pytest.Item):
    """Proves one program file; fails with the rendered report unless it proves
    (the CLI's default `--fail-on warning`)."""

    def runtest(self) -> None:
        from qflow.cli import fails
        from qflow.errors import InputError

        try:
            report = LOADERS[self.path.suffix](self.path)
        except InputError as e:
            pytest.fail(f"qflow: bad input: {e}", pytrace=False)
        try:  # unique across the zoo: the per-program JSON is named after it
            report.name = self.path.relative_to(self.config.rootpath).as_posix()
        except ValueError:
            report.name = str(self.path)
        self.stash.setdefault(_PROVED_KEY, []).append(report)
        if fails(report, "warning"):
            pytest.fail(f"qflow could not prove {report.name}:\n{report}", pytrace=False)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"qflow check {self.path.name}"


@pytest.fixture
def qflow_prove(request: pytest.FixtureRequest) -> Callable[..., Report]:
    """Prove a program (anything `qflow.analyze` takes); fail the test unless proved."""

    def prove(program: Any, name: str | None = None, form: str | None = None) -> Report:
        from qflow.api import analyze

        label = name or request.node.nodeid
        report = analyze(program, form=form, name=label)
        request.node.stash.setdefault(_PROVED_KEY, []).append(report)
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
    """Hand what qflow saw to the controller: the observation record once the outcome is known
    (call phase), and the reports of `qflow_prove` calls made so far. A pytest-xdist worker
    attaches them to the test's report; in a serial run the controller takes the objects."""
    report = yield
    pending = item.stash.get(_PROVED_KEY, None)
    proved = list(pending or ())
    if pending:
        pending.clear()
    rec = item.stash.get(_RECORD_KEY, None) if report.when == "call" else None
    if rec is not None:
        rec.outcome = report.outcome
        if hasattr(report, "wasxfail"):
            rec.outcome = {"passed": "xpassed", "skipped": "xfailed"}.get(report.outcome, report.outcome)
    if not proved and rec is None:
        return report
    controller = item.config.pluginmanager.get_plugin(_CONTROLLER)
    if controller is not None:
        controller.add(report.nodeid, proved, rec)
    else:
        payload: dict[str, Any] = {"proved": [r.to_json() for r in proved]}
        if rec is not None:
            payload["observed"] = rec.to_json()
        report.qflow = json.dumps(payload)  # a string: crosses execnet as is
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


class _Controller:
    """The controller's half (the only process in a serial run): keeps what each test's report
    carries and writes every file and the summary line. Registered on the controller only."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.records: list[TestRecord] = []
        #: (test node id, index within the test, report) of every `qflow_prove` call
        self.proved: list[tuple[str, int, Report]] = []
        self.observing = config.stash.get(_OBSERVER_KEY, None) is not None

    def reports(self) -> list[Report]:
        """Every checked program's report in a fixed order (test id, then order within the test),
        so a run's SARIF and JUnit do not depend on which worker finished first."""
        observed = [(r.nodeid, i, p.report) for r in self.records for i, p in enumerate(r.programs) if p.report]
        return [r for _, _, r in sorted([*self.proved, *observed], key=lambda t: (t[0], t[1]))]

    def summary(self) -> dict[str, Any]:
        from qflow.integrations.observe import summarize

        return summarize(sorted(self.records, key=lambda r: r.nodeid))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A worker's test report: what qflow saw travels on it as JSON."""
        raw = getattr(report, "qflow", None)
        if not raw:
            return
        from qflow.integrations.observe import TestRecord, report_from_json

        payload = json.loads(raw)
        docs = payload.get("proved", [])
        observed = payload.get("observed")
        rec = TestRecord.from_json(observed) if observed is not None else None
        self.add(report.nodeid, [report_from_json(d) for d in docs], rec, docs, observed)

    def add(
        self,
        nodeid: str,
        proved: list[Report],
        rec: TestRecord | None,
        proved_docs: list[dict[str, Any]] | None = None,
        rec_doc: dict[str, Any] | None = None,
    ) -> None:
        """Keep one test's reports and record; write their files (from the JSON documents
        when a worker sent them, else rendered here)."""
        d = _report_dir(self.config)
        start = sum(1 for n, _, _ in self.proved if n == nodeid)
        for i, r in enumerate(proved):
            self.proved.append((nodeid, start + i, r))
            if d is not None:
                doc = proved_docs[i] if proved_docs is not None else r.to_json()
                (d / f"{_stem(r.name)}.json").write_text(json.dumps(doc, indent=2))
        if rec is not None:
            self.records.append(rec)
            if d is not None:
                (d / "observed").mkdir(exist_ok=True)
                doc = rec_doc if rec_doc is not None else rec.to_json()
                (d / "observed" / f"{_stem(rec.nodeid)}.json").write_text(json.dumps(doc, indent=2))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """One line of totals (and each error finding) when observing."""
        if not self.observing:
            return
        s = self.summary()
        ob, fi = s["obligations"], s["findings"]
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(s["programs_by_kind"].items())) or "none"
        terminalreporter.write_sep("-", "qflow observe")
        terminalreporter.write_line(
            f"qflow: {s['tests_with_programs']}/{s['tests']} tests lowered {s['programs']} programs ({kinds}), "
            f"{s['proved_programs']} proved, {s['nothing_quantized_programs']} with nothing quantized; "
            f"obligations {ob['proved']} proved / {ob['violated']} violated / "
            f"{ob['unproven']} unproven; findings {fi['error']} error / {fi['warning']} warning / "
            f"{fi['info']} info; {s['analysis_errors']} analysis errors; {s['qflow_seconds']:.1f} s in qflow"
        )
        if s["unknown_ops"]:
            terminalreporter.write_line("qflow: unknown ops: " + ", ".join(sorted(s["unknown_ops"])))
        for f in s["error_findings"][:20]:
            terminalreporter.write_line(f"qflow: ERROR {f['program']} ({f['outcome']}): {f['kind']} at {f['node']}")
        for e in s["errors"][:20]:
            terminalreporter.write_line(f"qflow: analysis error {e['program']}: {e['error'][:200]}")

    def pytest_sessionfinish(self) -> None:
        """Every worker is down by now (pytest-xdist's loop ends first): write the merged files."""
        d = _report_dir(self.config)
        if d is None:
            return
        if self.observing:
            (d / "qflow-observe.json").write_text(json.dumps(self.summary(), indent=2))
        reports = self.reports()
        if not reports:
            return
        from qflow.report.junit import render_junit
        from qflow.report.sarif import render_sarif

        (d / "qflow.sarif").write_text(json.dumps(render_sarif(reports), indent=2))
        (d / "qflow-junit.xml").write_text(render_junit(reports))
