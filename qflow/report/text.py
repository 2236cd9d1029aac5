"""The terminal report: a summary line, then each finding with both domains and the fix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


# The model renders itself with this module (`Report.__str__`), so this module reads
# reports by their shape and imports nothing from the model.
class Finding(Protocol):
    kind: str
    node: str
    severity: str
    message: str
    produced: dict[str, Any] | None
    expected: dict[str, Any] | None
    fix: str
    source: str | None
    targets: dict[str, str] | None


class Report(Protocol):
    name: str
    form: str
    target: str
    notes: list[str]
    obligations: Mapping[str, int]

    @property
    def status(self) -> str: ...

    @property
    def findings(self) -> Sequence[Finding]: ...


#: The verdict's words in the summary line (any other status: NOT PROVED).
VERDICTS = {"proved": "PROVED", "nothing-quantized": "NOTHING QUANTIZED"}


def _domain(d: dict[str, Any] | None) -> str:
    if not d:
        return "?"
    if d.get("dtype", "").startswith("float") and "scale" not in d:
        return d["dtype"]
    scale = d.get("scale")
    if d.get("params") and not scale:  # (scales known at run time only: what holds them)
        s = f"run-time qparams ({d['params']})"
    elif isinstance(scale, list):
        s = f"per-channel(axis={d.get('axis')}, {len(scale)} ch)"
    else:
        s = f"scale={scale:.6g} zp={d.get('zero_point')}"
    real = " (dequantized)" if d.get("real") else ""
    return f"{d['dtype']} {s} [{d.get('qmin')},{d.get('qmax')}]{real}"


def render_finding(f: Finding) -> str:
    lines = [f"{f.severity.upper():7} {f.kind} at {f.node}"]
    lines.append(f"        {f.message}")
    if f.produced or f.expected:  # a side without a domain (e.g. an unfused producer) is said so, not "?"
        lines.append(f"        produced: {_domain(f.produced) if f.produced else 'no domain of its own'}")
        lines.append(f"        expected: {_domain(f.expected) if f.expected else 'no domain declared'}")
    if f.targets and f.severity != "info":
        lines.append("        breaks:   " + "; ".join(f"{t}: {how}" for t, how in f.targets.items()))
    if f.source:
        lines.append(f"        source:   {f.source}")
    if f.fix:
        lines.append(f"        fix:      {f.fix}")
    return "\n".join(lines)


def render_text(r: Report) -> str:
    ob = r.obligations
    verdict = VERDICTS.get(r.status, "NOT PROVED")
    head = (
        f"qflow: {r.name + ': ' if r.name else ''}{verdict} ({r.form} graph, target {r.target}) — "
        f"{ob.get('proved', 0)} proved, {ob.get('violated', 0)} violated, "
        f"{ob.get('unproven', 0)} unproven obligations; "
        f"{len(r.findings)} finding(s)"
    )
    parts = [head]
    parts += [render_finding(f) for f in r.findings]
    parts += [f"note: {n}" for n in r.notes]
    return "\n".join(parts)
