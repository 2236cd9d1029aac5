"""The FX reader's control flow: `cond` / `while_loop`, whose subgraphs are read as programs of their own.

In the Q/DQ form a quantized branch or loop body takes and returns reals. In the Arm folded form
(after ``FoldAndAnnotateQParamsPass``) it takes and returns codes: each subgraph input carries the
domain its first quantize named (``output_qparams``), each output the domain its last dequantize
named (the output node's ``input_qparams``), the op one domain for all its operands
(``input_qparams``) and each result the domain of the quantize after it (the getitem's
``output_qparams``). The Arm backend rescales between them at the boundaries (measured: a cond whose
branches take and return other domains than its operands and result computes exactly on the TOSA
reference model, tests/test_control_flow.py), except where a loop carries codes: what the body
writes back is read next time as the loop's entry domain.
"""

from __future__ import annotations

import torch.fx as fx

from qflow import bounds
from qflow.domain import Domain
from qflow.graph import Definition, DefKind, DomainGraph, Obligation, ObligationKind, float_fact
from qflow.ir import quantized_embedding
from qflow.ir.fx_nodes import (
    DOMAIN_FREE_DTYPES,
    Consts,
    arg_label,
    control_flow_operands,
    is_float,
    qdq_domain,
    quant_args_domain,
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
        if self.form == "folded" and subs and self._read_folded(node, subs):
            return
        quantized = [
            n.name
            for sub in subs.values()
            for n in sub.graph.nodes
            if n.op == "call_function"
            and (
                classify(target_name(n)) in (OpClass.QUANTIZE, OpClass.DEQUANTIZE, OpClass.DELEGATE)
                or base_name(target_name(n)) in CONTROL_FLOW
                or base_name(target_name(n)) in quantized_embedding.BITS
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

    def _read_folded(self, node: fx.Node, subs: dict[str, fx.GraphModule]) -> bool:
        """A folded cond / while_loop: read each subgraph as a folded program of its own whose
        inputs hold codes in the domains they declare, oblige each operand to be in the domain the
        op declares for it and each subgraph output in the one its output node declares, and give
        each result its domain (`_flow_result`). False when the op's arguments are not as Arm
        writes them."""
        loop = base_name(target_name(node)) == "while_loop"
        args, operands = node.args, control_flow_operands(node)
        if operands is None:
            return False
        carried = list(args[2]) if loop else operands
        iq = node.meta.get("input_qparams") or {}
        at = 2 if loop else 3
        entry = quant_args_domain(iq[at], node) if at in iq else None
        results = {u.args[1]: u for u in node.users if "getitem" in target_name(u) and isinstance(u.args[1], int)}
        rescaled = {
            k: quant_args_domain(oq[min(oq)], u) for k, u in results.items() if (oq := u.meta.get("output_qparams"))
        }
        ins = {attr: [n for n in sub.graph.nodes if n.op == "placeholder"] for attr, sub in subs.items()}
        declared = {
            (attr, i): quant_args_domain(oq[min(oq)], p)
            for attr, ps in ins.items()
            for i, p in enumerate(ps)
            if (oq := p.meta.get("output_qparams"))
        }
        if (
            entry is None
            and not declared
            and not any(sub.graph.output_node().meta.get("input_qparams") for sub in subs.values())
        ):
            return False  # (nothing folded: subgraphs that take and return reals, read as Q/DQ programs)
        for k, a in enumerate(carried):
            # the backend rescales from the op's one operand domain into each input that declares one
            if not isinstance(a, fx.Node) or entry is None or not any((attr, k) in declared for attr in subs):
                continue
            pv = self._use(a, node, f"operand {k}", entry, False)
            codes = (dt := val_dtype(a)) is not None and dt not in DOMAIN_FREE_DTYPES
            if not codes or pv is None or not pv.definition.domain_free:
                continue
            # a constant whose dequantize the fold dropped: its domain, from the program this one came from
            lookup = getattr(self.reference, "constant_domain", None)
            if (own := lookup(a.name) if lookup is not None else None) is not None:
                self._oblige_constant_operand(node, k, a.name, own, entry)
            else:
                self.dg.oblige_unbounded(
                    node.name, f"operand {k}", "unvalidated-lowering",
                    f"{node.name}: operand {k} ({a.name}) holds codes whose domain this program does not record "
                    f"(a constant; `reference=` the partition before the fold pass records it); the backend reads "
                    f"every operand in {entry}", (self.target.name,),
                )  # fmt: skip
        outs: dict[int, list[tuple[str, Domain | None]]] = {}  # result k → (subgraph output value, its domain)
        body = str(args[1].target) if loop else None
        for attr, sub in subs.items():
            known: dict[str, Definition] = {}
            for i, p in enumerate(ins[attr]):
                operand = operands[i] if i < len(operands) and isinstance(operands[i], fx.Node) else None
                d = declared.get((attr, i))
                if d is not None:
                    known[p.name] = Definition(DefKind.FACT, d, real=False)
                    if (i >= len(carried) or entry is None) and operand is not None:
                        # codes the backend does not rescale must already be in the domain the subgraph reads
                        self._use(operand, node, f"{attr} input {i}", d, False)
                elif operand is not None and (v := self.dg.get(operand.name)) is not None:
                    if v.definition.kind is DefKind.FACT:  # (not rescaled: the operand's codes as they are)
                        known[p.name] = v.definition
            read = type(self)(sub, None, "folded", self.target, self._carry, self.reference, inputs=known, inner=True)
            dg = read.build()
            self.dg.absorb(dg, f"{node.name}/{attr}")
            if loop and attr != body:
                continue  # (the loop's condition returns a bool)
            out = sub.graph.output_node()
            vals = out.args[0] if isinstance(out.args[0], (tuple, list)) else [out.args[0]]
            oq = out.meta.get("input_qparams") or {}
            for k, v in enumerate(vals):
                if not isinstance(v, fx.Node):
                    return False
                name = f"{node.name}/{attr}/{v.name}"
                d = quant_args_domain(oq[k], out) if k in oq else None
                if d is not None and name in self.dg.g:
                    self.dg.add_use(name, node.name, f"{attr} output {k}")
                    self.dg.oblige(
                        Obligation(ObligationKind.USE, node=node.name, value=name, expected=d, expected_real=False,
                                   arg=f"{attr} output {k}")
                    )  # fmt: skip
                outs.setdefault(k, []).append((name, d))
        self._value(node, OpClass.COMPUTE, Definition(DefKind.FREE, reason="results are read through getitem"))
        self._flow_results[node.name] = {
            k: self._folded_result(node, k, rescaled.get(k), written) for k, written in outs.items()
        }
        if loop:
            carriers = tuple(t.name for t in self._members if t.carries_loop_codes) or (self.target.name,)
            for k in range(len(carried)):
                written = outs.get(k, [])
                leaves = rescaled.get(k) or (written[0][1] if written else None)
                if entry is not None and leaves is not None:
                    self._oblige_same_loop_domain(node, k, entry, leaves, "its operands", f"result {k}", carriers)
                elif entry is not None or leaves is not None:
                    self.dg.oblige_unbounded(
                        node.name, f"loop variable {k}", "unvalidated-lowering",
                        f"{node.name}: loop variable {k} is quantized on one side of the loop only: which domain "
                        "its codes are in from the second iteration on is not recorded", carriers,
                    )  # fmt: skip
        return True

    def _oblige_constant_operand(self, node: fx.Node, k: int, name: str, own: Domain, entry: Domain) -> None:
        """Constant operand `k` holds codes in `own`; the backend reads them in `entry`."""
        moved = None if own == entry else bounds.dropped_requant(own, entry, bounds.COPY)
        holds = own == entry or (moved is not None and moved.within_rounding)
        self.dg.oblige(
            Obligation(ObligationKind.STRUCTURAL, node.name, name, finding_kind="domain-mismatch", holds=holds,
                       expected=entry, arg=f"operand {k}", bound=None if holds else moved,
                       detail=f"{node.name}: operand {k} ({name}) is a constant in {own} (its dequantize in the "
                              f"program before the fold), but the backend reads every operand of {node.name} in "
                              f"{entry}, the one domain the fold pass records for them")
        )  # fmt: skip

    def _folded_result(self, node: fx.Node, k: int, rescaled: Domain | None, written: list) -> Definition:
        """Result `k` of a folded control-flow op: in the domain the backend rescales it into (the
        quantize after it), else in the one every subgraph writes it in."""
        if rescaled is not None:
            return Definition(DefKind.FACT, rescaled, real=False)
        doms = {d for _, d in written}
        if len(doms) == 1 and (d := doms.pop()) is not None:
            return Definition(DefKind.FACT, d, real=False)
        if all(d is None and _holds_reals(self.dg, name) for name, d in written):
            return float_fact()
        return Definition(
            DefKind.FREE, blocking=True,
            reason=f"{node.name}: result {k} is written in different domains by its subgraphs and not rescaled after",
        )  # fmt: skip

    def _flow_result(self, node: fx.Node) -> Definition | None:
        """The definition of a getitem of a folded control-flow op, else None."""
        src = node.args[0] if node.args else None
        if not isinstance(src, fx.Node) or src.name not in self._flow_results or len(node.args) < 2:
            return None
        return self._flow_results[src.name].get(node.args[1])

    def _add_flow_result(self, node: fx.Node) -> None:
        d = self._flow_result(node)
        assert d is not None
        self._value(node, OpClass.PASSTHROUGH, d)
        self.dg.add_use(node.args[0].name, node.name, "args[0]")

    def _oblige_same_loop_domain(
        self, node: fx.Node, k: int, enters: Domain, leaves: Domain, src: str, dst: str, carriers: tuple[str, ...]
    ) -> None:
        """Loop variable `k` enters in `enters` and is written back in `leaves`: the body reads the second
        as the first from the second iteration on, an error unless no code moves."""
        if enters == leaves:
            return
        moved = bounds.dropped_requant(leaves, enters, bounds.COPY)
        if moved is not None and moved.within_rounding:
            return
        self.dg.oblige(
            Obligation(ObligationKind.STRUCTURAL, node.name, node.name, finding_kind="domain-mismatch",
                       holds=False, targets=carriers, expected=enters, arg=f"loop variable {k}", bound=moved,
                       detail=f"{node.name}: loop variable {k} enters the loop in {enters} ({src}) and "
                              f"leaves it in {leaves} ({dst}); the backend carries codes, read in "
                              f"the first and written in the second, so from the second iteration on the body "
                              f"reads codes of {leaves} as {enters}")
        )  # fmt: skip

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
            if enters is not None and leaves is not None:
                self._oblige_same_loop_domain(node, k, enters, leaves, arg.name, f"{out.name}'s quantize", carriers)

    def _read_subgraphs(self, node: fx.Node, subs: dict[str, fx.GraphModule]) -> bool:
        """Read each Q/DQ subgraph as a program of its own under `<node>/<attribute>/`; True when
        every one takes and returns reals (float or domain-free placeholders and outputs); a constant
        handed in (a nested branch's captured weight) is a constant there too, which its dequantize reads."""
        operands = control_flow_operands(node) or []
        for attr, sub in subs.items():
            constants: dict[str, Definition] = {}
            for i, p in enumerate(n for n in sub.graph.nodes if n.op == "placeholder"):
                if is_float(p) or val_dtype(p) in DOMAIN_FREE_DTYPES:
                    continue
                o = operands[i] if i < len(operands) else None
                if not isinstance(o, fx.Node) or not self.consts.is_constant(o):
                    return False
                constants[p.name] = Definition(DefKind.FREE, reason="constant")
            read = type(self)(sub, None, "qdq", self.target, self._carry, self.reference, inputs=constants, inner=True)
            dg = read.build()
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
