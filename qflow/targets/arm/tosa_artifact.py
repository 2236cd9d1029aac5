"""Translation validation of the TOSA flatbuffer the Arm backend emits.

qflow's graph checks *predict* what some 150 Arm passes make of a program. This
module checks what they made: it reads a TOSA delegate's ``processed_bytes``
with the flatbuffer classes tosa-tools ships, gives every tensor an integer
domain by the TOSA 1.0 INT semantics of its producer, and checks that the
program realises the domains the PT2E program declares.

TOSA carries only integers, so scales come from anchors: the parent's quantize
arguments at the delegate inputs (the domain the parent quantizes into), the
partition program's dequantize nodes for constants (weights, biases, tables),
and the parent's dequantize arguments at the outputs (the domain the parent
reads the codes in). Between anchors each operator's integer parameters must
realise the declared ratio:

* ``RESCALE``: out scale = in scale · 2^shift / multiplier, per channel when
  ``per_channel``; an input zero point other than a wide (int32/int48)
  input's shifts the output codes by ratio × the difference, which must be a
  whole number of codes (it then moves the output's zero point: bilinear ``RESIZE`` writes
  n_y·n_x × the codes, zero point included, and the RESCALE after it reads them
  with input zero point 0);
* ``CONV2D`` / ``DEPTHWISE_CONV2D`` / ``TRANSPOSE_CONV2D`` / ``CONV3D`` /
  ``MATMUL``: input and weight zero points; an int32 accumulator of scale
  in scale × weight scale (per channel), zero point 0; the bias in that domain;
* ``ADD`` / ``SUB`` / ``MAXIMUM`` / ``MINIMUM`` / ``SELECT`` / comparisons:
  both inputs in one domain; ``MUL``: scale a·b·2^shift, zero points 0;
* ``AVG_POOL2D``, ``NEGATE``: zero points only, the scale is kept; ``ABS``:
  zero point 0;
* ``CLAMP``: bounds equal to an activation the PT2E program asked for, and
  every activation whose bounds cut into the code range has such a clamp;
* ``TABLE``: recomputed from the intended op and its declared domains (int16:
  513 entries as the Arm InsertTableOpsPass makes them, shifted right to fit
  16 bits; the int32 output is 128 × the interpolated entry);
* ``PAD``: the pad constant is the pad value quantized in the input's domain
  (the zero point for 0); ``CONCAT``, ``SCATTER`` (its values and input): one domain;
* ``COND_IF`` / ``WHILE_LOOP`` (TOSA-1.0+INT+cf): each region is walked with the domains its
  operands carry in; a COND_IF output must be in one domain whichever branch wrote it, and a
  loop variable must come back from the body in the domain it entered with;
* ``RESHAPE`` / ``TRANSPOSE`` / ``SLICE`` / ``TILE`` / ``GATHER`` / ``REVERSE``
  / ``MAX_POOL2D`` / ``REDUCE_MAX|MIN`` / ``IDENTITY`` / int→int ``CAST`` /
  nearest ``RESIZE``: codes copied (bilinear ``RESIZE`` scales by 1/(n_y·n_x)).

Scales compare equal up to the rounding of the integer parameters on the path,
or when they are a hair apart: a relative difference that moves no code by
more than one LSB over the 8/16-bit code range the values come from (the rule
the graph checks apply to zero-point-only ops).

An operator qflow cannot interpret makes what depends on it *unproven*, never
proved.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from qflow.analysis import analyze_graph
from qflow.domain import FLOAT
from qflow.graph import Definition, DefKind, DomainGraph, Obligation, ObligationKind, Value
from qflow.ir.delegate import lowered_module
from qflow.ir.fx_nodes import target_name
from qflow.ir.load import graph_module_of
from qflow.ops import OpClass, classify
from qflow.targets.arm import tosa_anchors
from qflow.targets.arm.tosa_anchors import Reference, check_delegate, constant_domains, link_constants, reference
from qflow.targets.arm.tosa_flatbuffer import read
from qflow.targets.arm.tosa_interpreter import DROPPED, MERGED, SCALE_DROPPED, Anchors, Check, describe, validate

# (the rooms this check is made of: reading, the reference facts, the interpreter; re-exported)
__all__ = ["KIND", "Reference", "add_evidence", "analyze_artifact", "check_delegate", "constant_domains"]
__all__ += [
    "Anchors",
    "DROPPED",
    "MERGED",
    "SCALE_DROPPED",
    "link_constants",
    "read",
    "reference",
    "validate",
    "weighs_drop",
]

KIND = "tosa-artifact-mismatch"
#: The target whose contract a TOSA payload is checked against.
TARGET_NAME = "arm-tosa"


def add_evidence(dg: Any, prefix: str, call_name: str, checks: Iterable[Check]) -> None:
    """One obligation per check, reported at ``<prefix>/tosa:<tensor>``;
    undecidable checks become unproven obligations (never proved). Those
    undecided only for want of the weights' scales are reported once, at the
    delegate call, as `reference-needed` (the remedy is the same for all). A
    failure breaks the program on arm-tosa only."""
    checks = list(checks)
    unanchored = sum(c.needs_reference for c in checks)
    for k, c in enumerate(checks):
        node = f"{prefix}/tosa#{c.index}:{c.tensor}"
        behind = dg.unreached.get(f"{prefix}/{c.node}")
        if behind is not None and not c.ok and not c.needs_reference:
            c = replace(c, ok=True, inform=False, off_by_code=None,
                        message=f"{c.message}; no output depends on it but through {behind}, which outputs one "
                        "value for every code it can read (masked-by-constant)")  # fmt: skip
        text = f"TOSA artifact of {call_name}: {c.where}: {c.message}"
        if node not in dg.g:
            dg.add_value(Value(node, f"tosa.{c.op}", OpClass.COMPUTE, Definition(DefKind.FREE, reason="TOSA artifact")))
        if c.graph_weighs and f"{prefix}/{c.node}" in dg.g:
            continue  # (the partition's own obligation weighs it: `rounded-twice`)
        if c.ok is None:
            blocker = f"{node}?{k}"
            if c.needs_reference:
                text = (
                    f"the TOSA payload of {call_name} keeps its weights as bare codes; {unanchored} of its checks "
                    f"need their scales, which only the program it was lowered from declares (first: {c.where})"
                )
            dg.add_value(
                Value(blocker, f"tosa.{c.op}", OpClass.UNKNOWN,
                      Definition(DefKind.FREE, blocking=True, reason=text,
                                 blocks_as="reference-needed" if c.needs_reference else c.kind))
            )  # fmt: skip
            dg.oblige(
                Obligation(ObligationKind.USE, node=call_name if c.needs_reference else node, value=blocker,
                           expected=c.expected or FLOAT, expected_real=False, arg=f"TOSA {c.op} #{c.index}",
                           finding_kind=c.kind or KIND, targets=(TARGET_NAME,),
                           severity="warning" if c.kind else None)
            )  # fmt: skip
            continue
        if c.kind in (DROPPED, SCALE_DROPPED, MERGED) and _weighed_in_partition(dg, f"{prefix}/{c.node}", c.kind):
            c = replace(c, ok=True, message=f"{c.message}, as in the partition, whose own obligation weighs it")
        op = f"{prefix}/{c.off_by_code.node}" if c.off_by_code is not None else node  # (read at its input)
        dg.oblige(
            Obligation(ObligationKind.STRUCTURAL, node=node, expected=c.expected, holds=c.ok,
                       value=op if op in dg.g else node, off_by_code=c.off_by_code,
                       finding_kind="table-interpolation" if c.inform and c.ok else KIND, arg=f"TOSA {c.op} #{c.index}",
                       targets=(TARGET_NAME,), inform=c.inform,
                       detail=text + (f" (produced {describe(c.produced)}, expected {describe(c.expected)})"
                                      if c.produced or c.expected else ""))
        )  # fmt: skip


def weighs_drop(ob: Obligation, kind: str) -> bool:
    """Is `ob` a partition's own obligation that weighs a drop of `kind`: the requant after a copy or an
    activation (`DROPPED`), the output scale of an op lowered with zero points only (`SCALE_DROPPED`), or
    a duplicate's own domain where it is merged into another (`MERGED`)?"""
    if kind == DROPPED:
        return ob.kind is ObligationKind.NO_FOLD_CHANGE
    return ob.finding_kind == kind


def _weighed_in_partition(dg: Any, node: str, kind: str) -> bool:
    """Does the program's own obligation at partition node `node` weigh its drop of `kind`?"""
    return any(weighs_drop(ob, kind) and ob.node == node for ob in dg.obligations)


def analyze_artifact(obj: Any, name: str = "", reference: Any = None) -> Any:
    """Prove the TOSA artifacts of a lowered program alone (graph checks off):
    a Report whose every obligation comes from the flatbuffers. `reference`: the
    PT2E ExportedProgram it was lowered from (for weights kept as bare codes)."""
    gm, _ = graph_module_of(obj)
    ref = tosa_anchors.reference(reference) if reference is not None else None
    dg = DomainGraph(form="artifact")
    for n in gm.graph.nodes:
        if n.op == "call_function" and classify(target_name(n)) is OpClass.DELEGATE:
            lm = lowered_module(gm, n)
            checks = check_delegate(gm, n, lm, ref) if lm is not None else None
            if checks is None:
                backend = getattr(lm, "backend_id", "?")
                dg.notes.append(f"{n.name}: {backend} carries no TOSA flatbuffer, or is a float partition")
                continue
            add_evidence(dg, str(n.args[0].name), n.name, checks)
    return analyze_graph(dg, name=name)
