"""maximum / minimum of two grids: the Arm backend rounds the winner twice.

The program takes the max (or min) of two dequantized reals and rounds it once onto the output grid.
The Arm backend (InsertRescalePass, executorch 1.5.1) rescales both operands to int32 on the finer
operand's scale, takes the max of those integers and rescales that onto the output grid: where the
coarser operand wins, its value is rounded onto the finer grid and then again onto the output's, and can
land one code from where one rounding puts it (mask campaign ``00230-mk-arm-custom``: a `minimum` one code
off on the TOSA reference model, which a LayerNorm's int8 ``rsqrt`` table downstream made 17 codes).
One code is within what the contract probe calls exact; what qflow must not do is prove a program whose
later ops make that code many (a steep table, an argmax, a comparison). This module finds, for each
max / min of two per-tensor grids of different scales, a code of the coarser operand on which two
roundings and one differ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch.fx as fx

from qflow.domain import Domain
from qflow.ir.fx_nodes import Consts, target_name
from qflow.ops import base_name
from qflow.targets.arm import comparisons
from qflow.targets.arm.rescale_fusion import OperandForm

_MIN_MAX = frozenset({"maximum", "minimum"})


@dataclass(frozen=True)
class RoundedTwice:
    """`node`'s result, whose codes the program reads at `value`, is one code off where its coarser
    operand holds `code`."""

    node: str
    value: str
    code: int
    detail: str


def rounded_twice(gm: fx.GraphModule, consts: Consts, folded: bool) -> list[RoundedTwice]:
    """Each maximum / minimum whose result the backend's two roundings can put one code off."""
    form = OperandForm(consts, folded)
    found = []
    for node in gm.graph.nodes:
        op = base_name(target_name(node)) if node.op == "call_function" else ""
        if op not in _MIN_MAX:
            continue
        inputs, out = form.inputs(node), form.output(node)
        if inputs is None or len(inputs) != 2 or out is None or not comparisons.per_tensor(out):
            continue
        (a, da), (b, db) = inputs.values()
        if not (comparisons.per_tensor(da) and comparisons.per_tensor(db)) or da.scale == db.scale:
            continue
        coarse, fine = (da, db) if da.scale > db.scale else (db, da)  # type: ignore[operator]
        code = _witness(coarse, float(fine.scale), out)  # type: ignore[arg-type]
        if code is None:
            continue
        value = node.name if folded else form.quantize_of(node).name  # type: ignore[union-attr]
        detail = (
            f"{node.name} ({op}) of {da} and {db} into {out}: the Arm backend rescales both operands to int32 "
            f"on the finer scale {float(fine.scale):.6g} (InsertRescalePass) and the result onto the output's, "
            f"so where the coarser operand wins its value is rounded twice (code {code} of {coarse} lands one "
            "output code from where the program's one rounding puts it)"
        )
        found.append(RoundedTwice(node.name, value, code, detail))
    return found


def _witness(coarse: Domain, fine: float, out: Domain) -> int | None:
    """A code of `coarse` that two TOSA roundings (onto `fine`, then onto `out`) and one put apart."""
    rel = np.arange(int(coarse.qmin), int(coarse.qmax) + 1, dtype=np.int64) - int(coarse.zero_point)  # type: ignore[arg-type]
    once = comparisons.rescaled(rel, float(coarse.scale), float(out.scale))  # type: ignore[arg-type]
    twice = comparisons.rescaled(comparisons.rescaled(rel, float(coarse.scale), fine), fine, float(out.scale))  # type: ignore[arg-type]
    qlo, qhi = int(out.qmin) - int(out.zero_point), int(out.qmax) - int(out.zero_point)  # type: ignore[arg-type]
    bad = np.flatnonzero(np.clip(once, qlo, qhi) != np.clip(twice, qlo, qhi))
    return int(rel[bad[0]]) + int(coarse.zero_point) if len(bad) else None  # type: ignore[arg-type]
