"""An XNNPACK payload's quantized weights, checked against the program they were lowered from.

The payload keeps a quantized weight's codes and its per-channel or per-group scales as constant
data beside the flatbuffer (named data the ExecuTorch program carries). How XNNPACK reads them
(measured on executorch 1.5.1: the runtime's results, tests/contracts/test_xnnpack_weight_params.py):
per-channel scales are float32, per-group scales bfloat16 (``PerChannelGroupQuant``), int4 codes
two to a byte, the first in the low nibble, each stored plus 8; int8 codes one to a byte; neither
layout has a zero point (the weight is symmetric). A lowering that writes other scales, another
group size, or other codes, or that drops a zero point, computes another layer, and nothing at run
time says so: each weighted node is an obligation that its payload weight *is* the program's.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from qflow.graph import DomainGraph, Obligation, ObligationKind
from qflow.targets.xnnpack.payload import XnnGraph, XnnValue

#: XNNPACK nodes whose input 1 is a weight (``filter_id``).
WEIGHTED = frozenset({"XNNFullyConnected", "XNNConv2d", "XNNDepthwiseConv2d", "XNNConvTranspose2d"})


@dataclass(frozen=True)
class Weight:
    """One weight's quantization: scales in row-major order of (channel, group); a per-tensor
    weight has one scale and one group, a per-channel weight one group per channel."""

    dims: tuple[int, ...]
    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    group_size: int  # weights per scale along a channel
    codes: tuple[int, ...] | None = None  # row-major; None: not read
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
        return tuple(struct.unpack("<f", b"\0\0" + raw[i : i + 2])[0] for i in range(0, len(raw) - 1, 2))
    return struct.unpack(f"<{len(raw) // 4}f", raw[: len(raw) // 4 * 4])


def _codes(raw: bytes, dtype: str, count: int) -> tuple[int, ...] | None:
    if dtype == "int8" and len(raw) >= count:
        return struct.unpack(f"<{count}b", raw[:count])
    if dtype == "int4" and len(raw) >= (count + 1) // 2:
        out = [(b >> shift & 0xF) - 8 for b in raw[: (count + 1) // 2] for shift in (0, 4)]
        return tuple(out[:count])
    return None


def payload_weight(g: XnnGraph, v: XnnValue, data: Callable[[str], bytes | None]) -> Weight | str:
    """How XNNPACK reads weight `v`, or why it cannot be read (named data missing)."""
    numel = 1
    for d in v.dims:
        numel *= d

    def blob(index: int) -> bytes | None:
        key = g.constant_keys[index] if 0 < index < len(g.constant_keys) else ""
        return data(key) if key else None

    raw = blob(v.buffer)
    codes = _codes(raw, v.dtype, numel) if raw is not None else None
    if v.blocks is None and v.scale_buffer == 0 and not v.inline_scales:  # per tensor
        dom = v.domain
        if dom is None or dom.per_channel or not isinstance(dom.scale, float):
            return f"weight v{v.id} has no readable quantization parameters"
        return Weight(v.dims, (dom.scale,), (int(dom.zero_point),), numel, codes)  # type: ignore[arg-type]
    fmt = "bfloat16" if v.blocks is not None and not v.inline_scales else "float32"
    if v.inline_scales:
        scales = v.inline_scales
    else:
        held = blob(v.scale_buffer)
        if held is None:
            return f"the scales of weight v{v.id} are in named data this program does not carry"
        scales = _floats(held, fmt)
    channel_dim = v.blocks.channel_dim if v.blocks is not None else (v.domain.axis if v.domain is not None else 0)
    channels = v.dims[channel_dim] if v.dims else 1
    group = v.blocks.group_size if v.blocks is not None else numel // max(channels, 1)
    return Weight(v.dims, tuple(scales), (0,) * len(scales), group, codes, fmt)


def differences(payload: Weight, program: Weight) -> list[str]:
    """What differs between the weight XNNPACK reads and the program's (empty: the same layer,
    up to the payload's storage of the scales)."""
    out = []
    if (payload.group_size, len(payload.scales)) != (program.group_size, len(program.scales)):
        out.append(
            f"{len(payload.scales)} scales over groups of {payload.group_size} in the payload, "
            f"{len(program.scales)} over groups of {program.group_size} in the program"
        )
        return out
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
    if payload.codes is not None and program.codes is not None and payload.dims == program.dims:
        bad = sum(a != b for a, b in zip(payload.codes, program.codes, strict=True))
        if bad:
            out.append(f"{bad} of {len(program.codes)} weight codes differ")
    return out


def check(
    dg: DomainGraph,
    g: XnnGraph,
    program: dict[int, tuple[str, Weight]],
    data: Callable[[str], bytes | None],
) -> None:
    """One obligation per weighted node whose program node (by debug handle) declares a quantized
    weight: the payload's weight is that weight. `program` maps debug handles to the graph value
    to report at and the program's weight."""
    for n in g.nodes:
        if n.type not in WEIGHTED or len(n.inputs) < 2 or n.debug_handle not in program:
            continue
        v = g.values[n.inputs[1]]
        if not (v.constant and v.quantized):
            continue
        name, want = program[n.debug_handle]
        got = payload_weight(g, v, data)
        what = f"XNNPACK node {n.label} reads weight v{v.id} ({v.dtype} {list(v.dims)})"
        if isinstance(got, str):
            dg.oblige_unbounded(name, "weight", "payload-weight-mismatch", f"{what}: {got}", ())
            continue
        diffs = differences(got, want)
        dg.oblige(
            Obligation(ObligationKind.STRUCTURAL, name, name, finding_kind="payload-weight-mismatch",
                       holds=not diffs, detail=f"{what}, not the program's: " + "; ".join(diffs) + "." if diffs else
                       f"{what}: the program's scales, group size, zero points and codes.")
        )  # fmt: skip
