"""Apply a repair Plan to an FX graph, in the IR form it came in.

A requant is written as the nodes later passes already understand: between a
producer of real numbers and a quantize, a quantize/dequantize pair in the
producer's domain (the fold then keeps a dq→q pair, which the Arm backend
lowers to a RESCALE); between codes and a consumer of other codes, a
dequantize/quantize pair. Folded pass-through ops get their claimed
``output_qparams`` set to the domain they really carry.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any

import torch
import torch.fx as fx

from qflow.domain import Domain
from qflow.errors import InputError
from qflow.ir.fx_nodes import target_name
from qflow.ops import OpClass, classify
from qflow.solvers.repair import DELEGATE_SEP, Plan, Requant

_TORCH_DTYPES = {
    "int4": torch.int8,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "int16": torch.int16,
    "int32": torch.int32,
}


def _qdq_ops(gm: fx.GraphModule) -> dict[str, Any]:
    """The quantize / dequantize overloads of the graph's dialect (aten or edge)."""
    edge = any("EdgeOpOverload" in type(n.target).__name__ for n in gm.graph.nodes if n.op == "call_function")
    if edge:
        from executorch.exir.dialects._ops import ops as exir_ops

        ns = exir_ops.edge.quantized_decomposed
    else:
        import torchao.quantization.pt2e.quantize_pt2e  # noqa: F401  (registers quantized_decomposed)

        ns = torch.ops.quantized_decomposed
    return {"q": ns.quantize_per_tensor.default, "dq": ns.dequantize_per_tensor.default}


def _qargs(d: Domain, where: str) -> tuple[Any, ...]:
    if d.is_float or d.per_channel:
        raise InputError(f"qflow can only insert per-tensor requants; {d} is not one", where)
    return (float(d.scale), int(d.zero_point), d.qmin, d.qmax, _TORCH_DTYPES.get(d.dtype, torch.int8))  # type: ignore[arg-type]


def _set_val(node: fx.Node, like: fx.Node, dtype: torch.dtype) -> None:
    val = like.meta.get("val")
    if isinstance(val, torch.Tensor):
        mode = getattr(val, "fake_mode", None)
        with mode if mode is not None else contextlib.nullcontext():
            node.meta["val"] = torch.empty_like(val, dtype=dtype)
    for key in ("stack_trace", "nn_module_stack", "custom"):
        if key in like.meta:
            node.meta[key] = like.meta[key]


def _chain(rq: Requant, consumer_cls: OpClass, where: str) -> list[tuple[str, Domain]]:
    """The quantize / dequantize nodes that carry `rq` out, in order."""
    if consumer_cls is OpClass.DELEGATE and rq.source.is_float:
        return [("q", rq.target)]  # the partition reads codes: quantize on the CPU
    if consumer_cls is OpClass.DELEGATE and rq.target.is_float:
        return [("dq", rq.source)]  # the partition reads real numbers: dequantize on the CPU
    if rq.target.is_float:
        if rq.source.is_float or rq.source_real:
            raise InputError(f"the plan converts real numbers into real numbers on edge {rq.edge}", where)
        return [("dq", rq.source)]  # codes → a consumer of real numbers
    if rq.source.is_float:  # a float tensor with no grid: quantize it into T
        return [("q", rq.target)] if rq.target_real is False else [("q", rq.target), ("dq", rq.target)]
    if rq.source_real and consumer_cls is OpClass.QUANTIZE:
        # real on S → Q(T): materialize S's codes so a dq(S)→q(T) pair remains
        return [("q", rq.source), ("dq", rq.source)]
    if rq.source_real:
        return [("q", rq.target), ("dq", rq.target)]  # real on S → real on T's grid
    return [("dq", rq.source), ("q", rq.target)]  # codes in S → codes in T


def _node(nodes: dict[str, fx.Node], name: str, what: str) -> fx.Node:
    """The FX node the plan names; a clear error for one inside a delegate or missing."""
    n = nodes.get(name)
    if n is not None:
        return n
    if DELEGATE_SEP in name:
        delegate, inner = name.split(DELEGATE_SEP, 1)
        raise InputError(
            f"the repair would change {inner} inside the delegate {delegate}, whose partition is already "
            f"compiled for its backend; repair the program before lowering (qflow.repair on the exported "
            f"or edge program, or QflowPass('repair') in to_edge_transform_and_lower)",
            name,
        )
    raise InputError(f"the plan names {what}, which is not in the graph", name)


