"""JUnit XML: CI systems that show test results (GitLab, Jenkins, Azure, the
GitHub test-report actions) show qflow's findings as failing tests.

Shape (the Jenkins/Surefire junit-10.xsd): a <testsuites> root, one
<testsuite> per report, one <testcase> per finding (classname = kind,
name = node); errors and warnings are <failure>s. A report with no failing
finding gets one "obligations" testcase with the counts, which fails only if
the report is nonetheless not proved, so the XML never passes what the exit
code fails.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable

from qflow.report.model import Finding, Report
from qflow.report.sarif import as_reports
from qflow.report.text import render_finding

FAILING = ("error", "warning")


def _counts(r: Report) -> str:
    ob = r.obligations
    proved, violated, unproven = (ob.get(k, 0) for k in ("proved", "violated", "unproven"))
    return f"{proved} proved, {violated} violated, {unproven} unproven obligations"


def _seconds(r: Report) -> float:
    return sum(float(v) for k, v in r.stats.items() if k.endswith("_s"))


def _testcase(suite: ET.Element, f: Finding) -> bool:
    """Append the testcase of one finding; True when it fails."""
    case = ET.SubElement(suite, "testcase", classname=f.kind, name=f.node)
    if f.severity in FAILING:
        fail = ET.SubElement(case, "failure", message=f.message, type=f"{f.kind} ({f.severity}, {f.status})")
        fail.text = render_finding(f)
        return True
    out = ET.SubElement(case, "system-out")
    out.text = render_finding(f)
    return False


def _suite(root: ET.Element, r: Report) -> tuple[int, int]:
    suite = ET.SubElement(root, "testsuite", name=r.name or r.form)
    props = ET.SubElement(suite, "properties")
    facts = [("form", r.form), ("proved", str(r.proved).lower()), ("status", r.status)]
    facts += [(f"obligations.{k}", v) for k, v in r.obligations.items()]
    for k, v in facts:
        ET.SubElement(props, "property", name=k, value=str(v))
    failures = sum(_testcase(suite, f) for f in r.findings)
    tests = len(r.findings)
    if not failures:
        case = ET.SubElement(suite, "testcase", classname="qflow", name="obligations")
        if r.proved:
            ET.SubElement(case, "system-out").text = _counts(r)
        else:
            what = "nothing quantized" if r.status == "nothing-quantized" else "not proved"
            ET.SubElement(case, "failure", message=f"{what}: {_counts(r)}", type="not-proved").text = _counts(r)
            failures = 1
        tests += 1
    for note in r.notes:
        ET.SubElement(suite, "system-out").text = f"note: {note}"
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", "0")
    suite.set("time", f"{_seconds(r):.3f}")
    return tests, failures


def render_junit(reports: Report | Iterable[Report]) -> str:
    """The JUnit XML text of `reports` (UTF-8, with an XML declaration)."""
    rs = as_reports(reports)
    root = ET.Element("testsuites", name="qflow")
    tests = failures = 0
    for r in rs:
        t, f = _suite(root, r)
        tests, failures = tests + t, failures + f
    root.set("tests", str(tests))
    root.set("failures", str(failures))
    root.set("errors", "0")
    root.set("time", f"{sum(_seconds(r) for r in rs):.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
