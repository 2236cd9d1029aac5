"""XNNPACK's contract for torchao `quantize_` linears (issue #28), measured on the ExecuTorch
runtime against the quantized eager model, and what qflow says before lowering, on the
lowered program and on the `.pte`.

Measured facts this file asserts (2026-11-25, torch 2.13.0, torchao 0.18.0, executorch 1.5.1):
a dynamically quantized (per-token int8) linear with int8 per-channel weights runs within
float rounding of the eager model; with int4 per-group weights it is off by the bfloat16
rounding of the group scales, which the payload keeps as bf16 — and exact once the eager
model's scales are rounded the same way. A weight-only int4 linear miscomputes:
the delegate computes with the raw codes as float weights (the scales dropped). A weight-only
embedding (`IntxWeightOnlyConfig` on `nn.Embedding`) is not delegated — the partitioner has no
embedding — and `to_executorch` refuses the program (no out variant of torchao's
`dequantize_affine` on the CPU): loud, nothing computed wrong. (With quant fusion, as `export_llm`
emits it, it runs: tests/contracts/test_torchao_embedding.py.)
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.dialects.edge._ops import EdgeOpOverload
from torchao.quantization import quantize_
from torchao.quantization.granularity import PerAxis, PerGroup
from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, IntxWeightOnlyConfig

import qflow
from qflow import targets
from qflow.targets.xnnpack import pipeline as xnnpack

#: float32 accumulation of 64 products, relative to the output's magnitude (fixed, never read
#: from what is measured): far below one activation code's effect on the output (~1e-3 here).
FLOAT_ROUNDING = 1e-5

CONFIGS = {
    "8da8w-per-channel": lambda: Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int8, weight_granularity=PerAxis(0)
    ),
    "8da4w-group32": lambda: Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4, weight_granularity=PerGroup(32)
    ),
    "4w-group32": lambda: IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)),
}


@dataclass(frozen=True)
class Lowered:
    model: torch.nn.Module
    inputs: tuple[torch.Tensor, ...]
    exported: object
    edge: object
    pte: bytes
    got: torch.Tensor


@pytest.fixture(scope="module")
def lowered() -> dict[str, Lowered]:
    out = {}
    for name, config in CONFIGS.items():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 32)).eval()
        inputs = (torch.randn(2, 5, 64),)
        quantize_(model, config())
        exported = torch.export.export(model, inputs)
        edge = to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()])
        pte = xnnpack.to_executorch(edge).buffer
        out[name] = Lowered(model, inputs, exported, edge, pte, xnnpack.run(pte, inputs)[0])
    return out


def _off(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max()) / float(want.abs().max())


@torch.no_grad()
def test_dynamic_int8_per_channel_runs_within_float_rounding(lowered) -> None:
    case = lowered["8da8w-per-channel"]
    assert _off(case.got, case.model(*case.inputs)) <= FLOAT_ROUNDING


@torch.no_grad()
def test_dynamic_int4_per_group_is_off_by_exactly_the_bf16_rounding_of_its_scales(lowered) -> None:
    case = lowered["8da4w-group32"]
    assert _off(case.got, case.model(*case.inputs)) > FLOAT_ROUNDING  # measured: 0.3 % of the output range
    weight = case.model[0].weight
    weight.scale.copy_(weight.scale.to(torch.bfloat16).to(torch.float32))
    assert _off(case.got, case.model(*case.inputs)) <= FLOAT_ROUNDING


@torch.no_grad()
def test_weight_only_int4_miscomputes_and_qflow_says_so(lowered) -> None:
    """Measured: ExecuTorch 1.5.1 lowers a torchao weight-only int4 linear with the raw codes as
    float weights — the group scales are dropped (outputs ~60x too large). qflow says so in every form."""
    case = lowered["4w-group32"]
    weight = case.model[0].weight
    codes_as_weights = torch.nn.functional.linear(case.inputs[0], weight.qdata.float(), case.model[0].bias)
    assert _off(case.got, case.model(*case.inputs)) > 1.0
    assert _off(case.got, codes_as_weights) <= FLOAT_ROUNDING
    for target in ("xnnpack", None):
        for program in (case.exported, case.edge.exported_program()):
            report = qflow.analyze(program, target=target)
            assert report.status == "violated", str(report)
            assert [(f.kind, f.targets) for f in report.findings] == [
                ("miscompiled-lowering", {"xnnpack": "silent miscompile"})
            ], str(report)
    # the artifact multiplies float weights and never reads the scales passed to the delegate, which
    # tile them (one per group): the same error there, and no "nothing quantized"
    report = qflow.analyze(case.pte, target="xnnpack")
    assert report.status == "violated", str(report)
    assert {f.kind for f in report.findings} == {"miscompiled-lowering"}, str(report)
    assert not [n for n in report.notes if "nothing is quantized" in n], str(report)


def test_the_target_validates_what_was_measured() -> None:
    assert targets.get("xnnpack").validated["dynamic-int8"] == frozenset({"linear"})
    assert "dynamic-per-tensor-int8" not in targets.get("xnnpack").validated


def _per_token(x: torch.Tensor) -> torch.Tensor:
    """`x` quantized as XNNPACK's qd8 does: asymmetric int8 per row, the range widened to hold 0."""
    lo = torch.clamp(x.amin(-1, keepdim=True), max=0.0)
    hi = torch.clamp(x.amax(-1, keepdim=True), min=0.0)
    scale = (hi - lo) / 255
    zero = torch.clamp(-128 - torch.round(lo / scale), -128, 127)
    return (torch.clamp(torch.round(x / scale) + zero, -128, 127) - zero) * scale


