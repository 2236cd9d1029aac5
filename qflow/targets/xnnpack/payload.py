"""The XNNPACK delegate's payload: read it, and prove its quantization domains (torch-free).

The payload is an ``XNNHeader`` (zero-padded magic ``XH00`` at offset 4, then
the flatbuffer's offset and size) followed by the ``XNNGraph`` flatbuffer of
``backends/xnnpack/serialization/schema.fbs`` and the constant data. Every
XNNPACK value carries its own datatype and quantization parameters
(``XNNQuantizedTensorValue``: per-tensor scale and zero point, or per-channel
scales), so the artifact states each tensor's domain outright. What can go
wrong is a node that cannot realise the change its two tensors declare:

* code-copying nodes (max pooling, concatenate, copy, static reshape /
  transpose / slice / constant pad, resize) copy integer codes, so their
  output's parameters must equal their input's (every input's, for a
  concatenate) — qflow's pass-through rule, checked by the prover with the
  node's output parameters as its *claim*;
* a fused activation's ``output_min`` / ``output_max`` (real units) must leave
  a non-empty code range on the output tensor;
* converts, convolutions, fully-connected, add, clamp (XNNPACK's unary
  operators requantize: a relu6 lowered as a clamp from zp 2 to zp -128 runs
  right), … rescale: their output parameters are facts.

Value names are ``v<id>`` for graph inputs and constants and
``<node index>:<node type>`` for node outputs, so a finding names the
XNNPACK node. `domain_graph` returns the obligations; ``qflow.integrations.pte``
puts them under the delegate's name and adds the boundary edges.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from functools import lru_cache

from qflow.domain import FLOAT, Domain
from qflow.errors import InputError
from qflow.graph import Definition, DefKind, DomainGraph, Obligation, ObligationKind, Value
from qflow.ir.pte_tables import as_table, executorch_dir, register_schema, table, union_names
from qflow.ops import OpClass

_NS = "qflow_fb_xnnpack"
register_schema(_NS, ("backends", "xnnpack", "serialization", "schema.fbs"), "fb_xnnpack")

#: XNNDatatype → (qflow dtype, quantized?) ; per-channel types carry scale lists.
DATATYPES = {
    1: ("float32", False),
    2: ("float16", False),
    3: ("int8", True),
    4: ("uint8", True),
    5: ("int32", True),
    6: ("int8", True),
    7: ("int32", True),
    8: ("int4", True),
    9: ("int8", True),  # dynamically quantized: parameters computed at run time
    10: ("int4", True),
    11: ("int8", True),
    12: ("int32", False),
    13: ("float32", False),
    14: ("bfloat16", False),
}
_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-(2**31), 2**31 - 1), "int4": (-8, 7)}

#: Nodes that copy integer codes: output parameters must equal the input's.
CODE_COPY = frozenset(
    {
        "XNNMaxPooling2d",
        "XNNConcatenate2",
        "XNNConcatenate3",
        "XNNConcatenate4",
        "XNNConcatenate5",
        "XNNCopy",
        "XNNStaticReshape",
        "XNNStaticTranspose",
        "XNNStaticSlice",
        "XNNStaticConstantPad",
        "XNNStaticResizeBilinear2D",
        "XNNArgMaxPooling2d",
    }
)
_NONE = 0xFFFFFFFF  # XNN_INVALID_VALUE_ID: an unused concatenate input
_INPUT_FIELDS = ("input1_id", "input2_id", "input3_id", "input4_id", "input5_id", "input_id", "query_id", "key_id")
_INPUT_FIELDS += ("value_id", "scale_id", "mask_id", "filter_id", "bias_id")
_OUTPUT_FIELDS = ("output_id", "output_value_id")


@dataclass(frozen=True)
class Blocks:
    """A blockwise (per channel, per group of input channels) weight layout: one scale per
    `group_size` consecutive inputs of each output channel."""

    channel_dim: int
    group_size: int
    num_scales: int

    def __str__(self) -> str:
        g, d, n = self.group_size, self.channel_dim, self.num_scales
        return f"blockwise: groups of {g} along each channel of dim {d}, {n} scales"


@dataclass(frozen=True)
class XnnValue:
    id: int
    dtype: str
    dims: tuple[int, ...]
    domain: Domain | None  # None: quantized with parameters not in the flatbuffer (dynamic, buffer-held scales)
    external_id: int
    flags: int
    constant: bool
    quantized: bool = False
    blocks: Blocks | None = None
    #: Where the codes and the per-channel / per-group scales are (indices into
    #: `XnnGraph.constant_keys`; 0: none), and scales kept in the flatbuffer itself.
    buffer: int = 0
    scale_buffer: int = 0
    inline_scales: tuple[float, ...] = ()


@dataclass(frozen=True)
class XnnNode:
    index: int
    type: str  # the XNodeUnion member, e.g. "XNNMaxPooling2d"
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    output_min: float | None = None
    output_max: float | None = None
    debug_handle: int | None = None

    @property
    def label(self) -> str:
        return f"{self.index}:{self.type}"


@dataclass(frozen=True)
class XnnGraph:
    values: dict[int, XnnValue]
    nodes: tuple[XnnNode, ...]
    input_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    #: Per constant-data entry, the key of the named data that holds it ("" for one at an offset).
    constant_keys: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


def flatbuffer_of(payload: bytes) -> bytes:
    """The XNNGraph flatbuffer inside a payload (after the XNNHeader, when present)."""
    if len(payload) >= 30 and payload[4:8] == b"XH00":
        offset, size = struct.unpack_from("<II", payload, 10)
        if offset + size > len(payload) or size == 0:
            raise InputError(f"XNNPACK payload header points outside the payload ({offset}+{size} > {len(payload)})")
        return payload[offset : offset + size]
    return payload  # an old payload without the header


def _fields(obj: object) -> dict[str, object]:
    """The scalar fields of a generated table, by snake_case name."""
    out: dict[str, object] = {}
    for name in dir(obj):
        if (
            not name[:1].isupper()
            or name.startswith(("GetRoot", "Init"))
            or name.endswith(("AsNumpy", "Length", "IsNone"))
        ):
            continue
        try:
            val = getattr(obj, name)()
        except TypeError:
            continue  # a vector accessor (needs an index)
        if isinstance(val, (int, float)):
            snake = "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")
            out[snake] = val
    return out


def read_payload(payload: bytes) -> XnnGraph:
    """Parse an XNNPACK delegate payload (cached: its boundaries and its artifact check read the same one)."""
    return _parsed(bytes(payload))


@lru_cache(maxsize=16)
def _parsed(payload: bytes) -> XnnGraph:
    fb = flatbuffer_of(payload)
    try:
        g = table(_NS, "XNNGraph").GetRootAs(fb, 0)
        value_types = union_names(_NS, "XValueUnion")
        quant_types = union_names(_NS, "XNNQuantParams")
        node_types = union_names(_NS, "XNodeUnion")
        members = _union_members()
        values = {}
        for i in range(g.XvaluesLength()):
            v = _value(g.Xvalues(i), value_types, quant_types)
            values[v.id] = v
        nodes = []
        for i in range(g.XnodesLength()):
            n = g.Xnodes(i)
            kind = node_types.get(n.XnodeUnionType(), "NONE")
            body = as_table(_NS, members.get(kind, kind), n.XnodeUnion())
            f = _fields(body)
            ins = tuple(int(f[k]) for k in _INPUT_FIELDS if k in f and int(f[k]) != _NONE)  # type: ignore[call-overload]
            outs = tuple(int(f[k]) for k in _OUTPUT_FIELDS if k in f)  # type: ignore[call-overload]
            if kind == "XNNArgMaxPooling2d":
                outs = outs[:1]  # the index output is not quantized data
            mm = n.OutputMinMax()
            lo, hi = (float(mm.OutputMin()), float(mm.OutputMax())) if mm is not None else (None, None)
            nodes.append(XnnNode(i, kind, ins, outs, lo, hi, int(n.DebugHandle())))
        ins = tuple(int(g.InputIds(i)) for i in range(g.InputIdsLength()))
        outs = tuple(int(g.OutputIds(i)) for i in range(g.OutputIdsLength()))
        keys = tuple((g.ConstantData(i).NamedKey() or b"").decode() for i in range(g.ConstantDataLength()))
    except InputError:
        raise
    except Exception as e:
        raise InputError(f"cannot read the XNNPACK payload: {type(e).__name__}: {e}") from e
    for n in nodes:
        for vid in n.inputs + n.outputs:
            if vid not in values:
                raise InputError(f"XNNPACK node {n.label} uses value {vid}, which the payload does not define")
    return XnnGraph(values, tuple(nodes), ins, outs, keys)


def _union_members() -> dict[str, str]:
    """Union member → table name (``XNNAdd: _XNNNode2x1``), from the shipped schema."""
    import re

    text = (executorch_dir() / "backends" / "xnnpack" / "serialization" / "schema.fbs").read_text("utf-8")
    m = re.search(r"union\s+XNodeUnion\s*\{(.*?)\}", text, re.S)
    out = {}
    for item in (m.group(1) if m else "").split(","):
        item = re.sub(r"//.*", "", item).strip()
        if item:
            name, _, tbl = item.partition(":")
            out[name.strip()] = (tbl or name).strip()
    return out


def _value(xv: object, value_types: dict[int, str], quant_types: dict[int, str]) -> XnnValue:

    kind = value_types.get(xv.XvalueUnionType(), "NONE")  # type: ignore[attr-defined]
    body = as_table(_NS, kind, xv.XvalueUnion())  # type: ignore[attr-defined]
    tv = body.TensorValue() if kind == "XNNQuantizedTensorValue" else body
    dt_code = tv.Datatype()
    dtype, quantized = DATATYPES.get(dt_code, (f"xnn_datatype_{dt_code}", False))
    dims = tuple(int(tv.Dims(i)) for i in range(tv.DimsLength()))
    dom: Domain | None = FLOAT if dtype.startswith(("float", "bfloat")) else None
    blocks, scale_buffer, inline = None, 0, ()
    if kind == "XNNQuantizedTensorValue" and quantized:
        qk = quant_types.get(body.QuantParamsType(), "NONE")
        qp = as_table(_NS, qk, body.QuantParams()) if qk != "NONE" else None
        lo, hi = _RANGE.get(dtype, (0, 0))
        if qk in ("PerChannelQuant", "PerChannelGroupQuant"):
            scale_buffer = int(qp.ScaleBufferIdx())
            inline = tuple(float(qp.Scale(i)) for i in range(qp.ScaleLength()))
        if qk == "PerTensorQuant":
            dom = Domain.quantized(dtype, float(qp.Scale()), int(qp.ZeroPoint()), lo, hi)
        elif qk == "PerChannelQuant" and qp.ScaleLength():
            scales = tuple(float(qp.Scale(i)) for i in range(qp.ScaleLength()))
            dom = Domain.quantized(dtype, scales, (0,) * len(scales), lo, hi, int(qp.ChannelDim()))
        elif qk == "PerChannelQuant":  # scales kept in the constant data: named, not read
            where = f"constant buffer {qp.ScaleBufferIdx()} ({qp.NumScales()} scales)"
            dom = Domain(dtype, (), (), lo, hi, int(qp.ChannelDim()), opaque=where)
        elif qk == "PerTokenDynamicQuant":  # the converting node computes them per token, at run time
            dom = Domain(dtype, (), (), lo, hi, opaque=f"dynamic, per token over {qp.NumNonbatchDims()} dims")
        elif qk == "PerChannelGroupQuant":
            n = qp.ScaleLength() or qp.NumScales()
            where = "inline" if qp.ScaleLength() else f"in constant buffer {qp.ScaleBufferIdx()}"
            blocks = Blocks(int(qp.ChannelDim()), int(qp.GroupSize()), int(n))
            dom = Domain(dtype, (), (), lo, hi, blocks.channel_dim, opaque=f"{blocks}, scales {where}")
    return XnnValue(
        blocks=blocks,
        id=int(tv.IdOut()),
        dtype=dtype,
        dims=dims,
        domain=dom,
        external_id=int(tv.ExternalId()),
        flags=int(tv.Flags()),
        constant=int(tv.ConstantBufferIdx()) != 0,
        quantized=quantized,
        buffer=int(tv.ConstantBufferIdx()),
        scale_buffer=scale_buffer,
        inline_scales=inline,
    )


# --------------------------------------------------------------------------------------------
# Proving
# --------------------------------------------------------------------------------------------


def _name(g: XnnGraph, vid: int, producer: dict[int, XnnNode]) -> str:
    n = producer.get(vid)
    if n is None:
        return f"v{vid}"
    return n.label if n.outputs and n.outputs[0] == vid else f"{n.label}.{n.outputs.index(vid)}"


def _code_bounds(dom: Domain, lo: float, hi: float) -> tuple[int, int]:
    """The code range a real clamp [lo, hi] leaves on a per-tensor domain (XNNPACK rounds to nearest)."""
    s, zp = float(dom.scale), int(dom.zero_point)  # type: ignore[arg-type]

    def code(x: float) -> float:
        return x if math.isinf(x) else round(x / s) + zp

    qlo, qhi = max(dom.qmin, code(lo)), min(dom.qmax, code(hi))
    return int(max(qlo, -(2**62))), int(min(qhi, 2**62))


def domain_graph(g: XnnGraph) -> DomainGraph:
    """The payload as a domain graph: facts for the tensors that rescaling nodes
    write, aliases with claims for code-copying nodes, structural obligations
    for fused activation bounds."""
    dg = DomainGraph(form="artifact")
    producer = {vid: n for n in g.nodes for vid in n.outputs}
    external = set(g.input_ids) | set(g.output_ids)
    for vid, v in g.values.items():
        if vid in producer:
            continue
        if v.constant:
            d = Definition(DefKind.FREE, reason="constant")
        elif v.domain is not None:
            d = Definition(DefKind.FACT, v.domain, real=v.domain.is_float)
        elif not v.quantized:
            d = Definition(DefKind.FREE, reason=f"plain {v.dtype} data")
        else:
            d = Definition(DefKind.FREE, blocking=True, reason=f"value {vid} has no quantization parameters")
        kind = "graph input" if vid in external else "value"
        dg.add_value(
            Value(
                f"v{vid}",
                f"XNNPACK {kind} {vid}",
                OpClass.CONSTANT if v.constant else OpClass.UNKNOWN,
                d,
                dtype=v.dtype,
            )
        )
    for n in g.nodes:
        ins = [i for i in n.inputs if not g.values[i].constant]
        for k, vid in enumerate(n.outputs):
            v = g.values[vid]
            name = _name(g, vid, producer)
            if n.type in CODE_COPY and ins and k == 0:
                srcs = tuple(_name(g, i, producer) for i in (ins if n.type.startswith("XNNConcatenate") else ins[:1]))
                claim = v.domain if v.domain is not None and not v.domain.is_float else None
                d = Definition(DefKind.ALIAS, sources=srcs, reason=f"XNNPACK {n.type} copies codes")
                dg.add_value(Value(name, f"XNNPACK {n.type}", OpClass.PASSTHROUGH, d, claim=claim, dtype=v.dtype))
                dg.oblige_one_input_domain(name, srcs)
                if claim is not None:
                    dg.oblige(
                        Obligation(
                            ObligationKind.CLAIM, name, name, expected=claim, finding_kind="passthrough-domain-change"
                        )
                    )
            elif v.domain is not None:
                dg.add_value(
                    Value(
                        name,
                        f"XNNPACK {n.type}",
                        OpClass.COMPUTE,
                        Definition(DefKind.FACT, v.domain, real=v.domain.is_float),
                        dtype=v.dtype,
                    )
                )
            else:
                why = f"XNNPACK {n.type} writes {v.dtype} without quantization parameters in the payload"
                dg.add_value(
                    Value(
                        name,
                        f"XNNPACK {n.type}",
                        OpClass.COMPUTE,
                        Definition(DefKind.FREE, blocking=v.quantized, reason=why),
                        dtype=v.dtype,
                    )
                )
            for i in n.inputs:
                dg.add_use(_name(g, i, producer), name, f"input {i}")
        _activation(dg, g, n, producer)
        _block_layout(dg, g, n, producer)
    return dg


def _block_layout(dg: DomainGraph, g: XnnGraph, n: XnnNode, producer: dict[int, XnnNode]) -> None:
    """A blockwise weight's scales must tile it: whole groups along each channel's inputs, one
    scale per group. A count that does not match reads scales of other blocks (or past the buffer)."""
    for vid in n.inputs:
        v = g.values[vid]
        b = v.blocks
        if b is None or len(v.dims) != 2 or b.channel_dim not in (0, 1):
            continue
        channels, inputs = v.dims[b.channel_dim], v.dims[1 - b.channel_dim]
        whole = b.group_size > 0 and inputs % b.group_size == 0
        holds = whole and b.num_scales == channels * (inputs // b.group_size)
        want = f"{channels} × {inputs} / {b.group_size} = {channels * inputs / b.group_size:g}" if b.group_size else "?"
        name = _name(g, n.outputs[0], producer) if n.outputs else n.label
        what = f"XNNPACK node {n.label} reads weight v{vid} ({v.dtype} {list(v.dims)}, {b})"
        if not holds:
            dg.oblige(
                Obligation(ObligationKind.STRUCTURAL, name, name, finding_kind="domain-mismatch", holds=False,
                           detail=f"{what}: the scales do not tile it: expected {want}.")
            )  # fmt: skip
        elif v.domain is not None and v.domain.opaque and "constant buffer" in v.domain.opaque:
            # (ExecuTorch serializes buffer-held blockwise scales as bfloat16: measured, kinds.py)
            dg.oblige(
                Obligation(ObligationKind.STRUCTURAL, name, name, finding_kind="rounded-weight-scales", holds=True,
                           inform=True, detail=f"{what}: its {b.num_scales} scales are bfloat16 in the payload, "
                           "so each weight is within 2^-8 of the program's.")
            )  # fmt: skip


def _activation(dg: DomainGraph, g: XnnGraph, n: XnnNode, producer: dict[int, XnnNode]) -> None:
    """A fused activation's bounds must leave codes to write."""
    if n.output_min is None or n.output_max is None or not n.outputs:
        return
    lo, hi = n.output_min, n.output_max
    if math.isinf(lo) and math.isinf(hi) and lo < 0 < hi:
        return  # no activation
    out = g.values[n.outputs[0]]
    dom = out.domain
    name = _name(g, n.outputs[0], producer)
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        holds, why = False, f"output_min {lo:g} > output_max {hi:g} (or NaN): XNNPACK rejects the node"
    elif dom is not None and not dom.is_float and not dom.per_channel:
        qlo, qhi = _code_bounds(dom, lo, hi)
        holds = qlo <= qhi
        why = f"the fused activation [{lo:g}, {hi:g}] leaves codes [{qlo}, {qhi}] of the output domain {dom}" + (
            "" if holds else ": no code is left, every output is clamped to one value"
        )
    else:
        return
    dg.oblige(
        Obligation(
            ObligationKind.STRUCTURAL,
            name,
            name,
            finding_kind="domain-mismatch",
            holds=holds,
            detail=f"XNNPACK node {n.label}: {why}.",
        )
    )
