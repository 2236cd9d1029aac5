"""The pytest plugin, exercised with pytester on the bundled real programs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

EXAMPLES = Path(__file__).parent.parent / "qflow" / "examples"


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_plugin_fails_seed000_passes_control_and_writes_reports(pytester, workers) -> None:
    pytester.makepyfile(
        f"""
        def test_seed000(qflow_prove):
            qflow_prove(r"{EXAMPLES / "seed000_cat_requant.pt2"}", name="seed000")

        def test_control(qflow_prove):
            report = qflow_prove(r"{EXAMPLES / "seed000_control.pt2"}", name="control")
            assert report.proved
        """
    )
    out = pytester.mkdir("reports")
    result = pytester.runpytest_subprocess(f"--qflow-report={out}", "-p", "no:cacheprovider", *workers)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*qflow could not prove seed000*", "*requant-after-passthrough*"])
    assert json.loads((out / "seed000.json").read_text())["proved"] is False
    assert json.loads((out / "control.json").read_text())["proved"] is True
    sarif = json.loads((out / "qflow.sarif").read_text())
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["requant-after-passthrough"]
    junit = (out / "qflow-junit.xml").read_text()
    assert "<testsuites" in junit and 'name="seed000"' in junit and 'name="control"' in junit
    assert not (out / "observed").exists() and "qflow observe" not in result.stdout.str()


# An ordinary test file: quantizes and lowers with the real Arm quantizer and
# TOSAPartitioner, and never calls qflow (Probe/ProbeQuantizer are seed 000's
# model and quantizer, plain torch/executorch code).
UNMODIFIED_SUITE = """
import torch
from executorch.backends.arm.quantizer import TOSAQuantizer, get_symmetric_quantization_config
from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
from executorch.exir import EdgeCompileConfig, to_edge, to_edge_transform_and_lower
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from qflow.examples.models import PROBE_INPUT, Probe, ProbeQuantizer

CONFIG = EdgeCompileConfig(_check_ir_validity=False)


def quantized(model, inputs, quantizer):
    gm = torch.export.export(model.eval(), inputs, strict=True).module(check_guards=False)
    prepared = prepare_pt2e(gm, quantizer)
    prepared(*inputs)
    return torch.export.export(convert_pt2e(prepared), inputs, strict=True)


def stock(spec):
    return TOSAQuantizer(TosaCompileSpec(spec)).set_global(get_symmetric_quantization_config())


def test_conv_relu():
    spec = "TOSA-1.0+INT"
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    ep = quantized(model, (torch.randn(1, 3, 8, 8),), stock(spec))
    edge = to_edge_transform_and_lower(ep, partitioner=[TOSAPartitioner(TosaCompileSpec(spec))], compile_config=CONFIG)
    assert "executorch_call_delegate" in str(edge.exported_program().graph)


def test_seed000():
    spec = "TOSA-1.0+INT+int16"
    ep = quantized(Probe(), (PROBE_INPUT.clone(),), ProbeQuantizer(spec))
    to_edge_transform_and_lower(ep, partitioner=[TOSAPartitioner(TosaCompileSpec(spec))], compile_config=CONFIG)


def test_to_edge_then_to_backend():
    spec = "TOSA-1.0+INT"
    ep = quantized(torch.nn.Conv2d(3, 2, 1), (torch.randn(1, 3, 4, 4),), stock(spec))
    to_edge(ep, compile_config=CONFIG).to_backend(TOSAPartitioner(TosaCompileSpec(spec)))


