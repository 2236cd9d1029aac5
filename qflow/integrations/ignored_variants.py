"""An op variant a backend ignores: it computes the op's default variant instead.

ExecuTorch 1.5.1's XNNPACK partitioner delegates `gelu(x, approximate="tanh")` and serializes it as
XNNPACK's exact (erf) GELU: the delegate's output differs from the program's by up to 4.73e-4
(measured on the runtime, tests/contracts/test_xnnpack_ignored_variants.py; fixed upstream after
1.5.1, pytorch/executorch PR #22851). The Cortex-M passes build its table from the erf GELU too
(tests/contracts/test_cortex_m_ignored_variants.py). No domain is involved, so nothing else in qflow sees it. The
gap is a fixed real error at the op's output, and what it does depends on where it goes:

* nowhere (no output depends on the op), or only into quantizes whose step is at least twice the gap
  (they round it away like the backend's own rounding: one code at most, at a tie) and whose one code
  what follows does not make more than one output LSB (`impact.amplified`, on the whole program when the op
  is in a partition; mask campaign `00060-mk-cm`: a subtraction onto a 13x finer grid made it 3-5): proved;
* anywhere else it is unproven, never proved, with the gap stated: into an output whose only
  rounding is float32's the backend computes another function (measured: campaign cases 00106 /
  00116, 6-72x the torchao campaign's band), but whether that is wrong is the user's float
  tolerance, which qflow does not know (the CNN / transformer campaign's band for a float output,
  2e-3, holds it: ten exact tx-xnn programs); through a quantization's rounding (a run-time
  per-token or fine grid), whether it moves an output beyond that rounding depends on the data
  (0.1-2.6x the band).
"""

from __future__ import annotations

from torch import fx

from qflow.graph import DomainGraph, Obligation, ObligationKind, OneCode
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


def _quantizes(node: fx.Node) -> bool:
    return classify(target_name(node)) is OpClass.QUANTIZE or "choose_qparams" in target_name(node)


def _unrounded(gm: fx.GraphModule) -> set[fx.Node]:
    """The nodes no quantize precedes: their values carry float32 rounding only."""
    out: set[fx.Node] = set()
    for n in gm.graph.nodes:
        if not _quantizes(n) and all(a in out for a in n.all_input_nodes):
            out.add(n)
    return out


def _reach(node: fx.Node, outputs: set[fx.Node]) -> tuple[set[fx.Node], set[fx.Node]]:
    """(the outputs `node` reaches, those it reaches through no quantize)."""
    seen, todo, reached, direct = {node: False}, [node], set(), set()
    while todo:
        n = todo.pop()
        through = seen[n]
        if n in outputs:
            reached.add(n)
            if not through:
                direct.add(n)
        for u in n.users:
            t = through or _quantizes(u)
            if u not in seen or (seen[u] and not t):
                seen[u] = t
                todo.append(u)
    return reached, direct


def oblige_honoured_variants(gm: fx.GraphModule, dg: DomainGraph, consts: Consts, members: list[Target]) -> None:
    """At each op whose variant a member target ignores, by where its gap goes (module docstring)."""
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outputs = set(out_node.all_input_nodes)
    unrounded: set[fx.Node] | None = None
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.name not in dg.g:
            continue
        op = base_name(target_name(node))
        for t in members:
            v = t.ignored_variants.get(op)
            if v is None or node.kwargs.get(v.argument) != v.value:
                continue
            what = (
                f"{node.name} ({op}, {v.argument}={v.value!r}): {t.name} {v.measured}; off by at most {v.max_error:.3g}"
            )
            reached, direct = _reach(node, outputs)
            steps = [_step(u, consts) for u in node.users]
            if reached and all(s is not None and v.max_error <= s / 2 for s in steps):
                # one code at most, which what follows can make many: weighed on the whole program (`build`)
                rounded = f"{what}; every quantize after it rounds that to one code at most"
                dg.one_code += [
                    OneCode(
                        node.name, u.name, KIND, rounded, (t.name,), "nothing after makes that more than one output LSB"
                    )
                    for u in node.users
                ]
                continue
            if not reached:
                dg.oblige(
                    Obligation(ObligationKind.STRUCTURAL, node.name, node.name, finding_kind=KIND, holds=True,
                               inform=True, targets=(t.name,), detail=f"{what}, and no output depends on it.")
                )  # fmt: skip
                continue
            unrounded = _unrounded(gm) if unrounded is None else unrounded
            floats = sorted(o.name for o in direct if o in unrounded)
            how = (
                f"it reaches output {', '.join(floats)} unrounded (whether that is wrong is your float tolerance)"
                if floats
                else "on its way to the outputs it meets a quantization's rounding (a run-time or fine grid), and "
                "whether it moves an output beyond that depends on the data"
            )
            dg.oblige_unbounded(node.name, "its own result", KIND, f"{what}; {how}", (t.name,))
