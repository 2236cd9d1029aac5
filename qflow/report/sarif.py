"""SARIF 2.1.0: the format GitHub code scanning (and most CI dashboards) ingest.

One run holds the results of every report, because GitHub rejects uploads with
several runs of one tool in one category. GitHub also rejects the whole file
when any result lacks a physical location, so every result gets one: the model
source line when the finding has it, else the program file (see `artifacts`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from qflow._version import __version__
from qflow.report.kinds import KINDS
from qflow.report.model import Report

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SRCROOT = "%SRCROOT%"
#: qflow severity → SARIF level (SARIF has no "info"; its "note" is the same thing).
LEVELS = {"error": "error", "warning": "warning", "info": "note"}

_SOURCE_RE = re.compile(r"^(?P<file>.+):(?P<line>\d+)$")


def as_reports(reports: Report | Iterable[Report]) -> list[Report]:
    """Every renderer takes one report or several; normalise to a list."""
    return [reports] if isinstance(reports, Report) else list(reports)


def split_source(source: str | None) -> tuple[str, int] | None:
    """("file", line) of a "file:line" source, or None when it has no line number."""
    if not source:
        return None
    m = _SOURCE_RE.match(source.strip())
    if not m or int(m["line"]) < 1:
        return None
    return m["file"], int(m["line"])


def display_path(file: str, base: Path | None = None) -> tuple[str, bool]:
    """(path, is_relative): relative to `base` (the cwd) with "/" separators when
    the file lies under it, so CI links resolve inside the repository; else as is."""
    base = (base or Path.cwd()).resolve()
    p = Path(file)
    if not p.is_absolute():
        return p.as_posix(), True
    try:
        return p.resolve().relative_to(base).as_posix(), True
    except ValueError:
        return file, False


def _artifact(file: str, base: Path | None) -> dict[str, Any]:
    path, relative = display_path(file, base)
    loc: dict[str, Any] = {"uri": quote(path, safe="/:@!$&'()*+,;=")}  # a URI: spaces and % escaped
    if relative:
        loc["uriBaseId"] = SRCROOT
    return loc


def _rule(k: Any) -> dict[str, Any]:
    return {
        "id": k.id,
        "name": "".join(w.capitalize() for w in k.id.split("-")),
        "shortDescription": {"text": k.title},
        "fullDescription": {"text": k.explanation},
        "help": {"text": k.fix},
        "defaultConfiguration": {"level": LEVELS.get(k.severity, "warning")},
        "properties": {"tags": ["quantization", "correctness"], "severity": k.severity},
    }


def _fingerprint(*parts: str) -> str:
    """A stable id of a finding across runs, so code scanning tracks one alert,
    not a new one each time line numbers move."""
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


def render_sarif(
    reports: Report | Iterable[Report],
    artifacts: Mapping[str, str | Path] | None = None,
    base: Path | None = None,
) -> dict[str, Any]:
    """The SARIF 2.1.0 log of `reports` (a JSON-ready dict).

    `artifacts` maps a report name to the program file it came from: findings
    without a source line are located there. `base` is the directory paths are
    made relative to (default: the cwd, which is the repository root in CI).
    """

    rs = as_reports(reports)
    artifacts = artifacts or {}
    base_dir = (base or Path.cwd()).resolve()
    rules = [_rule(k) for k in KINDS.values()]
    index = {r["id"]: i for i, r in enumerate(rules)}
    results: list[dict[str, Any]] = []
    for r in rs:
        program = artifacts.get(r.name)
        for f in r.findings:
            physical: dict[str, Any] | None = None
            src = split_source(f.source)
            if src is not None:
                physical = {"artifactLocation": _artifact(src[0], base_dir), "region": {"startLine": src[1]}}
            elif program is not None:
                physical = {"artifactLocation": _artifact(str(program), base_dir)}
            elif r.name:
                physical = {"artifactLocation": _artifact(r.name, base_dir)}
            location: dict[str, Any] = {}
            if physical is not None:
                location["physicalLocation"] = physical
            location["logicalLocations"] = [
                {"name": f.node, "fullyQualifiedName": f"{r.name}::{f.node}", "kind": "member"}
            ]
            result: dict[str, Any] = {
                "ruleId": f.kind,
                "level": LEVELS.get(f.severity, "warning"),
                "message": {"text": f.message},
                "locations": [location],
                "partialFingerprints": {"qflowFinding/v1": _fingerprint(r.name, f.kind, f.node)},
                "properties": {
                    "produced": f.produced,
                    "expected": f.expected,
                    "status": f.status,
                    "module": f.module,
                    "program": r.name,
                    "form": r.form,
                },
            }
            if f.kind in index:
                result["ruleIndex"] = index[f.kind]
            if f.edge:
                result["properties"]["edge"] = list(f.edge)
            if f.fix:
                result["properties"]["fix"] = f.fix
            results.append(result)
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "qflow",
                "version": __version__,
                "semanticVersion": __version__,
                "rules": rules,
            }
        },
        "originalUriBaseIds": {SRCROOT: {"uri": base_dir.as_uri().rstrip("/") + "/"}},
        "results": results,
        "columnKind": "unicodeCodePoints",
        "properties": {
            "reports": [
                {
                    "name": r.name,
                    "form": r.form,
                    "proved": r.proved,
                    "status": r.status,
                    "obligations": dict(r.obligations),
                }
                for r in rs
            ]
        },
    }
    return {"$schema": SARIF_SCHEMA_URI, "version": SARIF_VERSION, "runs": [run]}
