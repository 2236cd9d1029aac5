"""Lowered programs: delegate outputs are dtype edges, partitions are proved too."""

from __future__ import annotations

import copy

import pytest
import torch

import qflow

ORDINARY = ("conv_bn_relu6_residual", "conv_cat_skip", "attention", "linear_per_channel", "mixed_a16w8")


@pytest.mark.parametrize("name", ORDINARY + ("seed000_control",))
def test_clean_lowered_programs_prove_with_no_boundary_finding(built, clean, name) -> None:
    r = qflow.analyze(built(name).lowered)
    clean(r, name)
    assert not [f for f in r.findings if f.kind == "delegate-dtype-mismatch"]


def test_a_lowered_program_is_not_proved_when_a_partition_miscomputes(built) -> None:
    """Proving only the boundaries would call seed 000's lowered program proved."""
    r = qflow.analyze(built("seed000_probe").lowered)
    assert not r.proved
    assert [(f.kind, f.node) for f in r.findings if f.kind != "tosa-artifact-mismatch"] == [
        ("requant-after-passthrough", "lowered_module_0/aten_cat_default")
    ]
    assert any(f.kind == "tosa-artifact-mismatch" for f in r.errors)  # the emitted TOSA confirms it


def test_a_stale_float_boundary_dtype_is_a_delegate_dtype_mismatch(built) -> None:
    """Seed 002's symptom on a real lowered program: the parent declares float32
    for an output the TOSA flatbuffer writes as int8 (meta edited on a copy)."""
    ep = copy.deepcopy(built("seed000_control").lowered.exported_program())
    getitem = next(n for n in ep.graph.nodes if n.name == "getitem")
    getitem.meta["val"] = getitem.meta["val"].to(torch.float32)
    r = qflow.analyze(ep)
    [f] = [f for f in r.findings if f.kind == "delegate-dtype-mismatch"]
    assert f.node == "getitem" and f.severity == "error"
    assert "int8" in f.message and "float32" in f.message and "factor 4" in f.message
    assert "backend artifact" in f.message  # read from the TOSA flatbuffer


@pytest.fixture(scope="module")
def ethosu():
    """Seed 002 on the real pipeline: EthosUQuantizer + EthosUPartitioner + Vela."""
    from qflow.examples.models import lower_attention

    return {forced: lower_attention(force_view_exit=forced)[0] for forced in (True, False)}


def test_seed002_partition_exiting_at_a_view_is_a_delegate_dtype_mismatch(ethosu) -> None:
    r = qflow.analyze(ethosu[True])
    mismatches = [f for f in r.findings if f.kind == "delegate-dtype-mismatch"]
    assert mismatches and not r.proved
    int8 = [f for f in mismatches if "produces int8" in f.message]
    assert int8, [f.message for f in mismatches]
    f = int8[0]
    assert "declares float32" in f.message and "factor 4" in f.message
    assert "Vela command stream: element size 1" in f.message and "view_copy" in f.message  # Vela's own blob
    # every partition output the parent still declares float32 is one the fold made int8
    ep = ethosu[True].exported_program()
    float_getitems = {
        n.name for n in ep.graph.nodes if n.name.startswith("getitem") and n.meta["val"].dtype == torch.float32
    }
    assert {f.node for f in int8} == {f.node for f in mismatches} == float_getitems


def test_the_same_model_without_the_forced_exit_is_proved_at_the_boundaries(ethosu) -> None:
    r = qflow.analyze(ethosu[False])
    assert not [f for f in r.findings if f.kind == "delegate-dtype-mismatch"]
    assert r.proved, str(r)


def _flagged_partition_nodes(lowered) -> list[str]:
    """The partition output node behind each delegate-dtype-mismatch of a lowered program."""
    from qflow.ir import delegate

    ep = lowered.exported_program()
    nodes = {n.name: n for n in ep.graph.nodes}
    out = []
    for f in qflow.analyze(lowered).findings:
        if f.kind == "delegate-dtype-mismatch":
            getitem = nodes[f.node]
            call, idx = getitem.args
            lm = delegate.lowered_module(ep.graph_module, call)
            out.append(delegate.boundary_outputs(lm)[idx].partition_node)
    return out


