"""Delegate boundaries: `executorch_call_delegate` inputs and outputs are dtype edges.

What a partition really produces is read from the lowered module itself: the
partition program's output nodes (a quantize → that domain) and, for TOSA
partitions, the output tensor types in the serialized flatbuffer, which is
what the device writes. What the parent graph expects is the `getitem`'s
``meta["val"]`` — copied from the partition's edge outputs *before* the
backend ran (exir/backend/backend_api.py), which is how the two can disagree
(seed 002).

Inputs the other way round: what the partition expects is its user-input
placeholders' dtype (and the domain its first dequantize reads), the
flatbuffer's input tensor types, and for Arm backends the placeholders after
the real fold pass; what the parent feeds is the call argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from qflow.domain import FLOAT, Domain
from qflow.targets.arm.vela import ELEM_DTYPE, io_elem_sizes

_TOSA_DTYPES = {1: "bool", 2: "int4", 3: "int8", 4: "int16", 5: "int32", 7: "float32", 8: "float16", 9: "bfloat16"}
ITEMSIZE = {"bool": 1, "int4": 1, "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2}
ITEMSIZE |= {"bfloat16": 2, "float32": 4, "float64": 8}


def _evidence(backend_dtype: str | None, folded_dtype: str | None, artifact: str) -> str:
    """Where a boundary dtype was read, the most authoritative source first."""
    if backend_dtype:
        return f"the backend artifact ({artifact})"
    if folded_dtype:
        return "the partition after the backend's FoldAndAnnotateQParamsPass"
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
    artifact: str = "TOSA flatbuffer"  # where backend_dtype was read

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
    artifact: str = "TOSA flatbuffer"  # where backend_dtype was read

    @property
    def expected_dtype(self) -> str:
        return self.backend_dtype or self.folded_dtype or self.dtype

    @property
    def evidence(self) -> str:
        return _evidence(self.backend_dtype, self.folded_dtype, self.artifact)


def compatible(a: str, b: str) -> bool:
    """Same bytes at the boundary: TOSA carries uint8 IO as INT8 with unsigned rescales."""
    return a == b or {a, b} <= {"int8", "uint8"}


def lowered_module(gm: fx.GraphModule, call: fx.Node) -> Any:
    ref = call.args[0] if call.args else None
    if not isinstance(ref, fx.Node) or ref.op != "get_attr":
        return None
    return getattr(gm, str(ref.target), None)


def _tosa_io_dtypes(processed: bytes) -> tuple[dict[str, str], list[str]] | None:
    """(input name → dtype, output dtypes in order) of a TOSA flatbuffer."""
    try:
        from tosa.TosaGraph import TosaGraph

        blk = TosaGraph.GetRootAs(processed, 0).Regions(0).Blocks(0)
        types = {blk.Tensors(i).Name().decode(): blk.Tensors(i).Type() for i in range(blk.TensorsLength())}
        names = [blk.Inputs(i).decode() for i in range(blk.InputsLength())]
        ins = {n: _TOSA_DTYPES.get(types[n], "?") for n in names}
        outs = [_TOSA_DTYPES.get(types[blk.Outputs(i).decode()], "?") for i in range(blk.OutputsLength())]
        return ins, outs
    except Exception:  # not a TOSA flatbuffer (a Vela blob, another backend)
        return None


def _tosa_output_dtypes(processed: bytes) -> list[str] | None:
    io = _tosa_io_dtypes(processed)
    return None if io is None else io[1]


_ARM_BACKENDS = {"TOSABackend", "EthosUBackend", "VgfBackend"}


def _arm_fold(ep: Any) -> Any:
    """The partition after the real Arm fold pass (on a copy), or None."""
    try:
        from qflow.integrations.arm import fold_qparams

        return fold_qparams(ep)
    except Exception:  # not foldable here: fall back to the partition's own view
        return None


_UNSET: Any = object()


def _arm_folded_outputs(ep: Any, folded: Any = _UNSET) -> list[tuple[str, Domain | None]] | None:
    """(dtype, domain) of each partition output after the real Arm fold pass,
    run on a copy: a dequantize folded into a boundary view makes it integer."""
    from qflow.integrations.fx import dtype_name, quant_args_domain

    folded = _arm_fold(ep) if folded is _UNSET else folded
    if folded is None:
        return None
    return [_folded_output(o, dtype_name, quant_args_domain) for o in folded.graph.output_node().args[0]]


def _placeholder_dtypes(ep: Any) -> dict[str, str]:
    from qflow.integrations.fx import dtype_name

    out = {}
    for n in ep.graph.nodes:
        val = n.meta.get("val") if n.op == "placeholder" else None
        if isinstance(val, torch.Tensor):
            out[n.name] = dtype_name(val.dtype)
    return out


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


def boundaries(lowered: Any) -> tuple[list[BoundaryInput], list[BoundaryOutput]]:
    """What each user input of a lowered partition expects and each output
    produces (the Arm fold runs once for both)."""
    ep = lowered.original_module
    io = _tosa_io_dtypes(bytes(lowered.processed_bytes)) if lowered.backend_id == "TOSABackend" else None
    folded = _arm_fold(ep) if lowered.backend_id in _ARM_BACKENDS else None
    pre = _placeholder_dtypes(ep)
    post = _placeholder_dtypes(folded) if folded is not None else {}
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    inputs = [
        BoundaryInput(i, name, pre.get(name, "?"), io[0].get(name) if io else None, post.get(name))
        for i, name in enumerate(ep.graph_signature.user_inputs)
    ]
    for b in inputs:  # a symbolic size placeholder has no dtype to compare
        val = nodes[b.placeholder].meta.get("val") if b.placeholder in nodes else None
        if val is not None and not isinstance(val, torch.Tensor):
            b.dtype = "symbolic"
    outputs = boundary_outputs(lowered, io[1] if io else None, folded)
    if lowered.backend_id == "EthosUBackend":
        _vela_evidence(bytes(lowered.processed_bytes), inputs, outputs)
    return inputs, outputs


def _vela_evidence(blob: bytes, inputs: list[BoundaryInput], outputs: list[BoundaryOutput]) -> None:
    """Vela's own element sizes (what the NPU reads and writes) as the backend
    dtype: the dtype already known when its size agrees, else the one the size
    names (1 → int8, 2 → int16)."""
    sizes = io_elem_sizes(blob)
    if sizes is None:
        return
    for side, items in (("inputs", inputs), ("outputs", outputs)):
        if len(sizes[side]) != len(items):
            continue  # no positional match: leave it to the fold
        for b, n in zip(items, sizes[side], strict=True):
            seen = b.expected_dtype if isinstance(b, BoundaryInput) else b.produced_dtype
            dt = seen if ITEMSIZE.get(seen) == n else ELEM_DTYPE.get(n)  # Vela knows bytes, not types
            if dt is not None:
                b.backend_dtype, b.artifact = dt, f"Vela command stream: element size {n}"


def boundary_outputs(lowered: Any, backend: list[str] | None = None, folded_ep: Any = _UNSET) -> list[BoundaryOutput]:
    """What each output of a lowered partition produces."""
    from qflow.integrations.fx import _Consts, dtype_name, qdq_domain, target_name
    from qflow.ops import OpClass, classify

    ep = lowered.original_module
    consts = _Consts(ep.graph_module, ep)
    outs = ep.graph.output_node().args[0]
    if backend is None and lowered.backend_id == "TOSABackend":
        backend = _tosa_output_dtypes(bytes(lowered.processed_bytes))
    folded = _arm_folded_outputs(ep, folded_ep) if lowered.backend_id in _ARM_BACKENDS else None
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


def add_artifact_evidence(dg: Any, gm: fx.GraphModule, call: fx.Node, lowered: Any, prefix: str) -> None:
    """The "TOSA artifact" evidence: the delegate's flatbuffer checked by TOSA
    semantics against the domains the program declares (Arm TOSA / VGF only)."""
    if getattr(lowered, "backend_id", None) not in ("TOSABackend", "VgfBackend"):
        return
    from qflow.targets.arm import tosa_artifact

    checks = tosa_artifact.check_delegate(gm, call, lowered, integer_io_only=True)
    if checks is None:  # INT+FP: the boundary Q/DQ became float arithmetic qflow does not read
        dg.notes.append(
            f"{call.name}: TOSA artifact not checked by default (float IO or no TOSA flatbuffer; "
            "tosa_artifact.analyze_artifact reads it)"
        )
        return
    tosa_artifact.add_evidence(dg, prefix, call.name, checks)


def byte_factor(declared: str, produced: str) -> float:
    return ITEMSIZE.get(declared, 1) / ITEMSIZE.get(produced, 1)
