"""Annotation-time proofs (before prepare_pt2e) with the real Arm quantizer."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

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
def test_stock_annotations_are_proved_before_calibration(name) -> None:
    r = qflow.analyze(annotated_example(name))
    assert r.form == "annotated"
    assert r.proved and not r.errors, str(r)


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