@pytest.mark.parametrize("forced", [True, False])
def test_seed002_boundaries_are_predicted_before_partitioning(ethosu, forced) -> None:
    """The partitioner's tagging alone (no Vela, no backend) predicts exactly the
    partition outputs the lowered-form check flags after the real lowering."""
    from qflow.examples.models import RejectQuantizeAfterView, attention_program
    from qflow.integrations.executorch import predict_boundaries

    exported, part, _, _ = attention_program([RejectQuantizeAfterView()] if forced else None)
    r = predict_boundaries(exported, part)
    flagged = _flagged_partition_nodes(ethosu[forced])
    assert sorted(f.node for f in r.findings) == sorted(flagged)
    assert all(f.status == "predicted" and "output" in f.message for f in r.findings)
    assert r.proved is (not forced) and bool(flagged) is forced
    assert all("factor 4" in f.message and f.produced["dtype"] == "int8" for f in r.findings)


def _delegate_output_dtypes(et) -> list[str]:
    """The scalar types the serialized program declares for delegate tensors."""
    from executorch.exir.scalar_type import ScalarType

    plan = et.executorch_program.execution_plan[0]
    out = []
    for chain in plan.chains:
        for ins in chain.instructions:
            if type(ins.instr_args).__name__ == "DelegateCall":
                out += [ScalarType(int(plan.values[i].val.scalar_type)).name for i in ins.instr_args.args]
    return out


def test_seed002_repair_makes_the_serialized_boundary_int8(ethosu) -> None:
    fixed = qflow.repair(ethosu[True])
    assert qflow.analyze(fixed).proved
    before = _delegate_output_dtypes(copy.deepcopy(ethosu[True]).to_executorch())  # (it rewrites in place)
    after = _delegate_output_dtypes(fixed.to_executorch())
    assert any("FLOAT" in d for d in before)
    assert after and all("CHAR" in d for d in after)  # every delegate tensor is int8, as Vela writes it
    dq = [n for n in fixed.exported_program().graph.nodes if "qflow_requant" in n.meta]
    assert len(dq) == len([f for f in qflow.analyze(ethosu[True]).findings])  # one CPU dequantize each


def test_seed002_on_tosa_repaired_output_matches_fake_quant() -> None:
    from qflow.examples.models import lower_attention
    from qflow.targets.arm import pipeline as arm

    lowered, converted = lower_attention(force_view_exit=True, backend="tosa")
    torch.manual_seed(2)
    inputs = (torch.randn(1, 4, 8),)
    r = qflow.analyze(lowered)
    kinds = {f.kind for f in r.findings}
    assert kinds == {"delegate-dtype-mismatch", "tosa-artifact-mismatch"}  # the artifact's edge says it too
    assert all("TOSA flatbuffer" in f.message for f in r.findings if f.kind == "delegate-dtype-mismatch")
    with pytest.raises(AssertionError, match="dtype"):  # the unrepaired boundary hands int8 to a float op
        arm.run_tosa_reference(lowered, inputs)
    fixed = qflow.repair(lowered)
    [out] = arm.run_tosa_reference(fixed, inputs)
    assert torch.allclose(out, converted(*inputs), atol=1e-6)


def test_float_fed_to_an_ethosu_partition_is_read_from_vela_and_repaired(ethosu) -> None:
    """The input side on Ethos-U: drop the CPU quantize in front of the first
    delegate of the clean program (a copy). Vela's input block says 1 byte
    per element; the parent feeds float32. The repair quantizes on the CPU
    and the serialized program hands the delegate int8 again."""
    broken = copy.deepcopy(ethosu[False])
    ep = broken.exported_program()
    call = next(n for n in ep.graph.nodes if n.name == "executorch_call_delegate")
    q = call.args[1]
    call.args = (call.args[0], q.args[0], *call.args[2:])
    ep.graph.eliminate_dead_code()
    ep.graph_module.recompile()
    r = qflow.analyze(broken)
    [f] = [f for f in r.findings if f.kind == "delegate-dtype-mismatch"]
    assert "input 0" in f.message and "Vela command stream: element size 1" in f.message
    assert "feeds float32" in f.message and "factor 4" in f.message
    fixed = qflow.repair(broken)
    assert qflow.analyze(fixed).proved
    clean = _delegate_output_dtypes(copy.deepcopy(ethosu[False]).to_executorch())
    assert "FLOAT" in _delegate_output_dtypes(broken.to_executorch())[0]  # serialized as a float delegate input
    assert _delegate_output_dtypes(fixed.to_executorch()) == clean


class IntClamp(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, -10, 10)


