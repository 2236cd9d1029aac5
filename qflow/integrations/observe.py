"""Observe every program ExecuTorch lowers during a test and prove it.

The pytest plugin's ``--qflow-observe`` uses this to attach qflow to an
existing, unmodified test suite (the ExecuTorch Arm suite is the proving
ground). Two hooks catch each lowering:

* ``to_edge_transform_and_lower`` and ``EdgeProgramManager.to_backend`` are
  wrapped wherever they are bound, including modules that imported the name
  (``arm_tester`` does), so each *lowered* program is proved: delegate
  boundaries plus each partition as handed to the backend (Q/DQ intact);
* a target whose backend rewrites each partition with its own passes hands each
  one over as they see it (its ``read_partitions`` hook; the Arm target: right
  after ``FoldAndAnnotateQParamsPass``, the *folded* form the backend lowers;
  Cortex-M: the program ``CortexMPassManager.transform()`` returns, read with
  the program it was given as its reference).

qflow must never change what a test does: results are returned untouched,
qflow's own exceptions become notes in the record, and the torch/Python RNG
state is restored around each analysis. torch and executorch are imported
only when a test is observed, so this module is cheap to import.
"""

from __future__ import annotations

import contextlib
import functools
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from qflow import targets
from qflow.report.model import SEVERITIES, Finding, Report

SCHEMA = "qflow.observe/1"
_UNKNOWN_OP_RE = re.compile(r"unknown op ([\w.:]+)")


@dataclass
class Program:
    """One observed program: its report, or why qflow could not analyse it."""

    #: "lowered" (top level after lowering) | "partition" (as the backend's own passes see it: after
    #: the Arm fold pass; the whole program after Cortex-M's pass manager, which rewrites in place)
    kind: str
    name: str
    seconds: float
    report: Report | None = None
    error: str | None = None

    @property
    def failed(self) -> bool:
        """A proof failure worth failing a strict run: an error finding or a violation."""
        r = self.report
        return r is not None and (bool(r.errors) or r.obligations.get("violated", 0) > 0)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "name": self.name, "seconds": round(self.seconds, 6)}
        if self.report is not None:
            out["report"] = self.report.to_json()
        if self.error is not None:
            out["error"] = self.error
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Program:
        report = report_from_json(d["report"]) if "report" in d else None
        return cls(d["kind"], d["name"], float(d["seconds"]), report, d.get("error"))


@dataclass
class TestRecord:
    """Everything qflow saw during one test."""

    nodeid: str
    programs: list[Program] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    outcome: str = ""

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.programs)

    @property
    def failed(self) -> list[Program]:
        return [p for p in self.programs if p.failed]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "test": self.nodeid,
            "outcome": self.outcome,
            # null when the test lowered nothing: there was nothing to prove
            "proved": all(p.report is not None and p.report.proved for p in self.programs) if self.programs else None,
            "seconds": round(self.seconds, 6),
            "programs": [p.to_json() for p in self.programs],
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TestRecord:
        """The record a pytest-xdist worker sent (the inverse of `to_json`)."""
        programs = [Program.from_json(p) for p in d["programs"]]
        return cls(d["test"], programs, list(d.get("notes", [])), d.get("outcome", ""))


def report_from_json(d: dict[str, Any]) -> Report:
    """A `qflow.report/1` document back as a Report (everything but the per-value
    `domains`, which the JSON does not carry): how reports cross from pytest-xdist
    workers to the controller."""
    return Report(
        proved=bool(d["proved"]),
        findings=[Finding(**f) for f in d.get("findings", [])],
        obligations=dict(d.get("obligations", {})),
        form=d.get("form", "unknown"),
        name=d.get("name", ""),
        notes=list(d.get("notes", [])),
        stats=dict(d.get("stats", {})),
        quantized=d.get("status") != "nothing-quantized",
    )


def unknown_ops(report: Report) -> set[str]:
    """The op targets behind a report's unknown-op findings (from their messages)."""
    return {m for f in report.findings if f.kind == "unknown-op" for m in _UNKNOWN_OP_RE.findall(f.message)}


