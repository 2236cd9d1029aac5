"""Activation fusion: when may relu / hardtanh / clamp vanish into its producer?

A conv/linear → activation → quantize chain lowers to the producer's output
rescale, which saturates to the quantize's [qmin, qmax]. Dropping the
activation is exact iff its bounds, quantized in that domain, do not cut
inside that range: for relu, iff zero_point == qmin. ExecuTorch's Arm
`FuseQuantizedActivationPass` has fused relu unconditionally since it began
"fusing by setting qmin to zp" (pytorch/executorch#21974): the narrowed qmin is
enforced by nothing after the rescale, so negative values leak.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch.fx as fx

from qflow.domain import Domain
from qflow.graph import DomainGraph, Obligation, ObligationKind
from qflow.ops import base_name

_PRODUCERS = frozenset({"conv1d", "conv2d", "conv3d", "convolution", "linear"})


def bounds(node: fx.Node) -> tuple[float | None, float | None] | None:
    """The real clamp interval of an activation node, or None if it is not one."""
    from qflow.integrations.fx import target_name

    name = base_name(target_name(node))
    args, kw = node.args, node.kwargs
    if name in ("relu", "relu_"):
        return 0.0, None
    if name == "relu6":
        return 0.0, 6.0
    if name in ("hardtanh", "hardtanh_"):
        lo = args[1] if len(args) > 1 else kw.get("min_val", -1.0)
        hi = args[2] if len(args) > 2 else kw.get("max_val", 1.0)
        return float(lo), float(hi)
    if name in ("clamp", "clamp_"):
        lo = args[1] if len(args) > 1 else kw.get("min")
        hi = args[2] if len(args) > 2 else kw.get("max")
        return (None if lo is None else float(lo)), (None if hi is None else float(hi))
    return None


def code(d: Domain, x: float | None, default: float) -> float:
    if x is None:
        return default
    return d.zero_point + round(x / d.scale)  # type: ignore[operator]


def exact(d: Domain, lo: float | None, hi: float | None) -> bool:
    """Dropping the clamp changes no output code."""
    return code(d, lo, -math.inf) <= d.qmin and code(d, hi, math.inf) >= d.qmax


@lru_cache(maxsize=1)
def fuses_by_narrowing() -> bool:
    """Does the installed ExecuTorch fuse a relu by rewriting qmin := zp
    (regardless of zp)? Probed from the pass itself, not from a version list."""
    try:
        from executorch.backends.arm._passes import fuse_quantized_activation_pass as m
    except ImportError:
        return False
    return hasattr(m.FuseQuantizedActivationPass, "_set_quant_qmin_to_zp") or hasattr(m, "_set_quant_qmin_to_zp")


def would_fuse(name: str, d: Domain, lo: float | None, hi: float | None) -> bool:
    """The installed FuseQuantizedActivationPass's own criterion."""
    if not fuses_by_narrowing():
        return exact(d, lo, hi)
    if name in ("relu", "relu_"):
        return True
    if name in ("hardtanh", "hardtanh_", "relu6"):
        return lo == 0 and code(d, hi, math.inf) == d.qmax
    return False


def check(node: fx.Node, q: Domain, dg: DomainGraph, q_name: str) -> None:
    """Add the fuseability obligation for activation `node` feeding a quantize in `q`."""
    from qflow.integrations.fx import target_name

    b = bounds(node)
    prod = node.args[0] if node.args else None
    if b is None or not isinstance(prod, fx.Node) or prod.op != "call_function":
        return
    if base_name(target_name(prod)) not in _PRODUCERS or len(prod.users) != 1 or q.per_channel:
        return
    name = base_name(target_name(node))
    lo, hi = b
    ok = exact(q, lo, hi)
    fused = would_fuse(name, q, lo, hi)
    if ok:
        return
    clo, chi = code(q, lo, -math.inf), code(q, hi, math.inf)
    if fused:
        detail = (
            f"{node.name} ({name}) after {prod.name} is not fuseable: its bounds quantize to codes "
            f"[{clo}, {chi}] but the domain's range is [{q.qmin}, {q.qmax}] (zp={q.zero_point}, "
            f"qmin={q.qmin}). The installed ExecuTorch fuses it anyway by narrowing qmin to {clo}; "
            f"nothing enforces the narrowed range after {prod.name}'s rescale, so values below "
            f"{lo} leak through."
        )
    else:
        detail = (
            f"{node.name} ({name}) after {prod.name} is not fuseable (codes [{clo}, {chi}] vs range "
            f"[{q.qmin}, {q.qmax}]): it must stay an explicit integer clamp, and {prod.name} must own an "
            "explicit output domain (ExecuTorch ≤ 1.2 dropped it, seed 001)."
        )
    dg.oblige(
        Obligation(
            kind=ObligationKind.STRUCTURAL,
            node=node.name,
            value=node.name,
            expected=q,
            finding_kind="non-fuseable-activation",
            edge=(node.name, q_name),
            holds=not fused,
            detail=detail,
        )
    )
