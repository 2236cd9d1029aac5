"""Read an ExecuTorch ``.pte`` program and prove what it ships (torch-free).

A ``.pte`` is what the device runs: the execution plan's kernel calls (the
CPU side, e.g. ``quantized_decomposed::quantize_per_tensor.out`` with its
scale and zero point as EValues), the delegate calls and their payloads. No
exported program is needed: the domain graph is built from the plan itself.

* CPU kernels run on real numbers (portable kernels, the *lowered* form):
  a quantize writes codes in the domain its arguments name, a dequantize reads
  codes in its domain, everything else computes in float.
* Each delegate call is a dtype edge and, where the payload records it, a
  domain edge: the payload's own input / output tensors against the EValues the
  parent feeds and declares, and against the parent's quantize into an input and
  dequantize of an output. The payload is read by the target that owns its
  backend id (its ``read_payload`` hook; `qflow.ir.payload_io`), which may also
  check it inside (its own obligations) and, once the plan is read, against what
  the program states around the call (its ``check_payload`` hook). A delegate
  whose payload no target reads keeps its integer IO domains *unproven*.

The container is read by `qflow.ir.pte_program`. Nothing here imports torch or
ExecuTorch's Python packages (a backend's check may).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from qflow import targets
from qflow.domain import FLOAT, Domain
from qflow.errors import InputError
from qflow.graph import Definition, DefKind, DomainGraph, Obligation, ObligationKind, Value, float_fact
from qflow.integrations import pte_weight_codes
from qflow.ir import quantized_embedding
from qflow.ir.payload_io import PayloadIO, PayloadSite
from qflow.ir.pte_program import ITEMSIZE, SCALAR_TYPES, Call, Delegate, EValue, Plan, PteProgram, is_pte, read_pte
from qflow.ops import MULTI_INPUT_IDENTITY, OpClass, base_name, classify, code_sources

__all__ = ["PteProgram", "build", "is_pte", "read_pte"]

_DOMAIN_FREE = frozenset({"int64", "bool", "uint16", "uint32", "uint64"})


def payload_io(d: Delegate, fed: list[str], declared: list[str]) -> PayloadIO:
    """Read a delegate's payload with the reader of the target that owns its backend id."""
    t = targets.for_backend(d.backend_id)
    read = t.hook("read_payload") if t is not None else None
    if read is None:
        return PayloadIO(None, None, f"{d.backend_id} payload (no reader)")
    return read(d, fed, declared)


# --------------------------------------------------------------------------------------------
# The domain graph
# --------------------------------------------------------------------------------------------

#: ExecuTorch's memory-planning view op and the dim-order copies are layout copies.
_ALIASES = {"et_view": "view_copy", "_clone_dim_order": "clone", "_to_dim_order_copy": "clone"}


def _tiles(shape: tuple[int, ...], weight: tuple[int, ...]) -> bool:
    """Is `shape` one value per output channel, or per group of inputs, of a [N, K] weight?"""
    if len(weight) != 2 or not shape or shape[0] != weight[0] or len(shape) > 2:
        return False
    groups = shape[1] if len(shape) == 2 else 1
    return groups == 1 or 1 < groups < weight[1] and weight[1] % groups == 0


def _compatible(a: str, b: str) -> bool:
    return a == b or {a, b} <= {"int8", "uint8"}


def _factor(a: str, b: str) -> float:
    return ITEMSIZE.get(a, 1) / ITEMSIZE.get(b, 1)


