"""A mask computed from wrong codes: the where it drives is only as right as the comparison.

Real Arm pipeline, stock per-tensor quantizer: ``y = -relu(x)``, then ``where(y > c, x * 0.5, x * 0.25)``.
Arm lowers the neg with the zero points only, so y's codes keep the relu's scale (1.333x the declared one):
y is wrong, and only the comparison reads it.

- c = -1.5: wrong values of y cross c, the where picks the other branch, and the TOSA reference model is
  0.49 (63 output LSB) off the quantized program. qflow proved it before 2026-12-02: the comparison's bool
  had no edge from y, so the wrong codes reached no output.
- c = 0.0, the top of y's domain: y > c is false on every code y can have, right or wrong, so the where is
  x * 0.25 everywhere and the program computes right: proved, before partitioning and lowered.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import qflow
from qflow.targets.arm import pipeline as arm

X = (torch.linspace(-1.0, 3.0, 64).reshape(1, 4, 4, 4),)


class Masked(nn.Module):
    def __init__(self, c: float) -> None:
        super().__init__()
        self.c = c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = -torch.relu(x)
        return torch.where(y > self.c, x * 0.5, x * 0.25)


@pytest.fixture(scope="module")
def programs() -> dict[float, Any]:
    out = {}
    for c in (0.0, -1.5):
        converted = arm.quantize(Masked(c), X)
        ep = torch.export.export(converted, X, strict=True)
        lowered = arm.lower(ep, X)
        [got], want = arm.run_tosa_reference(lowered, X), converted(*X)
        out[c] = (converted, ep, lowered, float((got - want).abs().max()), float(want.unique().diff().min()))
    return out


def test_a_mask_the_wrong_codes_can_flip_is_an_error(programs) -> None:
    converted, ep, lowered, err, step = programs[-1.5]
    assert err > 10 * step, f"only {err} off on the TOSA reference model"
    assert [f.kind for f in qflow.analyze(converted, target="arm-tosa").errors] == ["dropped-scale"]
    report = qflow.analyze(lowered, target="arm-tosa", reference=ep)
    assert "dropped-scale" in {f.kind for f in report.errors}


def test_a_mask_no_code_can_flip_proves(programs) -> None:
    converted, ep, lowered, err, step = programs[0.0]
    assert err <= 2 * step, f"{err} off on the TOSA reference model (output step {step})"
    report = qflow.analyze(converted, target="arm-tosa")
    assert report.proved, report.errors
    assert qflow.analyze(lowered, target="arm-tosa", reference=ep).proved
