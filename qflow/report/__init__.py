"""Reports: the data model, the finding kinds and every renderer (torch-free)."""

from qflow.report.junit import render_junit
from qflow.report.kinds import KINDS, Kind, kind
from qflow.report.markdown import render_markdown
from qflow.report.model import SCHEMA, Finding, Report
from qflow.report.sarif import render_sarif
from qflow.report.text import render_text

__all__ = [
    "KINDS",
    "SCHEMA",
    "Finding",
    "Kind",
    "Report",
    "kind",
    "render_junit",
    "render_markdown",
    "render_sarif",
    "render_text",
]
