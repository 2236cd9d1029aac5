"""A mask computed from wrong codes: the where it drives is only as right as the comparison.

Real Arm pipeline, stock per-tensor quantizer: ``y = -relu(x)``, then ``where(y > c, x * 0.5, x * 0.25)``.
Arm lowers the neg with the zero points only, so y's codes keep the relu's scale (1.333x the declared one):
y is wrong, and only the comparison reads it.

- c = -1.5: wrong values of y cross c, the where picks the other branch, and the TOSA reference model is
  0.49 (63 output LSB) off the quantized program. qflow proved it before 2026-12-02: the comparison's bool
  had no edge from y, so the wrong codes reached no output.
- c = 0.0, the top of y's domain: y > c is false on every code y can have, right or wrong, so the where is
  x * 0.25 everywhere and the program computes right: proved, before partitioning and lowered.

A comparison of two grids (`rounded-comparison`): ``where(x * 0.5 > t, x * 0.5, x * 0.25)`` with the comparison's
operands given fixed int8 grids. Arm rescales both onto the finer one and rounds the coarser's codes there: with
0.02 and 0.042, t = 0.294 rounds to 0.30, and the one code of x * 0.5 at 0.30 compares the other way (mask
campaign 00374-mk-arm-custom: 115 LSB); with 0.02 and 0.04 every code of t lands on the finer grid.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import qflow
from qflow.examples.models import _fixed_qspec
from qflow.targets.arm import pipeline as arm
from qflow.targets.cortex_m import pipeline as cortex_m

X = (torch.linspace(-1.0, 3.0, 64).reshape(1, 4, 4, 4),)


class Masked(nn.Module):
    def __init__(self, c: float) -> None:
        super().__init__()
        self.c = c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = -torch.relu(x)
        return torch.where(y > self.c, x * 0.5, x * 0.25)


def _built(model: nn.Module, x: tuple[torch.Tensor, ...], quantizer: Any = None) -> tuple[Any, ...]:
    """(converted, exported, lowered, the TOSA reference model's largest error, the output's step)."""
    converted = arm.quantize(model, x) if quantizer is None else arm.quantize(model, x, quantizer=quantizer)
    ep = torch.export.export(converted, x, strict=True)
    lowered = arm.lower(ep, x)
    [got], want = arm.run_tosa_reference(lowered, x), converted(*x)
    return converted, ep, lowered, float((got - want).abs().max()), float(want.unique().diff().min())


@pytest.fixture(scope="module")
def programs() -> dict[float, Any]:
    return {c: _built(Masked(c), X) for c in (0.0, -1.5)}


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


class Threshold(nn.Module):
    def __init__(self, t: float) -> None:
        super().__init__()
        self.t = t

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x * 0.5 > self.t, x * 0.5, x * 0.25)


class TwoGrids(arm.TOSAQuantizer):
    """The stock per-tensor annotation (which gives both operands of a comparison one domain), then a fixed
    int8 grid for each operand of the comparison, as its producer writes it."""

    def __init__(self, scales: tuple[float, float]) -> None:
        super().__init__(arm.TosaCompileSpec(arm.DEFAULT_SPEC))
        self.set_global(arm.get_symmetric_quantization_config(is_per_channel=False))
        self.scales = scales

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        model = super().annotate(model)
        gt = next(n for n in model.graph.nodes if getattr(n.target, "__name__", "").startswith("gt"))
        for src, scale in zip(gt.args, self.scales, strict=True):
            spec = _fixed_qspec(
                scale=scale, zero_point=0, dtype=torch.int8, qscheme=torch.per_tensor_affine, quant_min=-128,
                quant_max=127,
            )  # fmt: skip
            gt.meta["quantization_annotation"].input_qspec_map[src] = spec
            src.meta["quantization_annotation"].output_qspec = spec
        return model


DENSE = (torch.linspace(-1.0, 3.0, 1024).reshape(1, 4, 16, 16),)  # (every code of x * 0.5 up to 1.5)


@pytest.fixture(scope="module")
def thresholds() -> dict[float, Any]:
    return {t: _built(Threshold(t), DENSE, TwoGrids(s)) for t, s in ((0.294, (0.02, 0.042)), (0.28, (0.02, 0.04)))}


def test_a_threshold_the_backend_rounds_onto_the_finer_grid_is_unproven(thresholds) -> None:
    """Before 2026-12-02 qflow proved it: 19 output LSB off on the TOSA reference model."""
    converted, ep, lowered, err, step = thresholds[0.294]
    assert err > 10 * step, f"only {err} off on the TOSA reference model"
    for report in (
        qflow.analyze(converted, target="arm-tosa"),
        qflow.analyze(lowered, target="arm-tosa", reference=ep),
    ):
        assert report.status == "unproven", str(report)
        [found] = [f for f in report.findings if f.kind == "rounded-comparison"]
        assert "codes 15 and 7" in found.message, found.message  # (0.30 > 0.294 in the program, 15 > 15 on TOSA)


def test_a_threshold_on_the_finer_grid_proves(thresholds) -> None:
    converted, ep, lowered, err, step = thresholds[0.28]
    assert err <= 1.01 * step, f"{err} off on the TOSA reference model (output step {step})"
    assert qflow.analyze(converted, target="arm-tosa").proved
    assert qflow.analyze(lowered, target="arm-tosa", reference=ep).proved


def test_before_calibration_a_comparison_of_two_observers_is_unproven() -> None:
    """The annotated graph: two operands observed apart may calibrate to grids that round apart (unproven);
    the stock annotation observes both operands of a comparison as one (no finding)."""

    def annotated(quantizer: Any) -> torch.fx.GraphModule:  # (the scalar threshold made a tensor first)
        return quantizer.annotate(quantizer.transform_for_annotation(arm.export_module(Threshold(0.294), DENSE)))

    report = qflow.analyze(annotated(TwoGrids((0.02, 0.042))), target="arm-tosa")
    assert report.form == "annotated" and report.status == "unproven", str(report)
    assert "rounded-comparison" in {f.kind for f in report.findings}
    shared = qflow.analyze(annotated(arm.default_quantizer()), target="arm-tosa")
    assert shared.form == "annotated" and "rounded-comparison" not in {f.kind for f in shared.findings}, str(shared)


class FilledBelow(nn.Module):
    """``x.masked_fill(sigmoid(relu(x) + lo) > 0.25, -1.0)``: Cortex-M keeps the comparison on the sigmoid's
    codes (zero point -128) with 0.25 as written, so it flips on the codes of (0.25, 0.5]; with lo = 0.5 the
    sigmoid stays above 0.62 and no code it reaches flips."""

    def __init__(self, lo: float) -> None:
        super().__init__()
        self.lo = lo

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.masked_fill(torch.sigmoid(torch.relu(x) + self.lo) > 0.25, -1.0)


class FilledTwice(nn.Module):
    """The mask menu's shape (campaign case 00022-mk-cm): the flipped mask fills 0 among values <= 0, and
    what reads the fill keeps only values >= 0 — every value the flip can pick becomes the same code."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = -torch.relu(x)
        return torch.relu(y.masked_fill(torch.sigmoid(x) > 0.25, 0.0)) + x


