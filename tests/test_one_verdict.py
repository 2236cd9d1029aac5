"""One verdict everywhere: the API, the CLI, repair, the pytest plugin and QflowPass read
`Report.status` and agree on a float program, a proved one, a violated one and a .pte
checked without the program it was lowered from."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import torch

import qflow
from qflow.cli import EXIT_NOT_PROVED, EXIT_PROVED, main
from qflow.integrations.executorch import QflowPass
from qflow.report.model import SCHEMA_FILE, STATUSES

pytest_plugins = ["pytester"]

EXAMPLES = Path(qflow.__file__).parent / "examples"
CONTROL = EXAMPLES / "seed000_control.pt2"
VIOLATED = EXAMPLES / "seed000_cat_requant.pt2"


class _Float(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


@pytest.fixture(scope="module")
def programs(built, tmp_path_factory) -> dict[str, Path]:
    """name → a saved program: nothing quantized, proved, violated, and a TOSA .pte alone."""
    root = tmp_path_factory.mktemp("verdict")
    float_pt2 = root / "float_model.pt2"
    torch.export.save(torch.export.export(_Float().eval(), (torch.randn(2, 4),)), float_pt2)
    pte = root / "control.pte"
    pte.write_bytes(copy.deepcopy(built("seed000_control").lowered).to_executorch().buffer)
    return {"float": float_pt2, "proved": CONTROL, "violated": VIOLATED, "pte": pte}


#: What each program is, in every entry point's words.
EXPECTED = {"float": "nothing-quantized", "proved": "proved", "violated": "violated", "pte": "unproven"}
WORDS = {"nothing-quantized": "NOTHING QUANTIZED", "proved": "PROVED"}  # (else NOT PROVED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_api_json_and_cli_give_one_verdict(programs, name, capsys) -> None:
    report = qflow.analyze(programs[name])
    assert report.status == EXPECTED[name] and report.status in STATUSES
    assert report.proved is (EXPECTED[name] == "proved")
    doc = report.to_json()
    assert (doc["status"], doc["proved"]) == (report.status, report.proved)
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))
    rc = main(["check", str(programs[name])])
    out = capsys.readouterr().out
    assert rc == (EXIT_PROVED if report.proved else EXIT_NOT_PROVED)
    assert out.startswith(f"qflow: {programs[name].name}: {WORDS.get(report.status, 'NOT PROVED')} (")
    assert main(["check", str(programs[name]), "--format", "json"]) == rc
    assert json.loads(capsys.readouterr().out)["status"] == report.status


def test_a_float_program_is_not_proved_by_the_api_repair_or_qflowpass(programs) -> None:
    ep = torch.export.load(programs["float"])
    report = qflow.analyze(ep)
    assert not report.proved and report.status == "nothing-quantized"
    assert any("nothing is quantized" in n for n in report.notes)
    assert not report.fails("error") and report.fails("warning")  # (--fail-on error passes it)
    with pytest.raises(qflow.ProofError) as e:
        qflow.repair(ep)
    assert e.value.report.status == "nothing-quantized"
    with pytest.raises(qflow.ProofError) as e:
        QflowPass("check")(ep.graph_module)
    assert e.value.report.status == "nothing-quantized"
    with pytest.raises(qflow.ProofError):  # repair mode has nothing to repair either
        QflowPass("repair")(copy.deepcopy(ep).graph_module)


def test_qflowpass_and_repair_agree_with_the_api_on_quantized_programs(programs) -> None:
    control, violated = (torch.export.load(programs[k]) for k in ("proved", "violated"))
    assert QflowPass("check")(control.graph_module) is not None
    with pytest.raises(qflow.ProofError) as e:
        QflowPass("check")(violated.graph_module)
    assert e.value.report.status == "violated"
    assert qflow.repair(control) is control  # proved: returned unchanged
    assert qflow.analyze(qflow.repair(violated)).status == "proved"


def test_cli_repair_says_nothing_quantized(programs, tmp_path, capsys) -> None:
    rc = main(["repair", str(programs["float"]), str(tmp_path / "fixed.pt2")])
    err = capsys.readouterr().err
    assert rc == EXIT_NOT_PROVED and "cannot repair: nothing is quantized" in err
    assert not (tmp_path / "fixed.pt2").exists()


def test_a_pte_alone_says_what_is_missing_once_naming_its_own_backend(programs, capsys) -> None:
    report = qflow.analyze(programs["pte"])
    assert not report.errors and report.obligations["unproven"] > 1
    assert [(f.kind, f.node) for f in report.findings] == [("reference-needed", "delegate_0")]
    (finding,) = report.findings
    assert finding.targets == {"arm-tosa": "silent miscompile"} and "--reference" in finding.fix
    assert finding.produced is None and finding.expected is None


def test_the_plugin_fails_a_float_program_and_passes_the_control(programs, pytester) -> None:
    zoo = pytester.mkdir("zoo")
    for name in ("float", "proved"):
        (zoo / programs[name].name).write_bytes(programs[name].read_bytes())
    result = pytester.runpytest_subprocess("--qflow-check", str(zoo), "-p", "no:cacheprovider", "-rA")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*FAILED*float_model.pt2*"])


@pytest.mark.parametrize(
    "content",
    [b"", b"PK\x03\x04 truncated", "zip"],
    ids=["empty", "truncated", "not-a-torch-zip"],
)
def test_odd_files_are_one_line_on_stderr_and_exit_2(tmp_path, content) -> None:
    path = tmp_path / "odd.pt2"
    if content == "zip":
        import zipfile

        with zipfile.ZipFile(path, "w") as z:
            z.writestr("a.txt", "not a program")
    else:
        path.write_bytes(content)
    proc = subprocess.run([sys.executable, "-m", "qflow", "check", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith(f"qflow: {path}: ")


def test_the_api_on_the_bundled_examples_prints_nothing_to_stderr() -> None:
    code = f"import qflow\nfor p in ({str(CONTROL)!r}, {str(VIOLATED)!r}):\n    qflow.analyze(p)\n    qflow.repair(p)\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


@torch.library.custom_op("qflow_test::opaque", mutates_args=())
def _opaque(x: torch.Tensor) -> torch.Tensor:
    return (x * 10).round().clamp(-128, 127).to(torch.int8)


@_opaque.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, dtype=torch.int8)


class _Opaque(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.ops.qflow_test.opaque(x).float() / 10)


def test_an_unread_op_is_never_called_nothing_quantized() -> None:
    """No quantization found, but an op qflow cannot read may be the one that quantizes (it
    writes int8 codes, as torchao's quantize_affine did): unproven, not nothing-quantized."""
    report = qflow.analyze(torch.export.export(_Opaque(), (torch.randn(4),)))
    assert report.status == "unproven" and not report.proved, str(report)
    assert any(f.kind == "unknown-op" for f in report.findings)
    assert not any("nothing is quantized" in n for n in report.notes)


def test_a_violation_in_a_program_with_nothing_quantized_is_violated() -> None:
    """A float program can still be wrong (a delegate that reads float bytes as codes): the
    violation decides the verdict, not the absence of quantization."""
    Report = qflow.Report
    report = Report(proved=False, findings=[], obligations={"proved": 0, "violated": 1, "unproven": 0}, quantized=False)
    assert report.status == "violated"
    assert Report(proved=False, findings=[], obligations={"unproven": 1}, quantized=False).status == "unproven"
    assert Report(proved=False, findings=[], obligations={}, quantized=False).status == "nothing-quantized"
