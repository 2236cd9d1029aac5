"""Delegate INPUTS as dtype and domain edges, and boundaries predicted before
partitioning (issue #5 items 2 and 4), on the real Arm pipeline."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.fx.passes.operator_support import OperatorSupportBase

import qflow
from qflow.targets.arm import pipeline as arm

INT_FP = "TOSA-1.0+INT+FP"


def _call(ep):
    return next(n for n in ep.graph.nodes if n.name == "executorch_call_delegate")


def _kind(r, kind="delegate-dtype-mismatch"):
    return [f for f in r.findings if f.kind == kind]


# -- inputs: the parent feeds float where the partition reads int8 ----------------------


def test_float_fed_to_an_int8_partition_input_is_a_delegate_dtype_mismatch(built) -> None:
    """A CPU pass dropped the boundary quantize (a real lowered program, edited
    on a copy): the TOSA flatbuffer reads int8, the parent feeds float32."""
    b = built("seed000_control")
    broken = copy.deepcopy(b.lowered)
    ep = broken.exported_program()
    call = _call(ep)
    q = call.args[1]
    call.args = (call.args[0], q.args[0])
    ep.graph.eliminate_dead_code()
    ep.graph_module.recompile()
    # the partition's first user input (named like the parent's quantize only when nothing renamed either)
    ph = getattr(ep.graph_module, call.args[0].target).original_module.graph_signature.user_inputs[0]

    r = qflow.analyze(broken)
    [f] = _kind(r)
    assert not r.proved and f.severity == "error"
    assert f.node == f"lowered_module_0/{ph}"  # the partition placeholder
    for part in ("executorch_call_delegate input 0", f"placeholder {ph}", "TOSA flatbuffer"):
        assert part in f.message
    assert "expects int8" in f.message and "feeds float32" in f.message and "factor 4" in f.message
    # the TOSA reference model refuses it: 4 bytes per element where 1 is expected
    with pytest.raises(ValueError, match="Invalid inputs"):
        arm.run_tosa_reference(broken, b.inputs)

    fixed = qflow.repair(broken)
    assert qflow.analyze(fixed).proved
    [cpu_q] = [n for n in fixed.exported_program().graph.nodes if "qflow_requant" in n.meta]
    assert "quantize_per_tensor" in str(cpu_q.target) and cpu_q.args[1:3] == q.args[1:3]
    [out] = arm.run_tosa_reference(fixed, b.inputs)
    [ref] = arm.run_tosa_reference(b.lowered, b.inputs)
    assert torch.equal(out, ref)


def test_int8_fed_in_another_domain_is_a_domain_mismatch_across_the_boundary(built) -> None:
    """The parent quantizes the input with scale 0.05; the partition's first
    dequantize of it reads scale 0.1 (same dtype, so no dtype finding)."""
    b = built("seed000_control")
    broken = copy.deepcopy(b.lowered)
    ep = broken.exported_program()
    q = _call(ep).args[1]
    q.args = (q.args[0], 0.05, *q.args[2:])
    ep.graph_module.recompile()

    r = qflow.analyze(broken)
    assert not _kind(r)
    [f] = _kind(r, "domain-mismatch")
    assert f.node == f"lowered_module_0/{q.name}" and "input 0 of delegate executorch_call_delegate" in f.message
    assert f.produced["scale"] == pytest.approx(0.05) and f.expected["scale"] == pytest.approx(0.1)
    [ref] = arm.run_tosa_reference(b.lowered, b.inputs)
    [wrong] = arm.run_tosa_reference(broken, b.inputs)
    assert (wrong - ref).abs().max() > 0.5  # the partition reads the codes at twice their value

    fixed = qflow.repair(broken)
    assert qflow.analyze(fixed).proved
    [out] = arm.run_tosa_reference(fixed, b.inputs)
    assert torch.equal(out, ref)


# -- inputs: the parent feeds int8 where the partition reads float (INT+FP) -------------


@pytest.fixture(scope="module")
def int_fp():
    """The MLP example lowered for TOSA-1.0+INT+FP: boundary Q/DQ inside the delegate."""
    from qflow.examples.models import MODELS

    ex = MODELS["linear_per_channel"]()
    converted = arm.quantize(ex.model, ex.inputs, spec=INT_FP)
    return arm.lower(converted, ex.inputs, spec=INT_FP), ex.inputs


def test_int8_fed_to_a_float_partition_input_is_a_delegate_dtype_mismatch(int_fp) -> None:
    """Quantizing the input on the CPU (as for an INT-only delegate) in front of
    an INT+FP delegate that quantizes it itself: int8 bytes where float32 is read."""
    from executorch.exir.dialects._ops import ops as exir_ops

    from qflow.ir.delegate import lowered_module

    lowered, inputs = int_fp
    clean = qflow.analyze(lowered)
    assert clean.proved and not _kind(clean)
    broken = copy.deepcopy(lowered)
    ep = broken.exported_program()
    call = _call(ep)
    part = lowered_module(ep.graph_module, call).original_module
    x = part.graph_signature.user_inputs[0]
    [inner_q] = [u for n in part.graph.nodes if n.name == x for u in n.users]
    fed = call.args[1]
    with ep.graph.inserting_before(call):
        q = ep.graph.call_function(
            exir_ops.edge.quantized_decomposed.quantize_per_tensor.default, (fed, *inner_q.args[1:])
        )
    q.meta["val"] = fed.meta["val"].to(torch.int8)
    call.replace_input_with(fed, q)
    ep.graph_module.recompile()

    r = qflow.analyze(broken)
    [f] = _kind(r)
    assert f.node == f"lowered_module_0/{x}" and "input 0" in f.message
    assert "expects float32" in f.message and "feeds int8" in f.message and "factor 0.25" in f.message

    fixed = qflow.repair(broken)
    assert qflow.analyze(fixed).proved
    [dq] = [n for n in fixed.exported_program().graph.nodes if "qflow_requant" in n.meta]
    assert "dequantize_per_tensor" in str(dq.target) and dq.args[1:3] == inner_q.args[1:3]
    [out] = arm.run_tosa_reference(fixed, inputs)
    [ref] = arm.run_tosa_reference(lowered, inputs)
    assert torch.equal(out, ref)  # q then dq then the delegate's own q: the same codes


# -- predicted before partitioning: the input-side mirror of seed 002 (real pipeline) ---


def test_a_partition_starting_at_a_view_on_float_is_predicted_and_the_real_lowering_fails() -> None:
    """TOSA-1.0+INT+FP, the dequantize before each view kept on the CPU: the
    partitions start at the view on float32 with the view's quantize inside.
    qflow predicts it from the partitioner's tagging; the real lowering then
    folds that quantize into the view and the backend rejects the RESCALE it
    emits on a float input."""
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from qflow.examples.models import RejectDequantizeBeforeView, attention_program
    from qflow.integrations.executorch import predict_boundaries

    exported, part, _, _ = attention_program([RejectDequantizeBeforeView()], backend="tosa", spec=INT_FP)
    r = predict_boundaries(exported, part)
    found = _kind(r)
    assert found and not r.proved and all(f.status == "predicted" for f in found)
    assert all("view_copy" in f.node and "input" in f.message and "factor 4" in f.message for f in found)
    predicted = {(f.produced["scale"], f.produced["zero_point"]) for f in found}

    with arm.capture_after() as partitions, pytest.raises(ValueError, match="input_zp must be 0"):
        to_edge_transform_and_lower(
            copy.deepcopy(exported), partitioner=[part], compile_config=EdgeCompileConfig(_check_ir_validity=False)
        )
    # what the real fold made of them: a view on a float placeholder claiming int8 codes
    seen = set()
    for p in partitions:
        for n in p.graph.nodes:
            src = n.args[0] if n.args else None
            if (
                "view_copy" in str(n.target)
                and getattr(src, "op", None) == "placeholder"
                and n.meta.get("output_qparams")
            ):
                assert src.meta["val"].dtype == torch.float32
                qa = n.meta["output_qparams"][0]
                seen.add((qa.scale, qa.zp))
    assert seen and seen <= predicted


def test_the_int_only_partitioner_detags_that_view_and_nothing_is_predicted() -> None:
    from qflow.examples.models import RejectDequantizeBeforeView, attention_program
    from qflow.integrations.executorch import predict_boundaries

    exported, part, _, _ = attention_program([RejectDequantizeBeforeView()], backend="tosa", spec=arm.DEFAULT_SPEC)
    r = predict_boundaries(exported, part)
    assert r.proved and not r.findings and r.obligations["proved"] > 0


ORDINARY = ("conv_bn_relu6_residual", "conv_cat_skip", "attention", "linear_per_channel", "mixed_a16w8")


@pytest.mark.parametrize("name", ORDINARY + ("seed000_control",))
def test_stock_partitions_of_the_ordinary_models_are_predicted_clean(built, name) -> None:
    """No false alarm: the stock TOSA partitioner exits on quantize nodes."""
    from qflow.integrations.executorch import predict_boundaries

    b = built(name)
    r = predict_boundaries(b.exported, arm.TOSAPartitioner(arm.TosaCompileSpec(b.spec)))
    assert r.proved and not r.findings and r.obligations["proved"] > 0, str(r)


class _RejectQuantizeAfterCompute(OperatorSupportBase):
    """Keeps the quantize after each linear / bmm on the CPU."""

    def is_node_supported(self, submodules, node) -> bool:
        t = str(node.target)
        if "quantize_per_tensor" in t and "dequantize" not in t:
            src = node.args[0]
            return not (isinstance(src, torch.fx.Node) and any(k in str(src.target) for k in ("linear", "bmm")))
        return True


def test_a_partition_ending_at_a_compute_op_without_its_quantize_is_predicted() -> None:
    """Not proved before lowering when the real lowering cannot succeed: the
    fold leaves such a linear without output qparams and the backend rejects it."""
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from qflow.examples.models import attention_program
    from qflow.integrations.executorch import predict_boundaries

    exported, part, _, _ = attention_program([_RejectQuantizeAfterCompute()], backend="tosa")
    r = predict_boundaries(exported, part)
    found = _kind(r)
    assert found and not r.proved
    assert all("no output qparams" in f.message and ("linear" in f.node or "bmm" in f.node) for f in found)

    with pytest.raises(Exception) as info:
        to_edge_transform_and_lower(
            copy.deepcopy(exported), partitioner=[part], compile_config=EdgeCompileConfig(_check_ir_validity=False)
        )
    causes, e = [], info.value
    while e is not None:
        causes.append(str(e))
        e = e.__cause__
    assert any("No output quantization parameter found" in c for c in causes)


def test_predict_boundaries_rejects_what_it_cannot_read(built) -> None:
    from executorch.exir.backend.partitioner import Partitioner

    from qflow.integrations.executorch import predict_boundaries

    b = built("seed000_control")
    with pytest.raises(qflow.InputError, match="torch.export.export"):
        predict_boundaries(b.converted, arm.TOSAPartitioner(arm.TosaCompileSpec(b.spec)))

    class Other(Partitioner):
        def partition(self, exported_program):  # pragma: no cover - never called
            raise AssertionError

    with pytest.raises(qflow.InputError, match="TOSAPartitioner"):
        predict_boundaries(b.exported, Other())
