"""An op a backend computes off by input code, weighed one code of its source at a time.

Cortex-M leaves a relu after a sigmoid on the sigmoid's codes with its bound 0 as written: codes below 0
(zero point -128) become 0, so it is off on the lower half of the sigmoid's domain. Where the value the
sigmoid reads is also added beside it, that half is where the add's output domain may already clip: campaign
case 00226-cm, `a + relu(sigmoid(a))` with `a = avg_pool2d(x)`, is exact on the reference kernels and was
an error (bounded 1.2 output LSB: whole ranges pair the relu's worst code with the add's values that do not
saturate). One code of `a` at a time, the relu's error is the one of the codes that code reaches
(`qflow.solvers.by_code`, `landing._off_where_reached`).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import qflow
from qflow.targets.cortex_m import pipeline as cortex_m

ACTIVATIONS = {
    "relu": torch.relu,
    "hardtanh": lambda v: F.hardtanh(v, 0.0, 0.3),
    "clamp": lambda v: torch.clamp(v, min=0.1),
}
COMBINE = {"add": torch.add, "sub": torch.sub, "mul": torch.mul}
SQUASH = {"sigmoid": torch.sigmoid, "tanh": torch.tanh}


class OnCodesBeside(nn.Module):
    """``a (op) act(squash(a))``, ``a = avg_pool2d(x, 4)``: Cortex-M runs the activation on the squash's codes."""

    def __init__(self, squash: str = "sigmoid", act: str = "relu", op: str = "add") -> None:
        super().__init__()
        self.squash, self.act, self.op = squash, act, op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = F.avg_pool2d(x, 4)
        return COMBINE[self.op](a, ACTIVATIONS[self.act](SQUASH[self.squash](a)))


WINDOWS = 1024  # (4 channels of 16 x 16 windows of 4 x 4: one level of x each)


def _windows(values: torch.Tensor) -> torch.Tensor:
    """x with window k (of 4 x 4 elements) holding `values[k]` (16 values each, or one repeated)."""
    w = values.reshape(WINDOWS, -1).expand(WINDOWS, 16).reshape(4, 16, 16, 4, 4)
    return w.permute(0, 1, 3, 2, 4).reshape(1, 4, 64, 64).contiguous()


def _calibration(averages: list[float]) -> list[tuple[torch.Tensor]]:
    """One sample per average: every window spans what it can of x's range [-4, 0] around that average (so the
    average pool's domain, shared with x's, is [-4, 0], while what reads its values is calibrated on the
    average alone)."""
    out = []
    for mean in averages:
        half = min(mean + 4.0, -mean)
        out.append((_windows(mean + half * torch.linspace(-1.0, 1.0, 16).expand(WINDOWS, 16)),))
    out[0][0][0, 0, 0, :2] = torch.tensor([-4.0, 0.0])
    return out


EVERY_LEVEL = (_windows(torch.linspace(-4.0, 0.0, WINDOWS)),)  # (a on every code of its domain)


def _on_kernels(model: nn.Module, averages: list[float]) -> tuple[Any, Any, Any, float]:
    """(exported PT2E program, the program after CortexMPassManager, the program it came from, the reference
    kernels' largest error over every level of x, in output LSB)."""
    xs = _calibration(averages)
    converted = cortex_m.quantize(model.eval(), xs)
    given, program = cortex_m.lower(converted, xs[0])
    want = converted(*cortex_m.channels_last(EVERY_LEVEL))
    [dq] = converted.graph.output_node().args[0]
    err = float((cortex_m.run(program, EVERY_LEVEL)[0] - want).abs().max()) / float(dq.args[1])
    return torch.export.export(converted, cortex_m.channels_last(xs[0])), program, given, err


#: a averages between -2.5 and -2 in calibration: the sigmoid's domain is [0, 0.12], its code 0 is a = -2.76,
#: below which the add's output domain (from -2.42) clips on both sides — exact. With averages up to -0.5,
#: code 0 is a = -1.46, where the add does not clip: 12 output LSB off.
CASES = {"exact": [-2.5, -2.0], "miscompile": [-2.5, -2.0, -0.5]}


@pytest.fixture(scope="module")
def beside() -> dict[str, Any]:
    return {k: _on_kernels(OnCodesBeside(), w) for k, w in CASES.items()}


def test_an_activation_off_only_where_the_output_clips_proves(beside) -> None:
    ep, program, given, err = beside["exact"]
    assert err <= 1.0, f"{err} output LSB off on the Cortex-M reference kernels"
    for report in (qflow.analyze(ep, target="cortex-m"), qflow.analyze(program, target="cortex-m", reference=given)):
        assert report.proved, str(report)
        [info] = [f for f in report.findings if f.kind == "real-constant-on-codes"]
        assert "reaches no program output" in info.message, info.message


def test_an_activation_off_where_the_output_does_not_clip_is_an_error_bounded_above_the_kernels(beside) -> None:
    ep, program, given, err = beside["miscompile"]
    assert err > 4.0, f"only {err} output LSB off on the Cortex-M reference kernels"
    for report in (qflow.analyze(ep, target="cortex-m"), qflow.analyze(program, target="cortex-m", reference=given)):
        [error] = report.errors
        assert error.kind == "real-constant-on-codes", str(error)
        assert error.output_lsb is not None and err < error.output_lsb + 1, (err, error.output_lsb)


def _random(seed: int) -> tuple[OnCodesBeside, list[float]]:
    """A random squash, activation and op; a calibrated between lo and lo + 0.7 (the add / sub / mul's domain
    then clips near where the activation's code 0 falls, on one side of it or the other)."""
    g = torch.Generator().manual_seed(seed)
    pick = lambda names: names[int(torch.randint(len(names), (1,), generator=g))]  # noqa: E731
    model = OnCodesBeside(pick(list(SQUASH)), pick(list(ACTIVATIONS)), pick(list(COMBINE)))
    lo = float(torch.rand(1, generator=g)) * -3.0 - 0.8
    hi = lo + float(torch.rand(1, generator=g)) * 0.7
    return model, [lo, hi]


def test_errors_by_code_proved_only_where_every_level_is_exact() -> None:
    """16 random programs of the shape, run on the Cortex-M reference kernels with x on every level of its
    domain: whatever qflow proves (before the passes and after them) is exact there, and every bound holds (an
    error of b output LSB before the last rounding moves a code by less than b + 1)."""
    tally: dict[str, int] = {}
    for seed in range(16):
        model, averages = _random(seed)
        ep, program, given, err = _on_kernels(model, averages)
        exact = err <= 1.0
        reports = (qflow.analyze(ep, target="cortex-m"), qflow.analyze(program, target="cortex-m", reference=given))
        for report in reports:
            assert exact or not report.proved, f"seed {seed}: proved, {err:.1f} output LSB off: {model.__dict__}"
            for f in report.errors:
                assert f.output_lsb is None or err < f.output_lsb + 1, (seed, f.kind, err, f.output_lsb)
        key = ("proved " if reports[0].proved else "flagged " if reports[0].errors else "unproven ") + (
            "exact" if exact else "miscompile"
        )
        tally[key] = tally.get(key, 0) + 1
    print(tally)
    assert tally.get("proved exact") and tally.get("flagged miscompile"), tally  # (the family has both kinds)