class _Builder:
    def __init__(
        self,
        prog: PteProgram,
        plan: Plan,
        prefix: str,
        reference: Any = None,
        unread_kernels: str = "",
        tables: Callable[[], Sequence[quantized_embedding.Table]] | None = None,
    ) -> None:
        self.prog, self.plan, self.prefix = prog, plan, prefix
        self.reference = reference
        #: the reference program's quantized embedding tables (read once, when a kernel asks)
        self.tables = tables
        #: why the kernels a target rewrote the program into are unproven (no reference, or none matched)
        self.unread_kernels = unread_kernels
        self.dg = DomainGraph(form="lowered", target=_plan_target(plan))
        self.names: dict[int, str] = {}
        self.counts: dict[str, int] = {}
        #: Payloads whose backend checks their artifact once the whole plan is read.
        self.anchored: list[tuple[Delegate, str, list[int], list[int]]] = []
        self.references: dict[str, Any] = {}  # target name → what its read_reference made of `reference`

    # -- helpers -------------------------------------------------------------------------
    def ev(self, i: int) -> EValue:
        if not 0 <= i < len(self.plan.values):
            raise InputError(f"{self.prog.source}: value index {i} out of range ({len(self.plan.values)} values)")
        return self.plan.values[i]

    def fresh(self, base: str) -> str:
        n = self.counts.get(base, 0)
        self.counts[base] = n + 1
        return f"{self.prefix}{base}" if n == 0 else f"{self.prefix}{base}_{n}"

    def add(self, idx: int | None, name: str, target: str, cls: OpClass, d: Definition) -> str:
        ev = self.ev(idx) if idx is not None else None
        self.dg.add_value(
            Value(
                name=name,
                target=target,
                op_class=cls,
                definition=d,
                dtype=ev.dtype if ev is not None else None,
                numel=ev.numel if ev is not None and ev.kind == "Tensor" else None,
            )
        )
        if idx is not None:
            self.names[idx] = name
        return name

    def skip(self, name: str) -> bool:
        return self.dg.value(name).definition.domain_free

    def use(self, idx: int, consumer: str, label: str, expected: Domain | None, real: bool | None, **kw: Any) -> None:
        name = self.names.get(idx)
        if name is None:
            return
        self.dg.add_use(name, consumer, label)
        if expected is None or self.skip(name):
            return
        self.dg.oblige(
            Obligation(ObligationKind.USE, consumer, name, expected, real, edge=(name, consumer), arg=label, **kw)
        )

    def scalar(self, call: Call, pos: int, what: str) -> Any:
        if pos >= len(call.args):
            raise InputError(f"{call.name} has {len(call.args)} arguments, no {what} at {pos}", self._where(call))
        ev = self.ev(call.args[pos])
        if ev.kind in ("Int", "Double", "Bool"):
            return ev.value
        if ev.kind == "Tensor":
            data = self.prog.tensor_data(ev)
            if data is None:
                raise InputError(
                    f"{what} of {call.name} is a tensor whose value the program does not store", self._where(call)
                )
            return data[0] if len(data) == 1 and what != "scales" else data
        raise InputError(f"{what} of {call.name} is a {ev.kind}, expected a number", self._where(call))

    def _where(self, call: Call) -> str:
        return f"{self.prefix}instruction {call.index}"

    # -- build -------------------------------------------------------------------------
    def build(self) -> DomainGraph:
        defined: set[int] = set()
        for k, i in enumerate(self.plan.inputs):
            ev = self.ev(i)
            defined.add(i)
            if ev.kind != "Tensor":
                continue
            name = f"{self.prefix}input_{k}"
            if ev.dtype in _DOMAIN_FREE:
                self.add(i, name, "placeholder", OpClass.CONSTANT, Definition(DefKind.FREE, reason="index input"))
            elif ev.dtype and ev.dtype.startswith(("float", "bfloat")):
                self.add(i, name, "placeholder", OpClass.UNKNOWN, float_fact())
            else:  # an integer program input: its domain is set outside; adopt its first declared use
                self.add(
                    i, name, "placeholder", OpClass.UNKNOWN, Definition(DefKind.ALIAS, reason="integer program input")
                )
        for ev in self.plan.values:
            if ev.kind == "Tensor" and ev.constant and ev.index not in defined:
                defined.add(ev.index)
                self.add(
                    ev.index,
                    f"{self.prefix}constant_{ev.index}",
                    "constant",
                    OpClass.CONSTANT,
                    Definition(DefKind.FREE, reason="constant"),
                )
        written = {m: i for i in self.plan.inputs if (m := self.ev(i).memory) is not None and i in self.names}
        # (planned buffer → the value last written there)
        for call in self.plan.calls:
            if call.kind not in ("kernel", "delegate"):
                if call.kind in ("JumpFalseCall",):
                    raise InputError(f"{call.kind} (control flow) is not supported in a .pte yet", self._where(call))
                continue
            tens = self.plan.tensors(call.args)
            if call.kind == "delegate":  # inputs, then the outputs it writes (never written before)
                outs = list(dict.fromkeys(t for t in tens if t not in defined))
            else:  # out-variant kernels end with their out arguments, then the same values returned
                outs = list(dict.fromkeys(self.plan.tensors(call.returned)))
            ins = [t for t in dict.fromkeys(tens) if t not in outs]
            if call.kind == "delegate":
                self.delegate(call, ins, outs)
            else:
                for t in ins:
                    if t not in defined:
                        self.unwritten(call, t, written)
                        defined.add(t)
                self.kernel(call, ins, outs)
            defined.update(outs)
            written.update({m: t for t in outs if (m := self.ev(t).memory) is not None and t in self.names})
        for pending in self.anchored:
            self.check_payload(*pending)
        pte_weight_codes.check(self.prog, self.plan, self.dg, self.names)
        self.dg.settle_inputs("integer program input")
        return self.dg

    def unwritten(self, call: Call, idx: int, written: dict[tuple[int, int], int]) -> None:
        """A tensor a kernel reads that no instruction wrote: a view the emitter elided (a static
        view_copy shares its base's planned buffer: the codes last written there), else state
        that persists across calls (a mutable buffer such as a KV cache): reals when it is float,
        else codes in a domain the .pte does not state."""
        ev = self.ev(idx)
        base = written.get(ev.memory) if ev.memory is not None else None
        if base is None:
            name = self.fresh("state")
            if ev.dtype in _DOMAIN_FREE:
                d = Definition(DefKind.FREE, reason=f"domain-free {ev.dtype} state")
            elif (ev.dtype or "").startswith(("float", "bfloat")):
                d = float_fact()
            else:
                why = f"value {idx} (read by instruction {call.index}) is state no instruction writes: domain unknown"
                d = Definition(DefKind.FREE, blocking=True, reason=why)
            self.add(idx, name, "state", OpClass.UNKNOWN, d)
            return
        name = self.fresh("view")
        src = self.names[base]
        d = Definition(DefKind.ALIAS, sources=(src,), reason="a view of its base's buffer (elided by the emitter)")
        self.add(idx, name, "memory view", OpClass.PASSTHROUGH, d)
        self.dg.add_use(src, name, "base")

    def kernel(self, call: Call, ins: list[int], outs: list[int]) -> None:
        base = base_name(call.name)
        cls = classify(call.name.replace("::", "."))
        if base in _ALIASES:
            cls, base_cls = OpClass.PASSTHROUGH, _ALIASES[base]
        else:
            base_cls = base
        if not outs:
            return  # an in-place kernel or one writing only non-tensors: nothing new to name
        first = outs[0]
        ev_out = self.ev(first)
        name = self.fresh(base)
        if cls is OpClass.QUANTIZE or cls is OpClass.DEQUANTIZE:
            d = self.qdq_domain(call, base)
            real = cls is OpClass.DEQUANTIZE
            self.add(first, name, call.name, cls, Definition(DefKind.FACT, d, real=real))
            x = call.args[0]
            if real:
                self.use(x, name, "args[0]", d, False)
            else:
                self.use(x, name, "args[0]", d, None, allow_float=True)
            return
        if base in quantized_embedding.BITS:
            self.quantized_embedding(call, base, name, first, ins)
            return
        is_float = bool(ev_out.dtype and ev_out.dtype.startswith(("float", "bfloat")))
        rewriter = targets.for_kernel(call.name)
        if rewriter is not None and ev_out.dtype not in _DOMAIN_FREE:  # (the target's to read, never generic)
            why = self.unread_kernels or _NO_REFERENCE.format(target=rewriter.name)
            d = Definition(DefKind.FREE, blocking=True, reason=f"{call.name}: {why}", blocks_as="reference-needed")
            self.add(first, name, call.name, OpClass.UNKNOWN, d)
            for i in ins:
                if i in self.names:
                    self.dg.add_use(self.names[i], name, "input")
            return
        if ev_out.dtype in _DOMAIN_FREE or cls is OpClass.CONSTANT:
            self.add(first, name, call.name, cls, Definition(DefKind.FREE, reason=f"domain-free {ev_out.dtype} tensor"))
            for i in ins:
                if i in self.names:
                    self.dg.add_use(self.names[i], name, "input")
        elif cls in (OpClass.PASSTHROUGH, OpClass.ACTIVATION) and not is_float:
            self.identity(call, name, first, cls, base_cls, ins)
        elif cls in (OpClass.PASSTHROUGH, OpClass.ACTIVATION, OpClass.COMPUTE) or self._reals_only(ins + outs):
            # (an op qflow does not know that reads and writes only float tensors — a custom
            # kernel such as llama::custom_sdpa — passes no integer code: no domain to misread)
            cls = cls if cls is not OpClass.UNKNOWN else OpClass.COMPUTE
            self.add(first, name, call.name, cls, float_fact())
            for k, i in enumerate(ins):
                self.use(i, name, f"input {k}", FLOAT, True)
        else:
            reason = f"unknown op {call.name} (register it with qflow.ops.register)"
            self.add(first, name, call.name, OpClass.UNKNOWN, Definition(DefKind.FREE, blocking=True, reason=reason))
            for i in ins:
                if i in self.names:
                    self.dg.add_use(self.names[i], name, "input")
        for k, extra in enumerate(outs[1:], 1):  # further outputs of one kernel (split, topk, ...)
            self.add(extra, f"{name}.{k}", call.name, self.dg.value(name).op_class, self.dg.value(name).definition)

    def quantized_embedding(self, call: Call, op: str, name: str, out: int, ins: list[int]) -> None:
        """A quantized embedding kernel (`qflow.ir.quantized_embedding`): real rows from its constant codes."""
        a = [self.plan.value(i) for i in call.args] + [None] * 6

        def shape(ev: EValue | None) -> tuple[int, ...] | None:
            return ev.sizes if ev is not None and ev.kind == "Tensor" else None

        found = quantized_embedding.problems(
            op, shape(a[0]) or (), shape(a[1]), shape(a[2]), getattr(a[3], "value", None),
            getattr(a[4], "value", None), self.ev(out).sizes,
        )  # fmt: skip
        self.add(out, name, call.name, OpClass.COMPUTE, float_fact())
        for i in ins:
            if i in self.names:
                self.dg.add_use(self.names[i], name, "input")
        quantized_embedding.oblige(self.dg, name, op, found)
        if self.tables is not None and not found:
            got = self._table(op, a[0], a[1], a[2])
            if got is None:
                why = f"{name} ({op}): its codes or scales are not constants of the .pte"
                self.dg.oblige_unbounded(name, "its table", "kernel-argument-mismatch", why, ())
            else:
                quantized_embedding.check_against(self.dg, name, op, got, self.tables())

    def _table(self, op: str, *args: EValue | None) -> quantized_embedding.Table | None:
        """The real rows a quantized embedding kernel's constant codes, scales and zero points hold."""
        tensors = [ev if ev is not None and ev.kind == "Tensor" else None for ev in args]
        codes, scales, zero_points = (self.prog.array(ev) if ev is not None else None for ev in tensors)
        if codes is None or scales is None or (zero_points is None and tensors[2] is not None):
            return None
        return quantized_embedding.dequantized(quantized_embedding.unpack(op, codes), scales, zero_points)

    def _reals_only(self, tensors: list[int]) -> bool:
        """Is every tensor float, or an integer kind that never holds codes (positions, masks)?"""
        dtypes = [self.ev(t).dtype or "" for t in tensors]
        return any(d.startswith(("float", "bfloat")) for d in dtypes) and all(
            d.startswith(("float", "bfloat")) or d in _DOMAIN_FREE for d in dtypes
        )

    def identity(self, call: Call, name: str, out: int, cls: OpClass, base: str, ins: list[int]) -> None:
        """An integer pass-through kernel on the CPU copies codes (a view of a delegate's int8 output)."""
        srcs = ins if base in MULTI_INPUT_IDENTITY else code_sources(base, ins)
        defining = [self.names[i] for i in srcs if i in self.names and not self.skip(self.names[i])]
        if not defining:
            self.add(out, name, call.name, cls, Definition(DefKind.FREE, reason="copy of a constant"))
            return
        self.add(
            out, name, call.name, cls, Definition(DefKind.ALIAS, sources=tuple(defining), reason=f"{base} copies codes")
        )
        for i in ins:
            if i in self.names:
                self.dg.add_use(self.names[i], name, "input")
        self.dg.oblige_one_input_domain(name, defining)

    def qdq_domain(self, call: Call, base: str) -> Domain:
        per_channel = base.endswith("per_channel")
        a = call.args
        need = 7 if per_channel else 6
        if len(a) < need:
            raise InputError(f"{call.name} has {len(a)} arguments, expected at least {need}", self._where(call))
        try:
            if per_channel:
                scale = self.scalar(call, 1, "scales")
                zp = self.scalar(call, 2, "zero points")
                scale = scale if isinstance(scale, list) else [scale]
                zp = zp if isinstance(zp, list) else [zp] * len(scale)
                axis, qmin, qmax, dt = (
                    self.scalar(call, k, w) for k, w in ((3, "axis"), (4, "qmin"), (5, "qmax"), (6, "dtype"))
                )
                return Domain.quantized(SCALAR_TYPES.get(int(dt), "?"), tuple(scale), tuple(zp), qmin, qmax, int(axis))
            scale, zp, qmin, qmax, dt = (
                self.scalar(call, k, w)
                for k, w in ((1, "scale"), (2, "zero point"), (3, "qmin"), (4, "qmax"), (5, "dtype"))
            )
            return Domain.quantized(SCALAR_TYPES.get(int(dt), "?"), float(scale), int(zp), int(qmin), int(qmax))
        except InputError:
            raise
        except (TypeError, ValueError) as e:
            raise InputError(f"cannot read the quantization arguments of {call.name}: {e}", self._where(call)) from e

    # -- delegates ---------------------------------------------------------------------
    def fed_domain(self, idx: int) -> Domain | None:
        """The domain of the codes the parent feeds a delegate (its quantize's), when known."""
        name = self.names.get(idx)
        seen = set()
        while name is not None and name not in seen:
            seen.add(name)
            d = self.dg.value(name).definition
            if d.kind is DefKind.FACT:
                return d.domain
            name = d.sources[0] if d.kind is DefKind.ALIAS and d.sources else None
        return None

    def delegate(self, call: Call, ins: list[int], outs: list[int]) -> None:
        di = call.delegate if call.delegate is not None else -1
        if not 0 <= di < len(self.plan.delegates):
            raise InputError(f"delegate call to delegate {di}, which the plan does not list", self._where(call))
        d = self.plan.delegates[di]
        prefix = f"{self.prefix}delegate_{di}"
        io = payload_io(d, [self.ev(i).dtype or "?" for i in ins], [self.ev(i).dtype or "?" for i in outs])
        call_name = self.add(
            None,
            prefix,
            f"executorch_call_delegate ({d.backend_id})",
            OpClass.DELEGATE,
            Definition(DefKind.FREE, reason="delegate call"),
        )
        if io.graph is not None:
            self.dg.absorb(io.graph, prefix)
        self.check_against_reference(d, prefix)
        if io.anchored and io.inputs is not None:
            self.anchored.append((d, call_name, ins, outs))
        for i in ins:
            if i in self.names:
                self.dg.add_use(self.names[i], call_name, "input")
        if io.input_args is not None:
            if len(set(io.input_args)) != len(io.input_args) or not all(0 <= a < len(ins) for a in io.input_args):
                raise InputError(
                    f"delegate {di} ({d.backend_id}) is called with {len(ins)} inputs, but its payload "
                    f"({io.artifact}) reads arguments {io.input_args}",
                    self._where(call),
                )
            read = dict(zip(io.input_args, io.inputs or [], strict=True))
            self.unread_constants(call_name, d, [i for k, i in enumerate(ins) if k not in read], io.float_weights)
            ins = [i for k, i in enumerate(ins) if k in read]
            io.inputs = [read[k] for k in sorted(read)]
        positions = io.output_args if io.output_args is not None else list(range(len(outs)))
        for side, have, want in (("inputs", ins, io.inputs), ("outputs", outs, io.outputs)):
            if want is not None and len(want) != len(have if side == "inputs" else positions):
                raise InputError(
                    f"delegate {di} ({d.backend_id}) is called with {len(have)} {side}, but its payload "
                    f"({io.artifact}) has {len(want)}",
                    self._where(call),
                )
        if len(set(positions)) != len(positions) or not all(0 <= a < len(outs) for a in positions):
            raise InputError(
                f"delegate {di} ({d.backend_id}) is called with {len(outs)} outputs, but its payload "
                f"({io.artifact}) writes outputs {positions}",
                self._where(call),
            )
        written = dict(zip(positions, io.outputs, strict=True)) if io.outputs is not None else None
        for k, i in enumerate(ins):
            self.delegate_input(call_name, d, k, i, io)
        for k, i in enumerate(outs):
            if written is not None and k not in written:
                self.unwritten_output(call_name, d, k, i, io)
            else:
                self.delegate_output(call_name, d, k, i, io, None if written is None else written[k])

    def unread_constants(self, call: str, d: Delegate, unread: list[int], weights: tuple[tuple[int, ...], ...]) -> None:
        """Constant tensors the delegate is passed and its payload never reads: what they hold (a
        weight's scales, a bias) it computes without, and the .pte cannot say whether that matters —
        unless they tile a float weight the payload multiplies (one per output channel, or per group of
        its inputs): that weight is codes whose scales were dropped (measured: a torchao weight-only
        linear on XNNPACK, tests/test_torchao_models.py)."""
        consts = [self.ev(i) for i in unread if self.ev(i).kind == "Tensor" and self.ev(i).constant]
        if not consts:
            return
        shown = ", ".join(f"{ev.dtype}{list(ev.sizes)}" for ev in consts)
        owner = targets.for_backend(d.backend_id)
        on = (owner.name,) if owner is not None else ()
        tiled = [ev for ev in consts if any(_tiles(tuple(ev.sizes), w) for w in weights)]
        if tiled:
            shapes = ", ".join(str(list(w)) for w in weights)
            why = (f"delegate {d.index} ({d.backend_id}) multiplies float weights {shapes} and is passed "
                   f"{len(tiled)} constant tensor(s) that tile them, one per output channel or group ({shown}), "
                   "which its payload never reads: the weights are codes whose scales were dropped, as "
                   "measured for a torchao weight-only linear lowered to XNNPACK")  # fmt: skip
            self.dg.oblige(
                Obligation(ObligationKind.STRUCTURAL, call, call, finding_kind="miscompiled-lowering", holds=False,
                           targets=on, detail=why)
            )  # fmt: skip
            return
        why = (f"delegate {d.index} ({d.backend_id}) is passed {len(consts)} constant tensor(s) its payload "
               f"never reads ({shown}): it computes without them")  # fmt: skip
        self.dg.oblige_unbounded(call, "unread constants", "unread-delegate-argument", why, on)

    def delegate_input(self, call: str, d: Delegate, k: int, idx: int, io: PayloadIO) -> None:
        fed = self.ev(idx).dtype or "?"
        src = self.names.get(idx)
        if src is None:
            return
        node = f"{call}/input_{k}"
        if io.inputs is None:
            expected, dom, where = fed, None, f"the program (no {d.backend_id} reader checks it)"
        else:
            expected, dom = io.inputs[k]
            where = f"the backend artifact ({io.artifact})"
        fed_real, exp_real = fed.startswith(("float", "bfloat")), expected.startswith(("float", "bfloat"))
        holds = _compatible(fed, expected)
        repair = dom if fed_real and not exp_real else FLOAT if exp_real and not fed_real else None
        self.dg.add_value(
            Value(node, f"delegate input {k}", OpClass.DELEGATE, Definition(DefKind.FREE, reason="boundary"))
        )
        self.dg.add_use(src, node, f"input {k}")
        self.dg.oblige(
            Obligation(
                ObligationKind.STRUCTURAL,
                node,
                src,
                expected=None if holds else repair,
                edge=(src, call),
                arg=f"input {k}",
                finding_kind="delegate-dtype-mismatch",
                holds=holds,
                detail=(
                    f"delegate {d.index} ({d.backend_id}) input {k}: {where} expects {expected}, but the "
                    f"program feeds {fed} ({src}). Byte-size factor {_factor(fed, expected):g}: the backend reads "
                    "the wrong number of bytes, or reads float bytes as integer codes (or the reverse)."
                ),
            )
        )
        if fed_real or exp_real or io.inputs is None or io.anchored or self.skip(src):
            return  # (an anchored artifact is interpreted from the domain fed: its checks decide)
        if dom is None:  # integer codes the artifact reads in a domain it does not state: unproven
            reads = f"{node}.domain"
            why = f"delegate {d.index} input {k}: {io.unknown_domain}"
            self.dg.add_value(
                Value(
                    reads,
                    "artifact input domain",
                    OpClass.DELEGATE,
                    Definition(DefKind.FREE, blocking=True, reason=why),
                )
            )
            fed_dom = self.fed_domain(idx)
            label = f"(input {k} of delegate {d.index}, fed by {src})"
            if fed_dom is not None:
                self.dg.oblige(Obligation(ObligationKind.USE, node, reads, fed_dom, False, edge=(src, call), arg=label))
            else:
                self.dg.oblige(Obligation(ObligationKind.USE, node, src, other=reads, edge=(src, call), arg=label))
            return
        self.dg.oblige(
            Obligation(
                ObligationKind.USE, node, src, dom, False, edge=(src, call), arg=f"(input {k} of delegate {d.index})"
            )
        )

    def unwritten_output(self, call: str, d: Delegate, k: int, idx: int, io: PayloadIO) -> None:
        """A delegate output no payload output writes: what it holds is whatever the buffer held."""
        name = f"{call}/output_{k}"
        why = (f"delegate {d.index} ({d.backend_id}) output {k}: its payload ({io.artifact}) writes no tensor "
               f"to it, so the program reads whatever the buffer held before")  # fmt: skip
        declared = self.ev(idx).dtype or "?"
        held = float_fact() if declared.startswith(("float", "bfloat")) else Definition(DefKind.FREE, reason=why)
        self.add(idx, name, f"delegate {d.index} ({d.backend_id}) output {k}", OpClass.DELEGATE, held)
        self.dg.add_use(call, name, f"output {k}")
        on = (owner.name,) if (owner := targets.for_backend(d.backend_id)) is not None else ()
        self.dg.oblige(
            Obligation(ObligationKind.STRUCTURAL, name, name, edge=(call, name), holds=False, targets=on,
                       finding_kind="unwritten-delegate-output", detail=why)
        )  # fmt: skip

    def delegate_output(
        self, call: str, d: Delegate, k: int, idx: int, io: PayloadIO, written: tuple[str, Domain | None] | None
    ) -> None:
        """Output `k` of a delegate call, as its payload writes it (`written`; None: no reader)."""
        declared = self.ev(idx).dtype or "?"
        name = f"{call}/output_{k}"
        if written is None:
            produced, dom, where = declared, None, f"the program (no {d.backend_id} reader checks it)"
            reason = f"{d.backend_id} delegate output {k}: qflow has no reader for this payload"
        else:
            produced, dom = written
            where = f"the backend artifact ({io.artifact})"
            reason = f"delegate {d.index} output {k}: {io.unknown_domain}"
        if produced.startswith(("float", "bfloat")):
            definition = float_fact()
        elif produced in _DOMAIN_FREE:
            definition = Definition(DefKind.FREE, reason=f"domain-free {produced} output")
        elif dom is not None:
            definition = Definition(DefKind.FACT, dom, real=False)
        else:
            definition = Definition(DefKind.FREE, blocking=True, reason=reason)
        self.add(idx, name, f"delegate {d.index} ({d.backend_id}) output {k}", OpClass.DELEGATE, definition)
        self.dg.add_use(call, name, f"output {k}")
        holds = _compatible(declared, produced)
        self.dg.oblige(
            Obligation(
                ObligationKind.STRUCTURAL,
                name,
                name,
                expected=dom if dom is not None and not dom.is_float else None,
                edge=(call, name),
                finding_kind="delegate-dtype-mismatch",
                holds=holds,
                detail=(
                    f"delegate {d.index} ({d.backend_id}) output {k}: {where} produces {produced}, but the program "
                    f"declares {declared} for it. Byte-size factor {_factor(declared, produced):g}: the runtime "
                    "allocates the wrong buffer size, or float consumers read integer codes as floats."
                ),
            )
        )

    def _lowers_every_activation(self) -> bool:
        """One delegate and no activation kernel on the CPU: every activation of the
        program it was lowered from is in that delegate (or was exact to drop)."""
        cpu_clamps = [c for c in self.plan.calls if c.kind == "kernel" and classify(c.name) is OpClass.ACTIVATION]
        return len(self.plan.delegates) == 1 and not cpu_clamps

    def check_payload(self, d: Delegate, call: str, ins: list[int], outs: list[int]) -> None:
        """Hand a payload to its backend's artifact check, anchored at what the program states:
        the domain fed to each input, the dequantize of each output. An output whose edge check
        the backend decides takes the domain the parent reads (the check proves or refutes it)."""
        t = targets.for_backend(d.backend_id)
        check = t.hook("check_payload") if t is not None else None
        if t is None or check is None:
            return
        inputs = tuple(
            FLOAT if (self.ev(i).dtype or "").startswith(("float", "bfloat")) else self.fed_domain(i) for i in ins
        )
        outputs: list[tuple[Domain | None, str]] = []
        for i in outs:
            out = self.names.get(i)
            reads = [
                c
                for c in (self.dg.g.successors(out) if out is not None else ())
                if c in self.dg.g and self.dg.value(c).op_class is OpClass.DEQUANTIZE
            ]
            if reads:
                outputs.append((self.dg.value(reads[0]).definition.domain, f"the program's dequantize {reads[0]}"))
            elif (self.ev(i).dtype or "").startswith(("float", "bfloat")):
                outputs.append((FLOAT, f"the program ({out} is {self.ev(i).dtype})"))
            else:
                outputs.append((None, ""))
        site = PayloadSite(call, inputs, tuple(outputs), self._reference(t), self._lowers_every_activation())
        if not check(self.dg, d, site):
            return
        for i, (dom, _) in zip(outs, outputs, strict=True):
            out = self.names.get(i)
            if out is not None and dom is not None and not dom.is_float:
                self.dg.value(out).definition = Definition(DefKind.FACT, dom, real=False)

    def check_against_reference(self, d: Delegate, prefix: str) -> None:
        """With the program the .pte was lowered from, the backend checks what a payload keeps (its
        constants, in it or in the .pte's named data) and no longer says against what that program
        declares (``check_against_reference``)."""
        t = targets.for_backend(d.backend_id)
        check = t.hook("check_against_reference") if t is not None else None
        if t is not None and check is not None and (reference := self._reference(t)) is not None:
            check(self.dg, d, prefix, reference, self.prog.named_data)

    def _reference(self, t: targets.Target) -> Any:
        """What target `t` reads from the program the .pte was lowered from (once per target)."""
        if self.reference is None:
            return None
        if t.name not in self.references:
            read = t.hook("read_reference")
            self.references[t.name] = read(self.reference) if read is not None else None
        return self.references[t.name]


