"""The FX reader's lowered form: `executorch_call_delegate` calls, their inputs and outputs as dtype and domain edges
(`qflow.ir.delegate`; the backend refines them through its target's hooks)."""

from __future__ import annotations

import torch
import torch.fx as fx

from qflow import targets
from qflow.domain import FLOAT, Domain
from qflow.errors import InputError
from qflow.graph import RETURNED, Definition, DefKind, DomainGraph, Obligation, ObligationKind, float_fact
from qflow.ir import delegate
from qflow.ir.fx_nodes import arg_label, dtype_name, target_name, tensor_args, val_dtype, val_of
from qflow.ops import OpClass, base_name


class DelegateReading:
    """`FxAdapter`'s reading of delegate calls and their boundaries (a mixin: it uses the adapter's state)."""

    def _add_delegate_call(self, node: fx.Node) -> None:
        lowered = delegate.lowered_module(self.gm, node)
        if lowered is None:
            raise InputError("executorch_call_delegate without a lowered module argument", node.name)
        ins, outs = delegate.boundaries(lowered)
        self.delegates[node.name] = (lowered, outs)
        # the partition's own program, as handed to the backend (Q/DQ intact)
        part = lowered.original_module
        # read by its own backend's contract: the delegate names its target
        own = targets.for_backend(str(getattr(lowered, "backend_id", ""))) or self.target
        sub = type(self)(part.graph_module, part, "qdq", own, inner=True).build()
        prefix = str(node.args[0].name)  # type: ignore[union-attr]
        self.dg.absorb(sub, prefix)
        self._value(node, OpClass.DELEGATE, Definition(DefKind.FREE, reason="delegate call (a tuple)"))
        for i, j, a in tensor_args(node):
            if a.name in self.dg.g:
                self.dg.add_use(a.name, node.name, arg_label(i, j))
        fed = list(node.args[1:])
        if len(fed) != len(ins):
            raise InputError(
                f"{node.name} passes {len(fed)} inputs, but its partition has {len(ins)} user inputs "
                f"({', '.join(b.placeholder for b in ins)})",
                node.name,
            )
        for b, arg in zip(ins, fed, strict=True):
            if isinstance(arg, fx.Node):
                self._add_delegate_input(node, prefix, b, arg, sub)
        delegate.add_artifact_evidence(self.dg, self.gm, node, lowered, prefix, self.reference)

    def _add_delegate_input(
        self, call: fx.Node, prefix: str, b: delegate.BoundaryInput, arg: fx.Node, sub: DomainGraph
    ) -> None:
        """A delegate input is a dtype edge, and, when both sides are integer,
        a domain edge: the codes the parent feeds must be in the domain the
        partition's first dequantize of that input reads."""
        if arg.name not in self.dg.g or (val_of(arg) is not None and not isinstance(val_of(arg), torch.Tensor)):
            return  # a symbolic size, not a tensor: no dtype edge
        ph = f"{prefix}/{b.placeholder}"
        dt = val_dtype(arg)
        fed = dtype_name(dt) if dt is not None else "?"
        expected = b.expected_dtype
        pv = sub.value(b.placeholder) if b.placeholder in sub.g else None
        reads = pv.definition.domain if pv is not None and pv.definition.kind is DefKind.FACT else None
        if fed == "?" or expected == "?":
            where = arg.name if fed == "?" else ph
            raise InputError(f"no tensor dtype (meta['val']) on delegate {call.name} input {b.index}", where)
        holds = delegate.compatible(fed, expected)
        # Real numbers in, codes expected: a CPU quantize into the domain the
        # partition reads repairs it. Codes in, real numbers expected: a CPU
        # dequantize (the planner reads the codes' domain). Codes of another
        # integer dtype: the domain obligation's requant repairs both.
        fed_real, exp_real = fed.startswith("float"), expected.startswith("float")
        repair = reads if fed_real and not exp_real else FLOAT if exp_real and not fed_real else None
        if not fed_real and not exp_real:
            self._boundary_use(call, ph, b, arg, reads)
        same = fed_real and exp_real or reads is not None and reads == self.dg.value(arg.name).own_domain
        if same and ph in self.dg.g:
            self.dg.fed[ph] = arg.name  # (the same reals on both sides of the boundary)
        self.dg.oblige(
            Obligation(
                kind=ObligationKind.STRUCTURAL,
                node=ph,
                value=arg.name,
                edge=(arg.name, call.name),
                arg=f"input {b.index}",
                finding_kind="delegate-dtype-mismatch",
                expected=None if holds else repair,
                holds=holds,
                detail=(
                    f"delegate {call.name} input {b.index} (partition placeholder {b.placeholder}): "
                    f"{b.evidence} expects {expected}, but the parent graph feeds {fed} ({arg.name}). "
                    f"Byte-size factor {delegate.byte_factor(fed, expected):g}: the backend reads the "
                    "wrong number of bytes, or reads float bytes as integer codes (or the reverse)."
                ),
            )
        )

    def _delegate_output(self, node: fx.Node) -> tuple[str, delegate.BoundaryOutput] | None:
        src = node.args[0] if node.args else None
        if base_name(target_name(node)) != "getitem" or not isinstance(src, fx.Node) or src.name not in self.delegates:
            return None
        idx = node.args[1]
        outs = self.delegates[src.name][1]
        if not isinstance(idx, int) or not 0 <= idx < len(outs):
            raise InputError(f"getitem index {idx!r} is not an output of {src.name}", node.name)
        return src.name, outs[idx]

    def _link_delegate_output(self, node: fx.Node) -> None:
        """`node` reads its delegate call's output, which is the partition's value it returns (impact
        follows wrong codes out, and a mask the partition computes)."""
        found = self._delegate_output(node)
        assert found is not None
        call, out = found
        self.dg.add_use(call, node.name, f"output {out.index}")
        inner = f"{node.args[0].args[0].name}/{out.partition_node}"  # type: ignore[union-attr]
        if inner in self.dg.g:
            self.dg.add_use(inner, node.name, RETURNED)

    def _add_delegate_output(self, node: fx.Node) -> None:
        found = self._delegate_output(node)
        assert found is not None
        call, out = found
        if not out.written:
            self._add_unwritten_output(node, call, out)
            return
        if out.domain is None:
            d = Definition(DefKind.FREE, blocking=True, reason=f"{call} output {out.index} has no recorded domain")
        else:
            d = Definition(DefKind.FACT, out.domain, real=out.real)
        self._value(node, OpClass.DELEGATE, d)
        self._link_delegate_output(node)
        dt = val_dtype(node)
        declared = dtype_name(dt) if dt is not None else out.dtype
        produced = out.produced_dtype
        holds = declared == produced or {declared, produced} <= {"int8", "uint8"}
        where = out.evidence
        self.dg.oblige(
            Obligation(
                kind=ObligationKind.STRUCTURAL,
                node=node.name,
                value=node.name,
                edge=(call, node.name),
                finding_kind="delegate-dtype-mismatch",
                expected=out.domain if out.domain is not None and not out.real else None,
                holds=holds,
                detail=(
                    f"delegate {call} output {out.index} (partition node {out.partition_node}): {where} "
                    f"produces {produced}, but the parent graph declares {declared} (meta['val']). "
                    f"Byte-size factor {delegate.byte_factor(declared, produced):g}: the runtime allocates "
                    "the wrong buffer size, or float consumers read integer codes as floats."
                ),
            )
        )

    def _add_unwritten_output(self, node: fx.Node, call: str, out: delegate.BoundaryOutput) -> None:
        """A delegate output its backend artifact never writes: the program reads what the buffer held."""
        why = (f"delegate {call} output {out.index} (partition node {out.partition_node}): the backend artifact "
               f"({out.artifact}) writes no tensor to it: the program reads whatever the buffer held")  # fmt: skip
        dt = val_dtype(node)
        real = dt is not None and dt.is_floating_point
        self._value(node, OpClass.DELEGATE, float_fact() if real else Definition(DefKind.FREE, reason=why))
        self._link_delegate_output(node)
        # (reported at the op that reads it: where in the model it is)
        at = next((u.name for u in node.users if u.op == "call_function"), node.name)
        self.dg.oblige(
            Obligation(kind=ObligationKind.STRUCTURAL, node=at, value=node.name, edge=(call, node.name),
                       finding_kind="unwritten-delegate-output", holds=False, detail=why)
        )  # fmt: skip

    def _boundary_use(
        self, call: fx.Node, ph: str, b: delegate.BoundaryInput, arg: fx.Node, reads: Domain | None
    ) -> None:
        """The codes fed to an integer partition input must be in the domain the
        partition reads them in (reported at the partition placeholder, so each
        input of a call is its own finding; a requant goes on the parent edge)."""
        if reads is None or reads.is_float or self._skip_use(arg):
            return
        self.dg.oblige(
            Obligation(
                kind=ObligationKind.USE,
                node=ph,
                value=arg.name,
                expected=reads,
                expected_real=None if reads.plain_integers else False,  # (integers held as reals are those codes)
                edge=(arg.name, call.name),
                arg=f"(input {b.index} of delegate {call.name})",
            )
        )

    # -- boundary inputs -------------------------------------------------------------
