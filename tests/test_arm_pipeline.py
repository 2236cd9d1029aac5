"""qflow on graphs from the real ExecuTorch 1.5.1 Arm pipeline.

Each model goes through the real quantizer (prepare_pt2e/convert_pt2e), real
export and to_edge, and the real TOSA partitioner, whose partitions are
captured right after the real FoldAndAnnotateQParamsPass.
"""

from __future__ import annotations

import pytest

import qflow

QDQ_FORMS = ("converted", "exported", "edge")
ORDINARY = ("conv_bn_relu6_residual", "conv_cat_skip", "attention", "linear_per_channel", "mixed_a16w8")


def _forms(b):
    for form in QDQ_FORMS:
        yield form, getattr(b, form)
    for i, part in enumerate(b.partitions):
        yield f"partition{i}", part


def _cat(report):
    return [f for f in report.findings if "cat" in f.node]


# -- seed 000 -------------------------------------------------------------------


def test_seed000_folded_partition_reports_the_cat(built) -> None:
    b = built("seed000_probe")
    [part] = b.partitions
    r = qflow.analyze(part)
    assert r.form == "folded" and r.proved is False
    [f] = r.findings
    assert f.kind == "passthrough-domain-change" and f.severity == "error"
    assert f.node == "aten_cat_default"
    assert f.produced["dtype"] == "int8" and f.produced["zero_point"] == 102
    assert f.produced["scale"] == pytest.approx(0.1)
    assert f.expected["dtype"] == "int16" and f.expected["zero_point"] == 0
    assert f.expected["scale"] == pytest.approx(1 / 32767)
    assert r.to_json()["obligations"]["violated"] == 1


def test_seed000_standalone_fold_reports_the_cat(built) -> None:
    """The seed's own reproduction: the fold pass run alone on the edge program."""
    r = qflow.analyze(built("seed000_probe").folded)
    assert [(f.kind, f.node) for f in r.findings] == [("passthrough-domain-change", "aten_cat_default")]


@pytest.mark.parametrize("form", QDQ_FORMS)
def test_seed000_qdq_says_the_requant_after_cat_must_not_be_folded(built, form) -> None:
    r = qflow.analyze(getattr(built("seed000_probe"), form))
    assert not r.proved
    [f] = r.findings
    assert f.kind == "requant-after-passthrough" and "cat" in f.node
    assert "must not be folded" in f.message
    assert f.produced["zero_point"] == 102 and f.expected["dtype"] == "int16"


def test_seed000_control_is_proved_in_every_form(built) -> None:
    b = built("seed000_control")
    for form, obj in [*_forms(b), ("folded", b.folded)]:
        r = qflow.analyze(obj)
        assert r.proved, (form, str(r))
        assert r.findings == [] and r.obligations["proved"] > 0


# -- ordinary models ----------------------------------------------------------------


@pytest.mark.parametrize("name", ORDINARY)
def test_ordinary_models_are_proved_in_qdq_and_folded_form(built, clean, name) -> None:
    b = built(name)
    assert b.partitions, "the model must be delegated"
    for form, obj in _forms(b):
        r = qflow.analyze(obj, name=f"{name}/{form}")
        clean(r, name)
        assert r.obligations["proved"] > 0


# -- the live 1.5.1 relu-fusion defect (issue 4 preview; found on stock models) -----


@pytest.mark.parametrize("name", ["conv_relu_cat_signed", "conv_relu_cat_skip", "seed001_tiny_conv_relu_cat"])
def test_fused_relu_with_zp_above_qmin_is_reported(built, name) -> None:
    b = built(name)
    r = qflow.analyze(b.edge)
    [f] = r.errors
    assert f.kind == "non-fuseable-activation" and "relu" in f.node
    assert "zp=" in f.message and "qmin" in f.message
    for part in b.partitions:
        kinds = {f.kind for f in qflow.analyze(part).findings}
        assert "unenforced-narrow-range" in kinds


# -- soundness: unknown ops ------------------------------------------------------------


def test_an_unknown_op_between_domains_is_unproven_never_proved(built) -> None:
    from qflow import ops

    b = built("seed000_control")
    ops.unregister("cat")
    try:
        r = qflow.analyze(b.edge)
    finally:
        ops.register("cat", "passthrough")
    assert not r.proved
    assert r.obligations["unproven"] >= 1
    assert any(f.kind == "unknown-op" and "cat" in f.node for f in r.findings) or any(
        "unknown op" in f.message for f in r.findings
    )


