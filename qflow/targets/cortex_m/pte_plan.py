"""A Cortex-M `.pte` checked as shipped, against the program it was lowered from (issue #29).

The `.pte` keeps each `cortex_m::` kernel's folded integers but not the domains they were
folded from, which only the program before the passes states. So qflow lowers that program
itself (`to_edge` + `CortexMPassManager`, for one CPU per CMSIS-NN ISA until one matches),
matches the `.pte`'s instructions one to one with that program's kernels (same op, same
inputs, same outputs), and writes every argument in which the `.pte` differs into its own
copy. The kernel reader (`kernels.py`) then checks the `.pte`'s integers and constants against
the domains the fold recorded, by the same measured rules as the program in memory: a `.pte`
whose folded integers were changed after the passes is an error at that kernel, and one that
is not the reference's lowering at all is unproven, never proved.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch.export import ExportedProgram

from qflow.errors import InputError
from qflow.ir.load import load_program
from qflow.ir.pte_program import Call, EValue, Plan, PteProgram
from qflow.targets.cortex_m.pipeline import lower

#: The copies ExecuTorch's emitter inserts to change a tensor's dim order (not in the lowering it emits).
_LAYOUT_COPIES = ("dim_order_ops::_to_dim_order_copy", "dim_order_ops::_clone_dim_order")
#: One CPU per CMSIS-NN ISA: the passes fold a linear's bias differently on each (MVE: into
#: kernel_sum with input_offset · Σw; DSP and scalar: a bias), and the .pte does not say which.
CPUS = (("M55", "MVE"), ("M7", "DSP"), ("M0", "scalar"))

_DTYPES = {
    torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4, torch.float16: 5,
    torch.float32: 6, torch.float64: 7, torch.bool: 11, torch.bfloat16: 15,
}  # fmt: skip
_TORCH = {"uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32}
_TORCH |= {"int64": torch.int64, "float32": torch.float32, "float64": torch.float64, "bool": torch.bool}


@dataclass(frozen=True)
class Relowered:
    """The reference lowered by qflow with the `.pte`'s arguments written in (None: no lowering
    of it is the `.pte`'s program, and `mismatch` says where the closest one differs)."""

    program: ExportedProgram | None
    #: the edge program the passes were given: what the kernels' checks read as the reference
    given: ExportedProgram | None = None
    notes: tuple[str, ...] = ()
    mismatch: str = ""


class _Mismatch(Exception):
    """The .pte is not this lowering of the reference (its message says where)."""


def relower(prog: PteProgram, plan: Plan, reference: Any) -> Relowered:
    """`reference` lowered for each ISA until one matches `plan` instruction by instruction
    (the first with no argument to write in wins; else the one with the fewest)."""
    if not isinstance(reference, ExportedProgram):  # (qflow's fast .pt2 reader: lowering needs the real one)
        path = getattr(reference, "path", None)
        if path is None:
            raise InputError("reference: a Cortex-M .pte is checked against the ExportedProgram it was lowered from")
        reference = load_program(path)
    best: tuple[int, Relowered] | None = None
    first = ""
    for cpu, isa in CPUS:
        try:
            given, program = lower(reference, (), cpu)
        except Exception as e:  # (the passes refusing the reference is the user's input, not a qflow bug)
            raise InputError(f"reference: CortexMPassManager ({cpu}) cannot lower it: {type(e).__name__}: {e}") from e
        try:
            written = _Matcher(prog, plan, program).write_in()
        except _Mismatch as e:
            first = first or f"{e} (lowered for {cpu}, {isa})"
            continue
        notes = (
            f"{plan.name}: the .pte is the reference lowered by CortexMPassManager for {cpu} ({isa}), "
            f"instruction by instruction; "
            + (f"{len(written)} argument(s) differ and are checked as the .pte has them: " + "; ".join(written)
               if written else "every argument and constant is the same"),
        )  # fmt: skip
        if not written:
            return Relowered(program, given, notes)
        if best is None or len(written) < best[0]:
            best = (len(written), Relowered(program, given, notes))
    if best is not None:
        return best[1]
    return Relowered(None, mismatch=first)


