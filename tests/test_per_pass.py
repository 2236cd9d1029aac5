"""The pass that broke it: partitions stepped through the real Arm pass pipeline."""

from __future__ import annotations

import json

import pytest

import qflow
from qflow.cli import bundled_examples, main
from qflow.targets.arm import per_pass


@pytest.fixture(scope="module")
def blames(built):
    cache: dict[str, list[per_pass.Blame]] = {}

    def get(name: str) -> list[per_pass.Blame]:
        if name not in cache:
            cache[name] = per_pass.blame_lowered(built(name).lowered, qflow.analyze)
        return cache[name]

    return get


def test_seed000_is_broken_by_the_fold_pass(blames) -> None:
    [b] = blames("seed000_probe")
    assert (b.index, b.pass_name) == (14, "FoldAndAnnotateQParamsPass")
    assert [(f.kind, f.node) for f in b.findings] == [("passthrough-domain-change", "aten_cat_default")]
    # every stage before it proved the obligation that then fails
    assert all(not s.violated for s in b.steps[:-1]) and len(b.steps) == 16


@pytest.mark.parametrize("name", ["conv_relu_cat_signed", "conv_relu_cat_skip"])
def test_the_relu_fusion_defect_is_named_where_the_narrowed_range_becomes_a_claim(blames, name) -> None:
    """FuseQuantizedActivationPass (#1) narrows the quantize's qmin, which the
    Q/DQ graph still honours (a quantize clamps); the fold moves the narrowed
    range onto the conv, whose rescale does not clamp: the obligation breaks there."""
    [b] = blames(name)
    assert b.pass_name == "FoldAndAnnotateQParamsPass"
    assert [f.kind for f in b.findings] == ["unenforced-narrow-range"]
    assert "convolution" in b.findings[0].node


def test_a_clean_partition_is_broken_by_no_pass(blames) -> None:
    [b] = blames("conv_cat_skip")
    assert b.index is None and b.findings == []
    assert len(b.steps) > 100  # the whole pipeline ran, every stage analysed or said why not
    assert "no pass of" in str(b)


def test_cli_per_pass_names_the_fold_pass(capsys) -> None:
    seed = next(p for p in bundled_examples() if "cat_requant" in p.name)
    code = main(["check", str(seed), "--arm", "TOSA-1.0+INT+int16", "--per-pass", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    report = out[0] if isinstance(out, list) else out
    assert code == 1
    assert "first broken by pass #14 FoldAndAnnotateQParamsPass" in report["notes"][0]
    assert [f["kind"] for f in report["findings"] if f["severity"] == "error"] == ["passthrough-domain-change"]


def test_cli_per_pass_needs_arm(capsys) -> None:
    assert main(["check", "--per-pass"]) == 2
    assert "--per-pass needs --arm" in capsys.readouterr().err