_NO_REFERENCE = (
    "a {target} kernel's folded integers realise domains that only the program the .pte was lowered "
    "from states (pass it: reference=)"
)


def _rewriter(plan: Plan) -> targets.Target | None:
    """The target whose passes rewrote the plan's program into kernels of its own, if any."""
    return next((t for c in plan.calls if c.kind == "kernel" and (t := targets.for_kernel(c.name))), None)


Tables = Callable[[], Sequence[quantized_embedding.Table]]


def _plan_target(plan: Plan) -> str:
    """The target a plan is read for: the one whose passes rewrote it, or whose backend runs each of its
    delegates; generic for a plan of portable kernels or of delegates to several backends."""
    rewriter = _rewriter(plan)
    if rewriter is not None:
        return rewriter.name
    owners = {t.name if (t := targets.for_backend(d.backend_id)) is not None else "" for d in plan.delegates}
    return owners.pop() if len(owners) == 1 and "" not in owners else "generic"


def _plan_graph(prog: PteProgram, plan: Plan, reference: Any, tables: Tables | None) -> DomainGraph:
    """One execution plan's graph. A plan that calls kernels a target's passes rewrote the program
    into in place (Cortex-M) is that target's: it lowers the reference again, matches the plan
    against it and writes the plan's arguments in (`relower_plan`), and the program it returns is
    read as any program after the passes; a plan it cannot match stays unproven."""
    rewriter = _rewriter(plan)
    relower = rewriter.hook("relower_plan") if rewriter is not None and reference is not None else None
    if rewriter is None or relower is None:
        return _Builder(prog, plan, "", reference, tables=tables).build()
    relowered = relower(prog, plan, reference)
    if relowered.program is None:
        why = f"the .pte is not the reference's lowering: {relowered.mismatch}"
        return _Builder(prog, plan, "", reference, why, tables).build()
    # (torch and the FX reader only for a .pte whose program a target rewrote in place)
    from qflow.integrations.fx import build as build_program

    ep = relowered.program
    read_reference = rewriter.hook("read_reference")
    # (what the passes were given is what their kernels are checked against, as in observe mode)
    given = read_reference(relowered.given or reference) if read_reference else None
    dg = build_program(ep.graph_module, ep, None, rewriter, True, given)
    dg.notes.extend(relowered.notes)
    return dg


