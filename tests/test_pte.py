"""ExecuTorch .pte programs checked as shipped (real Arm lowerings, to_executorch)."""

from __future__ import annotations

import copy
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from executorch.exir import to_edge

import qflow
from qflow.cli import main
from qflow.integrations import pte
from qflow.ir import pte_program, pte_tables
from qflow.targets.arm import pte_payload, tosa_io

pytest_plugins = ["pytester"]

BUNDLED = ("seed000_control", "seed000_probe")


@pytest.fixture(scope="module")
def ptes(built, tmp_path_factory) -> dict[str, Path]:
    """The bundled examples lowered with the TOSA partitioner and serialized."""
    root = tmp_path_factory.mktemp("pte")
    out = {}
    for name in BUNDLED:
        path = root / f"{name}.pte"
        path.write_bytes(serialized(built(name).lowered))
        out[name] = path
    return out


def serialized(lowered) -> bytes:
    """The .pte of a shared program: `to_executorch` rewrites the program it is
    called on (memory planning, out variants, renamed nodes), so serialize a copy."""
    return copy.deepcopy(lowered).to_executorch().buffer


def _tosa_types(payload: bytes) -> tuple[list[str], list[str]]:
    names = tosa_io.io_names(payload)
    assert names is not None
    return [t for _, t in names[0]], [t for _, t in names[1]]


def _errors(report) -> list[tuple[str, str]]:
    return sorted((f.kind, f.severity) for f in report.findings if f.severity == "error")


def test_the_execution_plan_is_read_with_its_quantize_arguments(built, ptes) -> None:
    """The CPU quantize's scale / zero point EValues are the parent graph's quantize arguments."""
    from qflow.ir.fx_nodes import Consts, qdq_domain, target_name
    from qflow.ops import OpClass, classify

    prog = pte.read_pte(ptes["seed000_control"])
    [plan] = prog.plans
    assert [c.kind for c in plan.calls] == ["kernel", "delegate", "kernel"]
    assert plan.calls[0].name == "quantized_decomposed::quantize_per_tensor.out"
    [d] = plan.delegates
    assert d.backend_id == "TOSABackend" and len(d.payload) > 1000  # the segment, not a reference
    dg = pte.build(prog)
    q = dg.value("quantize_per_tensor").definition.domain
    ep = built("seed000_control").lowered.exported_program()
    [node] = [n for n in ep.graph.nodes if n.op == "call_function" and classify(target_name(n)) is OpClass.QUANTIZE]
    assert q == qdq_domain(node, Consts(ep.graph_module, ep))


def test_a_tosa_pte_is_reported_for_arm_tosa(ptes) -> None:
    assert {qflow.analyze(path).target for path in ptes.values()} == {"arm-tosa"}


def test_the_tosa_io_types_are_those_the_in_memory_check_reads(built, ptes) -> None:
    from qflow.ir import delegate

    ep = built("seed000_control").lowered.exported_program()
    call = next(n for n in ep.graph.nodes if "call_delegate" in str(n.target))
    ins, outs = delegate.boundaries(delegate.lowered_module(ep.graph_module, call))
    [d] = pte.read_pte(ptes["seed000_control"]).plans[0].delegates
    assert _tosa_types(d.payload) == ([b.backend_dtype for b in ins], [b.backend_dtype for b in outs])


