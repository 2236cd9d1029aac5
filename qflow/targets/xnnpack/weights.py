"""An XNNPACK payload's quantized weights, checked against the program they were lowered from.

The payload keeps a quantized weight's codes and its per-channel or per-group scales as constant
data beside the flatbuffer (named data the ExecuTorch program carries). How XNNPACK reads them
(measured on executorch 1.5.1 by running mutants: tests/contracts/test_xnnpack_weight_params.py):
per-channel scales float32, per-group scales bfloat16 (``PerChannelGroupQuant``), int4 codes two
to a byte, the first in the low nibble, each stored plus 8, each row padded to a whole byte (an
odd input-channel count: the XNNPACK suite's qd8 int4 linears), int8 codes one to a byte; neither
layout has a zero point (the weight is symmetric). A lowering that writes other scales, another
group size or other codes, or that drops a zero point, computes another layer, and nothing at
run time says so: each weighted node is an obligation that its payload weight *is* the program's.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from qflow.graph import DomainGraph, Obligation, ObligationKind
from qflow.targets.xnnpack.payload import XnnGraph, XnnNode, XnnValue

#: XNNPACK nodes whose input 1 is a weight (``filter_id``), and how each lays out the program's
#: [out, in(, h, w)] weight: the axes of the program's weight in the payload's order.
LAYOUT: dict[str, tuple[int, ...] | None] = {
    "XNNFullyConnected": (0, 1),
    "XNNConv2d": (0, 2, 3, 1),  # OHWI
    "XNNDepthwiseConv2d": (1, 2, 3, 0),  # 1HWO
    "XNNConvTranspose2d": None,  # (codes not compared)
}


@dataclass(frozen=True)
class Weight:
    """One weight's quantization: scales in row-major order of (channel, group); a per-tensor
    weight has one scale and one group, a per-channel weight one group per channel."""

    dims: tuple[int, ...]
    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    group_size: int  # weights per scale along a channel
    codes: bytes | None = None  # int8 values, row-major in `dims`; None: not compared
    scale_format: str = "float32"  # how the scales are stored: "float32" or "bfloat16"


def bf16(x: float) -> float:
    """`x` rounded to bfloat16 (nearest, ties to even), as torch's ``.to(torch.bfloat16)`` rounds."""
    (bits,) = struct.unpack("<I", struct.pack("<f", x))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _floats(raw: bytes, fmt: str) -> tuple[float, ...]:
    if fmt == "bfloat16":
        halves = np.frombuffer(raw[: len(raw) // 2 * 2], dtype="<u2").astype("<u4") << 16
        return tuple(float(x) for x in halves.view("<f4"))
    return tuple(float(x) for x in np.frombuffer(raw[: len(raw) // 4 * 4], dtype="<f4"))


def _codes(raw: bytes, dtype: str, dims: tuple[int, ...]) -> bytes | None:
    count = int(np.prod(dims)) if dims else 1
    if dtype == "int8" and len(raw) >= count:
        return bytes(raw[:count])
    # int4: each row padded to a whole byte (ExecuTorch's convert_to_qc4w pads an odd row with code 0)
    row = dims[-1] if dims else 1
    rows, padded = count // max(row, 1), row + row % 2
    if dtype == "int4" and len(raw) >= rows * padded // 2:
        packed = np.frombuffer(raw[: rows * padded // 2], dtype=np.uint8)
        nibbles = np.stack([packed & 0xF, packed >> 4], axis=1).reshape(rows, padded)[:, :row]
        return (nibbles.astype(np.int16) - 8).astype(np.int8).tobytes()
    return None


def payload_weight(g: XnnGraph, v: XnnValue, data: Callable[[str], bytes | None]) -> Weight | str:
    """How XNNPACK reads weight `v`, or why it cannot be read (named data missing)."""
    numel = int(np.prod(v.dims)) if v.dims else 1

    def blob(index: int) -> bytes | None:
        key = g.constant_keys[index] if 0 < index < len(g.constant_keys) else ""
        return data(key) if key else None

    raw = blob(v.buffer)
    codes = _codes(raw, v.dtype, tuple(v.dims)) if raw is not None else None
    if v.blocks is None and v.scale_buffer == 0 and not v.inline_scales:  # per tensor
        dom = v.domain
        if dom is None or dom.per_channel or not isinstance(dom.scale, float):
            return f"weight v{v.id} has no readable quantization parameters"
        return Weight(v.dims, (dom.scale,), (int(dom.zero_point),), numel, codes)  # type: ignore[arg-type]
    fmt = "bfloat16" if v.blocks is not None and not v.inline_scales else "float32"
    channel_dim = v.blocks.channel_dim if v.blocks is not None else (v.domain.axis if v.domain is not None else 0)
    channels = v.dims[channel_dim] if v.dims else 1
    group = v.blocks.group_size if v.blocks is not None else numel // max(channels, 1)
    if v.inline_scales:
        scales = v.inline_scales
    else:
        held = blob(v.scale_buffer)
        if held is None:
            return f"the scales of weight v{v.id} are in named data this program does not carry"
        # (as many as the node says it reads: a segment may be padded)
        scales = _floats(held, fmt)[: v.blocks.num_scales if v.blocks is not None else channels]
    return Weight(v.dims, tuple(scales), (0,) * len(scales), group, codes, fmt)


def _laid_out(program: Weight, node_type: str) -> np.ndarray | None:
    """The program's codes in the layout a `node_type` payload node keeps them in, or None."""
    axes = LAYOUT.get(node_type)
    if program.codes is None or axes is None or len(axes) != len(program.dims):
        return None
    return np.frombuffer(program.codes, dtype=np.int8).reshape(program.dims).transpose(axes)


def _in_payload_layout(program: Weight, node: XnnNode, dims: tuple[int, ...]) -> np.ndarray | None:
    """The program's codes in the payload's layout for `node`, or None when not comparable."""
    codes = _laid_out(program, node.type)
    return codes if codes is not None and codes.shape == dims else None


def code_differences(payload: Weight, program: Weight, node: XnnNode) -> int | None:
    """How many codes differ (None: not comparable)."""
    mine = _in_payload_layout(program, node, payload.dims)
    if mine is None or payload.codes is None:
        return None
    return int(np.count_nonzero(np.frombuffer(payload.codes, dtype=np.int8).reshape(payload.dims) != mine))


def differences(payload: Weight, program: Weight, node: XnnNode) -> list[str]:
    """What differs between the weight XNNPACK reads and the program's (empty: the same layer,
    up to the payload's storage of the scales)."""
    out = []
    if (payload.group_size, len(payload.scales)) != (program.group_size, len(program.scales)):
        out.append(
            f"{len(payload.scales)} scales over groups of {payload.group_size} in the payload, "
            f"{len(program.scales)} over groups of {program.group_size} in the program"
        )
    else:
        store = bf16 if payload.scale_format == "bfloat16" else f32
        off = [(p, s) for p, s in zip(payload.scales, program.scales, strict=True) if p != store(s)]
        if off:
            p, s = max(off, key=lambda ps: abs(ps[0] / ps[1] - 1) if ps[1] else float("inf"))
            out.append(
                f"{len(off)} of {len(program.scales)} scales differ (worst: {p:.6g} in the payload, "
                f"{s:.6g} in the program{', as ' + payload.scale_format if store is bf16 else ''})"
            )
        zps = sum(p != z for p, z in zip(payload.zero_points, program.zero_points, strict=True))
        if zps:
            out.append(f"{zps} of {len(program.zero_points)} zero points differ (the payload's weight is symmetric)")
    bad = code_differences(payload, program, node)
    if bad:
        out.append(f"{bad} of {int(np.prod(payload.dims))} weight codes differ")
    return out


def _oblige(dg: DomainGraph, at: str, what: str, diffs: list[str]) -> None:
    detail = f"{what}, not the program's: " + "; ".join(diffs) + "." if diffs else f"{what}: the program's weight."
    dg.oblige(
        Obligation(ObligationKind.STRUCTURAL, at, at, finding_kind="payload-weight-mismatch", holds=not diffs,
                   detail=detail)
    )  # fmt: skip


def _weights(g: XnnGraph) -> list[tuple[XnnNode, XnnValue]]:
    """The weighted nodes with a quantized constant weight."""
    out = []
    for n in g.nodes:
        if n.type in LAYOUT and len(n.inputs) > 1:
            v = g.values[n.inputs[1]]
            if v.constant and v.quantized:
                out.append((n, v))
    return out


def check(
    dg: DomainGraph, g: XnnGraph, program: dict[int, tuple[str, Weight]], data: Callable[[str], bytes | None]
) -> None:
    """A lowered delegate: one obligation per weighted node whose program node (by debug handle)
    declares a quantized weight, reported at that program node (`program`: debug handle → graph
    value, the program's weight)."""
    for n, v in _weights(g):
        if n.debug_handle not in program:
            continue
        name, want = program[n.debug_handle]
        got = payload_weight(g, v, data)
        what = f"XNNPACK node {n.label} reads weight v{v.id} ({v.dtype} {list(v.dims)})"
        if isinstance(got, str):
            dg.oblige_unbounded(name, "weight", "payload-weight-mismatch", f"{what}: {got}", ())
        else:
            _oblige(dg, name, what, differences(got, want, n))


def check_against(
    dg: DomainGraph,
    g: XnnGraph,
    prefix: str,
    reference: Sequence[tuple[str, Weight]],
    data: Callable[[str], bytes | None],
) -> None:
    """A payload in a .pte, against the program it was lowered from: each weight is matched to
    the reference weight with the same codes (a .pte keeps no link to the program's nodes; among
    several, one whose scales agree too), else the one whose codes it agrees with most, and must be
    it. Reported at the XNNPACK node (``prefix/<index>:<type>``)."""
    same: dict[tuple[str, tuple[int, ...], bytes], list[tuple[str, Weight]]] = {}  # (type, layout) → weights
    indexed: set[str] = set()
    for n, v in _weights(g):
        at = f"{prefix}/{n.label}"
        what = f"XNNPACK node {n.label} reads weight v{v.id} ({v.dtype} {list(v.dims)})"
        got = payload_weight(g, v, data)
        if isinstance(got, str):
            dg.oblige_unbounded(at, "weight", "payload-weight-mismatch", f"{what}: {got}", ())
            continue
        if n.type not in indexed:
            indexed.add(n.type)
            for name, w in reference:
                if (mine := _laid_out(w, n.type)) is not None:
                    key = (n.type, mine.shape, np.ascontiguousarray(mine).tobytes())
                    same.setdefault(key, []).append((name, w))
        exact = same.get((n.type, got.dims, got.codes or b""), [])
        if exact:
            name, want = min(exact, key=lambda nw: len(differences(got, nw[1], n)))
            _oblige(dg, at, f"{what} (the reference's {name})", differences(got, want, n))
            continue
        scored = [(d, name, w) for name, w in reference if (d := code_differences(got, w, n)) is not None]
        if not scored:
            why = f"{what}: the reference program has no weight of its shape whose codes qflow can compare"
            dg.oblige_unbounded(at, "weight", "payload-weight-mismatch", why, ())
            continue
        bad, name, want = min(scored, key=lambda s: s[0])
        if bad > int(np.prod(v.dims)) // 2:
            _oblige(dg, at, what, [f"no weight of the reference program has its codes (the closest, {name}, "
                                   f"differs in {bad})"])  # fmt: skip
        else:
            _oblige(dg, at, f"{what} (the reference's {name})", differences(got, want, n))
