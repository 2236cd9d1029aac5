"""Sound first (issue #30): an op whose lowering on the target was never measured cannot be
proved there. The smallest miscompile of the transformer campaign: one LayerNorm with Arm's
stock a16w8 config, whose TOSA decomposition is hundreds of int16 LSB off while every domain
in the program is consistent."""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from executorch.backends.arm.quantizer import get_symmetric_a16w8_quantization_config

import qflow
from qflow import targets
from qflow.targets.arm import pipeline as arm

INT16 = "TOSA-1.0+INT+int16"
CAMPAIGN = Path(__file__).resolve().parent.parent / "benchmarks" / "soundness"


class Norm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


@pytest.fixture(scope="module")
def layer_norm_a16w8():
    """(converted program, its export, inputs) of one LayerNorm over inputs in [-1, -0.5]."""
    torch.manual_seed(0)
    model = Norm().eval()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
        model.norm.bias.uniform_(-0.2, 0.2)
    inputs = (torch.rand(1, 4, 16) * 0.5 - 1.0,)
    converted = arm.quantize(model, inputs, spec=INT16, config=get_symmetric_a16w8_quantization_config())
    return converted, torch.export.export(converted, inputs), inputs


def _output_scale(converted: torch.fx.GraphModule) -> float:
    """The scale of the program's last dequantize (its output's)."""
    return next(
        float(n.args[1]) for n in reversed(list(converted.graph.nodes)) if "dequantize_per_tensor" in str(n.target)
    )


def test_the_int16_layer_norm_miscompiles_on_the_tosa_reference_model(layer_norm_a16w8) -> None:
    """The ground truth the verdict below answers to, measured, not assumed."""
    converted, exported, inputs = layer_norm_a16w8
    want = converted(*inputs)
    got = arm.run_tosa_reference(arm.lower(exported, inputs, spec=INT16), inputs)[0]
    scale = _output_scale(converted)
    assert float((got - want).abs().max()) / scale > 16  # far beyond rounding (measured: hundreds of LSB)


@pytest.mark.parametrize("target", ["arm-tosa", None])
def test_an_unmeasured_lowering_is_unproven_never_proved(layer_norm_a16w8, target) -> None:
    _, exported, _ = layer_norm_a16w8
    report = qflow.analyze(exported, target=target)
    assert report.status == "unproven", str(report)
    found = [f for f in report.findings if f.kind == "unvalidated-lowering"]
    assert found and all(f.status == "unproven" and "arm-tosa" in (f.targets or {}) for f in found)
    # the Arm quantizer decomposes the LayerNorm before annotation: its int16 rsqrt (a TABLE) is
    # the step whose lowering was never measured to compute right (and is 9997 LSB off alone)
    assert any(f.node.startswith("rsqrt") for f in found)
    # the finding says what the contract probe measured there, not "never measured"
    assert "measured it 20 output LSB off" in next(f for f in found if f.node.startswith("rsqrt")).message


def test_the_contract_says_which_lowerings_were_measured() -> None:
    arm_tosa = targets.get("arm-tosa")
    assert not arm_tosa.lowering_validated("layer_norm", "int16")
    assert arm_tosa.lowering_validated("conv2d", "int8")


@pytest.mark.parametrize("target", ["arm-tosa", None])
@pytest.mark.parametrize("copied", [False, True])
def test_the_annotated_form_is_unproven_at_the_same_op(target, copied) -> None:
    """Before prepare_pt2e (no scale exists yet) the verdict is the same: the quantizer marks the
    int16 rsqrt for integer codes, and that lowering was never measured to compute right. Also
    on a deep copy of the annotated graph (its annotations keep the original nodes as keys: the
    transformer campaign's annotated form proved three int16 softmax miscompiles that way)."""
    model = Norm().eval()
    inputs = (torch.rand(1, 4, 16) * 0.5 - 1.0,)
    quantizer = arm.default_quantizer(INT16, config=get_symmetric_a16w8_quantization_config())
    annotated = quantizer.transform_for_annotation(arm.export_module(model, inputs))
    quantizer.annotate(annotated)
    annotated = copy.deepcopy(annotated) if copied else annotated
    report = qflow.analyze(annotated, target=target)
    assert report.form == "annotated" and report.status == "unproven", str(report)
    found = [f for f in report.findings if f.kind == "unvalidated-lowering"]
    assert any(f.node.startswith("rsqrt") and "arm-tosa" in (f.targets or {}) for f in found), str(report)
    assert "int16 activations" in next(f for f in found if f.node.startswith("rsqrt")).message


