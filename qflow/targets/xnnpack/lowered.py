"""A lowered XNNPACK delegate (`LoweredBackendModule`): its payload's quantized weights, with the
named data the lowering wrote beside it, checked against its partition's program (`weights`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.fx as fx

from qflow.graph import DomainGraph
from qflow.ir.fx_nodes import Consts, target_name
from qflow.ops import base_name
from qflow.targets.xnnpack import payload as xnn
from qflow.targets.xnnpack import weights


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
_WEIGHT_ARG = {"linear": 1, "convolution": 1, "addmm": 2, "mm": 1}


def program_weights(ep: Any) -> dict[int, tuple[str, weights.Weight]]:
    """Per debug handle, the weighted node whose weight a dequantize of a constant feeds directly,
    and that weight's quantization (torchao affine, PT2E per tensor / per channel / per group)."""
    consts = Consts(ep.graph_module, ep)
    out: dict[int, tuple[str, weights.Weight]] = {}
    for node in ep.graph.nodes:
        op = base_name(target_name(node)) if node.op == "call_function" else ""
        arg = _WEIGHT_ARG.get(op)
        handle = node.meta.get("debug_handle")
        if arg is None or not isinstance(handle, int) or len(node.args) <= arg:
            continue
        dq = node.args[arg]
        if not isinstance(dq, fx.Node) or dq.op != "call_function" or not isinstance(dq.args[0], fx.Node):
            continue
        codes = consts.tensor(dq.args[0])
        w = _declared(base_name(target_name(dq)), dq, codes, consts) if codes is not None else None
        if w is not None:
            out[handle] = (node.name, w if op == "linear" else replace(w, codes=None))  # (other layouts)
    return out


def _declared(kind: str, dq: fx.Node, codes: torch.Tensor, consts: Consts) -> weights.Weight | None:
    def tensor(a: Any) -> torch.Tensor | None:
        if isinstance(a, fx.Node):
            return consts.tensor(a)
        return None if a is None else torch.tensor(a)

    args, numel = dq.args, codes.numel()
    if kind == "dequantize_affine":
        scale, zp = tensor(args[2]), tensor(args[3]) if len(args) > 3 else None
        block = list(args[1])
        group = numel // scale.numel() if scale is not None and scale.numel() else 0
        if block and block[-1] != group and max(block) != group:
            return None  # blocks along another dimension than each row's inputs
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
        tuple(int(c) for c in codes.flatten().tolist()),
    )
