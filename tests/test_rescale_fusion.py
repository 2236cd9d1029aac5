"""Requants the Arm backend skips (soundness campaign case 00892-tx-arm-pc).

``x + c`` into a LayerNorm, stock a8w8: the LayerNorm's two ``sub`` read the ``add``'s output, and
both ops are computed on int32 between rescales. The rescale of the sum to its int8 domain and the
``sub``'s rescale of that back to int32 compose to 1.0, so Arm's FuseConsecutiveRescalesPass removes
both and the ``sub`` reads the unrounded sum; the rsqrt after it turns the skipped half LSB into
several output LSB on the TOSA reference model. qflow predicts the pair before partitioning (from
the domains and the pass's int32 scales) and finds it in the TOSA artifact: unproven, never proved.
With ``x + 3`` the two scales differ, nothing is fused, and it proves and computes right.
"""

from __future__ import annotations

import pytest
import torch

import qflow
from qflow.targets.arm import pipeline as arm


class AddThenNorm(torch.nn.Module):
    def __init__(self, c: float) -> None:
        super().__init__()
        self.c = c
        self.norm = torch.nn.LayerNorm(4)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.3, 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.c)


def _build(c: float):
    torch.manual_seed(0)
    model = AddThenNorm(c).eval().requires_grad_(False)
    samples = [(torch.rand(1, 2, 4, 4) * 4.9 - 2.94,) for _ in range(6)]
    converted = arm.quantize(model, samples[0])
    exported = torch.export.export(converted, samples[0])
    lowered = arm.lower(exported, samples[0])
    out_q = [n for n in converted.graph.nodes if n.op == "call_function" and "quantize_per_tensor" in str(n.target)]
    scale = float(out_q[-1].args[1])
    lsb = max(
        float((arm.run_tosa_reference(lowered, s)[0].reshape(converted(*s).shape) - converted(*s)).abs().max()) / scale
        for s in samples
    )
    return exported, lowered, lsb


@pytest.fixture(scope="module")
def fused():
    return _build(-0.25)


@pytest.fixture(scope="module")
def not_fused():
    return _build(3.0)


def test_the_backend_skips_the_requant_and_computes_off(fused) -> None:
    *_, lsb = fused
    assert lsb > 2  # measured: 3 output LSB (campaign case 00892: 7)


@pytest.mark.parametrize("target", ["arm-tosa", None])
def test_before_partitioning_both_subs_are_unproven(fused, target) -> None:
    exported, *_ = fused
    r = qflow.analyze(exported, target=target)
    assert r.status == "unproven" and not r.errors
    assert sorted((f.kind, f.node) for f in r.findings) == [("skipped-requant", "sub"), ("skipped-requant", "sub_1")]
    assert all("FuseConsecutiveRescalesPass" in f.message and "add" in f.message for f in r.findings)


def test_on_xnnpack_nothing_is_skipped(fused) -> None:
    exported, *_ = fused
    assert not [f for f in qflow.analyze(exported, target="xnnpack").findings if f.kind == "skipped-requant"]


def test_the_tosa_artifact_shows_the_same_two_subs(fused) -> None:
    exported, lowered, _ = fused
    for r in (
        qflow.analyze(lowered, target="arm-tosa", reference=exported),
        qflow.analyze(lowered.to_executorch().buffer),
    ):
        artifact = [f for f in r.findings if f.kind == "skipped-requant" and "/tosa#" in f.node]
        assert len(artifact) == 2 and not r.proved
        assert all("SUB" in f.message and "the int32 result of ADD" in f.message for f in artifact)


def test_where_the_scales_do_not_compose_it_proves_and_computes_right(not_fused) -> None:
    exported, lowered, lsb = not_fused
    assert lsb <= 1
    assert qflow.analyze(exported, target="arm-tosa").proved
    assert qflow.analyze(lowered, target="arm-tosa", reference=exported).proved


@pytest.mark.parametrize("c", [-0.25, 3.0])
def test_before_calibration_both_subs_are_unproven_whatever_the_constant(c) -> None:
    """The annotated graph has no scales yet: whether the pairs fuse is decided by calibration (with
    -0.25 they do and the backend is off; with 3.0 they do not), so both are unproven there, never proved
    (the campaign proved 9 transformer programs on the annotated graph that the backend computes wrong)."""
    torch.manual_seed(0)
    x = torch.rand(1, 2, 4, 4) * 4.9 - 2.94
    quantizer = arm.default_quantizer()  # (as prepare_pt2e: the decompositions first, then the annotation)
    annotated = quantizer.annotate(quantizer.transform_for_annotation(arm.export_module(AddThenNorm(c).eval(), (x,))))
    r = qflow.analyze(annotated, target="arm-tosa")
    assert r.form == "annotated" and r.status == "unproven" and not r.errors, str(r)
    subs = [f for f in r.findings if f.kind == "skipped-requant" and f.node.startswith("sub")]
    assert len(subs) == 2 and all("reads add" in f.message for f in subs), str(r)
    assert all("FuseConsecutiveRescalesPass" in f.message for f in r.findings if f.kind == "skipped-requant")
    assert not [f for f in qflow.analyze(annotated, target="xnnpack").findings if f.kind == "skipped-requant"]
