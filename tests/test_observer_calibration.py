"""Before calibration, what the observers of a pass-through op's input and output will compute is
sometimes known now (qflow/integrations/observer_calibration.py): each claim is checked here against
what prepare_pt2e's real observers then compute, with the real Arm quantizer."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from executorch.backends.arm.quantizer import (
    TOSAQuantizer,
    get_symmetric_a16w8_quantization_config,
    get_symmetric_quantization_config,
)
from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
from torch import nn
from torchao.quantization.pt2e import MinMaxObserver
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
from torchao.quantization.pt2e.quantizer import Quantizer

import qflow
from qflow.targets.arm import pipeline as arm

SEED = 1
SPEC = "TOSA-1.0+INT+int16"
INPUTS = (torch.randn(8, 8, generator=torch.Generator().manual_seed(SEED)) * 2 + 0.5,)


class NegThenView(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        gen = torch.Generator().manual_seed(SEED + 1)
        with torch.no_grad():
            self.linear.weight.copy_(torch.randn(8, 8, generator=gen))
            self.linear.bias.copy_(torch.randn(8, generator=gen))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.neg(self.linear(x)).permute(1, 0) + 1


def quantizer(qscheme: torch.qscheme | None) -> TOSAQuantizer:
    """The stock a16w8 config (a symmetric HistogramObserver), or a8w8 with a MinMaxObserver."""
    cfg = get_symmetric_a16w8_quantization_config() if qscheme is None else get_symmetric_quantization_config()
    if qscheme is not None:
        spec = dataclasses.replace(
            cfg.output_activation,
            qscheme=qscheme,
            observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=2**-12),
        )
        cfg = dataclasses.replace(cfg, input_activation=spec, output_activation=spec)
    q = TOSAQuantizer(TosaCompileSpec(SPEC))
    q.set_global(cfg)
    return q


def annotated(q: TOSAQuantizer, own_permute_observer: bool = False) -> torch.fx.GraphModule:
    g = q.transform_for_annotation(arm.export_module(NegThenView().eval(), INPUTS))
    q.annotate(g)
    if own_permute_observer:  # a custom annotation: the permute observes its output itself
        [permute] = [n for n in g.graph.nodes if n.name == "permute"]
        ann = permute.meta["quantization_annotation"]
        [(producer, spec)] = ann.input_qspec_map.items()
        ann.output_qspec = spec
    return g


class AsAnnotated(Quantizer):
    """prepare_pt2e with the annotations the graph already carries."""

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        return model

    def validate(self, model: torch.fx.GraphModule) -> None:
        pass


def calibrated(g: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, dict[str, tuple[float, int]]]:
    """The converted program and the (scale, zero point) prepare_pt2e's observers chose for each tensor
    (`g` is prepared in place)."""
    prepared = prepare_pt2e(g, AsAnnotated())
    prepared(*INPUTS)
    converted = convert_pt2e(prepared)
    qparams = {
        n.args[0].name: (float(n.args[1]), int(n.args[2]))
        for n in converted.graph.nodes
        if n.op == "call_function" and "quantize_per_tensor" in str(n.target) and "dequantize" not in str(n.target)
    }
    return converted, qparams


def test_a_histogram_decides_a_negs_scale_only_when_it_calibrates() -> None:
    """Stock a16w8: the neg's observer sees the linear's values mirrored, and a histogram's search is not
    mirror-symmetric. Before calibration the scale Arm drops is unproven (it was an error, the mask menu's
    most common false alarm there); after it, the scales are 0.09 % apart, and the int16 codes that moves
    are an error the TOSA reference model confirms."""
    g = annotated(quantizer(None))
    report = qflow.analyze(g, target="arm-tosa")
    assert report.status == "unproven" and not report.errors, str(report)
    [f] = [f for f in report.findings if f.kind != "rounded-twice"]  # (and the int16 linear's rescale, unweighed)
    assert (f.kind, f.node, f.severity) == ("dropped-scale", "neg", "warning") and "HistogramObserver" in f.message
    converted, qparams = calibrated(g)
    assert qparams["neg"][0] != qparams["linear"][0]  # what makes it undecided: measured, not assumed
    [error] = qflow.analyze(converted, target="arm-tosa").errors
    assert (error.kind, error.node) == ("dropped-scale", "neg")
    lowered = arm.lower(torch.export.export(converted, INPUTS, strict=True), INPUTS, spec=SPEC)
    [got] = arm.run_tosa_reference(lowered, INPUTS)
    want = converted(*INPUTS)
    off_lsb = float((got - want).abs().max()) / qparams["add"][0]
    assert 2 <= off_lsb <= error.output_lsb, (off_lsb, error.output_lsb)


@pytest.mark.parametrize("qscheme", [torch.per_tensor_symmetric, torch.per_tensor_affine])
def test_a_min_max_observer_gives_a_neg_its_inputs_scale(qscheme) -> None:
    g = annotated(quantizer(qscheme))
    report = qflow.analyze(g, target="arm-tosa")
    assert report.proved, str(report)
    _, qparams = calibrated(g)
    assert qparams["neg"][0] == qparams["linear"][0]
    assert (qparams["neg"][1] == qparams["linear"][1]) == (qscheme == torch.per_tensor_symmetric)


def test_a_view_observing_itself_calibrates_like_its_input() -> None:
    """A custom annotation gives the permute an observer of its own: any observer sees the same values."""
    g = annotated(quantizer(None), own_permute_observer=True)
    assert qflow.analyze(g, target="arm-tosa").status == "unproven"  # (the neg, as above; the permute proves)
    assert not [f for f in qflow.analyze(g, target="arm-tosa").findings if f.node == "permute"]
    _, qparams = calibrated(g)
    assert qparams["permute"] == qparams["neg"]


def test_a_view_observed_with_a_different_spec_is_still_refuted() -> None:
    """Two qspecs that differ (int16 after an int8 permute input) calibrate apart: z3's witness stands."""
    g = annotated(quantizer(torch.per_tensor_symmetric), own_permute_observer=True)
    [permute] = [n for n in g.graph.nodes if n.name == "permute"]
    ann = permute.meta["quantization_annotation"]
    ann.output_qspec = dataclasses.replace(ann.output_qspec, dtype=torch.int16, quant_min=-32767, quant_max=32767)
    errors = qflow.analyze(g, target="arm-tosa").errors
    assert [(f.kind, f.node) for f in errors] == [("passthrough-domain-change", "permute")]
