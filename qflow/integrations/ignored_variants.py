"""An op variant a backend ignores: it computes the op's default variant instead.

ExecuTorch 1.5.1's XNNPACK partitioner delegates `gelu(x, approximate="tanh")` and serializes it as
XNNPACK's exact (erf) GELU: the delegate's output differs from the program's by up to 4.73e-4
(measured on the runtime, tests/contracts/test_xnnpack_ignored_variants.py; fixed upstream after
1.5.1, pytorch/executorch PR #22851). No domain is involved, so nothing else in qflow sees it. The
gap is a fixed real error at the op's output: a quantize right after it whose step is at least twice
the gap rounds it away like the backend's own rounding (at most one code, at a tie); anywhere else
it is a violation whose effect downstream the prover weighs (`impact`: masked, or an error).
"""

from __future__ import annotations

from torch import fx

from qflow.graph import DomainGraph, Obligation, ObligationKind
from qflow.ir.fx_nodes import Consts, qdq_domain, target_name
from qflow.ops import OpClass, base_name, classify
from qflow.targets import Target

KIND = "ignored-op-variant"


def _step(user: fx.Node, consts: Consts) -> float | None:
    """The grid step of a per-tensor quantize (None for anything else)."""
    if classify(target_name(user)) is not OpClass.QUANTIZE:
        return None
    d = qdq_domain(user, consts)
    return d.scale if not d.is_float and d.opaque is None and isinstance(d.scale, float) else None


def oblige_honoured_variants(gm: fx.GraphModule, dg: DomainGraph, consts: Consts, members: list[Target]) -> None:
    """At each op whose variant a member target ignores: proved (info) where every user is a quantize
    that rounds the gap away, else violated with the gap as its error."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.name not in dg.g:
            continue
        op = base_name(target_name(node))
        for t in members:
            v = t.ignored_variants.get(op)
            if v is None or node.kwargs.get(v.argument) != v.value:
                continue
            steps = [_step(u, consts) for u in node.users]
            absorbed = bool(steps) and all(s is not None and v.max_error <= s / 2 for s in steps)
            where = (
                "every quantize after it rounds that away (its step is at least twice the gap)"
                if absorbed
                else "it reaches what follows unrounded"
            )
            dg.oblige(
                Obligation(
                    ObligationKind.STRUCTURAL, node.name, node.name, finding_kind=KIND, holds=absorbed,
                    inform=absorbed, targets=(t.name,), real_error=v.max_error,
                    detail=f"{node.name} ({op}, {v.argument}={v.value!r}): {t.name} {v.measured}; "
                    f"off by at most {v.max_error:.3g} here: {where}.",
                )
            )  # fmt: skip
