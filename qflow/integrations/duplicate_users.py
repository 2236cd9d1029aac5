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

from qflow.domain import Domain
from qflow.graph import DomainGraph, Obligation, ObligationKind
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


def _key(node: fx.Node) -> Hashable | None:
    def leaf(a: Any) -> Hashable:
        if isinstance(a, fx.Node):
            return ("node", _source(a).name)
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


def _output_domain(node: fx.Node, consts: Consts) -> Domain | None:
    """The domain `node`'s codes are in once folded: its folded output_qparams, or its one quantize user's."""
    oq = node.meta.get("output_qparams")
    if isinstance(oq, dict) and oq:
        return quant_args_domain(oq[min(oq)], node)
    qs = [u for u in node.users if classify(target_name(u)) is OpClass.QUANTIZE]
    domains = {qdq_domain(q, consts) for q in qs}
    return domains.pop() if len(domains) == 1 and len(qs) == len(node.users) else None


def oblige_distinct_duplicates(gm: fx.GraphModule, dg: DomainGraph, consts: Consts, targets: tuple[str, ...]) -> None:
    """An error at each duplicate user a merge would move into another domain (on `targets`)."""
    groups: dict[Hashable, list[fx.Node]] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or classify(target_name(node)) in (OpClass.QUANTIZE, OpClass.DEQUANTIZE):
            continue
        if not node.all_input_nodes or (key := _key(node)) is None:
            continue
        groups.setdefault(key, []).append(node)
    for nodes in groups.values():
        if len(nodes) < 2:
            continue
        kept, kept_dom = nodes[0], _output_domain(nodes[0], consts)
        for node in nodes[1:]:
            dom = _output_domain(node, consts)
            if dom is None or kept_dom is None or dom == kept_dom or node.name not in dg.g:
                continue
            detail = (
                f"{node.name} computes what {kept.name} computes (same op, same input codes), so the backend "
                f"merges it into {kept.name} after folding the Q/DQ nodes (Arm FuseDuplicateUsersPass); its "
                f"consumers then read codes in {kept.name}'s domain {kept_dom} instead of its own {dom}"
            )
            dg.oblige(
                Obligation(ObligationKind.STRUCTURAL, node.name, node.name, finding_kind=KIND, holds=False,
                           targets=targets, detail=detail)
            )  # fmt: skip
