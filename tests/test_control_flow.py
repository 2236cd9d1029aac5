"""Control flow (issue #30 item 3) on the Arm pipeline, with the Arm test suite's own modules.

The stock Arm quantizer leaves a ``torch.cond``'s branches in float: the cond reads dequantized
reals, runs on the CPU, and its result is quantized after it. qflow reads such a cond as float
arithmetic on its operands: proved before partitioning and lowered, and the TOSA reference model
agrees with the fake-quantized model exactly. Quantized branches and loop bodies (the Arm
suite's own pipeline quantizes them) take and return reals, and are read as programs of their own.
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


#: The Arm suite's control-flow modules, quantized as its own pipeline does: the quantizer's
#: submodule pass quantizes cond branches and while_loop condition functions too (a calibration
#: sample per branch), and the Arm backend lowers them into TOSA COND_IF / WHILE_LOOP.
QUANTIZED = {
    "cond-scalar": (suite_cond.CondOneArgAndScalarOneOutput, lambda: (torch.randn(1, 1, 2, 2),)),
    "cond-two-args": (suite_cond.CondTwoArgsOneOutput, lambda: (torch.randn(2, 3, 4, 6), torch.randn(2, 3, 4, 6))),
    "while-two-inputs": (suite_while.WhileTwoInputsTwoOutputs, lambda: (torch.ones(2, 3), torch.ones(2, 3))),
    "while-additional-arg": (suite_while.WhileAdditionalArg, lambda: (torch.ones(2, 3),)),
}


def _quantized(name: str):
    make, inputs = QUANTIZED[name]
    torch.manual_seed(0)
    model, x = make().eval(), inputs()
    # (both branches of a cond on the sum's sign; a loop runs from the suite's own input only —
    # negated, these loops would not terminate)
    samples = [x, tuple(-t for t in x)] if name.startswith("cond") else [x]
    gm = arm.default_quantizer()._quantize_with_submodules(arm.export_module(model, x), samples)
    return gm, samples


@pytest.mark.parametrize("name", sorted(QUANTIZED))
def test_quantized_branches_and_bodies_are_read_as_programs_of_their_own(name: str) -> None:
    """Each quantized branch / body takes and returns reals: read as a program of its own, it
    proves, and the TOSA reference model (control-flow extension) equals the fake-quantized model
    on both branches. The lowered program's COND_IF / WHILE_LOOP are not interpreted by the
    artifact check yet: unproven there, never an error."""
    gm, samples = _quantized(name)
    before = qflow.analyze(gm, target="arm-tosa")
    assert before.status == "proved", [f.message for f in before.findings]
    subgraphs = [n for n, m in gm.named_children() if isinstance(m, torch.fx.GraphModule)]
    read = qflow.api.domain_graph(gm, target="arm-tosa").g
    assert all(any(f"/{s}/" in v for v in read) for s in subgraphs), subgraphs  # (read, not skipped)
    lowered = arm.lower(gm, samples[0], spec="TOSA-1.0+INT+cf")
    for x in samples:
        fq = gm(*x)
        fq = [fq] if isinstance(fq, torch.Tensor) else list(fq)
        got = arm.run_tosa_reference(lowered, x)
        assert all(torch.equal(a, b.reshape(a.shape)) for a, b in zip(fq, got, strict=True)), name
    after = qflow.analyze(lowered, target="arm-tosa")
    assert after.status == "unproven" and not after.errors
    assert any(op in f.message for f in after.findings for op in ("COND_IF", "WHILE_LOOP"))


def test_a_wrong_domain_inside_a_branch_is_an_error_located_in_the_branch() -> None:
    gm, _ = _quantized("cond-scalar")
    branch = gm.submodule_0
    dq = next(n for n in branch.graph.nodes if "dequantize_per_tensor" in str(n.target))
    dq.args = (dq.args[0], dq.args[1] * 1.3, *dq.args[2:])
    branch.recompile()
    report = qflow.analyze(gm, target="arm-tosa")
    assert [(f.kind, f.node) for f in report.errors] == [("domain-mismatch", f"cond/submodule_0/{dq.name}")]
