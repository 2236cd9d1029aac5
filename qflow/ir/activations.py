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

import torch.fx as fx

from qflow.domain import Domain
from qflow.graph import DomainGraph, Obligation, ObligationKind
from qflow.ir.fx_nodes import quant_args_domain, target_name
from qflow.ops import OpClass, base_name, classify
from qflow.targets import Fusion, Target

#: The ops a fusing target (Arm FuseQuantizedActivationPass) folds the next activation into.
PRODUCERS = frozenset({"conv1d", "conv2d", "conv3d", "convolution", "linear"})
#: The ops `bounds` knows: any other node is no clamp (checked before anything else).
BOUNDED = frozenset({"relu", "relu_", "relu6", "hardtanh", "hardtanh_", "clamp", "clamp_"})


def bounds(node: fx.Node) -> tuple[float | None, float | None] | None:
    """The real clamp interval of an activation node, or None if it is not one."""

    target = target_name(node)
    name = base_name(target)
    if name not in BOUNDED or classify(target) is not OpClass.ACTIVATION:
        return None  # (`clamp.Tensor`: its bounds are tensors)
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


def would_fuse(fusion: Fusion, name: str, d: Domain, lo: float | None, hi: float | None) -> bool:
    """Does a target with this fusion rule drop the clamp? A narrowing fuser
    (the Arm FuseQuantizedActivationPass) saturates the bound with
    ``quantize_value``, so a hardtanh/relu6 whose upper bound lies at or beyond
    the top of the range counts as reaching qmax; clamp is never fused."""
    if fusion is not Fusion.NARROW_QMIN:
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


def left_without_domain(prod: fx.Node, activation: str, target: Target) -> str:
    """What lowering does with a producer whose output domain only its
    (unfused) activation records."""
    from qflow import targets

    for name in (target.name, *target.members):
        consequence = targets.get(name).hook("left_without_domain")
        if consequence is not None:
            return f"on {name}, " + consequence(prod.name, base_name(target_name(prod)), activation)
    return f"a backend that needs {prod.name}'s own output domain cannot lower it"


def domain_through(node: fx.Node) -> tuple[fx.Node, Domain] | None:
    """Seed 001's folded shape: a conv/linear with input_qparams but no
    output_qparams whose only user (through views) is an activation that owns
    them. Its rescale targets that domain, saturating only to the dtype range;
    the clamp then enforces the bounds, so the producer's domain is the
    activation's, widened to the dtype range."""
    if base_name(target_name(node)) not in PRODUCERS:
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


def note_inferred(dg: DomainGraph, producer: fx.Node, activation: fx.Node, d: Domain, target: Target) -> None:
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
                f"Here: {left_without_domain(producer, activation.name, target)}."
            ),
        )
    )


def check(node: fx.Node, q: Domain, dg: DomainGraph, q_name: str, target: Target, kept: int | None = None) -> None:
    """Add the fuseability obligation for activation `node` feeding a quantize in `q`. `kept`: the one code
    the clamp the lowering makes of `node` outputs whatever it reads, where the target measured one."""
    from qflow import targets as registry

    b = bounds(node)
    prod = node.args[0] if node.args else None
    if b is None or not isinstance(prod, fx.Node) or prod.op != "call_function":
        return
    if base_name(target_name(prod)) not in target.fusion_producers or len(prod.users) != 1 or q.per_channel:
        return
    name = base_name(target_name(node))
    lo, hi = b
    if exact(q, lo, hi):
        return
    members = [registry.get(m) for m in target.members] or [target]
    narrowing = [t.name for t in members if would_fuse(t.fusion, name, q, lo, hi) and t.fusion is Fusion.NARROW_QMIN]
    clamping = [t.name for t in members if t.fusion is Fusion.CODE_CLAMP]
    miscomputes = bool(narrowing)
    clo, chi = code(q, lo, -math.inf), code(q, hi, math.inf)
    lo_s = "-inf" if lo is None else f"{lo:g}"
    hi_s = "inf" if hi is None else f"{hi:g}"
    numbers = (
        f"{node.name} ({name}, real bounds [{lo_s}, {hi_s}] = codes [{clo:g}, {chi:g}]) after {prod.name}: in "
        f"{q} (zp={q.zero_point}, qmin={q.qmin}, qmax={q.qmax}) the bounds cut inside the code range"
    )
    elsewhere = f" ({', '.join(clamping)} clamps in code space: exact there)" if clamping else ""
    if narrowing:
        detail = (
            f"{numbers}, so it is not fuseable. On {', '.join(narrowing)} it is fused anyway by narrowing "
            f"qmin to {q.zero_point} (ExecuTorch Arm FuseQuantizedActivationPass); nothing enforces the "
            f"narrowed range after {prod.name}'s rescale, so values below {lo_s} leak through{elsewhere}."
        )
    elif clamping and len(clamping) == len(members):
        return  # every target clamps in code space: exact
    else:  # no quantize between producer and activation: the producer has no domain of its own
        detail = (
            f"{numbers}, so it is not fuseable and stays an explicit clamp, leaving {prod.name} without an "
            f"output domain of its own: {left_without_domain(prod, node.name, target)}"
        )
        one = q.qmax if clo >= q.qmax else q.qmin if chi <= q.qmin else None
        masked = one is not None and kept == one  # (measured: campaign case 00047-cm-custom, exact)
        miscomputes = any(t.unfused_producer is not None for t in members) and not masked
        if masked:
            detail += (
                f", but not here: the clamp the lowering makes of {node.name} outputs code {one} whatever it reads, "
                f"as the program's {node.name} outputs {one} for every input, so no output sees what {prod.name} "
                "computes"
            )
        detail += "."
    dg.oblige(
        Obligation(
            kind=ObligationKind.STRUCTURAL,
            node=node.name,
            value=node.name,
            expected=q,
            finding_kind="non-fuseable-activation",
            edge=(node.name, q_name),
            holds=not miscomputes,
            inform=not miscomputes,
            severity=None if miscomputes else "info" if kept is not None else "warning",
            detail=detail,
            fix_domain=fuseable_domain(name, q, lo, hi),
            targets=tuple(narrowing) if target.members else (),
        )
    )
