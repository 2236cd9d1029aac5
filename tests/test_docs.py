"""Docs that cannot drift: every sample marked `docs-test` in README.md and docs/ is run.

Markers, an HTML comment on the line before a fenced block:
* `<!-- docs-test: run -->` before a ```python block: it runs (in a scratch directory, after the
  page's earlier samples; `qflow/examples/` names the package's bundled programs) and must exit 0.
* `<!-- docs-test: output of `CMD` -->` before a ```text block: CMD (a `qflow` command) prints
  exactly the block.
* `<!-- docs-test: json of `CMD` -->` before a ```json block: every field the block shows is in
  CMD's JSON with the same value (floats to 4 significant digits, `"..."` for any text).
The site itself builds with warnings as errors (`mkdocs build --strict`).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKER = re.compile(r"<!-- docs-test: (run|output of `([^`]+)`|json of `([^`]+)`) -->\n```(\w+)\n(.*?)\n```", re.S)


def _samples(page: Path) -> list[tuple[str, str | None, str]]:
    """(kind, command, body) of each marked sample, in page order."""
    out = []
    for m in MARKER.finditer(page.read_text(encoding="utf-8")):
        kind = m.group(1).split(" ", 1)[0]
        out.append((kind, m.group(2) or m.group(3), m.group(5)))
    return out


MARKED = [p for p in PAGES if _samples(p)]


def _here(text: str) -> str:
    """`text` with the samples' `qflow/examples/` pointing at the bundled programs."""
    return text.replace("qflow/examples/", f"{ROOT / 'qflow' / 'examples'}/")


def _command(cmd: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(_here(cmd))
    assert argv[0] == "qflow", f"a docs-test command runs qflow, not {argv[0]}"
    return subprocess.run([sys.executable, "-m", "qflow", *argv[1:]], cwd=cwd, capture_output=True, text=True)


def _same(shown: Any, real: Any, where: str = "$") -> None:
    if shown == "...":
        return
    if isinstance(shown, dict):
        assert isinstance(real, dict), where
        for k, v in shown.items():
            assert k in real, f"{where}.{k} is shown but not in the output"
            _same(v, real[k], f"{where}.{k}")
    elif isinstance(shown, list):
        assert isinstance(real, list) and len(shown) <= len(real), where
        for i, (a, b) in enumerate(zip(shown, real, strict=False)):
            _same(a, b, f"{where}[{i}]")
    elif isinstance(shown, float) and isinstance(real, float):
        assert math.isclose(shown, real, rel_tol=1e-4), f"{where}: {shown} vs {real}"
    else:
        assert shown == real, f"{where}: shown {shown!r}, printed {real!r}"


@pytest.mark.parametrize("page", MARKED, ids=[str(p.relative_to(ROOT)) for p in MARKED])
def test_the_samples_of_a_page_are_what_qflow_does(page: Path, tmp_path: Path) -> None:
    cwd = tmp_path
    for i, (kind, cmd, body) in enumerate(_samples(page)):
        where = f"{page.name} sample {i + 1} ({kind})"
        if kind == "run":
            done = subprocess.run([sys.executable, "-c", _here(body)], cwd=cwd, capture_output=True, text=True)
            assert done.returncode == 0, f"{where} failed:\n{done.stderr[-3000:]}"
        elif kind == "output":
            assert cmd is not None
            printed = _command(cmd, cwd).stdout.rstrip()
            assert printed == body.rstrip(), f"{where}: `{cmd}` printed\n{printed}"
        else:
            assert cmd is not None
            _same(json.loads(body), json.loads(_command(cmd, cwd).stdout), where)


def test_readme_is_a_front_page() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_every_finding_kind_is_in_the_reference() -> None:
    """The kinds are a public contract: each one the code can emit has its row, with its severity."""
    from qflow.report.kinds import KINDS

    page = (ROOT / "docs" / "reference" / "kinds.md").read_text()
    missing = [k for k, spec in KINDS.items() if f"| `{k}` | {spec.severity}" not in page]
    assert not missing, missing
