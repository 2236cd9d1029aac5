"""The reference facts of the TOSA artifact check, read from ExecuTorch programs: the domains the
parent declares at a delegate's inputs and outputs, the partition's constants (weights, biases,
tables) with their domains, and the reference PT2E program a `.pte` is checked against."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import fx

from qflow.domain import FLOAT, Domain
from qflow.ir.fx_nodes import Consts, control_flow_operands, qdq_domain, target_name
from qflow.ops import MULTI_INPUT_IDENTITY, SELECT_INPUTS, OpClass, base_name, classify
from qflow.targets.arm.tosa_constants import MERGED, anchor_made_constants, content_key
from qflow.targets.arm.tosa_flatbuffer import TosaProgram, TosaTensor, read, region_of
from qflow.targets.arm.tosa_interpreter import CODE_RANGE, Activation, Anchors, Check, validate


def _qdq(node: Any, consts: Any) -> Domain | None:

    try:
        return qdq_domain(node, consts)
    except Exception:  # unreadable arguments: no anchor
        return None


def partition_anchors(ep: Any) -> Anchors:
    """Domains the partition program (Q/DQ intact) declares, by FX node name; a control-flow
    subgraph's nodes as ``<node>_<subgraph>`` (how the serializer names its region's tensors)."""
    a = Anchors(inputs={}, outputs=[], consts={})
    copies = _read_graph(a, ep.graph, Consts(ep.graph_module, ep), "")
    subs = [(name, sub) for name, sub in ep.graph_module.named_children() if isinstance(sub, fx.GraphModule)]
    while subs:  # (a nested cond's region is named `<outer>__<inner>`)
        name, sub = subs.pop()
        copies |= _read_graph(a, sub.graph, Consts(sub, None), f"_{name}")
        subs += [(f"{name}__{n}", m) for n, m in sub.named_children() if isinstance(m, fx.GraphModule)]
    _through_copies(a, copies)
    return a


def _read_graph(a: Anchors, graph: fx.Graph, consts: Consts, region: str) -> set[str]:
    """Reads `graph`'s anchors into `a`; returns its copies (one-input pass-through ops)."""
    from qflow.ir import activations, copy_chains

    copies = set()
    for n in graph.nodes:
        key = n.name + region
        a.nodes.add(key)
        shape = getattr(n.meta.get("val"), "shape", None)
        if shape is not None and all(isinstance(x, int) for x in shape):  # (a symbolic size: no match)
            a.shapes[key] = tuple(shape)
        if n.op != "call_function":
            continue
        cls = classify(target_name(n))
        if cls is OpClass.DEQUANTIZE and n.args and hasattr(n.args[0], "op") and n.args[0].op == "placeholder":
            d = _qdq(n, consts)
            if d is not None:
                a.consts.setdefault(n.args[0].name + region, d)
            continue
        if cls in (OpClass.QUANTIZE, OpClass.DEQUANTIZE):
            continue
        qs = [u for u in n.users if classify(target_name(u)) is OpClass.QUANTIZE]
        dqs = [x for x in n.args if hasattr(x, "op") and classify(target_name(x)) is OpClass.DEQUANTIZE]
        for i, x in enumerate(n.args):
            q = x.args[0] if x in dqs and x.args else None
            if hasattr(q, "op") and classify(target_name(q)) is OpClass.QUANTIZE and hasattr(q.args[0], "name"):
                for src in _requant_sources(q):
                    a.readers.setdefault(src.name + region, set()).add((key, i))
        out = _qdq(qs[0], consts) if qs else None
        inp = _qdq(dqs[0], consts) if dqs else None
        if out is not None:
            a.node_out[key] = out
        if inp is not None:
            a.node_in[key] = inp
        a.ops[key] = _unary(n)
        name = base_name(target_name(n))
        if cls is OpClass.PASSTHROUGH and name not in MULTI_INPUT_IDENTITY and name not in SELECT_INPUTS:
            copies.add(key)
        if not region:  # (the serializer numbers a region's operators on their own)
            a.order.append((key, name))
        if name in ("constant_pad_nd", "pad"):  # constant_pad_nd(x, pad, value) / pad(x, pad, mode, value)
            k = 2 if name == "constant_pad_nd" else 3
            v = n.args[k] if len(n.args) > k else n.kwargs.get("value")
            mode = n.args[2] if name == "pad" and len(n.args) > 2 else n.kwargs.get("mode", "constant")
            if mode == "constant" and isinstance(v, (int, float, type(None))):
                a.pad_values[key] = float(v or 0.0)
        # the weight domain of a conv/linear, for rewritten weight tensors
        if len(dqs) > 1 and (d := _qdq(dqs[1], consts)) is not None:
            a.consts.setdefault(key, d)
        if out is not None and activations.bounds(n) is not None:
            if copy_chains.fuses_into_next_clamp(n):
                continue  # FuseConsecutiveClampsPass: one CLAMP, with the next activation's
            lo, hi = copy_chains.fused_bounds(n)  # type: ignore[misc]
            a.activations.append(Activation(key, lo, hi, out))
    return copies


