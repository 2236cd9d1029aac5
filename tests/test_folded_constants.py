"""A folded Arm partition's constants (issue #27, item 3: the folded partition carries the ranges the Q/DQ
form does). The fold pass keeps a quantized constant's codes and records its domain in each reader's
``input_qparams``; qflow reads them as the reals the Q/DQ program's dequantize gives, so a linear layer's
gain and a scalar operand's value are the same in both forms. Real pipeline: the stock Arm quantizer, the
real fold pass (`capture_after`)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from qflow.integrations import fx as qfx
from qflow.integrations.fx_folded import constant_reals
from qflow.ir.fx_nodes import Consts, target_name
from qflow.ops import base_name
from qflow.targets.arm import pipeline as arm


class _LinearTimesConstant(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.register_buffer("c", torch.tensor([0.35]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.c


@pytest.fixture(scope="module")
def programs():
    torch.manual_seed(0)
    model, inputs = _LinearTimesConstant().eval(), (torch.randn(2, 8),)
    converted = arm.quantize(model, inputs)
    qdq = torch.export.export(converted, inputs, strict=True)
    with arm.capture_after() as parts:
        arm.lower(qdq, inputs)
    [folded] = parts
    return qdq, folded


def _by_op(dg, op: str):
    [v] = [v for n in dg.g for v in [dg.value(n)] if base_name(v.target) == op]
    return v


def test_a_weight_read_as_codes_weighs_as_its_reals(programs) -> None:
    qdq, folded = programs
    a = qfx.build(qdq.graph_module, qdq, target="arm-tosa")
    b = qfx.build(folded.graph_module, folded, target="arm-tosa")
    assert _by_op(b, "linear").gain is not None
    assert _by_op(b, "linear").gain == pytest.approx(_by_op(a, "linear").gain, rel=1e-6)
    assert _by_op(b, "mul").gain == pytest.approx(_by_op(a, "mul").gain, rel=1e-6)


def test_each_integer_constant_is_dequantized_in_the_domain_its_readers_declare(programs) -> None:
    _, folded = programs
    gm = folded.graph_module
    consts = Consts(gm, folded)
    reals = constant_reals(gm, consts)
    readers = {n.name: n for n in gm.graph.nodes if n.op == "call_function"}
    linear = next(n for n in readers.values() if base_name(target_name(n)) == "linear")
    weight, bias = linear.args[1], linear.args[2]
    assert weight.name in reals and bias.name in reals
    qa = linear.meta["input_qparams"][1]
    codes = consts.tensor(weight).double()
    scale = torch.tensor(qa.scale, dtype=torch.float64).reshape(-1, 1)
    assert torch.allclose(reals[weight.name], codes * scale)  # (symmetric per-channel weights: zero points 0)
    mul = next(n for n in readers.values() if base_name(target_name(n)) == "mul")
    [c] = [a for a in mul.args if a.name in reals]
    step = mul.meta["input_qparams"][mul.args.index(c)].scale
    assert reals[c.name].item() == pytest.approx(0.35, abs=step / 2 + 1e-9)