def _artifact_errors(report) -> list[str]:
    """The TOSA operators the artifact validator refutes, without the delegate's name."""
    return sorted(
        f.node.split("/", 1)[1] for f in report.findings if f.kind == "tosa-artifact-mismatch" and f.severity == "error"
    )


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_examples_from_the_cli_have_the_in_memory_artifact_verdict(built, ptes, name) -> None:
    """Dtype boundaries are checked from the .pte alone, and the TOSA payload is
    handed to the artifact validator anchored at the program's quantize and
    dequantize: seed 000's miscompiled cat is refuted from the .pte (the RESCALE
    after the CONCAT reads zero point 0, the CONCAT writes 102), the same TOSA
    operator the in-memory program's artifact check refutes (which, with the
    partition program's declarations, refutes more). A .pte keeps no
    scales of constants (TOSA stores weights as bare codes), so what depends on
    them stays unproven, never proved."""
    from_pte = qflow.analyze(ptes[name])
    in_memory = qflow.analyze(built(name).lowered)
    assert not from_pte.proved
    assert all(f.status == "unproven" and "TOSA" in f.message for f in from_pte.findings if f.severity != "error")
    # what only the weights' scales decide is said once, with the remedy
    assert [f.kind for f in from_pte.findings].count("reference-needed") == 1
    # the .pte anchors only its boundaries (no partition program): it refutes a subset of what the in-memory check does
    assert set(_artifact_errors(from_pte)) <= set(_artifact_errors(in_memory))
    assert bool(from_pte.errors) is bool(in_memory.errors) is (name == "seed000_probe")
    assert main(["check", str(ptes[name]), "--fail-on", "error"]) == int(name == "seed000_probe")
    assert main(["check", str(ptes[name])]) == 1  # not proved
    assert qflow.analyze(str(ptes[name])).obligations == from_pte.obligations


def test_without_the_artifact_validator_a_tosa_delegates_io_domains_are_unproven(ptes, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, pte_payload.TOSA_ARTIFACT_CHECK, None)  # import fails: the validator is missing
    r = qflow.analyze(ptes["seed000_probe"])
    assert not r.proved and not r.errors
    assert {f.node for f in r.findings} == {"delegate_0/input_0", "dequantize_per_tensor"}
    assert all(f.status == "unproven" and pte_payload.TOSA_ARTIFACT_CHECK in f.message for f in r.findings)


def _patch_scalar_type(data: bytes, value_index: int, scalar_type: int) -> bytes:
    """The program with one tensor EValue's scalar_type overwritten (a stale dtype, seed 002's symptom)."""
    size, _ = pte_program._extended_header(data)
    prog = pte_tables.table("qflow_fb_program", "Program").GetRootAs(data[:size], 0)
    ev = prog.ExecutionPlan(0).Values(value_index)
    t = pte_tables.as_table("qflow_fb_program", "Tensor", ev.Val())
    off = t._tab.Offset(4)
    assert off
    buf = bytearray(data)
    struct.pack_into("<b", buf, t._tab.Pos + off, scalar_type)
    return bytes(buf)


def test_a_stale_float_delegate_output_in_the_pte_is_a_delegate_dtype_mismatch(ptes) -> None:
    data = ptes["seed000_control"].read_bytes()
    plan = pte.read_pte(data).plans[0]
    out = plan.calls[1].args[-1]  # the delegate's output EValue
    assert plan.values[out].dtype == "int8"
    r = qflow.analyze(pte.build(_patch_scalar_type(data, out, 6)))  # FLOAT
    [f] = [f for f in r.findings if f.kind == "delegate-dtype-mismatch"]
    assert f.node == "delegate_0/output_0" and f.severity == "error"
    assert "TOSA flatbuffer" in f.message and "int8" in f.message and "float32" in f.message
    assert "factor 4" in f.message


@pytest.fixture(scope="module")
def seed002_tosa(tmp_path_factory):
    """Seed 002 on TOSA: every partition forced to exit at a view, lowered and serialized."""
    from qflow.examples.models import lower_attention

    lowered, _ = lower_attention(force_view_exit=True, backend="tosa")
    path = tmp_path_factory.mktemp("seed002") / "attention_view_exit.pte"
    path.write_bytes(lowered.to_executorch().buffer)
    return lowered, path


def test_seed002_boundaries_are_flagged_from_the_pte(seed002_tosa) -> None:
    lowered, path = seed002_tosa
    in_memory = [f for f in qflow.analyze(lowered).findings if f.kind == "delegate-dtype-mismatch"]
    from_pte = [f for f in qflow.analyze(path).findings if f.kind == "delegate-dtype-mismatch"]
    assert len(in_memory) == 10
    assert len(from_pte) == len(in_memory)
    assert all("produces int8" in f.message and "declares float32" in f.message for f in from_pte)
    assert all(f.node.startswith("delegate_") and "/output_" in f.node for f in from_pte)
    assert main(["check", str(path), "--fail-on", "error"]) == 1


