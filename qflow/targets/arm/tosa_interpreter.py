"""The abstract interpreter of TOSA 1.0 INT semantics: from the domains the PT2E program declares
at the anchors (`Activation`, `Anchors`), give every tensor of a `TosaProgram` its integer domain
and check that each operator's integer parameters realise the declared ones (the rules are in
`qflow.targets.arm.tosa_artifact`'s docstring)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from qflow.bounds import CodeErrors
from qflow.domain import DTYPE_RANGE, FLOAT, Domain
from qflow.targets.arm import PROBED_OFF_INT16
from qflow.targets.arm.tosa_flatbuffer import NUMPY_DTYPES, QDTYPES, TosaOp, TosaProgram, region_of


@dataclass(frozen=True)
class Activation:
    """A relu/hardtanh/clamp the PT2E program asks for, in its output domain."""

    node: str
    lo: float | None
    hi: float | None
    domain: Domain


@dataclass
class Anchors:
    """Domains the PT2E program declares, keyed by TOSA tensor names."""

    inputs: dict[str, Domain | None]  # TOSA input name → the domain the parent quantizes into
    outputs: list[tuple[Domain | None, str]]  # per TOSA output: (domain the parent reads, where that was read)
    consts: dict[str, Domain]  # constant tensor name → declared domain
    ops: dict[str, Any] = field(default_factory=dict)  # FX node name → callable target (for TABLE)
    node_in: dict[str, Domain] = field(default_factory=dict)  # FX node name → domain of its first input
    node_out: dict[str, Domain] = field(default_factory=dict)  # FX node name → its output domain
    activations: list[Activation] = field(default_factory=list)
    nodes: set[str] = field(default_factory=set)  # every FX node name of the partition
    raw: set[str] = field(default_factory=set)  # inputs that are plain integer data (nothing quantizes them)
    order: list[tuple[str, str]] = field(default_factory=list)  # (node, op base name) in graph order
    pad_values: dict[str, float] = field(default_factory=dict)  # constant pad node → its real pad value
    #: True: every activation listed is lowered here, so each that cuts into the code range must
    #: have its CLAMP (a partition's own; or a whole program all of whose activations this one
    #: delegate lowers). False: the list is a whole program's and some may run elsewhere (another
    #: delegate, the CPU): a CLAMP must still be one of them, but one without its CLAMP here is
    #: unproven, not missing; with no list at all (a .pte alone) every CLAMP is unproven
    partition_activations: bool = True
    #: INT+FP: a float input the delegate quantizes itself → the domain of that quantize
    float_inputs: dict[str, Domain] = field(default_factory=dict)
    #: INT+FP: the outputs the partition dequantizes as its last op (the float must be the real number)
    float_outputs: set[int] = field(default_factory=set)
    #: output index → (the factory op the partition returns (eye, ones, full), the integers it makes): Arm computes
    #: it ahead of time into a CONST, whose integers must be those
    made_outputs: dict[int, tuple[str, np.ndarray]] = field(default_factory=dict)
    #: constant → the distinct domains of the equal constants Arm's FuseEqualPlaceholdersPass merged
    #: into it (``<name>_common``), when they differ: the payload does not record which each use reads
    merged: dict[str, tuple[Domain, ...]] = field(default_factory=dict)
    #: FX node of a pass-through op → the domain of the requant after it that the partition drops
    #: (Arm's fold), when the program's own checks weigh that (its `requant-after-passthrough`
    #: obligation): the op's codes are expected in its input's domain and read on in this one, so the
    #: walk says so once there and goes on in this domain, not again at each op downstream
    dropped: dict[str, Domain] = field(default_factory=dict)
    #: FX node of a duplicate user Arm's FuseDuplicateUsersPass merges into another (in another domain) → that
    #: other, when the program's own `merged-duplicate-users` obligation weighs it: as `dropped`
    merged_users: dict[str, str] = field(default_factory=dict)
    #: FX node of an op lowered with its zero points only (TOSA NEGATE, AVG_POOL2D) → its declared output
    #: domain, when the program's own `dropped-scale` obligation weighs the input scale it keeps: as `dropped`
    scale_dropped: dict[str, Domain] = field(default_factory=dict)
    #: FX node name → the shape of its output (what a copy of the payload is matched to it by)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: FX node name → the (node, argument position) pairs that read its codes (through its Q / DQ)
    readers: dict[str, set[tuple[str, int]]] = field(default_factory=dict)


Scale = float | tuple[float, ...]


@dataclass(frozen=True)
class Dom:
    """The integer domain of a TOSA tensor. scale None: not known here."""

    dtype: str
    scale: Scale | None
    zp: int | None
    tol: float = 1e-6  # relative error the integer parameters on the path allow
    raw: bool = False  # plain integer data (no quantization anywhere): real = code
    narrow: str | None = None  # a wide (int32/int48) tensor's values came from this 8/16-bit dtype
    #: every code is `zp` (a RESCALE by 0): the values it stood for are within ± this (real units) of 0
    zero_within: float | None = None

    def domain(self) -> Domain | None:
        if self.scale is None or self.zp is None:
            return None
        lo, hi = CODE_RANGE.get(self.dtype, (0, 0))
        if isinstance(self.scale, tuple):
            return Domain.quantized(self.dtype, self.scale, (self.zp,) * len(self.scale), lo, hi, axis=-1)
        return Domain.quantized(self.dtype, self.scale, self.zp, lo, hi)

    def __str__(self) -> str:
        if self.scale is None:
            return f"{self.dtype} scale=? zp={self.zp}"
        if isinstance(self.scale, tuple):
            head = ", ".join(f"{s:.6g}" for s in self.scale[:2])
            more = ", …" if len(self.scale) > 2 else ""
            return f"{self.dtype} per-channel({len(self.scale)} ch) scale=[{head}{more}] zp={self.zp}"
        return f"{self.dtype} scale={self.scale:.6g} zp={self.zp}"


CODE_RANGE = {**DTYPE_RANGE, "int48": (-(2**47), 2**47 - 1)}  # (TOSA's 48-bit accumulator too)


_NARROW = {"int4", "int8", "uint8", "int16", "uint16"}


def _span(dtype: str | None) -> int | None:
    """The code range of an 8/16-bit dtype (None for wide ones)."""
    if dtype not in _NARROW:
        return None
    lo, hi = CODE_RANGE[dtype]  # type: ignore[index]
    return hi - lo


def _narrow_of(d: Dom) -> str | None:
    """The 8/16-bit dtype the values of `d` live in (their own, or the one they were widened from)."""
    return d.dtype if d.dtype in _NARROW else d.narrow


def _scale_ok(a: Scale, b: Scale, tol: float, span: int | None) -> bool:
    """Equal up to `tol`, or a hair apart: a relative difference that moves no
    code by more than one LSB over a code range of `span` (the graph checks'
    rule for zero-point-only ops: two observers of one range)."""
    if _close(a, b, tol):
        return True
    if span is None:
        return False
    xs = list(a) if isinstance(a, tuple) else None
    ys = list(b) if isinstance(b, tuple) else None
    if xs is None and ys is None:
        xs, ys = [float(a)], [float(b)]  # type: ignore[arg-type]
    elif xs is None:
        xs = [float(a)] * len(ys)  # type: ignore[arg-type]
    elif ys is None:
        ys = [float(b)] * len(xs)  # type: ignore[arg-type]
    if len(xs) != len(ys):
        return False
    return all(y != 0 and abs(x / y - 1.0) * span <= 1.0 for x, y in zip(xs, ys, strict=True))


def _same_dom(a: Dom, b: Dom) -> bool:
    """One domain up to the integer parameters' rounding (or a hair apart, as `_scale_ok`)."""
    if a.dtype != b.dtype or a.zp != b.zp or a.scale is None or b.scale is None:
        return False
    return _scale_ok(a.scale, b.scale, max(a.tol, b.tol, 1e-5), _span(a.dtype))


#: The kind of the check a copy gets where it realises a requant the partition drops (`Anchors.dropped`).
DROPPED = "requant-after-passthrough"
#: The kind of the check an op lowered with zero points only gets where it keeps a scale the partition drops.
SCALE_DROPPED = "dropped-scale"
#: The kind of the check a RESCALE gets where it reads a duplicate Arm merged into another (`Anchors.merged_users`).
MERGED = "merged-duplicate-users"


def _same_shape(a: tuple[int, ...] | None, b: tuple[int, ...]) -> bool:
    """One tensor's shape in two layouts: the same dims other than 1, in some order."""
    return a is not None and sorted(x for x in a if x != 1) == sorted(x for x in b if x != 1)


def _dom_of(d: Domain) -> Dom:
    zp = d.zero_point
    if isinstance(zp, tuple):
        zp = zp[0] if len(set(zp)) == 1 else None
    return Dom(d.dtype, d.scale, zp)


def describe(d: Domain | Dom | None) -> str:
    return "?" if d is None else str(d)


#: How far an int16 TABLE's interpolation may be off its op, in output LSB before its output's rounding: the
#: 2-code band within which the contract probe and the campaign count a backend's result as the fake-quantized
#: model's (a value under 2.5 LSB off the program's code rounds to at most 2 codes off it). Smooth ops'
#: tables, sigmoid / tanh, are 1-3 LSB off on some codes.
TABLE_BAND_LSB = 2.5

#: Why a constant the artifact holds has no domain (no anchor gave it one).
_UNANCHORED = "has no declared domain"


@dataclass(frozen=True)
class Check:
    """One obligation of the artifact: ok True (holds), False (violated) or
    None (qflow cannot decide: why is in `message`)."""

    ok: bool | None
    op: str
    index: int
    tensor: str  # the TOSA tensor the operator writes
    node: str  # the PT2E node it came from (nearest named tensor), or "?"
    message: str
    produced: Domain | None = None
    expected: Domain | None = None
    #: Undecided only because a constant has no declared domain: the weights of a
    #: payload read alone, which the program it was lowered from would give.
    needs_reference: bool = False
    #: Holds, but says something a user should see (an int16 TABLE's interpolation error): an info finding.
    inform: bool = False
    #: The finding kind, when not the artifact check's own (`tosa_artifact.KIND`).
    kind: str | None = None
    #: How far the op is off by input code (an int16 TABLE's interpolation), where it is.
    off_by_code: CodeErrors | None = None
    #: Undecided on the artifact alone, weighed by the partition's own obligation where the program's graph is
    #: analysed with it (an int16 result one code off, which only the ops after it can make many).
    graph_weighs: bool = False

    @property
    def where(self) -> str:
        node = f"; PT2E node {self.node}" if self.node != "?" else ""  # (a .pte read alone names none)
        return f"TOSA {self.op} #{self.index} ({self.tensor}{node})"


#: Copies that move elements without comparing them (a padded element stays one, or is sliced away).
_LAYOUT = frozenset({"RESHAPE", "TRANSPOSE", "SLICE", "IDENTITY"})
_COPY = {
    "RESHAPE",
    "TRANSPOSE",
    "SLICE",
    "TILE",
    "GATHER",
    "REVERSE",
    "MAX_POOL2D",
    "REDUCE_MAX",
    "REDUCE_MIN",
    "IDENTITY",
    "CLAMP",
}
_SAME_DOMAIN = {"ADD", "SUB", "MAXIMUM", "MINIMUM"}
#: what the Arm backend computes on int32 between rescales (InsertRescaleInt32Pass)
_INT32_ARITHMETIC = {"ADD", "SUB", "MUL", "REDUCE_SUM", "ABS", "MAXIMUM", "MINIMUM"}
_COMPARE = {"EQUAL", "GREATER", "GREATER_EQUAL"}
_CONV = {"CONV2D", "DEPTHWISE_CONV2D", "TRANSPOSE_CONV2D", "CONV3D"}
_NO_DATA = {"CONST", "CONST_SHAPE"}
#: Ops on the bits of integers: integer data in, integer data out; on codes they have no real meaning.
_BITWISE = {"BITWISE_AND", "BITWISE_OR", "BITWISE_XOR", "BITWISE_NOT", "LOGICAL_LEFT_SHIFT", "LOGICAL_RIGHT_SHIFT",
            "ARITHMETIC_RIGHT_SHIFT"}  # fmt: skip
