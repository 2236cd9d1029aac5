"""A dropped requant whose wrong codes no output sees (issue #27, `qflow.impact`), against the TOSA
reference model: the Arm fold drops a requant after a reshape, every code it hands the next linear
layer is off, but that layer's output is requantized into a range so narrow that the last linear layer
moves its output by a fraction of an LSB — proved, and the device agrees; with the same program's
ordinary range after the first layer the error reaches the output — an error, and the device agrees.
And a bias left in its old domain when an input's scale is edited after convert: an error (`bias-domain`),
and the device is off."""

from __future__ import annotations

import copy

import pytest
import torch

import qflow
from qflow.targets.arm import pipeline as arm


class ViewThenTwoLinears(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # (no biases: an edited input scale would leave them in another domain, `bias-domain`)
        self.first, self.second = torch.nn.Linear(16, 16, bias=False), torch.nn.Linear(16, 4, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x.reshape(1, 8, 16)))


def _is(node: torch.fx.Node, name: str) -> bool:
    return node.op == "call_function" and name in str(node.target)


def _requantized(gm: torch.fx.GraphModule, after: str, scale: float) -> torch.fx.GraphModule:
    """A copy whose quantize after the first `after` op (and its dequantizes) has `scale`."""
    gm = copy.deepcopy(gm)
    node = next(n for n in gm.graph.nodes if _is(n, after))
    q = next(u for u in node.users if _is(u, "quantize_per_tensor"))
    for n in [q, *(u for u in q.users if _is(u, "dequantize_per_tensor"))]:
        n.args = (n.args[0], scale, *n.args[2:])
    gm.recompile()
    return gm


@pytest.fixture(scope="module")
def programs() -> dict[str, tuple[torch.fx.GraphModule, torch.export.ExportedProgram, list[torch.Tensor]]]:
    torch.manual_seed(0)
    inputs = (torch.rand(1, 128) * 2 - 1,)
    gm = arm.quantize(ViewThenTwoLinears(), inputs)
    view_q = next(u for n in gm.graph.nodes if _is(n, "aten.reshape") for u in n.users)
    dropped = _requantized(gm, "aten.reshape", float(view_q.args[1]) * 3)  # every code the view copies is off
    out: dict[str, tuple[torch.fx.GraphModule, torch.export.ExportedProgram, list[torch.Tensor]]] = {}
    for name, moved in (("moving", dropped), ("masked", _requantized(dropped, "aten.linear", 2e-6))):
        ep = torch.export.export(moved, inputs)
        lowered = arm.lower(torch.export.export(moved, inputs), inputs)
        sweep = [(torch.linspace(-1, 1, 128).roll(k).reshape(1, 128),) for k in range(0, 128, 16)]
        out[name] = (moved, ep, [arm.run_tosa_reference(lowered, x)[0] - moved(*x) for x in (inputs, *sweep)])
    return out


def _output_lsb(gm: torch.fx.GraphModule) -> float:
    return float(next(n for n in reversed(list(gm.graph.nodes)) if _is(n, "dequantize_per_tensor")).args[1])


def test_a_dropped_requant_no_output_sees_is_proved_and_the_device_agrees(programs) -> None:
    gm, ep, diffs = programs["masked"]
    report = qflow.analyze(ep, target="arm-tosa")
    found = [f for f in report.findings if f.kind == "requant-after-passthrough"]
    assert report.proved and [f.severity for f in found] == ["info"], str(report)
    assert "masked" in found[0].message and found[0].bound_lsb is not None and found[0].bound_lsb <= 0.5
    measured = max(float(d.abs().max()) for d in diffs) / _output_lsb(gm)
    assert measured <= 1.0  # at most a rounding tie the other way


def test_the_same_drop_reaching_the_output_stays_an_error_and_the_device_agrees(programs) -> None:
    gm, ep, diffs = programs["moving"]
    report = qflow.analyze(ep, target="arm-tosa")
    found = [f for f in report.findings if f.kind == "requant-after-passthrough"]
    assert not report.proved and [f.severity for f in found] == ["error"], str(report)
    measured = max(float(d.abs().max()) for d in diffs) / _output_lsb(gm)
    assert measured > 2.0  # it miscomputes: the error was no false alarm
    # how far it moves the output, followed through both linear layers: a bound the device stays within
    assert found[0].output_lsb is not None and measured <= found[0].output_lsb + 0.5, (measured, found[0].output_lsb)


class RoundTrip(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(1, 8, 16).reshape(1, 128) * 1.0


def test_a_dropped_round_trip_through_a_coarser_grid_is_bounded_as_a_whole() -> None:
    """A → B → A across two reshapes, B 4.6× coarser: the fold drops both requants, so the device
    skips B's rounding — each dropped requant alone would misread every code (the finding says so,
    over 100 LSB), but together they move the output by B's half step, 2.3 LSB, rounded onto A: 2.
    qflow bounds the pair as a whole (`output_lsb`), and the TOSA reference model stays within it
    (measured 2, 2026-11-27)."""
    torch.manual_seed(0)
    inputs = (torch.rand(1, 128) * 2 - 1,)
    gm = arm.quantize(RoundTrip(), inputs)
    first = next(u for n in gm.graph.nodes if _is(n, "aten.reshape") for u in n.users)
    coarse = _requantized(gm, "aten.reshape", float(first.args[1]) * 4.6)
    lowered = arm.lower(torch.export.export(coarse, inputs), inputs)
    sweep = [(torch.linspace(-1, 1, 128).roll(k).reshape(1, 128),) for k in range(0, 128, 16)]
    diffs = [arm.run_tosa_reference(lowered, x)[0] - coarse(*x) for x in (inputs, *sweep)]
    measured = max(float(d.abs().max()) for d in diffs) / _output_lsb(coarse)
    report = qflow.analyze(torch.export.export(coarse, inputs), target="arm-tosa")
    found = [f for f in report.errors if f.kind == "requant-after-passthrough"]
    assert found and all(f.bound_lsb > 100 for f in found), str(report)
    reach = {f.output_lsb for f in found}
    assert len(reach) == 1 and next(iter(reach)) <= 3.0, str(report)
    assert 1.0 <= measured <= next(iter(reach)) + 0.5, (measured, reach)


def test_a_bias_left_in_its_old_domain_is_an_error_and_the_device_is_off() -> None:
    torch.manual_seed(0)
    inputs = (torch.rand(1, 8, 16) * 2 - 1,)
    gm = arm.quantize(torch.nn.Linear(16, 4), inputs)
    edited = copy.deepcopy(gm)
    q = next(n for n in edited.graph.nodes if _is(n, "quantize_per_tensor"))
    for n in [q, *(u for u in q.users if _is(u, "dequantize_per_tensor"))]:  # the input's scale, edited
        n.args = (n.args[0], float(n.args[1]) * 0.5, *n.args[2:])
    edited.recompile()
    report = qflow.analyze(torch.export.export(edited, inputs), target="arm-tosa")
    found = [f for f in report.findings if f.kind == "bias-domain"]
    assert [f.severity for f in found] == ["error"] and "adds 0.5× the bias" in found[0].message, str(report)
    lowered = arm.lower(torch.export.export(edited, inputs), inputs)
    measured = float((arm.run_tosa_reference(lowered, inputs)[0] - edited(*inputs)).abs().max()) / _output_lsb(edited)
    assert measured > 2.0
