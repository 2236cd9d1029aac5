"""A dilated max pool on Arm (the suite's ops/test_max_pool.py ``dilation*`` cases): Arm lowers it as a TOSA
``PAD`` with the lowest code, reshapes and a ``MAX_POOL2D``. The lowest code pads a max pool as PyTorch's -inf
padding does, so no padded element wins a window; the artifact check read it as a pad by the zero point (an
error on 5 programs of that file under ``--qflow-observe``, 2026-12-05, each equal to the fake-quantized model
on the TOSA reference model). Real pipeline: stock Arm quantizer, real lowering, TOSA reference model."""

from __future__ import annotations

import copy
import struct

import torch

import qflow
from qflow.targets.arm import pipeline as arm
from qflow.targets.arm import tosa_artifact as ta


def test_a_dilated_max_pool_pads_with_the_lowest_code_and_a_pad_by_the_zero_point_is_caught() -> None:
    torch.manual_seed(0)
    samples = [(torch.randn(1, 8, 32, 32) - 1.0,) for _ in range(4)]  # (mostly negative: a 0 pad would win)
    converted = arm.quantize(torch.nn.MaxPool2d(3, 1, 1, 3).eval(), samples[0])
    ep = torch.export.export(converted, samples[0], strict=True)
    lowered = arm.lower(converted, samples[0])
    for s in samples:
        assert torch.equal(arm.run_tosa_reference(lowered, s)[0], converted(*s))
    assert qflow.analyze(lowered, target="arm-tosa", reference=ep).status == "proved"

    program = copy.deepcopy(lowered)
    [lm] = [m for n, m in program.exported_program().graph_module.named_children() if n.startswith("lowered_module")]
    original = bytes(lm.processed_bytes)
    prog = ta.read(original)
    [pad] = [op for op in prog.ops if op.op == "PAD"]
    value = prog.tensors[pad.inputs[2]]
    zp = next(n for n in converted.graph.nodes if "quantize_per_tensor" in str(n.target)).args[2]
    buf = bytearray(original)
    struct.pack_into("<b", buf, value.data_pos, int(zp))  # (pad by the zero point: a real 0)
    lm._processed_bytes = bytes(buf)
    assert not torch.equal(arm.run_tosa_reference(program, samples[0])[0], converted(*samples[0]))
    assert qflow.analyze(program, target="arm-tosa", reference=ep).errors