#: Ops defined on integers only (the bitwise ones, integer division): integer data in, integer data out.
_INTEGER_ONLY = _BITWISE | {"INTDIV"}
_LOGICAL = {"LOGICAL_AND", "LOGICAL_OR", "LOGICAL_XOR", "LOGICAL_NOT"}
_AFFINE = {"ADD", "SUB", "MUL"}
_FLOAT = {"FP32", "FP16", "BF16"}

#: PT2E ops (base names) each TOSA operator is lowered from, for attribution only.
_PT2E_OPS = {
    "CONCAT": {"cat", "concatenate", "concat", "stack"},
    "CONV2D": {"convolution", "conv2d", "linear", "addmm"},
    "DEPTHWISE_CONV2D": {"convolution", "conv2d"},
    "TRANSPOSE_CONV2D": {"convolution", "conv_transpose2d"},
    "CONV3D": {"convolution", "conv3d"},
    "MATMUL": {"bmm", "mm", "matmul"},
    "ADD": {"add"},
    "SUB": {"sub"},
    "MUL": {"mul"},
    "NEGATE": {"neg"},
    "AVG_POOL2D": {"avg_pool2d", "adaptive_avg_pool2d", "mean"},
    "MAX_POOL2D": {"max_pool2d", "max_pool2d_with_indices"},
    "CLAMP": {"relu", "relu_", "hardtanh", "hardtanh_", "clamp", "relu6"},
    "PAD": {"constant_pad_nd", "pad"},
}

_SUFFIXES = (
    "_weight_ohwi",
    "_weight_hwicm",
    "_weight_hwcm",
    "_weight_odhwi",
    "_weight",
    "_table_constant",
    "_fused_const",
    "_bias",
)


def _fx_name(tensor: str, nodes: set[str], regions: Iterable[str] = ()) -> str | None:
    """The PT2E node a TOSA tensor name refers to (the Arm serializer names
    tensors after FX nodes, adding suffixes for rewritten constants, and the
    region's name to a region's tensors: ``<node>_<region>``, as `Anchors.nodes`
    names a subgraph's nodes)."""
    if tensor in nodes:
        return tensor
    region = f"_{r}" if (r := region_of(tensor, regions)) is not None else ""
    base = tensor.removesuffix(region) if region else tensor
    for s in _SUFFIXES:
        if base.endswith(s):
            base = base[: -len(s)]
    for cand in (base, base[2:] if base.startswith("b_") else base):
        if cand + region in nodes:
            return cand + region
    return None


def _close(a: Scale, b: Scale, tol: float) -> bool:
    aa = a if isinstance(a, tuple) else None
    bb = b if isinstance(b, tuple) else None
    if aa is None and bb is None:
        return math.isclose(float(a), float(b), rel_tol=tol)  # type: ignore[arg-type]
    xs = list(aa) if aa is not None else [a] * len(bb)  # type: ignore[arg-type]
    ys = list(bb) if bb is not None else [b] * len(aa)  # type: ignore[arg-type]
    return len(xs) == len(ys) and all(math.isclose(x, y, rel_tol=tol) for x, y in zip(xs, ys, strict=True))


def _uniform(s: tuple[float, ...], tol: float) -> Scale:
    return s[0] if all(math.isclose(x, s[0], rel_tol=tol) for x in s) else s


def _as_tuple(s: Scale) -> tuple[float, ...]:
    return s if isinstance(s, tuple) else (s,)


def _mul(a: Scale, b: Scale) -> Scale:
    if isinstance(a, tuple) or isinstance(b, tuple):
        n = len(a) if isinstance(a, tuple) else len(b)  # type: ignore[arg-type]
        xs = a if isinstance(a, tuple) else (a,) * n
        ys = b if isinstance(b, tuple) else (b,) * n
        return tuple(x * y for x, y in zip(xs, ys, strict=True))
    return a * b


