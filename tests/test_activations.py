"""Activation fuseability (zp == qmin) and its repair, on the real pipeline."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import qflow
from qflow.domain import Domain
from qflow.integrations import activations, arm

# int8 domains: zp at qmin (fuseable for relu) and above it (not)
AT_QMIN = Domain.quantized("int8", 6 / 255, -128, -128, 127)
ABOVE = Domain.quantized("int8", 0.05, -20, -128, 127)


@pytest.mark.parametrize(
    "name, lo, hi, dom, exact",
    [
        ("relu", 0.0, None, AT_QMIN, True),
        ("relu", 0.0, None, ABOVE, False),
        ("relu6", 0.0, 6.0, AT_QMIN, True),  # 6 quantizes to qmax
        ("relu6", 0.0, 6.0, Domain.quantized("int8", 0.1, -128, -128, 127), False),  # 6.0 cuts inside: code -68
        ("hardtanh", 0.0, 6.0, AT_QMIN, True),
        ("hardtanh", -1.0, 1.0, ABOVE, False),
        ("clamp", None, None, ABOVE, True),  # no bounds: nothing to drop
        ("clamp", 0.0, None, ABOVE, False),
    ],
)
def test_exact_fusion_condition(name, lo, hi, dom, exact) -> None:
    assert activations.exact(dom, lo, hi) is exact
    if exact:  # the installed pass may fuse an exact activation; never a problem
        return
    # 1.5.1 fuses relu (and hardtanh(0, x) reaching qmax) regardless; clamp never
    fused = activations.would_fuse(name, dom, lo, hi)
    assert fused is (activations.fuses_by_narrowing() and name == "relu")


class LinearReluCat(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.b(torch.cat([torch.relu(self.a(x)), y], dim=-1))


class ConvRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.out = nn.Conv2d(4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.conv(x)))


def test_linear_producer_with_signed_cat_is_reported() -> None:
    torch.manual_seed(7)
    m = LinearReluCat().eval()
    gm = arm.quantize(m, (torch.randn(2, 6), torch.randn(2, 6)))
    [f] = qflow.analyze(gm).errors
    assert f.kind == "non-fuseable-activation" and "relu" in f.node
    assert "linear" in f.message


def test_fuseable_conv_relu_control_has_no_finding() -> None:
    torch.manual_seed(8)
    gm = arm.quantize(ConvRelu().eval(), (torch.randn(1, 3, 6, 6),))
    r = qflow.analyze(gm)
    assert r.proved and not r.findings


@pytest.mark.parametrize("name", ["conv_relu_cat_signed", "seed001_tiny_conv_relu_cat"])
def test_repair_makes_the_tosa_output_match_fake_quant(built, name) -> None:
    b = built(name)
    reference = b.converted(*b.inputs)
    out_scale = next(n for n in b.converted.graph.nodes if n.op == "output").args[0][0].args[1]
    [unrepaired] = arm.run_tosa_reference(b.lowered, b.inputs)

    plan = qflow.plan(b.converted)
    [(old, own)] = plan.activation_domains.values()
    assert own.zero_point == own.qmin and own.scale == old.scale
    repaired = qflow.repair(b.converted)
    assert qflow.analyze(repaired).proved
    with arm.capture_after() as parts:
        lowered = arm.lower(repaired, b.inputs, spec=b.spec)
    assert all(qflow.analyze(p).proved for p in parts)
    [out] = arm.run_tosa_reference(lowered, b.inputs)

    lsb = lambda t: ((t - reference).abs().max() / out_scale).item()  # noqa: E731
    assert lsb(out) <= 1.0 + 1e-4
    assert lsb(unrepaired) > 1.0 + 1e-4