def _insert(gm: fx.GraphModule, ops: dict[str, Any], rq: Requant, nodes: dict[str, fx.Node]) -> None:
    producer = _node(nodes, rq.edge[0], f"edge {rq.edge}")
    consumer = _node(nodes, rq.edge[1], f"edge {rq.edge}")
    consumer_cls = classify(target_name(consumer)) if consumer.op == "call_function" else OpClass.UNKNOWN
    chain = _chain(rq, consumer_cls, consumer.name)
    with gm.graph.inserting_before(consumer):
        cur = producer
        for kind, dom in chain:
            new = gm.graph.call_function(ops[kind], (cur, *_qargs(dom, consumer.name)))
            dtype = torch.float32 if kind == "dq" else _TORCH_DTYPES.get(dom.dtype, torch.int8)
            _set_val(new, producer, dtype)
            new.meta["qflow_requant"] = str(rq)
            cur = new
    consumer.replace_input_with(producer, cur)


def _qparams_type(gm: fx.GraphModule) -> type:
    """The class the backend's fold pass wrote its qparams with (Arm's ``QuantArgs``), read off the
    graph itself: the folded form is the backend's, so qflow writes the backend's own records."""
    for n in gm.graph.nodes:
        for key in ("output_qparams", "input_qparams"):
            for qa in (n.meta.get(key) or {}).values():
                return type(qa)
    raise InputError("a folded graph with no node carrying input_qparams / output_qparams has no domain to reclaim")


def _reclaim(node: fx.Node, d: Domain, qparams_type: type) -> None:
    """The pass-through op claims the domain it really carries; a float one
    carries real numbers, so it claims nothing (no ``output_qparams``)."""
    if d.is_float:
        node.meta["output_qparams"] = {}
        return
    oq = dict(node.meta.get("output_qparams") or {})
    oq[min(oq) if oq else 0] = qparams_type(float(d.scale), int(d.zero_point), d.qmin, d.qmax, _TORCH_DTYPES[d.dtype])
    node.meta["output_qparams"] = oq


def _own_activation_domain(gm: fx.GraphModule, ops: dict[str, Any], q: fx.Node, old: Domain, own: Domain) -> None:
    """activation → Q(old) becomes activation → Q(own) → DQ(own) → Q(old): the
    activation fuses exactly, and the dq→q pair lowers to a RESCALE."""
    users = list(q.users)
    q.args = (q.args[0], *_qargs(own, q.name))
    with gm.graph.inserting_after(q):
        dq = gm.graph.call_function(ops["dq"], (q, *_qargs(own, q.name)))
    with gm.graph.inserting_after(dq):
        rq = gm.graph.call_function(ops["q"], (dq, *_qargs(old, q.name)))
    _set_val(dq, q, torch.float32)
    _set_val(rq, q, _TORCH_DTYPES.get(old.dtype, torch.int8))
    for n in (dq, rq):
        n.meta["qflow_requant"] = f"own domain for the activation before {q.name}: {own} → {old}"
    for u in users:
        u.replace_input_with(q, rq)


def _true_boundary(gm: fx.GraphModule, ops: dict[str, Any], getitem: fx.Node, d: Domain) -> None:
    """The delegate output is declared as the integer dtype the partition writes;
    a CPU dequantize with the partition's output domain restores the float view."""
    dtype = _TORCH_DTYPES.get(d.dtype, torch.int8)
    call, idx = getitem.args[0], getitem.args[1]
    users = list(getitem.users)
    old_val = getitem.meta.get("val")
    _set_val(getitem, getitem, dtype)
    vals = call.meta.get("val")  # type: ignore[union-attr]
    if isinstance(vals, (list, tuple)) and isinstance(idx, int):
        vals = list(vals)
        vals[idx] = getitem.meta["val"]
        call.meta["val"] = vals  # type: ignore[union-attr]
    # ExecuTorch's SpecPropPass keeps a preset spec on delegate calls (and would
    # otherwise re-derive float32 from the partition's edge outputs)
    from executorch.exir.tensor import TensorSpec

    getitem.meta["spec"] = TensorSpec.from_tensor(getitem.meta["val"])
    if isinstance(call.meta.get("val"), list):  # type: ignore[union-attr]
        call.meta["spec"] = [TensorSpec.from_tensor(v) for v in call.meta["val"]]  # type: ignore[union-attr]
    with gm.graph.inserting_after(getitem):
        dq = gm.graph.call_function(ops["dq"], (getitem, *_qargs(d, getitem.name)))
    if isinstance(old_val, torch.Tensor):
        dq.meta["val"] = old_val
    dq.meta["qflow_requant"] = f"dequantize the delegate output {getitem.name} on the CPU: {d}"
    for u in users:
        u.replace_input_with(getitem, dq)


