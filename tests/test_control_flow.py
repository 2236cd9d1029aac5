"""Control flow (issue #30 item 3) on the Arm pipeline, with the Arm test suite's own modules.

The stock Arm quantizer leaves a ``torch.cond``'s branches in float: the cond reads dequantized
reals, runs on the CPU, and its result is quantized after it. qflow reads such a cond as float
arithmetic on its operands: proved before partitioning and lowered, and the TOSA reference model
agrees with the fake-quantized model exactly. A ``while_loop`` whose body the quantizer did
quantize is not read yet: unproven, saying so — never proved.
"""

from __future__ import annotations

import pytest
import torch

import qflow
from qflow.targets.arm import pipeline as arm

suite_cond = pytest.importorskip("executorch.backends.arm.test.ops.test_cond")
suite_while = pytest.importorskip("executorch.backends.arm.test.ops.test_while")

CONDS = {
    "conv1d": (suite_cond.CondConv1d, (1, 2, 8)),
    "scalar": (suite_cond.CondOneArgAndScalarOneOutput, (1, 1, 2, 2)),
    "two_args": (suite_cond.CondTwoArgsOneOutput, (2, 3, 4, 6), (2, 3, 4, 6)),
}


@pytest.mark.parametrize("name", sorted(CONDS))
def test_a_cond_with_float_branches_is_proved_and_computes_right(name: str) -> None:
    make, *shapes = CONDS[name]
    torch.manual_seed(0)
    x = tuple(torch.randn(s) for s in shapes)
    gm = arm.quantize(make().eval(), x)
    assert any("cond" in str(n.target) for n in gm.graph.nodes)
    before = qflow.analyze(gm, target="arm-tosa")
    assert before.status == "proved", [f.message for f in before.findings]
    lowered = arm.lower(gm, x)
    after = qflow.analyze(lowered, target="arm-tosa", reference=torch.export.export(gm, x, strict=True))
    assert after.status == "proved", [f.message for f in after.findings]
    fq = gm(*x)
    fq = fq if isinstance(fq, torch.Tensor) else fq[0]
    assert torch.equal(arm.run_tosa_reference(lowered, x)[0].reshape(fq.shape), fq)


def test_a_while_loop_with_a_quantized_body_is_unproven_and_says_why() -> None:
    x = (torch.ones(2, 3), torch.ones(2, 3))
    gm = arm.quantize(suite_while.WhileTwoInputsTwoOutputs().eval(), x)
    report = qflow.analyze(gm, target="arm-tosa")
    assert report.status == "unproven"
    assert any("holding quantized code" in f.message and "while_loop" in f.message for f in report.findings)
    assert not report.errors
