"""Constants the Arm passes make out of the partition's own, anchored by what made them.

The TOSA payload names most constants after the placeholders they were (and the artifact
check anchors those by name and content), but two passes make new ones:

* ``FuseEqualPlaceholdersPass`` merges constants with equal codes into the first one's
  ``<name>_common``, whatever their declared domains (a scalar 1/N of two LayerNorms and a
  0.25 share code 127). Each *use* is anchored by the constant its PT2E node read: the use
  gets a copy of its own in that one domain.
* ``DecomposeCumsumPass`` makes a depthwise kernel of ones (a sum), anchored as real ones.
* ``FuseConstantArgsPass`` and ``ComputeConstantOpsAOTPass`` evaluate an op whose inputs are
  all constant into ``<node>_fused_const`` / ``<node>_pre_computed`` (the select of an LSTM's
  zero state, a ``full``). It is anchored in the node's
  declared output domain only once its codes are those the node's PT2E computation,
  evaluated on the partition's constants and quantized there, gives: a fold that computed
  something else stays unanchored.

Anything else stays unanchored, so what depends on it is unproven, never proved.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from torch import fx

from qflow.domain import Domain
from qflow.ir.fx_nodes import Consts, constant_nodes, qdq_domain, target_name
from qflow.ops import OpClass, base_name, classify
from qflow.targets.arm.tosa_flatbuffer import TosaOp, TosaProgram, region_module, region_of
from qflow.targets.arm.tosa_interpreter import Anchors, Interpreter

MERGED = "_common"
CUMSUM_KERNEL = "_weight_hwicm"  # (a depthwise kernel, as TOSA lays it out)
FOLDED = ("_fused_const", "_pre_computed")


def content_key(values: np.ndarray) -> tuple[int, bytes]:
    """A constant's values up to order: TOSA permutes weights (OHWI, HWICM) and packs int4."""
    return int(values.size), np.sort(values.astype(np.int64).reshape(-1)).tobytes()


def anchor_made_constants(prog: TosaProgram, anchors: Anchors, ep: Any, constants: dict[str, Any]) -> TosaProgram:
    """`prog` with each resolvable use of a merged constant split into its own anchored copy, and
    each verified folded constant anchored (in `anchors.consts`). `constants`: the partition's
    quantized constants by placeholder name (`tosa_anchors.Constant`)."""
    _anchor_folded(prog, anchors, ep, constants)
    _anchor_cumsum_kernels(prog, anchors, ep)
    return _split_merged(prog, anchors, ep, constants)


def _anchor_cumsum_kernels(prog: TosaProgram, anchors: Anchors, ep: Any) -> None:
    """Arm's DecomposeCumsumPass computes a cumsum as a depthwise convolution with a kernel of ones,
    named after a convolution the partition does not have: its codes are 1 for the real value 1 (a
    sum), on a grid of step 1. Only an all-ones kernel, in a partition with a cumsum, is anchored."""
    if not any(n.op == "call_function" and base_name(target_name(n)) == "cumsum" for n in ep.graph.nodes):
        return
    for name, t in prog.tensors.items():
        made = name.endswith(CUMSUM_KERNEL) and name.removesuffix(CUMSUM_KERNEL) not in anchors.nodes
        if made and name not in anchors.consts and t.data is not None and t.data.size and (t.data == 1).all():
            anchors.consts[name] = Domain.quantized("int8", 1.0, 0, -128, 127)


def _split_merged(prog: TosaProgram, anchors: Anchors, ep: Any, constants: dict[str, Any]) -> TosaProgram:
    merged = [
        n for n, t in prog.tensors.items() if n.endswith(MERGED) and n not in anchors.consts and t.data is not None
    ]  # noqa: E501
    if not merged:
        return prog
    reads = _constant_reads(ep, constants)
    for node, used in _folded_reads(ep, anchors).items():
        reads.setdefault(node, []).extend(used)
    where = Interpreter(prog, anchors)  # (only to name the PT2E node each TOSA op came from)
    users: dict[str, list[TosaOp]] = {}
    for op in prog.ops:
        for i in op.inputs:
            users.setdefault(i, []).append(op)
    tensors, ops, clones = dict(prog.tensors), list(prog.ops), []
    for name in merged:
        key = content_key(prog.tensors[name].data)  # type: ignore[arg-type]
        for k, op in enumerate(ops):
            if name not in op.inputs:
                continue
            domains = _use_domains(where, users, prog.ops[k], key, reads)
            if len(domains) != 1:
                continue
            clone = f"{name}@{op.index}"
            tensors[clone] = dataclasses.replace(prog.tensors[name], name=clone)
            ops[k] = dataclasses.replace(op, inputs=tuple(clone if i == name else i for i in op.inputs))
            clones.append(TosaOp(op.index, "CONST", (), (clone,)))
            anchors.consts[clone] = domains.pop()
    return dataclasses.replace(prog, tensors=tensors, ops=(*clones, *ops))


