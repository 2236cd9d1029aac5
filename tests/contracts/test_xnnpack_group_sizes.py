"""Which int4 weight layouts XNNPACK takes from torchao's 8da4w (issue #28, point 2), measured on the
ExecuTorch runtime, and what its payload keeps of each.

A `Linear(128, 16)` (K = 128) with `Int8DynamicActivationIntxWeightConfig(int4, ...)`: groups of 32,
64 and 128 (= K) and per channel. Measured (2026-11-27, torch 2.13.0, torchao 0.18.0, executorch
1.5.1): each is delegated and runs within float rounding of the eager model once the eager model's
scales are rounded to bfloat16 (the payload keeps every int4 weight's scales as bfloat16, a
per-channel weight as one group per row, which is how its payload records it); qflow proves each before
lowering, lowered (the payload's weight checked against the program's) and as a `.pte` against its
program. A group of 16 is refused at lowering ("requires group_size to be a multiple of 32"): loud.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torchao.quantization import quantize_
from torchao.quantization.granularity import PerAxis, PerGroup
from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

import qflow
from qflow.targets.xnnpack import pipeline as xnnpack
from qflow.targets.xnnpack.payload import read_payload

#: float32 accumulation of 128 products, relative to the output's magnitude (fixed, not measured)
FLOAT_ROUNDING = 1e-5
LAYOUTS = {"group32": PerGroup(32), "group64": PerGroup(64), "group128": PerGroup(128), "per-channel": PerAxis(0)}


@dataclass(frozen=True)
class Lowered:
    model: torch.nn.Module
    exported: object
    edge: object
    pte: bytes
    got: torch.Tensor


X = (torch.randn(3, 128, generator=torch.Generator().manual_seed(1)),)


def _quantized(granularity: object) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 16)).eval()
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=granularity))
    return model


@pytest.fixture(scope="module")
def lowered() -> dict[str, Lowered]:
    out = {}
    for name, granularity in LAYOUTS.items():
        model = _quantized(granularity)
        exported = torch.export.export(model, X)
        edge = to_edge_transform_and_lower(torch.export.export(model, X), partitioner=[XnnpackPartitioner()])
        pte = xnnpack.to_executorch(edge).buffer
        out[name] = Lowered(model, exported, edge, pte, xnnpack.run(pte, X)[0])
    return out


@pytest.mark.parametrize("name", LAYOUTS)
@torch.no_grad()
def test_each_layout_runs_as_the_eager_model_with_bf16_scales(lowered, name) -> None:
    case = lowered[name]
    weight = case.model[0].weight
    weight.scale.copy_(weight.scale.to(torch.bfloat16).to(torch.float32))
    want = case.model(*X)
    assert float((case.got - want).abs().max()) <= FLOAT_ROUNDING * float(want.abs().max())


@pytest.mark.parametrize("name", LAYOUTS)
def test_the_payload_keeps_each_as_groups_along_the_inputs(lowered, name) -> None:
    gm = lowered[name].edge.exported_program().graph_module
    (module,) = [getattr(gm, n) for n, _ in gm.named_children() if n.startswith("lowered_module")]
    g = read_payload(bytes(module.processed_bytes))
    (weight,) = [v for v in g.values.values() if v.constant and v.quantized]
    group = {"group32": 32, "group64": 64}.get(name, 128)
    assert weight.blocks is not None and (weight.blocks.group_size, weight.blocks.num_scales) == (
        group,
        16 * 128 // group,
    )


@pytest.mark.parametrize("name", LAYOUTS)
def test_qflow_proves_each_before_lowering_lowered_and_as_a_pte_against_its_program(lowered, name) -> None:
    case = lowered[name]
    for program, ref in ((case.exported, None), (case.edge, None), (case.pte, case.exported)):
        report = qflow.analyze(program, target="xnnpack", reference=ref)
        assert report.status == "proved", str(report)


def test_a_group_of_16_is_refused_at_lowering() -> None:
    model = _quantized(PerGroup(16))
    with pytest.raises(Exception, match="multiple of 32"):
        to_edge_transform_and_lower(torch.export.export(model, X), partitioner=[XnnpackPartitioner()])
