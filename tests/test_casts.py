"""Dtype casts (``aten.to`` / ``_to_copy``, ``_to_dim_order_copy`` after ``to_edge``) and integer data beside
quantized values, through the real Arm pipeline (stock quantizer, real lowering, TOSA reference model). A cast
that keeps its dtype is a layout copy; one that changes it computes a new value. Before 2026-12-05 every cast was
an unknown op: the Arm suite's ops/test_to_copy.py, test_div_tensor_mode.py and the integer tests were unproven
(32 programs) for want of it."""

from __future__ import annotations

import copy
import struct

import pytest
import torch

import qflow
from qflow.targets.arm import pipeline as arm
from qflow.targets.arm import tosa_artifact as ta


class CastCat(torch.nn.Module):
    """ops/test_to_copy.py's quantized int-to-float cast: Arm declares the cast's output int8 scale 1."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat((x.to(torch.float32), y), dim=3)


class FloorDiv(torch.nn.Module):
    """ops/test_div_tensor_mode.py's int8 floor division: TOSA INTDIV, a sign fix-up of booleans cast to int."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.div(x, y, rounding_mode="floor")


class FloorDivScalar(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.div(x, 9.5, rounding_mode="floor")


class ScalarTensorAdd(torch.nn.Module):
    """ops/test_scalar_tensor.py's int16 case: a delegate returns the scalar, cast to float on the CPU (read as
    torchao's weight-only dequantize of constant codes until 2026-12-05: an error)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.scalar_tensor(4096, dtype=torch.int16) + x


torch.manual_seed(0)
_INT8 = (torch.randn(4, 8) * 100).to(torch.int8)
CASES = {
    "cast-cat": (CastCat(), ((torch.randn(1, 2, 4, 4) * 10).to(torch.int8), torch.randn(1, 2, 4, 1)), "proved"),
    "floor-div": (FloorDiv(), (_INT8, (torch.rand(4, 8) * 100 + 10).to(torch.int8)), "nothing-quantized"),
    "floor-div-float-scalar": (FloorDivScalar(), (_INT8,), "proved"),
    "scalar-tensor": (ScalarTensorAdd(), (torch.rand(1, 1),), "proved"),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request: pytest.FixtureRequest):
    model, inputs, status = CASES[request.param]
    converted = arm.quantize(model.eval(), inputs)
    with arm.capture_after() as parts:
        lowered = arm.lower(torch.export.export(converted, inputs), inputs)
    return converted, inputs, parts, lowered, status


def test_a_cast_of_integer_data_is_read_in_every_form(case) -> None:
    converted, inputs, parts, lowered, status = case
    assert torch.equal(arm.run_tosa_reference(lowered, inputs)[0], converted(*inputs))
    ep = torch.export.export(converted, inputs)
    assert qflow.analyze(converted, target="arm-tosa").status == status
    for part in parts:  # (the folded partition: Arm's fold declares integer data scale 1)
        assert qflow.analyze(part, target="arm-tosa").status in (status, "nothing-quantized")
    report = qflow.analyze(lowered, target="arm-tosa", reference=ep)
    assert report.status == status and not report.findings, str(report)


class EyeAdd(torch.nn.Module):
    """ops/test_eye.py's mixed dtypes: the delegate only returns the identity matrix Arm computes ahead of time."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.eye(10, dtype=torch.int32) + x


def test_a_delegate_returning_a_factory_s_integers_holds_them() -> None:
    """Arm computes eye / ones / full into a TOSA CONST; its integers are checked against PyTorch's (they were
    unproven: no domain anywhere, 20 programs of ops/test_eye.py, test_ones.py, test_zeros.py); one changed is
    an error, and changes the output."""
    x = (torch.randn(10),)
    converted = arm.quantize(EyeAdd().eval(), x)
    lowered = arm.lower(converted, x)
    ep = torch.export.export(converted, x)
    assert torch.equal(arm.run_tosa_reference(lowered, x)[0], converted(*x))
    assert qflow.analyze(lowered, target="arm-tosa", reference=ep).status == "proved"

    program = copy.deepcopy(lowered)
    [lm] = [m for n, m in program.exported_program().graph_module.named_children() if n.startswith("lowered_module")]
    prog = ta.read(bytes(lm.processed_bytes))
    [const] = [prog.tensors[op.outputs[0]] for op in prog.ops if op.op == "CONST"]
    buf = bytearray(lm.processed_bytes)
    struct.pack_into("<i", buf, const.data_pos + 4 * 1, 1)  # (an off-diagonal 1)
    lm._processed_bytes = bytes(buf)
    assert not torch.equal(arm.run_tosa_reference(program, x)[0], converted(*x))
    report = qflow.analyze(program, target="arm-tosa", reference=ep)
    assert report.status == "violated" and "integers aten_eye_default makes" in report.errors[0].message