def build(prog: PteProgram | str | Path | bytes, reference: Any = None, tables: Tables | None = None) -> DomainGraph:
    """The domain graph of every execution plan of a .pte (plans other than the
    only one are prefixed with their method name). `reference`: the program it was
    lowered from (an ExportedProgram), which each delegate's target reads with its
    ``read_reference`` hook (a TOSA payload's bare weight codes take the scales of
    its quantized constants; its activations are what a CLAMP may be). `tables`: that
    program's quantized embedding tables, which the CPU's embedding kernels must unpack to."""
    if not isinstance(prog, PteProgram):
        prog = read_pte(prog)
    if tables is not None:
        tables = _once(tables)
    if len(prog.plans) == 1:
        dg = _plan_graph(prog, prog.plans[0], reference, tables)
    else:
        named = {_plan_target(p) for p in prog.plans} - {"generic"}
        dg = DomainGraph(form="lowered", target=named.pop() if len(named) == 1 else "generic")
        for plan in prog.plans:
            dg.absorb(_plan_graph(prog, plan, reference, tables), plan.name)
    dg.notes.append(
        f"read from the ExecuTorch program {Path(prog.source).name}: "
        + "; ".join(
            f"{p.name}: {len(p.calls)} instructions, delegates "
            + (", ".join(f"{d.index} {d.backend_id} ({len(d.payload)} bytes)" for d in p.delegates) or "none")
            for p in prog.plans
        )
    )
    return dg


def _once(read: Tables) -> Tables:
    """`read`, called at most once (the tables are read only if a kernel asks)."""
    cache: list[Sequence[quantized_embedding.Table]] = []

    def get() -> Sequence[quantized_embedding.Table]:
        if not cache:
            cache.append(read())
        return cache[0]

    return get
