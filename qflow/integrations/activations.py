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
    """The installed FuseQuantizedActivationPass's own criterion. Its
    ``quantize_value`` saturates to [qmin, qmax], so a hardtanh/relu6 whose
    upper bound lies at or beyond the top of the range counts as reaching qmax."""
    if not fuses_by_narrowing():
        return exact(d, lo, hi)
    if name in ("relu", "relu_"):
        return True
    if name in ("hardtanh", "hardtanh_", "relu6"):
        return lo == 0 and code(d, hi, math.inf) >= d.qmax
    return False


def fuseable_domain(name: str, q: Domain, lo: float | None, hi: float | None) -> Domain | None:
    """A domain for the activation's output in which dropping it is exact and
    which the installed pass fuses, or None (a clamp, or a lower bound other
    than 0: the pass never fuses those). Zero point at qmin; the same scale as
    `q` when the upper bound still reaches qmax there, so the requant back into
    `q` is an integer shift with no second rounding; otherwise the scale that
    puts the upper bound exactly on qmax."""
    if name in ("clamp", "clamp_") or lo != 0:
        return None
    same = Domain.quantized(q.dtype, q.scale, q.qmin, q.qmin, q.qmax)
    if hi is None or code(same, hi, math.inf) >= q.qmax:
        return same
    return Domain.quantized(q.dtype, hi / (q.qmax - q.qmin), q.qmin, q.qmin, q.qmax)


@lru_cache(maxsize=1)
def conv_reads_activation_domain() -> bool:
    """Does the installed RewriteConvPass take a conv's output domain from a
    direct clamp / view_copy user when the conv has none (the seed 001 fix)?"""
    try:
        from executorch.backends.arm._passes.rewrite_conv_pass import RewriteConvPass
    except ImportError:
        return False
    return hasattr(RewriteConvPass, "_get_effective_output_qparams")


def left_without_domain(prod: fx.Node, activation: str) -> str:
    """What the installed Arm backend does with a producer whose output domain
    only its (unfused) activation records."""
    from qflow.integrations.fx import target_name

    producer = prod.name
    if not conv_reads_activation_domain():
        return (
            f"RewriteConvPass reads {producer}'s own output_qparams and fails with 'No output quantization "
            "parameter found' (seed 001, executorch ≤ 1.2)"
        )
    if base_name(target_name(prod)) == "linear":
        return (
            f"the installed RewriteConvPass reads the domain from a clamp only when it is the conv's direct "
            f"user, but DecomposeLinearPass turns {producer} into view → conv2d → view, so the conv's user is "
            "a view without output_qparams and lowering fails with 'No output quantization parameter found' "
            "(seed 001, still in executorch 1.5.1 for linear producers; a TOSA INT-only partitioner rejects "
            "the island instead and it runs on the CPU)"
        )
    return (
        f"the installed RewriteConvPass rescales {producer} into {activation}'s domain and the clamp stays "
        "explicit (exact); a TOSA INT-only partitioner rejects the island instead and it runs on the CPU; "
        "executorch ≤ 1.2 fails in RewriteConvPass (seed 001)"
    )


def domain_through(node: fx.Node) -> tuple[fx.Node, Domain] | None:
    """Seed 001's folded shape: a conv/linear with input_qparams but no
    output_qparams whose only user (through views) is an activation that owns
    them. Its rescale targets that domain, saturating only to the dtype range;
    the clamp then enforces the bounds, so the producer's domain is the
    activation's, widened to the dtype range."""
    from qflow.integrations.fx import quant_args_domain, target_name
    from qflow.ops import OpClass, classify

    if base_name(target_name(node)) not in _PRODUCERS:
        return None
    user = node
    for _ in range(8):
        if len(user.users) != 1:
            return None
        user = next(iter(user.users))
        if user.op != "call_function":
            return None
        oq = user.meta.get("output_qparams") or {}
        cls = classify(target_name(user))
        if cls is OpClass.ACTIVATION and oq:
            return user, quant_args_domain(oq[min(oq)], user).widened()
        if cls is not OpClass.PASSTHROUGH or oq:
            return None
    return None


def note_inferred(dg: DomainGraph, producer: fx.Node, activation: fx.Node, d: Domain) -> None:
    """A warning that the producer's domain was inferred through its activation."""
    dg.oblige(
        Obligation(
            kind=ObligationKind.STRUCTURAL,
            node=producer.name,
            value=producer.name,
            expected=d,
            finding_kind="missing-domain",
            holds=True,
            inform=True,
            severity="warning",
            detail=(
                f"{producer.name} has input_qparams but no output_qparams; its output domain is recorded only on "
                f"{activation.name} (an activation left unfused). qflow infers {d} (the activation's domain over "
                f"the full code range: the rescale saturates to the dtype, the clamp enforces the bounds). Passes "
                f"that need {producer.name}'s own output domain: RewriteConvPass (conv / decomposed linear). "
                f"Here: {left_without_domain(producer, activation.name)}."
            ),
        )
    )


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
    if exact(q, lo, hi):
        return
    fused = would_fuse(name, q, lo, hi)
    clo, chi = code(q, lo, -math.inf), code(q, hi, math.inf)
    numbers = (
        f"{node.name} ({name}, bounds [{lo}, {hi}]) after {prod.name}: the bounds quantize to codes "
        f"[{clo}, {chi}] in {q} (zp={q.zero_point}, qmin={q.qmin}, qmax={q.qmax}), inside the code range"
    )
    if fused:
        detail = (
            f"{numbers}, so it is not fuseable. The installed ExecuTorch fuses it anyway by narrowing qmin "
            f"to {q.zero_point}; nothing enforces the narrowed range after {prod.name}'s rescale, so values "
            f"below {lo} leak through."
        )
    else:  # no quantize between producer and activation: the producer has no domain of its own
        detail = (
            f"{numbers}, so it is not fuseable and stays an explicit clamp, leaving {prod.name} without an "
            f"output domain of its own: {left_without_domain(prod, node.name)}."
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
            inform=not fused,
            severity=None if fused else "warning",
            detail=detail,
            fix_domain=fuseable_domain(name, q, lo, hi),
        )
    )