def _requant_sources(q: fx.Node) -> list[fx.Node]:
    """What the quantize `q` reads, and through standalone requants (a dequantize straight into a
    quantize: one RESCALE, named after no PT2E op) what they read: an op reading `q`'s codes reads
    theirs, rescaled."""
    out, src = [], q.args[0]
    while isinstance(src, fx.Node):
        out.append(src)
        inner = src.args[0] if classify(target_name(src)) is OpClass.DEQUANTIZE and src.args else None
        if not (isinstance(inner, fx.Node) and classify(target_name(inner)) is OpClass.QUANTIZE and inner.args):
            break
        src = inner.args[0]
    return out


def _through_copies(a: Anchors, copies: set[str]) -> None:
    """A copy (view, permute, expand, ...) that reads a value hands its codes on unchanged: the ops
    reading the copy read the value too (`Anchors.readers`, closed over chains of copies)."""
    for v in list(a.readers):
        todo, seen = [n for n, _ in a.readers[v] if n in copies], set()
        while todo:
            c = todo.pop()
            if c in seen:
                continue
            seen.add(c)
            more = a.readers.get(c, set())
            a.readers[v] |= more
            todo += [n for n, _ in more if n in copies]


def delegate_anchors(gm: Any, call: Any, lowered: Any, prog: TosaProgram) -> Anchors:
    """Anchors of one delegate call: the partition's declarations plus the
    parent's quantize (inputs) and dequantize (outputs) arguments."""

    ep = lowered.original_module
    a = partition_anchors(ep)
    parent = Consts(gm, None)
    user_inputs = list(ep.graph_signature.user_inputs)
    fed = list(call.args[1:])
    # the const map also covers rewritten names (aten_convolution_default → its weight)
    declared = a.consts
    # a constant the serializer kept under its placeholder's name; the others by content
    a.consts = {t: declared[t] for t in prog.tensors if t in declared and t in ph_names(ep)}
    _match_by_content(a, declared, ep, prog)
    ph_nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    for i, ph in enumerate(user_inputs):
        d: Domain | None = None
        arg = fed[i] if i < len(fed) else None
        if arg is not None and hasattr(arg, "op") and arg.op == "call_function":
            if classify(target_name(arg)) is OpClass.QUANTIZE:
                d = _qdq(arg, parent)
        val = getattr(arg, "meta", {}).get("val") if arg is not None else None
        if d is None and getattr(getattr(val, "dtype", None), "is_floating_point", False):
            d = FLOAT
        if d is None and ph in ph_nodes:  # fed by another delegate: the partition's own reading
            dq = [u for u in ph_nodes[ph].users if classify(target_name(u)) is OpClass.DEQUANTIZE]
            d = _qdq(dq[0], Consts(ep.graph_module, ep)) if dq else None
            pval = ph_nodes[ph].meta.get("val")
            dt = str(getattr(pval, "dtype", "")).replace("torch.", "")
            if d is None and not dq and dt in CODE_RANGE:  # integer data nothing quantizes: real = code
                d = Domain.quantized(dt, 1.0, 0, *CODE_RANGE[dt])
                a.raw.add(ph)
        a.inputs[ph] = d
        qs = list(ph_nodes[ph].users) if ph in ph_nodes else []
        if d is FLOAT and qs and all(classify(target_name(u)) is OpClass.QUANTIZE for u in qs):
            doms = {_qdq(u, Consts(ep.graph_module, ep)) for u in qs}
            if len(doms) == 1 and None not in doms:
                a.float_inputs[ph] = doms.pop()  # type: ignore[assignment]
    # outputs: the parent's dequantize of each getitem; else the partition's own output quantize
    outs = ep.graph.output_node().args[0]
    getitems: dict[int, list[Any]] = {}
    for u in call.users:
        if base_name_is_getitem(u) and isinstance(u.args[1], int):
            getitems.setdefault(u.args[1], []).append(u)
    for i, o in enumerate(outs):
        exp: Domain | None = None
        where = ""
        for g in getitems.get(i, []):
            dqs = [x for x in g.users if x.op == "call_function" and classify(target_name(x)) is OpClass.DEQUANTIZE]
            others = [x for x in g.users if x not in dqs]
            val = g.meta.get("val")
            if dqs:
                exp, where = _qdq(dqs[0], parent), f"the parent's dequantize {dqs[0].name}"
            elif others and getattr(getattr(val, "dtype", None), "is_floating_point", False):
                exp, where = FLOAT, f"the parent graph ({g.name} is {val.dtype}, used by {others[0].name})"
        if exp is None and hasattr(o, "op") and classify(target_name(o)) is OpClass.QUANTIZE:
            exp, where = _qdq(o, Consts(ep.graph_module, ep)), f"the partition's output quantize {o.name}"
        dt = str(getattr(o.meta.get("val"), "dtype", "")).replace("torch.", "") if hasattr(o, "meta") else ""
        if exp is None and dt in CODE_RANGE and not getitems.get(i) or exp is None and _plain(getitems.get(i, []), dt):
            exp, where = Domain.quantized(dt, 1.0, 0, *CODE_RANGE[dt]), "the parent graph (plain integer data)"
        a.outputs.append((exp, where))
        if (made := _made_integers(o)) is not None:
            a.made_outputs[i] = (o.name, made)
        if hasattr(o, "op") and o.op == "call_function" and classify(target_name(o)) is OpClass.DEQUANTIZE:
            a.float_outputs.add(i)
    return a


