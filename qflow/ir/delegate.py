"""Delegate boundaries: `executorch_call_delegate` inputs and outputs are dtype edges.

What a partition produces and expects is first read from its own program,
as handed to the backend: an output quantize names the domain written, a
user-input placeholder the dtype read. What the parent graph expects is the
`getitem`'s ``meta["val"]`` — copied from the partition's edge outputs
*before* the backend ran (exir/backend/backend_api.py), which is how the two
can disagree (seed 002).

The backend then says what it really emitted: each delegate's target (by its
backend id) may refine the boundary from its own artifact and passes (the Arm
target reads the TOSA flatbuffer, Vela's element sizes and the real fold
pass) and add artifact evidence. This module knows no backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from qflow.domain import DTYPE_RANGE, FLOAT, Domain
from qflow.ir.fx_nodes import Consts, dtype_name, qdq_domain, target_name
from qflow.ops import OpClass, classify

ITEMSIZE = {"bool": 1, "int4": 1, "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2}
ITEMSIZE |= {"bfloat16": 2, "float32": 4, "float64": 8}


def _evidence(backend_dtype: str | None, folded_dtype: str | None, artifact: str) -> str:
    """Where a boundary dtype was read, the most authoritative source first."""
    if backend_dtype:
        return f"the backend artifact ({artifact})"
    if folded_dtype:
        return "the partition after the backend's own fold pass"
    return "the partition program"


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
    artifact: str = ""  # where backend_dtype was read
    written: bool = True  # False: the backend artifact writes nothing to this output

    @property
    def produced_dtype(self) -> str:
        return self.backend_dtype or self.folded_dtype or self.dtype

    @property
    def evidence(self) -> str:
        return _evidence(self.backend_dtype, self.folded_dtype, self.artifact)


@dataclass
class BoundaryInput:
    """One user input of a partition, as the partition expects it."""

    index: int
    placeholder: str
    dtype: str  # the partition program's placeholder dtype (pre-backend)
    backend_dtype: str | None = None  # the backend artifact's input tensor type, when readable
    folded_dtype: str | None = None  # the placeholder after the backend's own fold pass
    artifact: str = ""  # where backend_dtype was read

    @property
    def expected_dtype(self) -> str:
        return self.backend_dtype or self.folded_dtype or self.dtype

    @property
    def evidence(self) -> str:
        return _evidence(self.backend_dtype, self.folded_dtype, self.artifact)


def compatible(a: str, b: str) -> bool:
    """Same bytes at the boundary (int8/uint8: TOSA carries uint8 IO as INT8 with unsigned rescales)."""
    return a == b or {a, b} <= {"int8", "uint8"}


def lowered_module(gm: fx.GraphModule, call: fx.Node) -> Any:
    ref = call.args[0] if call.args else None
    if not isinstance(ref, fx.Node) or ref.op != "get_attr":
        return None
    return getattr(gm, str(ref.target), None)


def _hook(lowered: Any, name: str) -> Callable[..., Any] | None:
    """Hook `name` of the target that owns `lowered`'s backend id, if any."""
    from qflow import targets

    t = targets.for_backend(str(getattr(lowered, "backend_id", "")))
    return None if t is None else t.hook(name)


def placeholder_dtypes(ep: Any) -> dict[str, str]:

    out = {}
    for n in ep.graph.nodes:
        val = n.meta.get("val") if n.op == "placeholder" else None
        if isinstance(val, torch.Tensor):
            out[n.name] = dtype_name(val.dtype)
    return out


def boundaries(lowered: Any) -> tuple[list[BoundaryInput], list[BoundaryOutput]]:
    """What each user input of a lowered partition expects and each output
    produces: the partition program's view, refined by its backend's target."""
    ep = lowered.original_module
    pre = placeholder_dtypes(ep)
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    inputs = [BoundaryInput(i, name, pre.get(name, "?")) for i, name in enumerate(ep.graph_signature.user_inputs)]
    for b in inputs:  # a symbolic size placeholder has no dtype to compare
        val = nodes[b.placeholder].meta.get("val") if b.placeholder in nodes else None
        if val is not None and not isinstance(val, torch.Tensor):
            b.dtype = "symbolic"
    outputs = boundary_outputs(lowered)
    refine = _hook(lowered, "refine_boundaries")
    if refine is not None:
        refine(lowered, inputs, outputs)
    return inputs, outputs


def boundary_outputs(lowered: Any) -> list[BoundaryOutput]:
    """What each output of a lowered partition produces, by its own program."""
    ep = lowered.original_module
    consts = Consts(ep.graph_module, ep)
    result = []
    for i, o in enumerate(ep.graph.output_node().args[0]):
        val = o.meta.get("val")
        dtype = dtype_name(val.dtype) if isinstance(val, torch.Tensor) else "?"
        cls = classify(target_name(o)) if o.op == "call_function" else None
        if cls is OpClass.QUANTIZE:
            dom, real = qdq_domain(o, consts), False
        elif isinstance(val, torch.Tensor) and val.dtype.is_floating_point:
            dom, real = FLOAT, True
        elif cls is OpClass.CONSTANT and dtype in DTYPE_RANGE:  # (a factory's integers: eye, ones, full)
            dom, real = Domain.plain(dtype), True
        else:
            dom, real = None, False
        result.append(BoundaryOutput(i, o.name, dom, real, dtype))
    return result


def add_artifact_evidence(
    dg: Any, gm: fx.GraphModule, call: fx.Node, lowered: Any, prefix: str, reference: Any = None
) -> None:
    """The backend's own check of what it emitted, when its target has one (`reference`: what
    the program it was lowered from declares, as the backend's `read_reference` read it)."""
    add = _hook(lowered, "add_artifact_evidence")
    if add is not None:
        add(dg, gm, call, lowered, prefix, reference)


def byte_factor(declared: str, produced: str) -> float:
    return ITEMSIZE.get(declared, 1) / ITEMSIZE.get(produced, 1)