def test_the_annotated_a8w8_layer_norm_has_no_unmeasured_lowering() -> None:
    """Every op of the int8 decomposition was measured exact: no unvalidated-lowering there. What stays
    open before calibration is which rescale pairs the backend fuses (the calibrated scales decide)."""
    model = Norm().eval()
    inputs = (torch.rand(1, 4, 16) * 0.5 - 1.0,)
    quantizer = arm.default_quantizer()
    annotated = quantizer.transform_for_annotation(arm.export_module(model, inputs))
    quantizer.annotate(annotated)
    report = qflow.analyze(annotated, target="arm-tosa")
    assert {f.kind for f in report.findings} == {"skipped-requant"} and not report.errors, str(report)


def test_the_folded_partition_is_unproven_at_the_same_op(layer_norm_a16w8) -> None:
    """After Arm's fold pass the int16 rsqrt is still an aten op with folded qparams, lowered to a
    TABLE next: the partition is unproven there too (the transformer campaign's folded form
    proved three int16 softmax miscompiles before this check reached it)."""
    _, exported, inputs = layer_norm_a16w8
    with arm.capture_after() as partitions:
        arm.lower(exported, inputs, spec=INT16)
    reports = [qflow.analyze(p, target="arm-tosa") for p in partitions]
    assert reports and all(r.form == "folded" for r in reports)
    found = [f for r in reports for f in r.findings if f.kind == "unvalidated-lowering"]
    assert any("rsqrt" in f.node for f in found), "\n".join(map(str, reports))
    assert not any(r.proved for r in reports)


def test_the_lowered_rsqrt_table_is_an_error_with_its_bound(layer_norm_a16w8) -> None:
    """Every entry of the int16 rsqrt TABLE is the backend generator's, and the TABLE is still far off
    rsqrt between entries near zero, where a LayerNorm's variance can lie: over the codes the program
    reaches there the artifact check finds it thousands of LSB off, an error naming the TOSA op, whose
    joint output bound holds what the TOSA reference model measures (issue #30)."""
    converted, exported, inputs = layer_norm_a16w8
    lowered = arm.lower(exported, inputs, spec=INT16)
    report = qflow.analyze(lowered, target="arm-tosa", reference=exported)
    assert report.status == "violated", str(report)
    found = [f for f in report.findings if f.kind == "table-interpolation"]
    assert len(found) == 1 and found[0].severity == "error" and "TOSA TABLE" in found[0].message, str(report)
    assert "aten_rsqrt_default" in found[0].message and found[0].bound_lsb > 100  # (measured: 4798 at code 64)
    scale = _output_scale(converted)
    measured = float((arm.run_tosa_reference(lowered, inputs)[0] - converted(*inputs)).abs().max()) / scale
    assert 16 < measured <= found[0].output_lsb


class Softmax(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.linear(x), -1)


def test_a_softmax_never_reaches_where_its_int16_tables_are_off() -> None:
    """The a16w8 softmax's exp TABLE is 251 LSB off on positive inputs and its reciprocal's 65022 on
    negative ones, but x - amax(x) is never positive and a row's sum of exps holds exp(0): over the codes
    the program reaches both are under 2.5 LSB (codes at most 2 off), no error — as the TOSA reference
    model measures (within 2 output LSB of the fake-quantized model, inputs three times wider than
    calibration). Not proved either: the row's sum adds up sixteen exps' errors and the reciprocal is steep
    (36.6 output LSB at worst); the reciprocal's own 1.47 LSB stay under the band at the output."""
    torch.manual_seed(0)
    model, inputs = Softmax().eval(), (torch.randn(1, 4, 16),)
    converted = arm.quantize(model, inputs, spec=INT16, config=get_symmetric_a16w8_quantization_config())
    exported = torch.export.export(converted, inputs)
    lowered = arm.lower(exported, inputs, spec=INT16)
    report = qflow.analyze(lowered, target="arm-tosa", reference=exported)
    tables = {f.message.split(" recomputed")[0].rsplit(" ", 1)[-1]: f for f in report.findings
              if f.kind == "table-interpolation"}  # fmt: skip
    exp, reciprocal = tables["aten_exp_default"], tables["aten_reciprocal_default"]
    assert len(tables) == 2 and "under 2.5 LSB there, but what follows moves" in exp.message, str(report)
    assert exp.severity == "warning" and reciprocal.severity == "info", str(report)
    assert not report.errors and report.status == "unproven"  # (int16 exp / reciprocal: unvalidated lowerings)
    scale = _output_scale(converted)
    for seed in range(4):
        torch.manual_seed(seed)
        x = (torch.randn(1, 4, 16) * 3,)
        measured = float((arm.run_tosa_reference(lowered, x)[0] - converted(*x)).abs().max()) / scale
        assert measured <= 2.0, (seed, measured)


