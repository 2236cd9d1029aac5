"""Read an ExecuTorch ``.pte`` program and prove what it ships (torch-free).

A ``.pte`` is what the device runs: the execution plan's kernel calls (the
CPU side, e.g. ``quantized_decomposed::quantize_per_tensor.out`` with its
scale and zero point as EValues), the delegate calls and their payloads. No
exported program is needed: the domain graph is built from the plan itself.

* CPU kernels run on real numbers (portable kernels, the *lowered* form):
  a quantize writes codes in the domain its arguments name, a dequantize reads
  codes in its domain, everything else computes in float.
* Each delegate call is a dtype edge and, where the payload records it, a
  domain edge: the payload's own input / output tensors (XNNPACK: datatype and
  quantization parameters; TOSA: the flatbuffer's tensor types) against the
  EValues the parent feeds and declares, and against the parent's quantize
  into an input and dequantize of an output.
* An XNNPACK payload is validated inside too (``qflow.targets.xnnpack.payload``).
  A TOSA payload's internal domains are the TOSA artifact validator's job
  (:data:`TOSA_ARTIFACT_HOOK`); until it is installed, the domain of a TOSA
  delegate's integer IO is *unproven*, never assumed.

The flatbuffers are read with Python code that the ``flatc`` shipped in the
ExecuTorch wheel generates from the schemas shipped there (namespaces renamed,
so nothing collides with ExecuTorch's own modules), once per process. Nothing
here imports torch or ExecuTorch's Python packages.
"""

from __future__ import annotations

import importlib
import importlib.util
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qflow.domain import FLOAT, Domain
from qflow.errors import InputError
from qflow.graph import Definition, DefKind, DomainGraph, Obligation, ObligationKind, Value, float_fact
from qflow.ir.pte_tables import PROGRAM_NS, as_table, table, union_names
from qflow.ops import MULTI_INPUT_IDENTITY, OpClass, base_name, classify, code_sources
from qflow.targets.arm import tosa_io
from qflow.targets.arm.vela import ELEM_DTYPE, io_elem_sizes

__all__ = ["PteProgram", "TOSA_ARTIFACT_HOOK", "build", "is_pte", "read_pte"]

#: The TOSA artifact validator a TOSA delegate's payload is handed to (branch
#: ``artifact``; API not fixed yet). Used as: ``read(payload) -> TosaProgram``,
#: ``Anchors(inputs={tosa input name: Domain | None}, outputs=[(Domain | None,
#: where)], consts={})``, ``validate(program, anchors) -> [Check]`` and
#: ``add_evidence(domain_graph, prefix, call_name, checks)``. The anchors are
#: what the .pte states: the parent's quantize into each input, its dequantize
#: of each output. Missing or with another API, the domains at a TOSA
#: delegate's integer IO stay *unproven*.
TOSA_ARTIFACT_HOOK = "qflow.targets.arm.tosa_artifact"

# --------------------------------------------------------------------------------------------
# The program
# --------------------------------------------------------------------------------------------

#: executorch ScalarType codes (schema/scalar_type.fbs) → qflow dtype names.
SCALAR_TYPES = {
    0: "uint8",
    1: "int8",
    2: "int16",
    3: "int32",
    4: "int64",
    5: "float16",
    6: "float32",
    7: "float64",
    11: "bool",
    12: "int8",  # QINT8
    13: "uint8",  # QUINT8
    14: "int32",  # QINT32
    15: "bfloat16",
    22: "uint16",  # BITS16
    27: "uint16",
    28: "uint32",
    29: "uint64",
}
_ITEM = {"uint8": "B", "int8": "b", "int16": "h", "int32": "i", "int64": "q", "float32": "f", "float64": "d"}
_ITEM |= {"bool": "?", "uint16": "H", "uint32": "I", "uint64": "Q"}
_DOMAIN_FREE = frozenset({"int64", "bool", "uint16", "uint32", "uint64"})


@dataclass(frozen=True)
class EValue:
    """One entry of an execution plan's value table."""

    index: int
    kind: str  # Tensor, Int, Double, Bool, Null, String, IntList, DoubleList, BoolList, TensorList, ...
    value: Any = None  # Int / Double / Bool / String; lists as tuples; TensorList: item indices
    dtype: str | None = None  # Tensor: qflow dtype name
    sizes: tuple[int, ...] = ()
    constant: bool = False  # Tensor: data stored in the program (data_buffer_idx > 0)
    data_buffer: int = 0

    @property
    def numel(self) -> int:
        n = 1
        for s in self.sizes:
            n *= int(s)
        return n