def _fx_kernels(ep: ExportedProgram) -> list[fx.Node]:
    """The nodes that become kernel calls: every op with a schema, except a view_copy the
    emitter turns into a memory view (elided, or an et_view call, which the .pte side skips)."""
    out = []
    for n in ep.graph.nodes:
        if n.op != "call_function" or not hasattr(n.target, "_schema"):
            continue  # (memory.alloc's scratch buffers and getitem are not calls)
        if n.target._schema.name == "aten::view_copy" and all(u.op != "output" for u in n.users):
            continue
        out.append(n)
    return out


def _out_schema(name: str) -> Any:
    """The schema torch registers for an instruction's kernel (``ns::op.overload``), or None."""
    ns, _, rest = name.partition("::")
    op, _, overload = rest.partition(".")
    try:
        return getattr(getattr(getattr(torch.ops, ns), op), overload or "default")._schema
    except (AttributeError, RuntimeError):
        return None


def _view_base(n: Any) -> Any:
    while isinstance(n, fx.Node) and n.op == "call_function" and getattr(n.target, "_schema", None) is not None:
        if n.target._schema.name != "aten::view_copy":
            break
        n = n.args[0]
    return n


class _Matcher:
    """One lowering of the reference against the .pte's plan."""

    def __init__(self, prog: PteProgram, plan: Plan, ep: ExportedProgram) -> None:
        self.prog, self.plan, self.ep = prog, plan, ep
        self.calls = [c for c in plan.calls if c.kind == "kernel" and not c.name.startswith("executorch_prim::")]
        sig = ep.graph_signature
        self.constants = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
        self.constants |= getattr(sig, "inputs_to_lifted_tensor_constants", {})
        self.user_inputs = list(sig.user_inputs)
        self.matched: dict[str, int] = {}  # FX node → instruction index
        self.writer: dict[int, tuple[int, int]] = {}  # value index → (instruction that returns it, which output)
        self.views: dict[int, int] = {}  # et_view output → its input
        for c in plan.calls:
            if c.kind != "kernel":
                continue
            if c.name.startswith("executorch_prim::et_view") and len(c.args) >= 2:
                self.views[c.args[-1]] = c.args[0]
            else:
                for k, v in enumerate(plan.tensors(c.returned)):
                    self.writer[v] = (c.index, k)
        self.replaced: dict[str, torch.Tensor] = {}  # constant placeholder → the .pte's data

    def layout_copy(self, call: Call) -> bool:
        """A dim-order copy the emitter inserted (same dtype in and out: the values kept, only their
        memory layout changed), read as a view of its input; False for any other call."""
        if not call.name.startswith(_LAYOUT_COPIES) or not call.args or not call.returned:
            return False
        src, out = call.args[0], call.returned[0]
        if self.ev(src).kind != "Tensor" or self.ev(src).dtype != self.ev(out).dtype:
            return False
        self.views[out] = src
        self.writer.pop(out, None)
        return True

    def positions(self, call: Call, schema: Any) -> dict[str, int]:
        """Where each of the lowering's arguments sits in the instruction: in order, with the out tensor
        after them, or by name in the kernel's out-variant schema when it drops some (the dtype of
        ``_to_dim_order_copy.out`` is its out tensor's)."""
        if len(call.args) >= len(schema.arguments):
            return {a.name: i for i, a in enumerate(schema.arguments)}
        out = _out_schema(call.name)
        if out is None or len(call.args) < len(out.arguments):
            raise _Mismatch(f"instruction {call.index} ({call.name}) has {len(call.args)} arguments")
        return {a.name: i for i, a in enumerate(out.arguments) if not a.is_out}

    def dropped(self, call: Call, name: str, have: Any) -> None:
        """An argument the out variant does not take: a dtype is its out tensor's; the rest (layout,
        device, memory) do not change values."""
        if name != "dtype" or have is None:
            return
        out = self.ev(call.returned[0]) if call.returned else None
        if out is None or out.kind != "Tensor" or _TORCH.get(out.dtype) != have:
            got = out.dtype if out is not None else "nothing"
            raise _Mismatch(f"instruction {call.index} ({call.name}) writes {got}, where the lowering casts to {have}")

    def ev(self, i: int) -> EValue:
        return self.plan.values[i]

    def write_in(self) -> list[str]:
        nodes = _fx_kernels(self.ep)
        calls = iter(self.calls)
        written: list[str] = []
        for node in nodes:
            schema = node.target._schema
            call = next(calls, None)
            while call is not None and call.name.rsplit(".", 1)[0] != schema.name and self.layout_copy(call):
                call = next(calls, None)
            if call is None:
                raise _Mismatch(f"the .pte has fewer kernel calls than the reference's lowering ({len(nodes)})")
            if call.name.rsplit(".", 1)[0] != schema.name:
                raise _Mismatch(f"instruction {call.index} calls {call.name}, where the lowering has {schema.name}")
            at = self.positions(call, schema)
            args = list(node.args)
            for i, a in enumerate(schema.arguments):
                have = args[i] if i < len(args) else node.kwargs.get(a.name, a.default_value)
                if a.name not in at:
                    self.dropped(call, a.name, have)
                    continue
                new = self.argument(call, a.name, have, call.args[at[a.name]])
                if new is not _SAME:
                    written.append(f"instruction {call.index} ({node.name}) {a.name}")
                    if i < len(args):
                        args[i] = new
                    else:
                        node.kwargs = {**node.kwargs, a.name: new}
            node.args = tuple(args)
            self.matched[node.name] = call.index
        rest = [c for c in calls if not self.layout_copy(c)]
        if rest:
            raise _Mismatch(
                f"the .pte calls {rest[0].name} (instruction {rest[0].index}) after the reference's lowering ends"
            )
        self.outputs()
        for placeholder, data in self.replaced.items():
            key = self.constants[placeholder]
            (self.ep.constants if key in self.ep.constants else self.ep.state_dict)[key] = data
        self.ep.graph_module.recompile()
        return written

    def outputs(self) -> None:
        out = next(n for n in self.ep.graph.nodes if n.op == "output")
        results: list[fx.Node] = []
        fx.node.map_arg(out.args[0], results.append)
        if len(results) != len(self.plan.outputs):
            lowering = len(results)
            raise _Mismatch(f"the .pte returns {len(self.plan.outputs)} values, the reference's lowering {lowering}")
        end = len(self.plan.calls)
        for k, (r, v) in enumerate(zip(results, self.plan.outputs, strict=True)):
            self.same_producer(f"output {k}", r, v, end)

    def argument(self, call: Call, name: str, have: Any, idx: int) -> Any:
        """The .pte's value of one argument in the lowering's terms, or _SAME."""
        ev = self.ev(idx)
        where = f"instruction {call.index} ({call.name}) argument {name}"
        if isinstance(have, fx.Node):
            if ev.kind != "Tensor":
                raise _Mismatch(f"{where} is a {ev.kind}, where the lowering has a tensor")
            if have.name in self.constants:
                return self.constant(where, have, ev)
            if have.op == "call_function" and not hasattr(have.target, "_schema"):
                return _SAME  # (a scratch buffer memory.alloc'd for the kernel)
            self.same_producer(where, have, idx, call.index)
            return _SAME
        if isinstance(have, (list, tuple)) and any(isinstance(x, fx.Node) for x in have):
            items = ev.value if ev.kind in ("TensorList", "OptionalTensorList") else None
            if items is None or len(items) != len(have):
                raise _Mismatch(f"{where} is a {ev.kind}, where the lowering has {len(have)} tensors")
            for x, v in zip(have, items, strict=True):
                self.same_producer(where, x, int(v), call.index)
            return _SAME
        got = self.scalar(where, have, ev)
        return _SAME if got == have or (isinstance(have, tuple) and list(have) == got) else got

    def scalar(self, where: str, have: Any, ev: EValue) -> Any:
        """The .pte's number(s) as the lowering writes them (a dtype as torch's)."""
        if isinstance(have, torch.dtype):
            if ev.kind != "Int":
                raise _Mismatch(f"{where} is a {ev.kind}, where the lowering has dtype {have}")
            return next((d for d, code in _DTYPES.items() if code == ev.value), f"scalar type {ev.value}")
        if have is None:
            if ev.kind != "Null":
                raise _Mismatch(f"{where} is a {ev.kind}, where the lowering has None")
            return None
        if isinstance(have, bool):
            kinds = ("Bool",)
        elif isinstance(have, int):
            kinds = ("Int",)
        elif isinstance(have, float):
            kinds = ("Double", "Int")
        elif isinstance(have, (list, tuple)):
            kinds = ("IntList", "DoubleList", "BoolList")
        else:
            raise _Mismatch(f"{where}: qflow cannot compare a {type(have).__name__} argument")
        if ev.kind not in kinds:
            raise _Mismatch(f"{where} is a {ev.kind}, where the lowering has {have!r}")
        if ev.kind == "IntList":  # (its items are the indices of boxed Int values)
            return [self.ev(int(i)).value for i in ev.value]
        if ev.kind in ("DoubleList", "BoolList"):
            return list(ev.value)
        return float(ev.value) if isinstance(have, float) else ev.value

    def constant(self, where: str, node: fx.Node, ev: EValue) -> Any:
        """A constant tensor: the .pte's data, when it differs (written into the program's state)."""
        key = self.constants[node.name]
        have = self.ep.constants[key] if key in self.ep.constants else self.ep.state_dict[key]
        data = self.prog.tensor_data(ev)
        if not ev.constant or data is None or ev.dtype not in _TORCH:
            raise _Mismatch(f"{where} is not a constant the .pte stores, where the lowering has {node.name}")
        if tuple(ev.sizes) != tuple(have.shape) or _TORCH[ev.dtype] != have.dtype:
            raise _Mismatch(f"{where} is {ev.dtype}{list(ev.sizes)}, the lowering's {node.name} "
                            f"{str(have.dtype).removeprefix('torch.')}{list(have.shape)}")  # fmt: skip
        order = ev.dim_order or tuple(range(len(ev.sizes)))
        stored = torch.tensor(data, dtype=have.dtype).reshape([ev.sizes[d] for d in order])
        value = stored.permute(*sorted(range(len(order)), key=order.__getitem__))
        if torch.equal(value, have):
            return _SAME
        earlier = self.replaced.get(node.name)
        if earlier is not None and not torch.equal(earlier, value):
            raise _Mismatch(f"{where}: two kernels read {node.name} and the .pte gives them different data")
        self.replaced[node.name] = value.clone(memory_format=torch.preserve_format)
        return node  # (the node stays; its data is written in)

    def same_producer(self, where: str, have: fx.Node, idx: int, before: int) -> None:
        """Input `idx` of the instruction at `before` holds what the lowering's `have` computes."""
        want = self.fx_source(have)
        got = self.pte_source(idx, before)
        if want != got:
            raise _Mismatch(f"{where} reads {_say(got)}, where the lowering reads {_say(want)}")

    def fx_source(self, n: fx.Node) -> tuple[str, int, int]:
        """(what, which, which output) `n` is, through views: a program input or a kernel's output."""
        base, k = _view_base(n), 0
        if base.op == "call_function" and base.target is operator.getitem and isinstance(base.args[0], fx.Node):
            base, k = _view_base(base.args[0]), int(base.args[1])
        if base.name in self.user_inputs:
            return ("input", self.user_inputs.index(base.name), 0)
        if base.name in self.matched:
            return ("instruction", self.matched[base.name], k)
        return ("node", -1, 0)

    def pte_source(self, v: int, before: int) -> tuple[str, int, int]:
        """The same for value `v` read by the instruction at `before`."""
        seen = set()
        while v in self.views and v not in seen:
            seen.add(v)
            v = self.views[v]
        if v in self.writer and self.writer[v][0] < before:
            return ("instruction", *self.writer[v])
        if v in self.plan.inputs:
            return ("input", self.plan.inputs.index(v), 0)
        memory = self.ev(v).memory
        if memory is not None:  # an elided view: whatever the last instruction wrote there
            last = [c for w, c in self.writer.items() if c[0] < before and self.ev(w).memory == memory]
            if last:
                return ("instruction", *max(last))
            inputs = [k for k, i in enumerate(self.plan.inputs) if self.ev(i).memory == memory]
            if inputs:
                return ("input", inputs[0], 0)
        return ("value", v, 0)


class _Same:
    def __repr__(self) -> str:
        return "the same"


_SAME: Any = _Same()


def _say(source: tuple[str, int, int]) -> str:
    kind, i, k = source
    return {"input": f"program input {i}", "instruction": f"instruction {i}'s output {k}"}.get(kind, "another tensor")