class Interpreter:
    """Walks a TOSA program in order, giving each tensor a `Dom`, and records a
    `Check` per obligation."""

    def __init__(self, prog: TosaProgram, anchors: Anchors, seed: dict[str, Dom] | None = None) -> None:
        self.p, self.a = prog, anchors
        #: a region's inputs → the domains its COND_IF / WHILE_LOOP passes in (None: the main block)
        self.seed = seed
        self.dom: dict[str, Dom] = {}
        self.why: dict[str, str] = {}  # tensor → why its scale is unknown
        self.checks: list[Check] = []
        self.realised: dict[str, int] = {}  # the PT2E ops whose dropped requant a copy was matched to → its index
        self.clamps: list[tuple[TosaOp, Dom, int, int]] = []
        self.float_clamps: dict[str, tuple[float, float]] = {}  # float CLAMP output → its bounds
        #: float tensors computed from integer codes (a dequantize inside an INT+FP partition): their
        #: meaning must be known for an output to be proved, unlike a float computation's own results
        self.dequantized: set[str] = set()
        #: float tensors on the way from an input to the quantize the delegate applies to it → that input
        self.prologue: dict[str, str] = {}
        self._prod = prog.producer()
        self._cons: dict[str, list[TosaOp]] = {}
        for op in prog.ops:
            for i in op.inputs:
                self._cons.setdefault(i, []).append(op)

    # -- helpers ---------------------------------------------------------------
    def node_of(self, op: TosaOp) -> str:
        """The PT2E node `op` came from: an op of the same kind at the same
        position (the serializer numbers ``tosa_<op>_default_<k>`` in graph
        order), a RESCALE by the op it serves, else the nearest named tensor. A convolution is named
        by its weight, which Arm renames after it: depthwise and ordinary ones are numbered apart."""
        weight = self.constant_node(op.inputs[1]) if op.op in _CONV and len(op.inputs) > 1 else None
        if weight is not None and weight in dict(self.a.order):
            return weight
        found = self._by_position(op)
        if found is None and op.op == "RESCALE":
            prod = self._prod.get(op.inputs[0]) if op.inputs else None
            near = [prod] if prod is not None and prod.op not in ("RESCALE", "CONST") else []
            near += [c for o in op.outputs for c in self._cons.get(o, []) if c.op != "RESCALE"]
            found = next((n for c in near if (n := self._by_position(c)) is not None), None)
        return found or self._nearest(op)

    def constant_node(self, tensor: str) -> str | None:
        """The placeholder a constant tensor of the payload was serialized from (None: not one)."""
        return _fx_name(tensor, self.a.nodes, self.p.regions) if self._is_const(tensor) else None

    def _by_position(self, op: TosaOp) -> str | None:
        kinds = _PT2E_OPS.get(op.op)
        if not kinds or not op.outputs:
            return None
        m = re.fullmatch(r"tosa_[a-z0-9_]+?_default(?:_(\d+))?", op.outputs[0])
        if m is None:
            return _fx_name(op.outputs[0], self.a.nodes, self.p.regions)
        k = int(m.group(1) or 0)
        same = [n for n, base in self.a.order if base in kinds]
        return same[k] if k < len(same) else None

    def _nearest(self, op: TosaOp) -> str:
        seen: set[str] = set()
        frontier = [*op.outputs, *op.inputs]
        for _ in range(6):
            nxt: list[str] = []
            for t in frontier:
                if t in seen:
                    continue
                seen.add(t)
                n = _fx_name(t, self.a.nodes, self.p.regions)
                if n is not None and not n.startswith(("b__", "quantized_decomposed_")):
                    return n
                p = self._prod.get(t)
                if p is not None:
                    nxt += [*p.inputs]
                for c in self._cons.get(t, []):
                    nxt += [*c.outputs]
            frontier = nxt
        for t in [*op.outputs, *op.inputs]:
            n = _fx_name(t, self.a.nodes, self.p.regions)
            if n is not None:
                return n
        return "?"

    def check(
        self,
        op: TosaOp,
        ok: bool | None,
        msg: str,
        produced: Any = None,
        expected: Any = None,
        inform: bool = False,
        kind: str | None = None,
        off_by_code: CodeErrors | None = None,
        graph_weighs: bool = False,
    ) -> None:
        def as_domain(d: Any) -> Domain | None:
            return d.domain() if isinstance(d, Dom) else d

        self.checks.append(
            Check(ok, op.op, op.index, op.outputs[0] if op.outputs else "", self.node_of(op), msg,
                  as_domain(produced), as_domain(expected), needs_reference=ok is None and _UNANCHORED in msg,
                  inform=inform, kind=kind, off_by_code=off_by_code, graph_weighs=graph_weighs)
        )  # fmt: skip

    def data(self, name: str) -> np.ndarray | None:
        t = self.p.tensors.get(name)
        return None if t is None else t.data

    def scalar(self, name: str, unsigned: bool = False) -> int | None:
        d = self.data(name)
        if d is None or len(d) == 0:
            return None
        v = int(d[0])
        return v & 0xFF if unsigned and self.p.tensors[name].dtype == "INT8" else v

    def get(self, name: str) -> Dom:
        if name in self.dom:
            return self.dom[name]
        t = self.p.tensors.get(name)
        dtype = QDTYPES.get(t.dtype, t.dtype.lower()) if t is not None else "?"
        return Dom(dtype, None, None)

    def unknown(self, name: str, dtype: str, why: str) -> None:
        self.dom[name] = Dom(dtype, None, None)
        self.why[name] = why

    def out_dtype(self, op: TosaOp, unsigned: bool = False) -> str:
        t = self.p.tensors[op.outputs[0]]
        dt = QDTYPES.get(t.dtype, t.dtype.lower())
        return {"int8": "uint8", "int16": "uint16"}.get(dt, dt) if unsigned else dt

    def zp_check(self, op: TosaOp, what: str, got: int | None, src: Dom, src_name: str) -> None:
        if got is None:
            self.check(op, None, f"{what} is not a constant in the artifact")
        elif src.zp is None:
            self.check(
                op, None, f"the zero point of {src_name} is not known here ({self.why.get(src_name, 'no anchor')})"
            )
        else:
            ok = got == src.zp
            self.check(op, ok, f"{what} is {got}; its input {src_name} is in {src}", None, src)

    # -- the walk --------------------------------------------------------------
    def run(self) -> list[Check]:
        if self.seed is not None:
            self.dom.update(self.seed)
        for name in self.p.inputs if self.seed is None else ():
            t = self.p.tensors[name]
            d = self.a.inputs.get(name)
            if d is None or d.is_float:
                self.unknown(name, QDTYPES.get(t.dtype, t.dtype.lower()), f"graph input {name} has no anchor")
                if d is not None:
                    self.dom[name] = Dom("float32", 1.0, 0)
                if name in self.a.float_inputs:
                    self.prologue[name] = name
            else:
                self.dom[name] = replace(_dom_of(d), raw=name in self.a.raw)
        for op in self.p.ops:
            try:
                self._step(op)
            except (ValueError, IndexError, KeyError, TypeError) as e:  # a malformed operator: no verdict
                self.check(op, None, f"qflow cannot interpret {op.op} #{op.index}: {e}")
                for o in op.outputs:
                    self.unknown(
                        o, self.out_dtype(op) if o in self.p.tensors else "?", f"{op.op} #{op.index} unreadable"
                    )
        if self.seed is None:  # (a region's clamps and outputs are its COND_IF's / WHILE_LOOP's)
            self.activations()
            self.edges()
        return self.checks

    # -- control flow (TOSA-1.0+INT+cf) ---------------------------------------
    def region(self, name: str, args: tuple[str, ...]) -> Interpreter | None:
        """The region `name` walked with `args`' domains at its inputs; its checks and clamps
        become this walk's. None when the payload has no such region."""
        reg = self.p.regions.get(name)
        if reg is None or len(reg.inputs) != len(args):
            return None
        sub = Interpreter(replace(self.p, ops=reg.ops, inputs=reg.inputs, outputs=reg.outputs), self.a,
                          seed={r: self.get(a) for r, a in zip(reg.inputs, args, strict=True)})  # fmt: skip
        sub.why.update({r: self.why[a] for r, a in zip(reg.inputs, args, strict=True) if a in self.why})
        sub.run()
        self.checks += sub.checks
        self.clamps += sub.clamps
        return sub

    def _dtype(self, name: str) -> str:
        t = self.p.tensors.get(name)
        return QDTYPES.get(t.dtype, t.dtype.lower()) if t is not None else "?"

    def op_COND_IF(self, op: TosaOp) -> None:  # noqa: N802
        """Either branch may run: each output must be in one domain whichever branch wrote it."""
        names = (op.attrs.get("then_graph", ""), op.attrs.get("else_graph", ""))
        branches = [self.region(n, op.inputs[1:]) for n in names]
        for k, out in enumerate(op.outputs):
            dtype = self._dtype(out)
            if any(b is None for b in branches):
                self.unknown(out, dtype, f"COND_IF #{op.index}: a branch ({', '.join(names)}) is not in the payload")
                continue
            if self.p.tensors[out].dtype == "BOOL":
                continue
            written = [(b, b.p.outputs[k]) for b in branches if b is not None]
            doms = [b.get(o) for b, o in written]
            blind = next(((b, o) for (b, o), d in zip(written, doms, strict=True) if d.scale is None or d.zp is None),
                         None)  # fmt: skip
            if blind is not None:
                b, o = blind
                self.unknown(out, dtype, b.why.get(o, f"the domain of {o} is not known"))
                continue
            ok = _same_dom(doms[0], doms[1])
            msg = f"output {k}: the {names[0]} branch writes it in {doms[0]}, the {names[1]} branch in {doms[1]}"
            self.check(op, ok, f"{msg}; whichever runs, its consumers read one domain", doms[1], doms[0])
            if ok:
                self.dom[out] = replace(doms[0], tol=max(d.tol for d in doms))
            else:
                self.unknown(out, dtype, f"COND_IF #{op.index}: its branches write output {k} in different domains")

    def op_WHILE_LOOP(self, op: TosaOp) -> None:  # noqa: N802
        """The body's outputs are its next iteration's inputs: each loop variable must come back
        in the domain it went in (then that is also the loop's result, after any number of
        iterations); the condition region is checked with the same inputs."""
        cond = self.region(op.attrs.get("cond_graph", ""), op.inputs)
        body = self.region(op.attrs.get("body_graph", ""), op.inputs)
        for k, (arg, out) in enumerate(zip(op.inputs, op.outputs, strict=True)):
            dtype = self._dtype(out)
            d = self.get(arg)
            if cond is None or body is None:
                self.unknown(out, dtype, f"WHILE_LOOP #{op.index}: its condition or body is not in the payload")
                continue
            back = body.p.outputs[k]
            b = body.get(back)
            if d.scale is None or d.zp is None:
                self.unknown(out, dtype, self.why.get(arg, f"the domain of {arg} is not known"))
                continue
            if b.scale is None or b.zp is None:
                self.unknown(out, dtype, body.why.get(back, f"the domain of {back} is not known"))
                continue
            ok = _same_dom(d, b)
            self.check(op, ok, f"loop variable {k} ({arg}) enters the body in {d}, and the body writes it back "
                               f"({back}) in {b}: the next iteration reads those codes in {d}", b, d)  # fmt: skip
            if ok:
                self.dom[out] = replace(d, tol=max(d.tol, b.tol))
            else:
                self.unknown(out, dtype, f"WHILE_LOOP #{op.index}: loop variable {k} changes domain in the body")

    def _skipped_requant(self, op: TosaOp) -> None:
        """An int32-computed op reading a result no RESCALE brought to its declared 8/16-bit domain:
        another int32 op's (the Arm backend's FuseConsecutiveRescalesPass removed the pair that
        rounds and clamps it, `rescale_fusion`) or a conv's accumulator rescaled straight to int32
        (RewriteConvPass's int16 fork, `conv_widening`). Unproven: qflow does not bound the effect.
        (A sum over several dims is one PT2E op that Arm decomposes into a chain of REDUCE_SUMs.)"""
        for i in dict.fromkeys(op.inputs):
            src = self._unnarrowed_source(i)
            if src is None or src.op == op.op == "REDUCE_SUM":
                continue
            if src.op in _INT32_ARITHMETIC:
                how = (
                    f"the int32 result of {src.op} #{src.index}: the Arm backend's FuseConsecutiveRescalesPass removed "
                    "the rescales that round and clamp it"
                )
            else:
                how = (
                    f"the accumulator of {src.op} #{src.index} rescaled straight to int32 (the Arm backend's "
                    "RewriteConvPass forks int16 convs this way): the rescale that rounds and clamps it is skipped"
                )
            self.check(
                op,
                None,
                f"{op.op} #{op.index} reads {i}, {how} to its declared 8/16-bit domain, so it computes on a value up "
                "to half an LSB off that domain (more where the clamp would have cut); qflow does not bound what "
                "that does to the output",
                kind="skipped-requant",
            )

    def _unnarrowed_source(self, name: str) -> TosaOp | None:
        """The op whose quantized result the int32 tensor `name` carries without it ever having been
        narrowed to 8/16 bits: int32 arithmetic on rescaled codes, or a CONV / MATMUL accumulator
        rescaled to int32 — reached through copies and int32 → int32 rescales only."""
        for _ in range(16):
            t, p = self.p.tensors.get(name), self._prod.get(name)
            if t is None or t.dtype != "INT32" or p is None or not p.inputs:
                return None
            if p.op in _INT32_ARITHMETIC:
                return p if self._rescaled(p) else None
            src = self._prod.get(p.inputs[0])
            if p.op == "RESCALE" and src is not None and (src.op in _CONV or src.op == "MATMUL"):
                return src
            if p.op not in _COPY and p.op != "RESCALE":
                return None
            name = p.inputs[0]
        return None

    def _rescaled(self, op: TosaOp, depth: int = 8) -> bool:
        """Does `op` compute on codes a RESCALE brought to int32 (directly or through other int32
        arithmetic)? Integer data the program never quantized (an int32 clamp) has no requant to skip."""
        for i in op.inputs:
            p = self._prod.get(i)
            if p is not None and (
                p.op == "RESCALE" or (depth and p.op in _INT32_ARITHMETIC and self._rescaled(p, depth - 1))
            ):
                return True
        return False

    def _step(self, op: TosaOp) -> None:
        handler = getattr(self, f"op_{op.op}", None)
        if op.op in _INT32_ARITHMETIC or op.op in _COMPARE:
            self._skipped_requant(op)
        if op.op in _AFFINE and self.affine(op):
            return
        if op.op in _COMPARE and self._scalar_operand(op) is not None:
            self.dom[op.outputs[0]] = Dom("bool", 1.0, 0)  # a sign test of the boundary's rounding
            return
        if op.outputs and op.op not in ("CAST", "FLOOR", "CEIL", "SELECT", *_COPY) and self._float_compute(op):
            for o in op.outputs:
                self.unknown(o, self.out_dtype(op), f"{op.op} #{op.index} computes in float (not interpreted)")
                if any(i in self.dequantized for i in op.inputs):
                    self.dequantized.add(o)
            return
        if op.op in _COPY:
            self.copy(op)
        elif op.op in _SAME_DOMAIN:
            self.same_domain(op, op.outputs[0])
        elif op.op in _COMPARE:
            self.same_domain(op, None)
        elif op.op in _CONV:
            self.conv(op)
        elif handler is not None:
            handler(op)
        elif op.op in _INTEGER_ONLY and self._on_integer_data(op):
            self.dom[op.outputs[0]] = Dom(self.out_dtype(op), 1.0, 0, raw=True)
        elif op.op in _LOGICAL and all(self.get(i).dtype == "bool" for i in op.inputs):
            self.dom[op.outputs[0]] = Dom("bool", 1.0, 0)
        elif op.op not in _NO_DATA:
            for o in op.outputs:
                self.unknown(o, self.out_dtype(op), f"TOSA {op.op} #{op.index} is not interpreted by qflow")

    def _on_integer_data(self, op: TosaOp) -> bool:
        """Every input plain integer data, or an undeclared constant beside some (`x & 0x0F`: the program's literal),
        as `same_domain` reads a constant next to plain integers."""
        doms = [self.get(i) for i in op.inputs]
        return any(d.raw for d in doms) and all(
            d.raw or (d.scale is None and self._is_const(i, through_copies=True))
            for i, d in zip(op.inputs, doms, strict=True)
        )

    def op_CONST(self, op: TosaOp) -> None:  # noqa: N802 (TOSA op names)
        name = op.outputs[0]
        d = self.a.consts.get(name)
        t = self.p.tensors[name]
        if d is not None:
            self.dom[name] = _dom_of(d)
        elif name in self.a.merged:
            scales = ", ".join(f"{x.scale:.4g}" for x in self.a.merged[name] if isinstance(x.scale, float))
            self.unknown(name, QDTYPES.get(t.dtype, t.dtype.lower()),
                         f"constant {name} is several equal constants merged by Arm's FuseEqualPlaceholdersPass, "
                         f"declared in different domains (scales {scales}): which one each use reads is not "
                         "recorded in the payload")  # fmt: skip
        else:
            self.unknown(name, QDTYPES.get(t.dtype, t.dtype.lower()), f"constant {name} {_UNANCHORED}")

    def copy(self, op: TosaOp) -> None:
        src = self.get(op.inputs[0])
        self.dom[op.outputs[0]] = replace_dtype(src, self.out_dtype(op), keep_unsigned=True)
        self._dropped_requant(op)
        if op.inputs[0] in self.dequantized:
            self.dequantized.add(op.outputs[0])
        if op.inputs[0] in self.prologue:
            self.prologue[op.outputs[0]] = self.prologue[op.inputs[0]]
        if op.inputs[0] in self.why:
            self.why[op.outputs[0]] = self.why[op.inputs[0]]
        if op.op == "CLAMP" and self.p.tensors[op.inputs[0]].dtype in _FLOAT:
            lo, hi = (float(np.frombuffer(op.attrs[k], "<f4")[0]) for k in ("min_bytes", "max_bytes"))
            self.float_clamps[op.outputs[0]] = (lo, hi)
        elif op.op == "CLAMP":
            t = self.p.tensors[op.inputs[0]]
            fmt = NUMPY_DTYPES.get(t.dtype)
            lo = int(np.frombuffer(op.attrs["min_bytes"], fmt)[0]) if fmt and op.attrs.get("min_bytes") else None
            hi = int(np.frombuffer(op.attrs["max_bytes"], fmt)[0]) if fmt and op.attrs.get("max_bytes") else None
            if lo is not None and hi is not None and not src.raw:  # a clamp of plain integers is no activation
                self.clamps.append((op, src, lo, hi))
                same = [a for a in self.a.activations if _same_constant(a, lo, hi, src)]
                if same:  # one code, one value: the codes are in the activation's domain as much as in src's
                    mine = self.node_of(op)
                    act = next((a for a in same if a.node == mine), same[0])
                    self.dom[op.outputs[0]] = replace_dtype(_dom_of(act.domain), self.out_dtype(op))

    def _dropped_requant(self, op: TosaOp) -> None:
        """A copy of a PT2E op with a requant after it that the partition drops (`Anchors.dropped`): its
        codes stay in its input's domain and are read on in the requant's. That is the partition's own
        violation, weighed there: the walk records it once, as what it is, and goes on in the domain
        the program reads them in, so each op downstream is checked as a translation of the partition.
        The serializer does not name a copy after its PT2E op (a decomposition adds copies of its own):
        the copy is matched to the one such op whose input domain its codes are in, whose output has its
        shape (up to the layout's permutation) and one of whose readers an op after it came from. One copy can
        realise a chain of them (Arm merges an expand and the view after it into one RESHAPE:
        04057-tx-arm-custom), matched in turn, each the reader of the one before."""
        before: str | None = None
        while (before := self._dropped_requant_once(op, before)) is not None:
            pass

    def _dropped_requant_once(self, op: TosaOp, before: str | None) -> str | None:
        out = op.outputs[0]
        got, shape = self.dom[out], self.p.tensors[out].shape if out in self.p.tensors else None
        if not self.a.dropped or got.scale is None or got.zp is None or shape is None:
            return None
        like = [
            (v, want) for v, e in self.a.dropped.items()
            if not e.is_float and v not in self.realised and self._holds(out, got, shape, v, self.a.node_in.get(v))
            and not _same_dom(got, want := replace_dtype(_dom_of(e), got.dtype, keep_unsigned=True))
            and (before is None or (v, 0) in self.a.readers.get(before, set()))
        ]  # fmt: skip
        if len(like) != 1:
            return None
        (node, want), read_as = like[0], self.a.dropped[like[0][0]]
        self.realised[node] = op.index  # (once: codes requantized back into its input's domain are not its copy)
        self._walk_on_after_drop(op, node, f"copies codes in {got} that the program reads on in {describe(read_as)}: "
                                 f"the requant after {node} is dropped", read_as, want, DROPPED)  # fmt: skip
        return node

    def _holds(self, tensor: str, got: Dom, shape: tuple[int, ...], node: str, codes: Domain | None) -> bool:
        """Can `tensor` (codes in `got`, of `shape`) hold what PT2E `node` computes, its codes in `codes`: that
        domain, the node's shape (up to the layout's permutation), and read on by one of the node's readers?"""
        return (
            codes is not None and _same_dom(got, replace_dtype(_dom_of(codes), got.dtype, True))
            and _same_shape(self.a.shapes.get(node), shape) and self._read_by(tensor, self.a.readers.get(node, set()))
        )  # fmt: skip

    def _walk_on_after_drop(self, op: TosaOp, node: str, what: str, read_as: Domain, walk_on: Dom, kind: str) -> None:
        """The partition's own violation at `op` (weighed there): recorded once, as what it is, and the walk
        goes on in `walk_on`, the domain the program reads the codes in."""
        out = op.outputs[0]
        self.checks.append(
            Check(False, op.op, op.index, out, node, f"{op.op} #{op.index} {what}", self.dom[out].domain(), read_as,
                  kind=kind)
        )  # fmt: skip
        self.dom[out] = walk_on

    def _read_by(self, tensor: str, readers: set[tuple[str, int]]) -> bool:
        """Is `tensor` read, through copies, by an op that came from one of `readers` (a PT2E node and the
        argument it reads there; a RESCALE serves its op whatever argument it rescales)? A RESCALE that
        serves none of them is passed as a standalone requant (the readers follow those too)."""
        nodes = {n for n, _ in readers}
        frontier, seen = [tensor], set()
        while frontier:
            t = frontier.pop()
            if t in seen or len(seen) > 64:
                continue
            seen.add(t)
            for c in self._cons.get(t, []):
                node = None if c.op in _COPY else self.node_of(c)
                if node in nodes and (c.op == "RESCALE" or (node, c.inputs.index(t)) in readers):
                    return True
                if c.op in _COPY or c.op == "RESCALE":
                    frontier += c.outputs[:1]
        return False

    def op_CONCAT(self, op: TosaOp) -> None:  # noqa: N802
        self.same_domain(op, op.outputs[0])

    def op_SCATTER(self, op: TosaOp) -> None:  # noqa: N802
        """SCATTER(values_in, indices, input): codes of `values_in` and `input` copied (index_put)."""
        self.same_domain(replace(op, inputs=(op.inputs[0], op.inputs[2])), op.outputs[0])

    def same_domain(self, op: TosaOp, out: str | None) -> None:
        doms = [(i, self.get(i)) for i in op.inputs if self.p.tensors.get(i, None) is not None]
        doms = [(i, d) for i, d in doms if self.p.tensors[i].dtype != "BOOL"]
        if op.op == "SELECT":
            doms = doms[1:]
        zeros = [(i, d) for i, d in doms if d.zero_within is not None]
        doms = [(i, d) for i, d in doms if d.zero_within is None] or doms
        raw = next((d for _, d in doms if d.raw), None)
        if raw is not None:  # a constant next to plain integer data is plain integer data too
            doms = [(i, raw if d.scale is None and self._is_const(i, through_copies=True) else d) for i, d in doms]
        first_name, first = doms[0]
        for name, d in doms[1:]:
            if d.scale is None or first.scale is None or d.zp is None or first.zp is None:
                blocker = name if d.scale is None or d.zp is None else first_name
                self.check(op, None, f"inputs {first_name} and {name} must share a domain, but "
                                     f"{self.why.get(blocker, 'a scale is not known')}")  # fmt: skip
            else:
                spans = [_span(_narrow_of(x)) for x in (d, first)]
                span = None if None in spans else max(spans)  # type: ignore[type-var]
                ok = d.zp == first.zp and _scale_ok(d.scale, first.scale, max(d.tol, first.tol), span)
                self.check(op, ok, f"inputs must share one domain: {first_name} is in {first}, {name} in {d}", d, first)
        for name, z in zeros if doms[0][1].zero_within is None else ():
            self._added_zero(op, name, z, first_name, first)
        if out is not None:
            self.dom[out] = replace_dtype(first, self.out_dtype(op))
            if first_name in self.why:
                self.why[out] = self.why[first_name]
        else:
            for o in op.outputs:
                self.dom[o] = Dom("bool", 1.0, 0)

    def _added_zero(self, op: TosaOp, name: str, z: Dom, first_name: str, first: Dom) -> None:
        """`name` holds the zero a RESCALE by 0 wrote in place of values up to `z.zero_within`: within the rounding
        of `first`'s grid (half a code, as any RESCALE onto it) when those values are, an error when they are not."""
        if first.scale is None or first.zp is None:
            self.check(op, None, f"{name} is a RESCALE by 0, weighed on the grid of {first_name}, but "
                                 f"{self.why.get(first_name, 'its scale is not known')}")  # fmt: skip
            return
        codes = z.zero_within / min(_as_tuple(first.scale))  # type: ignore[operator]
        ok = z.zp == first.zp and codes <= 0.5
        self.check(op, ok, f"{name} is a RESCALE by 0 (zero point {z.zp}): the values it drops reach "
                           f"{z.zero_within:.6g}, {codes:.3g} codes of {first_name}'s grid ({first}); dropping them is "
                           "exact within half a code (the rounding of any RESCALE onto it)", None, first)  # fmt: skip

    def _is_const(self, name: str, through_copies: bool = False) -> bool:
        """A constant (`through_copies`: or a copy of one, a reshape of a pre-computed constant)."""
        return self._const_op(name, through_copies) is not None

    def _const_op(self, name: str, through_copies: bool = False) -> TosaOp | None:
        """The CONST that makes `name` (`through_copies`: or whose copy it is), if any."""
        p = self._prod.get(name)
        while through_copies and p is not None and p.op in _COPY and p.op != "CLAMP" and p.inputs:
            p = self._prod.get(p.inputs[0])
        return p if p is not None and p.op == "CONST" else None

    def op_SELECT(self, op: TosaOp) -> None:  # noqa: N802
        roots = {self.prologue.get(i) for i in op.inputs[1:]}
        if len(roots) == 1 and None not in roots:  # the rounding's two branches
            self.prologue[op.outputs[0]] = roots.pop()  # type: ignore[assignment]
        elif self._float_compute(op):
            self.unknown(op.outputs[0], self.out_dtype(op), f"SELECT #{op.index} of float values (not interpreted)")
            return
        self.same_domain(op, op.outputs[0])

    def op_RESCALE(self, op: TosaOp) -> None:  # noqa: N802
        x, mult, shift, in_zp_t, out_zp_t = op.inputs
        iu, ou = bool(op.attrs.get("input_unsigned")), bool(op.attrs.get("output_unsigned"))
        src = self.get(x)
        in_zp = self.scalar(in_zp_t, iu)
        out_zp = self.scalar(out_zp_t, ou)
        m, s = self.data(mult), self.data(shift)
        dtype = self.out_dtype(op, ou)
        if m is None or s is None or out_zp is None:
            self.zp_check(op, "RESCALE input_zp", in_zp, src, x)
            self.unknown(op.outputs[0], dtype, f"RESCALE #{op.index} has non-constant parameters")
            return
        ratios = tuple(float(a) / 2.0 ** int(b) for a, b in zip(m, s, strict=True))
        if all(r == 0 for r in ratios):
            self.zp_check(op, "RESCALE input_zp", in_zp, src, x)
            self._rescale_by_zero(op, src, x, in_zp, out_zp, dtype)
            return
        if any(r <= 0 for r in ratios):
            self.zp_check(op, "RESCALE input_zp", in_zp, src, x)
            self.check(op, False, f"RESCALE multiplier/shift {m.tolist()}/{s.tolist()} give a non-positive scale")
            self.unknown(op.outputs[0], dtype, f"RESCALE #{op.index} has a non-positive multiplier")
            return
        src = self._partition_violation_at_rescale(op, x, src, in_zp)
        out_zp = self.rescale_zp(op, in_zp, out_zp, ratios, src, x)
        scale32 = op.attrs.get("scale32", True)
        if not scale32 and src.dtype == "int48" and dtype == "int16" and not self._only_copied_out(op.outputs[0]):
            self.check(op, None, f"RESCALE #{op.index} of an INT48 accumulator into int16 with 16-bit multipliers "
                       f"{m.tolist()}/2^{s.tolist()} (scale32 false): the ratio within about 2^-15, so over the int16 "
                       "range its codes can be one off the program's; how far the ops after it carry that one code "
                       "only the program's graph says (analyze the lowered program)",
                       kind="rounded-twice", graph_weighs=True)  # fmt: skip
        tol = src.tol + (2.0**-30 if scale32 else 2.0**-14)
        narrow = None if dtype in _NARROW else _narrow_of(src)
        if src.scale is None:
            self.dom[op.outputs[0]] = Dom(dtype, None, out_zp, tol, narrow=narrow)
            self.why[op.outputs[0]] = self.why.get(x, f"the scale of {x} is not known")
            return
        n_in = len(src.scale) if isinstance(src.scale, tuple) else len(ratios)
        if len(ratios) == 1:
            scale: Scale = _mul(src.scale, 1.0 / ratios[0])
        elif n_in != len(ratios):
            self.check(op, False, f"RESCALE has {len(ratios)} per-channel ratios; its input {x} has {n_in} channels")
            self.unknown(op.outputs[0], dtype, f"RESCALE #{op.index}: channel count mismatch")
            return
        else:
            scale = _mul(src.scale, tuple(1.0 / r for r in ratios))
        if isinstance(scale, tuple):
            scale = _uniform(scale, tol + 1e-6)
        self.dom[op.outputs[0]] = Dom(dtype, scale, out_zp, tol, narrow=narrow)

    def _rescale_by_zero(self, op: TosaOp, src: Dom, x: str, in_zp: int | None, out_zp: int, dtype: str) -> None:
        """A RESCALE whose multiplier is 0 writes its output zero point everywhere: Arm's ADD / SUB of an operand
        below one step of the common grid (ops/test_sub.py's 1e31 with 0.25). It stands for 0 within the largest
        real value its input's codes can hold; `same_domain` weighs that against the grid it is added on."""
        self.unknown(op.outputs[0], dtype, f"RESCALE #{op.index} multiplies {x} by 0")
        narrow = _narrow_of(src)
        if src.scale is None or in_zp is None or narrow is None:
            return
        lo, hi = CODE_RANGE[narrow]
        largest = max(abs(lo - in_zp), abs(hi - in_zp)) * max(_as_tuple(src.scale))
        self.dom[op.outputs[0]] = Dom(dtype, None, out_zp, zero_within=largest)

    def _partition_violation_at_rescale(self, op: TosaOp, x: str, src: Dom, in_zp: int | None) -> Dom:
        """A RESCALE reading 8/16-bit codes with another zero point than theirs, where the partition's own
        violation put them in another domain than the one its op reads them in, and no copy of the payload
        said so: a dropped requant (`Anchors.dropped`) whose copy Arm removed (an expand or view to the shape
        it already has; 05158-tx-arm-custom: then four mismatches downstream, the walk in the wrong domain),
        or a duplicate Arm merged into another (`Anchors.merged_users`; 02172-tx-arm-custom). The RESCALE,
        the first op to see the codes, reads them in the dropped requant's domain, or the merged duplicate's
        own. Weighed in the partition: said once here, and the walk goes on in that domain. Matched by the
        domain the codes are in, the shape, the readers and the zero point the RESCALE reads with."""
        if not (self.a.dropped or self.a.merged_users) or in_zp is None or src.zp in (None, in_zp) or src.scale is None:
            return src
        shape = self.p.tensors[x].shape if x in self.p.tensors else None
        if _narrow_of(src) != src.dtype or shape is None:
            return src
        drops = [(v, self.a.node_in.get(v), e, DROPPED) for v, e in self.a.dropped.items() if v not in self.realised]
        merges = [(v, self.a.node_out.get(k), self.a.node_out.get(v), MERGED) for v, k in self.a.merged_users.items()]
        like = [
            (v, read_as, want, kind) for v, codes, read_as, kind in drops + merges
            if read_as is not None and not read_as.is_float and self._holds(x, src, shape, v, codes)
            and (want := replace_dtype(_dom_of(read_as), src.dtype, keep_unsigned=True)).zp == in_zp
        ]  # fmt: skip
        if len(like) != 1:
            return src
        node, read_as, want, kind = like[0]
        if kind == DROPPED:  # (once, as at a copy: codes requantized back into its input's domain are not its)
            self.realised[node] = op.index
        why = (
            f"the requant after {node} is dropped, and its copy with it" if kind == DROPPED
            else f"{node} is merged into {self.a.merged_users[node]} (FuseDuplicateUsersPass)"
        )  # fmt: skip
        self.checks.append(
            Check(False, op.op, op.index, x, node,
                  f"{op.op} #{op.index} reads codes in {src} as {describe(read_as)} (input_zp {in_zp}): {why}",
                  src.domain(), read_as, kind=kind)
        )  # fmt: skip
        return want

    def _only_copied_out(self, tensor: str) -> bool:
        """Does `tensor` reach nothing but the program's outputs, through copies? Then one code off in it is
        one code off in an output, the op's own contract."""
        readers = self._cons.get(tensor, [])
        if not readers:
            return tensor in self.p.outputs
        return all(r.op in _COPY and all(map(self._only_copied_out, r.outputs)) for r in readers)

    def rescale_zp(
        self, op: TosaOp, in_zp: int | None, out_zp: int, ratios: tuple[float, ...], src: Dom, x: str
    ) -> int | None:
        """The zero point of a RESCALE's output. RESCALE computes
        round((c - in_zp)·r) + out_zp; with the input in zero point z that is
        round((c - z)·r) + out_zp + r·(z - in_zp): an input_zp other than z is
        exact iff r·(z - in_zp) is a whole number k of output codes (the same
        for every channel), and the output's zero point is then out_zp + k. The
        bilinear RESIZE → RESCALE pair of the Arm backend is such a case. Only
        wide (int32/int48) inputs get this reading: an 8/16-bit tensor is read
        with its own zero point, so another one is reported at the RESCALE
        (seed 000's concat), not where the shifted codes surface."""
        if in_zp is None or src.zp is None or in_zp == src.zp or _narrow_of(src) == src.dtype:
            # an 8/16-bit input is read with its own zero point: another one is the defect, named here
            self.zp_check(op, "RESCALE input_zp", in_zp, src, x)
            return out_zp if in_zp is not None else None
        ks = [r * (src.zp - in_zp) for r in ratios]
        whole = {round(k) for k in ks}
        if len(whole) == 1 and all(abs(k - round(k)) <= 1e-6 * max(1.0, abs(k)) for k in ks):
            k = whole.pop()
            self.check(op, True, f"RESCALE input_zp is {in_zp}; its input {x} is in {src}: the difference "
                                 f"moves the output codes by a whole {k} (output zero point {out_zp + k})",
                       None, src)  # fmt: skip
            return out_zp + k
        shown = ", ".join(f"{k:.4g}" for k in ks[:3]) + (", …" if len(ks) > 3 else "")
        self.check(op, False, f"RESCALE input_zp is {in_zp}; its input {x} is in {src}: the difference moves the "
                              f"output codes by {shown} codes, not a whole number", None, src)  # fmt: skip
        return out_zp

    def conv(self, op: TosaOp) -> None:
        x, w, b, in_zp_t, w_zp_t = op.inputs[:5]
        src, wd, bd = self.get(x), self.get(w), self.get(b)
        self.zp_check(op, f"{op.op} input_zp", self.scalar(in_zp_t), src, x)
        self.zp_check(op, f"{op.op} weight_zp", self.scalar(w_zp_t), wd, w)
        self.accumulate(op, src, x, wd, w)
        acc = self.dom[op.outputs[0]]
        zero = (d := self.data(b)) is not None and d.size > 0 and not d.any()
        if zero:  # (a bias of zeros is zero in every domain: Arm adds one to a convolution without a bias)
            self.check(op, True, f"the bias {b} is all zeros", None, acc)
        elif acc.scale is not None and bd.scale is not None:
            ok = bd.zp == 0 and _close(bd.scale, acc.scale, max(acc.tol, 1e-5))
            self.check(op, ok, f"the bias {b} must be in the accumulator's domain {acc}; it is in {bd}", bd, acc)

    def accumulate(self, op: TosaOp, a: Dom, an: str, b: Dom, bn: str) -> None:
        out = op.outputs[0]
        dtype = self.out_dtype(op)
        if a.scale is None or b.scale is None:
            blocker = an if a.scale is None else bn
            self.unknown(out, dtype, self.why.get(blocker, f"the scale of {blocker} is not known"))
            return
        na, nb = (len(x) if isinstance(x, tuple) else 1 for x in (a.scale, b.scale))
        if na > 1 and nb > 1 and na != nb:
            self.check(op, False, f"per-channel scales of {an} ({na} channels) and {bn} ({nb}) do not line up")
            self.unknown(out, dtype, f"{op.op} #{op.index}: channel counts differ")
            return
        self.dom[out] = Dom(dtype, _mul(a.scale, b.scale), 0, a.tol + b.tol)

    def op_MATMUL(self, op: TosaOp) -> None:  # noqa: N802
        a, b, a_zp, b_zp = op.inputs[:4]
        da, db = self.get(a), self.get(b)
        self.zp_check(op, "MATMUL A_zp", self.scalar(a_zp), da, a)
        self.zp_check(op, "MATMUL B_zp", self.scalar(b_zp), db, b)
        self.accumulate(op, da, a, db, b)

    def op_MUL(self, op: TosaOp) -> None:  # noqa: N802
        a, b = op.inputs[:2]
        shift = self.scalar(op.inputs[2]) if len(op.inputs) > 2 else 0
        da, db = self.get(a), self.get(b)
        if da.raw or db.raw:  # (plain integers, e.g. gather offsets: a constant beside them is plain too)
            plain = [d.scale is None and self._is_const(n, through_copies=True) for n, d in ((a, da), (b, db))]
            da, db = (Dom(d.dtype, 1.0, 0, raw=True) if p else d for p, d in zip(plain, (da, db), strict=True))
        for n, d in ((a, da), (b, db)):
            if d.zp is not None and d.dtype == "int32":
                self.check(op, d.zp == 0, f"MUL reads {n} as int32 codes with zero point 0; it is in {d}", d)
        self.accumulate(op, da, a, db, b)
        if da.raw and db.raw:
            self.dom[op.outputs[0]] = replace(self.dom[op.outputs[0]], raw=True)
        out = self.dom[op.outputs[0]]
        if out.scale is not None and shift is not None:
            self.dom[op.outputs[0]] = Dom(out.dtype, _mul(out.scale, 2.0**shift), 0, out.tol)

    def _zp_only(self, op: TosaOp, in_zp_t: str, out_zp_t: str) -> None:
        """AVG_POOL2D and NEGATE apply two zero points and keep the scale. Both
        commute with a shift of the codes, so the output zero point is
        out_zp ± (src zp − in_zp); only padded cells (read as in_zp) need
        in_zp to be the input's zero point."""
        x = op.inputs[0]
        src = self.get(x)
        in_zp, out_zp = self.scalar(in_zp_t), self.scalar(out_zp_t)
        if op.op == "AVG_POOL2D" and any(op.attrs.get("pad", ())):
            self.zp_check(op, "AVG_POOL2D input_zp (padded cells)", in_zp, src, x)
        zp = None
        if in_zp is not None and out_zp is not None and src.zp is not None:
            zp = out_zp + src.zp - in_zp if op.op == "AVG_POOL2D" else out_zp + in_zp - src.zp
        self.dom[op.outputs[0]] = Dom(self.out_dtype(op), src.scale, zp, src.tol, narrow=src.narrow)
        if zp is None:
            self.why[op.outputs[0]] = self.why.get(x, f"{op.op} #{op.index}: zero points not known")
        elif x in self.why:
            self.why[op.outputs[0]] = self.why[x]
        self._dropped_scale(op)

    def _dropped_scale(self, op: TosaOp) -> None:
        """An op whose declared output scale the partition drops (`Anchors.scale_dropped`): it keeps its
        input's scale, with the declared zero point. That is the partition's own violation, weighed there:
        recorded once, as what it is, and the walk goes on in the domain the program reads the codes in."""
        node = self.node_of(op)
        want, got = self.a.scale_dropped.get(node), self.dom[op.outputs[0]]
        if want is None or want.is_float or got.zp is None or got.zp != want.zero_point:
            return
        declared = replace_dtype(_dom_of(want), got.dtype, keep_unsigned=True)
        if got.scale is not None and declared.scale is not None and not _close(got.scale, declared.scale, 1e-5):
            # (even a hair apart: the ops after it are checked on the declared scale, a bias within 1e-5 of it)
            what = f"keeps the scale of its input, {got}, where the program declares {describe(want)}: it is dropped"
            self._walk_on_after_drop(op, node, what, want, declared, SCALE_DROPPED)

    def op_AVG_POOL2D(self, op: TosaOp) -> None:  # noqa: N802
        self._zp_only(op, op.inputs[1], op.inputs[2])

    def op_NEGATE(self, op: TosaOp) -> None:  # noqa: N802
        self._zp_only(op, op.inputs[1], op.inputs[2])

    def op_PAD(self, op: TosaOp) -> None:  # noqa: N802
        """The pad constant is the pad value quantized in the input's domain (the
        backend quantizes it with the pad's input qparams); 0 pads with the zero point."""
        x = op.inputs[0]
        src = self.get(x)
        node = self._by_position(op)
        value = self.a.pad_values.get(node or "")
        if len(op.inputs) > 2 and self.p.tensors[x].dtype.startswith("INT"):
            got = self.scalar(op.inputs[2])
            if value is None and self._only_max_pooled(op.outputs[0]):  # (Arm's dilated max pool: measured exact)
                low = CODE_RANGE.get(src.dtype, (None,))[0]
                self.check(op, got == low, f"PAD pad_const is {got}; padding a max pool (as -inf) is code {low}")
            elif value is None or value == 0.0 or got is None or src.zp is None or src.scale is None:
                self.zp_check(op, "PAD pad_const", got, src, x)
            else:
                doms = (src.domain(), self.a.node_in.get(node or ""))
                want = {_quantize(value, d) for d in doms if d is not None and not d.per_channel}
                self.check(op, got in want, f"PAD pad_const is {got}; {node} pads with {value:g}, code "
                                            f"{' or '.join(map(str, sorted(want)))} in {src}", None, src)  # fmt: skip
        self.dom[op.outputs[0]] = src
        if x in self.why:
            self.why[op.outputs[0]] = self.why[x]

    def _only_max_pooled(self, tensor: str) -> bool:
        """Does every op that reads `tensor`, through copies, take a MAX_POOL2D of it? (Then no padded element
        ever wins a window against a real one: the program's max pool pads with -inf.)"""
        frontier, seen = [tensor], set()
        while frontier:
            t = frontier.pop()
            if t in seen or len(seen) > 64:
                return False
            seen.add(t)
            readers = self._cons.get(t, [])
            if not readers or any(c.op not in _LAYOUT and c.op != "MAX_POOL2D" for c in readers):
                return False
            frontier += [c.outputs[0] for c in readers if c.op in _LAYOUT]
        return True

    def op_REDUCE_SUM(self, op: TosaOp) -> None:  # noqa: N802
        src = self.get(op.inputs[0])
        if src.zp is not None:
            self.check(op, src.zp == 0, f"REDUCE_SUM adds codes: its input must have zero point 0; it is in {src}", src)
        self.copy(op)

    def op_ARGMAX(self, op: TosaOp) -> None:  # noqa: N802
        """ARGMAX compares codes: the index of the largest real number, ties included (dequantizing
        is strictly increasing), when one positive scale covers the axis. Its output is an index."""
        src = self.get(op.inputs[0])
        if src.scale is None or src.zp is None:
            self.check(op, None, f"ARGMAX of {op.inputs[0]}: {self.why.get(op.inputs[0], 'its domain is not known')}")
        elif not src.raw:
            ok = not isinstance(src.scale, tuple) or len(set(src.scale)) == 1
            self.check(op, ok, f"ARGMAX compares codes across its axis: they must share one scale; {src}", src)
        self.dom[op.outputs[0]] = Dom(self.out_dtype(op), 1.0, 0, raw=True)

    def op_ABS(self, op: TosaOp) -> None:  # noqa: N802
        """ABS takes |code|: the real |x| only when the zero point is 0 (the Arm
        backend rescales abs inputs to int32 with zero point 0 first)."""
        src = self.get(op.inputs[0])
        if src.zp is not None:
            self.check(op, src.zp == 0, f"ABS takes |code|: its input must have zero point 0; it is in {src}", src)
        self.copy(op)

    def op_CAST(self, op: TosaOp) -> None:  # noqa: N802
        x, out = op.inputs[0], op.outputs[0]
        src_t, dst_t = self.p.tensors[x].dtype, self.p.tensors[out].dtype
        src = self.get(x)
        if src_t.startswith("INT") and dst_t.startswith("INT") or dst_t in _FLOAT:
            self.copy(op)  # the values are kept: v = r/s + z holds with the same s, z
            if dst_t in _FLOAT and (src_t not in _FLOAT or x in self.dequantized):
                self.dequantized.add(out)
        elif src_t in _FLOAT and x in self.prologue and src.scale is not None and src.zp is not None:
            self.quantize_cast(op, src, self.a.float_inputs[self.prologue[x]])
        elif src_t == "BOOL" and dst_t.startswith("INT"):  # (a mask's 0 / 1 as integers: plain integer data)
            self.dom[out] = Dom(self.out_dtype(op), 1.0, 0, raw=True)
        else:
            self.unknown(out, self.out_dtype(op), self.why.get(x, f"CAST {src_t} → {dst_t}: its input is not known"))

    def quantize_cast(self, op: TosaOp, src: Dom, want: Domain) -> None:
        """The end of the quantize an INT+FP delegate applies to a float input:
        the values must be rounded onto whole codes (z a whole number), clamped
        to the quantize's code range, and be the codes of its domain."""
        x, out = op.inputs[0], op.outputs[0]
        dtype = self.out_dtype(op)
        z = float(src.zp)  # type: ignore[arg-type]
        if abs(z - round(z)) > 1e-3:
            self.check(op, False, f"CAST to {dtype} of {x}: its values are codes offset by {z - round(z):+.3g} "
                                  "of a code (the rounding before it is missing or moved)")  # fmt: skip
        bounds = self.float_clamps.get(x)
        if bounds is None:
            self.check(op, None, f"CAST to {dtype} of {x}: no CLAMP to the code range before it")
        else:
            ok = bounds == (want.qmin, want.qmax)
            self.check(op, ok, f"the CLAMP before the CAST to {dtype} keeps [{bounds[0]:g}, {bounds[1]:g}]; "
                               f"the quantize's code range is [{want.qmin}, {want.qmax}]")  # fmt: skip
        got = Dom(dtype, src.scale, int(round(z)), src.tol)
        self.check(op, _same_grid(want, got) and got.dtype == want.dtype,
                   f"the delegate quantizes its float input into {got}; the partition quantizes it into {want}",
                   got, want)  # fmt: skip
        self.dom[out] = got

    # -- INT+FP: the boundary quantize / dequantize as float arithmetic inside the delegate --
    def _scalar(self, name: str) -> float | None:
        """The value of a one-element constant no declaration anchors."""
        if not self._is_const(name) or name in self.a.consts:
            return None
        d = self.data(name)
        return float(d[0]) if d is not None and d.size == 1 else None

    def _scalar_operand(self, op: TosaOp) -> tuple[str, float] | None:
        """(the tensor, the constant) of a float op with one scalar constant operand."""
        a, b = op.inputs[:2]
        if self.p.tensors[a].dtype not in _FLOAT and self.p.tensors[op.outputs[0]].dtype not in _FLOAT:
            return None
        if (k := self._scalar(b)) is not None:
            return a, k
        if op.op not in ("SUB", *_COMPARE) and (k := self._scalar(a)) is not None:
            return b, k
        return None

    def affine(self, op: TosaOp) -> bool:
        """ADD / SUB / MUL of a value v = r/s + z (r the real number) by a scalar
        constant, in float (or int32: the dequantize's "− zp"): a new (s, z).
        The float arithmetic Arm emits for an INT+FP partition's boundary:
        quantize = x·(1/s), round, + zp, clamp, cast; dequantize = cast, − zp,
        cast, ·s. False: not this shape (the ordinary rules apply)."""
        a, b = op.inputs[:2]
        pair = self._scalar_operand(op)
        if pair is None and op.op != "MUL" and self._to_float(op.outputs[0]):  # the dequantize's "− zp"
            k = self._scalar(b)
            pair = (a, k) if k is not None and float(k).is_integer() else None
        if pair is None:
            return False
        x, k = pair
        if self.p.tensors[x].dtype in _FLOAT and x not in self.prologue and x not in self.dequantized:
            return False  # float compute of the model itself, not a boundary quantize / dequantize
        src = self.get(x)
        if x in self.prologue:
            self.prologue[op.outputs[0]] = self.prologue[x]
        else:
            self.dequantized.add(op.outputs[0])
        if src.scale is None or src.zp is None:
            self.unknown(op.outputs[0], self.out_dtype(op), self.why.get(x, f"{op.op} #{op.index}: input not known"))
            return True
        s, z = src.scale, float(src.zp)
        if op.op == "MUL":
            shift = self.scalar(op.inputs[2]) if len(op.inputs) > 2 else 0
            if k == 0 or shift:
                self.unknown(op.outputs[0], self.out_dtype(op), f"MUL #{op.index} by {k:g} (shift {shift})")
                return True
            s, z = _mul(s, 1.0 / k), z * k
        else:
            z = z + k if op.op == "ADD" else z - k
        zp: Any = int(z) if float(z).is_integer() else z  # a half-code offset on the way to the rounding
        self.dom[op.outputs[0]] = Dom(self.out_dtype(op), s, zp, src.tol + 1e-7)  # float32 arithmetic
        return True

    def _float_compute(self, op: TosaOp) -> bool:
        """An op on float values that is no part of a boundary quantize / dequantize."""
        ins = [i for i in op.inputs if i in self.p.tensors and not self._is_const(i)]
        return any(self.p.tensors[i].dtype in _FLOAT for i in ins) and not any(i in self.prologue for i in ins)

    def _to_float(self, name: str) -> bool:
        """An int32 tensor read only by CASTs to float: the middle of a dequantize
        (an integer ADD/SUB of a constant elsewhere computes a new value, not a new z)."""
        users = self._cons.get(name, [])
        return (
            self.p.tensors[name].dtype == "INT32"
            and bool(users)
            and all(u.op == "CAST" and self.p.tensors[u.outputs[0]].dtype in _FLOAT for u in users)
        )

    def op_FLOOR(self, op: TosaOp) -> None:  # noqa: N802
        self._round(op, -0.5)

    def op_CEIL(self, op: TosaOp) -> None:  # noqa: N802
        self._round(op, 0.5)

    def _round(self, op: TosaOp, shift: float) -> None:
        """FLOOR lands half a code below on average, CEIL half above: with the
        ± 0.5 before them they are TOSA's round half away from zero, and z is
        back on the codes; without, z is off by half a code."""
        x = op.inputs[0]
        src = self.get(x)
        if x in self.prologue:
            self.prologue[op.outputs[0]] = self.prologue[x]
        if src.scale is None or src.zp is None or x not in self.prologue:
            self.copy(op)
            return
        z = float(src.zp) + shift
        self.dom[op.outputs[0]] = Dom(src.dtype, src.scale, int(z) if z.is_integer() else z, src.tol)  # type: ignore[arg-type]

    def op_RESIZE(self, op: TosaOp) -> None:  # noqa: N802
        src = self.get(op.inputs[0])
        if op.attrs.get("mode") == 1:  # NEAREST copies codes
            self.copy(op)
            return
        # TOSA 1.0 integer BILINEAR: acc = Σ v·w over the four neighbours (no zero point), with
        # weights that sum to scale_y_n·scale_x_n: n·(the interpolated code), zero point included
        sc = self.data(op.inputs[1]) if len(op.inputs) > 1 else None
        if sc is None or len(sc) < 4 or src.scale is None or src.zp is None:
            self.unknown(op.outputs[0], self.out_dtype(op), f"bilinear RESIZE #{op.index}: scale not readable")
            return
        n = int(sc[0]) * int(sc[2])
        self.dom[op.outputs[0]] = Dom(
            self.out_dtype(op), _mul(src.scale, 1.0 / n), src.zp * n, src.tol, narrow=_narrow_of(src)
        )

    def op_TABLE(self, op: TosaOp) -> None:  # noqa: N802
        x, table = op.inputs[:2]
        out = op.outputs[0]
        src = self.get(x)
        node = self._table_node(table, src)
        if node is None and table.endswith("_common"):
            node = self._shared_table_use(table, src)
        dom_in, dom_out = self.a.node_in.get(node or ""), self.a.node_out.get(node or "")
        fn = self.a.ops.get(node or "")
        dtype = self.out_dtype(op)
        if node is None or dom_in is None or dom_out is None or fn is None:
            self.check(op, None, f"TABLE {table}: the op it tabulates and its domains are not declared")
            self.unknown(out, dtype, f"TABLE #{op.index} has no declared output domain")
            return
        if src.scale is not None and src.zp is not None:
            ok = src.zp == dom_in.zero_point and _scale_ok(src.scale, dom_in.scale, src.tol, _span(dom_in.dtype))  # type: ignore[arg-type]
            self.check(op, ok, f"TABLE reads codes in {src}; {node} declares its input {dom_in}", src, dom_in)
        entries = self.data(table)
        if self.p.tensors[table].dtype == "INT16" and entries is not None and not dom_out.per_channel:
            self.table16(op, fn, node, table, entries, dom_in, dom_out)
            return
        if entries is None or self.p.tensors[table].dtype != "INT8":
            self.check(op, None, f"TABLE {table} is not an int8 table (int16 tables are not recomputed)")
        else:
            want = _table8(fn, dom_in, dom_out)
            bad = [i for i in range(256) if int(entries[i]) != want[i]]
            msg = (
                f"TABLE entries for {node} recomputed from {dom_in} → {dom_out}: "
                + (f"{len(bad)} of 256 differ (code {bad[0] - 128}: {int(entries[bad[0]])} vs {want[bad[0]]})" if bad
                   else "all 256 equal")
            )  # fmt: skip
            self.check(op, not bad, msg, None, dom_out)
        self.dom[out] = _dom_of(dom_out)

    def _table_node(self, table: str, src: Dom) -> str | None:
        """The node a TABLE tabulates. Its constant is named after the node as the Arm passes saw it,
        and they number a partition's nodes of one op from 0 again, after merging duplicates: a later
        partition's first ``exp`` (``aten_exp_default_1`` in the program) tabulates into
        ``b_aten_exp_default_table_constant``, a name that is another node's or none. So: the node of
        that op that reads `src`'s domain and whose table is these entries — the k-th of the partition
        or the named one first, any other of the op after — else the k-th or named one that reads it."""
        named = _fx_name(table, self.a.nodes, self.p.regions)
        m = re.fullmatch(r"(.+?_default)(?:_(\d+))?", table.removeprefix("b_").removesuffix("_table_constant"))
        same = [n for n, _ in self.a.order if m is not None and re.sub(r"_\d+$", "", n) == m.group(1)]
        k = int(m.group(2) or 0) if m is not None else 0
        first = [n for n in (same[k] if k < len(same) else None, named) if n is not None]
        entries = self.data(table)
        for n in dict.fromkeys([*first, *same]):
            if self._reads(n, src) and self._tabulates(n, entries):
                return n
        return next((n for n in first if self._reads(n, src)), first[0] if first else None)

    def _reads(self, node: str, src: Dom) -> bool:
        """Does `node` declare its input in the domain of the codes `src`?"""
        d = self.a.node_in.get(node)
        return (
            d is not None and src.scale is not None and src.zp == d.zero_point
            and _scale_ok(src.scale, d.scale, src.tol, _span(d.dtype))  # type: ignore[arg-type]
        )  # fmt: skip

    def _apart(self, node: str, src: Dom) -> float:
        """How far `node`'s input scale is from the scale of the codes `src` (relative, in log)."""
        d = self.a.node_in[node].scale
        return abs(math.log(src.scale / d)) if isinstance(src.scale, float) and isinstance(d, float) else 0.0

    def _tabulates(self, node: str, entries: np.ndarray | None) -> bool:
        d_in, d_out, fn = self.a.node_in.get(node), self.a.node_out.get(node), self.a.ops.get(node)
        if entries is None or d_in is None or d_out is None or fn is None or d_out.per_channel:
            return False
        try:
            want = _table16(fn, d_in, d_out)[0] if len(entries) == 513 else _table8(fn, d_in, d_out)
        except Exception:  # noqa: BLE001 - (an op of more than one tensor: never tabulated)
            return False
        return [int(v) for v in entries] == want

    def _shared_table_use(self, table: str, src: Dom) -> str | None:
        """The node one use of a table FuseEqualPlaceholdersPass shares (``<node>_table_constant_common``,
        an LSTM's sigmoid at every step; or another op's equal table: a softmax calibrated on a constant
        input, whose exp and reciprocal tables are both constant) stands for: the nodes that read codes in
        `src`'s domain and whose table is these entries, when they all declare one output domain."""
        named = _fx_name(table.removesuffix("_common"), self.a.nodes, self.p.regions)
        entries = self.data(table)
        if entries is None or src.scale is None or src.zp is None:
            return None
        # (the op: the named node's, or the one in the name, which the passes may have numbered away)
        op = re.fullmatch(r"b_aten_(.+?)_default(?:_\d+)?_table_constant_common", table)
        base = dict(self.a.order).get(named or "", op.group(1) if op else None)
        for same_op in (True, False):  # (the named node's op first; any op whose table it equals, else)
            fits = [n for n, b in self.a.order if (b == base) is same_op and self._reads(n, src)]
            fits = [n for n in fits if self._tabulates(n, entries)]
            if fits:  # (of nodes whose input domains are a hair apart, the nearest to the codes read)
                near = min(self._apart(n, src) for n in fits)
                fits = [n for n in fits if self._apart(n, src) == near]
                return fits[0] if len({self.a.node_out[n] for n in fits}) == 1 else None
        return None

    def table16(
        self, op: TosaOp, fn: Any, node: str, table: str, entries: np.ndarray, dom_in: Domain, dom_out: Domain
    ) -> None:
        """TOSA 1.0 int16 TABLE: (base << 7) + slope·fraction, an int32 of 128 ×
        the interpolated entry. The entries are the op's output codes shifted
        right by `rshift` to fit 16 bits, so the output is in scale
        s_out·2^rshift/128, zero point z_out·128/2^rshift."""
        out = op.outputs[0]
        want, rshift = _table16(fn, dom_in, dom_out)
        bad = [i for i in range(min(len(want), len(entries))) if int(entries[i]) != want[i]]
        if len(entries) != len(want):
            bad = bad or [len(want)]
        msg = f"int16 TABLE entries for {node} recomputed from {dom_in} → {dom_out}: " + (
            f"{len(bad)} of {len(want)} differ (entry {bad[0]})" if bad else f"all {len(want)} equal"
        )
        off = None if bad else _interpolation_error(fn, node, entries, rshift, dom_in, dom_out)
        if off is not None:  # (an op the probe measured right: off where the program reaches is unproven)
            off = replace(off, measured_off=dict(self.a.order).get(node) in PROBED_OFF_INT16)
        worst = off.worst() if off is not None else (0.0, 0)
        if off is not None:
            msg += f"; interpolated, they are up to {worst[0]:.3g} output LSB off {node} (at input code {worst[1]})"
        steep = worst[0] >= TABLE_BAND_LSB
        self.check(op, not bad, msg, None, dom_out, inform=steep, off_by_code=off if steep else None)
        zp = float(dom_out.zero_point) * 128 / 2.0**rshift  # type: ignore[arg-type]
        scale = float(dom_out.scale) * 2.0**rshift / 128  # type: ignore[arg-type]
        self.dom[out] = Dom(self.out_dtype(op), scale, int(zp) if zp.is_integer() else None, 1e-6, narrow="int16")
        if not zp.is_integer():
            self.why[out] = f"int16 TABLE #{op.index}: zero point {dom_out.zero_point} is not on the shifted grid"

    # -- activations and edges ---------------------------------------------------
    def activations(self) -> None:
        """Each CLAMP must be an activation the PT2E program asked for; each
        activation that cuts into the code range must have its CLAMP."""
        from qflow.ir.activations import exact

        bounds = clamp_codes
        realised: set[int] = set()
        unknown: list[TosaOp] = []
        for op, src, lo, hi in self.clamps:
            d = src.domain()
            if d is None:
                self.check(op, None, f"CLAMP [{lo}, {hi}] reads codes whose domain is not known here")
                if self.p.tensors[op.inputs[0]].dtype.startswith("INT"):  # a float clamp is no activation
                    unknown.append(op)
                continue
            hits = [
                k
                for k, a in enumerate(self.a.activations)
                if (_same_grid(a.domain, src) and (lo, hi) in (bounds(a, d), bounds(a, a.domain)))
                or _same_constant(a, lo, hi, src)
                or (self.realised.get(a.node) == op.index and (lo, hi) == _within(bounds(a, a.domain), d))
            ]  # (the last: the clamp of an activation whose requant the partition drops, on the codes it copies)
            full = (lo, hi) == CODE_RANGE.get(d.dtype)
            realised.update(hits)
            if not (hits or full or self.a.activations or self.a.partition_activations):
                self.check(op, None, f"CLAMP [{lo}, {hi}] in {src}: the activations of the PT2E program are not "
                           "known here (no reference program)")  # fmt: skip
                continue
            asked = ", ".join(f"{a.node} {bounds(a, a.domain)}" for a in self.a.activations) or "none"
            self.check(op, bool(hits) or full,
                       f"CLAMP [{lo}, {hi}] in {src} is no activation the PT2E program asks for (activations: {asked})",
                       src)  # fmt: skip
        for k, act in enumerate(self.a.activations):
            if k in realised or exact(act.domain, act.lo, act.hi):
                continue
            lo, hi = bounds(act, act.domain)
            if not self.a.partition_activations:
                self.checks.append(
                    Check(None, "CLAMP", -1, f"(clamp of {act.node})", act.node,
                          f"{act.node} asks for codes in [{lo}, {hi}] of {act.domain}; no CLAMP of this delegate "
                          "enforces them, and whether it is lowered elsewhere (another delegate, the CPU) is not "
                          "known here")
                )  # fmt: skip
                continue
            if unknown:  # a clamp whose domain qflow cannot tell may be this one: unproven, not dropped
                self.checks.append(
                    Check(None, "CLAMP", -1, f"(clamp of {act.node})", act.node,
                          f"{act.node} asks for codes in [{lo}, {hi}] of {act.domain}; the CLAMPs "
                          f"{', '.join(f'#{op.index}' for op in unknown)} read codes whose domain is not known here")
                )  # fmt: skip
                continue
            have = [(op.index, lo_, hi_) for op, s, lo_, hi_ in self.clamps if _same_grid(act.domain, s)]
            self.checks.append(
                Check(False, "CLAMP", -1, f"(missing clamp of {act.node})", act.node,
                      f"{act.node} asks for codes in [{lo}, {hi}] of {act.domain} (its bounds cut into the code "
                      "range), "
                      f"but no CLAMP in the artifact enforces them (clamps present: {have or 'none'}): "
                      "the activation was dropped", None, act.domain)
            )  # fmt: skip

    def edges(self) -> None:
        for i, name in enumerate(self.p.outputs):
            d = self.get(name)
            expected, where = self.a.outputs[i] if i < len(self.a.outputs) else (None, "")
            op = self._prod.get(name) or TosaOp(-1, "OUTPUT", (), (name,))
            edge = TosaOp(op.index, op.op, op.inputs, op.outputs)
            if i in self.a.made_outputs:
                self._made_output(edge, i, name)
                continue
            if expected is None and self.p.tensors[name].dtype == "BOOL":
                continue  # (a comparison's truth values carry no domain; the comparison's inputs were checked)
            if expected is None and d.raw and d.scale == 1.0 and d.zp == 0:
                continue  # (plain integers, as an index: the parent reads no domain into them)
            if expected is None:
                self.check(edge, None, f"output {i} ({name}): the parent declares no domain for it")
                continue
            if expected.is_float:
                ok: bool | None = d.dtype.startswith("float")
                if ok and name in self.dequantized and i not in self.a.float_outputs:
                    self.check(edge, None, f"output {i} ({name}) is float computed from codes after a dequantize "
                                           "inside the delegate: float compute is not interpreted")  # fmt: skip
                    continue
                if ok and name in self.dequantized:
                    # INT+FP: the delegate dequantized inside; its float must be the real number (s 1, z 0)
                    if d.scale is None or d.zp is None:
                        self.check(edge, None, f"output {i} ({name}) is dequantized inside the delegate, but "
                                               f"{self.why.get(name, 'its scale is not known')}")  # fmt: skip
                        continue
                    scales = d.scale if isinstance(d.scale, tuple) else (d.scale,)
                    ok = all(abs(x - 1.0) <= max(d.tol, 1e-5) for x in scales) and abs(float(d.zp)) <= 1e-5
                self.check(edge, ok, f"output {i} ({name}) writes {d.dtype} values in {d}, but {where} reads "
                                     f"{expected.dtype} real numbers", d, FLOAT)  # fmt: skip
                continue
            if d.scale is None or d.zp is None:
                self.check(edge, None, f"output {i} ({name}) must be in {expected} ({where}), but "
                                       f"{self.why.get(name, 'its scale is not known')}")  # fmt: skip
                continue
            zp = expected.zero_point if not isinstance(expected.zero_point, tuple) else expected.zero_point[0]
            dt_ok = d.dtype == expected.dtype
            span = _span(expected.dtype)
            ok = dt_ok and d.zp == zp and _scale_ok(d.scale, expected.scale, max(d.tol, 1e-5), span)  # type: ignore[arg-type]
            self.check(edge, ok, f"output {i} ({name}) holds codes in {d}; {where} reads them in {expected}",
                       d, expected)  # fmt: skip

    def _made_output(self, edge: TosaOp, i: int, name: str) -> None:
        """Output `i` is an integer tensor a factory op makes (no quantization: its values are the numbers):
        the CONST Arm computed for it ahead of time must hold exactly those integers."""
        node, want = self.a.made_outputs[i]
        p = self._const_op(name, through_copies=True)
        got = self.data(p.outputs[0]) if p is not None else None
        if p is None or got is None:
            self.check(edge, None, f"output {i} ({name}) is {node}'s integers, but it is not a constant of the payload")
            return
        ok = got.size == want.size and bool(np.array_equal(got.reshape(-1), want.reshape(-1)))
        self.check(edge, ok, f"output {i} ({name}) must hold the {want.size} integers {node} makes; the payload's "
                             f"constant {p.outputs[0]} holds " + ("them" if ok else "others"))  # fmt: skip


