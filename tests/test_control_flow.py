"""Control flow (issue #30 item 3) on the Arm pipeline, with the Arm test suite's own modules.

The stock Arm quantizer leaves a ``torch.cond``'s branches in float: the cond reads dequantized
reals, runs on the CPU, and its result is quantized after it. qflow reads such a cond as float
arithmetic on its operands: proved before partitioning and lowered, and the TOSA reference model
agrees with the fake-quantized model exactly. Quantized branches and loop bodies (the Arm
suite's own pipeline quantizes them) take and return reals, and are read as programs of their own.
"""

from __future__ import annotations

import copy

import pytest
import torch
from test_tosa_artifact import _run, mutants

import qflow
from qflow.ir.delegate import lowered_module
from qflow.targets.arm import pipeline as arm
from qflow.targets.arm import tosa_artifact

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
    "cond-multiple": (suite_cond.CondMultipleOneArgOneOutput, lambda: (torch.randn(1, 1, 2, 2),)),
    "cond-nested": (suite_cond.CondNestedOneArgOneOutput, lambda: (torch.randn(1, 1, 2, 2),)),
    "cond-buffer": (suite_cond.CondOneArgBufferOneOutput, lambda: (torch.randn(1, 1, 2, 2),)),
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


@pytest.fixture(scope="module")
def lowered_cf():
    """Each quantized control-flow program, lowered once (TOSA-1.0+INT+cf), and its partitions as
    the Arm backend sees them right after its fold pass (``folded(name)``)."""
    cache: dict[str, tuple] = {}
    folded: dict[str, list] = {}

    def get(name: str):
        if name not in cache:
            gm, samples = _quantized(name)
            with arm.capture_after() as sink:
                cache[name] = gm, samples, arm.lower(gm, samples[0], spec="TOSA-1.0+INT+cf")
            folded[name] = sink
        return cache[name]

    get.folded = lambda name: (get(name), folded[name])[1]
    return get


#: The programs the Arm backend lowers right (the TOSA reference model equals the fake-quantized model).
CONSISTENT = ["cond-scalar", "cond-two-args", "while-two-inputs", "cond-multiple", "cond-nested", "cond-buffer"]


@pytest.mark.parametrize("name", CONSISTENT)
def test_quantized_branches_and_bodies_prove_before_and_after_lowering(name: str, lowered_cf) -> None:
    """Each quantized branch / body takes and returns reals: read as a program of its own, it
    proves; the lowered program's COND_IF / WHILE_LOOP regions are interpreted by the artifact
    check (each branch's outputs in one domain, each loop variable back in the domain it entered
    with), and prove; the TOSA reference model equals the fake-quantized model on both branches."""
    gm, samples, lowered = lowered_cf(name)
    before = qflow.analyze(gm, target="arm-tosa")
    assert before.status == "proved", [f.message for f in before.findings]
    subgraphs = [n for n, m in gm.named_children() if isinstance(m, torch.fx.GraphModule)]
    read = qflow.api.domain_graph(gm, target="arm-tosa").g
    assert all(any(f"/{s}/" in v for v in read) for s in subgraphs), subgraphs  # (read, not skipped)
    for x in samples:
        fq = gm(*x)
        fq = [fq] if isinstance(fq, torch.Tensor) else list(fq)
        got = arm.run_tosa_reference(lowered, x)
        assert all(torch.equal(a, b.reshape(a.shape)) for a, b in zip(fq, got, strict=True)), name
    # (a constant captured into a nested branch is quantized by a dequantize the lowering folds into
    # the TOSA constant: its codes' domain is read from the program it came from)
    reference = torch.export.export(gm, samples[0], strict=True) if name == "cond-nested" else None
    after = qflow.analyze(lowered, target="arm-tosa", reference=reference)
    assert after.status == "proved", [f.message for f in after.findings]
    read = qflow.api.domain_graph(lowered, target="arm-tosa", reference=reference)
    checked = {o.arg.split()[1] for o in read.obligations if o.arg.startswith("TOSA ")}
    assert checked & {"COND_IF", "WHILE_LOOP"}, checked


