"""ExecuTorch's quantized embedding kernels (``quantized_decomposed::embedding_byte`` / ``_2bit`` /
``_4bit``, what `export_llm`'s ``quantization.embedding_quantize`` writes): a gather that
dequantizes constant codes by its own per-row or per-group scales.

Nothing outside the kernel reads the codes, so no domain can be misread across it: its output is
real, and what can go wrong is the kernel's arguments — codes of another width than the kernel
unpacks, a range that is not its dtype's, scales or zero points that do not tile the rows. That
the kernels compute their reference implementation (the ops' Python definitions) is measured on the
ExecuTorch runtime (tests/contracts/test_quantized_embedding.py).
"""

from __future__ import annotations

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