def clamp_codes(act: Activation, d: Domain) -> tuple[int, int]:
    """An activation's bounds quantized in `d`; a bound beyond the code range saturates
    (hardtanh(2, 3) on a grid that ends at 1.5 is all qmax)."""
    from qflow.ir.activations import code

    lo = max(d.qmin, int(code(d, act.lo, -math.inf))) if act.lo is not None else d.qmin
    hi = min(d.qmax, int(code(d, act.hi, math.inf))) if act.hi is not None else d.qmax
    return min(lo, d.qmax), max(hi, d.qmin)


def _within(codes: tuple[int, int], d: Domain) -> tuple[int, int]:
    """`codes` saturated to `d`'s dtype: the bounds a CLAMP of that dtype can hold."""
    lo, hi = CODE_RANGE[d.dtype]
    return min(max(codes[0], lo), hi), min(max(codes[1], lo), hi)


def _same_constant(act: Activation, lo: int, hi: int, src: Dom) -> bool:
    """A CLAMP to one code outputs one value whatever it reads. It realises an
    activation whose bounds are that one code and whose value it is, on any grid
    (the relu after a neg whose scale Arm drops, when the relu outputs 0 for every
    code: masked-by-constant)."""
    d = act.domain
    if lo != hi or src.scale is None or src.zp is None or isinstance(src.scale, tuple) or d.per_channel:
        return False
    if clamp_codes(act, d) != (lo, hi):
        return False
    mine, theirs = (lo - src.zp) * src.scale, (lo - d.zero_point) * d.scale  # type: ignore[operator]
    return abs(mine - theirs) <= 1e-6 * max(abs(mine), abs(theirs))