def test_every_output_changing_mutant_in_a_region_is_detected(lowered_cf, capsys) -> None:
    """Single edits of the integer parameters inside the cond branches and the loop body and condition
    (test_tosa_artifact's mutants): each that changes an output on the TOSA reference model, on any
    sample, is an artifact finding."""
    score = {"mutants": 0, "output changed": 0, "detected": 0, "rejected": 0}
    missed = []
    for name in CONSISTENT:
        gm, samples, lowered = lowered_cf(name)
        program = copy.deepcopy(lowered)
        lm = next(m for n, m in program.exported_program().graph_module.named_children() if n.startswith("lowered"))
        original = bytes(lm.processed_bytes)
        base = [_run(program, x) for x in samples]
        reference = torch.export.export(gm, samples[0], strict=True) if name == "cond-nested" else None
        assert tosa_artifact.analyze_artifact(program, reference=reference).proved, name
        for mut in (m for m in mutants(original) if m.what.startswith("submodule")):
            lm._processed_bytes = mut.buf
            score["mutants"] += 1
            outs = [_run(program, x) for x in samples]
            if any(o is None for o in outs):
                score["rejected"] += 1
                continue
            if all(torch.equal(o, b) for o, b in zip(outs, base, strict=True)):
                continue
            score["output changed"] += 1
            flagged = not tosa_artifact.analyze_artifact(program, reference=reference).proved
            score["detected"] += flagged
            if not flagged:
                missed.append(f"{name}: {mut.what}")
        lm._processed_bytes = original
    with capsys.disabled():
        print(f"\ncontrol-flow region mutation score: {score}")
    assert score["output changed"] >= 20
    assert not missed, missed


def test_a_loop_variable_that_changes_domain_is_an_error_the_backend_confirms(lowered_cf) -> None:
    """The Arm suite's WhileAdditionalArg, quantized by its own pipeline: the loop variable enters in the
    input's domain (scale 1/255) and the loop's result is quantized in another (0.1255). The Arm backend
    carries codes: the body reads them in the first domain and writes them in the second, so from the
    second iteration on it reads codes of 0.1255 as 1/255. On the suite's own input (ones) the output
    still agrees; on 0.3 it is 180 output LSB off. qflow: an error before partitioning and in the artifact."""
    gm, samples, lowered = lowered_cf("while-additional-arg")
    x = (torch.full((2, 3), 0.3),)
    fq, got = gm(*x)[0], arm.run_tosa_reference(lowered, x)[0].reshape(2, 3)
    scale = 0.125490203499794  # the loop result's quantize
    assert torch.equal(gm(*samples[0])[0], arm.run_tosa_reference(lowered, samples[0])[0].reshape(2, 3))
    assert float((fq - got).abs().max()) / scale > 100
    before = qflow.analyze(gm, target="arm-tosa")
    assert [(f.kind, f.node) for f in before.errors] == [("domain-mismatch", "while_loop")]
    assert "loop variable 0" in before.errors[0].message
    artifact = tosa_artifact.analyze_artifact(lowered)
    assert any("WHILE_LOOP" in f.message and "loop variable 0" in f.message for f in artifact.errors)
    assert qflow.analyze(lowered, target="arm-tosa").errors


def test_an_activation_inside_a_branch_is_one_the_program_asks_for(lowered_cf) -> None:
    """The suite's CondMultipleOneArgOneOutput: sigmoid / relu branches, then sin / cos ones. The relu's
    CLAMP is in a region; the activations the artifact check holds CLAMPs against include the branches'
    (read from the partition's subgraphs, named as the serializer names their tensors): no finding (the
    int8 sin / cos TABLEs are measured exact by the contract probe)."""
    _, _, lowered = lowered_cf("cond-multiple")
    report = qflow.analyze(lowered, target="arm-tosa")
    assert report.status == "proved" and not report.findings, [f.message for f in report.findings]


def test_a_float_carrying_target_proves_the_same_loop() -> None:
    """The rule is the backend's (`Target.carries_loop_codes`), not the program's: the PT2E program
    carries reals, and on XNNPACK (which leaves the loop to the CPU) it proves."""
    gm, _ = _quantized("while-additional-arg")
    assert qflow.analyze(gm, target="xnnpack").status == "proved"


def test_a_wrong_domain_inside_a_branch_is_an_error_located_in_the_branch() -> None:
    gm, _ = _quantized("cond-scalar")
    branch = gm.submodule_0
    dq = next(n for n in branch.graph.nodes if "dequantize_per_tensor" in str(n.target))
    dq.args = (dq.args[0], dq.args[1] * 1.3, *dq.args[2:])
    branch.recompile()
    report = qflow.analyze(gm, target="arm-tosa")
    assert [(f.kind, f.node) for f in report.errors] == [("domain-mismatch", f"cond/submodule_0/{dq.name}")]


