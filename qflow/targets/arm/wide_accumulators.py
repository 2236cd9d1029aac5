"""int16 convolutions and matmuls: the Arm backend rescales their 48-bit accumulators with 16-bit multipliers.

With int16 activations a conv / linear / matmul accumulates in INT48, and TOSA's RESCALE from INT48 takes no
32-bit multiplier (``scale32`` false; executorch 1.5.1 writes 15-bit ones: 20009-23308 / 2^23 for a linear's
channels, 28342 / 2^28 for a bmm, in soundness campaign case 00057-tx-arm-a16w8). Its ratio is the program's
within about 2^-15, so over an int16 output's range the result lands up to one code from where the program's
exact rounding puts it — on inputs that are no rounding ties, unlike a 32-bit multiplier's (2^-31). One code
is within what the contract probe calls exact; what follows can make it many (00057: the linear's code times
a relu of up to 8, 8 output LSB on the TOSA reference model on an input a search found, proved until
2026-12-03). An int8 output's range (127 codes) keeps the ratio's error far below one code: left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.fx as fx

from qflow.ir.fx_nodes import Consts, target_name
from qflow.ops import ACCUMULATING, base_name
from qflow.targets.arm import comparisons
from qflow.targets.arm.rescale_fusion import OperandForm


@dataclass(frozen=True)
class CoarseRescale:
    """`node`'s int16 result, whose codes the program reads at `value`, can be one code off the program's."""

    node: str
    value: str
    detail: str


def coarse_rescales(gm: fx.GraphModule, consts: Consts, folded: bool) -> list[CoarseRescale]:
    """Each conv / matmul of int16 activations into a per-tensor int16 grid."""
    form = OperandForm(consts, folded)
    found = []
    for node in gm.graph.nodes:
        op = base_name(target_name(node)) if node.op == "call_function" else ""
        if op not in ACCUMULATING:  # (a TOSA CONV2D / MATMUL: INT48 at int16)
            continue
        inputs, out = form.inputs(node), form.output(node)
        if inputs is None or not comparisons.per_tensor(out) or out.dtype != "int16":  # type: ignore[union-attr]
            continue
        if not any(d.dtype == "int16" for _, d in inputs.values()):
            continue
        q = node if folded else form.quantize_of(node)
        if q is None:
            continue
        detail = (
            f"{node.name} ({op}) of int16 activations into {out}: the Arm backend rescales its INT48 accumulator with "
            "a 16-bit multiplier (TOSA RESCALE, scale32 false), the program's ratio within about 2^-15, so over the "
            "int16 range its result can land one code from where the program's rounding puts it"
        )
        found.append(CoarseRescale(node.name, q.name, detail))
    return found
