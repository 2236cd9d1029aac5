"""The pytest plugin, exercised with pytester on the bundled real programs."""

from __future__ import annotations

import json
from pathlib import Path

pytest_plugins = ["pytester"]

EXAMPLES = Path(__file__).parent.parent / "qflow" / "examples"


def test_plugin_fails_seed000_passes_control_and_writes_reports(pytester) -> None:
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
    result = pytester.runpytest_subprocess(f"--qflow-report={out}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*qflow could not prove seed000*", "*requant-after-passthrough*"])
    assert json.loads((out / "seed000.json").read_text())["proved"] is False
    assert json.loads((out / "control.json").read_text())["proved"] is True
    sarif = json.loads((out / "qflow.sarif").read_text())
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["requant-after-passthrough"]
    assert "<testsuites" in (out / "qflow-junit.xml").read_text()
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


def _observed(out: Path, test: str) -> dict:
    return json.loads((out / "observed" / f"test_observe.py_{test}.json").read_text())


def test_observe_proves_every_lowering_of_an_unmodified_suite(pytester) -> None:
    pytester.makepyfile(test_observe=UNMODIFIED_SUITE)
    out = pytester.mkdir("reports")
    result = pytester.runpytest_subprocess("--qflow-observe", f"--qflow-report={out}", "-p", "no:cacheprovider")
    # observing never fails a test: seed 000 miscompiles, qflow crashes, all pass
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "*qflow: 4/4 tests lowered 7 programs (lowered 4, partition 3), 4 proved;*1 analysis errors*",
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
