"""Precision in LSB (issue #27), against the TOSA reference model: a requant the Arm lowering
drops across `neg` (TOSA NEGATE keeps the scale) proves when no reachable code moves, and is
an error that says how far codes move otherwise; the measured error never exceeds the bound."""

from __future__ import annotations

import copy

import pytest
import torch

import qflow
from qflow.targets.arm import pipeline as arm


class Neg(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.neg(torch.nn.functional.hardtanh(x, -2.0, 2.0))


def _is(node: torch.fx.Node, name: str) -> bool:
    return node.op == "call_function" and name in str(node.target)


def _rescaled(gm: torch.fx.GraphModule, factor: float, op: str = "aten.neg") -> torch.fx.GraphModule:
    """A copy whose quantize after `op` (and its dequantizes) has the scale times `factor`:
    the domain change a custom annotation or a second observer makes."""
    gm = copy.deepcopy(gm)
    node = next(n for n in gm.graph.nodes if _is(n, op))
    q = next(u for u in node.users if _is(u, "quantize_per_tensor"))
    for node in [q, *(u for u in q.users if _is(u, "dequantize_per_tensor"))]:
        args = list(node.args)
        args[1] = float(args[1]) * factor
        node.args = tuple(args)
    gm.recompile()
    return gm


@pytest.fixture(scope="module")
def stock() -> tuple[torch.fx.GraphModule, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    inputs = (torch.rand(1, 8, 16) * 4 - 2,)
    return arm.quantize(Neg(), inputs), inputs


def _measured_lsb(gm: torch.fx.GraphModule, inputs: tuple[torch.Tensor, ...]) -> float:
    """The largest difference, in output LSB, between the TOSA reference model and the
    fake-quantized program, over the inputs and a sweep of every input code."""
    sweep = (torch.linspace(-2.2, 2.2, 8 * 16 * 4).reshape(4, 8, 16),)
    worst = 0.0
    scale = float(next(n for n in reversed(list(gm.graph.nodes)) if _is(n, "dequantize_per_tensor")).args[1])
    lowered = arm.lower(torch.export.export(gm, inputs), inputs)
    for x in (inputs, *((s[i : i + 1],) for s in sweep for i in range(s.shape[0]))):
        got = arm.run_tosa_reference(lowered, x)[0]
        worst = max(worst, float((got - gm(*x)).abs().max()) / scale)
    return worst


@pytest.mark.parametrize("factor", [1.001, 1.004, 1.012, 1.05])
def test_a_dropped_scale_is_weighed_in_output_lsb(stock, factor) -> None:
    gm, inputs = stock
    moved = _rescaled(gm, factor)
    report = qflow.analyze(torch.export.export(moved, inputs), target="arm-tosa")
    measured = _measured_lsb(moved, inputs)
    dropped = [f for f in report.findings if f.kind == "dropped-scale"]
    if factor == 1.001:  # two observers of one range: no code moves, on the device either
        assert report.proved and [f.severity for f in dropped] == ["info"], str(report)
        assert "moves no output code" in dropped[0].message
        assert measured <= 1.0
    else:
        assert [f.severity for f in dropped] == ["error"] and dropped[0].bound_lsb is not None, str(report)
        assert "moves output codes by up to" in dropped[0].message
        assert 1.0 <= measured <= dropped[0].bound_lsb + 0.5  # the bound holds on the device, and is tight


class Cat(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, y], 1) + 1.0


@pytest.mark.parametrize("factor", [1.001, 1.05])
def test_a_requant_after_cat_the_fold_drops_is_weighed_in_output_lsb(factor) -> None:
    """The Q/DQ program's requant after `cat` (which Arm's fold turns into a code copy)."""
    torch.manual_seed(0)
    inputs = (torch.randn(1, 4, 8), torch.randn(1, 4, 8))
    gm = arm.quantize(Cat(), inputs)
    moved = _rescaled(gm, factor, "aten.cat")
    report = qflow.analyze(torch.export.export(moved, inputs), target="arm-tosa")
    found = [f for f in report.findings if f.kind == "requant-after-passthrough"]
    lowered = arm.lower(torch.export.export(moved, inputs), inputs)
    scale = float(next(n for n in reversed(list(moved.graph.nodes)) if _is(n, "dequantize_per_tensor")).args[1])
    measured = float((arm.run_tosa_reference(lowered, inputs)[0] - moved(*inputs)).abs().max()) / scale
    assert len(found) == 1 and found[0].bound_lsb is not None, str(report)
    if factor == 1.001:  # 0.16 LSB: no code moves, on the device either
        assert report.proved and found[0].severity == "info" and measured <= 1.0
    else:
        assert found[0].severity == "error" and 1.0 <= measured <= found[0].bound_lsb + 0.5