def test_the_output_bound_counts_a_table_within_its_band() -> None:
    """Transformer campaign 00469-tx-arm-a16w8 (stock a16w8, a softmax): its reciprocal TABLE is off where the
    program reaches (2.97 LSB, an error) and its exp TABLE within its band there (1.25). qflow bounded the
    outputs at 6 LSB from the reciprocal alone (until 2026-12-03); the input 31 runs of the campaign's seeded
    search for the worst one (`rejudge.py --search`, steered by the backend alone) find is 11 output LSB off
    on the TOSA reference model, 9 beyond the band. The exp's error counts now: it is unproven (the row's sum
    and the reciprocal make it tens of LSB), and the joint bound holds what the backend computes."""
    sys.path.insert(0, str(CAMPAIGN))
    import case
    from gen import generate

    index, full = case.parse_id("00469-tx-arm-a16w8")
    variant = case.base_variant(full)
    converted, samples, tests = case.quantized(variant, generate(index, case.menu_of(full)), index, {})
    exported = torch.export.export(converted, samples[0], strict=True)
    edge, _ = case.lower(variant, copy.deepcopy(exported), tests[0])
    report = qflow.analyze(edge, target="arm-tosa", reference=exported)
    tables = {f.severity: f for f in report.findings if f.kind == "table-interpolation"}
    assert set(tables) == {"error", "warning"} and "what follows moves output" in tables["warning"].message, report
    grids = case.output_grids(converted, tests)

    def compared(x: Any) -> dict[str, Any]:
        with torch.no_grad():
            want = case._as_list(converted(*x))
        return case.compare([case.run_backend(variant, edge, x)], [want], grids)

    start = tests + case.domain_inputs(converted, tests, seed=index)
    worst, _, _ = case.searched_inputs(
        converted, tests, start, lambda x: float(compared(x).get("ratio", math.inf)), seed=index, n=31
    )
    measured = float(compared(worst)["outputs"][0]["lsb"])
    assert measured >= 11, measured  # (the search's input: what the bound must hold)
    assert measured <= tables["error"].output_lsb + 0.5 + 2, (measured, tables["error"].output_lsb)


def test_a_layer_norm_over_one_element_reads_only_the_right_rsqrt_entry() -> None:
    """A LayerNorm over one element (transformer campaign 00953, a false alarm): its variance is x - x
    squared, exactly 0, and the eps beside it, a constant inside the delegate, rounds to code 0 — so its
    rsqrt TABLE, 28552 LSB off between entries near zero, is read at one code, which is right. qflow needs
    both: a difference of one value with itself, and the values of a delegate's constants (read through
    the edge dialect's dequantize). Measured: TOSA equal to the fake-quantized model within 1 LSB."""
    torch.manual_seed(0)
    model = torch.nn.LayerNorm(1).eval()
    inputs = (torch.rand(1, 4, 1) * 0.5 - 1.0,)
    converted = arm.quantize(model, inputs, spec=INT16, config=get_symmetric_a16w8_quantization_config())
    exported = torch.export.export(converted, inputs)
    lowered = arm.lower(exported, inputs, spec=INT16)
    report = qflow.analyze(lowered, target="arm-tosa", reference=exported)
    [rsqrt] = [f for f in report.findings if f.kind == "table-interpolation" and "rsqrt" in f.message]
    assert rsqrt.severity == "info" and "up to 0 output LSB off" in rsqrt.message, str(report)
    assert not report.errors, str(report)
    scale = _output_scale(converted)
    for seed in range(3):
        torch.manual_seed(seed)
        x = (torch.rand(1, 4, 1) * 4 - 2,)
        assert float((arm.run_tosa_reference(lowered, x)[0] - converted(*x)).abs().max()) / scale <= 1.0
