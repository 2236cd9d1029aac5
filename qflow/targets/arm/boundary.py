"""What an Arm delegate really reads and writes at its boundary.

The partition program says what went *into* the backend; the Arm backend's
own fold pass and its artifact say what comes out. Evidence, strongest
first: the TOSA flatbuffer's IO tensor types (TOSA, VGF), Vela's element
sizes (Ethos-U), the partition after the real ``FoldAndAnnotateQParamsPass``
(run on a copy: a dequantize folded into a boundary view makes it integer).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from qflow.domain import Domain
from qflow.ir.delegate import ITEMSIZE, BoundaryInput, BoundaryOutput, placeholder_dtypes
from qflow.ir.fx_nodes import dtype_name, qdq_domain, quant_args_domain, target_name
from qflow.ops import OpClass, classify
from qflow.targets.arm import tosa_io
from qflow.targets.arm.vela import ELEM_DTYPE, io_elem_sizes

#: Backends whose delegate the TOSA artifact check reads (VGF wraps the same graph).
TOSA_ARTIFACT = ("TOSABackend", "VgfBackend")


def _fold(ep: Any) -> Any:
    """The partition after the real Arm fold pass (on a copy), or None."""
    try:
        from qflow.targets.arm.pipeline import fold_qparams

        return fold_qparams(ep)
    except Exception:  # not foldable here: fall back to the partition's own view
        return None


def _folded_output(o: fx.Node) -> tuple[str, Domain | None]:
    """A folded node's output dtype and domain from its qparams, following
    pass-through ops back to the op that owns them (after the fold, meta['val']
    is whatever the fake kernel says, e.g. int32 for a linear)."""
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


def refine_boundaries(lowered: Any, inputs: list[BoundaryInput], outputs: list[BoundaryOutput]) -> None:
    """Add what the Arm backend really reads and writes (the fold runs once for both sides)."""
    blob = bytes(lowered.processed_bytes)
    io = tosa_io.io_names(blob) if lowered.backend_id == "TOSABackend" else None
    folded = _fold(lowered.original_module)
    post = placeholder_dtypes(folded) if folded is not None else {}
    for b in inputs:
        if io is not None:
            b.backend_dtype, b.artifact = dict(io[0]).get(b.placeholder), "TOSA flatbuffer"
        b.folded_dtype = post.get(b.placeholder)
    folded_outs = [_folded_output(o) for o in folded.graph.output_node().args[0]] if folded is not None else []
    for b in outputs:
        if io is not None and b.index < len(io[1]):
            b.backend_dtype, b.artifact = io[1][b.index][1], "TOSA flatbuffer"
        if b.index < len(folded_outs):
            fd, fdom = folded_outs[b.index]
            b.folded_dtype = fd
            if fd != b.dtype and not fd.startswith("float") and fdom is not None:
                b.domain, b.real = fdom, False  # the codes the device really writes
    if lowered.backend_id == "EthosUBackend":
        _vela_evidence(blob, inputs, outputs)


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


def add_artifact_evidence(
    dg: Any, gm: fx.GraphModule, call: fx.Node, lowered: Any, prefix: str, reference: Any = None
) -> None:
    """The "TOSA artifact" evidence: the delegate's flatbuffer checked by TOSA
    semantics against the domains the program declares (TOSA / VGF only)."""
    if getattr(lowered, "backend_id", None) not in TOSA_ARTIFACT:
        return
    from qflow.targets.arm import tosa_artifact

    within = f"{prefix}/"
    dropped, scale_dropped = (
        {  # (the partition's own drops, weighed by its obligations: the artifact says each once)
            ob.node.removeprefix(within): ob.expected
            for ob in dg.obligations
            if tosa_artifact.weighs_drop(ob, kind) and ob.node.startswith(within) and ob.value == ob.node
            and ob.expected is not None
        }
        for kind in (tosa_artifact.DROPPED, tosa_artifact.SCALE_DROPPED)
    )  # fmt: skip
    merged_users = {  # (a duplicate merged into another in another domain: its obligation weighs it)
        ob.node.removeprefix(within): ob.other.removeprefix(within)
        for ob in dg.obligations
        if ob.finding_kind == tosa_artifact.MERGED and ob.node.startswith(within) and ob.other
    }
    checks = tosa_artifact.check_delegate(gm, call, lowered, reference, dropped, scale_dropped, merged_users)
    if checks is None:
        dg.notes.append(f"{call.name}: TOSA artifact not checked (no TOSA flatbuffer, or a float partition)")
        return
    tosa_artifact.add_evidence(dg, prefix, call.name, checks)
