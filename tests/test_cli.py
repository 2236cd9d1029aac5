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

    def unrepairable(*args, **kwargs):
        raise ProofError(Report(proved=False, findings=[], obligations={"unproven": 1}, name="x"))

    monkeypatch.setattr(qflow.api, "repair_with_plan", unrepairable)
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


# -- the first hour: every input a user tries gets a clean answer ----------------------------------


@pytest.fixture(scope="module")
def float_program(tmp_path_factory) -> Path:
    """A real exported program in which nothing is quantized."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.fc(x))

    path = tmp_path_factory.mktemp("float") / "float_model.pt2"
    torch.export.save(torch.export.export(Net(), (torch.randn(2, 4),)), path)
    return path


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_version(capsys) -> None:
    from qflow import __version__

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"qflow {__version__}"


def test_arm_spec_that_does_not_parse_is_one_line_exit_2(capsys) -> None:
    rc, out, err = run(capsys, "check", "--arm", "BOGUS", FAILING)
    assert rc == 2 and out == ""
    assert "--arm BOGUS: not a TOSA specification" in one_line(err)


def test_arm_spec_without_int_on_a_quantized_program_is_refused(capsys) -> None:
    rc, out, err = run(capsys, "check", "--arm", "TOSA-1.0+FP", FAILING)
    assert rc == 2 and "PROVED" not in out
    line = one_line(err)
    assert "without the INT profile cannot lower a quantized program" in line and FAILING in line


def test_arm_spec_with_int_checks_the_folded_partition(capsys) -> None:
    rc, out, _ = run(capsys, "check", "--arm", "TOSA-1.0+INT+int16", FAILING)
    assert rc == 1 and "partition 0 (TOSA-1.0+INT+int16): NOT PROVED (folded graph" in out
    assert "passthrough-domain-change" in out


@pytest.mark.parametrize("where", ["no-such-dir/x.pt2", "."])
def test_repair_to_an_unwritable_out_is_one_line_exit_2(capsys, tmp_path, where) -> None:
    dst = tmp_path / where
    rc, out, err = run(capsys, "repair", FAILING, str(dst))
    assert rc == 2 and out == ""
    line = one_line(err)
    assert "cannot write" in line and ("no such directory" in line or "is a directory" in line)
    assert not (tmp_path / "no-such-dir").exists()


def test_a_program_with_nothing_quantized_is_not_proved(capsys, float_program) -> None:
    rc, out, _ = run(capsys, "check", str(float_program))
    assert rc == 1  # nothing proved: the default --fail-on warning fails it
    assert "float_model.pt2: NOTHING QUANTIZED" in out and "nothing to prove" in out
    assert "PROVED (" not in out
    assert run(capsys, "check", str(float_program), "--fail-on", "error")[0] == 0
    rc, out, _ = run(capsys, "check", str(float_program), "--format", "json")
    doc = json.loads(out)
    assert doc["proved"] is False and any("nothing is quantized" in n for n in doc["notes"])


@pytest.mark.parametrize("form", ["folded", "lowered"])
def test_a_form_the_graph_does_not_have_is_refused_never_proved(capsys, form) -> None:
    rc, out, err = run(capsys, "check", "--form", form, FAILING)
    assert rc == 2 and "PROVED" not in out
    assert f"--form {form}:" in one_line(err)
    rc, out, _ = run(capsys, "check", "--form", "qdq", FAILING)  # the form it has: the finding stands
    assert rc == 1 and "requant-after-passthrough" in out


def test_a_bad_file_among_good_ones_is_reported_in_the_sarif(capsys, tmp_path) -> None:
    import jsonschema

    dest, missing = tmp_path / "out.sarif", tmp_path / "nope.pt2"
    rc, out, err = run(capsys, "check", CONTROL, FAILING, str(missing), "--format", "sarif", "-o", str(dest))
    assert rc == 2 and out == ""
    assert f"qflow: {missing}: no such file" in err and "1 bad input(s)" in err
    log = json.loads(dest.read_text(encoding="utf-8"))
    schema = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
    jsonschema.validate(log, schema)
    run_ = log["runs"][0]
    assert [r["ruleId"] for r in run_["results"]] == ["requant-after-passthrough"]
    assert [r["name"] for r in run_["properties"]["reports"]] == ["seed000_control.pt2", "seed000_cat_requant.pt2"]
    [inv] = run_["invocations"]
    [note] = inv["toolExecutionNotifications"]
    assert (
        inv["executionSuccessful"] is False and note["level"] == "error" and "no such file" in note["message"]["text"]
    )


@pytest.mark.parametrize("fmt", ["json", "junit", "markdown", "text"])
def test_a_bad_file_is_reported_in_every_format(capsys, tmp_path, fmt) -> None:
    dest = tmp_path / f"out.{fmt}"
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"not a zip")
    assert run(capsys, "check", CONTROL, str(bad), "--format", fmt, "-o", str(dest))[0] == 2
    text = dest.read_text(encoding="utf-8")
    assert "not a .pt2 archive" in text and "seed000_control" in text
    if fmt == "json":
        assert [d["schema"] for d in json.loads(text)] == ["qflow.report/1", "qflow.bad-input/1"]
    if fmt == "junit":
        root = ET.fromstring(text)
        assert root.get("errors") == "1" and len(root.findall("testsuite")) == 2


def test_a_directory_checks_the_programs_in_it(capsys, tmp_path) -> None:
    import shutil

    (tmp_path / "models" / "sub").mkdir(parents=True)
    shutil.copy(FAILING, tmp_path / "models" / "sub")
    shutil.copy(CONTROL, tmp_path / "models")
    rc, out, err = run(capsys, "check", str(tmp_path / "models"))
    assert rc == 1 and "seed000_control.pt2: PROVED" in out and "seed000_cat_requant.pt2: NOT PROVED" in out
    assert "[2/2]" in err
    (tmp_path / "empty").mkdir()
    rc, out, err = run(capsys, "check", str(tmp_path / "empty"))
    assert rc == 2 and out == "" and "a directory with no .pt2 or .pte program in it" in one_line(err)


def test_bundled_findings_point_into_the_package_not_the_build_machine(capsys) -> None:
    rc, out, _ = run(capsys, "check", FAILING, "--format", "json")
    [finding] = json.loads(out)["findings"]
    file, line = finding["source"].rsplit(":", 1)
    assert file == "qflow/examples/models.py"
    source = (EXAMPLES / "models.py").read_text(encoding="utf-8").splitlines()[int(line) - 1]
    assert "torch.cat" in source
    rc, out, _ = run(capsys, "check", FAILING, "--format", "sarif")
    [res] = json.loads(out)["runs"][0]["results"]
    assert res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "qflow/examples/models.py"


def test_demo_exits_0_when_it_finds_exactly_the_expected_violation(capsys, monkeypatch) -> None:
    rc, out, _ = run(capsys, "demo")
    assert rc == 0 and "requant-after-passthrough" in out and "qflow demo: as expected" in out
    import qflow.cli

    monkeypatch.setattr(qflow.cli, "bundled_examples", lambda: [Path(CONTROL)])  # a broken install
    rc, _, err = run(capsys, "demo")
    assert rc == 1 and "UNEXPECTED" in err


def test_stderr_is_quiet_unless_something_is_wrong() -> None:
    """A real process, as a user runs it: loading a program (and the Arm backend) prints nothing on stderr."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(EXAMPLES.parents[1])}
    for argv in (["check", CONTROL], ["check", "--arm", "TOSA-1.0+INT+int16", CONTROL]):
        p = subprocess.run([sys.executable, "-m", "qflow", *argv], capture_output=True, text=True, env=env, timeout=600)
        assert p.returncode == 0, p.stderr
        assert p.stderr == "", p.stderr
        assert "PROVED" in p.stdout


def test_a_finding_without_a_producer_domain_says_so() -> None:
    from qflow.report.text import render_finding

    f = Finding(
        "non-fuseable-activation",
        "relu",
        "error",
        "m",
        expected={"dtype": "int8", "scale": 0.1, "zero_point": -7, "qmin": -128, "qmax": 127},
    )
    text = render_finding(f)
    assert "produced: no domain of its own" in text and "?" not in text
