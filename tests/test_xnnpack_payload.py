"""The XNNPACK delegate payload, read from real .pte files (XNNPACKQuantizer +
XnnpackPartitioner + to_executorch) and run on the ExecuTorch runtime."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import qflow
from qflow.cli import main
from qflow.integrations import pte
from qflow.ir import pte_tables
from qflow.targets.xnnpack import payload as xnn


class CatPool(nn.Module):
    """conv→relu and conv joined by cat, then max-pool: two code-copying XNNPACK nodes."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(torch.cat([F.relu(self.a(x)), self.b(x)], 1), 2)


def _models() -> dict[str, tuple[nn.Module, tuple[torch.Tensor, ...]]]:
    from qflow.examples.models import MLP, ConvBnRelu6Residual, ConvCatSkip

    torch.manual_seed(0)
    return {
        "cat_pool": (CatPool(), (torch.randn(1, 3, 8, 8),)),
        "conv_cat_skip": (ConvCatSkip(), (torch.randn(1, 3, 8, 8),)),
        "mlp": (MLP(), (torch.randn(2, 8),)),
        "conv_bn_relu6_residual": (ConvBnRelu6Residual(), (torch.randn(1, 4, 8, 8),)),
    }


def lower_xnnpack(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple[object, bytes, object]:
    """(EdgeProgramManager, .pte bytes, converted Q/DQ module) with the stock XNNPACK flow, per-channel weights."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    model = model.eval()
    gm = torch.export.export(model, inputs).module(check_guards=False)
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(gm, quantizer)
    prepared(*inputs)
    converted = convert_pt2e(prepared)
    lowered = to_edge_transform_and_lower(torch.export.export(converted, inputs), partitioner=[XnnpackPartitioner()])
    return lowered, lowered.to_executorch().buffer, converted


class _Lowered:
    def __init__(self, root: Path) -> None:
        self.root, self.cache, self.converted = root, {}, {}
        self.models = _models()

    def __call__(self, name: str) -> tuple[object, Path, tuple[torch.Tensor, ...]]:
        if name not in self.cache:
            model, inputs = self.models[name]
            lowered, buf, converted = lower_xnnpack(model, inputs)
            path = self.root / f"{name}.pte"
            path.write_bytes(buf)
            self.cache[name] = (lowered, path, inputs)
            self.converted[name] = converted
        return self.cache[name]


@pytest.fixture(scope="module")
def xnnpack(tmp_path_factory) -> _Lowered:
    return _Lowered(tmp_path_factory.mktemp("xnnpack"))


def _payload(path: Path) -> tuple[bytes, bytes]:
    data = path.read_bytes()
    [d] = pte.read_pte(data).plans[0].delegates
    assert d.backend_id == "XnnpackBackend"
    return data, d.payload


def _run(data: bytes, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    from executorch.runtime import Runtime

    return Runtime.get().load_program(data).load_method("forward").execute(list(inputs))[0]


def patch_qparams(
    data: bytes, payload: bytes, value_id: int, scale: float | None = None, zp: int | None = None
) -> bytes:
    """The .pte with one XNNPACK value's per-tensor scale / zero point overwritten in place."""
    at = data.find(payload)
    assert at >= 0 and data.find(payload, at + 1) < 0
    fb = xnn.flatbuffer_of(payload)
    base = at + payload.find(fb)
    g = pte_tables.table("qflow_fb_xnnpack", "XNNGraph").GetRootAs(fb, 0)
    for i in range(g.XvaluesLength()):
        xv = g.Xvalues(i)
        if xv.XvalueUnionType() != 2:  # XNNQuantizedTensorValue
            continue
        body = pte_tables.as_table("qflow_fb_xnnpack", "XNNQuantizedTensorValue", xv.XvalueUnion())
        if body.TensorValue().IdOut() != value_id:
            continue
        q = pte_tables.as_table("qflow_fb_xnnpack", "PerTensorQuant", body.QuantParams())
        buf = bytearray(data)
        for field, fmt, new in ((4, "<f", scale), (6, "<i", zp)):
            if new is not None:
                off = q._tab.Offset(field)
                assert off, "field not stored (default value): cannot patch in place"
                struct.pack_into(fmt, buf, base + q._tab.Pos + off, new)
        return bytes(buf)
    raise KeyError(value_id)


def patch_output_max(data: bytes, payload: bytes, node_index: int, value: float) -> bytes:
    """The .pte with one node's fused-activation output_max overwritten (0.0 bounds are
    flatbuffer defaults and not stored, so a relu's output_min cannot be patched in place)."""
    at = data.find(payload)
    fb = xnn.flatbuffer_of(payload)
    base = at + payload.find(fb)
    mm = pte_tables.table("qflow_fb_xnnpack", "XNNGraph").GetRootAs(fb, 0).Xnodes(node_index).OutputMinMax()
    off = mm._tab.Offset(6)
    assert off
    buf = bytearray(data)
    struct.pack_into("<f", buf, base + mm._tab.Pos + off, value)
    return bytes(buf)


# -- clean models --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cat_pool", "conv_cat_skip", "mlp", "conv_bn_relu6_residual"])
def test_clean_xnnpack_programs_prove_from_the_pte_and_run_right(xnnpack, name) -> None:
    lowered, path, inputs = xnnpack(name)
    from_pte = qflow.analyze(path)
    assert from_pte.proved and not from_pte.findings, str(from_pte)
    assert from_pte.obligations["proved"] > 0
    assert main(["check", str(path)]) == 0
    # the proof is right: the runtime matches the Q/DQ reference within one output LSB
    data, payload = _payload(path)
    g = xnn.read_payload(payload)
    [last] = [n for n in g.nodes if n.outputs[0] in g.output_ids]
    lsb = float(g.values[last.inputs[0]].domain.scale)
    ref = xnnpack.converted[name](*inputs)
    assert (_run(data, inputs) - ref).abs().max().item() <= lsb * 1.01
    # the same verdict as the in-memory lowered program (read with the xnnpack target)
    in_memory = qflow.analyze(lowered)
    assert in_memory.proved and not in_memory.findings, str(in_memory)
    # the report names the target its delegates were read for; another one given is said to be unused
    assert from_pte.target == "xnnpack"
    other = qflow.analyze(path, target="arm-tosa")
    assert other.target == "xnnpack" and any("target arm-tosa was given" in n for n in other.notes), other.notes


def test_the_payload_qparams_are_the_partitions_quantize_args(xnnpack) -> None:
    """The reader's per-tensor domain of the delegate's input quantize equals the
    partition program's quantize node (a cross-check against the in-memory program)."""
    from qflow.ir import delegate
    from qflow.ir.fx_nodes import Consts, qdq_domain, target_name

    lowered, path, _ = xnnpack("cat_pool")
    _, payload = _payload(path)
    g = xnn.read_payload(payload)
    [convert] = [n for n in g.nodes if n.type == "XNNConvert" and g.values[n.inputs[0]].dtype == "float32"]
    ep = lowered.exported_program()
    call = next(n for n in ep.graph.nodes if "call_delegate" in str(n.target))
    part = delegate.lowered_module(ep.graph_module, call).original_module
    q = next(n for n in part.graph.nodes if "quantize_per_tensor" in target_name(n) and "dequant" not in target_name(n))
    assert g.values[convert.outputs[0]].domain == qdq_domain(q, Consts(part.graph_module, part))
    # per-channel weights are read as per-channel domains (scales held in the constant data)
    convs = [n for n in g.nodes if n.type == "XNNConv2d"]
    weights = [g.values[n.inputs[1]].domain for n in convs]
    assert convs and all(w.axis == 0 and (w.per_channel or w.opaque) for w in weights)
    # the fused relu is an output clamp at 0 in real units (XNNPACK clamps in code space: exact for any zp)
    assert sorted(n.output_min for n in convs if n.output_min is not None) == [0.0]
    assert all(math.isinf(n.output_max) for n in convs if n.output_min == 0.0)


# -- edited payloads ------------------------------------------------------------------------------


def _node(g: xnn.XnnGraph, prefix: str) -> xnn.XnnNode:
    return next(n for n in g.nodes if n.type.startswith(prefix))


@pytest.mark.parametrize(
    ("node", "side", "edit", "kind"),
    [
        ("XNNMaxPooling2d", "out", "zp", "passthrough-domain-change"),
        ("XNNMaxPooling2d", "out", "scale", "passthrough-domain-change"),
        ("XNNConcatenate", "out", "zp", "passthrough-domain-change"),
        ("XNNConcatenate", "in2", "scale", "mixed-input-domains"),
    ],
)
def test_an_edited_code_copy_node_is_flagged_and_xnnpack_refuses_it(xnnpack, node, side, edit, kind) -> None:
    """Editing the qparams on one side of a max-pool / concatenate makes the node
    claim a domain change it cannot make: qflow names the node and both domains.
    Measured on the ExecuTorch runtime (1.5.1): XNNPACK rejects such a node when
    it builds the subgraph (xnn_status_invalid_parameter), so the method fails to
    load where the clean program runs."""
    _, path, inputs = xnnpack("cat_pool")
    data, payload = _payload(path)
    g = xnn.read_payload(payload)
    n = _node(g, node)
    vid = n.outputs[0] if side == "out" else n.inputs[1]
    dom = g.values[vid].domain
    new = {"zp": {"zp": dom.zero_point + 5}, "scale": {"scale": float(dom.scale) * 2}}[edit]
    mutant = patch_qparams(data, payload, vid, **new)

    r = qflow.analyze(pte.build(mutant))
    assert not r.proved
    [f] = r.findings
    assert (f.kind, f.node, f.severity, f.status) == (kind, f"delegate_0/{n.label}", "error", "violated")
    assert f.produced and f.expected and f.produced != f.expected  # both domains
    assert {f.produced.get("zero_point"), f.expected.get("zero_point")} >= {dom.zero_point} or edit == "scale"

    clean = _run(data, inputs)
    assert torch.isfinite(clean).all()
    with pytest.raises(RuntimeError, match="load method"):
        _run(mutant, inputs)


def test_an_empty_fused_activation_range_is_flagged(xnnpack) -> None:
    _, path, _ = xnnpack("cat_pool")
    data, payload = _payload(path)
    g = xnn.read_payload(payload)
    [relu_conv] = [n for n in g.nodes if n.output_min == 0.0]
    mutant = patch_output_max(data, payload, relu_conv.index, -1.0)  # [0, -1]: nothing left
    assert xnn.read_payload(pte.read_pte(mutant).plans[0].delegates[0].payload).nodes[relu_conv.index].output_max == -1
    r = qflow.analyze(pte.build(mutant))
    [f] = r.findings
    assert f.node == f"delegate_0/{relu_conv.label}" and f.severity == "error"
    assert "output_min 0 > output_max -1" in f.message


def test_a_payload_that_is_no_xnnpack_flatbuffer_is_bad_input() -> None:
    with pytest.raises(qflow.InputError, match="XNNPACK"):
        xnn.read_payload(b"\x00\x00\x00\x00XH00\x1e\x00" + b"\xff" * 24)


def test_an_inline_delegate_payload_reads_like_a_segment(xnnpack) -> None:
    from executorch.exir import ExecutorchBackendConfig

    lowered, path, _ = xnnpack("cat_pool")
    inline = lowered.to_executorch(ExecutorchBackendConfig(extract_delegate_segments=False)).buffer
    [d] = pte.read_pte(inline).plans[0].delegates
    assert d.payload == _payload(path)[1]
    assert qflow.analyze(pte.build(inline)).obligations == qflow.analyze(path).obligations


def test_a_delegate_output_the_program_declares_int8_is_checked_against_the_payload(xnnpack) -> None:
    from test_pte import _patch_scalar_type

    _, path, _ = xnnpack("cat_pool")
    data = path.read_bytes()
    plan = pte.read_pte(data).plans[0]
    out = plan.outputs[0]
    assert plan.values[out].dtype == "float32"
    r = qflow.analyze(pte.build(_patch_scalar_type(data, out, 1)))  # CHAR
    [f] = [f for f in r.findings if f.kind == "delegate-dtype-mismatch"]
    assert f.node == "delegate_0/output_0" and f.severity == "error"
    assert "XNNPACK flatbuffer" in f.message and "produces float32" in f.message and "declares int8" in f.message