def _same_grid(a: Domain | None, b: Dom | None) -> bool:
    """The artifact's codes `b` are on the declared grid `a` (up to the rounding of the integer parameters on
    b's path, or scales a hair apart)."""
    if a is None or b is None or b.scale is None or a.per_channel or isinstance(b.scale, tuple):
        return False
    return a.zero_point == b.zp and _scale_ok(b.scale, a.scale, max(b.tol, 1e-5), _span(a.dtype))  # type: ignore[arg-type]


def replace_dtype(d: Dom, dtype: str, keep_unsigned: bool = False) -> Dom:
    if keep_unsigned and d.dtype in ("uint8", "uint16"):
        return d
    narrow = _narrow_of(d) if dtype not in _NARROW else None
    return Dom(dtype, d.scale, d.zp, d.tol, d.raw, narrow)


def _quantize(value: float, d: Domain) -> int:
    """The code of a real value in a per-tensor domain (round half to even, saturating), as quantize_per_tensor."""
    code = int(np.round(value / float(d.scale))) + int(d.zero_point)  # type: ignore[arg-type]
    return min(max(code, d.qmin), d.qmax)


def _table8(fn: Any, dom_in: Domain, dom_out: Domain) -> list[int]:
    """The int8 TABLE the op `fn` needs between two declared domains (the
    quantized_decomposed reference ops, as the backend's own generator)."""
    import torch

    q = torch.ops.quantized_decomposed
    codes = torch.arange(-128, 128, dtype=torch.int8).clamp(dom_in.qmin, dom_in.qmax)
    x = q.dequantize_per_tensor(codes, dom_in.scale, dom_in.zero_point, dom_in.qmin, dom_in.qmax, torch.int8)
    y = fn(x)
    out = q.quantize_per_tensor(y, dom_out.scale, dom_out.zero_point, dom_out.qmin, dom_out.qmax, torch.int8)
    return [int(v) for v in out.tolist()]


