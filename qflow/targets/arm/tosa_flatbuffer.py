"""Reading a TOSA flatbuffer (the Arm backend's delegate payload) with the classes tosa-tools
ships: its tensors (with constant data decoded) and operators, in block order."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

NUMPY_DTYPES = {"INT8": "<i1", "INT16": "<i2", "INT32": "<i4", "BOOL": "<u1", "FP32": "<f4", "FP16": "<f2"}
NUMPY_DTYPES["INT64"] = "<i8"
QDTYPES = {"INT8": "int8", "INT16": "int16", "INT32": "int32", "INT4": "int4", "INT48": "int48"}
QDTYPES |= {"FP32": "float32", "FP16": "float16", "BF16": "bfloat16", "BOOL": "bool"}


@dataclass(frozen=True)
class TosaTensor:
    name: str
    dtype: str  # the TOSA DType name: INT8, INT32, FP32, SHAPE, ...
    shape: tuple[int, ...]
    data: np.ndarray | None  # decoded constant data
    data_pos: int | None = None  # absolute byte offset of the data in the flatbuffer (for patching)


@dataclass(frozen=True)
class TosaOp:
    index: int
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class TosaRegion:
    """A region other than ``main``: a COND_IF branch, a WHILE_LOOP condition or body. Its
    tensors are in its program's `tensors` (the serializer suffixes them with the region's name)."""

    ops: tuple[TosaOp, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class TosaProgram:
    tensors: dict[str, TosaTensor]
    ops: tuple[TosaOp, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    regions: dict[str, TosaRegion] = field(default_factory=dict)

    def producer(self) -> dict[str, TosaOp]:
        return {o: op for op in self.ops for o in op.outputs}


def region_of(tensor: str, regions: Iterable[str]) -> str | None:
    """The region whose tensor `tensor` is (named ``<node>_<region>``; a nested cond's region is
    ``<outer region>__<subgraph>``, so the longest matching region is the one)."""
    return max((r for r in regions if tensor.endswith(f"_{r}")), key=len, default=None)


def region_module(gm: Any, region: str) -> Any:
    """The control-flow subgraph of `gm` a region was lowered from (``a__b``: `gm.a.b`), else None."""
    for part in region.split("__"):
        gm = getattr(gm, part, None)
    return gm


def _names(enum_cls: type) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_") and isinstance(v, int)}


def _decode(raw: np.ndarray | int, dtype: str, shape: tuple[int, ...]) -> np.ndarray | None:
    if isinstance(raw, np.ndarray) and dtype == "INT4":  # two per byte, the first in the low nibble
        b = np.frombuffer(raw.tobytes(), dtype=np.uint8)
        nibbles = np.stack([b & 0xF, b >> 4], axis=1).reshape(-1).astype(np.int64)
        return np.where(nibbles > 7, nibbles - 16, nibbles)[: int(np.prod(shape, dtype=np.int64))]
    if isinstance(raw, np.ndarray) and dtype == "INT48":  # 6-byte little-endian integers
        b = raw.tobytes()
        return np.array([int.from_bytes(b[i : i + 6], "little", signed=True) for i in range(0, len(b), 6)])
    if not isinstance(raw, np.ndarray) or dtype not in NUMPY_DTYPES:
        return None
    return np.frombuffer(raw.tobytes(), dtype=NUMPY_DTYPES[dtype]).astype(np.int64 if dtype != "FP32" else np.float64)


def _attrs(op: Any, attr_name: str) -> dict[str, Any]:
    tab = op.Attribute()
    if tab is None:
        return {}
    if attr_name == "RescaleAttribute":
        from tosa.RescaleAttribute import RescaleAttribute

        a = RescaleAttribute()
        a.Init(tab.Bytes, tab.Pos)
        return {
            "scale32": a.Scale32(),
            "rounding_mode": a.RoundingMode(),
            "per_channel": a.PerChannel(),
            "input_unsigned": a.InputUnsigned(),
            "output_unsigned": a.OutputUnsigned(),
        }
    if attr_name == "ClampAttribute":
        from tosa.ClampAttribute import ClampAttribute

        a = ClampAttribute()
        a.Init(tab.Bytes, tab.Pos)

        def vec(slot: int) -> tuple[bytes, int]:
            o = a._tab.Offset(slot)
            start = a._tab.Vector(o)
            return bytes(tab.Bytes[start : start + a._tab.VectorLen(o)]), start

        (lo, lo_pos), (hi, hi_pos) = vec(4), vec(6)
        return {"min_bytes": lo, "max_bytes": hi, "min_pos": lo_pos, "max_pos": hi_pos}
    if attr_name == "AvgPool2dAttribute":
        from tosa.AvgPool2dAttribute import AvgPool2dAttribute

        a = AvgPool2dAttribute()
        a.Init(tab.Bytes, tab.Pos)
        return {"pad": tuple(int(p) for p in a.PadAsNumpy()) if a.PadLength() else ()}
    if attr_name == "CondIfAttribute":
        from tosa.CondIfAttribute import CondIfAttribute

        a = CondIfAttribute()
        a.Init(tab.Bytes, tab.Pos)
        return {"then_graph": a.ThenGraph().decode(), "else_graph": a.ElseGraph().decode()}
    if attr_name == "WhileLoopAttribute":
        from tosa.WhileLoopAttribute import WhileLoopAttribute

        a = WhileLoopAttribute()
        a.Init(tab.Bytes, tab.Pos)
        return {"cond_graph": a.CondGraph().decode(), "body_graph": a.BodyGraph().decode()}
    if attr_name == "ResizeAttribute":
        from tosa.ResizeAttribute import ResizeAttribute

        a = ResizeAttribute()
        a.Init(tab.Bytes, tab.Pos)
        return {"mode": a.Mode()}
    return {}


def read(buf: bytes) -> TosaProgram:
    """Parse a TOSA 1.0 flatbuffer: the first block of each region, ``main`` first; the
    tensors of every region in one table."""
    from tosa.TosaGraph import TosaGraph

    graph = TosaGraph.GetRootAs(buf, 0)
    tensors: dict[str, TosaTensor] = {}
    blocks = [_block(graph.Regions(r).Blocks(0), tensors) for r in range(graph.RegionsLength())]
    names = [graph.Regions(r).Name().decode() for r in range(graph.RegionsLength())]
    regions = {n: TosaRegion(*b) for n, b in zip(names[1:], blocks[1:], strict=True)}
    return TosaProgram(tensors, *blocks[0], regions=regions)


def _block(blk: Any, tensors: dict[str, TosaTensor]) -> tuple[tuple[TosaOp, ...], tuple[str, ...], tuple[str, ...]]:
    """A block's operators, inputs and outputs; its tensors are added to `tensors`."""
    from tosa.Attribute import Attribute
    from tosa.DType import DType
    from tosa.Op import Op

    ops_n, dt_n, attr_n = _names(Op), _names(DType), _names(Attribute)
    for i in range(blk.TensorsLength()):
        t = blk.Tensors(i)
        dtype = dt_n.get(t.Type(), "UNKNOWN")
        raw = t.DataAsNumpy()
        pos = t._tab.Vector(t._tab.Offset(10)) if t.DataLength() else None
        shape = tuple(int(s) for s in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        tensors[t.Name().decode()] = TosaTensor(t.Name().decode(), dtype, shape, _decode(raw, dtype, shape), pos)
    for i in range(blk.ShapesLength()):
        s = blk.Shapes(i)
        raw = s.DataAsNumpy()
        data = np.frombuffer(raw.tobytes(), dtype="<i8").astype(np.int64) if isinstance(raw, np.ndarray) else None
        tensors[s.Name().decode()] = TosaTensor(s.Name().decode(), "SHAPE", (int(s.Rank()),), data)
    ops = []
    for i in range(blk.OperatorsLength()):
        o = blk.Operators(i)
        ins = tuple(o.Inputs(j).decode() for j in range(o.InputsLength()))
        outs = tuple(o.Outputs(j).decode() for j in range(o.OutputsLength()))
        ops.append(TosaOp(i, ops_n.get(o.Op(), f"op{o.Op()}"), ins, outs, _attrs(o, attr_n.get(o.AttributeType(), ""))))
    ins = tuple(blk.Inputs(i).decode() for i in range(blk.InputsLength()))
    outs = tuple(blk.Outputs(i).decode() for i in range(blk.OutputsLength()))
    return tuple(ops), ins, outs