def test_a_qdq_program_with_stale_fold_annotations_is_still_read_as_qdq() -> None:
    """Lowering can leave the fold pass's qparam annotations on nodes of the Q/DQ program it
    exported (measured: the contract probe's a16w8 batch, two slice_copy nodes, 2026-11-25).
    A node so annotated that still reads a dequantize was not folded: the program must not be
    mistaken for a folded partition, whose reading skips the checks it needs (here: an int16
    exp, an unvalidated lowering, was proved)."""
    import torch
    from executorch.backends.arm.quantizer import get_symmetric_a16w8_quantization_config

    from qflow.targets.arm import pipeline as arm

    class SliceExp(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.exp(x[:, 1:3, 2:7])

    x = (torch.randn(1, 4, 8, 8),)
    gm = arm.quantize(SliceExp(), x, spec="TOSA-1.0+INT+int16", config=get_symmetric_a16w8_quantization_config())
    before = qflow.analyze(gm, target="arm-tosa")
    sliced = next(n for n in gm.graph.nodes if "slice" in str(n.target))
    sliced.meta["input_qparams"] = {0: "as the fold pass left it"}
    after = qflow.analyze(gm, target="arm-tosa")
    assert before.form == after.form == "qdq"
    assert after.status == before.status == "unproven"
    assert {f.kind for f in after.findings} == {f.kind for f in before.findings} >= {"unvalidated-lowering"}


# -- the Arm suite's torch_functions models (models/test_torch_functions.py): sizes and factory ops ---------


@pytest.fixture(scope="module")
def arange_program():
    """The suite's `arange` case: x + arange(0, 10, 2) as float. The Arm quantizer annotates the arange's
    cast as int32 codes of scale 1, then requantizes it to int8; to_edge folds it all into one constant."""
    import torch

    from qflow.targets.arm import pipeline as arm

    class AddArange(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.arange(0, 10, 2).to(torch.float32)

    x = (torch.rand(1),)
    ep = torch.export.export(arm.quantize(AddArange(), x), x, strict=True)
    with arm.capture_after() as partitions:
        edge = arm.lower(ep, x)
    return ep, partitions, edge, x


def test_a_factory_op_cast_to_codes_is_proved_in_every_form(arange_program) -> None:
    """Measured on the TOSA reference model: the lowered program equals the fake-quantized one. qflow proves
    the cast of the arange (plain integers, no domain) before partitioning, in the folded partition
    (integers as their own int32 codes of scale 1) and in the TOSA artifact (the pre-computed constant is
    the arange's codes in the int8 domain the requant after it declares)."""
    import torch

    from qflow.targets.arm import pipeline as arm

    ep, partitions, edge, x = arange_program
    for xi in (x, (torch.zeros(1),), (torch.ones(1),)):
        assert torch.equal(arm.run_tosa_reference(edge, xi)[0], ep.module()(*xi))
    reports = [qflow.analyze(ep, target="arm-tosa"), *(qflow.analyze(p, target="arm-tosa") for p in partitions)]
    reports.append(qflow.analyze(edge, target="arm-tosa", reference=ep))
    assert len(reports) == 3 and all(r.status == "proved" for r in reports), "\n".join(map(str, reports))


def test_a_constant_with_other_codes_is_not_anchored(arange_program, monkeypatch) -> None:
    """The pre-computed constant is anchored only when its codes are the arange's in that domain: when the
    PT2E computation says another value (2 → 3), the artifact check cannot say what it holds."""
    from qflow.targets.arm import tosa_constants

    ep, _, edge, _ = arange_program
    real = tosa_constants._evaluate
    monkeypatch.setattr(tosa_constants, "_evaluate", lambda p, n: None if (v := real(p, n)) is None else v + (v == 2))
    report = qflow.analyze(edge, target="arm-tosa", reference=ep)
    assert report.status == "unproven" and "reference-needed" in {f.kind for f in report.findings}, str(report)


def test_a_size_carries_no_domain() -> None:
    """The suite's `nonzero` case: export writes `sym_size` and `torch._check` comparisons on it for the
    data-dependent size; they are sizes, not unknown ops (nothing is quantized: the suite sets no IO
    quantization)."""
    import torch

    from qflow.targets.arm import pipeline as arm

    class NonZero(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nonzero(x)

    x = (torch.rand(1, 6, 16, 16),)
    quantizer = arm.default_quantizer()
    quantizer.set_io(None)
    ep = torch.export.export(arm.quantize(NonZero(), x, quantizer=quantizer), x, strict=True)
    assert any("sym_size" in str(n.target) for n in ep.graph.nodes)
    for program in (ep, arm.lower(ep, x)):
        report = qflow.analyze(program, target="arm-tosa")
        assert report.status == "nothing-quantized" and not report.findings, str(report)
