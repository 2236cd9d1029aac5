"""Lowered programs: delegate outputs are dtype edges, partitions are proved too."""

from __future__ import annotations

import copy

import pytest
import torch

import qflow

ORDINARY = ("conv_bn_relu6_residual", "conv_cat_skip", "attention", "linear_per_channel", "mixed_a16w8")


@pytest.mark.parametrize("name", ORDINARY + ("seed000_control",))
def test_clean_lowered_programs_prove_with_no_boundary_finding(built, name) -> None:
    r = qflow.analyze(built(name).lowered)
    assert r.proved, str(r)
    assert not [f for f in r.findings if f.kind == "delegate-dtype-mismatch"]


def test_a_lowered_program_is_not_proved_when_a_partition_miscomputes(built) -> None:
    """Proving only the boundaries would call seed 000's lowered program proved."""
    r = qflow.analyze(built("seed000_probe").lowered)
    assert not r.proved
    assert [(f.kind, f.node) for f in r.findings] == [
        ("requant-after-passthrough", "lowered_module_0/aten_cat_default")
    ]


def test_a_stale_float_boundary_dtype_is_a_delegate_dtype_mismatch(built) -> None:
    """Seed 002's symptom on a real lowered program: the parent declares float32
    for an output the TOSA flatbuffer writes as int8 (meta edited on a copy)."""
    ep = copy.deepcopy(built("seed000_control").lowered.exported_program())
    getitem = next(n for n in ep.graph.nodes if n.name == "getitem")
    getitem.meta["val"] = getitem.meta["val"].to(torch.float32)
    r = qflow.analyze(ep)
    [f] = [f for f in r.findings if f.kind == "delegate-dtype-mismatch"]
    assert f.node == "getitem" and f.severity == "error"
    assert "int8" in f.message and "float32" in f.message and "factor 4" in f.message
    assert "backend artifact" in f.message  # read from the TOSA flatbuffer


@pytest.fixture(scope="module")
def ethosu():
    """Seed 002 on the real pipeline: EthosUQuantizer + EthosUPartitioner + Vela."""
    from qflow.examples.models import lower_attention_ethosu

    return {forced: lower_attention_ethosu(force_view_exit=forced)[0] for forced in (True, False)}


def test_seed002_partition_exiting_at_a_view_is_a_delegate_dtype_mismatch(ethosu) -> None:
    r = qflow.analyze(ethosu[True])
    mismatches = [f for f in r.findings if f.kind == "delegate-dtype-mismatch"]
    assert mismatches and not r.proved
    int8 = [f for f in mismatches if "produces int8" in f.message]
    assert int8, [f.message for f in mismatches]
    f = int8[0]
    assert "declares float32" in f.message and "factor 4" in f.message
    assert "FoldAndAnnotateQParamsPass" in f.message and "view_copy" in f.message
    # every partition output the parent still declares float32 is one the fold made int8
    ep = ethosu[True].exported_program()
    float_getitems = {
        n.name for n in ep.graph.nodes if n.name.startswith("getitem") and n.meta["val"].dtype == torch.float32
    }
    assert {f.node for f in int8} == {f.node for f in mismatches} == float_getitems


def test_the_same_model_without_the_forced_exit_is_proved_at_the_boundaries(ethosu) -> None:
    r = qflow.analyze(ethosu[False])
    assert not [f for f in r.findings if f.kind == "delegate-dtype-mismatch"]
    assert r.proved, str(r)
