"""Comparisons of two grids: where the Arm backend's mask can differ from the program's.

The program compares dequantized reals. The Arm backend (InsertRescalePass, executorch 1.5.1) rescales both
operands of eq / ge / gt / le / lt to int32 on the finer operand's scale and compares those integers: the
coarser operand's codes are rounded onto the finer grid (TOSA RESCALE, one rounding, half up, by the 32-bit
multiplier and shift ``_compute_multiplier_and_shift`` makes). Two codes less than a step of the finer grid
apart can then compare the other way, and the mask flips: mask campaign ``00374-mk-arm-custom``, ``m > t``
with ``t``'s 0.5 in a grid 2.1x coarser than ``m``'s, one code of ``m`` falls the other way and the output
is 115 LSB off on the TOSA reference model. Measured in ``tests/test_comparison_masks.py``.

This module finds, for each comparison of two per-tensor grids of different scales, a pair of codes (over
the operands' whole ranges, or the one code of a constant operand) on which the two disagree.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch.fx as fx

from qflow.domain import Domain
from qflow.ir import gains
from qflow.ir.fx_nodes import Consts, target_name
from qflow.ops import base_name
from qflow.targets.arm.conv_widening import OperandReader

#: The comparisons InsertRescalePass rescales (ne: Arm decomposes it into a not of eq).
_COMPARE = {"eq": operator.eq, "ne": operator.ne, "ge": operator.ge, "gt": operator.gt, "le": operator.le}
_COMPARE["lt"] = operator.lt


@dataclass(frozen=True)
class RoundedComparison:
    """`node` compares codes on two grids; on `codes` (operand 0's, operand 1's) the backend and the program
    disagree."""

    node: str
    codes: tuple[int, int]
    detail: str


def rounded_comparisons(gm: fx.GraphModule, consts: Consts, folded: bool) -> list[RoundedComparison]:
    """Each comparison whose mask the backend's rounding onto the finer grid can flip."""
    read = OperandReader(consts, folded)
    found = []
    for node in gm.graph.nodes:
        op = base_name(target_name(node)) if node.op == "call_function" else ""
        if op not in _COMPARE or len(node.args) < 2 or not all(isinstance(a, fx.Node) for a in node.args[:2]):
            continue
        doms = [read.operand_domain(node, k) for k in (0, 1)]
        if not all(per_tensor(d) for d in doms) or doms[0].scale == doms[1].scale:  # type: ignore[union-attr]
            continue
        codes = [_codes(node.args[k], doms[k], consts, folded) for k in (0, 1)]  # type: ignore[arg-type]
        witness = _witness(_COMPARE[op], doms[0], doms[1], codes[0], codes[1])  # type: ignore[arg-type]
        if witness is None:
            continue
        a, b = doms
        fine = min(a.scale, b.scale)  # type: ignore[type-var]
        detail = (
            f"{node.name} ({op}) compares codes of {a} with codes of {b}; the Arm backend rescales both to int32 "
            f"on the finer scale {fine:.6g} (InsertRescalePass), rounding the coarser's codes onto it, and on codes "
            f"{witness[0]} and {witness[1]} its mask differs from the program's, which compares the reals "
            "(what follows reads the other branch there)"
        )
        found.append(RoundedComparison(node.name, witness, detail))
    return found


def per_tensor(d: Domain | None) -> bool:
    return d is not None and not d.is_float and not d.per_channel and isinstance(d.scale, float) and d.scale > 0


def _codes(a: fx.Node, d: Domain, consts: Consts, folded: bool) -> tuple[int, int]:
    """The codes an operand can hold: a constant's one code (a quantized fill, the Arm quantizer's tensor of a
    scalar threshold), else its grid's range."""
    real = gains.constant_values(a, consts) if not folded else _fill(a)
    if real is not None and real[0] == real[1]:
        c = min(max(round(real[0] / d.scale) + int(d.zero_point), d.qmin), d.qmax)  # type: ignore[operator, arg-type]
        return c, c
    return int(d.qmin), int(d.qmax)


def _fill(a: fx.Node) -> tuple[float, float] | None:
    """The value of a folded ``full([n], v)`` (its output_qparams say the grid)."""
    if base_name(target_name(a)) == "full" and len(a.args) > 1 and isinstance(a.args[1], (int, float)):
        return float(a.args[1]), float(a.args[1])
    return None


def _multiplier(ratio: float) -> tuple[int, int]:
    """The RESCALE multiplier and shift Arm makes of a scale ratio (op_tosa_rescale, 32-bit)."""
    mantissa, exponent = math.frexp(ratio)
    m = round(mantissa * (1 << 31))
    if m == 1 << 31:
        m, exponent = m // 2, exponent + 1
    shift = 31 - exponent
    if shift > 62:
        m, shift = m >> min(31, shift - 62), 62
    return m, shift


def rescaled(rel: np.ndarray, scale: float, to: float) -> np.ndarray:
    """Codes relative to their zero point on grid `scale`, rescaled onto grid `to` as TOSA RESCALE does."""
    m, shift = _multiplier(scale / to)
    return (rel * m + (1 << (shift - 1))) >> shift


def _witness(cmp: Any, a: Domain, b: Domain, ca: tuple[int, int], cb: tuple[int, int]) -> tuple[int, int] | None:
    """A pair of codes (of `a`, of `b`) within their ranges on which the backend's comparison differs from the
    program's: only pairs less than two steps of `b` apart can (the rounding moves a value by half a step of
    the finer grid), so each code of `a` is tried against the codes of `b` around it."""
    za, zb, sa, sb = int(a.zero_point), int(b.zero_point), float(a.scale), float(b.scale)  # type: ignore[arg-type]
    fine = min(sa, sb)
    xa = np.arange(ca[0], ca[1] + 1, dtype=np.int64)
    centre = np.floor((xa - za) * sa / sb).astype(np.int64) + zb
    xb = (centre[:, None] + np.arange(-2, 4, dtype=np.int64)[None, :]).clip(cb[0], cb[1])
    xa = np.broadcast_to(xa[:, None], xb.shape)
    ra, rb = xa - za, xb - zb
    program = cmp(ra.astype(np.float32) * np.float32(sa), rb.astype(np.float32) * np.float32(sb))
    backend = cmp(rescaled(ra, sa, fine), rescaled(rb, sb, fine))
    bad = np.argwhere(program != backend)
    if not len(bad):
        return None
    i, j = bad[0]
    return int(xa[i, j]), int(xb[i, j])