class FilledWhereBelow(nn.Module):
    """Campaign case 00010-mk-cm: ``x > 0`` flips on the codes of x in (-2, 0] (zero point 58), which fill 0
    where the program keeps ``minimum(x - 1, x)`` — at most 0 there, as the fill — so ``> 0.5`` of the filled
    values is false on both sides. Over whole tensors the filled values reach 3 (where x > 0): qflow weighs the
    flip on the elements it flips."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = torch.minimum(x - 1.0, x).masked_fill(x > 0, 0.0)
        return x.masked_fill(m > 0.5, -3.0)


CM_X = [(torch.linspace(-4.0, 4.0, 64).reshape(1, 4, 4, 4),), (torch.linspace(-0.5, 0.5, 64).reshape(1, 4, 4, 4),),
        (torch.linspace(-2.0, 3.0, 64).reshape(1, 4, 4, 4),)]  # fmt: skip


@pytest.fixture(scope="module")
def cortex_m_masks() -> dict[str, Any]:
    """name → (the exported PT2E program, the program after CortexMPassManager, the program it came from,
    the Cortex-M reference kernels' largest error, the output's step)."""
    out = {}
    models = {"reached": FilledBelow(-3.0), "unreached": FilledBelow(0.5), "twice": FilledTwice(),
              "where-below": FilledWhereBelow()}  # fmt: skip
    for name, model in models.items():
        converted = cortex_m.quantize(model.eval(), CM_X)
        given, program = cortex_m.lower(converted, CM_X[0])
        wants = [converted(*cortex_m.channels_last(x)) for x in CM_X]
        err = max(float((cortex_m.run(program, x)[0] - w).abs().max()) for x, w in zip(CM_X, wants, strict=True))
        [dq] = converted.graph.output_node().args[0]  # (the output's dequantize: its scale is the output's step)
        ep = torch.export.export(converted, cortex_m.channels_last(CM_X[0]))
        out[name] = (ep, program, given, err, float(dq.args[1]))
    return out


def test_cortex_m_a_mask_flipped_on_codes_the_values_reach_is_an_error(cortex_m_masks) -> None:
    ep, program, given, err, step = cortex_m_masks["reached"]
    assert err > 10 * step, f"only {err} off on the Cortex-M reference kernels"
    [error] = qflow.analyze(ep, target="cortex-m").errors
    assert (error.kind, error.node) == ("real-constant-on-codes", "gt"), str(error)
    [error] = qflow.analyze(program, target="cortex-m", reference=given).errors
    assert error.kind == "real-constant-on-codes", str(error)


@pytest.mark.parametrize("name", ["unreached", "twice", "where-below"])
def test_cortex_m_a_mask_whose_flip_moves_no_output_proves(cortex_m_masks, name: str) -> None:
    """Before 2026-12-02 all three were errors: a comparison on codes that flips anywhere in the dtype."""
    ep, program, given, err, step = cortex_m_masks[name]
    assert err <= 1.01 * step, f"{err} off on the Cortex-M reference kernels (output step {step})"
    assert qflow.analyze(ep, target="cortex-m").proved
    assert qflow.analyze(program, target="cortex-m", reference=given).proved


class TwoFlips(nn.Module):
    """``where(x > t1, x, f1).masked_fill(x > t2, f2)``: two comparisons of one input, each of which Cortex-M
    runs on x's codes with its threshold as written. Whole-tensor ranges say only that each bool can be
    either; one code of x at a time, both sides of each comparison are known (`qflow.solvers.by_code`)."""

    def __init__(self, t1: float, f1: float, t2: float, f2: float) -> None:
        super().__init__()
        self.t1, self.f1, self.t2, self.f2 = t1, f1, t2, f2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > self.t1, x, self.f1).masked_fill(x > self.t2, self.f2)


def _every_code(lo: float, hi: float) -> list[tuple[torch.Tensor, ...]]:
    """Inputs that put x on every code of the domain calibrated on [lo, hi] (4096 points over the range)."""
    return [(torch.linspace(lo, hi, 4096).reshape(1, 4, 32, 32),)]


def _on_kernels(model: nn.Module, xs: list[tuple[torch.Tensor, ...]]) -> tuple[Any, Any, Any, float, float]:
    converted = cortex_m.quantize(model.eval(), xs)
    given, program = cortex_m.lower(converted, xs[0])
    want = converted(*cortex_m.channels_last(xs[0]))
    err = float((cortex_m.run(program, xs[0])[0] - want).abs().max())
    [dq] = converted.graph.output_node().args[0]
    return torch.export.export(converted, cortex_m.channels_last(xs[0])), program, given, err, float(dq.args[1])


#: (t1, f1, t2, f2, the range x is calibrated on). Campaign case 00045-mk-cm-custom's shape: x >= 0 (zero point
#: -128); x > 0 flips on x's codes of (0, 1], x > -1.5 on the code of 0 alone, where both sides fill -1 into
#: an output that holds only 0 — exact, an error before 2026-12-03. With x > 0.5 filling instead, the two
#: flips pick different branches on the codes between: a miscompile.
TWO_FLIPS = {"exact": (0.0, -1.0, -1.5, 0.0, (0.0, 2.0)), "miscompile": (0.0, -1.0, 0.5, 0.0, (0.0, 2.0))}


@pytest.fixture(scope="module")
def two_flips() -> dict[str, Any]:
    return {k: _on_kernels(TwoFlips(*p[:4]), _every_code(*p[4])) for k, p in TWO_FLIPS.items()}


def test_cortex_m_two_flips_that_agree_on_every_code_prove(two_flips) -> None:
    ep, program, given, err, step = two_flips["exact"]
    assert err <= 1.01 * step, f"{err} off on the Cortex-M reference kernels (output step {step})"
    assert qflow.analyze(ep, target="cortex-m").proved, str(qflow.analyze(ep, target="cortex-m"))
    assert qflow.analyze(program, target="cortex-m", reference=given).proved


def test_cortex_m_two_flips_that_pick_apart_are_errors(two_flips) -> None:
    ep, program, given, err, step = two_flips["miscompile"]
    assert err > 10 * step, f"only {err} off on the Cortex-M reference kernels"
    assert {f.kind for f in qflow.analyze(ep, target="cortex-m").errors} == {"real-constant-on-codes"}
    assert qflow.analyze(program, target="cortex-m", reference=given).errors


class Flips(nn.Module):
    """Two selects driven by comparisons of one input x, each ``>`` or ``<`` a threshold."""

    def __init__(self, ops: tuple[str, str], ts: tuple[float, float], fills: tuple[float, float]) -> None:
        super().__init__()
        self.ops, self.ts, self.fills = ops, ts, fills

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m1, m2 = ((x > t) if op == "gt" else (x < t) for op, t in zip(self.ops, self.ts, strict=True))
        return torch.where(m1, x, self.fills[0]).masked_fill(m2, self.fills[1])


def _random_flips(seed: int) -> tuple[Flips, tuple[float, float]]:
    g = torch.Generator().manual_seed(seed)
    lo, hi = sorted(float(v) for v in (torch.rand(2, generator=g) * 6 - 3))
    lo = min(lo, 0.0) if seed % 2 else lo  # (half of them a range with 0 inside or at an end)
    pick = lambda: float(torch.empty(1).uniform_(lo - 0.5, hi + 0.5, generator=g))  # noqa: E731
    ops = tuple("gt" if torch.rand(1, generator=g) < 0.5 else "lt" for _ in range(2))
    fills = tuple(pick() if torch.rand(1, generator=g) < 0.5 else 0.0 for _ in range(2))
    return Flips(ops, (pick(), pick()), fills), (lo, hi)  # type: ignore[arg-type]


def test_cortex_m_two_flips_proved_only_where_every_code_agrees() -> None:
    """40 random programs of two comparisons of one input, run on the Cortex-M reference kernels with x on
    every code of its domain: whatever qflow proves (before the passes and after them) is exact there."""
    tally = {"proved exact": 0, "flagged exact": 0, "flagged miscompile": 0}
    for seed in range(40):
        model, (lo, hi) = _random_flips(seed)
        ep, program, given, err, step = _on_kernels(model, _every_code(lo, hi))
        exact = err <= 1.01 * step
        for report in (
            qflow.analyze(ep, target="cortex-m"),
            qflow.analyze(program, target="cortex-m", reference=given),
        ):
            assert exact or not report.proved, f"seed {seed}: proved, {err / step:.1f} output LSB off: {model.__dict__}"
        key = ("proved " if qflow.analyze(ep, target="cortex-m").proved else "flagged ") + (
            "exact" if exact else "miscompile"
        )
        tally[key] = tally.get(key, 0) + 1
    print(tally)
    assert tally["proved exact"] and tally["flagged miscompile"], tally  # (the family has both kinds)
