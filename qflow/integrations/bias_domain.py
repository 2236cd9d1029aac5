"""A bias must be in its op's accumulator domain (input scale × weight scale, zero point 0).

The fake-quantized program dequantizes a bias with whatever domain it declares and adds the reals;
a backend adds the bias's int32 codes to the accumulator as they are. A bias whose domain is not the
accumulator's (qparams edited after convert, a quantizer whose bias spec is not derived from the
input and weight) is misread: measured on the TOSA reference model, a linear layer whose input scale
was changed after convert is 27-31 output LSB off, and proved before this check
(tests/test_masked_downstream.py).
"""

from __future__ import annotations

import math

from torch import fx

from qflow.domain import Domain
from qflow.graph import DomainGraph, Obligation, ObligationKind
from qflow.ir import activations
from qflow.ir.fx_nodes import Consts, qdq_domain, target_name
from qflow.ops import OpClass, base_name, classify

_REL = 1e-5  # (the scales are float32 products)


def _dequantized(x: object, consts: Consts) -> Domain | None:
    if not isinstance(x, fx.Node) or classify(target_name(x)) is not OpClass.DEQUANTIZE:
        return None
    return qdq_domain(x, consts)


def _scales(d: Domain, n: int) -> list[float] | None:
    if d.is_float or d.opaque is not None:
        return None
    s = d.scale if isinstance(d.scale, tuple) else (d.scale,) * n
    return [float(x) for x in s] if len(s) == n else None


def oblige_bias_domains(gm: fx.GraphModule, dg: DomainGraph, consts: Consts, targets: tuple[str, ...]) -> None:
    """An error at each linear / convolution whose int32 bias is not in its accumulator's domain (on
    `targets`, the backends that add the bias's codes as they are)."""
    for node in gm.graph.nodes:
        weighted = node.op == "call_function" and base_name(target_name(node)) in activations.PRODUCERS
        if not weighted or len(node.args) < 3:
            continue
        x, w, b = (_dequantized(a, consts) for a in node.args[:3])
        if x is None or w is None or b is None or b.dtype != "int32" or node.name not in dg.g:
            continue
        n = len(b.scale) if isinstance(b.scale, tuple) else len(w.scale) if isinstance(w.scale, tuple) else 1
        sx, sw, sb = _scales(x, 1), _scales(w, n), _scales(b, n)
        if sx is None or sw is None or sb is None or x.per_channel:
            continue
        acc = [sx[0] * s for s in sw]
        zps = b.zero_point if isinstance(b.zero_point, tuple) else (b.zero_point,)
        if all(math.isclose(a, s, rel_tol=_REL) for a, s in zip(acc, sb, strict=True)) and not any(zps):
            continue
        worst = max(range(n), key=lambda c: abs(sb[c] / acc[c] - 1))
        detail = (
            f"{node.name}'s bias is in int32 scale={sb[worst]:.6g} zp={zps[0 if len(zps) == 1 else worst]} "
            f"(channel {worst}), but the backend adds its codes to the accumulator, whose domain is the "
            f"input scale × the weight scale = {acc[worst]:.6g}, zero point 0: the backend adds "
            f"{acc[worst] / sb[worst]:.4g}× the bias the program declares"
        )
        dg.oblige(
            Obligation(ObligationKind.STRUCTURAL, node.name, node.name, finding_kind="bias-domain", holds=False,
                       targets=targets, detail=detail)
        )  # fmt: skip
