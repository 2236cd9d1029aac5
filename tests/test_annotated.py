"""Annotation-time proofs (before prepare_pt2e) with the real Arm quantizer."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

import qflow
from qflow.examples import models
from qflow.integrations.annotated import prepare_accepts_kwargs
from qflow.targets.arm import pipeline as arm

ORDINARY = ("conv_bn_relu6_residual", "conv_cat_skip", "attention", "linear_per_channel", "mixed_a16w8")


def annotate(model: nn.Module, inputs: tuple, quantizer) -> torch.fx.GraphModule:
    g = quantizer.transform_for_annotation(arm.export_module(model, inputs))
    quantizer.annotate(g)
    return g


def annotated_example(name: str) -> torch.fx.GraphModule:
    ex = models.MODELS[name]()
    q = ex.make_quantizer() if ex.make_quantizer else arm.default_quantizer(ex.spec)
    return annotate(ex.model, ex.inputs, q)


@pytest.mark.parametrize("name", ORDINARY + ("seed000_control",))
def test_stock_annotations_are_proved_before_calibration(clean, name) -> None:
    r = qflow.analyze(annotated_example(name))
    assert r.form == "annotated"
    clean(r, name)


def test_seed000_annotations_are_refuted_with_a_witness() -> None:
    r = qflow.analyze(annotated_example("seed000_probe"))
    assert not r.proved
    [f] = r.errors
    assert f.kind == "passthrough-domain-change" and f.node == "cat"
    assert f.produced["dtype"] == "int8" and f.expected["dtype"] == "int16"


@pytest.mark.parametrize("name", ["conv_relu_cat_signed", "seed001_tiny_conv_relu_cat"])
def test_fused_relu_sharing_a_signed_observer_is_predicted(name) -> None:
    r = qflow.analyze(annotated_example(name))
    [f] = r.findings
    assert (f.kind, f.node, f.severity) == ("non-fuseable-activation", "relu", "warning")


class FullCat(nn.Module):
    """Seed 003's MinimalFullModel."""

    def __init__(self) -> None:
        super().__init__()
        self.predict = nn.Conv2d(4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad = torch.full((1, 2, 8, 8), 0.0, device=x.device, dtype=x.dtype)
        return self.predict(torch.cat([pad, x[:, :2]], dim=1))


def test_annotated_factory_op_matches_what_prepare_really_does() -> None:
    x = torch.randn(1, 4, 8, 8)
    g = annotate(FullCat().eval(), (x,), arm.default_quantizer())
    r = qflow.analyze(g)
    [f] = [f for f in r.findings if f.kind == "annotated-factory-op"]
    assert f.node == "full"
    # the real prepare on the same model decides which severity is true
    try:
        prepare_pt2e(arm.export_module(FullCat().eval(), (x,)), arm.default_quantizer())
        prepared = True
    except AssertionError as e:
        assert "kwargs" in str(e)
        prepared = False
    assert prepared is prepare_accepts_kwargs()
    assert f.severity == ("info" if prepared else "error")


class ReluIntoCatSecond(nn.Module):
    """conv → relu, whose output a depthwise conv reads and a cat takes as its second input beside the
    depthwise conv's (signed) output (campaign case 00079-arm-pt)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 3, 3, padding=1)
        self.dw = nn.Conv2d(3, 3, 3, padding=1, groups=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r = torch.relu(self.conv(x))
        return torch.cat([self.dw(r), r], 1)


def test_implicit_sharing_is_prepare_pt2es_own() -> None:
    """The relu's output is never named by a SharedQuantizationSpec: prepare_pt2e shares its observer with
    the cat's because the cat's input edge from it has the same root qspec (implicit sharing). The
    annotated graph's groups are prepare_pt2e's, so the relu is calibrated on the signed cat, and its
    zero point lands above qmin — as the converted program shows."""
    torch.manual_seed(0)
    inputs = (torch.rand(1, 4, 4, 8) * 1.4,)
    quantizer = arm.default_quantizer()
    r = qflow.analyze(annotate(ReluIntoCatSecond().eval(), inputs, quantizer), target="arm-tosa")
    assert [(f.kind, f.node) for f in r.findings] == [("non-fuseable-activation", "relu")], str(r)
    prepared = prepare_pt2e(arm.export_module(ReluIntoCatSecond().eval(), inputs), arm.default_quantizer())
    prepared(*inputs)
    converted = convert_pt2e(prepared)
    (relu,) = [n for n in converted.graph.nodes if n.target == torch.ops.aten.relu.default]
    (q,) = relu.users
    assert q.args[2] > q.args[3]  # zero point above qmin: calibrated on the signed tensor too
