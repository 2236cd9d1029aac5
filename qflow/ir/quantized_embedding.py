"""ExecuTorch's quantized embedding kernels (``quantized_decomposed::embedding_byte`` / ``_2bit`` /
``_4bit``, what `export_llm`'s ``quantization.embedding_quantize`` writes): a gather that
dequantizes constant codes by its own per-row or per-group scales.

Nothing outside the kernel reads the codes, so no domain can be misread across it: its output is
real, and what can go wrong is the kernel's arguments — codes of another width than the kernel
unpacks, a range that is not its dtype's, scales or zero points that do not tile the rows. That
the kernels compute their reference implementation (the ops' Python definitions) is measured on the
ExecuTorch runtime (tests/contracts/test_quantized_embedding.py).

The table itself is what a lowering can get wrong (ExecuTorch's ``QuantFusionPass`` packs a
torchao `dequantize_affine` → `embedding` into these kernels at `to_executorch`): given the
program a `.pte` came from, the real rows a kernel's codes and scales unpack to are checked against
the program's table (`check_against`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qflow.domain import Domain
from qflow.graph import DomainGraph, Obligation, ObligationKind

#: kernel base name → bits per code (codes per byte: 8 // bits, stored in uint8 / int8)
BITS = {"embedding_byte": 8, "embedding_2bit": 2, "embedding_4bit": 4}


def problems(
    op: str,
    weight: tuple[int, ...],
    scales: tuple[int, ...] | None,
    zero_points: tuple[int, ...] | None,
    qmin: object,
    qmax: object,
    out: tuple[int, ...] | None,
) -> list[str]:
    """What is wrong with a quantized embedding kernel's arguments (shapes; empty: nothing)."""
    bits = BITS[op]
    found = []
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if (qmin, qmax) != (lo, hi):
        found.append(f"its code range is [{qmin}, {qmax}], but it unpacks {bits}-bit codes of [{lo}, {hi}]")
    if len(weight) != 2 or scales is None or not 1 <= len(scales) <= 2:
        return [*found, f"weight {list(weight)} and scales {list(scales or ())}: not a table of rows and their scales"]
    rows, dim = weight[0], weight[1] * (8 // bits)
    groups = scales[1] if len(scales) == 2 else 1
    if scales[0] != rows or groups < 1 or dim % groups:
        found.append(f"{list(scales)} scales do not tile {rows} rows of {dim} codes")
    if zero_points is not None and zero_points != scales:
        found.append(f"zero points {list(zero_points)} are not one per scale {list(scales)}")
    if out is not None and out and out[-1] != dim:
        found.append(f"it writes rows of {out[-1]} values from rows of {dim} codes")
    return found


def oblige(dg: DomainGraph, name: str, op: str, found: list[str]) -> None:
    """The kernel at `name` reads its codes by its own scales: proved when its arguments fit."""
    bits = BITS[op]
    detail = f"{name} ({op}) dequantizes constant {bits}-bit codes by its own scales"
    codes = Domain.run_time(f"int{bits}", f"the scales {name} reads", -(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    dg.oblige(
        Obligation(ObligationKind.STRUCTURAL, name, name, expected=codes, finding_kind="kernel-argument-mismatch",
                   holds=not found, detail=f"{detail}, but " + "; ".join(found) + "." if found else f"{detail}.")
    )  # fmt: skip


#: A value of the table differs when it is off by more than this part of its quantization step
#: (float rounding of the scales is far below it; one code or one float16 step of a scale is above).
TABLE_TOLERANCE = 1e-3


@dataclass(frozen=True, eq=False)
class Table:
    """A program's embedding table: its real rows and each value's quantization step (its group's scale)."""

    name: str
    real: np.ndarray  # rows x dim, float64
    step: np.ndarray  # rows x dim


def unpack(op: str, packed: np.ndarray) -> np.ndarray:
    """The kernel's codes (rows x dim, signed) from its stored bytes (rows x dim * bits / 8), as its
    reference implementation unpacks them: 4-bit high nibble first, 2-bit lowest bits first, offset."""
    bits = BITS[op]
    if bits == 8:
        return packed.astype(np.int64)
    b = packed.view(np.uint8).astype(np.int64)
    per = 8 // bits
    mask = (1 << bits) - 1
    shifts = [4, 0] if bits == 4 else [2 * k for k in range(per)]
    codes = np.stack([(b >> s) & mask for s in shifts], axis=-1).reshape(b.shape[0], -1)
    return codes - (1 << (bits - 1))


def dequantized(codes: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None) -> Table:
    """The real rows `codes` hold under per-row or per-group `scales` / `zero_points`."""
    rows, dim = codes.shape
    s = scales.astype(np.float64).reshape(rows, -1)
    z = np.zeros_like(s) if zero_points is None else zero_points.astype(np.float64).reshape(rows, -1)
    group = dim // s.shape[1]
    step = np.repeat(s, group, axis=1)
    return Table("", (codes - np.repeat(z, group, axis=1)) * step, np.abs(step))


def check_against(dg: DomainGraph, name: str, op: str, got: Table, reference: Sequence[Table]) -> None:
    """The kernel at `name` must unpack to one of the reference program's tables: of those of its
    shape, the one it agrees with most (a `.pte` keeps no link to the program's nodes)."""
    what = f"{name} ({op}) unpacks a {list(got.real.shape)} table"
    same = [t for t in reference if t.real.shape == got.real.shape]
    if not same:
        why = f"{what}; the reference program has no quantized embedding table of that shape to check it against"
        dg.oblige_unbounded(name, "its table", "kernel-argument-mismatch", why, ())
        return
    off = [(int(np.count_nonzero(_off(got, t))), t) for t in same]
    bad, want = min(off, key=lambda bt: bt[0])
    found = []
    if bad:
        worst = float(np.max(np.abs(got.real - want.real) / np.maximum(want.step, np.finfo(float).tiny)))
        found.append(f"{bad} of {got.real.size} values differ from the reference's {want.name} "
                     f"(worst by {worst:.3g} LSB)")  # fmt: skip
    detail = f"{what}: the reference's {want.name}." if not found else f"{what}, not the program's: {found[0]}."
    dg.oblige(
        Obligation(ObligationKind.STRUCTURAL, name, name, finding_kind="kernel-argument-mismatch",
                   holds=not found, detail=detail)
    )  # fmt: skip


def _off(got: Table, want: Table) -> np.ndarray:
    return np.abs(got.real - want.real) > TABLE_TOLERANCE * want.step