def _table16(fn: Any, dom_in: Domain, dom_out: Domain) -> tuple[list[int], int]:
    """The 513-entry int16 TABLE and its right shift, as the Arm backend's
    InsertTableOpsPass generates them (executorch 1.5.1): the op on the
    dequantized codes qmin … qmax+1 in 512 steps (7 low bits dropped), quantized
    into the output domain, shifted right to fit 16 signed bits."""
    import torch

    q = torch.ops.quantized_decomposed
    dt_in, dt_out = getattr(torch, dom_in.dtype), getattr(torch, dom_out.dtype)
    x = torch.linspace(start=dom_in.qmin, end=dom_in.qmax + 1, steps=513, dtype=torch.int32)
    x = x.clamp(dom_in.qmin, dom_in.qmax).to(dtype=dt_in)
    s_in, z_in = float(dom_in.scale), int(dom_in.zero_point)  # type: ignore[arg-type]
    xf = q.dequantize_per_tensor(x & ~0x7F, s_in, z_in, dom_in.qmin, dom_in.qmax, dt_in)
    if dom_in.dtype == "int16" and dom_in.qmax == 32767:  # table[512]: the virtual code 32768
        xf[-1] = (32768 - z_in) * s_in
    y = fn(xf).to(torch.float32)
    s_out, z_out = float(dom_out.scale), int(dom_out.zero_point)  # type: ignore[arg-type]
    lut = q.quantize_per_tensor(y, s_out, z_out, dom_out.qmin, dom_out.qmax, dt_out)
    top = int(lut.to(torch.int64).abs().max())
    rshift = max(math.ceil(math.log2(top)) + 1 - 16, 0) if top > 0 else 0
    return [int(v) for v in (lut.to(torch.int64) >> rshift).tolist()], rshift