#: TOSA ops the serializer puts between a constant and the op of its PT2E node (a scalar's RESCALE to int32,
#: its RESHAPE to the other operand's rank).
_CARRIERS = frozenset({"RESCALE", "RESHAPE", "TRANSPOSE", "TILE"})


def _use_domains(
    where: Interpreter, users: dict[str, list[TosaOp]], op: TosaOp, key: tuple[int, bytes], reads: dict[str, list[Any]]
) -> set[Domain]:
    """The domains the PT2E node of `op` reads constants with codes `key` in; for a RESCALE or shape op
    that node names none, those of the first ops after it that do."""
    frontier = [op]
    for _ in range(4):
        for o in frontier:
            domains = {c.domain for c in reads.get(where.node_of(o), ()) if c.key == key}
            if domains:
                return domains
        frontier = [u for o in frontier if o.op in _CARRIERS for t in o.outputs for u in users.get(t, [])]
    return set()


def _constant_reads(ep: Any, constants: dict[str, Any]) -> dict[str, list[Any]]:
    """FX node → the quantized constants it reads through their dequantize."""
    out: dict[str, list[Any]] = {}
    for n in ep.graph.nodes:
        for a in n.all_input_nodes:
            if a.op == "call_function" and classify(target_name(a)) is OpClass.DEQUANTIZE and a.args:
                src = a.args[0]
                if isinstance(src, fx.Node) and src.name in constants:
                    out.setdefault(n.name, []).append(constants[src.name])
    return out


@dataclasses.dataclass(frozen=True)
class _Use:
    """The codes a node reads from a constant computation, up to order, and the domain it reads them in."""

    key: tuple[int, bytes]
    domain: Domain


def _folded_reads(ep: Any, anchors: Anchors) -> dict[str, list[_Use]]:
    """FX node → the constant computations (a ``full``, quantized) it reads through their quantize and
    dequantize, with the codes they fold into: a use of a merged folded constant is anchored by them."""
    out: dict[str, list[_Use]] = {}
    computed = set(_constant_nodes(ep, anchors))
    consts = _consts(ep)
    for n in ep.graph.nodes:
        for dq in n.all_input_nodes:
            q = dq.args[0] if dq.op == "call_function" and dq.args else None
            if classify(target_name(dq)) is not OpClass.DEQUANTIZE or not isinstance(q, fx.Node) or not q.args:
                continue
            src = q.args[0]
            d = qdq_domain(dq, consts)
            if not isinstance(src, fx.Node) or src.name not in computed or d is None or not isinstance(d.scale, float):
                continue
            value = _evaluate(ep, src.name)
            if value is not None:
                out.setdefault(n.name, []).append(_Use(content_key(_quantized(value, d)), d))
    return out


@dataclasses.dataclass(frozen=True)
class _Subgraph:
    """A control-flow subgraph of the partition (a cond branch, a loop body), where the folded
    constants of its TOSA region were computed: read like a program with no lifted constants."""

    graph_module: fx.GraphModule

    @property
    def graph(self) -> fx.Graph:
        return self.graph_module.graph


def _consts(ep: Any) -> Consts:
    return Consts(ep.graph_module, ep if hasattr(ep, "graph_signature") else None)


def _anchor_folded(prog: TosaProgram, anchors: Anchors, ep: Any, constants: dict[str, Any]) -> None:
    candidates: list[str] | None = None
    for name, t in prog.tensors.items():
        region = region_of(name, prog.regions)
        sub = region_module(ep.graph_module, region) if region is not None else None
        base = name.removesuffix(f"_{region}") if isinstance(sub, fx.GraphModule) else name
        base = base.removesuffix(MERGED)  # (equal folded constants merged: one set of codes for every use)
        suffix = next((s for s in FOLDED if base.endswith(s)), None)
        if suffix is None or name in anchors.consts or t.data is None:
            continue
        node = base.removesuffix(suffix)
        if isinstance(sub, fx.GraphModule):  # a region's: its subgraph's node (or the one constant computation
            # of the subgraph with these codes: Arm renames a full_like it makes a full), and the quantize after it
            names = [node] if any(n.name == node for n in sub.graph.nodes) else [
                n.name for n in sub.graph.nodes if n.op == "call_function"
            ]  # fmt: skip
            found = {d for n in names if (d := _codes_domain(_Subgraph(sub), n, {}, t.data)) is not None}
            if len(found) == 1:
                anchors.consts[name] = found.pop()
            continue
        if node in anchors.node_out and not name.endswith(MERGED):
            d = _codes_domain(ep, node, anchors.node_out, t.data)
            if d is not None:
                anchors.consts[name] = d
                continue
        # made from a node an Arm pass created (DecomposeLinearPass's views around an LSTM's constant
        # first step), named after a node the passes numbered apart from the program's, or merged with
        # its equals: anchored when every constant PT2E computation that has these codes has one domain
        candidates = _constant_nodes(ep, anchors) if candidates is None else candidates
        found = {d for n in candidates if (d := _codes_domain(ep, n, anchors.node_out, t.data)) is not None}
        if name.endswith(MERGED):  # (and every placeholder it may have been merged with)
            found |= {c.domain for c in constants.values() if c.key == content_key(t.data)}
        if len(found) == 1:
            anchors.consts[name] = found.pop()