def apply_plan(gm: fx.GraphModule, plan: Plan) -> None:
    """Rewrite `gm` in place (callers pass a copy). Every node the plan names
    is looked up before anything changes, so a plan that cannot be carried out
    (a change inside a compiled delegate) raises `InputError` and leaves `gm` as it was."""
    if plan.empty:
        return
    nodes = {n.name: n for n in gm.graph.nodes}
    for rq in plan.requants:
        for n in rq.edge:
            _node(nodes, n, f"edge {rq.edge}")
    for name in [*plan.reclaims, *plan.activation_domains, *plan.boundaries]:
        _node(nodes, name, "node")
    for name, d in plan.reclaims.items():
        if not (d.is_float or d.dtype in _TORCH_DTYPES):
            raise InputError(f"qflow cannot write the domain {d} into output_qparams", name)
    qparams_type = _qparams_type(gm) if any(not d.is_float for d in plan.reclaims.values()) else type(None)
    ops = _qdq_ops(gm)
    for rq in plan.requants:
        _insert(gm, ops, rq, nodes)
    for name, d in plan.reclaims.items():
        _reclaim(nodes[name], d, qparams_type)
    for name, (old, own) in plan.activation_domains.items():
        _own_activation_domain(gm, ops, nodes[name], old, own)
    for name, d in plan.boundaries.items():
        _true_boundary(gm, ops, nodes[name], d)
    gm.graph.lint()
    gm.recompile()


def split_plan(plan: Plan) -> tuple[Plan, dict[str, Plan]]:
    """The plan's changes to the parent graph, and those inside each delegate
    (``lowered_module_N``), with the delegate prefix taken off the node names."""

    def where(name: str) -> tuple[str | None, str]:
        if DELEGATE_SEP in name:
            d, inner = name.split(DELEGATE_SEP, 1)
            return d, inner
        return None, name

    parent = Plan(objective=plan.objective)
    inside: dict[str, Plan] = {}

    def bucket(d: str | None) -> Plan:
        return parent if d is None else inside.setdefault(d, Plan(objective=plan.objective))

    for rq in plan.requants:
        (d0, a), (d1, b) = where(rq.edge[0]), where(rq.edge[1])
        if d0 != d1:
            raise InputError(f"the plan puts a requant across the boundary of a delegate: {rq.edge}", rq.edge[1])
        bucket(d0).requants.append(replace(rq, edge=(a, b)))
    for attr in ("reclaims", "activation_domains", "boundaries"):
        for name, v in getattr(plan, attr).items():
            d, inner = where(name)
            getattr(bucket(d), attr)[inner] = v
    return parent, inside


def relower_delegates(gm: fx.GraphModule, inside: dict[str, Plan]) -> None:
    """Carry out each delegate's part of a plan where it can be: on a copy of
    the partition as it was handed to the backend, lowered again by the same
    backend with the same compile specs, in place of the old delegate."""
    import copy

    from executorch.exir.backend.backend_api import to_backend

    for name, sub in inside.items():
        lowered = getattr(gm, name, None)
        original = getattr(lowered, "original_module", None)
        if original is None:
            raise InputError(f"the repair would change the delegate {name}, which has no partition program", name)
        part = copy.deepcopy(original)
        apply_plan(part.graph_module, sub)
        try:
            new = to_backend(lowered.backend_id, part, list(lowered.compile_specs))
        except Exception as e:  # the backend's own error, whatever its kind
            raise InputError(
                f"the repaired partition of the delegate {name} does not lower again on {lowered.backend_id}: "
                f"{type(e).__name__}: {e}; repair the program before lowering instead",
                name,
            ) from e
        setattr(gm, name, new)