def test_reading_a_pte_imports_no_torch(ptes) -> None:
    """The reader, the CPU side and the boundaries need no torch. (The TOSA artifact
    validator is left out here: it borrows qflow.ir.activations' helpers,
    which import torch.)"""
    code = (
        f"import sys; sys.modules[{pte_payload.TOSA_ARTIFACT_CHECK!r}] = None; import qflow; "
        "r = qflow.analyze(sys.argv[1]); "
        "assert 'torch' not in sys.modules, 'torch imported'; print(r.obligations['proved'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(ptes["seed000_control"])], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) > 0


def test_bad_pte_input_is_one_line_and_exit_2(ptes, tmp_path, capsys) -> None:
    data = ptes["seed000_control"].read_bytes()
    cut = tmp_path / "cut.pte"
    cut.write_bytes(data[:200])
    assert main(["check", str(cut)]) == 2
    not_pte = tmp_path / "x.pte"
    not_pte.write_bytes(b"not a program at all")
    assert main(["check", str(not_pte)]) == 2
    assert "not an ExecuTorch program" in capsys.readouterr().err
    assert main(["check", str(ptes["seed000_control"]), "--form", "qdq"]) == 2
    assert main(["repair", str(ptes["seed000_control"]), str(tmp_path / "out.pt2")]) == 2
    assert "exported program (.pt2)" in capsys.readouterr().err
    with pytest.raises(qflow.InputError):
        qflow.analyze(str(cut))


# -- against the program it was lowered from (--reference) ---------------------------------------

REFERENCED = ("seed000_control", "seed000_probe", "conv_bn_relu6_residual", "conv_cat_skip", "conv_relu_cat_skip")


@pytest.fixture(scope="module")
def referenced(built, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """(.pte, .pt2 of the exported PT2E program it was lowered from) per example."""
    root = tmp_path_factory.mktemp("ref")
    out = {}
    for name in REFERENCED:
        b = built(name)
        out[name] = (root / f"{name}.pte", root / f"{name}.pt2")
        out[name][0].write_bytes(serialized(b.lowered))
        torch.export.save(b.exported, out[name][1])
    return out


@pytest.mark.parametrize("name", ["seed000_control", "conv_bn_relu6_residual", "conv_cat_skip"])
def test_a_clean_tosa_pte_proves_against_the_program_it_was_lowered_from(built, referenced, name) -> None:
    """Alone, what depends on a weight's scale is unproven; with the PT2E
    program, each TOSA weight takes the scales of the one quantized constant
    with its values, each CLAMP is matched with the program's activations
    (relu6, and the relu before a cat), and the clean artifact proves."""
    pte_path, pt2 = referenced[name]
    alone = qflow.analyze(pte_path)
    assert not alone.proved and not alone.errors and alone.obligations["unproven"] > 0
    assert qflow.analyze(pte_path, reference=built(name).exported).proved
    assert main(["check", str(pte_path), "--reference", str(pt2)]) == 0


def test_the_probe_is_refuted_at_more_operators_against_its_program(referenced) -> None:
    pte_path, pt2 = referenced["seed000_probe"]
    alone, against = qflow.analyze(pte_path), qflow.analyze(pte_path, reference=pt2)
    assert set(_artifact_errors(alone)) < set(_artifact_errors(against))
    assert main(["check", str(pte_path), "--reference", str(pt2), "--fail-on", "error"]) == 1


def test_the_relu_fusion_defect_is_a_missing_clamp_against_its_program(referenced) -> None:
    """The .pte alone cannot tell a dropped relu (it keeps no activations);
    against its program, whose one delegate lowers every activation, the relu
    that cuts into the code range has no CLAMP: an error, as in memory."""
    pte_path, pt2 = referenced["conv_relu_cat_skip"]
    assert not qflow.analyze(pte_path).errors
    against = qflow.analyze(pte_path, reference=pt2)
    [f] = [f for f in against.findings if f.severity == "error"]
    assert "PT2E node relu" in f.message and "no CLAMP in the artifact enforces them" in f.message


def test_a_reference_with_other_weight_scales_refutes_the_rescales(built, referenced) -> None:
    """The proof is that the .pte computes the reference's domains: against a
    reference whose int8 conv weight scales are 25 % larger than those the
    artifact was built with, each CONV2D's bias is in the wrong accumulator
    domain and the outputs reach the parent's dequantize on the wrong grid."""
    import copy

    from qflow.ir.fx_nodes import Consts, target_name

    ep = copy.deepcopy(built("conv_bn_relu6_residual").exported)
    consts = Consts(ep.graph_module, ep)
    scaled = 0
    for n in ep.graph.nodes:
        if (
            n.op == "call_function"
            and "dequantize_per_channel" in target_name(n)
            and isinstance(n.args[1], torch.fx.Node)
        ):
            scale = consts.tensor(n.args[1])
            if scale is not None and n.args[-1] == torch.int8:  # the weights (the int32 ones are biases)
                scale.mul_(1.25)
                scaled += 1
    assert scaled >= 2
    r = qflow.analyze(referenced["conv_bn_relu6_residual"][0], reference=ep)
    errors = _artifact_errors(r)
    assert sum("conv2d" in e for e in errors) == 2 and any("rescale" in e for e in errors), errors


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_zoo_of_ptes_is_checked_each_against_the_pt2_beside_it(referenced, pytester, workers) -> None:
    """`pytest --qflow-check DIR`: a .pte with a .pt2 of its name beside it is
    proved against it; a .pte alone keeps its weight-dependent obligations unproven."""
    zoo = pytester.mkdir("zoo")
    (zoo / "alone").mkdir()
    for src in referenced["conv_cat_skip"]:
        shutil.copy(src, zoo / src.name)
    shutil.copy(referenced["conv_bn_relu6_residual"][0], zoo / "alone" / "conv_bn_relu6_residual.pte")
    out = pytester.path / "reports"
    result = pytester.runpytest_subprocess(
        "--qflow-check", str(zoo), f"--qflow-report={out}", "-p", "no:cacheprovider", "-rA", *workers
    )
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*PASSED zoo/conv_cat_skip.pte*"])
    result.stdout.fnmatch_lines(["*FAILED zoo/alone/conv_bn_relu6_residual.pte*"])
    against = json.loads((out / "zoo_conv_cat_skip.pte.json").read_text())
    alone = json.loads((out / "zoo_alone_conv_bn_relu6_residual.pte.json").read_text())
    assert against["proved"] and not alone["proved"]
    assert alone["obligations"]["unproven"] > 0 and alone["obligations"]["violated"] == 0


def test_a_reference_is_for_a_pte_and_must_be_a_program(built, referenced, tmp_path, capsys) -> None:
    pte_path, pt2 = referenced["seed000_control"]
    assert main(["check", str(pt2), "--reference", str(pt2)]) == 2
    assert "applies to an ExecuTorch .pte program" in capsys.readouterr().err
    assert main(["check", str(pte_path), "--reference", str(tmp_path / "missing.pt2")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--reference" in err
    with pytest.raises(qflow.InputError):
        qflow.analyze(pte_path, reference=built("seed000_control").converted)  # a bare graph module


class Pool1d(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool1d(x, 2)


@pytest.fixture(scope="module")
def cpu_only_pte(tmp_path_factory):
    """max_pool1d stays on the CPU (the TOSA partitioner does not take it): the
    plan runs Q → DQ → unsqueeze → max_pool2d_with_indices → squeeze → Q → DQ."""
    from qflow.targets.arm import pipeline as arm

    torch.manual_seed(4)
    x = torch.randn(1, 4, 8)
    lowered = arm.lower(arm.quantize(Pool1d().eval(), (x,)), (x,))
    path = tmp_path_factory.mktemp("cpu") / "pool1d.pte"
    path.write_bytes(lowered.to_executorch().buffer)
    return lowered, path


def _patch_double(data: bytes, value_index: int, new: float) -> bytes:
    size, _ = pte_program._extended_header(data)
    ev = pte_tables.table("qflow_fb_program", "Program").GetRootAs(data[:size], 0).ExecutionPlan(0).Values(value_index)
    t = pte_tables.as_table("qflow_fb_program", "Double", ev.Val())
    buf = bytearray(data)
    struct.pack_into("<d", buf, t._tab.Pos + t._tab.Offset(4), new)
    return bytes(buf)


def test_the_cpu_side_of_a_pte_computes_in_float_and_a_wrong_dequantize_is_caught(cpu_only_pte) -> None:
    lowered, path = cpu_only_pte
    from_pte, in_memory = qflow.analyze(path), qflow.analyze(lowered, form="lowered")
    assert from_pte.proved and not from_pte.findings, str(from_pte)
    assert from_pte.obligations == in_memory.obligations
    data = path.read_bytes()
    plan = pte.read_pte(data).plans[0]
    assert "aten::max_pool2d_with_indices.out" in [c.name for c in plan.calls]
    dq = next(c for c in plan.calls if c.name.startswith("quantized_decomposed::dequantize"))
    scale = plan.values[dq.args[1]].value
    r = qflow.analyze(pte.build(_patch_double(data, dq.args[1], scale * 2)))
    assert [(f.kind, f.node) for f in r.errors] == [("domain-mismatch", "dequantize_per_tensor")]


def test_a_tosa_payload_is_handed_to_the_artifact_validator_with_the_programs_anchors(ptes, monkeypatch) -> None:
    """The hook's wiring (the validator itself lives on another branch): anchors are
    the CPU quantize's domain at the input and the dequantize's at the output, its
    evidence joins the report, and an output it decides takes the parent's domain."""
    import types

    from qflow.graph import Definition, DefKind, Obligation, ObligationKind, Value
    from qflow.ops import OpClass

    seen = {}

    class Anchors:
        def __init__(self, inputs, outputs, consts, partition_activations=True):
            seen.update(inputs=inputs, outputs=outputs, partition_activations=partition_activations)

    def add_evidence(dg, prefix, call, checks):
        dg.add_value(Value(f"{prefix}/tosa#0", "tosa.RESCALE", OpClass.COMPUTE, Definition(DefKind.FREE)))
        dg.oblige(
            Obligation(ObligationKind.STRUCTURAL, f"{prefix}/tosa#0", f"{prefix}/tosa#0", holds=False, detail="stub")
        )

    stub = types.SimpleNamespace(
        read=lambda payload: payload,
        Anchors=Anchors,
        validate=lambda prog, anchors: ["one check"],
        add_evidence=add_evidence,
        link_constants=lambda prog, table: {},
    )
    monkeypatch.setitem(sys.modules, pte_payload.TOSA_ARTIFACT_CHECK, stub)
    dg = pte.build(ptes["seed000_control"])
    q = dg.value("quantize_per_tensor").definition.domain
    dq = dg.value("dequantize_per_tensor").definition.domain
    assert list(seen["inputs"].values()) == [q]
    assert [d for d, _ in seen["outputs"]] == [dq]
    assert seen["partition_activations"] is False  # a .pte has no partition program
    r = qflow.analyze(dg)
    assert [(f.node, f.status) for f in r.findings] == [("delegate_0/tosa#0", "violated")]  # the only one


class WeightOnlyInFloat(nn.Module):
    """A weight-only int8 linear whose cast was constant-folded: integer codes as float32 weights, each
    output channel scaled after the product (what `export_llm` with qmode=int8 writes), or not."""

    def __init__(self, scaled: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 16, bias=False)
        self.fc.weight.data = torch.randint(-128, 128, (16, 32)).float()
        self.register_buffer("scale", torch.rand(16) * 1e-2 if scaled else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return y * self.scale if self.scale is not None else y


@pytest.mark.parametrize("scaled", [True, False])
def test_float_weight_codes_on_the_cpu_are_never_nothing_quantized(scaled: bool) -> None:
    torch.manual_seed(0)
    x = (torch.randn(2, 32),)
    buffer = to_edge(torch.export.export(WeightOnlyInFloat(scaled).eval(), x)).to_executorch().buffer
    report = qflow.analyze(buffer)
    [finding] = [f for f in report.findings if f.kind == "float-weight-codes"]
    assert "all int8 codes" in finding.message
    if scaled:  # the dequantize, realised in float after the product
        assert report.status == "proved" and finding.severity == "info", str(report)
    else:  # where the scales went, the .pte cannot say
        assert report.status == "unproven" and finding.severity == "warning", str(report)