def summarize(tests: list[TestRecord]) -> dict[str, Any]:
    """Session totals: what the terminal line and the summary JSON report."""
    programs = [p for t in tests for p in t.programs]
    reports = [p.report for p in programs if p.report is not None]
    obligations = Counter({"proved": 0, "violated": 0, "unproven": 0})
    severities = Counter({s: 0 for s in SEVERITIES})
    kinds: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    for r in reports:
        obligations.update(r.obligations)
        for f in r.findings:
            severities[f.severity] += 1
            kinds[f.kind] += 1
        ops.update(unknown_ops(r))
    return {
        "schema": SCHEMA,
        "tests": len(tests),
        "tests_with_programs": sum(1 for t in tests if t.programs),
        "outcomes": dict(Counter(t.outcome or "unknown" for t in tests)),
        "programs": len(programs),
        "programs_by_kind": dict(Counter(p.kind for p in programs)),
        "proved_programs": sum(1 for r in reports if r.proved),
        "nothing_quantized_programs": sum(1 for r in reports if r.status == "nothing-quantized"),
        "analysis_errors": sum(1 for p in programs if p.error is not None),
        "obligations": dict(obligations),
        "findings": dict(severities),
        "findings_by_kind": dict(kinds),
        "unknown_ops": dict(ops),
        "qflow_seconds": round(sum(p.seconds for p in programs), 3),
        "error_findings": [
            {
                "test": t.nodeid,
                "outcome": t.outcome,
                "program": p.name,
                "kind": f.kind,
                "node": f.node,
                "message": f.message,
            }
            for t in tests
            for p in t.programs
            if p.report is not None
            for f in p.report.errors
        ],
        "errors": [
            {"test": t.nodeid, "program": p.name, "error": p.error} for t in tests for p in t.programs if p.error
        ],
    }