def _interpolation_error(
    fn: Any, node: str, entries: np.ndarray, rshift: int, dom_in: Domain, dom_out: Domain
) -> CodeErrors | None:
    """How far TOSA's interpolation of a 513-entry int16 TABLE is from the op it tabulates, in output LSB,
    at each input code (0 where the op is not finite): the backend's generator keeps 1
    entry per 128 codes, so a steep op (rsqrt, reciprocal and exp near their knees) is off between them
    while every entry is right. What the data reaches is not known here (`prove` reads it)."""
    import torch

    if dom_in.dtype != "int16" or len(entries) != 513:
        return None
    lut = np.asarray(entries, dtype=np.int64)
    codes = np.arange(dom_in.qmin, dom_in.qmax + 1)
    idx, frac = (codes + 32768) >> 7, (codes + 32768) & 0x7F
    base, nxt = lut[idx], lut[np.minimum(idx + 1, 512)]
    got = ((base << 7) + (nxt - base) * frac) * 2.0**rshift / 128  # output codes, zero point included
    x = torch.tensor((codes - int(dom_in.zero_point)) * float(dom_in.scale), dtype=torch.float32)  # type: ignore[arg-type]
    y = fn(x).double().numpy()
    ideal = np.clip(np.round(y / float(dom_out.scale)) + int(dom_out.zero_point), dom_out.qmin, dom_out.qmax)  # type: ignore[arg-type]
    err = np.where(np.isfinite(y), np.abs(got - ideal), 0.0)
    return CodeErrors(node, dom_in, err.astype(np.float32).tobytes(), within=TABLE_BAND_LSB)


def validate(prog: TosaProgram, anchors: Anchors) -> list[Check]:
    """Every obligation of one TOSA program against what the PT2E side declares."""
    return Interpreter(prog, anchors).run()
