"""A TOSA ``RESCALE`` whose multiplier is 0: Arm's ADD / SUB of an operand below one step of the common int32 grid
(the suite's ops/test_sub.py and ops/test_rsub.py ``rand_4D_big_small``: values of 1e31 with ones near 0.25) rescales
that operand by 0. The artifact check read a zero multiplier as no domain, an error on 2 programs of the suite that
the TOSA reference model computes exactly (2026-12-05). It now weighs what the zero drops against the grid it is added
on: within half a code (the rounding of any RESCALE onto it) is proved; the same zero in place of an operand that
matters is an error. Real pipeline: stock Arm quantizer, real lowering, TOSA reference model."""

from __future__ import annotations

import copy
import struct

import pytest
import torch

import qflow
from qflow.targets.arm import pipeline as arm
from qflow.targets.arm import tosa_artifact as ta


class Sub(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x - y


def _lowered(inputs: tuple[torch.Tensor, ...]):
    converted = arm.quantize(Sub().eval(), inputs)
    return converted, torch.export.export(converted, inputs, strict=True), arm.lower(converted, inputs)


def _delegate(lowered):
    [lm] = [m for n, m in lowered.exported_program().graph_module.named_children() if n.startswith("lowered_module")]
    return lm


def _zero_multiplier(lowered, which: int):
    """The `which`-th RESCALE of the delegate with multiplier 0 (a copy of the program)."""
    program = copy.deepcopy(lowered)
    lm = _delegate(program)
    prog = ta.read(bytes(lm.processed_bytes))
    rescale = [op for op in prog.ops if op.op == "RESCALE"][which]
    mult = prog.tensors[rescale.inputs[1]]
    buf = bytearray(lm.processed_bytes)
    for k in range(len(mult.data)):
        struct.pack_into("<i", buf, mult.data_pos + 4 * k, 0)
    lm._processed_bytes = bytes(buf)
    return program, rescale


def test_an_operand_below_the_grid_rescaled_by_zero_is_proved() -> None:
    torch.manual_seed(0)
    inputs = (1e31 * (torch.rand(1, 4, 6, 8) + 1), torch.randn(1, 4, 6, 8))
    converted, ep, lowered = _lowered(inputs)
    prog = ta.read(bytes(_delegate(lowered).processed_bytes))
    assert any(op.op == "RESCALE" and not prog.tensors[op.inputs[1]].data.any() for op in prog.ops)
    assert torch.equal(arm.run_tosa_reference(lowered, inputs)[0], converted(*inputs))
    assert qflow.analyze(lowered, target="arm-tosa", reference=ep).status == "proved"


@pytest.mark.parametrize("which", [0, 1])
def test_an_operand_that_matters_rescaled_by_zero_is_an_error(which: int) -> None:
    torch.manual_seed(1)
    inputs = (torch.randn(1, 4, 6, 8), torch.randn(1, 4, 6, 8))
    converted, ep, lowered = _lowered(inputs)
    assert qflow.analyze(lowered, target="arm-tosa", reference=ep).status == "proved"
    program, rescale = _zero_multiplier(lowered, which)
    off = (arm.run_tosa_reference(program, inputs)[0] - converted(*inputs)).abs().max()
    assert off > 1.0  # (the operand's values are dropped: whole units off, not a rounding)
    report = qflow.analyze(program, target="arm-tosa", reference=ep)
    assert report.status == "violated"
    assert any("RESCALE by 0" in f.message and "codes of" in f.message for f in report.errors)