class Observer:
    """Installs the lowering hooks around one test at a time and proves what they catch."""

    def __init__(self, keep: bool = True) -> None:
        #: every record so far, when `keep` (the pytest plugin sends each record away instead)
        self.tests: list[TestRecord] = []
        self._keep = keep
        self._depth = 0  # to_edge_transform_and_lower calls to_backend: prove the outermost only

    @contextlib.contextmanager
    def observe(self, nodeid: str) -> Iterator[TestRecord]:
        """Within the block, every lowering is recorded and proved into the returned record.

        Partitions are proved when the block ends, from the domain graphs read
        while the lowering ran (plain data: nothing the test does afterwards
        changes them)."""
        rec = TestRecord(nodeid)
        if self._keep:
            self.tests.append(rec)
        sinks: list[list[Any]] = []
        try:
            with contextlib.ExitStack() as stack:
                self._capture_partitions(stack, rec, sinks)
                self._wrap_lowering(stack, rec)
                yield rec
        finally:
            for sink in sinks:
                for i, cap in enumerate(sink):
                    if cap.error is not None:
                        name = f"{rec.nodeid}::partition[{i}]"
                        rec.programs.append(Program("partition", name, cap.seconds, None, cap.error))
                    else:
                        self._prove(rec, cap.graph, "partition", i, spent=cap.seconds)
                sink.clear()

    # -- hooks -------------------------------------------------------------------------

    def _capture_partitions(self, stack: contextlib.ExitStack, rec: TestRecord, sinks: list[list[Any]]) -> None:
        """Each target that can hand over its partitions as its own passes see them (the Arm
        backend: after its fold pass) reads them into a sink."""
        for name in targets.NAMES:
            read_partitions = targets.get(name).hook("read_partitions")
            if read_partitions is None:
                continue
            try:
                sinks.append(stack.enter_context(read_partitions(_read_graph)))
            except Exception as e:  # the backend is not installed here: only top-level lowerings are observed
                rec.notes.append(f"{name} partitions not captured ({type(e).__name__}: {e})")

    def _wrap_lowering(self, stack: contextlib.ExitStack, rec: TestRecord) -> None:
        try:
            from executorch.exir.program import _program
        except Exception as e:
            rec.notes.append(f"ExecuTorch lowerings not observed ({type(e).__name__}: {e})")
            return
        original = _program.to_edge_transform_and_lower
        wrapped = self._wrap(original, rec, given_program=True)
        # Rebind the name wherever it was imported (arm_tester imports it by name).
        for mod in list(sys.modules.values()):
            namespace = getattr(mod, "__dict__", None)
            if isinstance(namespace, dict) and namespace.get("to_edge_transform_and_lower") is original:
                mod.to_edge_transform_and_lower = wrapped
                stack.callback(setattr, mod, "to_edge_transform_and_lower", original)
        cls = _program.EdgeProgramManager
        to_backend = cls.__dict__["to_backend"]
        cls.to_backend = self._wrap(to_backend, rec)
        stack.callback(setattr, cls, "to_backend", to_backend)

    def _wrap(self, fn: Callable[..., Any], rec: TestRecord, given_program: bool = False) -> Callable[..., Any]:
        """`given_program`: `fn` is called with the program it lowers (``to_edge_transform_and_lower``)."""

        @functools.wraps(fn)
        def lowering(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            try:
                result = fn(*args, **kwargs)
            finally:
                self._depth -= 1
            if self._depth == 0:
                self._prove_lowered(rec, result, *(_lowered_from(args, kwargs) if given_program else (None, None)))
            return result

        return lowering

    # -- proving -----------------------------------------------------------------------

    def _prove_lowered(self, rec: TestRecord, manager: Any, target: str | None = None, reference: Any = None) -> None:
        index = sum(1 for p in rec.programs if p.kind == "lowered")
        try:
            methods = list(getattr(manager, "methods", None) or ["forward"])
        except Exception:
            methods = ["forward"]
        if methods == ["forward"]:
            self._prove(rec, manager, "lowered", index, target=target, reference=reference)
            return
        for method in methods:
            try:
                ep = manager.exported_program(method)
            except Exception as e:
                rec.notes.append(f"lowered[{index}].{method} not readable ({type(e).__name__}: {e})")
                continue
            self._prove(rec, ep, "lowered", index, suffix=f".{method}")

    def _prove(
        self,
        rec: TestRecord,
        obj: Any,
        kind: str,
        index: int,
        suffix: str = "",
        spent: float = 0.0,
        target: str | None = None,
        reference: Any = None,
    ) -> None:
        """Analyse `obj` (`spent`: seconds already spent reading it; `target` / `reference`: the
        target it was lowered for and the program it was lowered from, when the lowering call says);
        any qflow exception becomes the program's error, never the test's."""
        from qflow.api import analyze

        name = f"{rec.nodeid}::{kind}[{index}]{suffix}"
        t0 = time.perf_counter() - spent
        report: Report | None = None
        error: str | None = None
        with _rng_preserved():
            try:
                # a lowered program runs its non-delegated ops on the CPU in float
                form = "lowered" if kind == "lowered" else None
                report = analyze(obj, form=form, name=name, target=target, reference=reference)
            except Exception as e:
                error = f"{type(e).__name__}: {e}"
        rec.programs.append(Program(kind, name, time.perf_counter() - t0, report, error))


def _lowered_from(args: tuple, kwargs: dict[str, Any]) -> tuple[str | None, Any]:
    """(target, reference) of a ``to_edge_transform_and_lower(program, partitioner=[...])`` call whose
    partitioners all lower to one target that reads the program a lowered one came from (a TOSA
    payload's weights are bare codes whose scales only that program declares), else (None, None)."""
    try:  # (never the test's exception)
        program = args[0] if args else kwargs.get("programs")
        partitioners = kwargs.get("partitioner", args[1] if len(args) > 1 else None)
        partitioners = partitioners if isinstance(partitioners, (list, tuple)) else [partitioners]
        found = {t.name if (t := targets.for_partitioner(p)) is not None else None for p in partitioners}
        if len(found) != 1 or None in found or type(program).__name__ != "ExportedProgram":
            return None, None
        (name,) = found
        return (name, program) if targets.get(name).hook("read_reference") is not None else (None, None)
    except Exception:
        return None, None


@dataclass
class _Captured:
    """One partition as the backend's passes saw it: its domain graph, read
    in place while the lowering ran, or why it could not be read."""

    graph: Any  # qflow.graph.DomainGraph
    error: str | None
    seconds: float


def _read_graph(ep: Any, target: str | None = None, reference: Any = None) -> _Captured:
    """A target's hook may name the target the program is read for and the program it came
    from (Cortex-M: the program its pass manager was given)."""
    from qflow.api import domain_graph

    t0 = time.perf_counter()
    with _rng_preserved():
        try:
            return _Captured(domain_graph(ep, target=target, reference=reference), None, time.perf_counter() - t0)
        except Exception as e:
            return _Captured(None, f"{type(e).__name__}: {e}", time.perf_counter() - t0)


@contextlib.contextmanager
def _rng_preserved() -> Iterator[None]:
    """qflow must not shift the random streams a test draws its inputs from."""
    py_state = random.getstate()
    torch_state = None
    torch = sys.modules.get("torch")
    if torch is not None:
        torch_state = torch.random.get_rng_state()
    try:
        yield
    finally:
        random.setstate(py_state)
        if torch_state is not None:
            torch.random.set_rng_state(torch_state)
