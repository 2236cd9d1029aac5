"""Markdown: a summary sized for a pull-request comment or a CI job summary
($GITHUB_STEP_SUMMARY), with one collapsible block of details per finding."""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from qflow.report.model import Finding, Report
from qflow.report.sarif import as_reports, display_path, split_source
from qflow.report.text import VERDICTS, _domain

#: GitHub caps a comment at 65,536 characters; past this many findings the
#: details are cut (the table still counts every finding).
MAX_DETAILS = 50


def _cell(text: str) -> str:
    """Table cells: a "|" or a newline would end the cell or the row."""
    return html.escape(text, quote=False).replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    """Inline code that survives backticks inside the text."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _counts(findings: list[Finding]) -> str:
    if not findings:
        return "—"
    c = Counter(f.severity for f in findings)
    return ", ".join(f"{c[s]} {s}{'s' if c[s] > 1 else ''}" for s in ("error", "warning", "info") if c[s])


def _source(source: str | None, base: Path | None) -> str | None:
    if not source:
        return None
    src = split_source(source)
    if src is None:
        return source
    return f"{display_path(src[0], base)[0]}:{src[1]}"


def _details(r: Report, f: Finding, base: Path | None) -> list[str]:
    esc = html.escape
    where = f" — {esc(r.name)}" if r.name else ""
    lines = [
        "<details>",
        f"<summary><b>{esc(f.severity)}</b> <code>{esc(f.kind)}</code> at <code>{esc(f.node)}</code>{where}</summary>",
        "",
        f"- **kind:** `{f.kind}` ({f.status})",
        f"- **node:** {_code(f.node)}" + (f" (module {_code(f.module)})" if f.module else ""),
        f"- **severity:** {f.severity}",
    ]
    if f.edge:
        lines.append(f"- **edge:** {_code(' → '.join(f.edge))}")
    src = _source(f.source, base)
    if src:
        lines.append(f"- **source:** {_code(src)}")
    lines += ["", esc(f.message, quote=False), ""]
    if f.produced or f.expected:
        lines += [
            "| | domain |",
            "| --- | --- |",
            f"| produced | {_cell(_domain(f.produced))} |",
            f"| expected | {_cell(_domain(f.expected))} |",
            "",
        ]
    if f.fix:
        lines += [f"**Fix:** {esc(f.fix, quote=False)}", ""]
    lines += ["</details>", ""]
    return lines


def render_markdown(
    reports: Report | Iterable[Report], max_details: int = MAX_DETAILS, base: Path | None = None
) -> str:
    """A summary table (one row per program) and the details of each finding.

    `max_details` bounds the size for PR comments; `base` is the directory
    source paths are shown relative to (default: the cwd).
    """
    rs = as_reports(reports)
    failing = [r for r in rs if not r.proved]
    n = len(rs)
    if not rs:
        head = "no program checked"
    elif failing:
        head = f"{len(failing)} of {n} program{'s' if n > 1 else ''} not proved"
    else:
        head = f"{'all ' if n > 1 else ''}{n} program{'s' if n > 1 else ''} proved"
    lines = [
        f"### qflow: {head}",
        "",
        "| program | form | verdict | proved | violated | unproven | findings |",
        "| --- | --- | --- | ---: | ---: | ---: | --- |",
    ]
    for r in rs:
        ob = r.obligations
        verdict = ("✅ " if r.proved else "❌ ") + VERDICTS.get(r.status, "NOT PROVED")
        lines.append(
            f"| {_cell(r.name or '(unnamed)')} | {_cell(r.form)} | {verdict} | {ob.get('proved', 0)} | "
            f"{ob.get('violated', 0)} | {ob.get('unproven', 0)} | {_counts(r.findings)} |"
        )
    lines.append("")
    pairs = [(r, f) for r in rs for f in r.findings]
    if pairs:
        lines += ["#### Findings", ""]
        for r, f in pairs[:max_details]:
            lines += _details(r, f, base)
        if len(pairs) > max_details:
            lines += [f"… and {len(pairs) - max_details} more finding(s); see the full report (`--format json`).", ""]
    notes = [(r, note) for r in rs for note in r.notes]
    if notes:
        lines += ["#### Notes", ""]
        lines += [f"- {_cell(r.name) + ': ' if r.name else ''}{html.escape(note, quote=False)}" for r, note in notes]
        lines.append("")
    return "\n".join(lines)
