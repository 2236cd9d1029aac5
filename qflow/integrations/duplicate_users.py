"""Duplicate users that a backend merges after it folds the Q/DQ nodes.

The Arm backend runs ``FuseDuplicateUsersPass`` right after
``FoldAndAnnotateQParamsPass`` (executorch 1.5.1): users of one tensor with the
same op and the same arguments become one node, the first in graph order. Its
signature is the op and its arguments only, not the folded ``output_qparams``,
so two ``silu(x)`` whose outputs the quantizer put in different domains (one
shares a ``cat``'s wide domain, the other has its own) are merged, and the
second one's consumers read codes in the first one's domain — with no error
(transformer campaign case 00080-tx-arm-pc: 92 output LSB off on the TOSA
reference model; tests/test_duplicate_users.py).

In the Q/DQ form the two read their input through separate dequantizes of one
quantize; in the folded form they read the same tensor. Either way: same op,
same arguments once each dequantize stands for its quantize, different output
domains → an error at the one whose domain is lost.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch.fx as fx

from qflow.domain import FLOAT, Domain
from qflow.graph import Definition, DefKind, DomainGraph, Obligation, ObligationKind, Value
from qflow.ir.fx_nodes import Consts, qdq_domain, quant_args_domain, target_name
from qflow.ops import OpClass, classify

KIND = "merged-duplicate-users"


def _source(a: fx.Node) -> fx.Node:
    """What a dequantize reads once the fold removes it: its quantize's input (else the node itself)."""
    if classify(target_name(a)) is OpClass.DEQUANTIZE and isinstance(q := a.args[0], fx.Node):
        if classify(target_name(q)) is OpClass.QUANTIZE and isinstance(q.args[0], fx.Node):
            return q.args[0]
        return q
    return a


def key(node: fx.Node, merged: dict[fx.Node, fx.Node] | None = None) -> Hashable | None:
    """What a merge compares: the op and its arguments, each dequantize standing for its quantize's input
    and each node for the one it was merged into (`merged`)."""
    into = merged or {}

    def leaf(a: Any) -> Hashable:
        if isinstance(a, fx.Node):
            src = _source(a)
            return ("node", into.get(src, src).name)
        if isinstance(a, (list, tuple)):
            return tuple(leaf(x) for x in a)
        if isinstance(a, dict):
            return tuple(sorted((k, leaf(v)) for k, v in a.items()))
        return a if isinstance(a, Hashable) else repr(a)

    try:
        key = (str(node.target), leaf(node.args), leaf(dict(node.kwargs)))
        hash(key)
    except TypeError:
        return None
    return key


def keys(gm: fx.GraphModule) -> dict[fx.Node, Hashable]:
    """Each call's merge key as the pass merges: again and again until nothing changes, so two chains of
    the same views of one input merge link by link, and two matmuls of them merge too (mask campaign
    00238-mk-arm-custom: two ``x @ x.T`` in different domains, 21 output LSB off on the TOSA reference
    model). In graph order, each node's key reads its arguments as the nodes they were merged into."""
    merged: dict[fx.Node, fx.Node] = {}
    first: dict[Hashable, fx.Node] = {}
    out: dict[fx.Node, Hashable] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or not node.all_input_nodes:
            continue
        if classify(target_name(node)) in (OpClass.QUANTIZE, OpClass.DEQUANTIZE):
            continue
        if (k := key(node, merged)) is not None:
            out[node] = k
            merged[node] = first.setdefault(k, node)
    return out


def _output(node: fx.Node, consts: Consts) -> tuple[Domain | None, fx.Node | None]:
    """The domain `node`'s codes are in once folded (its folded output_qparams, or its one quantize
    user's) and that quantize (None in a folded partition)."""
    oq = node.meta.get("output_qparams")
    if isinstance(oq, dict) and oq:
        return quant_args_domain(oq[min(oq)], node), None
    qs = [u for u in node.users if classify(target_name(u)) is OpClass.QUANTIZE]
    if len(qs) != 1 or len(node.users) != 1:
        return None, None
    return qdq_domain(qs[0], consts), qs[0]


def chained(node: fx.Node, merge_keys: dict[fx.Node, Hashable]) -> bool:
    """Is `node` a duplicate only through earlier merges (an argument merged into another node)?"""
    return key(node) != merge_keys.get(node)


