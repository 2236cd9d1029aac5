"""Translation validation of the TOSA flatbuffers the Arm backend emits (real pipeline).

The artifact check reads each delegate's ``processed_bytes`` by TOSA 1.0 INT
semantics; these tests run it alone (graph checks off) on the real defect
models, on clean models, and on single-edit mutants of the clean flatbuffers
whose effect the TOSA reference model measures.
"""

from __future__ import annotations

import copy
import re
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import qflow
from qflow.targets.arm import pipeline as arm
from qflow.targets.arm import tosa_artifact as ta

CLEAN = ("seed000_control", "conv_bn_relu6_residual", "conv_cat_skip", "attention", "linear_per_channel", "mixed_a16w8")


def _artifact_errors(program) -> list:
    return [f for f in ta.analyze_artifact(program).findings if f.severity == "error"]


@pytest.mark.parametrize("name", CLEAN)
def test_clean_artifacts_prove_with_no_finding(built, clean, name) -> None:
    r = ta.analyze_artifact(built(name).lowered)
    assert r.form == "artifact" and not [f for f in r.findings if f.severity != "warning"], str(r)
    clean(r, name)
    assert r.obligations["proved"] >= 5  # every RESCALE/conv/edge was checked, not skipped


def test_the_artifact_is_evidence_of_qflow_analyze(built) -> None:
    """qflow.analyze of a lowered program includes the artifact obligations by default."""
    lowered = built("seed000_probe").lowered
    r = qflow.analyze(lowered)
    kinds = [f.kind for f in r.errors]
    assert "requant-after-passthrough" in kinds and "tosa-artifact-mismatch" in kinds
    clean = qflow.analyze(built("seed000_control").lowered)
    assert (
        clean.proved
        and clean.obligations["proved"] > ta.analyze_artifact(built("seed000_control").lowered).obligations["proved"]
    )


def test_seed000_on_the_artifact_alone_names_the_rescale_after_concat(built) -> None:
    errors = _artifact_errors(built("seed000_probe").lowered)
    first = errors[0]
    assert "TOSA RESCALE #" in first.message and "PT2E node aten_cat_default" in first.message
    assert "input_zp is 0" in first.message and "zp=102" in first.message  # the codes the concat really holds
    assert first.expected == {
        "dtype": "int8",
        "scale": pytest.approx(0.1),
        "zero_point": 102,
        "qmin": -128,
        "qmax": 127,
    }
    # the wrong scale reaches the output: the parent dequantizes codes in another domain
    assert any("output 0" in f.message and "scale=0.1" in f.message for f in errors)


@pytest.mark.parametrize("name", ["conv_relu_cat_signed", "conv_relu_cat_skip", "seed001_tiny_conv_relu_cat"])
def test_the_relu_fusion_defect_is_a_dropped_clamp_in_the_artifact(built, name) -> None:
    [f] = _artifact_errors(built(name).lowered)
    assert "aten_relu_default" in f.message and "no CLAMP in the artifact enforces them" in f.message


def test_seed002_boundary_on_the_artifact_alone() -> None:
    from qflow.examples.models import lower_attention

    lowered, _ = lower_attention(force_view_exit=True, backend="tosa")
    errors = _artifact_errors(lowered)
    assert errors and all("reads float32 real numbers" in f.message and "int8" in f.message for f in errors)
    clean, _ = lower_attention(force_view_exit=False, backend="tosa")
    assert ta.analyze_artifact(clean).proved