def test_unquantized_integer_ops_in_a_partition_are_plain_integer_data() -> None:
    """An int32 clamp (no Q/DQ anywhere) lowers to maximum/minimum on int32:
    in the folded partition that is integer data, not float compute, and no
    finding; with nothing quantized there is nothing to prove (not a proof)."""
    from qflow.targets.arm import pipeline as arm

    x = torch.randint(-50, 50, (1, 4, 8), dtype=torch.int32)
    with arm.capture_after() as parts:
        lowered = arm.lower(torch.export.export(IntClamp(), (x,)), (x,))
    assert parts
    for p in parts:
        r = qflow.analyze(p)
        assert r.form == "folded" and r.status == "nothing-quantized" and not r.findings, str(r)
    whole = qflow.analyze(lowered)
    assert whole.status == "nothing-quantized" and not whole.findings, str(whole)


class Pool1d(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.max_pool1d(x, 2)


@pytest.fixture(scope="module")
def cpu_only_lowering():
    """max_pool1d → max_pool2d_with_indices, which the TOSA partitioner does not
    take: nothing is delegated and the CPU runs DQ → unsqueeze → pool → squeeze
    → Q in float, requantizing after the squeeze."""
    from qflow.targets.arm import pipeline as arm

    torch.manual_seed(4)
    x = torch.randn(1, 4, 8)
    converted = arm.quantize(Pool1d().eval(), (x,))
    return converted, arm.lower(converted, (x,)), (x,)


def test_the_cpu_side_of_a_lowered_program_computes_in_float(cpu_only_lowering) -> None:
    converted, lowered, inputs = cpu_only_lowering
    graph = lowered.exported_program().graph
    assert not any("call_delegate" in str(n.target) for n in graph.nodes)
    # read as what it is, a lowered program, it is exact ...
    r = qflow.analyze(lowered, form="lowered")
    assert r.form == "lowered" and r.proved and not r.findings
    # ... and it is: the program computes what the fake-quantized model does
    out = lowered.exported_program().module()(*inputs)
    assert torch.equal(out, converted(*inputs))


def test_a_cpu_side_dequantize_in_the_wrong_domain_is_still_caught(cpu_only_lowering) -> None:
    _, lowered, _ = cpu_only_lowering
    ep = copy.deepcopy(lowered.exported_program())
    dq = next(n for n in ep.graph.nodes if "dequantize_per_tensor" in str(n.target))
    dq.args = (dq.args[0], dq.args[1] * 2, *dq.args[2:])
    r = qflow.analyze(ep, form="lowered")
    assert not r.proved and [f.kind for f in r.errors] == ["domain-mismatch"]


class IndexAfterEllipsis(torch.nn.Module):
    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return x[..., idx] + 1.0


def test_the_indices_of_an_index_left_on_the_cpu_are_no_data() -> None:
    """The Arm suite's `index_tensor` ellipsis tests (`--qflow-observe`, 2026-11-27): the partitioner
    leaves `x[..., idx]` on the CPU, where its int32 indices address the float input. Read as data they
    were a domain-mismatch error on a program the TOSA reference model runs equal to the fake-quantized
    model; they are addresses."""
    from qflow.targets.arm import pipeline as arm

    x = (torch.rand(25, 5, 13, 7), torch.arange(2, dtype=torch.int32))
    gm = arm.quantize(IndexAfterEllipsis(), x)
    lowered = arm.lower(torch.export.export(gm, x), x)
    assert torch.equal(arm.run_tosa_reference(lowered, x)[0], gm(*x))
    report = qflow.analyze(lowered, target="arm-tosa")
    assert report.status == "proved", str(report)


class IndexByTwo(torch.nn.Module):
    def forward(self, x: torch.Tensor, i0: torch.Tensor, i1: torch.Tensor) -> torch.Tensor:
        return x[(i0, i1)]


@pytest.mark.parametrize("shapes", [((5,), (5,)), ((5, 3), (1, 3))], ids=["flat", "broadcast"])
def test_gather_offsets_computed_from_integer_indices_are_plain_integers(shapes) -> None:
    """The Arm suite's delegated `index_tensor` cases: the payload turns two int32 index inputs into one
    GATHER offset, `i0 * 2 + i1`, with MULs by pre-computed constants (reshaped, and the indices tiled,
    when they broadcast). Integers nothing quantizes, so the constants beside them are plain integers
    too: proved (was `reference-needed`), TOSA == FQ."""
    from qflow.targets.arm import pipeline as arm

    x = (
        torch.rand(5, 2),
        torch.randint(5, shapes[0], dtype=torch.int32),
        torch.randint(2, shapes[1], dtype=torch.int32),
    )
    gm = arm.quantize(IndexByTwo(), x)
    lowered = arm.lower(torch.export.export(gm, x), x)
    assert torch.equal(arm.run_tosa_reference(lowered, x)[0], gm(*x))
    report = qflow.analyze(lowered, target="arm-tosa", reference=torch.export.export(gm, x))
    assert report.status == "proved", str(report)


class SliceScatter(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.slice_scatter(x, y, dim=1, start=0, end=4)


class BitwiseAnd(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.bitwise_and(x, y)


@pytest.mark.parametrize("model", [SliceScatter, BitwiseAnd], ids=lambda m: m.__name__)
def test_integer_inputs_nothing_quantizes_are_integer_data(model: type[torch.nn.Module]) -> None:
    """The Arm suite's int8 / int32 `slice_scatter`, `index_put` and bitwise tests (`--qflow-observe`): plain
    integer inputs nothing quantizes, which the lowering cats or ands. Read as free domains, two of them "could
    differ" and the cat was a mixed-input-domains error (2026-11-27); then unproven (`missing-domain`). Where no
    value of the program is quantized they are the integers PyTorch computes with (scale 1, zero point 0):
    nothing to prove, in every form, and the TOSA reference model computes the program."""
    from qflow.targets.arm import pipeline as arm

    x = (torch.randint(-128, 127, (3, 8), dtype=torch.int8), torch.randint(-128, 127, (3, 4), dtype=torch.int8))
    if model is BitwiseAnd:
        x = (x[0], x[0].flip(0))
    gm = arm.quantize(model(), x)
    with arm.capture_after() as parts:
        lowered = arm.lower(torch.export.export(gm, x), x)
    assert torch.equal(arm.run_tosa_reference(lowered, x)[0], gm(*x))
    for program in (gm, *parts, lowered):
        report = qflow.analyze(program, target="arm-tosa")
        assert report.status == "nothing-quantized" and not report.findings, str(report)


def test_an_integer_input_a_quantized_program_reads_as_numbers_is_integer_data() -> None:
    """Beside quantized values, an integer input an op reads as the numbers it holds (a bitwise op, a cast to
    float) is those integers, in every form (it was unproven, missing-domain, until 2026-12-05: the program
    computes on the integers whatever they meant outside, and so does its lowering); the TOSA reference model
    computes the program."""
    from qflow.targets.arm import pipeline as arm

    class Both(torch.nn.Module):
        def forward(self, x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.relu(x) * 2, torch.bitwise_and(n, n.flip(0))

    x = (torch.randn(3, 8), torch.randint(-128, 127, (3, 8), dtype=torch.int8))
    gm = arm.quantize(Both(), x)
    with arm.capture_after() as parts:
        lowered = arm.lower(torch.export.export(gm, x), x)
    assert all(torch.equal(a, b) for a, b in zip(arm.run_tosa_reference(lowered, x), gm(*x), strict=True))
    for program in (gm, *parts, lowered):
        report = qflow.analyze(program, target="arm-tosa")
        assert report.status == "proved", str(report)
    assert "assumed integer graph input n is in int8 scale=1 zp=0" in str(report)


class Gather(torch.nn.Module):
    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return torch.gather(x, 1, idx)


def test_the_tosa_gather_of_a_folded_partition_copies_codes() -> None:
    """The Arm suite's quantized gather tests: Arm's passes make `tosa.GATHER` before the fold, which was an
    unknown op in the folded partition (the TOSA artifact already read its GATHER as a copy)."""
    from qflow.targets.arm import pipeline as arm

    x = (torch.rand(4, 6), torch.randint(0, 6, (4, 3)))
    gm = arm.quantize(Gather(), x)
    with arm.capture_after() as parts:
        lowered = arm.lower(torch.export.export(gm, x), x)
    assert torch.equal(arm.run_tosa_reference(lowered, x)[0], gm(*x))
    assert parts and all(qflow.analyze(p, target="arm-tosa").status == "proved" for p in parts)


class Argmax(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=-1).to(torch.int32)  # (as the suite's test: int64 is not delegated)


def test_a_tosa_argmax_of_plain_integers_is_read_as_an_index() -> None:
    """The Arm suite's int8 `argmax` tests delegate TOSA ARGMAX, which was an unknown op in the artifact
    (unproven). Its output is an index, plain integers the parent reads as they are."""
    from qflow.targets.arm import pipeline as arm

    x = (torch.randint(-128, 127, (3, 8), dtype=torch.int8),)
    gm = arm.quantize(Argmax(), x)
    lowered = arm.lower(torch.export.export(gm, x), x)
    assert "executorch_call_delegate" in str(lowered.exported_program().graph)
    assert torch.equal(arm.run_tosa_reference(lowered, x)[0], gm(*x))
    report = qflow.analyze(lowered, target="arm-tosa")
    assert report.status == "nothing-quantized" and not report.findings, str(report)
