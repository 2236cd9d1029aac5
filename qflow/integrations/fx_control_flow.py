"""The FX reader's control flow: `cond` / `while_loop`, whose Q/DQ subgraphs are read as programs of their own."""

from __future__ import annotations

import torch.fx as fx

from qflow import bounds
from qflow.domain import Domain
from qflow.graph import Definition, DefKind, DomainGraph, Obligation, ObligationKind
from qflow.ir.fx_nodes import (
    DOMAIN_FREE_DTYPES,
    Consts,
    arg_label,
    is_float,
    qdq_domain,
    target_name,
    tensor_args,
    val_dtype,
    val_of,
)
from qflow.ops import CONTROL_FLOW, OpClass, base_name, classify


class ControlFlowReading:
    """`FxAdapter`'s reading of control-flow ops (a mixin: it uses the adapter's state)."""

    def _add_control_flow(self, node: fx.Node) -> None:
        """cond / while_loop. Subgraphs with no quantize, dequantize or delegate in them compute
        on reals in float wherever they run (a backend lowers on integer codes only what its
        quantizer quantized), so the op is float arithmetic on its operands, like any float op.
        Q/DQ subgraphs that take and return reals (the Arm quantizer's quantized cond branches and
        while bodies: each quantizes its operands and dequantizes its results) are programs of
        their own: read as such, their obligations are the op's, and the op returns reals.
        Anything else is unproven."""
        subs = {
            str(a.target): sub
            for _, _, a in tensor_args(node)
            if a.op == "get_attr" and isinstance(sub := getattr(self.gm, str(a.target), None), fx.GraphModule)
        }
        quantized = [
            n.name
            for sub in subs.values()
            for n in sub.graph.nodes
            if n.op == "call_function"
            and (
                classify(target_name(n)) in (OpClass.QUANTIZE, OpClass.DEQUANTIZE, OpClass.DELEGATE)
                or base_name(target_name(n)) in CONTROL_FLOW
            )
        ]
        outs = val_of(node)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        reals = all(
            getattr(v, "dtype", None) is not None and (v.dtype.is_floating_point or v.dtype in DOMAIN_FREE_DTYPES)
            for v in outs
        )
        if subs and reals and (not quantized or self._read_subgraphs(node, subs)):
            self._add_cpu_float(node, OpClass.COMPUTE)
            if quantized and base_name(target_name(node)) == "while_loop":
                self._oblige_loop_domains(node)
            return
        what = base_name(target_name(node))
        reason = (
            f"{node.name} ({what}) runs subgraphs holding quantized code ({', '.join(quantized[:3])}) that do not "
            "take and return real numbers: qflow does not read such control-flow subgraphs yet"
            if quantized
            else f"{node.name} ({what}): its subgraphs or outputs could not be read"
        )
        self._value(node, OpClass.UNKNOWN, Definition(DefKind.FREE, blocking=True, reason=reason))
        for i, j, a in tensor_args(node):
            if a.name in self.dg.g:
                self.dg.add_use(a.name, node.name, arg_label(i, j))

    def _oblige_loop_domains(self, node: fx.Node) -> None:
        """On a target that carries a loop's codes (`Target.carries_loop_codes`), each loop variable
        must leave the loop in the domain it entered with (the dequantize feeding the loop, the
        quantize of its result), up to a difference that moves no code; one whose result is not
        quantized once is unproven there."""
        carriers = tuple(t.name for t in self._members if t.carries_loop_codes)
        if not carriers or not isinstance(node.args[2], (tuple, list)):
            return
        consts = Consts(self.gm, None)
        results = {u.args[1]: u for u in node.users if "getitem" in target_name(u) and isinstance(u.args[1], int)}
        for k, arg in enumerate(node.args[2]):
            out = results.get(k)
            enters = _dequantized(arg, consts)
            leaves = _quantized(out, consts) if out is not None else None
            if enters is not None and leaves is None:
                self.dg.oblige_unbounded(
                    node.name, f"loop variable {k}", "unvalidated-lowering",
                    f"{node.name}: loop variable {k} enters the loop quantized ({arg.name}), but its result is not "
                    "quantized once: which domain the backend gives its codes in the loop's regions is not validated "
                    "(measured wrong: the Arm suite's WhileAdditionalArg reads its limit in another variable's domain)",
                    carriers,
                )  # fmt: skip
            if enters is None or leaves is None or enters == leaves:
                continue
            moved = bounds.dropped_requant(leaves, enters, bounds.COPY)
            if moved is not None and moved.within_rounding:
                continue
            self.dg.oblige(
                Obligation(ObligationKind.STRUCTURAL, node.name, node.name, finding_kind="domain-mismatch",
                           holds=False, targets=carriers, expected=enters, arg=f"loop variable {k}", bound=moved,
                           detail=f"{node.name}: loop variable {k} enters the loop in {enters} ({arg.name}) and "
                                  f"leaves it in {leaves} ({out.name}'s quantize); the backend carries codes, read in "
                                  f"the first and written in the second, so from the second iteration on the body "
                                  f"reads codes of {leaves} as {enters}")
            )  # fmt: skip

    def _read_subgraphs(self, node: fx.Node, subs: dict[str, fx.GraphModule]) -> bool:
        """Read each Q/DQ subgraph as a program of its own under `<node>/<attribute>/`; True when
        every one takes and returns reals (float or domain-free placeholders and outputs)."""
        if self.form not in ("qdq", "lowered"):
            return False
        for attr, sub in subs.items():
            ins = [n for n in sub.graph.nodes if n.op == "placeholder"]
            if not all(is_float(n) or val_dtype(n) in DOMAIN_FREE_DTYPES for n in ins):
                return False
            dg = type(self)(sub, None, "qdq", self.target, self._carry, self.reference).build()
            outs = sub.graph.output_node().args[0]
            outs = outs if isinstance(outs, (tuple, list)) else [outs]
            if not all(isinstance(o, fx.Node) and _holds_reals(dg, o.name) for o in outs):
                return False
            self.dg.absorb(dg, f"{node.name}/{attr}")
        return True


def _holds_reals(dg: DomainGraph, name: str) -> bool:
    """Does value `name` hold real numbers (a dequantize's output, float arithmetic, a copy of
    either) or domain-free data?"""
    seen: set[str] = set()
    while name in dg.g and name not in seen:
        seen.add(name)
        d = dg.value(name).definition
        if d.kind is DefKind.ALIAS and d.sources:
            name = d.sources[0]
            continue
        return d.domain_free or (d.kind is DefKind.FACT and d.real)
    return False


def _quantized(n: fx.Node, consts: Consts) -> Domain | None:
    """The one quantized domain `n`'s users quantize it into, else None."""
    doms = {_dequantized(u, consts, OpClass.QUANTIZE) for u in n.users}
    return doms.pop() if len(doms) == 1 else None


def _dequantized(n: object, consts: Consts, cls: OpClass = OpClass.DEQUANTIZE) -> Domain | None:
    """The quantized domain a dequantize (`cls`: quantize) node names, else None."""
    if not isinstance(n, fx.Node) or n.op != "call_function" or classify(target_name(n)) is not cls:
        return None
    try:
        d = qdq_domain(n, consts)
    except (ValueError, TypeError, KeyError):
        return None
    return None if d.is_float or d.per_channel else d