@pytest.mark.parametrize("flow", ["transform-and-lower", "to_edge-addmm", "to_edge-mm"])
@torch.no_grad()
def test_a_pt2e_dynamic_per_tensor_linear_is_computed_per_token(flow) -> None:
    """PT2E's dynamic config (the XNNPACK suite's qd8 linears) quantizes the input per tensor at run
    time; XNNPACK quantizes it per token: the runtime equals the per-token computation and is off the
    program. qflow does not prove it, before lowering or lowered (`to_edge` alone makes an addmm, or an mm
    without a bias)."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.exir import to_edge

    torch.manual_seed(0)
    model = torch.nn.Linear(64, 32, bias=flow != "to_edge-mm").eval()
    x = (torch.randn(5, 64),)
    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
    converted = xnnpack.quantize(model, x, XNNPACKQuantizer().set_global(config))
    exported = torch.export.export(converted, x)
    if flow == "transform-and-lower":
        edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    else:
        edge = to_edge(exported).to_backend(XnnpackPartitioner())
    pte = xnnpack.to_executorch(edge).buffer
    got = xnnpack.run(pte, x)[0]
    weight = next(n for n in converted.graph.nodes if "dequantize_per_channel" in str(n.target))
    dq_weight = torch.ops.quantized_decomposed.dequantize_per_channel(  # (as the program dequantizes it)
        *(getattr(converted, a.target) if isinstance(a, torch.fx.Node) else a for a in weight.args)
    )
    per_token = torch.nn.functional.linear(_per_token(x[0]), dq_weight, model.bias)
    assert _off(got, converted(*x)) > 100 * FLOAT_ROUNDING  # measured: 0.87 % of the output range
    assert _off(got, per_token) <= FLOAT_ROUNDING
    for report in (
        qflow.analyze(exported, target="xnnpack"),
        qflow.analyze(edge.exported_program(), target="xnnpack"),
        qflow.analyze(pte, target="xnnpack", reference=exported),  # (the payload says per token; its program not)
    ):
        assert report.status == "unproven", str(report)
        assert {f.kind for f in report.findings} == {"unvalidated-lowering"}, str(report)
    assert qflow.analyze(pte, target="xnnpack").status == "proved"  # (alone, per token is what it says)


@pytest.mark.parametrize("name", ["8da8w-per-channel", "8da4w-group32"])
@pytest.mark.parametrize("form", ["exported", "lowered", "pte"])
def test_qflow_proves_the_dynamic_linears(lowered, name, form) -> None:
    case = lowered[name]
    program = {"exported": case.exported, "lowered": case.edge.exported_program(), "pte": case.pte}[form]
    for target in ("xnnpack", None):
        report = qflow.analyze(program, target=target)
        assert report.status == "proved", str(report)
        assert not [f for f in report.findings if f.kind == "unknown-op"]
        rounded = [f for f in report.findings if f.kind == "rounded-weight-scales"]
        # the payload states the bf16 scales; the program before it does not hold them yet
        assert bool(rounded) == (form == "pte" and name == "8da4w-group32"), str(report)


def test_an_unmeasured_dynamic_lowering_is_unproven(lowered) -> None:
    """The same reading with the measurement withheld: not proved (sound first, issue #30)."""
    import dataclasses

    xnn = targets.get("xnnpack")
    unmeasured = dataclasses.replace(xnn, validated={"int8": xnn.validated["int8"]})
    report = qflow.analyze(lowered["8da4w-group32"].exported, target=unmeasured)
    assert report.status == "unproven", str(report)
    assert [f.kind for f in report.findings] == ["unvalidated-lowering"]


@pytest.mark.parametrize("granularity", [PerGroup(32), PerAxis(0)], ids=["int4-group32", "int4-per-row"])
def test_a_weight_only_embedding_stays_on_the_cpu_and_is_refused_at_emission(granularity) -> None:
    """Measured: XNNPACK delegates no embedding, so the table is dequantized and gathered on the
    CPU in float — which to_executorch then refuses (torchao::dequantize_affine has no out
    variant). qflow proves it before lowering and lowered (`embedding`: OpRule.CPU_FLOAT)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(128, 64), torch.nn.Linear(64, 16)).eval()
    config = IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=granularity)
    quantize_(model, config, filter_fn=lambda m, _: isinstance(m, torch.nn.Embedding))
    exported = torch.export.export(model, (torch.randint(0, 128, (1, 8)),))
    edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    on_cpu = [
        n.target.__name__
        for n in edge.exported_program().graph.nodes
        if n.op == "call_function" and isinstance(n.target, EdgeOpOverload)
    ]
    assert "aten.embedding.default" in on_cpu and "torchao.dequantize_affine.default" in on_cpu, on_cpu
    with pytest.raises(RuntimeError, match="Missing out variants.*dequantize_affine"):
        edge.to_executorch()
    for program in (exported, edge):
        report = qflow.analyze(program, target="xnnpack")
        assert report.status == "proved", str(report)
