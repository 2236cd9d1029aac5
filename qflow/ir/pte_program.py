"""An ExecuTorch ``.pte`` as data: execution plans, their values and instructions, and each
delegate's payload bytes (inline or from a segment), read from the program flatbuffer.

Backend-blind and torch-free: the .pte reader (`qflow.integrations.pte`) builds the domain
graph from this, and each target reads its own delegates' payloads (`PayloadIO`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from qflow.errors import InputError
from qflow.ir.pte_tables import PROGRAM_NS, as_table, table, union_names

__all__ = ["ITEMSIZE", "SCALAR_TYPES", "Call", "Delegate", "EValue", "Plan", "PteProgram", "is_pte", "read_pte"]

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
_NUMPY = {"uint8": "u1", "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8", "float16": "f2"}
_NUMPY |= {"bfloat16": "u2", "float32": "f4", "float64": "f8"}
#: Bytes per element of each dtype (a delegate's IO checked against what the program declares).
ITEMSIZE = {"bool": 1, "int4": 1, "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2}
ITEMSIZE |= {"bfloat16": 2, "float32": 4, "float64": 8}


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
    #: Tensor: (memory id, offset) of its planned buffer; an elided view shares its base's
    memory: tuple[int, int] | None = None
    #: Tensor: the order its dimensions are stored in (a constant's data is in this order)
    dim_order: tuple[int, ...] = ()

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

    @property
    def returned(self) -> tuple[int, ...]:
        """The values a kernel call returns: ExecuTorch appends them after the out arguments
        they alias, so the longest repeated suffix (else the last argument)."""
        a = self.args
        for k in range(len(a) // 2, 0, -1):
            if a[-2 * k : -k] == a[-k:]:
                return a[-k:]
        return a[-1:]


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

    def tensors(self, args: tuple[int, ...]) -> list[int]:
        """Tensor value indices among `args`, TensorList items flattened, in order."""
        out = []
        for a in args:
            ev = self.value(a)
            if ev.kind == "Tensor":
                out.append(a)
            elif ev.kind in ("TensorList", "OptionalTensorList"):
                out += [int(i) for i in ev.value if int(i) >= 0 and self.value(int(i)).kind == "Tensor"]
        return out

    def value(self, i: int) -> EValue:
        if not 0 <= i < len(self.values):
            raise InputError(f"plan {self.name}: value index {i} out of range ({len(self.values)} values)")
        return self.values[i]


@dataclass(frozen=True)
class PteProgram:
    """What a .pte holds, as far as quantization domains go."""

    source: str
    plans: tuple[Plan, ...]
    constants: Any = field(default=None, repr=False, compare=False)  # callable(data_buffer_idx) -> bytes | None
    #: callable(key) -> bytes | None: the named data (where a delegate keeps constants, e.g. XNNPACK's
    #: weights and their scales), or None for a key the program does not carry.
    named_data: Any = field(default=None, repr=False, compare=False)

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

    def array(self, ev: EValue) -> np.ndarray | None:
        """A constant tensor's data in its sizes (a large table, where `tensor_data` would be slow), or None."""
        if not ev.constant or self.constants is None or ev.dtype not in _NUMPY:
            return None
        raw = self.constants(ev.data_buffer)
        dtype = np.dtype(_NUMPY[ev.dtype]).newbyteorder("<")
        if raw is None or len(raw) < dtype.itemsize * ev.numel:
            return None
        out = np.frombuffer(raw, dtype=dtype, count=ev.numel)
        if ev.dtype == "bfloat16":  # (the high half of a float32)
            out = (out.astype(np.uint32) << 16).view(np.float32)
        return out.reshape(ev.sizes)


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
    return PteProgram(
        where, tuple(plans), _constant_reader(prog, data, base, where), _named_data_reader(prog, data, base, where)
    )


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


def _named_data_reader(prog: Any, data: bytes, base: int, where: str) -> Any:
    """key → bytes of the segment the program's named data entry points to (None: no such key)."""
    index = {_s(nd.Key()): int(nd.SegmentIndex()) for nd in map(prog.NamedData, range(prog.NamedDataLength()))}

    def read(key: str) -> bytes | None:
        return _segment(prog, data, base, index[key], where) if key in index and base else None

    return read


def _evalue(ev: Any, index: int, kernel_types: dict[int, str]) -> EValue:
    kind = kernel_types.get(ev.ValType(), "NONE")
    if kind == "NONE":
        return EValue(index, "Null")
    t = as_table(PROGRAM_NS, kind, ev.Val())
    if kind == "Tensor":
        st = t.ScalarType()
        sizes = tuple(int(t.Sizes(i)) for i in range(t.SizesLength()))
        a = t.AllocationInfo()
        memory = (int(a.MemoryId()), int(a.MemoryOffsetHigh()) << 32 | int(a.MemoryOffsetLow())) if a else None
        return EValue(
            index,
            kind,
            None,
            SCALAR_TYPES.get(st, f"scalar_type_{st}"),
            sizes,
            t.DataBufferIdx() > 0,
            t.DataBufferIdx(),
            memory,
            tuple(int(t.DimOrder(i)) for i in range(t.DimOrderLength())),
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