#: Factory ops whose values their literal arguments fix (not `empty`, `rand`: no values to hold a CONST to).
_DETERMINED = frozenset({"full", "zeros", "ones", "scalar_tensor", "arange", "eye", "linspace"})


def _made_integers(o: Any) -> np.ndarray | None:
    """The integers a factory op the partition returns makes (eye, ones, full), computed as PyTorch does."""
    if not (hasattr(o, "op") and o.op == "call_function" and base_name(target_name(o)) in _DETERMINED):
        return None
    if any(isinstance(a, fx.Node) for a in (*o.args, *o.kwargs.values())):
        return None  # (sizes the program computes)
    val = o.meta.get("val")
    if getattr(getattr(val, "dtype", None), "is_floating_point", True):
        return None
    try:
        made = o.target(*o.args, **o.kwargs)
    except (RuntimeError, TypeError, ValueError):  # (a factory of run-time sizes: nothing to compare)
        return None
    return made.numpy() if hasattr(made, "numpy") else None


def ph_names(ep: Any) -> set[str]:
    return {n.name for n in ep.graph.nodes if n.op == "placeholder"}


def _channel_keys(values: np.ndarray, channels: int) -> tuple[bytes, ...]:
    """Each output channel's values up to order (axis 0: OIHW in PT2E, OHWI in TOSA)."""
    rows = values.astype(np.int64).reshape(channels, -1)
    return tuple(np.sort(r).tobytes() for r in rows)


@dataclass(frozen=True)
class Constant:
    """A quantized constant of a Q/DQ program: its name, its values up to order, its domain,
    and for a weight (per-tensor, or per-channel on axis 0) each output channel's values up to order."""

    name: str
    key: tuple[int, bytes]
    domain: Domain
    channels: tuple[bytes, ...] = ()


def constant_domains(ep: Any, only: set[str] | None = None) -> tuple[Constant, ...]:
    """The quantized constants of a Q/DQ program (a partition, or the whole
    PT2E program a .pte was lowered from): each dequantize of an integer
    parameter, buffer or constant gives its codes a domain, also where a cond or
    while_loop hands the constant to a subgraph that dequantizes it."""
    consts = Consts(ep.graph_module, ep)
    out = []
    for n, src in _constant_dequantizes(ep.graph_module, {}):
        if only and src.name not in only:
            continue
        t = consts.tensor(src)
        d = _qdq(n, consts if n.graph is ep.graph else Consts(n.graph.owning_module, None))
        if t is not None and d is not None and not t.dtype.is_floating_point:
            v = t.detach().numpy()
            by_rows = v.ndim >= 2 and (not d.per_channel or d.axis == 0)
            rows = _channel_keys(v, v.shape[0]) if by_rows else ()
            out.append(Constant(src.name, content_key(v), d, rows))
    return tuple(out)