def _codes_domain(ep: Any, node: str, declared: dict[str, Domain], data: np.ndarray) -> Domain | None:
    """`node`'s declared output domain (`declared`) — or that of a quantize right after it, which the pass folds
    in too (an `arange` cast to int32 codes of scale 1, requantized to int8) — when its PT2E computation,
    quantized there, has `data`'s codes."""
    value = _evaluate(ep, node)
    if value is None:
        return None
    consts = _consts(ep)
    for n in _requant_chain(ep, node):
        d = declared.get(n.name) if n.name == node else qdq_domain(n, consts)
        if d is None or d.per_channel or not isinstance(d.scale, float):
            continue
        if content_key(_quantized(value, d)) == content_key(data):
            return d
    return None


def _quantized(value: np.ndarray, d: Domain) -> np.ndarray:
    """`value`'s codes in the per-tensor domain `d` (as the quantize the passes fold computes them)."""
    return np.clip(np.round(value / d.scale) + d.zero_point, d.qmin, d.qmax)  # type: ignore[operator]


def _requant_chain(ep: Any, name: str) -> list[fx.Node]:
    """Node `name`, then each quantize that follows it through nodes that are the only user of the one before
    and are quantizes or dequantizes."""
    n = next((n for n in ep.graph.nodes if n.name == name), None)
    chain = [n] if n is not None else []
    while n is not None and len(n.users) == 1:
        n = next(iter(n.users))
        cls = classify(target_name(n)) if n.op == "call_function" else None
        if cls is OpClass.QUANTIZE:
            chain.append(n)
        elif cls is not OpClass.DEQUANTIZE:
            break
    return chain


def _constant_nodes(ep: Any, anchors: Anchors) -> list[str]:
    """The partition's computations with a declared output domain that read constants only (or only
    their input's shape: a `zeros_like`)."""
    constant = constant_nodes(ep.graph, Consts(ep.graph_module, ep))
    return [
        n.name
        for n in ep.graph.nodes
        if (n in constant or _shape_only(n)) and n.op == "call_function" and n.name in anchors.node_out
    ]


def _evaluate(ep: Any, name: str) -> np.ndarray | None:
    """The float value of FX node `name` when everything it depends on is a constant of the
    partition (None otherwise): the node's own PT2E computation, run."""
    nodes = {n.name: n for n in ep.graph.nodes}
    if name not in nodes:
        return None
    needed, stack = set(), [nodes[name]]
    while stack:
        n = stack.pop()
        if n not in needed:
            needed.add(n)
            stack.extend(n.all_input_nodes if not _shape_only(n) else ())
    consts, env = _consts(ep), {}
    try:
        for n in ep.graph.nodes:
            if n not in needed:
                continue
            if _shape_only(n):  # (its input's shape, from the node's own value)
                val = n.meta.get("val")
                shape = tuple(val.shape) if isinstance(val, torch.Tensor) else None
                if shape is None:
                    return None
                x = torch.zeros(shape)
                rest = fx.map_arg(n.args[1:], env.__getitem__)
                env[n] = n.target(x, *rest, **fx.map_arg(n.kwargs, env.__getitem__))
            elif n.op in ("placeholder", "get_attr"):
                env[n] = consts.tensor(n)
                if env[n] is None:  # a user input: not a constant
                    return None
            elif n.op == "call_function":
                env[n] = n.target(*fx.map_arg(n.args, env.__getitem__), **fx.map_arg(n.kwargs, env.__getitem__))
            else:
                return None
    except Exception:  # an op that cannot run here: no anchor
        return None
    out = env[nodes[name]]
    return out.detach().double().numpy() if isinstance(out, torch.Tensor) and out.dtype.is_floating_point else None


def _shape_only(n: fx.Node) -> bool:
    """A ``full_like`` / ``zeros_like`` / ``ones_like``: its value depends on its input's shape only."""
    return n.op == "call_function" and base_name(target_name(n)) in ("full_like", "zeros_like", "ones_like")
