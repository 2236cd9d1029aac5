"""Delegate boundaries: `executorch_call_delegate` outputs are dtype edges.

What a partition really produces is read from the lowered module itself: the
partition program's output nodes (a quantize → that domain) and, for TOSA
partitions, the output tensor types in the serialized flatbuffer, which is
what the device writes. What the parent graph expects is the `getitem`'s
``meta["val"]`` — copied from the partition's edge outputs *before* the
backend ran (exir/backend/backend_api.py), which is how the two can disagree
(seed 002).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from qflow.domain import FLOAT, Domain

_TOSA_DTYPES = {1: "bool", 2: "int4", 3: "int8", 4: "int16", 5: "int32", 7: "float32", 8: "float16", 9: "bfloat16"}
ITEMSIZE = {"bool": 1, "int4": 1, "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2}
ITEMSIZE |= {"bfloat16": 2, "float32": 4, "float64": 8}


@dataclass
class BoundaryOutput:
    """One output of a partition, as the partition itself produces it."""

    index: int
    partition_node: str
    domain: Domain | None  # None: integer with no recorded domain
    real: bool
    dtype: str  # the partition program's dtype (pre-backend)
    backend_dtype: str | None = None  # what the backend artifact writes, when readable
    folded_dtype: str | None = None  # what the partition outputs after the backend's own fold pass

    @property
    def produced_dtype(self) -> str:
        return self.backend_dtype or self.folded_dtype or self.dtype

    @property
    def evidence(self) -> str:
        if self.backend_dtype:
            return "the backend artifact (TOSA flatbuffer)"
        if self.folded_dtype:
            return "the partition after the backend's FoldAndAnnotateQParamsPass"
        return "the partition program"


def lowered_module(gm: fx.GraphModule, call: fx.Node) -> Any:
    ref = call.args[0] if call.args else None
    if not isinstance(ref, fx.Node) or ref.op != "get_attr":
        return None
    return getattr(gm, str(ref.target), None)


def _tosa_output_dtypes(processed: bytes) -> list[str] | None:
    try:
        from tosa.TosaGraph import TosaGraph

        blk = TosaGraph.GetRootAs(processed, 0).Regions(0).Blocks(0)
        types = {blk.Tensors(i).Name().decode(): blk.Tensors(i).Type() for i in range(blk.TensorsLength())}
        return [_TOSA_DTYPES.get(types[blk.Outputs(i).decode()], "?") for i in range(blk.OutputsLength())]
    except Exception:  # not a TOSA flatbuffer (a Vela blob, another backend)
        return None


_ARM_BACKENDS = {"TOSABackend", "EthosUBackend", "VgfBackend"}


def _arm_folded_outputs(ep: Any) -> list[tuple[str, Domain | None]] | None:
    """(dtype, domain) of each partition output after the real Arm fold pass,
    run on a copy: a dequantize folded into a boundary view makes it integer."""
    try:
        from qflow.integrations.arm import fold_qparams
        from qflow.integrations.fx import dtype_name, quant_args_domain

        folded = fold_qparams(ep)
    except Exception:  # not foldable here: fall back to the partition's own view
        return None
    return [_folded_output(o, dtype_name, quant_args_domain) for o in folded.graph.output_node().args[0]]


def _folded_output(o: fx.Node, dtype_name: Any, quant_args_domain: Any) -> tuple[str, Domain | None]:
    """A folded node's output dtype and domain from its qparams, following
    pass-through ops back to the op that owns them (after the fold, meta['val']
    is whatever the fake kernel says, e.g. int32 for a linear)."""
    from qflow.integrations.fx import qdq_domain, target_name
    from qflow.ops import OpClass, classify

    node = o
    for _ in range(64):
        qp = node.meta.get("output_qparams") or node.meta.get("input_qparams") or {}
        if qp:
            dom = quant_args_domain(qp[min(qp)], node)
            return dom.dtype, dom
        cls = classify(target_name(node)) if node.op == "call_function" else None
        if cls is OpClass.QUANTIZE:
            dom = qdq_domain(node, _NoConsts())
            return dom.dtype, dom
        if cls is OpClass.DEQUANTIZE:
            return "float32", None
        if cls is not OpClass.PASSTHROUGH or not node.args or not isinstance(node.args[0], fx.Node):
            break
        node = node.args[0]
    val = o.meta.get("val")
    return (dtype_name(val.dtype) if isinstance(val, torch.Tensor) else "?"), None


class _NoConsts:
    """Per-tensor Q args are literals; nothing to resolve."""

    def value(self, x: Any, where: fx.Node, what: str) -> Any:
        return x


def boundary_outputs(lowered: Any) -> list[BoundaryOutput]:
    """What each output of a lowered partition produces."""
    from qflow.integrations.fx import _Consts, dtype_name, qdq_domain, target_name
    from qflow.ops import OpClass, classify

    ep = lowered.original_module
    consts = _Consts(ep.graph_module, ep)
    outs = ep.graph.output_node().args[0]
    backend = _tosa_output_dtypes(bytes(lowered.processed_bytes)) if lowered.backend_id == "TOSABackend" else None
    folded = _arm_folded_outputs(ep) if lowered.backend_id in _ARM_BACKENDS else None
    result = []
    for i, o in enumerate(outs):
        val = o.meta.get("val")
        dtype = dtype_name(val.dtype) if isinstance(val, torch.Tensor) else "?"
        cls = classify(target_name(o)) if o.op == "call_function" else None
        if cls is OpClass.QUANTIZE:
            dom, real = qdq_domain(o, consts), False
        elif isinstance(val, torch.Tensor) and val.dtype.is_floating_point:
            dom, real = FLOAT, True
        else:
            dom, real = None, False
        bd = backend[i] if backend is not None and i < len(backend) else None
        fd = None
        if folded is not None and i < len(folded):
            fd, fdom = folded[i]
            if fd != dtype and not fd.startswith("float") and fdom is not None:
                dom, real = fdom, False  # the codes the device really writes
        result.append(BoundaryOutput(i, o.name, dom, real, dtype, bd, fd))
    return result


def byte_factor(declared: str, produced: str) -> float:
    return ITEMSIZE.get(declared, 1) / ITEMSIZE.get(produced, 1)
