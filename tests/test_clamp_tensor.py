"""``torch.clamp`` with tensor bounds (``aten.clamp.Tensor``), from the Arm suite's ops/test_clamp.py: qflow
crashed reading it (``float()`` of the bound's node: an analysis error on 16 of the file's programs under
``--qflow-observe``, 2026-12-05). It is an elementwise maximum / minimum of three tensors, no clamp by constants.
Real pipeline: the stock Arm quantizer, the real lowering, the TOSA reference model."""

from __future__ import annotations

import pytest
import torch

import qflow
from qflow.targets.arm import pipeline as arm


class _Clamp(torch.nn.Module):
    def __init__(self, lo: torch.Tensor, hi: torch.Tensor) -> None:
        super().__init__()
        self.lo, self.hi = lo, hi

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, self.lo, self.hi)


def test_an_integer_clamp_by_tensors_quantizes_nothing() -> None:
    x = torch.randint(-50, 50, (2, 3), dtype=torch.int32)
    model = _Clamp(torch.tensor(-10), torch.tensor(10)).eval()
    converted = arm.quantize(model, (x,))
    lowered = arm.lower(converted, (x,))
    assert qflow.analyze(lowered, target="arm-tosa").status == "nothing-quantized"
    assert qflow.analyze(torch.export.export(converted, (x,), strict=True), target="arm-tosa").status == (
        "nothing-quantized"
    )


def test_a_quantized_clamp_by_tensors_is_read_and_computes_right() -> None:
    torch.manual_seed(0)
    model = _Clamp(torch.linspace(-0.9, 0.1, 8), torch.linspace(0.2, 1.3, 8)).eval()
    samples = [(torch.randn(2, 3, 8) * 1.5,) for _ in range(8)]
    converted = arm.quantize(model, samples[0])
    ep = torch.export.export(converted, samples[0], strict=True)
    lowered = arm.lower(converted, samples[0])
    out_scale = next(n for n in converted.graph.nodes if n.op == "output").args[0][0].args[1]
    for s in samples:  # (the TOSA MAXIMUM / MINIMUM of one domain's codes: exact)
        off = (arm.run_tosa_reference(lowered, s)[0] - converted(*s)).abs().max() / out_scale
        assert off.item() == pytest.approx(0.0, abs=1e-6)
    assert qflow.analyze(ep, target="arm-tosa").status == "proved"
    assert not qflow.analyze(lowered, target="arm-tosa", reference=ep).errors
