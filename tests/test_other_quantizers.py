"""Graphs of the other PT2E quantizers shipped in the executorch wheel, and
dynamic quantization (qparams computed at run time): qflow answers with a
report — proved where the structure proves it, unproven with a reason where
it cannot know — and never crashes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import qflow
from qflow.examples.models import MLP
from qflow.targets.arm.pipeline import export_module


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x)).flatten(1)


def _convert(model: nn.Module, inputs: tuple[torch.Tensor, ...], quantizer: Any) -> torch.fx.GraphModule:
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    prepared = prepare_pt2e(export_module(model.eval(), inputs), quantizer)
    with torch.no_grad():
        prepared(*inputs)
    return convert_pt2e(prepared)


def _xnnpack_dynamic() -> Any:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    return XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))


def _vulkan_dynamic() -> Any:
    from executorch.backends.vulkan.quantizer.vulkan_quantizer import (
        VulkanQuantizer,
        get_symmetric_quantization_config,
    )

    return VulkanQuantizer().set_global(get_symmetric_quantization_config(is_dynamic=True))


def _cortex_m() -> Any:
    from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer

    return CortexMQuantizer()


def _cadence() -> Any:
    from executorch.backends.cadence.aot.quantizer.quantizer import CadenceDefaultQuantizer

    return CadenceDefaultQuantizer()


def _qualcomm() -> Any:
    from executorch.backends.qualcomm.quantizer.quantizer import QnnQuantizer

    return QnnQuantizer()


QUANTIZERS: dict[str, Callable[[], Any]] = {
    "xnnpack-dynamic": _xnnpack_dynamic,
    "vulkan-dynamic": _vulkan_dynamic,
    "cortex-m": _cortex_m,
    "cadence": _cadence,
    "qualcomm": _qualcomm,
}


@pytest.fixture(scope="module")
def programs() -> dict[str, tuple[torch.fx.GraphModule, torch.export.ExportedProgram, tuple[torch.Tensor, ...]]]:
    torch.manual_seed(0)
    out = {}
    for name, make in QUANTIZERS.items():
        model, inputs = (
            (MLP(), (torch.randn(2, 8),))
            if "dynamic" in name or name == "qualcomm"
            else (
                ConvNet(),
                (torch.randn(1, 3, 6, 6),),
            )
        )
        converted = _convert(model, inputs, make())
        out[name] = (converted, torch.export.export(converted, inputs), inputs)
    return out


@pytest.mark.parametrize("name", list(QUANTIZERS))
def test_every_quantizer_graph_gets_a_report(programs, name) -> None:
    converted, exported, _ = programs[name]
    for program in (converted, exported):
        report = qflow.analyze(program)
        assert sum(report.obligations.values()) > 0
        for f in report.findings:  # whatever qflow cannot know is said, with a reason
            assert f.status in ("violated", "unproven") and f.message


@pytest.mark.parametrize("name", ["xnnpack-dynamic", "vulkan-dynamic"])
def test_dynamic_quantization_is_proved_structurally(programs, name) -> None:
    """Each dequantize reads the run-time scale and zero point its quantize
    wrote (the same choose_qparams outputs): proved without knowing them. Only the
    linears stay unproven for xnnpack, which quantizes their input per token instead of
    per tensor (measured: tests/contracts/test_xnnpack_affine_contract.py)."""
    converted, exported, _ = programs[name]
    assert any(".tensor" in str(n.target) or "per_token" in str(n.target) for n in converted.graph.nodes)
    for program in (converted, exported):
        report = qflow.analyze(program)
        assert {(f.kind, tuple(f.targets)) for f in report.findings} == {("unvalidated-lowering", ("xnnpack",))}
        assert report.obligations["violated"] == 0, str(report)
        assert any("run-time" in d for d in report.domains.values())
        for target in ("arm-tosa", "cortex-m"):  # (the structure alone: no lowering question there)
            assert qflow.analyze(program, target=target).status != "violated"


def test_dynamic_dequantize_of_other_run_time_params_is_not_proved(programs) -> None:
    """Swap the run-time zero point a dequantize reads for another tensor: no proof."""
    converted, _, _ = programs["xnnpack-dynamic"]
    import copy

    gm = copy.deepcopy(converted)
    qs = [
        n for n in gm.graph.nodes if "quantize_per_tensor.tensor" in str(n.target) and "dequantize" not in str(n.target)
    ]
    dqs = [n for n in gm.graph.nodes if "dequantize_per_tensor.tensor" in str(n.target)]
    assert len(qs) >= 2 and dqs
    dq = next(d for d in dqs if d.args[0] is qs[0])
    dq.args = (dq.args[0], qs[1].args[1], qs[1].args[2], *dq.args[3:])
    gm.recompile()
    assert not qflow.analyze(gm).proved


def test_xnnpack_dynamic_lowered_program_gets_a_report(programs) -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    _, exported, _ = programs["xnnpack-dynamic"]
    lowered = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    report = qflow.analyze(lowered)
    assert report.form == "lowered"
    assert not report.errors, str(report)
