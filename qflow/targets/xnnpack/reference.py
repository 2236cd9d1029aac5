"""An XNNPACK `.pte` checked against the program it was lowered from (``reference=``): what that
program declares that the payload no longer says (torch-free; `lowered.read_reference` reads it).

* its quantized weights (`weights.check_against`);
* the op variants XNNPACK ignores (`Target.ignored_variants`): the payload names an ``XNNGelu``
  whatever the program's ``approximate`` was, so a program with a tanh GELU has each of the
  payload's GELU nodes checked as qflow checks the op before lowering
  (`qflow.integrations.ignored_variants`): proved where each node that reads it quantizes to a
  step of at least twice the gap, unproven anywhere else;
* its dynamic quantizations per tensor: the payload quantizes each dynamic input per token (measured:
  another function, `TARGET.measured_off`), so a payload node reading one is unproven when the
  program quantizes per tensor, as the program itself is before lowering.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from qflow.graph import DomainGraph, Obligation, ObligationKind
from qflow.targets.contract import IgnoredVariant
from qflow.targets.xnnpack.payload import XnnGraph, XnnNode
from qflow.targets.xnnpack.weights import Weight, check_against

#: The payload node that computes an op whose variant XNNPACK ignores.
VARIANT_NODES = {"gelu": "XNNGelu"}
KIND = "ignored-op-variant"


@dataclass(frozen=True)
class Reference:
    """What a reference program declares, for the payload checks."""

    weights: tuple[tuple[str, Weight], ...]
    #: per op base name, the reference's nodes that ask for a variant XNNPACK ignores
    variants: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: the reference's run-time quantizes with one scale per tensor (PT2E's dynamic config)
    per_tensor_dynamic: tuple[str, ...] = ()


def check(
    dg: DomainGraph,
    g: XnnGraph,
    prefix: str,
    ref: Reference,
    data: Callable[[str], bytes | None],
    ignored: Mapping[str, IgnoredVariant],
) -> None:
    """Every check a reference makes possible, reported under the delegate's `prefix`."""
    check_against(dg, g, prefix, ref.weights, data)
    if ref.per_tensor_dynamic:
        for n in g.nodes:
            per_token = any("per token" in (d.opaque or "") for v in n.inputs if (d := g.values[v].domain) is not None)
            if per_token and n.type != "XNNConvert":
                at = f"{prefix}/{n.label}"
                quantizes = ", ".join(ref.per_tensor_dynamic)
                why = (f"XNNPACK node {n.label} reads an input quantized per token at run time, and the program "
                       f"quantizes per tensor ({quantizes}): measured another function")  # fmt: skip
                dg.oblige_unbounded(at, "its dynamic input", "unvalidated-lowering", why, ("xnnpack",))
    for op, asked in ref.variants:
        v, kind = ignored.get(op), VARIANT_NODES.get(op)
        if v is None or kind is None or not asked:
            continue
        for n in (n for n in g.nodes if n.type == kind and n.outputs):
            at = f"{prefix}/{n.label}"
            what = (f"XNNPACK node {n.label}, and the program asks for {op}({v.argument}={v.value!r}) at "
                    f"{', '.join(asked)}: {v.measured}; off by at most {v.max_error:.3g}")  # fmt: skip
            steps = [_step(g, r, n.outputs[0]) for r in g.nodes if n.outputs[0] in r.inputs]
            if steps and all(s is not None and v.max_error <= s / 2 for s in steps):
                dg.oblige(
                    Obligation(ObligationKind.STRUCTURAL, at, at, finding_kind=KIND, holds=True, inform=True,
                               targets=("xnnpack",), detail=f"{what}, and every node after it quantizes that away.")
                )  # fmt: skip
            else:
                why = f"{what}; whether this node is one and the gap moves an output, the .pte does not say"
                dg.oblige_unbounded(at, "its own result", KIND, why, ("xnnpack",))


def _step(g: XnnGraph, reader: XnnNode, vid: int) -> float | None:
    """The grid step `reader` quantizes `vid` to (an XNNConvert to a per-tensor domain), or None."""
    if reader.type != "XNNConvert" or not reader.outputs:
        return None
    d = g.values[reader.outputs[0]].domain
    return d.scale if d is not None and not d.is_float and d.opaque is None and isinstance(d.scale, float) else None