def _constant_dequantizes(gm: fx.GraphModule, bound: dict[str, fx.Node]) -> Iterable[tuple[fx.Node, fx.Node]]:
    """(dequantize, the top-level constant it reads) in `gm` and the control-flow subgraphs it calls;
    `bound`: the subgraph's placeholders that stand for top-level constants."""
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        if classify(target_name(n)) is OpClass.DEQUANTIZE:
            src = n.args[0] if n.args else None
            if isinstance(src, fx.Node) and src.name in bound:
                yield n, bound[src.name]
            elif isinstance(src, fx.Node) and src.op in ("placeholder", "get_attr") and not bound:
                yield n, src
            continue
        ops = control_flow_operands(n)
        if ops is None:
            continue
        for a in n.args[:3]:
            sub = getattr(gm, str(a.target), None) if isinstance(a, fx.Node) and a.op == "get_attr" else None
            if not isinstance(sub, fx.GraphModule):
                continue
            ins = [p for p in sub.graph.nodes if p.op == "placeholder"]
            inner = {
                p.name: bound.get(o.name, o)
                for p, o in zip(ins, ops, strict=False)
                if isinstance(o, fx.Node) and (o.name in bound or (not bound and o.op in ("placeholder", "get_attr")))
            }
            yield from _constant_dequantizes(sub, inner)


@dataclass(frozen=True)
class Reference:
    """What the PT2E program a .pte was lowered from declares, for its TOSA payloads:
    its quantized constants and its activations."""

    constants: tuple[Constant, ...]
    activations: tuple[Activation, ...]

    def constant_domain(self, name: str) -> Domain | None:
        """The one domain the program dequantizes constant `name` in, else None (the folded FX reader
        asks for a constant whose dequantize the fold pass dropped)."""
        doms = {c.domain for c in self.constants if c.name == name}
        return doms.pop() if len(doms) == 1 else None


def reference(ep: Any) -> Reference:
    return Reference(constant_domains(ep), tuple(partition_anchors(ep).activations))


def merged_constants(
    prog: TosaProgram, constants: Iterable[Constant], skip: Iterable[str] = ()
) -> dict[str, tuple[Domain, ...]]:
    """Each ``<name>_common`` constant of the artifact (Arm's FuseEqualPlaceholdersPass) whose
    equal constants in the reference are declared in more than one domain → those domains."""
    constants = list(constants)
    by_name = {c.name: c for c in constants}
    out = {}
    for name, t in prog.tensors.items():
        rep = by_name.get(name.removesuffix(MERGED)) if name.endswith(MERGED) and name not in skip else None
        if rep is not None and t.data is not None and rep.key == content_key(t.data):
            doms = tuple(dict.fromkeys(c.domain for c in constants if c.key == rep.key))
            if len(doms) > 1:
                out[name] = doms
    return out


def _outside_region(name: str, prog: TosaProgram) -> str:
    """A region's tensor's name without the region's suffix (the serializer's ``<node>_<region>``)."""
    return name.removesuffix(f"_{r}") if (r := region_of(name, prog.regions)) is not None else name


def link_constants(prog: TosaProgram, constants: Iterable[Constant], skip: Iterable[str] = ()) -> dict[str, Domain]:
    """Each integer constant of the artifact, linked to the domain of the
    quantized constant it is: the one with its name and its values, else the
    one constant with its values (in any order: TOSA permutes weights and packs
    int4). A single value, or values several constants share with different
    domains, anchor nothing by content: a coincidence is too likely."""
    by_name = {c.name: c for c in constants}
    by_key: dict[tuple[int, bytes], set[Domain]] = {}
    for c in constants:
        by_key.setdefault(c.key, set()).add(c.domain)
    out: dict[str, Domain] = {}
    skip = set(skip)
    for name, t in prog.tensors.items():
        if name in skip or t.data is None or t.dtype not in ("INT8", "INT16", "INT32", "INT4"):
            continue
        key = content_key(t.data)
        named = by_name.get(name) or by_name.get(_outside_region(name, prog))
        fused = by_name.get(name.removesuffix(MERGED)) if name.endswith(MERGED) else None
        if named is not None and named.key == key:
            out[name] = named.domain
        elif fused is not None and fused.key == key and len(doms := by_key[key]) == 1:
            # Arm's FuseEqualPlaceholdersPass merged equal constants into the first one's
            # `<name>_common`: whichever were merged, every constant with these codes has one domain
            out[name] = next(iter(doms))
        elif key[0] > 1 and len(doms := by_key.get(key, set())) == 1:
            out[name] = next(iter(doms))
        elif key[0] > 1 and len(t.shape) >= 2 and (part := _channel_run(t, constants)) is not None:
            out[name] = part
    return out