def oblige_distinct_duplicates(
    gm: fx.GraphModule, dg: DomainGraph, consts: Consts, targets: tuple[str, ...], folded: bool = False
) -> None:
    """An error at each duplicate user a merge moves into another domain (on `targets`). The repair
    gives every duplicate the finest of their domains, and each one that needs its own a requant
    after it (`fix_domain` on the edge to its quantize): merged, they then compute the same codes.
    A group that merges only because an earlier one did (the views after two matmuls merged across
    domains) follows from that one: its error and its repair are the earlier group's."""
    groups: dict[Hashable, list[fx.Node]] = {}
    merge_keys = keys(gm)
    for node, k in merge_keys.items():
        if node.name in dg.g:
            groups.setdefault(k, []).append(node)
    moved: set[str] = set()  # duplicates merged into another domain
    for nodes in groups.values():
        outs = {n: _output(n, consts) for n in nodes}
        domains = {d for d, _ in outs.values() if d is not None}
        if len(nodes) < 2 or len(domains) < 2 or any(d is None for d, _ in outs.values()):
            continue
        if any(d.opaque is not None for d in domains):  # (qparams the merged graph computes: the same ones)
            continue
        kept, (kept_dom, _) = nodes[0], outs[nodes[0]]
        broken = [n for n in nodes[1:] if outs[n][0] != kept_dom]
        if any(_source(a).name in moved for n in nodes for a in n.all_input_nodes):
            moved.update(n.name for n in broken)
            continue
        moved.update(n.name for n in broken)
        if len({d.dtype for d in domains}) > 1:
            _unproven(dg, broken, kept, kept_dom, targets, _ACROSS_DTYPES)
            continue
        if not folded and any(chained(n, merge_keys) for n in broken):
            _unproven(dg, broken, kept, kept_dom, targets, _ACROSS_PARTITIONS)
            continue
        per_tensor = all(not d.per_channel and not d.is_float for d in domains)
        finest = min(domains, key=lambda d: float(d.scale)) if per_tensor else None  # type: ignore[arg-type]
        fixable = finest is not None and all(q is not None for _, q in outs.values())
        for n in [m for m in nodes if outs[m][0] != finest] if fixable else broken:
            dom, q = outs[n]
            at = n if n in broken else broken[0]
            detail = (
                f"{at.name} computes what {kept.name} computes (same op, same input codes), so the backend "
                f"merges it into {kept.name} after folding the Q/DQ nodes (Arm FuseDuplicateUsersPass); its "
                f"consumers then read codes in {kept.name}'s domain {kept_dom} instead of its own {outs[at][0]}"
            )
            fix = {"edge": (n.name, q.name), "fix_domain": finest} if fixable and q is not None else {}
            dg.oblige(
                Obligation(ObligationKind.STRUCTURAL, at.name, at.name, expected=dom, other=kept.name,
                           finding_kind=KIND, holds=False, targets=targets, detail=detail, **fix)
            )  # fmt: skip


#: Duplicates of different dtypes. Where the fold gives the op its output dtype as an argument (a sum's
#: ``dtype``) their signatures differ and nothing is merged: measured exact in 5 custom transformer-campaign
#: cases, an int8 and an int16 sum of one input, and proved in the folded partition, which has the argument.
#: The Q/DQ program does not say which ops get one.
_ACROSS_DTYPES = "in another dtype; what the merge computes across dtypes was not measured to be right"
#: Duplicates only through earlier merges (two chains of ops on one input): the pass merges within a
#: partition, and chains the partitioner puts in two do not merge (measured exact: transformer campaign
#: 00476-tx-arm-pc, two softmax(x); 02120-tx-arm-custom). Which partition holds each is decided later.
_ACROSS_PARTITIONS = (
    "through a chain of merges; it reads the other's codes if the partitioner puts both chains in one partition "
    "(the folded partition says)"
)


def _unproven(
    dg: DomainGraph, broken: list[fx.Node], kept: fx.Node, kept_dom: Domain, targets: tuple[str, ...], why: str
) -> None:
    """Duplicates whose merge the Q/DQ program cannot decide (`why`): unproven, never proved."""
    for n in broken:
        blocker = f"{n.name}?merge"
        reason = (
            f"{n.name} computes what {kept.name} computes (same op, same input codes) {why}; the backend merges "
            f"such users after folding (Arm FuseDuplicateUsersPass) into {kept.name}'s {kept_dom}"
        )
        dg.add_value(
            Value(
                blocker,
                "merge",
                OpClass.UNKNOWN,
                Definition(DefKind.FREE, blocking=True, reason=reason, blocks_as=KIND),
            )
        )
        dg.oblige(Obligation(ObligationKind.USE, node=n.name, value=blocker, expected=FLOAT, expected_real=True,
                             arg="its merge", finding_kind=KIND, targets=targets, severity="warning"))  # fmt: skip
