"""Values no program output depends on: behind an activation that is constant.

A relu whose input domain holds no positive value (int8 zero point 127: the
stock Arm quantizer gives ``relu(neg(relu(x)))``'s neg exactly that) outputs 0
for every code its input can hold, in real space and in code space alike (its
lower bound quantizes to the dtype's top code). Whatever its producers compute
— a dropped scale, a requant folded away — cannot reach an output through it
(campaign case 00559: a `neg` with a dropped scale before such a relu, exact on
the TOSA reference model). The obligations of values that reach the outputs
only through such activations are not needed for the program to compute right.

Only a target on which those obligations break as a silent miscompile (Arm)
lets them go: on a target that refuses the program (XNNPACK at load), a dead
branch is refused all the same. Only the miscompile kinds are let go, and only
in a region of one integer dtype: a dtype change there can fail the lowering.
The region is recorded (`DomainGraph.unreached`): a lowered program's TOSA artifact checks
anchored there go with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.fx as fx

from qflow.domain import Domain
from qflow.graph import DefKind, DomainGraph, Obligation, ObligationKind
from qflow.ir import activations
from qflow.ir.copy_chains import fuses_into_next_clamp, is_dequantize, is_quantize
from qflow.ir.fx_nodes import target_name
from qflow.ops import OpClass, base_name

#: The kinds that only make values wrong on a target whose contract outcome is a miscompile.
MASKABLE = frozenset(
    {
        "requant-after-passthrough",
        "requant-across-activation",
        "dropped-scale",
        "passthrough-domain-change",
        "requant-carried",
    }
)
_DTYPE_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}


@dataclass(frozen=True)
class Constant:
    """An activation whose output is one value for every code of its input's dtype."""

    node: fx.Node
    domain: Domain  # its input's
    value: float


def constant_value(lo: float | None, hi: float | None, d: Domain) -> float | None:
    """The one output of clamp [lo, hi] over every code of `d`'s dtype, or None."""
    rng = _DTYPE_RANGE.get(d.dtype)
    if rng is None or d.per_channel or d.scale is None or d.zero_point is None:
        return None
    low, high = ((c - d.zero_point) * d.scale for c in rng)
    if lo is not None and high <= lo:
        return lo
    if hi is not None and low >= hi:
        return hi
    return None


def constants(candidates: list[fx.Node], domain_of: dict[str, Domain], fuse_clamps: bool = True) -> list[Constant]:
    """The standalone activations that read a DQ and are constant over its dtype.

    A clamp the target fuses with a neighbour (into a conv's rescale, or with
    the next activation) takes bounds from another domain, so it is left out."""

    out = []
    for node in candidates:
        b = activations.bounds(node)
        dq = node.args[0] if b is not None and node.args else None
        if not isinstance(dq, fx.Node) or not is_dequantize(dq) or dq.name not in domain_of:
            continue
        q = dq.args[0] if isinstance(dq.args[0], fx.Node) else None
        prev = q.args[0] if q is not None and is_quantize(q) and isinstance(q.args[0], fx.Node) else None
        fused_with_prev = fuse_clamps and prev is not None and activations.bounds(prev) is not None
        if fuses_into_next_clamp(node, fuse_clamps) or fused_with_prev:
            continue
        if prev is not None and base_name(target_name(prev)) in activations.PRODUCERS:
            continue
        value = constant_value(*b, domain_of[dq.name])
        if value is not None:
            out.append(Constant(node, domain_of[dq.name], value))
    return out


def _dead(gm: fx.GraphModule, stops: set[fx.Node]) -> set[str]:
    """Nodes from which no output is reached except through a node of `stops`."""
    live: set[fx.Node] = set()
    todo = [n for n in gm.graph.nodes if n.op == "output"]
    while todo:
        n = todo.pop()
        if n in live:
            continue
        live.add(n)
        if n not in stops:
            todo.extend(n.all_input_nodes)
    return {n.name for n in gm.graph.nodes if n not in live and n.op == "call_function"}


def let_go(gm: fx.GraphModule, dg: DomainGraph, fuse_clamps: bool = True) -> None:
    """Replace the maskable obligations behind constant activations by one
    info finding per activation (a structural obligation that holds).
    `fuse_clamps`: the target makes consecutive activations one clamp."""
    domain_of: dict[str, Domain] = {}
    quantizes: set[str] = set()
    acts: set[str] = set()
    for v in dg.values():  # one pass: this runs on every program read for a single target
        if v.op_class is OpClass.ACTIVATION:
            acts.add(v.name)
        elif v.op_class in (OpClass.QUANTIZE, OpClass.DEQUANTIZE):
            if v.op_class is OpClass.QUANTIZE:
                quantizes.add(v.name)
            d = v.definition
            if d.kind is DefKind.FACT and d.domain is not None and not d.domain.is_float:
                domain_of[v.name] = d.domain
    if not acts:
        return
    nodes = [n for n in gm.graph.nodes if n.name in acts]
    for c in constants(nodes, domain_of, fuse_clamps):
        dead = _dead(gm, {c.node})
        region = {domain_of[n].dtype for n in dead if n in quantizes}  # weights and biases keep their dtypes
        if region - {c.domain.dtype}:
            continue
        for n in dead:
            dg.unreached.setdefault(n, c.node.name)
        gone = [
            ob
            for ob in dg.obligations
            if ob.finding_kind in MASKABLE and ob.value in dead and (ob.other is None or ob.other in dead)
        ]
        if not gone:
            continue
        ids = {id(ob) for ob in gone}
        dg.obligations = [ob for ob in dg.obligations if id(ob) not in ids]
        where = ", ".join(sorted({f"{ob.finding_kind} at {ob.node}" for ob in gone}))
        dg.oblige(
            Obligation(
                kind=ObligationKind.STRUCTURAL,
                node=c.node.name,
                value=c.node.name,
                finding_kind="masked-by-constant",
                holds=True,
                inform=True,
                detail=(
                    f"{c.node.name} outputs {c.value:g} for every code its input can hold ({c.domain}, "
                    f"every {c.domain.dtype} code); nothing upstream of it reaches an output any other way, "
                    f"so {len(gone)} obligation(s) there are not needed: {where}."
                ),
            )
        )