def test_qflow_crash_is_a_note_not_a_failure(monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("qflow blew up")

    monkeypatch.setattr("qflow.api.analyze", boom)
    to_edge_transform_and_lower(torch.export.export(torch.nn.ReLU(), (torch.randn(2),)), compile_config=CONFIG)
"""


def _run_suite(root: Path, *args: str) -> tuple[str, Path]:
    """Run UNMODIFIED_SUITE under --qflow-observe in a fresh directory (a subprocess, as a user would)."""
    root.mkdir()
    (root / "test_observe.py").write_text(UNMODIFIED_SUITE)
    out = root / "reports"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--qflow-observe", f"--qflow-report={out}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([*cmd, *args], cwd=root, env=env, capture_output=True, text=True, timeout=900)
    return proc.stdout, out


@pytest.fixture(scope="module")
def observed_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, Path]]:
    """The unmodified suite observed serially and over two pytest-xdist workers (built once)."""
    base = tmp_path_factory.mktemp("observe")
    return {"serial": _run_suite(base / "serial"), "xdist": _run_suite(base / "xdist", "-n", "2")}


def _observed(out: Path, test: str) -> dict:
    return json.loads((out / "observed" / f"test_observe.py_{test}.json").read_text())


def test_observe_proves_every_lowering_of_an_unmodified_suite(observed_runs) -> None:
    stdout, out = observed_runs["serial"]
    # observing never fails a test: seed 000 miscompiles, qflow crashes, all pass
    assert "4 passed" in stdout, stdout
    pytest.LineMatcher(stdout.splitlines()).fnmatch_lines(
        [
            "*qflow: 4/4 tests lowered 7 programs (lowered 4, partition 3), 4 proved, 0 with nothing quantized;"
            "*1 analysis errors*",
            "*qflow: ERROR test_observe.py::test_seed000::lowered?0? (passed): requant-after-passthrough*",
            "*qflow: analysis error test_observe.py::test_qflow_crash_is_a_note_not_a_failure::lowered?0?*",
        ]
    )

    conv = _observed(out, "test_conv_relu")
    assert conv["outcome"] == "passed" and conv["proved"] is True
    forms = [(p["kind"], p["report"]["form"]) for p in conv["programs"]]
    assert forms == [("lowered", "lowered"), ("partition", "folded")]

    seed = _observed(out, "test_seed000")
    assert seed["proved"] is False
    lowered, partition = seed["programs"]
    assert [(f["kind"], f["node"]) for f in lowered["report"]["findings"] if f["kind"] != "tosa-artifact-mismatch"] == [
        ("requant-after-passthrough", "lowered_module_0/aten_cat_default")
    ]
    # after the fold the requant is gone: cat claims the int16 domain it cannot produce
    assert partition["report"]["proved"] is False
    assert [f["kind"] for f in partition["report"]["findings"]] == ["passthrough-domain-change"]

    backend = _observed(out, "test_to_edge_then_to_backend")
    assert [p["kind"] for p in backend["programs"]] == ["lowered", "partition"] and backend["proved"]

    crash = _observed(out, "test_qflow_crash_is_a_note_not_a_failure")
    assert crash["outcome"] == "passed" and crash["programs"][0]["error"] == "RuntimeError: qflow blew up"

    summary = json.loads((out / "qflow-observe.json").read_text())
    assert summary["programs"] == 7 and summary["analysis_errors"] == 1
    # seed 000: the graph's two findings and three from its TOSA artifact (RESCALE, ADD, the output edge)
    assert summary["obligations"]["violated"] >= 5 and summary["findings"]["error"] == 5
    sarif = json.loads((out / "qflow.sarif").read_text())
    assert sorted(r["ruleId"] for r in sarif["runs"][0]["results"]) == [
        "passthrough-domain-change",
        "requant-after-passthrough",
        *["tosa-artifact-mismatch"] * 3,
    ]


def _summary_line(stdout: str) -> str:
    """The qflow summary line without its timing."""
    (line,) = [ln for ln in stdout.splitlines() if ln.startswith("qflow: ") and "tests lowered" in ln]
    return line.rsplit(";", 1)[0]


def _without_times(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "qflow_seconds"}


def test_xdist_workers_report_what_a_serial_run_reports(observed_runs) -> None:
    serial, serial_out = observed_runs["serial"]
    xdist, xdist_out = observed_runs["xdist"]
    assert "created: 2/2 workers" in xdist and "4 passed" in xdist, xdist
    assert _summary_line(xdist) == _summary_line(serial)
    assert "tests lowered 7 programs" in _summary_line(xdist)
    # the merged session summary: same totals, same error findings (not one worker's share)
    merged, alone = (json.loads((d / "qflow-observe.json").read_text()) for d in (xdist_out, serial_out))
    assert _without_times(merged) == _without_times(alone)
    assert merged["tests"] == 4 and merged["programs"] == 7

    def results(d: Path) -> list[tuple]:
        runs = json.loads((d / "qflow.sarif").read_text())["runs"]
        assert len(runs) == 1
        return [(r["ruleId"], r["message"]["text"], json.dumps(r["locations"])) for r in runs[0]["results"]]

    assert results(xdist_out) == results(serial_out)
    assert len([r for r in results(xdist_out) if r[0] != "tosa-artifact-mismatch"]) == 2
    junit = [(d / "qflow-junit.xml").read_text().count("<testsuite ") for d in (xdist_out, serial_out)]
    assert junit == [6, 6]  # one per analysed program (the crashed one has no report)
    assert sorted(p.name for p in (xdist_out / "observed").iterdir()) == sorted(
        p.name for p in (serial_out / "observed").iterdir()
    )


def test_strict_observe_fails_the_miscompiling_test_and_p_qflow_alone_observes(pytester, monkeypatch) -> None:
    pytester.makepyfile(test_observe=UNMODIFIED_SUITE)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = pytester.runpytest_subprocess(
        "-p", "qflow", "--qflow-strict", "-p", "no:cacheprovider", "-k", "seed000 or conv_relu"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*qflow --qflow-strict: lowered program not proved:*", "*requant-after-passthrough at*", "*FAILED*seed000*"]
    )


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_qflow_check_collects_a_zoo_one_item_per_program(pytester, workers) -> None:
    import shutil

    zoo = pytester.mkdir("zoo")
    (zoo / "nested").mkdir()
    shutil.copy(EXAMPLES / "seed000_cat_requant.pt2", zoo / "seed000_cat_requant.pt2")
    shutil.copy(EXAMPLES / "seed000_control.pt2", zoo / "nested" / "seed000_control.pt2")
    (zoo / "notes.txt").write_text("not a program")
    pytester.makepyfile(test_unrelated="def test_not_collected():\n    assert False\n")
    out = pytester.path / "reports"
    result = pytester.runpytest_subprocess(
        "--qflow-check", str(zoo), f"--qflow-report={out}", "-p", "no:cacheprovider", "-rA", *workers
    )
    # one item per program, nothing else collected (the zoo replaces the default test paths)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*PASSED zoo/nested/seed000_control.pt2::seed000_control.pt2*", "*FAILED zoo/seed000_cat_requant.pt2*"]
    )
    result.stdout.fnmatch_lines(["*qflow could not prove zoo/seed000_cat_requant.pt2*", "*requant-after-passthrough*"])
    assert json.loads((out / "zoo_seed000_cat_requant.pt2.json").read_text())["proved"] is False
    assert json.loads((out / "zoo_nested_seed000_control.pt2.json").read_text())["proved"] is True
    sarif = json.loads((out / "qflow.sarif").read_text())
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["requant-after-passthrough"]
    assert (out / "qflow-junit.xml").read_text().count("<testsuite ") == 2
