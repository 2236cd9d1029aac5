"""Op variants XNNPACK ignores, measured on the ExecuTorch runtime (`Target.ignored_variants`).

Measured (2026-11-27, torch 2.13.0, executorch 1.5.1): the stock `XnnpackPartitioner` delegates
`gelu(x, approximate="tanh")` and the runtime computes the exact (erf) GELU — found by the torchao
campaign (cases 00106 / 00116 / 00150, a tanh GELU on an output's path, 2.6-72x the band, proved
until then); fixed upstream after 1.5.1 (pytorch/executorch PR #22851).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from executorch.backends.xnnpack.partition.config import (
    DeQuantizedPerTensorConfig,
    GeluConfig,
    QuantizedPerTensorConfig,
)
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
from executorch.exir import to_edge_transform_and_lower

import qflow
from qflow import targets
from qflow.targets.xnnpack import pipeline as xnnpack

#: float32 rounding of one elementwise op (fixed, never read from what is measured)
FLOAT_ROUNDING = 1e-6


class Gelu(torch.nn.Module):
    def __init__(self, approximate: str) -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate=self.approximate)


class LinearGeluLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(F.gelu(self.a(x), approximate="tanh"))


X = (torch.linspace(-6.0, 6.0, 2401).reshape(1, -1),)


@pytest.fixture(scope="module")
def runs() -> dict[str, torch.Tensor]:
    """approximate → what the runtime computes for X (the gelu delegated to XNNPACK)."""
    out = {}
    for approximate in ("none", "tanh"):
        edge = to_edge_transform_and_lower(
            torch.export.export(Gelu(approximate), X), partitioner=[XnnpackPartitioner()]
        )
        assert xnnpack.delegation(edge) == xnnpack.Delegation(1, ()), "the gelu was not delegated"
        out[approximate] = xnnpack.run(xnnpack.to_executorch(edge), X)[0]
    return out


def test_the_runtime_computes_the_exact_gelu_for_both_variants(runs) -> None:
    exact = F.gelu(X[0])
    assert float((runs["none"] - exact).abs().max()) <= FLOAT_ROUNDING
    assert float((runs["tanh"] - exact).abs().max()) <= FLOAT_ROUNDING
    gap = float((runs["tanh"] - F.gelu(X[0], approximate="tanh")).abs().max())
    assert gap > 4.5e-4, gap  # (the largest gap of the two functions, at |x| = 2.699)


def test_the_target_bounds_the_gap_over_every_real() -> None:
    bound = targets.get("xnnpack").ignored_variants["gelu"].max_error
    x = torch.linspace(-10.0, 10.0, 400_001, dtype=torch.float64)  # (the gap vanishes beyond)
    gap = (F.gelu(x, approximate="tanh") - F.gelu(x)).abs().max()
    assert float(gap) < bound < float(gap) * 1.01


@pytest.mark.parametrize("target", ["xnnpack", None])
def test_a_tanh_gelu_reaching_a_float_output_is_never_proved_on_xnnpack(target) -> None:
    """Another function than the program's at that output; wrong or not by the user's float tolerance."""
    report = qflow.analyze(torch.export.export(Gelu("tanh"), X), target=target)
    found = [(f.kind, f.node, f.severity) for f in report.findings]
    assert found == [("ignored-op-variant", "gelu", "warning")], str(report)
    assert "reaches output gelu unrounded" in report.findings[0].message
    exact = qflow.analyze(torch.export.export(Gelu("none"), X), target=target)
    assert not exact.findings and not exact.obligations["violated"], str(exact)  # (and nothing quantized)


def test_other_targets_are_not_told_about_it() -> None:
    report = qflow.analyze(torch.export.export(Gelu("tanh"), X), target="arm-tosa")
    assert not [f for f in report.findings if f.kind == "ignored-op-variant"], str(report)


def test_a_linear_after_the_rounded_gap_can_make_its_one_code_many() -> None:
    """Stock XNNPACKQuantizer: linear → gelu(tanh) → linear; the gelu runs in float between the first
    linear's dequantize and the second's input quantize (step ~0.01 here), which rounds the gap to one code
    at most — and the second linear's weights can make that code 4.7 output LSB, over inputs that put every
    gelu output at a rounding boundary (these inputs: within one). Unproven, never proved, never an error
    (it was proved, with an info finding, until 2026-12-02)."""
    torch.manual_seed(0)
    x = (torch.randn(4, 16),)
    converted = xnnpack.quantize(LinearGeluLinear().eval(), x)
    ep = torch.export.export(converted, x)
    report = qflow.analyze(ep, target="xnnpack")
    assert report.status == "unproven" and not report.errors, str(report)
    [f] = report.findings
    assert (f.kind, f.severity) == ("ignored-op-variant", "warning")
    assert "rounds that to one code at most; what follows moves output" in f.message
    got = xnnpack.run(xnnpack.to_executorch(xnnpack.lower(ep, x)), x)[0]
    out_scale = next(n.args[1] for n in reversed(list(converted.graph.nodes)) if "dequantize" in str(n.target))
    assert float((got - converted(*x)).abs().max()) <= out_scale * (1 + 1e-6)


def test_a_partition_of_the_gelu_alone_is_weighed_with_the_host_after_it() -> None:
    """The program above, lowered by a partitioner that delegates only the GELU and its quantizes: the host's
    second linear amplifies the partition's one code. Read in the partition alone, the quantize looked like
    an output and the lowered program was proved (until 2026-12-03); weighed on the whole program it is
    unproven, as before partitioning."""
    torch.manual_seed(0)
    x = (torch.randn(4, 16),)
    ep = torch.export.export(xnnpack.quantize(LinearGeluLinear().eval(), x), x)
    only_gelu = XnnpackPartitioner(configs=[GeluConfig, QuantizedPerTensorConfig, DeQuantizedPerTensorConfig])
    edge = to_edge_transform_and_lower(ep, partitioner=[only_gelu])
    assert "aten.addmm.default" in xnnpack.delegation(edge).cpu_ops  # (both linears on the host)
    report = qflow.analyze(edge, target="xnnpack")
    assert report.status == "unproven" and not report.errors, str(report)
    [f] = report.findings
    assert (f.kind, f.severity) == ("ignored-op-variant", "warning") and f.node.endswith("/aten_gelu_default")
    assert "what follows moves output" in f.message, str(report)


def test_before_calibration_it_is_unproven() -> None:
    """The annotated program: whether a quantize rounds the gap away depends on grids calibration picks."""
    torch.manual_seed(0)
    x = (torch.randn(4, 16),)
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config())
    annotated = quantizer.transform_for_annotation(torch.export.export(LinearGeluLinear().eval(), x).module())
    quantizer.annotate(annotated)
    report = qflow.analyze(annotated, target="xnnpack")
    assert report.form == "annotated" and report.status == "unproven", str(report)
    assert [(f.kind, f.severity) for f in report.findings] == [("ignored-op-variant", "warning")], str(report)


def test_through_a_dynamic_quantization_it_is_unproven() -> None:
    """torchao 8da8w: the gap enters the second linear's per-token quantization, whose step only the
    data decides (the torchao campaign: 0.1-2.6x its band): unproven, never proved, never an error."""
    from torchao.quantization import quantize_
    from torchao.quantization.granularity import PerAxis
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

    model = LinearGeluLinear().eval()
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0)))
    report = qflow.analyze(torch.export.export(model, (torch.randn(4, 16),)), target="xnnpack")
    found = [(f.kind, f.severity) for f in report.findings if f.severity != "info"]
    assert found == [("ignored-op-variant", "warning")], str(report)
    assert any("meets a quantization's rounding" in f.message for f in report.findings), str(report)


def _pte_verdicts(model: torch.nn.Module, x: tuple[torch.Tensor, ...], exported: object) -> tuple[object, object]:
    """The `.pte` of `exported`, alone and against `exported` (reference=)."""
    pte = xnnpack.to_executorch(xnnpack.lower(exported, x)).buffer
    return qflow.analyze(pte, target="xnnpack"), qflow.analyze(pte, target="xnnpack", reference=exported)


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_the_pte_says_it_with_its_program(approximate) -> None:
    """The payload names an XNNGelu either way: alone, the .pte proves (its variant is gone); with the
    program that asked for tanh it is unproven at the XNNPACK node, as before lowering; for the exact
    GELU it proves."""
    exported = torch.export.export(Gelu(approximate), X)
    alone, checked = _pte_verdicts(Gelu(approximate), X, exported)
    assert not [f for f in alone.findings if f.kind == "ignored-op-variant"], str(alone)
    found = [(f.kind, f.severity) for f in checked.findings if f.kind == "ignored-op-variant"]
    assert found == ([("ignored-op-variant", "warning")] if approximate == "tanh" else []), str(checked)
    if approximate == "tanh":
        assert checked.findings[0].node.endswith(":XNNGelu") and checked.status == "unproven"


def test_the_pte_of_a_stock_quantized_program_rounds_the_gap_away() -> None:
    """The stock XNNPACKQuantizer's program of the test above: in its payload the GELU's output is
    converted to int8 codes of a step far above twice the gap: proved, with the info finding."""
    torch.manual_seed(0)
    x = (torch.randn(4, 16),)
    ep = torch.export.export(xnnpack.quantize(LinearGeluLinear().eval(), x), x)
    _, checked = _pte_verdicts(LinearGeluLinear(), x, ep)
    assert checked.proved, str(checked)
    assert [f.severity for f in checked.findings if f.kind == "ignored-op-variant"] == ["info"], str(checked)