def _channel_run(t: TosaTensor, constants: Iterable[Constant]) -> Domain | None:
    """A weight the backend split by output channels (Arm decomposes a grouped
    conv into one CONV2D per group): the domain of the one run of consecutive
    channels of one weight whose values it holds, channel by channel (its
    channels' scales when per-channel). Several runs with different domains
    anchor nothing."""
    keys = _channel_keys(t.data, t.shape[0])  # type: ignore[arg-type]
    m, found = len(keys), set()
    for c in constants:
        for k in range(len(c.channels) - m + 1):
            if m < len(c.channels) and c.channels[k : k + m] == keys:
                d = c.domain
                if d.per_channel:
                    d = Domain.quantized(d.dtype, d.scale[k : k + m], d.zero_point[k : k + m], d.qmin, d.qmax, axis=0)  # type: ignore[index]
                found.add(d)
    return next(iter(found)) if len(found) == 1 else None


def _match_by_content(a: Anchors, declared: dict[str, Domain], ep: Any, prog: TosaProgram) -> None:
    """Rewritten weights (``…_weight_ohwi`` of a linear the backend made a conv)
    keep no PT2E name, but they are a permutation of a quantized parameter:
    link each unnamed constant to the one parameter with the same values."""
    constants = constant_domains(ep, only={n for n in ph_names(ep) if n in declared})
    a.consts.update(link_constants(prog, constants, skip=a.consts))


def _plain(getitems: list[Any], dtype: str) -> bool:
    """The parent uses the output as integers (no dequantize): plain integer data."""

    if dtype not in CODE_RANGE or not getitems:
        return False
    users = [u for g in getitems for u in g.users]
    return not any(u.op == "call_function" and classify(target_name(u)) is OpClass.DEQUANTIZE for u in users)


def base_name_is_getitem(n: Any) -> bool:
    return n.op == "call_function" and "getitem" in str(n.target)


def float_io(prog: TosaProgram) -> bool:
    """True for an INT+FP partition whose boundary quantize/dequantize are
    inside the delegate as float arithmetic (which qflow does not interpret)."""
    return any(prog.tensors[n].dtype in ("FP32", "FP16", "BF16") for n in (*prog.inputs, *prog.outputs))


def check_delegate(
    gm: Any,
    call: Any,
    lowered: Any,
    ref: Reference | None = None,
    dropped: dict[str, Domain] | None = None,
    scale_dropped: dict[str, Domain] | None = None,
    merged_users: dict[str, str] | None = None,
) -> list[Check] | None:
    """The artifact checks of one delegate call, or None if it is no TOSA
    flatbuffer, or a float program that quantizes nothing at its boundary
    (a float partition: no codes cross it, so there is no domain to prove).
    `ref`: the PT2E program's constants, for weights the partition keeps as bare codes.
    `dropped`: the requants the partition drops that the caller's own checks weigh (`Anchors.dropped`);
    `scale_dropped`: likewise the output scales of ops lowered with zero points only (`Anchors.scale_dropped`);
    `merged_users`: likewise the duplicates merged into another (`Anchors.merged_users`)."""
    if getattr(lowered, "backend_id", None) not in ("TOSABackend", "VgfBackend"):
        return None
    try:
        prog = read(bytes(lowered.processed_bytes))
    except Exception:  # a VGF blob or another payload: no TOSA flatbuffer to read
        return None
    anchors = delegate_anchors(gm, call, lowered, prog)
    anchors.dropped, anchors.scale_dropped = dict(dropped or {}), dict(scale_dropped or {})
    anchors.merged_users = dict(merged_users or {})
    ep = lowered.original_module
    prog = anchor_made_constants(prog, anchors, ep, {c.name: c for c in constant_domains(ep)})
    if ref is not None:
        anchors.consts.update(link_constants(prog, ref.constants, skip=anchors.consts))
        anchors.merged = merged_constants(prog, ref.constants, skip=anchors.consts)
    quantized_io = any(d is not None and not d.is_float for d in anchors.inputs.values()) or any(
        d is not None and not d.is_float for d, _ in anchors.outputs
    )
    if float_io(prog) and not (quantized_io or anchors.float_inputs or anchors.float_outputs):
        return None
    return validate(prog, anchors)


def _unary(n: Any) -> Any:
    """`n`'s op as a function of its first input, its other (non-tensor) arguments bound: a TABLE
    tabulates gelu(x, approximate="tanh"), not gelu(x) (transformer campaign, 10 false alarms)."""
    rest, kwargs = tuple(n.args[1:]), dict(n.kwargs)
    if any(hasattr(v, "op") for v in (*rest, *kwargs.values())):
        return n.target  # (a binary op: never tabulated)
    return functools.partial(_call_with, n.target, rest, kwargs) if rest or kwargs else n.target


def _call_with(op: Any, rest: tuple[Any, ...], kwargs: dict[str, Any], x: Any) -> Any:
    return op(x, *rest, **kwargs)
