"""Bad input: a clear qflow error naming the node, never a deep traceback."""

from __future__ import annotations

import copy

import pytest

import qflow
from qflow.errors import InputError


def test_a_non_graph_is_rejected() -> None:
    with pytest.raises(InputError, match="cannot analyse a int"):
        qflow.analyze(42)


def test_a_quantize_missing_arguments_names_the_node(built) -> None:
    gm = copy.deepcopy(built("seed000_control").converted)
    q = next(n for n in gm.graph.nodes if str(n.target).endswith(".quantize_per_tensor.default"))
    q.args = q.args[:2]
    with pytest.raises(InputError) as e:
        qflow.analyze(gm)
    assert e.value.node == q.name and "arguments" in str(e.value)


def test_malformed_qparams_meta_names_the_node(built) -> None:
    ep = copy.deepcopy(built("seed000_control").partitions[0])
    cat = next(n for n in ep.graph.nodes if "cat" in n.name)
    cat.meta["output_qparams"] = {0: "not quant args"}
    with pytest.raises(InputError) as e:
        qflow.analyze(ep)
    assert e.value.node == cat.name


def test_a_missing_file_is_an_input_error(tmp_path) -> None:
    with pytest.raises(InputError, match="no such file"):
        qflow.analyze(tmp_path / "nope.pt2")
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"not a zip")
    with pytest.raises(InputError, match="not a .pt2 archive"):
        qflow.analyze(bad)


def test_a_directory_is_named_as_one(tmp_path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        qflow.analyze(tmp_path)


def test_a_form_override_that_contradicts_the_graph_is_explained(built) -> None:
    """The CLI refuses these (exit 2); the reason names what the graph lacks."""
    from qflow.ir.load import form_mismatch

    b = built("seed000_probe")
    qdq = b.exported.graph_module
    assert "no node carries the Arm fold pass's input_qparams" in form_mismatch(qdq, "folded")
    assert "calls no delegate and is not in the edge dialect" in form_mismatch(qdq, "lowered")
    assert form_mismatch(qdq, "qdq") is None and form_mismatch(qdq, None) is None
    assert form_mismatch(b.partitions[0].graph_module, "folded") is None
    assert form_mismatch(b.lowered.exported_program().graph_module, "lowered") is None
