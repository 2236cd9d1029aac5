"""The XNNPACK target's reader hooks (see `Target.backend_module`). Torch-free: the lowered
program's hooks are imported when one is read (`qflow.targets.xnnpack.lowered`)."""

from __future__ import annotations

from typing import Any

from qflow.ir.payload_io import PayloadIO
from qflow.ir.pte_program import Delegate
from qflow.targets.xnnpack import TARGET, reference
from qflow.targets.xnnpack import payload as xnn


def read_payload(d: Delegate, fed: list[str], declared: list[str]) -> PayloadIO:
    """An XNNPACK delegate's payload in a .pte: its IO tensors' dtypes and quantization parameters,
    and the obligations of the payload's own graph (`payload.domain_graph`)."""
    g = xnn.read_payload(d.payload)
    return PayloadIO(
        [(g.values[i].dtype, g.values[i].domain) for i in g.input_ids],
        [(g.values[i].dtype, g.values[i].domain) for i in g.output_ids],
        "XNNPACK flatbuffer",
        xnn.domain_graph(g),
        "the XNNPACK tensor has no quantization parameters",
        input_args=[g.values[i].external_id for i in g.input_ids],
        output_args=[g.values[i].external_id - len(fed) for i in g.output_ids],
        float_weights=tuple(
            g.values[n.inputs[1]].dims
            for n in g.nodes
            if n.type == "XNNFullyConnected"
            and len(n.inputs) > 1
            and g.values[n.inputs[1]].constant
            and g.values[n.inputs[1]].dtype == "float32"
        ),  # fmt: skip
    )


def refine_boundaries(lowered: Any, inputs: list[Any], outputs: list[Any]) -> None:
    """What an XNNPACK delegate really reads and writes: its payload's external tensors, by external id
    (the runtime binds id k to the k-th call argument, inputs first, then outputs)."""
    g = xnn.read_payload(bytes(lowered.processed_bytes))
    read = {g.values[i].external_id: g.values[i] for i in g.input_ids}
    written = {g.values[i].external_id - len(inputs): g.values[i] for i in g.output_ids}
    for b in inputs:
        if (v := read.get(b.index)) is not None:
            b.backend_dtype, b.artifact = v.dtype, "XNNPACK flatbuffer"
    for b in outputs:
        b.artifact = "XNNPACK flatbuffer"
        if (v := written.get(b.index)) is not None:
            b.backend_dtype = v.dtype
        else:
            b.written = False


def add_artifact_evidence(dg: Any, gm: Any, call: Any, lowered: Any, prefix: str, reference: Any = None) -> None:
    """A lowered delegate's payload weights against its partition's program (`lowered.add_artifact_evidence`)."""
    from qflow.targets.xnnpack.lowered import add_artifact_evidence as add

    add(dg, gm, call, lowered, prefix, reference)


def read_reference(ep: Any) -> Any:
    """What the program a .pte was lowered from declares (`lowered.read_reference`)."""
    from qflow.targets.xnnpack.lowered import read_reference as read

    return read(ep)


def check_against_reference(dg: Any, d: Delegate, prefix: str, ref: Any, named_data: Any) -> None:
    """A payload in a .pte, with the named data the .pte carries, against its reference (`reference.check`)."""
    reference.check(dg, xnn.read_payload(d.payload), prefix, ref, named_data, TARGET.ignored_variants)
