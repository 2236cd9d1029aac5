"""The torch side of the XNNPACK checks: a lowered delegate's (`LoweredBackendModule`) payload
weights, with the named data the lowering wrote beside it, checked against its partition's program
(`weights`); and what a `.pte`'s reference program declares (`reference.Reference`)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch
import torch.fx as fx

from qflow.graph import DomainGraph
from qflow.ir.fx_nodes import Consts, target_name
from qflow.ops import base_name
from qflow.targets.xnnpack import TARGET, weights
from qflow.targets.xnnpack import payload as xnn
from qflow.targets.xnnpack.reference import Reference


def add_artifact_evidence(
    dg: DomainGraph, gm: fx.GraphModule, call: fx.Node, lowered: Any, prefix: str, reference: Any = None
) -> None:
    """A lowered XNNPACK delegate's quantized weights, as its payload and named data hold them,
    checked against its partition's program (`weights`)."""
    g = xnn.read_payload(bytes(lowered.processed_bytes))
    store = getattr(lowered, "named_data_store_output", None)

    def data(key: str) -> bytes | None:
        tables = [getattr(store, "pte_data", {}), *getattr(store, "external_data", {}).values()]
        entry = next((t[key] for t in tables if key in t), None)
        return bytes(store.buffers[entry.buffer_index]) if entry is not None else None  # type: ignore[union-attr]

    declared = {h: (f"{prefix}/{name}", w) for h, (name, w) in program_weights(lowered.original_module).items()}
    weights.check(dg, g, declared, data)


#: Weighted ops and the argument that is their weight.
_WEIGHT_ARG = {"linear": 1, "convolution": 1, "conv2d": 1, "addmm": 2, "mm": 1}
#: Those whose weight is [out, in, ...] as `weights.LAYOUT` expects (an mm's may be transposed).
_CODES_IN_ORDER = frozenset({"linear", "convolution", "conv2d"})


def read_reference(ep: Any) -> Reference:
    """What the program a .pte was lowered from (and its delegates' partitions, when it is itself a
    lowered program) declares: every quantized weight, and the nodes asking for a variant XNNPACK ignores."""
    programs = [ep, *(m.original_module for _, m in ep.graph_module.named_children() if hasattr(m, "original_module"))]
    asked: dict[str, list[str]] = {}
    for p in programs:
        for node in p.graph.nodes:
            op = base_name(target_name(node)) if node.op == "call_function" else ""
            v = TARGET.ignored_variants.get(op)
            if v is not None and node.kwargs.get(v.argument) == v.value:
                asked.setdefault(op, []).append(node.name)
    per_tensor = tuple(
        node.name
        for p in programs
        for node in p.graph.nodes
        if node.op == "call_function"
        and base_name(target_name(node)) == "quantize_per_tensor"
        and len(node.args) > 1
        and isinstance(node.args[1], fx.Node)  # (a run-time scale)
    )
    return Reference(
        tuple((node.name, w) for p in programs for node, w in _weighted(p)),
        tuple((op, tuple(names)) for op, names in asked.items()),
        per_tensor,
    )


def program_weights(ep: Any) -> dict[int, tuple[str, weights.Weight]]:
    """Per debug handle, the weighted node whose weight a dequantize of a constant feeds directly,
    and that weight's quantization (torchao affine, PT2E per tensor / per channel / per group)."""
    out = {}
    for node, w in _weighted(ep):
        if isinstance(handle := node.meta.get("debug_handle"), int):
            out[handle] = (node.name, w)
    return out


def _weighted(ep: Any) -> list[tuple[fx.Node, weights.Weight]]:
    consts = Consts(ep.graph_module, ep)
    out = []
    for node in ep.graph.nodes:
        op = base_name(target_name(node)) if node.op == "call_function" else ""
        arg = _WEIGHT_ARG.get(op)
        if arg is None or len(node.args) <= arg:
            continue
        dq = node.args[arg]
        if not isinstance(dq, fx.Node) or dq.op != "call_function" or not isinstance(dq.args[0], fx.Node):
            continue
        codes = _constant(dq.args[0], consts)
        w = _declared(base_name(target_name(dq)), dq, codes, consts) if codes is not None else None
        if w is not None:
            out.append((node, w if op in _CODES_IN_ORDER else replace(w, codes=None)))
    return out


def _constant(node: fx.Node, consts: Consts) -> torch.Tensor | None:
    """A constant tensor, or an inner tensor of a constant tensor subclass (a torchao weight in a
    program exported before `to_edge`: ``export.access_subclass_inner_tensor(weight, "qdata")``)."""
    if node.op == "call_function" and base_name(target_name(node)) == "access_subclass_inner_tensor":
        outer = consts.tensor(node.args[0]) if isinstance(node.args[0], fx.Node) else None
        inner = getattr(outer, str(node.args[1]), None) if outer is not None else None
        return inner if isinstance(inner, torch.Tensor) else None
    return consts.tensor(node)


def _declared(kind: str, dq: fx.Node, codes: torch.Tensor, consts: Consts) -> weights.Weight | None:
    def tensor(a: Any) -> torch.Tensor | None:
        if isinstance(a, fx.Node):
            return _constant(a, consts)
        return None if a is None else torch.tensor(a)

    args, numel = dq.args, codes.numel()
    if kind == "dequantize_affine":
        scale, zp = tensor(args[2]), tensor(args[3]) if len(args) > 3 else None
        block = [int(b) for b in args[1]]
        group = numel // scale.numel() if scale is not None and scale.numel() else 0
        if group != numel and (not block or block[0] != 1 or math.prod(block) != group):
            return None  # blocks that span output channels: not a layout XNNPACK reads
    elif kind == "dequantize_per_channel_group" and len(args) > 6:
        scale, zp, group = tensor(args[1]), tensor(args[2]), int(args[6])
    elif kind == "dequantize_per_channel":
        scale, zp = tensor(args[1]), tensor(args[2])
        group = numel // scale.numel() if scale is not None and scale.numel() else 0
    elif kind == "dequantize_per_tensor":
        scale, zp, group = tensor(args[1]), tensor(args[2]), numel
    else:
        return None
    if scale is None:
        return None
    zeros = zp.flatten().tolist() if zp is not None else [0] * scale.numel()
    return weights.Weight(
        tuple(codes.shape),
        tuple(float(s) for s in scale.flatten().tolist()),
        tuple(int(z) for z in zeros),
        group,
        codes.detach().to(torch.int8).contiguous().numpy().tobytes() if codes.dtype in _CODE_DTYPES else None,
    )


_CODE_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32)
