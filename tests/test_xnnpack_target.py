"""The xnnpack target on real XNNPACK pipelines, numbers from the ExecuTorch runtime.

XNNPACK fuses a relu into its conv/linear producer as output_min/output_max in
code space: exact whatever the zero point, where the Arm pass's qmin
narrowing is not. The same program is correct for one target and wrong for
the other, and qflow must say so per target.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import qflow
from qflow.targets.xnnpack import pipeline as xnnpack


class ConvReluCat(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.relu(self.conv(x)), y], dim=1)


class LinearReluCat(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.relu(self.a(x)), y], dim=-1)


class Cat(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, y], dim=1)


def _inputs(name: str) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    if name == "conv":
        return torch.randn(1, 3, 5, 5), torch.randn(1, 2, 5, 5) * 3
    if name == "linear":
        return torch.randn(4, 6), torch.randn(4, 3) * 3
    return torch.randn(1, 2, 4, 4), torch.randn(1, 2, 4, 4)


MODELS = {"conv": ConvReluCat, "linear": LinearReluCat, "cat": Cat}


@pytest.fixture(scope="module")
def programs() -> dict[str, tuple[torch.fx.GraphModule, tuple[torch.Tensor, ...]]]:
    return {name: (xnnpack.quantize(cls().eval(), _inputs(name)), _inputs(name)) for name, cls in MODELS.items()}


def _relu_quantize(gm: torch.fx.GraphModule) -> torch.fx.Node:
    return next(n for n in gm.graph.nodes if "quantize_per_tensor" in str(n.target) and "relu" in str(n.args[0]))


def _lsb(gm: torch.fx.GraphModule, out: torch.Tensor, inputs: tuple[torch.Tensor, ...]) -> float:
    q = next(n for n in gm.graph.nodes if n.op == "output").args[0][0].args[0]  # the quantize before the last DQ
    return ((out - gm(*inputs)).abs().max() / float(q.args[1])).item()


@pytest.mark.parametrize("name", ["conv", "linear"])
def test_relu_sharing_a_signed_cat_domain_is_correct_on_xnnpack_and_wrong_on_arm(programs, name) -> None:
    converted, inputs = programs[name]
    q = _relu_quantize(converted)
    assert int(q.args[2]) > int(q.args[3])  # zp above qmin: the relu's bound cuts inside the range
    assert not qflow.analyze(converted, target="xnnpack").errors
    [arm] = qflow.analyze(converted, target="arm-tosa").errors
    assert arm.kind == "non-fuseable-activation"
    [generic] = qflow.analyze(converted).errors  # every target at once: breaks on arm-tosa only
    assert generic.targets == {"arm-tosa": "silent miscompile"}
    assert "xnnpack clamps in code space" in generic.message
    lowered = xnnpack.lower(converted, inputs)
    report = qflow.analyze(lowered)  # the delegate names its own target
    assert report.form == "lowered" and not report.errors, str(report)
    [out] = xnnpack.run(xnnpack.to_executorch(lowered), inputs)
    assert _lsb(converted, out, inputs) <= 1.0 + 1e-4  # measured on the ExecuTorch runtime


def test_a_cat_whose_quantize_changes_the_domain_is_an_error_for_xnnpack(programs) -> None:
    converted, inputs = programs["cat"]
    gm = copy.deepcopy(converted)
    cat = next(n for n in gm.graph.nodes if "cat" in str(n.target))
    q = next(iter(cat.users))
    dq = next(iter(q.users))
    scale = float(q.args[1]) * 2
    q.args = (q.args[0], scale, *q.args[2:])
    dq.args = (dq.args[0], scale, *dq.args[2:])
    gm.recompile()
    [f] = qflow.analyze(gm, target="xnnpack").errors
    assert f.kind == "requant-after-passthrough"
    assert f.targets == {"xnnpack": "refused at load"}
    with pytest.raises(xnnpack.LoadError):
        xnnpack.run(xnnpack.to_executorch(xnnpack.lower(gm, inputs)), inputs)


def test_analysis_never_specializes_a_dynamic_shape() -> None:
    """The XNNPACK suite's dynamic-batch tests (`test_qs8_conv1d`, the qd8 linears) failed under
    `--qflow-observe`: qflow read a symbolic element count with `int()`, which guards the shape environment
    the program shares with the one it was lowered from, and that program then refused another batch size."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    model = nn.Sequential(nn.Conv1d(2, 4, 3), nn.ReLU()).eval()
    x = (torch.randn(2, 2, 8),)
    batch = {"input": {0: torch.export.Dim("batch", min=1, max=10)}}
    converted = xnnpack.quantize(model, x)
    program = torch.export.export(converted, x, dynamic_shapes=batch)
    lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    for obj in (program, lowered):
        assert qflow.analyze(obj, target="xnnpack").status == "proved"
    wider = torch.randn(8, 2, 8)
    assert program.module()(wider).shape == (8, 4, 6)
    assert lowered.exported_program().module()(wider).shape == (8, 4, 6)