@dataclass(frozen=True)
class Call:
    """One instruction: a kernel call (``name`` is ``ns::op.overload``) or a delegate call."""

    index: int
    kind: str  # "kernel" | "delegate" | other instruction names ("MoveCall", ...)
    name: str
    args: tuple[int, ...]
    delegate: int | None = None


@dataclass(frozen=True)
class Delegate:
    """A delegate's payload: backend id and its processed bytes (inline or from a segment)."""

    index: int
    backend_id: str
    payload: bytes
    compile_specs: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class Plan:
    name: str
    values: tuple[EValue, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    calls: tuple[Call, ...]
    delegates: tuple[Delegate, ...]


@dataclass(frozen=True)
class PteProgram:
    """What a .pte holds, as far as quantization domains go."""

    source: str
    plans: tuple[Plan, ...]
    constants: Any = field(default=None, repr=False, compare=False)  # callable(data_buffer_idx) -> bytes | None

    def tensor_data(self, ev: EValue) -> list[Any] | None:
        """The numbers of a constant tensor (scales / zero points given as tensors), or None."""
        if not ev.constant or self.constants is None or ev.dtype not in _ITEM:
            return None
        raw = self.constants(ev.data_buffer)
        fmt = _ITEM[ev.dtype]
        size = struct.calcsize(fmt) * ev.numel
        if raw is None or len(raw) < size:
            return None
        return list(struct.unpack_from(f"<{ev.numel}{fmt}", raw, 0))


def is_pte(path: str | Path) -> bool:
    """True when `path` is an ExecuTorch program (file identifier ``ET..`` at offset 4)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return False
    return len(head) == 8 and head[4:6] == b"ET"


def _extended_header(data: bytes) -> tuple[int, int]:
    """(program size, segment base offset) from the ``eh00`` header, or (len, 0)."""
    if len(data) >= 32 and data[8:12] == b"eh00":
        length = struct.unpack_from("<I", data, 12)[0]
        if length >= 24:
            size, base = struct.unpack_from("<QQ", data, 16)
            return int(size), int(base)
    return len(data), 0


def _s(b: Any) -> str:
    return b.decode("utf-8", "replace") if isinstance(b, (bytes, bytearray)) else str(b or "")


def read_pte(src: str | Path | bytes) -> PteProgram:
    """Parse a .pte (path or bytes): execution plans, values, instructions and delegate payloads."""
    if isinstance(src, (bytes, bytearray)):
        data, where = bytes(src), "<bytes>"
    else:
        p = Path(src)
        if not p.is_file():
            raise InputError(f"{p}: no such file")
        data, where = p.read_bytes(), str(p)
    if len(data) < 8 or data[4:6] != b"ET":
        raise InputError(f"{where}: not an ExecuTorch program (no 'ET' file identifier at offset 4)")
    size, base = _extended_header(data)
    try:
        prog = table(PROGRAM_NS, "Program").GetRootAs(data[:size], 0)
        return _read_program(prog, data, base, where)
    except InputError:
        raise
    except Exception as e:  # a truncated or corrupt flatbuffer raises anything
        raise InputError(f"{where}: cannot read the ExecuTorch program: {type(e).__name__}: {e}") from e


def _segment(prog: Any, data: bytes, base: int, index: int, where: str) -> bytes:
    if index >= prog.SegmentsLength():
        raise InputError(f"{where}: segment {index} does not exist ({prog.SegmentsLength()} segments)")
    seg = prog.Segments(index)
    start, n = base + seg.Offset(), seg.Size()
    if start + n > len(data):
        raise InputError(f"{where}: segment {index} overflows the file ({start + n} > {len(data)} bytes)")
    return data[start : start + n]


def _read_program(prog: Any, data: bytes, base: int, where: str) -> PteProgram:
    kernel_types = union_names(PROGRAM_NS, "KernelTypes")
    instr_types = union_names(PROGRAM_NS, "InstructionArguments")
    plans = []
    for pi in range(prog.ExecutionPlanLength()):
        ep = prog.ExecutionPlan(pi)
        values = tuple(_evalue(ep.Values(i), i, kernel_types) for i in range(ep.ValuesLength()))
        ops = [ep.Operators(i) for i in range(ep.OperatorsLength())]
        op_names = [f"{_s(o.Name())}.{_s(o.Overload()) or 'default'}" for o in ops]
        calls: list[Call] = []
        for ci in range(ep.ChainsLength()):
            chain = ep.Chains(ci)
            for ii in range(chain.InstructionsLength()):
                ins = chain.Instructions(ii)
                kind = instr_types.get(ins.InstrArgsType(), "NONE")
                if kind == "KernelCall":
                    kc = as_table(PROGRAM_NS, "KernelCall", ins.InstrArgs())
                    op = kc.OpIndex()
                    if not 0 <= op < len(op_names):
                        raise InputError(f"{where}: instruction {len(calls)} calls operator {op}, which is not listed")
                    args = tuple(int(kc.Args(j)) for j in range(kc.ArgsLength()))
                    calls.append(Call(len(calls), "kernel", op_names[op], args))
                elif kind == "DelegateCall":
                    dc = as_table(PROGRAM_NS, "DelegateCall", ins.InstrArgs())
                    args = tuple(int(dc.Args(j)) for j in range(dc.ArgsLength()))
                    calls.append(Call(len(calls), "delegate", "executorch_call_delegate", args, dc.DelegateIndex()))
                else:
                    calls.append(Call(len(calls), kind, kind, ()))
        delegates = []
        for di in range(ep.DelegatesLength()):
            d = ep.Delegates(di)
            ref = d.Processed()
            loc_inline = ref.Location() == 0  # DataLocation.INLINE
            if loc_inline:
                if ref.Index() >= prog.BackendDelegateDataLength():
                    raise InputError(f"{where}: delegate {di} inline data {ref.Index()} does not exist")
                blob = prog.BackendDelegateData(ref.Index())
                payload = _vector_bytes(blob, 4)
            else:
                payload = _segment(prog, data, base, ref.Index(), where)
            specs = []
            for si in range(d.CompileSpecsLength()):
                cs = d.CompileSpecs(si)
                val = _vector_bytes(cs, 6)
                specs.append((_s(cs.Key()), val))
            delegates.append(Delegate(di, _s(d.Id()), payload, tuple(specs)))
        inputs = tuple(int(ep.Inputs(i)) for i in range(ep.InputsLength()))
        outputs = tuple(int(ep.Outputs(i)) for i in range(ep.OutputsLength()))
        plans.append(Plan(_s(ep.Name()), values, inputs, outputs, tuple(calls), tuple(delegates)))
    return PteProgram(where, tuple(plans), _constant_reader(prog, data, base, where))


def _vector_bytes(obj: Any, field: int) -> bytes:
    """A [ubyte] field of a generated table as bytes (no numpy needed)."""
    o = obj._tab.Offset(field)
    if not o:
        return b""
    start, n = obj._tab.Vector(o), obj._tab.VectorLen(o)
    return bytes(obj._tab.Bytes[start : start + n])


def _constant_reader(prog: Any, data: bytes, base: int, where: str) -> Any:
    """data_buffer_idx → bytes: the constant segment (offsets) or the inline constant_buffer."""
    cs = prog.ConstantSegment()
    offsets = [int(cs.Offsets(i)) for i in range(cs.OffsetsLength())] if cs is not None else []

    def read(idx: int) -> bytes | None:
        if offsets and base and idx < len(offsets):
            seg = _segment(prog, data, base, cs.SegmentIndex(), where)
            end = offsets[idx + 1] if idx + 1 < len(offsets) else len(seg)
            return seg[offsets[idx] : end]
        if idx < prog.ConstantBufferLength():
            buf = prog.ConstantBuffer(idx)
            return _vector_bytes(buf, 4)
        return None

    return read


def _evalue(ev: Any, index: int, kernel_types: dict[int, str]) -> EValue:
    kind = kernel_types.get(ev.ValType(), "NONE")
    if kind == "NONE":
        return EValue(index, "Null")
    t = as_table(PROGRAM_NS, kind, ev.Val())
    if kind == "Tensor":
        st = t.ScalarType()
        sizes = tuple(int(t.Sizes(i)) for i in range(t.SizesLength()))
        return EValue(
            index,
            kind,
            None,
            SCALAR_TYPES.get(st, f"scalar_type_{st}"),
            sizes,
            t.DataBufferIdx() > 0,
            t.DataBufferIdx(),
        )
    if kind == "Int":
        return EValue(index, kind, int(t.IntVal()))
    if kind == "Double":
        return EValue(index, kind, float(t.DoubleVal()))
    if kind == "Bool":
        return EValue(index, kind, bool(t.BoolVal()))
    if kind == "String":
        return EValue(index, kind, _s(t.StringVal()))
    if kind in ("IntList", "DoubleList", "BoolList"):
        return EValue(index, kind, tuple(t.Items(i) for i in range(t.ItemsLength())))
    if kind in ("TensorList", "OptionalTensorList"):
        return EValue(index, kind, tuple(int(t.Items(i)) for i in range(t.ItemsLength())))
    return EValue(index, kind)


# --------------------------------------------------------------------------------------------
# Delegate boundaries
# --------------------------------------------------------------------------------------------


@dataclass
class PayloadIO:
    """What a delegate payload says about its IO: per input / output, the
    dtype it reads or writes and, when recorded, the domain of the codes
    (None: integer codes in a domain the payload does not state)."""

    inputs: list[tuple[str, Domain | None]] | None  # None: the payload's IO is not readable
    outputs: list[tuple[str, Domain | None]] | None
    artifact: str  # where it was read, for messages
    graph: DomainGraph | None = None  # the payload's own obligations (names relative to the delegate)
    #: Why an integer IO domain is unknown (the message of the unproven obligation).
    unknown_domain: str = ""
    #: The TOSA artifact validator checks this payload against the parent's anchors.
    anchored: bool = False
    #: For each payload input, the delegate call argument it reads (XNNPACK's external ids;
    #: None: the k-th). An argument no input reads (a lifted weight the payload holds as its
    #: own constant) is not the backend's to read.
    input_args: list[int] | None = None


def _tosa_io(payload: bytes) -> tuple[list[str], list[str]] | None:
    """Input and output tensor types of a TOSA flatbuffer, in block order."""
    names = tosa_io.io_names(payload)
    return None if names is None else ([t for _, t in names[0]], [t for _, t in names[1]])


def tosa_artifact_hook() -> Any:
    """The TOSA artifact validator module, or None while it is not installed (or has another API)."""
    try:
        mod = importlib.import_module(TOSA_ARTIFACT_HOOK)
    except ImportError:
        return None
    api = ("read", "Anchors", "validate", "add_evidence", "link_constants")  # (Anchors.partition_activations)
    return mod if all(hasattr(mod, a) for a in api) else None


_NO_VALIDATOR = (
    "the domain of a TOSA delegate's integer codes is set inside the TOSA flatbuffer (RESCALE, zero points); "
    f"its validator ({TOSA_ARTIFACT_HOOK}) is not installed, so it is not proved"
)


def _tosa_payload(d: Delegate) -> PayloadIO:
    io = _tosa_io(d.payload)
    if io is None:
        return PayloadIO(None, None, "TOSA flatbuffer (unreadable)")
    ins, outs = io
    return PayloadIO(
        [(t, None) for t in ins],
        [(t, FLOAT if t in ("float32", "float16", "bfloat16") else None) for t in outs],
        "TOSA flatbuffer",
        None,
        _NO_VALIDATOR,
    )


def _xnnpack_payload(d: Delegate, prefix: str) -> PayloadIO:
    from qflow.targets.xnnpack import payload as xnn

    g = xnn.read_payload(d.payload)
    ins = [(g.values[i].dtype, g.values[i].domain) for i in g.input_ids]
    outs = [(g.values[i].dtype, g.values[i].domain) for i in g.output_ids]
    return PayloadIO(
        ins,
        outs,
        "XNNPACK flatbuffer",
        xnn.domain_graph(g),
        "the XNNPACK tensor has no quantization parameters",
        input_args=[g.values[i].external_id for i in g.input_ids],
    )


def _vela_payload(d: Delegate, fed: list[str], declared: list[str]) -> PayloadIO:
    """Ethos-U: Vela's command stream states each IO tensor's element size, not
    its type or domain. A size that agrees with the program's dtype confirms it;
    another names the dtype the NPU really reads or writes."""
    sizes = io_elem_sizes(d.payload)
    if sizes is None or len(sizes["inputs"]) != len(fed) or len(sizes["outputs"]) != len(declared):
        return PayloadIO(None, None, "Vela command stream (unreadable)")

    def side(seen: list[str], ns: list[int]) -> list[tuple[str, Domain | None]]:
        return [
            (t if _ITEMSIZE.get(t) == n else ELEM_DTYPE.get(n, f"{n}-byte"), None)
            for t, n in zip(seen, ns, strict=True)
        ]

    return PayloadIO(
        side(fed, sizes["inputs"]),
        side(declared, sizes["outputs"]),
        "Vela command stream",
        None,
        "Vela's command stream records element sizes, not quantization domains",
    )


def payload_io(
    d: Delegate, prefix: str, fed: list[Domain | None], fed_dtypes: list[str], declared: list[str]
) -> PayloadIO:
    """Read a delegate's payload with the reader of its backend."""
    if d.backend_id == "XnnpackBackend":
        return _xnnpack_payload(d, prefix)
    if d.backend_id == "TOSABackend":
        return _tosa_payload(d)
    if d.backend_id == "EthosUBackend":
        return _vela_payload(d, fed_dtypes, declared)
    return PayloadIO(None, None, f"{d.backend_id} payload (no reader)")


# --------------------------------------------------------------------------------------------
# The domain graph
# --------------------------------------------------------------------------------------------

#: ExecuTorch's memory-planning view op and the dim-order copies are layout copies.
_ALIASES = {"et_view": "view_copy", "_clone_dim_order": "clone", "_to_dim_order_copy": "clone"}


def _compatible(a: str, b: str) -> bool:
    return a == b or {a, b} <= {"int8", "uint8"}


_ITEMSIZE = {"bool": 1, "int4": 1, "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2}
_ITEMSIZE |= {"bfloat16": 2, "float32": 4, "float64": 8}


def _factor(a: str, b: str) -> float:
    return _ITEMSIZE.get(a, 1) / _ITEMSIZE.get(b, 1)


def _returned(args: tuple[int, ...]) -> tuple[int, ...]:
    """The values a kernel call returns: ExecuTorch appends them after the out
    arguments they alias, so the longest repeated suffix (else the last arg)."""
    for k in range(len(args) // 2, 0, -1):
        if args[-2 * k : -k] == args[-k:]:
            return args[-k:]
    return args[-1:]


class _Builder:
    def __init__(self, prog: PteProgram, plan: Plan, prefix: str, reference: Any = None) -> None:
        self.prog, self.plan, self.prefix = prog, plan, prefix
        self.reference = reference
        self.dg = DomainGraph(form="lowered")
        self.names: dict[int, str] = {}
        self.counts: dict[str, int] = {}
        self.pending_tosa: list[tuple[Delegate, str, list[int], list[int]]] = []

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

    def tensors(self, args: tuple[int, ...]) -> list[int]:
        """Tensor value indices among args, TensorList items flattened, in order."""
        out = []
        for a in args:
            ev = self.ev(a)
            if ev.kind == "Tensor":
                out.append(a)
            elif ev.kind in ("TensorList", "OptionalTensorList"):
                out += [int(i) for i in ev.value if int(i) >= 0 and self.ev(int(i)).kind == "Tensor"]
        return out

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
        for call in self.plan.calls:
            if call.kind not in ("kernel", "delegate"):
                if call.kind in ("JumpFalseCall",):
                    raise InputError(f"{call.kind} (control flow) is not supported in a .pte yet", self._where(call))
                continue
            tens = self.tensors(call.args)
            if call.kind == "delegate":  # inputs, then the outputs it writes (never written before)
                outs = list(dict.fromkeys(t for t in tens if t not in defined))
            else:  # out-variant kernels end with their out arguments, then the same values returned
                outs = list(dict.fromkeys(self.tensors(_returned(call.args))))
            ins = [t for t in dict.fromkeys(tens) if t not in outs]
            if call.kind == "delegate":
                self.delegate(call, ins, outs)
            else:
                self.kernel(call, ins, outs)
            defined.update(outs)
        for pending in self.pending_tosa:
            self.tosa_artifact(*pending)
        self.dg.settle_inputs("integer program input")
        return self.dg

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
        is_float = bool(ev_out.dtype and ev_out.dtype.startswith(("float", "bfloat")))
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
        io = payload_io(
            d,
            prefix,
            [self.fed_domain(i) for i in ins],
            [self.ev(i).dtype or "?" for i in ins],
            [self.ev(i).dtype or "?" for i in outs],
        )
        call_name = self.add(
            None,
            prefix,
            f"executorch_call_delegate ({d.backend_id})",
            OpClass.DELEGATE,
            Definition(DefKind.FREE, reason="delegate call"),
        )
        if io.graph is not None:
            self.dg.absorb(io.graph, prefix)
        if d.backend_id == "TOSABackend" and io.inputs is not None and tosa_artifact_hook() is not None:
            io.anchored = True
            self.pending_tosa.append((d, call_name, ins, outs))
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
            ins = [i for k, i in enumerate(ins) if k in read]
            io.inputs = [read[k] for k in sorted(read)]
        for side, have, want in (("inputs", ins, io.inputs), ("outputs", outs, io.outputs)):
            if want is not None and len(want) != len(have):
                raise InputError(
                    f"delegate {di} ({d.backend_id}) is called with {len(have)} {side}, but its payload "
                    f"({io.artifact}) has {len(want)}",
                    self._where(call),
                )
        for k, i in enumerate(ins):
            self.delegate_input(call_name, d, k, i, io)
        for k, i in enumerate(outs):
            self.delegate_output(call_name, d, k, i, io)

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

    def delegate_output(self, call: str, d: Delegate, k: int, idx: int, io: PayloadIO) -> None:
        declared = self.ev(idx).dtype or "?"
        name = f"{call}/output_{k}"
        if io.outputs is None:
            produced, dom, where = declared, None, f"the program (no {d.backend_id} reader checks it)"
            reason = f"{d.backend_id} delegate output {k}: qflow has no reader for this payload"
        else:
            produced, dom = io.outputs[k]
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

    def tosa_artifact(self, d: Delegate, call: str, ins: list[int], outs: list[int]) -> None:
        """Hand a TOSA payload to the artifact validator, anchored at what the
        program states: the domain fed to each input, the dequantize of each
        output. An output whose edge check the validator decides takes the
        domain the parent reads (the check proves or refutes it)."""
        ta = tosa_artifact_hook()
        names = tosa_io.io_names(d.payload)
        assert ta is not None and names is not None
        inputs: dict[str, Domain | None] = {}
        for (name, _), i in zip(names[0], ins, strict=False):
            ev = self.ev(i)
            inputs[name] = FLOAT if (ev.dtype or "").startswith(("float", "bfloat")) else self.fed_domain(i)
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
        try:
            tosa = ta.read(d.payload)
            ref = self.reference
            anchors = ta.Anchors(inputs=inputs, outputs=outputs, consts={}, partition_activations=False)
            if ref is not None:
                anchors.consts = ta.link_constants(tosa, ref.constants)
                anchors.activations = list(ref.activations)
                anchors.partition_activations = self._lowers_every_activation()
            checks = ta.validate(tosa, anchors)
            ta.add_evidence(self.dg, call, call, checks)
        except Exception as e:  # the validator's API is not fixed yet: stay unproven, say why
            self.dg.notes.append(
                f"{call}: the TOSA artifact validator failed ({type(e).__name__}: {e}); IO domains unproven"
            )
            return
        for i, (dom, _) in zip(outs, outputs, strict=True):
            out = self.names.get(i)
            if out is not None and dom is not None and not dom.is_float:
                self.dg.value(out).definition = Definition(DefKind.FACT, dom, real=False)
        anchored = "the program's Q/DQ" + (f", {len(anchors.consts)} constants of the reference" if ref else "")
        self.dg.notes.append(f"{call}: TOSA artifact checked ({len(checks)} checks, anchored at {anchored})")


def build(prog: PteProgram | str | Path | bytes, reference: Any = None) -> DomainGraph:
    """The domain graph of every execution plan of a .pte (plans other than the
    only one are prefixed with their method name). `reference`: what the
    program it was lowered from declares (`tosa_artifact.Reference`): its
    quantized constants give the bare weight codes of a TOSA payload their
    scales, its activations are what a CLAMP may be."""
    if not isinstance(prog, PteProgram):
        prog = read_pte(prog)
    if len(prog.plans) == 1:
        dg = _Builder(prog, prog.plans[0], "", reference).build()
    else:
        dg = DomainGraph(form="lowered")
        for plan in prog.plans:
            dg.absorb(_Builder(prog, plan, "", reference).build(), plan.name)
    dg.notes.append(
        f"read from the ExecuTorch program {Path(prog.source).name}: "
        + "; ".join(
            f"{p.name}: {len(p.calls)} instructions, delegates "
            + (", ".join(f"{d.index} {d.backend_id} ({len(d.payload)} bytes)" for d in p.delegates) or "none")
            for p in prog.plans
        )
    )
    return dg