def _before_fold(lowered) -> torch.export.ExportedProgram:
    """The (one) partition as the Arm backend was handed it, before its passes: Q/DQ intact."""
    gm = lowered.exported_program().graph_module
    (lm,) = [lowered_module(gm, n) for n in gm.graph.nodes if "executorch_call_delegate" in str(n.target)]
    return lm.original_module


@pytest.mark.parametrize("name", CONSISTENT)
def test_folded_partitions_with_cond_and_while_are_read(name: str, lowered_cf) -> None:
    """After the fold pass, branches and loop bodies take and return codes: each input in the domain its
    first quantize named, each output in the one its last dequantize named; the backend rescales from
    the op's operand domain and into the result's. Read so (with the partition before the fold as the
    reference, for a constant operand whose dequantize the fold dropped: cond-buffer's), the programs the
    backend lowers right prove."""
    partitions = lowered_cf.folded(name)
    assert len(partitions) == 1
    reference = _before_fold(lowered_cf(name)[2])
    for ep in partitions:
        assert any(n.target in (torch.ops.higher_order.cond, torch.ops.higher_order.while_loop)
                   for n in ep.graph_module.graph.nodes)  # fmt: skip
        report = qflow.analyze(ep, target="arm-tosa", reference=reference)
        assert report.status == "proved", [f.message for f in report.findings]


def test_a_folded_loop_that_changes_domain_is_an_error(lowered_cf) -> None:
    """WhileAdditionalArg after the fold pass: the loop declares one domain for both its variables
    (the value's, 1/255), the body writes the value back in 0.1255 and the threshold in its own;
    the backend reads both as 1/255 from the second iteration on (measured wrong, above). The threshold is a
    constant in 0.502: alone the partition does not say so (unproven there), its reference does (an error)."""
    (ep,) = lowered_cf.folded("while-additional-arg")
    report = qflow.analyze(ep, target="arm-tosa")
    assert [(f.kind, f.node) for f in report.errors] == [("domain-mismatch", "while_loop")]
    mismatched = {o.arg for o in qflow.api.domain_graph(ep, target="arm-tosa").obligations if o.holds is False}
    assert mismatched == {"loop variable 0", "loop variable 1"}
    reference = _before_fold(lowered_cf("while-additional-arg")[2])
    read = qflow.api.domain_graph(ep, target="arm-tosa", reference=reference)
    assert {o.arg for o in read.obligations if o.holds is False} == {"loop variable 0", "loop variable 1", "operand 1"}
    assert qflow.analyze(read).status == "violated"


def test_a_wrong_folded_boundary_domain_is_an_error(lowered_cf) -> None:
    """The domains a folded branch declares at its boundaries are what the backend rescales into and
    out of: one that disagrees with the branch's own quantize / dequantize is an error there."""
    (ep,) = lowered_cf.folded("cond-scalar")
    for where in ("input", "output"):
        mutant = copy.deepcopy(ep)
        branch = mutant.graph_module.submodule_0
        node = next(n for n in branch.graph.nodes if n.op == "placeholder") if where == "input" else (
            branch.graph.output_node())  # fmt: skip
        key = "output_qparams" if where == "input" else "input_qparams"
        qa = node.meta[key][0]
        node.meta[key][0] = qa._replace(scale=qa.scale * 1.3)
        report = qflow.analyze(mutant, target="arm-tosa")
        assert report.errors, where


def test_observe_mode_proves_a_lowering_with_the_program_it_was_given(lowered_cf) -> None:
    """Observing a lowering (the pytest plugin's --qflow-observe): the program handed to
    ``to_edge_transform_and_lower`` with the Arm partitioner is the lowered one's reference, so the nested
    branch's constant, a bare code in the TOSA payload, gets its scale and the lowered program proves."""
    from qflow.integrations.observe import Observer

    gm, samples, _ = lowered_cf("cond-nested")
    with Observer().observe("cond-nested") as record:
        arm.lower(gm, samples[0], spec="TOSA-1.0+INT+cf")
    (lowered,) = [p for p in record.programs if p.kind == "lowered"]
    assert lowered.report is not None and lowered.report.status == "proved", lowered.error or [
        f.message for f in lowered.report.findings
    ]
