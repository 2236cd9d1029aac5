"""The real `qflow` command, run in-process on the bundled examples (torch
loads once per test process; each .pt2 loads in a fraction of a second)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from builder import A, C, G, seed000_folded

from qflow.analysis import analyze_graph
from qflow.cli import FORMATS, bundled_examples, fails, main
from qflow.report import Finding, Report

EXAMPLES = Path(__file__).resolve().parents[1] / "qflow" / "examples"
FAILING = str(EXAMPLES / "seed000_cat_requant.pt2")
CONTROL = str(EXAMPLES / "seed000_control.pt2")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_bundled_examples_exist() -> None:
    assert [p.name for p in bundled_examples()] == ["seed000_cat_requant.pt2", "seed000_control.pt2"]


def test_check_bundled_examples_fails_with_the_seed_finding(capsys) -> None:
    rc, out, err = run(capsys, "check")
    assert rc == 1
    assert "requant-after-passthrough" in out and "PROVED" in out
    assert "seed000_control.pt2: PROVED" in out
    assert "[1/2] seed000_cat_requant.pt2" in err and "[2/2] seed000_control.pt2" in err


def _parse(fmt: str, text: str) -> object:
    if fmt in ("json", "sarif"):
        return json.loads(text)
    if fmt == "junit":
        return ET.fromstring(text)
    return text


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_on_the_bundled_examples(capsys, fmt) -> None:
    rc, out, _ = run(capsys, "check", "--format", fmt)
    assert rc == 1
    doc = _parse(fmt, out)
    if fmt == "json":
        assert [r["proved"] for r in doc] == [False, True]
    elif fmt == "sarif":
        [res] = doc["runs"][0]["results"]
        assert res["ruleId"] == "requant-after-passthrough"
        assert res["locations"][0]["physicalLocation"]["region"]["startLine"] > 0
    elif fmt == "junit":
        assert doc.get("failures") == "1" and len(doc.findall("testsuite")) == 2
    elif fmt == "markdown":
        assert "| seed000_cat_requant.pt2 | qdq | ❌ NOT PROVED |" in doc
    else:
        assert "requant-after-passthrough" in doc


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_on_the_control_alone_exits_0(capsys, fmt) -> None:
    rc, out, err = run(capsys, "check", CONTROL, "--format", fmt)
    assert rc == 0
    assert "[1/" not in err  # no progress for a single program
    doc = _parse(fmt, out)
    if fmt == "json":
        assert doc["proved"] is True and doc["findings"] == []
    elif fmt == "sarif":
        assert doc["runs"][0]["results"] == []
    elif fmt == "junit":
        assert doc.get("failures") == "0"


@pytest.mark.parametrize("fmt", ["sarif", "junit", "markdown"])
def test_output_writes_the_file_and_summarises_on_stderr(capsys, tmp_path, fmt) -> None:
    dest = tmp_path / f"report.{fmt}"
    rc, out, err = run(capsys, "check", "--format", fmt, "--output", str(dest))
    assert rc == 1 and out == ""
    assert dest.is_file() and _parse(fmt, dest.read_text(encoding="utf-8")) is not None
    assert "2 program(s) checked, 1 not proved (1 error)" in err and str(dest) in err


def test_sarif_from_the_cli_locates_findings_and_validates(capsys, tmp_path) -> None:
    import jsonschema

    schema = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
    dest = tmp_path / "qflow.sarif"
    assert run(capsys, "check", FAILING, "--format", "sarif", "-o", str(dest))[0] == 1
    log = json.loads(dest.read_text(encoding="utf-8"))
    jsonschema.validate(log, schema)
    for res in log["runs"][0]["results"]:
        assert res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]


def test_fail_on_never_exits_0_on_the_failing_example(capsys) -> None:
    rc, out, _ = run(capsys, "check", FAILING, "--fail-on", "never")
    assert rc == 0 and "NOT PROVED" in out


def test_fail_on_error_fails_on_a_violation(capsys) -> None:
    assert run(capsys, "check", FAILING, "--fail-on", "error")[0] == 1
    assert run(capsys, "check", CONTROL, "--fail-on", "error")[0] == 0


def test_missing_file_is_bad_input(capsys, tmp_path) -> None:
    rc, _, err = run(capsys, "check", str(tmp_path / "nope.pt2"))
    assert rc == 2 and "no such file" in err
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"not a zip")
    assert run(capsys, "check", str(bad), "--fail-on", "never")[0] == 2


def test_unwritable_output_is_bad_input(capsys, tmp_path) -> None:
    rc, _, err = run(capsys, "check", CONTROL, "--output", str(tmp_path / "no" / "such" / "dir" / "r.txt"))
    assert rc == 2 and "cannot write" in err


def test_explain(capsys) -> None:
    rc, out, _ = run(capsys, "explain", "passthrough-domain-change")
    assert rc == 0 and out.startswith("passthrough-domain-change (error)") and "Fix:" in out
    rc, _, err = run(capsys, "explain", "no-such-kind")
    assert rc == 2 and "unknown finding kind" in err


def test_repair_then_check_proves(capsys, tmp_path) -> None:
    out_path = tmp_path / "fixed.pt2"
    rc, out, _ = run(capsys, "repair", FAILING, str(out_path))
    assert rc == 0 and "1 requant(s) inserted" in out and "PROVED" in out
    assert out_path.is_file()
    rc, out, _ = run(capsys, "check", str(out_path))
    assert rc == 0 and "fixed.pt2: PROVED" in out


def test_repair_of_a_proved_program_saves_it_unchanged(capsys, tmp_path) -> None:
    rc, out, _ = run(capsys, "repair", CONTROL, str(tmp_path / "same.pt2"))
    assert rc == 0 and "already proved" in out
    assert run(capsys, "check", str(tmp_path / "same.pt2"))[0] == 0


def test_repair_that_does_not_prove_exits_1_and_writes_nothing(capsys, tmp_path, monkeypatch) -> None:
    import qflow.api
    from qflow.errors import ProofError

    def unrepairable(obj, form=None, objective="count"):
        raise ProofError(Report(proved=False, findings=[], obligations={"unproven": 1}, name="x"))

    monkeypatch.setattr(qflow.api, "repair", unrepairable)
    rc, _, err = run(capsys, "repair", FAILING, str(tmp_path / "out.pt2"))
    assert rc == 1 and "cannot repair" in err
    assert not (tmp_path / "out.pt2").exists()


def test_repair_bad_input(capsys, tmp_path) -> None:
    assert run(capsys, "repair", str(tmp_path / "nope.pt2"), str(tmp_path / "out.pt2"))[0] == 2
    assert not (tmp_path / "out.pt2").exists()


def test_help_texts_are_complete(capsys) -> None:
    for argv in (["--help"], ["check", "--help"], ["repair", "--help"], ["explain", "--help"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 0
        out = capsys.readouterr().out
        assert "Exit" in out or argv == ["explain", "--help"]
    main_help = _help(capsys, [])
    assert all(c in main_help for c in ("check", "repair", "explain"))
    check_help = _help(capsys, ["check"])
    for flag in ("--format", "--output", "--fail-on", "--form", "--arm", *FORMATS):
        assert flag in check_help


def _help(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return capsys.readouterr().out


# -- --fail-on semantics (torch-free) -------------------------------------------------------------


def _reports() -> list[Report]:
    """A spread of real analyzer reports: proved, violated, unproven, both."""
    out = []
    g = G()
    g.fact("mul", A)
    g.passthrough("cat", "mul", claim=A)
    g.use("cat", "add", A)
    out.append(analyze_graph(g.dg))
    g = seed000_folded()
    out.append(analyze_graph(g.dg))
    g = G()
    g.fact("conv", A)
    g.free("mystery", blocking=True)
    g.dg.add_use("conv", "mystery", "args[0]")
    g.use("mystery", "linear", A)
    out.append(analyze_graph(g.dg))
    g = G()
    g.fact("conv", A)
    g.free("mystery", blocking=True)
    g.dg.add_use("conv", "mystery", "args[0]")
    g.use("mystery", "linear", A)
    g.fact("a", A)
    g.use("a", "b", C)
    out.append(analyze_graph(g.dg))
    return out


def test_default_fail_on_warning_is_exactly_not_proved() -> None:
    reports = _reports()
    assert [r.proved for r in reports] == [True, False, False, False]
    for r in reports:
        assert fails(r, "warning") == (not r.proved)
        assert not fails(r, "never")


def test_fail_on_error_ignores_unproven_but_not_violations() -> None:
    proved, violated, unproven, both = _reports()
    assert [fails(r, "error") for r in (proved, violated, unproven, both)] == [False, True, False, True]
    warn = Report(proved=True, findings=[Finding("unknown-op", "x", "warning", "m")], obligations={"proved": 1})
    assert fails(warn, "warning") and not fails(warn, "error")
    info = Report(proved=True, findings=[Finding("unknown-op", "x", "info", "m")], obligations={"proved": 1})
    assert not fails(info, "warning")
