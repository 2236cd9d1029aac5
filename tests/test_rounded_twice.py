"""A maximum of two grids that the Arm backend rounds twice (`rounded-twice`), real pipeline.

Stock Arm a8w8 quantizer: ``maximum(x, y)`` of two inputs quantized apart (y's grid 3.7x coarser).
InsertRescalePass rescales both to int32 on x's finer scale, then the maximum onto its output grid, so
where y wins its value is rounded twice and lands one code from the program's one rounding. Alone that is
the op's contract (1 LSB on the TOSA reference model): proved. Followed by ``exp``, whose int8 table is
steep at the top of its range, that one code is 3 output codes: qflow proved that program until 2026-12-02
(as mask campaign 00230-mk-arm-custom, a minimum before a LayerNorm's rsqrt, 12 output LSB, and
00368-mk-arm-pc, a maximum before an argmax); now it is unproven there, naming the maximum.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import qflow
from qflow.targets.arm import pipeline as arm

#: x on [-1, 1]; y over [-3.7, 3.7] (a grid 3.7x coarser: its codes fall between the finer grid's), every
#: one of its codes, so y wins where y > x.
INPUTS = (torch.linspace(-1.0, 1.0, 256).reshape(1, 256), torch.linspace(-3.7, 3.7, 256).reshape(1, 256))


class MaxThen(nn.Module):
    def __init__(self, steep: bool) -> None:
        super().__init__()
        self.steep = steep

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        m = torch.maximum(x, y)
        return torch.exp(m) if self.steep else m


def _built(steep: bool) -> dict[str, Any]:
    converted = arm.quantize(MaxThen(steep), INPUTS)
    ep = torch.export.export(converted, INPUTS, strict=True)
    lowered = arm.lower(ep, INPUTS)
    [got], want = arm.run_tosa_reference(lowered, INPUTS), converted(*INPUTS)
    step = float(want.unique().diff().min())
    return {"ep": ep, "lowered": lowered, "off_lsb": float((got - want).abs().max()) / step}


@pytest.fixture(scope="module")
def programs() -> dict[bool, dict[str, Any]]:
    return {steep: _built(steep) for steep in (False, True)}


def test_a_maximum_rounded_twice_is_its_contract_alone(programs) -> None:
    p = programs[False]
    assert p["off_lsb"] <= 1.0 + 1e-3, p["off_lsb"]
    report = qflow.analyze(p["ep"], target="arm-tosa")
    assert report.proved, str(report)


def test_a_steep_table_after_it_leaves_the_program_unproven(programs) -> None:
    p = programs[True]
    assert p["off_lsb"] >= 2.0, f"only {p['off_lsb']} LSB off on the TOSA reference model"
    report = qflow.analyze(p["ep"], target="arm-tosa")
    assert report.status == "unproven" and not report.errors, str(report)
    [f] = report.findings
    assert (f.kind, f.node, f.severity) == ("rounded-twice", "maximum", "warning"), str(report)
    lowered = qflow.analyze(p["lowered"], target="arm-tosa")
    assert not lowered.proved and "rounded-twice" in {f.kind for f in lowered.findings}, str(lowered)


def test_before_calibration_two_observer_groups_leave_it_unproven() -> None:
    """The annotated program: the operands' grids (and so whether the rounding moves a code) are not known yet."""
    quantizer = arm.default_quantizer()
    annotated = quantizer.transform_for_annotation(arm.export_module(MaxThen(True).eval(), INPUTS))
    quantizer.annotate(annotated)
    report = qflow.analyze(annotated, target="arm-tosa")
    assert report.form == "annotated" and report.status == "unproven", str(report)
    assert [(f.kind, f.node) for f in report.findings] == [("rounded-twice", "maximum")]
