"""A branch that ends in a constant activation cannot make an output wrong (masked).

Real Arm pipeline with the stock per-tensor quantizer: ``relu(neg(relu(x)))``.
The neg's output holds no positive value, so its int8 zero point is 127, and
Arm lowers neg with the zero points only (its scale is dropped). The relu after
it outputs 0 for every int8 code, so the program is exact on the TOSA
reference model (campaign case 00559). Without that relu the same neg is a
miscompile.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import qflow
from qflow.domain import Domain
from qflow.integrations.masked import constant_value
from qflow.targets.arm import pipeline as arm

X = (torch.linspace(-1.0, 3.0, 64).reshape(1, 4, 4, 4),)


class NegBranch(nn.Module):
    def __init__(self, relu_after: bool) -> None:
        super().__init__()
        self.relu_after = relu_after

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = -torch.relu(x)
        return (torch.relu(y) if self.relu_after else y), x * 0.5


@pytest.fixture(scope="module")
def programs() -> dict[bool, Any]:
    out = {}
    for relu_after in (True, False):
        converted = arm.quantize(NegBranch(relu_after), X)
        lowered = arm.lower(converted, X)
        got = arm.run_tosa_reference(lowered, X)
        want = converted(*X)
        out[relu_after] = (converted, lowered, max(float((g - w).abs().max()) for g, w in zip(got, want, strict=True)))
    return out


def test_the_constant_relu_masks_the_dropped_scale(programs) -> None:
    converted, _, err = programs[True]
    assert err == 0.0, f"{err} off on the TOSA reference model"
    report = qflow.analyze(converted, target="arm-tosa")
    assert report.proved, report.errors
    [f] = [f for f in report.findings if f.kind == "masked-by-constant"]
    assert f.severity == "info" and f.node == "relu_1" and "dropped-scale at neg" in f.message


def test_the_lowered_program_and_its_tosa_artifact_prove_too(programs) -> None:
    """The artifact's CLAMP to the one code 127 reads the neg's kept scale; it
    outputs 0 all the same, which is the relu's one value in its own domain."""
    _, lowered, _ = programs[True]
    report = qflow.analyze(lowered)
    assert report.proved, report.errors
    assert [f.kind for f in report.findings] == ["masked-by-constant"]


def test_without_the_relu_the_dropped_scale_is_a_miscompile_and_an_error(programs) -> None:
    converted, _, err = programs[False]
    assert err > 0.1, f"only {err} off on the TOSA reference model"
    report = qflow.analyze(converted, target="arm-tosa")
    assert [f.kind for f in report.errors] == ["dropped-scale"]
    assert "masked-by-constant" not in {f.kind for f in report.findings}
    _, lowered, _ = programs[False]  # (the artifact's NEGATE keeps the scale the partition drops: said once)
    assert {f.kind for f in qflow.analyze(lowered).errors} == {"dropped-scale"}


def test_a_target_that_refuses_a_dead_branch_too_lets_nothing_go(programs) -> None:
    """generic = arm-tosa ∪ xnnpack: XNNPACK refuses a broken obligation at
    load, dead branch or not, so the combined target keeps the error."""
    converted, _, _ = programs[True]
    report = qflow.analyze(converted, target=None)
    assert report.errors and "masked-by-constant" not in {f.kind for f in report.findings}


@pytest.mark.parametrize(
    ("lo", "hi", "zp", "want"),
    [
        (0.0, None, 127, 0.0),  # int8 scale 0.1 zp 127 = [-25.5, 0]: relu gives 0
        (0.0, None, 126, None),  # zp 126: code 127 is 0.1, kept by relu
        (None, -1.0, -128, -1.0),  # zp -128 = [0, 25.5]: clamp(max=-1) gives -1
        (-1.0, -0.5, 127, None),  # [-25.5, 0] runs through [-1, -0.5]
    ],
)
def test_constant_value_over_the_whole_dtype(lo, hi, zp, want) -> None:
    d = Domain.quantized("int8", 0.1, zp, -128, 127)
    assert constant_value(lo, hi, d) == want
