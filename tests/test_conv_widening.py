"""The int16 conv results the Arm backend reads unclamped (soundness campaign case 00110-arm-a16w8).

With the stock a16w8 config, RewriteConvPass feeds an op computed on int32 (sub, add, sum, …) from
a conv's INT48 accumulator rescaled straight to int32: the int16 requant the program declares
after the conv — its rounding and its clamp — never happens there. On an input inside the input's
domain whose conv result leaves its range the TOSA reference model is far off the fake-quantized
model; the same inputs through a conv → relu → sub (the relu fuses into the conv's int16 requant)
are exact. qflow predicts the fork before partitioning and finds it in the TOSA artifact: unproven,
never proved — and an error, with its bound, where it proves the clamp moves an output. Which
consumers fork is measured here against the flatbuffer, not assumed.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from executorch.backends.arm.quantizer import get_symmetric_a16w8_quantization_config
from executorch.exir.lowered_backend_module import LoweredBackendModule

import qflow
from qflow.targets.arm import pipeline as arm
from qflow.targets.arm import tosa_flatbuffer
from qflow.targets.arm.tosa_artifact import analyze_artifact

SPEC = "TOSA-1.0+INT+int16"
FORKED = ("sub", "permute-sub", "mean", "mul", "add-sub")
_ACCUMULATORS = {"CONV2D", "DEPTHWISE_CONV2D", "TRANSPOSE_CONV2D", "CONV3D"}


class ConvThen(torch.nn.Module):
    """A 3x3 conv (or conv1d), then `then`."""

    def __init__(self, then: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.then = then
        self.conv = torch.nn.Conv1d(8, 8, 3, padding=1) if then == "conv1d-sub" else torch.nn.Conv2d(8, 8, 3, padding=1)
        self.k = torch.rand(1, 8, 1, 1) - 0.5
        self.m = torch.rand(1, 8, 4, 6) + 0.5  # not per channel: FoldScalarMulIntoConvPass leaves it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.then == "conv1d-sub":
            return self.conv(x.reshape(1, 8, 24)) - 0.3
        y = self.conv(x)
        if self.then == "sub":
            return y - self.k
        if self.then == "permute-sub":
            return y.permute(0, 2, 3, 1) - 0.3
        if self.then == "mean":
            return y.mean(dim=(2, 3), keepdim=True)
        if self.then == "mul":
            return y * self.m
        if self.then == "add-sub":
            return (y + x) - 0.3
        return torch.relu(y) - self.k  # "relu-sub": the relu fuses into the conv's requant


def _build(then: str) -> dict[str, Any]:
    model = ConvThen(then).eval().requires_grad_(False)
    sample = (torch.rand(1, 8, 4, 6) * 0.5 - 0.25,)
    config = get_symmetric_a16w8_quantization_config(is_per_channel=True)
    converted = arm.quantize(model, sample, spec=SPEC, config=config)
    exported = torch.export.export(converted, sample, strict=True)
    lowered = arm.lower(exported, sample, spec=SPEC)
    children = lowered.exported_program().graph_module.named_children()
    (delegate,) = [m for _, m in children if isinstance(m, LoweredBackendModule)]
    prog = tosa_flatbuffer.read(delegate.processed_bytes)
    made = {o: op for op in prog.ops for o in op.outputs}
    forks = [
        op.index
        for op in prog.ops
        if op.op == "RESCALE"
        and prog.tensors[op.outputs[0]].dtype == "INT32"
        and getattr(made.get(op.inputs[0]), "op", None) in _ACCUMULATORS
    ]
    # The inputs that drive one output channel of the conv to an end of its reach: the 3x3 window
    # of output position (1, 1) at the end of the input's domain (the stock a16w8 config fixes every
    # int16 domain at scale 2^-12: [-8, 8)) each weight asks for — what qflow's proof reasons about.
    lsb = None  # measured where the tests hold it against something: the forked sub and its relu control
    if then in ("sub", "relu-sub"):
        out_scale = float([n for n in converted.graph.nodes if "quantize_per_tensor" in str(n.target)][-1].args[1])
        lsb = 0.0
        for ch in range(8):
            for end in (1.0, -1.0):
                x = torch.zeros(1, 8, 4, 6)
                x[0, :, 0:3, 0:3] = torch.where(model.conv.weight[ch] * end > 0, 7.99, -7.99)
                fq = converted(x)
                tosa = arm.run_tosa_reference(lowered, (x,))[0].reshape(fq.shape)
                lsb = max(lsb, float((tosa - fq).abs().max()) / out_scale)
    return {
        "exported": exported,
        "lowered": lowered,
        "forks": forks,
        "lsb": lsb,
    }


@pytest.fixture(scope="module")
def built() -> Any:
    return functools.cache(_build)


@pytest.fixture(params=["sub", "permute-sub", "mean", "mul", "add-sub", "relu-sub", "conv1d-sub"])
def program(request: pytest.FixtureRequest, built: Any) -> tuple[str, dict[str, Any]]:
    return request.param, built(request.param)


def _widened(report: Any) -> list[str]:
    kinds = ("skipped-requant", "skipped-clamp")
    return sorted(f.node for f in report.findings if f.kind in kinds and "RewriteConvPass" in f.message)


def test_the_prediction_is_what_the_backend_emits(program) -> None:
    then, p = program
    forked = then in FORKED
    assert bool(p["forks"]) == forked, p["forks"]  # the flatbuffer: CONV2D (int48) → RESCALE (int32)
    assert bool(_widened(qflow.analyze(p["exported"], target="arm-tosa"))) == forked
    assert bool(_widened(analyze_artifact(p["lowered"]))) == forked


def test_the_annotated_graph_predicts_the_same_forks(program) -> None:
    """Before calibration the fork is a fact of the dtypes: the annotated graph is unproven at the same
    consumers, where it used to be proved."""
    then, p = program
    model, sample = ConvThen(then).eval(), (torch.rand(1, 8, 4, 6) * 0.5 - 0.25,)
    quantizer = arm.default_quantizer(SPEC, get_symmetric_a16w8_quantization_config(is_per_channel=True))
    annotated = quantizer.annotate(quantizer.transform_for_annotation(arm.export_module(model, sample)))
    report = qflow.analyze(annotated, target="arm-tosa")
    assert report.form == "annotated"
    assert bool(_widened(report)) == bool(p["forks"]), report.findings
    assert not report.proved or not p["forks"]


def test_a_forked_conv_is_unproven_never_proved(program) -> None:
    then, p = program
    before = qflow.analyze(p["exported"], target="arm-tosa")
    artifact = analyze_artifact(p["lowered"])
    if then in FORKED:
        assert artifact.status == "unproven" and not artifact.errors
        assert before.status == ("violated" if then == "sub" else "unproven")
        assert any("INT48 accumulator" in f.message for f in before.findings)
    else:  # (conv1d stays unproven before partitioning for another reason: its int16 lowering is unmeasured)
        assert not [f for f in before.findings if f.kind == "skipped-requant"]
        assert before.status == "proved" or then == "conv1d-sub", before.findings
        # the artifact alone cannot weigh what follows the conv's 16-bit-multiplier RESCALE; with the program's
        # graph (the lowered program, the artifact its evidence) it is proved
        assert artifact.status == "unproven" and {f.kind for f in artifact.findings} == {"rounded-twice"}
        lowered = qflow.analyze(p["lowered"], target="arm-tosa")
        assert lowered.proved, str(lowered)


def test_the_skipped_clamp_moves_the_output(program) -> None:
    """Measured on the TOSA reference model with the inputs that drive the conv past its range:
    where qflow proves the clamp matters (an error, with its bound), the measured error is the bound."""
    then, p = program
    found = [f for f in qflow.analyze(p["exported"], target="arm-tosa").findings if f.kind == "skipped-clamp"]
    if then == "sub":
        assert p["lsb"] > 100, p["lsb"]  # measured 2026-11-26: 3444 output LSB
        (f,) = found
        assert f.severity == "error" and f.bound_lsb is not None
        assert p["lsb"] - 2 <= f.bound_lsb <= p["lsb"] + 2, (f.bound_lsb, p["lsb"])
    else:
        assert not found
    if then == "relu-sub":
        assert p["lsb"] <= 1, p["lsb"]  # the int16 requant clamps the conv: the same inputs are exact


def test_a_fused_pair_is_found_through_the_layout_transpose(built) -> None:
    """conv → add → sub: the sub reads the add's int32 result through the TRANSPOSE the layout
    needs (FuseConsecutiveRescalesPass removed the rescale pair: every a16w8 scale is 2^-12)."""
    p = built("add-sub")
    found = [f.message for f in analyze_artifact(p["lowered"]).findings if f.kind == "skipped-requant"]
    assert any("SUB" in m and "int32 result of ADD" in m and "FuseConsecutiveRescalesPass" in m for m in found), found
    assert any("ADD" in m and "RewriteConvPass" in m for m in found), found
