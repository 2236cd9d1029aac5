"""Repair on the real pipeline, confirmed by the TOSA reference model."""

from __future__ import annotations

import copy

import pytest
import torch

import qflow
from qflow.examples import models
from qflow.targets.arm import pipeline as arm


@pytest.fixture(scope="module")
def seed000_lowered(built):
    """Seed 000 lowered as is, and after qflow.repair, on TOSA-1.0+INT+int16."""
    b = built("seed000_probe")
    repaired = qflow.repair(b.converted)
    with arm.capture_after() as parts:
        lowered = arm.lower(repaired, b.inputs, spec=b.spec)
    return b, repaired, lowered, parts


def test_unrepaired_seed000_miscomputes_on_the_tosa_reference_model(built) -> None:
    b = built("seed000_probe")
    [out] = arm.run_tosa_reference(b.lowered, b.inputs)
    assert (out - models.PROBE_EXPECTED).abs().max() > 0.5  # the seed: ~0.1 everywhere


def test_repaired_seed000_matches_within_one_quantization_step(seed000_lowered) -> None:
    b, repaired, lowered, _ = seed000_lowered
    [out] = arm.run_tosa_reference(lowered, b.inputs)
    assert torch.allclose(out, models.PROBE_EXPECTED, atol=0.1 + 1e-6)  # output domain: int8 scale 0.1


def test_repaired_seed000_proves_in_every_form(seed000_lowered) -> None:
    b, repaired, _, parts = seed000_lowered
    assert qflow.analyze(repaired).proved
    assert parts and all(qflow.analyze(p).proved for p in parts)
    # and it still runs as a graph module, with the fake-quantized numbers right
    assert torch.allclose(repaired(*b.inputs), models.PROBE_EXPECTED, atol=0.1 + 1e-6)


@pytest.mark.parametrize("form", ["converted", "edge"])
def test_seed000_plan_is_one_requant_after_the_cat(built, form) -> None:
    plan = qflow.plan(getattr(built("seed000_probe"), form))
    [rq] = plan.requants
    assert "cat" in rq.edge[0]
    assert (rq.source.dtype, rq.source.zero_point) == ("int8", 102)
    assert (rq.target.dtype, rq.target.zero_point) == ("int16", 0)


def test_seed000_folded_partition_repair(built) -> None:
    part = built("seed000_probe").partitions[0]
    plan = qflow.plan(part)
    [rq] = plan.requants
    assert rq.edge == ("aten_cat_default", "aten_add_tensor")
    assert plan.reclaims["aten_cat_default"].zero_point == 102
    fixed = qflow.repair(part)
    assert fixed is not part and qflow.analyze(fixed).proved
    assert not qflow.analyze(part).proved  # the input is not modified


def test_repair_of_a_proved_graph_is_a_no_op(built) -> None:
    b = built("seed000_control")
    before = copy.deepcopy(b.converted.graph)
    assert qflow.repair(b.converted) is b.converted
    assert str(b.converted.graph) == str(before)


def test_qflow_pass_before_partitioning(built) -> None:
    """The one-line hook: repair as a transform pass of to_edge_transform_and_lower."""
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from qflow.integrations.executorch import QflowPass

    b = built("seed000_probe")
    hook = QflowPass("repair")
    lowered = to_edge_transform_and_lower(
        b.exported,
        transform_passes=[hook],
        partitioner=[TOSAPartitioner(TosaCompileSpec(b.spec))],
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    )
    assert [r.proved for r in hook.reports] == [False, True]
    [out] = arm.run_tosa_reference(lowered, b.inputs)
    assert torch.allclose(out, models.PROBE_EXPECTED, atol=0.1 + 1e-6)

    with pytest.raises(Exception) as e:  # ExecuTorch's pass manager wraps the error
        to_edge_transform_and_lower(
            b.exported,
            transform_passes=[QflowPass("check")],
            partitioner=[TOSAPartitioner(TosaCompileSpec(b.spec))],
            compile_config=EdgeCompileConfig(_check_ir_validity=False),
        )
    assert isinstance(e.value, qflow.ProofError) or isinstance(e.value.__cause__, qflow.ProofError)