class NegHardtanh(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.neg(F.hardtanh(x, 0.0, 6.0))


@pytest.fixture(scope="module")
def neg_case():
    torch.manual_seed(0)
    x = (torch.rand(1, 4, 4, 4) * 8 - 1,)
    converted = arm.quantize(NegHardtanh().eval(), x)
    return converted, arm.lower(converted, x), x


def test_the_stock_neg_case_is_flagged_and_miscomputes(neg_case) -> None:
    converted, lowered, x = neg_case
    errors = _artifact_errors(lowered)
    assert errors, "NEGATE keeps the scale: the parent dequantizes with the neg's own scale"
    f = errors[-1]
    assert "output 0" in f.message and "NEGATE" in f.message
    held = float(re.search(r"holds codes in int8 scale=([0-9.e-]+)", f.message).group(1))
    assert held != pytest.approx(f.expected["scale"], rel=1e-3)  # the hardtanh's scale, not the neg's
    [out] = arm.run_tosa_reference(lowered, x)
    assert (out - converted(*x)).abs().max() > 0.1  # what the finding predicts, measured


@pytest.fixture(scope="module")
def a8w4() -> dict[str, tuple]:
    """Int4 weights (the Arm suite's a8w4 tests): TOSA-1.0+INT+int4 packs them two per byte."""
    from executorch.backends.arm.quantizer.arm_quantizer import get_symmetric_a8w4_quantization_config

    torch.manual_seed(4)
    spec, out = "TOSA-1.0+INT+int4", {}
    for name, model, x, per_channel in (
        ("linear", nn.Linear(10, 15), (torch.randn(1, 10),), True),
        ("conv", nn.Conv2d(3, 5, 3), (torch.randn(1, 3, 8, 8),), True),
        ("grouped_conv", nn.Conv2d(4, 6, 3, groups=2), (torch.randn(1, 4, 8, 8),), True),
        ("grouped_conv_per_tensor", nn.Conv2d(4, 6, 3, groups=2), (torch.randn(1, 4, 8, 8),), False),
    ):
        config = get_symmetric_a8w4_quantization_config(is_per_channel=per_channel)
        converted = arm.quantize(model.eval(), x, spec=spec, config=config)
        out[name] = (converted, arm.lower(converted, x, spec=spec), x)
    return out


@pytest.mark.parametrize("name", ["linear", "conv"])
def test_int4_weights_are_read_and_the_artifact_proves(a8w4, name) -> None:
    converted, lowered, x = a8w4[name]
    [out] = arm.run_tosa_reference(lowered, x)
    assert (out - converted(*x)).abs().max() == 0  # exact on the TOSA reference model
    assert qflow.analyze(lowered).proved  # unproven before INT4 constants were decoded
    assert ta.analyze_artifact(lowered).proved
    prog = ta.read(lowered.exported_program().graph_module.lowered_module_0.processed_bytes)
    [conv] = [op for op in prog.ops if op.op == "CONV2D"]
    w = prog.tensors[conv.inputs[1]]
    assert w.dtype == "INT4"
    dq = next(n for n in converted.graph.nodes if "dequantize_per_channel" in str(n.target))
    codes = getattr(converted, dq.args[0].target)  # the int8-held weight codes in [-7, 7]
    flat = codes.permute(0, 2, 3, 1) if codes.dim() == 4 else codes  # TOSA weights are OHWI
    assert np.array_equal(w.data, flat.reshape(-1).numpy())


def int_fp_program() -> tuple[Any, tuple]:
    """The MLP example lowered for TOSA-1.0+INT+FP: its boundary quantize and
    dequantize are float arithmetic inside the delegate."""
    from qflow.examples.models import MODELS

    ex = MODELS["linear_per_channel"]()
    converted = arm.quantize(ex.model, ex.inputs, spec="TOSA-1.0+INT+FP")
    return arm.lower(converted, ex.inputs, spec="TOSA-1.0+INT+FP"), ex.inputs


def test_an_int_fp_partitions_float_quantize_and_dequantize_are_read() -> None:
    lowered, inputs = int_fp_program()
    prog = ta.read(lowered.exported_program().graph_module.lowered_module_0.processed_bytes)
    assert [prog.tensors[n].dtype for n in (*prog.inputs, *prog.outputs)] == ["FP32", "FP32"]
    assert {"FLOOR", "CEIL", "SELECT", "CAST"} <= {op.op for op in prog.ops}
    r = ta.analyze_artifact(lowered)
    assert r.proved and r.obligations["unproven"] == 0
    assert not any("TOSA artifact not checked" in n for n in qflow.analyze(lowered).notes)


class TanhGelu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh") + F.gelu(x)


@pytest.mark.parametrize("spec", ["TOSA-1.0+INT", "TOSA-1.0+INT+int16"])
def test_a_table_tabulates_the_op_with_its_arguments(spec) -> None:
    """gelu(x, approximate="tanh") is another TABLE than gelu(x): its entries are recomputed with the
    node's own arguments (the transformer campaign's lowered form raised 10 false alarms without)."""
    from executorch.backends.arm.quantizer import get_symmetric_a16w8_quantization_config

    torch.manual_seed(0)
    x = (torch.randn(1, 4, 16),)
    cfg = get_symmetric_a16w8_quantization_config() if spec.endswith("int16") else None
    converted = arm.quantize(TanhGelu().eval(), x, spec=spec, config=cfg)
    lowered = arm.lower(converted, x, spec=spec)
    prog = ta.read(lowered.exported_program().graph_module.lowered_module_0.processed_bytes)
    assert sum(op.op == "TABLE" for op in prog.ops) == 2
    assert not _artifact_errors(lowered)
    report = qflow.analyze(lowered, target="arm-tosa", reference=torch.export.export(converted, x))
    assert not report.errors and not any(f.kind == "tosa-artifact-mismatch" for f in report.findings), str(report)


@pytest.mark.parametrize("name", ["grouped_conv", "grouped_conv_per_tensor"])
def test_a_grouped_conv_split_per_group_takes_its_channels_scales(a8w4, name) -> None:
    """Arm lowers a grouped conv as one CONV2D per group, each with a slice of
    the int4 weight that no PT2E parameter is: each slice is linked to the
    scales of its run of output channels, or to the one scale of a per-tensor
    weight (both were unproven before)."""
    converted, lowered, x = a8w4[name]
    [out] = arm.run_tosa_reference(lowered, x)
    assert (out - converted(*x)).abs().max() == 0
    prog = ta.read(lowered.exported_program().graph_module.lowered_module_0.processed_bytes)
    convs = [op for op in prog.ops if op.op == "CONV2D"]
    assert len(convs) == 2 and all(prog.tensors[op.inputs[1]].shape[0] == 3 for op in convs)
    assert qflow.analyze(lowered).proved
    conv = next(n for n in converted.graph.nodes if "conv2d" in str(n.target))
    scale = conv.args[1].args[1]  # the weight's dequantize, read from the PT2E program itself
    scales = getattr(converted, scale.target).tolist() if isinstance(scale, torch.fx.Node) else scale
    consts = ta.constant_domains(lowered.exported_program().graph_module.lowered_module_0.original_module)
    linked = ta.link_constants(prog, consts)
    for k, op in enumerate(convs):
        if name == "grouped_conv":
            assert list(linked[op.inputs[1]].scale) == pytest.approx(scales[3 * k : 3 * k + 3])
        else:
            assert not linked[op.inputs[1]].per_channel and linked[op.inputs[1]].scale == pytest.approx(scales)


# --------------------------------------------------------------------------
# Mutation test: one edit at a time in clean flatbuffers, run on the TOSA
# reference model; every mutant that changes the output must be flagged.
# --------------------------------------------------------------------------


class PadConvPool(nn.Module):
    """An explicit PAD (constant_pad_nd) and an AVG_POOL2D, absent from the examples."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(self.conv(F.pad(x, (1, 1, 1, 1), value=0.0)), 2)


@dataclass(frozen=True)
class Mutant:
    what: str
    buf: bytes


def _patch(buf: bytearray, pos: int, fmt: str, value: float) -> bytes:
    out = bytearray(buf)
    struct.pack_into(fmt, out, pos, value)
    return bytes(out)


_FMT = {"INT8": "<b", "INT16": "<h", "INT32": "<i"}


def _wrap(v: int, dtype: str) -> int:
    bits = {"INT8": 8, "INT16": 16, "INT32": 32}[dtype]
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def mutants(buf: bytes) -> list[Mutant]:
    """Single edits: RESCALE multiplier/shift/zero points, a neutralised RESCALE
    (multiplier 2^30, shift 30, zero points 0: the codes pass unconverted), conv
    and matmul zero points, CLAMP bounds, TABLE entries, PAD constants, and in an
    INT+FP partition the scale, zero point and rounding constants of its float
    quantize / dequantize; in every region (cond branches, loop bodies)."""
    prog = ta.read(buf)
    b = bytearray(buf)
    out: list[Mutant] = []
    seen: set[str] = set()  # a constant two ops read (the ± 0.5 of a rounding) is mutated once

    def scalar(name: str, delta: int, what: str, k: int = 0) -> None:
        t = prog.tensors[name]
        if t.data_pos is None or t.dtype != "INT8":  # the reference model aborts on other non-zero zero points
            return
        size = struct.calcsize(_FMT[t.dtype])
        v = _wrap(int(t.data[k]) + delta, t.dtype)
        out.append(Mutant(what, _patch(b, t.data_pos + k * size, _FMT[t.dtype], v)))

    regions = [("", op) for op in prog.ops] + [(f"{r} ", op) for r, reg in prog.regions.items() for op in reg.ops]
    for region, op in regions:
        tag = f"{region}{op.op} #{op.index}"
        if op.op == "RESCALE":
            _, mult, shift, izp, ozp = op.inputs
            m = prog.tensors[mult]
            wide = m.dtype == "INT32"  # scale32; else 16-bit multipliers
            bigger = min(int(m.data[0] * 1.25), (1 << (31 if wide else 15)) - 1)
            out.append(Mutant(f"{tag} multiplier x1.25", _patch(b, m.data_pos, _FMT[m.dtype], bigger)))
            scalar(shift, 1, f"{tag} shift +1")
            # TOSA allows a non-zero zero point on int8 only: the reference model aborts the process otherwise
            if prog.tensors[izp].dtype == "INT8":
                scalar(izp, 3, f"{tag} input_zp +3")
            if prog.tensors[ozp].dtype == "INT8":
                scalar(ozp, 3, f"{tag} output_zp +3")
            gone = bytearray(b)
            one = 30 if wide else 14
            for name, v in ((mult, 1 << one), (shift, one), (izp, 0), (ozp, 0)):
                t = prog.tensors[name]
                if t.dtype == "INT48":  # 6-byte little-endian
                    gone[t.data_pos : t.data_pos + 6 * len(t.data)] = v.to_bytes(6, "little") * len(t.data)
                    continue
                size = struct.calcsize(_FMT[t.dtype])
                for k in range(len(t.data)):
                    struct.pack_into(_FMT[t.dtype], gone, t.data_pos + k * size, v)
            out.append(Mutant(f"{tag} removed (a code copy)", bytes(gone)))
        elif op.op in ("CONV2D", "DEPTHWISE_CONV2D", "MATMUL"):
            for z in op.inputs[3:5] if op.op != "MATMUL" else op.inputs[2:4]:
                if prog.tensors[z].dtype == "INT8":
                    scalar(z, 3, f"{tag} {z} +3")
        elif op.op in ("AVG_POOL2D", "NEGATE"):
            scalar(op.inputs[1], 3, f"{tag} input_zp +3")
            scalar(op.inputs[2], 3, f"{tag} output_zp +3")
        elif op.op == "PAD" and len(op.inputs) > 2:
            scalar(op.inputs[2], 5, f"{tag} pad_const +5")
        elif op.op in ("MUL", "ADD", "SUB"):  # INT+FP: the boundary quantize / dequantize in float
            for name in op.inputs[:2]:
                t = prog.tensors[name]
                if t.data_pos is None or t.data is None or t.data.size != 1 or name in seen:
                    continue
                seen.add(name)
                if t.dtype == "FP32":
                    v, mul = float(t.data[0]), op.op == "MUL"
                    what = f"{tag} {name} {'x1.25' if mul else '+3'}"
                    out.append(Mutant(what, _patch(b, t.data_pos, "<f", v * 1.25 if mul else v + 3)))
                elif t.dtype == "INT32" and op.op == "SUB":  # the dequantize's zero point
                    out.append(Mutant(f"{tag} {name} +3", _patch(b, t.data_pos, "<i", int(t.data[0]) + 3)))
        elif op.op == "CLAMP" and len(op.attrs["min_bytes"]) == 4:  # float: the quantize's code range
            lo, hi = (struct.unpack("<f", op.attrs[k])[0] for k in ("min_bytes", "max_bytes"))
            out.append(Mutant(f"{tag} min +5", _patch(b, op.attrs["min_pos"], "<f", lo + 5)))
            out.append(Mutant(f"{tag} max -5", _patch(b, op.attrs["max_pos"], "<f", hi - 5)))
        elif op.op == "CLAMP":
            fmt = "<b" if len(op.attrs["min_bytes"]) == 1 else "<h"
            lo = struct.unpack(fmt, op.attrs["min_bytes"])[0]
            hi = struct.unpack(fmt, op.attrs["max_bytes"])[0]
            out.append(Mutant(f"{tag} min +5", _patch(b, op.attrs["min_pos"], fmt, lo + 5)))
            out.append(Mutant(f"{tag} max -5", _patch(b, op.attrs["max_pos"], fmt, hi - 5)))
        elif op.op == "TABLE":
            t = prog.tensors[op.inputs[1]]
            for k in (0, 64, 128, 160, 192, 255):
                scalar(t.name, 9, f"{tag} entry {k - 128} +9", k)
    return out


def _run(lowered, inputs) -> torch.Tensor | None:
    try:
        return torch.cat([o.reshape(-1) for o in arm.run_tosa_reference(lowered, inputs)])
    except Exception:  # the reference model rejects the mutant (not a silent miscompile)
        return None


def _mutation_models(built, a8w4):
    torch.manual_seed(9)
    x = (torch.randn(1, 3, 8, 8),)
    extra = arm.lower(arm.quantize(PadConvPool().eval(), x), x)
    yield "pad_conv_pool", extra, x
    for name, (_, lowered, inputs) in a8w4.items():
        yield f"a8w4_{name}", lowered, inputs
    yield "int_fp_linear_per_channel", *int_fp_program()
    for name in ("seed000_control", "conv_bn_relu6_residual", "conv_cat_skip", "attention", "mixed_a16w8"):
        b = built(name)
        yield name, b.lowered, b.inputs


def _flagged(program: Any, known: set[tuple[str, str]]) -> bool:
    """Is the artifact unproved for a reason beyond the `known` findings of the unmodified one?"""
    r = ta.analyze_artifact(program)
    return not r.proved and not {(f.kind, f.node) for f in r.findings} <= known


def test_every_output_changing_mutant_is_detected(built, a8w4, clean, capsys) -> None:
    score = {"mutants": 0, "output changed": 0, "detected": 0, "rejected by the reference model": 0, "equivalent": 0}
    missed, equivalent_flagged = [], 0
    for name, lowered, inputs in _mutation_models(built, a8w4):
        program = copy.deepcopy(lowered)
        gm = program.exported_program().graph_module
        lms = [m for n, m in gm.named_children() if n.startswith("lowered_module")]
        unmodified = ta.analyze_artifact(program)
        clean(unmodified, name)  # (mixed_a16w8: unproven at its int16 linear's 16-bit-multiplier RESCALE)
        known = {(f.kind, f.node) for f in unmodified.findings}
        base = _run(program, inputs)
        assert base is not None
        for lm in lms:
            original = bytes(lm.processed_bytes)
            for mut in mutants(original):
                lm._processed_bytes = mut.buf
                score["mutants"] += 1
                flagged = _flagged(program, known)
                out = _run(program, inputs)
                if out is None:
                    score["rejected by the reference model"] += 1
                elif not torch.equal(out, base):
                    score["output changed"] += 1
                    score["detected"] += flagged
                    if not flagged:
                        missed.append(f"{name}: {mut.what}")
                else:
                    score["equivalent"] += 1
                    equivalent_flagged += flagged
            lm._processed_bytes = original
    with capsys.disabled():
        print(f"\nmutation score: {score} (equivalent mutants flagged anyway: {equivalent_flagged})")
    assert score["output changed"] >= 40
    assert not missed, missed
    assert score["detected"] == score["output changed"]


def test_mutant_reader_round_trips(built) -> None:
    """A mutant differs from the artifact in exactly the bytes of its one edit."""
    buf = bytes(built("conv_cat_skip").lowered.exported_program().graph_module.lowered_module_0.processed_bytes)
    for m in mutants(buf)[:20]:
        diff = np.nonzero(np.frombuffer(m.buf, np.uint8) != np.frombuffer(buf, np.uint8))[0]
        limit = 160 if "removed" in m.what else 4  # a removal rewrites the multiplier/shift of every channel
        assert 0 < len(diff) <= limit, m.what


def _proved_and_exact(model: nn.Module, x: tuple[torch.Tensor, ...]) -> tuple[Any, Any, Any]:
    """Quantized with the stock Arm quantizer and lowered: proved alone, equal to the fake-quantized
    model on the TOSA reference model. (converted model, lowered program, its delegate's lowered module)"""
    gm = arm.quantize(model, x)
    lowered = arm.lower(gm, x)
    assert qflow.analyze(lowered, target="arm-tosa").status == "proved"
    assert torch.equal(_run(lowered, x), gm(*x).reshape(-1))
    lm = next(m for n, m in lowered.exported_program().graph_module.named_children() if n.startswith("lowered"))
    return gm, lowered, lm


def _output_changing_edits_flagged(gm: Any, lowered: Any, lm: Any, x: tuple[torch.Tensor, ...], what: str) -> int:
    """How many single `what` edits (`mutants`) of the delegate change its output on `x`; each must leave
    the artifact unproved (the payload is restored after)."""
    buf, changed = bytes(lm.processed_bytes), 0
    for mut in (m for m in mutants(buf) if what in m.what):
        lm._processed_bytes = mut.buf
        out = _run(lowered, x)
        if out is not None and not torch.equal(out, gm(*x).reshape(-1)):
            changed += 1
            assert not ta.analyze_artifact(lowered).proved, mut.what
    lm._processed_bytes = buf
    return changed


def test_a_pre_computed_zeros_like_is_anchored_and_its_codes_checked() -> None:
    """The Arm suite's ``where(x > zeros_like(x), x, y)``: to_edge pre-computes the zeros into a TOSA
    constant named after a ``full`` the partition does not have. It is the partition's one computation
    from constants or shapes only with those codes, so it is anchored: the program proves without a
    reference, TOSA == fake-quantized, and the constant moved by one code (the comparison's threshold
    moves) is flagged."""
    suite_where = pytest.importorskip("executorch.backends.arm.test.ops.test_where")
    model = suite_where.two_dim_tensor_cond.eval()
    torch.manual_seed(0)
    x = model.get_inputs()
    gm, lowered, lm = _proved_and_exact(model, x)
    buf = bytes(lm.processed_bytes)
    (name,) = [n for n, t in ta.read(buf).tensors.items() if n.endswith("_pre_computed")]
    zeros = ta.read(buf).tensors[name]
    mutant = bytearray(buf)
    for k, code in enumerate(zeros.data):
        mutant = bytearray(_patch(mutant, zeros.data_pos + k, "<b", int(code) - 1))
    lm._processed_bytes = bytes(mutant)
    at_zero = (torch.zeros_like(x[0]), torch.ones_like(x[1]))  # 0 > 0 is false; 0 > -1 code is true
    assert not torch.equal(_run(lowered, at_zero), gm(*at_zero).reshape(-1))
    assert not ta.analyze_artifact(lowered).proved


def test_a_table_two_ops_share_is_checked_for_each() -> None:
    """A softmax calibrated on a constant input (the Arm suite's ``ones`` case): its exp and reciprocal
    tables come out equal, FuseEqualPlaceholdersPass keeps one, named after the reciprocal. Each TABLE
    reading it is checked against the op whose input domain it reads: the program proves, TOSA == FQ,
    and every edit of the shared table that changes the output is flagged."""
    model, x = nn.Softmax(1).eval(), (torch.ones(10, 10),)
    gm, lowered, lm = _proved_and_exact(model, x)
    buf = bytes(lm.processed_bytes)
    tables = [op for op in ta.read(buf).ops if op.op == "TABLE"]
    assert len(tables) == 2 and len({op.inputs[1] for op in tables}) == 1  # (one table, two uses)
    assert _output_changing_edits_flagged(gm, lowered, lm, x, "TABLE")


class SiluOfSilu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x) + F.silu(F.silu(x))


def test_a_table_is_the_node_it_tabulates_when_the_passes_number_nodes_again() -> None:
    """Transformer campaign, stock a8w8 (`00204-tx-arm-pc`, `00416`, 2026-11-27): Arm's passes name a TABLE's
    constant after its node as they number it — after FuseDuplicateUsersPass merged the two ``silu(x)``, the
    third silu is their ``aten_silu_default_1``, the program's second. The check read that TABLE against
    ``silu(x)``'s domains: an error on a program TOSA runs equal to the fake-quantized model. A TABLE is now
    the node of its op that reads its input's domain and whose table it is: proved, and every edit of a
    table that changes the output is flagged."""
    torch.manual_seed(0)
    x = (torch.randn(1, 4, 8) * 2,)
    gm, lowered, lm = _proved_and_exact(SiluOfSilu().eval(), x)
    tables = [t for op in ta.read(bytes(lm.processed_bytes)).ops if op.op == "TABLE" for t in op.inputs[1:2]]
    assert sorted(tables) == ["b_aten_silu_default_1_table_constant", "b_aten_silu_default_table_constant"]
    assert _output_changing_edits_flagged(gm, lowered, lm, x, "TABLE")


class GeluOfGelu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(F.gelu(x))


def test_a_table_two_ops_share_is_read_in_the_domain_nearest_its_input() -> None:
    """Transformer campaign, stock a8w8 (`00604-tx-arm-pc`, 2026-11-27): GELU over values in [1, 4] is almost the
    identity, so the two GELUs' domains are a hair apart, their tables equal, and FuseEqualPlaceholdersPass keeps
    one. Each TABLE reading it fits both nodes; they declare output domains a hair apart, and the check gave up
    (unproven). It now takes the node whose input scale is nearest the codes the TABLE reads: proved, TOSA ==
    FQ, and every edit of the shared table that changes the output is flagged."""
    torch.manual_seed(0)
    x = (torch.rand(1, 4, 16) * 3 + 1,)
    gm, lowered, lm = _proved_and_exact(GeluOfGelu().eval(), x)
    tables = [op.inputs[1] for op in ta.read(bytes(lm.processed_bytes)).ops if op.op == "TABLE"]
    assert len(tables) == 2 and len(set(tables)) == 1 and tables[0].endswith("_common")
    assert _output_changing_edits_flagged(gm, lowered, lm, x, "TABLE")


def test_a_merged_zero_bias_is_anchored_by_the_convolution_that_reads_it() -> None:
    """DS-CNN and MobileNet of the Arm suite (`--qflow-observe`, 2026-11-27): zero biases, equal codes, which
    FuseEqualPlaceholdersPass merges into one `_common` constant; each use is anchored by the PT2E node its
    convolution came from. That node was found by position, counting depthwise and ordinary convolutions
    together, while the serializer numbers them apart: every bias was anchored in another convolution's
    accumulator domain (16 false errors on programs the TOSA reference model runs right). A convolution is
    now named by its weight, which Arm renames after it."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(2, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3, groups=8), nn.ReLU(),
        nn.Conv2d(8, 8, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, groups=8), nn.Conv2d(8, 4, 1),
    ).eval()  # fmt: skip
    for m in model:
        if isinstance(m, nn.Conv2d):
            nn.init.zeros_(m.bias)
    x = (torch.randn(1, 2, 12, 12),)
    gm = arm.quantize(model, x)
    program = torch.export.export(gm, x)
    lowered = arm.lower(program, x)
    assert torch.equal(arm.run_tosa_reference(lowered, x)[0], gm(*x))
    report = qflow.analyze(lowered, target="arm-tosa", reference=program)
    assert report.status == "proved", str(report)


class Cumsum(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, 1)


def test_the_kernel_of_ones_arm_makes_of_a_cumsum_is_anchored_as_a_sum() -> None:
    """The Arm suite's int8 cumsum tests: DecomposeCumsumPass computes a cumsum as a depthwise convolution
    with a kernel of ones and a zero bias, constants no program declares (the lowered programs were
    `reference-needed`). The all-ones kernel is a sum (codes 1 for the real 1) and a zero bias is zero in any
    domain: proved alone, TOSA == FQ; a kernel code moved, and every output-changing RESCALE edit, is not."""
    torch.manual_seed(0)
    x = (torch.randn(2, 6),)
    gm, lowered, lm = _proved_and_exact(Cumsum().eval(), x)
    buf = bytes(lm.processed_bytes)
    (kernel,) = [t for n, t in ta.read(buf).tensors.items() if n.endswith("_weight_hwicm")]
    lm._processed_bytes = _patch(bytearray(buf), kernel.data_pos + 2, "<b", 2)
    assert not torch.equal(_run(lowered, x), gm(*x).reshape(-1))
    assert not ta.analyze_artifact(lowered).proved
    lm._processed_bytes = buf
    assert _output_changing_edits_flagged(gm, lowered, lm, x, "RESCALE")


@pytest.fixture(scope="module")
def campaign_program() -> Any:
    """A soundness-campaign case rebuilt from its seed: (quantized program, its export, lowered, an input)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks" / "soundness"))
    import case
    from gen import generate

    built: dict[str, tuple[Any, Any, Any, tuple[torch.Tensor, ...]]] = {}

    def build(cid: str) -> tuple[Any, Any, Any, tuple[torch.Tensor, ...]]:
        if cid not in built:
            index, full = case.parse_id(cid)
            variant = case.base_variant(full)
            converted, samples, tests = case.quantized(variant, generate(index, case.menu_of(full)), index, {})
            ep = torch.export.export(converted, samples[0], strict=True)
            lowered, _ = case.lower(variant, copy.deepcopy(ep), tests[0])
            built[cid] = converted, ep, lowered, tests[0]
        return built[cid]

    return build


@pytest.mark.parametrize(
    "cid, edited",
    [
        # relu(abs(t) - t), t >= 0, a custom domain on the relu whose requant Arm drops: the relu's CLAMP
        # has its bounds in the requant's output domain, on the codes it copies
        ("00081-arm-custom", ("CLAMP",)),
        # clamp(neg(x)), the neg's output scale dropped (NEGATE keeps its input's): the CLAMP after it has
        # its bounds in the declared domain, on codes in the kept scale
        ("02159-arm-custom", ("CLAMP", "NEGATE")),
    ],
)
def test_an_op_after_a_violation_the_partition_weighs_is_checked_in_the_declared_domain(
    campaign_program, cid: str, edited: tuple[str, ...]
) -> None:
    """Where the partition drops a requant or a scale and weighs that itself (its own obligation), the artifact
    says so once and checks what follows in the domain the program reads the codes in. Each program computes
    exactly on the reference model (TOSA == the quantized program) and proves lowered; every single edit of
    the ops that realise the drop which changes the output leaves it unproved."""
    converted, ep, lowered, x = campaign_program(cid)
    assert qflow.analyze(lowered, target="arm-tosa", reference=ep).proved
    want = _run(lowered, x)
    with torch.no_grad():
        out = converted(*x)
    assert torch.equal(want, torch.cat([o.reshape(-1) for o in (out if isinstance(out, tuple) else (out,))]))
    lm = next(m for n, m in lowered.exported_program().graph_module.named_children() if n.startswith("lowered"))
    buf, changed = bytes(lm.processed_bytes), 0
    try:
        for mut in (m for m in mutants(buf) if m.what.startswith(edited)):
            lm._processed_bytes = mut.buf
            got = _run(lowered, x)
            if got is not None and not torch.equal(got, want):
                changed += 1
                assert not qflow.analyze(lowered, target="arm-tosa", reference=ep).proved, mut.what
    finally:
        lm._processed_bytes = buf
    assert changed, "no edit changed the output: the test measures nothing"
