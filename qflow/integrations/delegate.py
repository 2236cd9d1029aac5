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

    @property
    def produced_dtype(self) -> str:
        return self.backend_dtype or self.dtype


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


def boundary_outputs(lowered: Any) -> list[BoundaryOutput]:
    """What each output of a lowered partition produces."""
    from qflow.integrations.fx import _Consts, dtype_name, qdq_domain, target_name
    from qflow.ops import OpClass, classify

    ep = lowered.original_module
    consts = _Consts(ep.graph_module, ep)
    outs = ep.graph.output_node().args[0]
    backend = _tosa_output_dtypes(bytes(lowered.processed_bytes)) if lowered.backend_id == "TOSABackend" else None
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
        result.append(BoundaryOutput(i, o.name, dom, real, dtype, bd))
    return result


def byte_factor(declared: str, produced: str) -> float:
    return ITEMSIZE.get(declared, 1) / ITEMSIZE.get(produced, 1)
