"""The quantized embedding tables a program declares, for checking a `.pte`'s embedding kernels
against it (`qflow.ir.quantized_embedding.check_against`).

A table is the real rows its constant codes dequantize to, and each value's quantization step: an
`embedding` whose weight is a dequantize of constants (torchao's `quantize_` writes
`dequantize_affine`; ExecuTorch's `QuantFusionPass` packs it into a kernel at `to_executorch`), or
one of ExecuTorch's quantized embedding kernels (`export_llm`'s ``embedding_quantize``), evaluated
on every row. Both are computed by the ops themselves on the program's constants, so the table is
the program's meaning, not a re-implementation of it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from qflow.ir.fx_nodes import Consts, control_flow_operands, target_name
from qflow.ir.quantized_embedding import BITS, Table
from qflow.ops import base_name

#: A packed byte holding code 0 / code 1 in every slot, per kernel bits (codes are stored offset).
_PACKED = {8: (0, 1), 4: (8 * 17, 9 * 17), 2: (2 * 85, 3 * 85)}


def read(ep: Any) -> tuple[Table, ...]:
    """Every quantized embedding table of `ep` (and of the subgraphs it runs once)."""
    reader = _Reader(ep)
    out = []
    for gm, node in reader.nodes():
        op = base_name(target_name(node)) if node.op == "call_function" else ""
        table = None
        if op == "embedding" and node.args and isinstance(node.args[0], fx.Node):
            table = reader.dequantized_table(gm, node.args[0])
        elif op in BITS:
            table = reader.kernel_table(gm, node, BITS[op])
        if table is not None:
            real, step = table
            out.append(Table(node.name, real.double().numpy(), step.double().abs().numpy()))
    return tuple(out)


class _Reader:
    def __init__(self, ep: Any) -> None:
        self.ep = ep
        self.consts = {id(ep.graph_module): Consts(ep.graph_module, ep)}
        #: a subgraph's placeholder → the outer node its caller hands it
        self.bound: dict[fx.Node, Any] = {}
        self.owner: dict[int, fx.GraphModule] = {}

    def nodes(self) -> list[tuple[fx.GraphModule, fx.Node]]:
        out, todo = [], [self.ep.graph_module]
        while todo:
            gm = todo.pop()
            for node in gm.graph.nodes:
                out.append((gm, node))
                operands = control_flow_operands(node)
                sub = node.args[1] if operands is not None and base_name(target_name(node)) != "cond" else None
                held = isinstance(sub, fx.Node) and sub.op == "get_attr"
                inner = getattr(gm, str(sub.target), None) if held else None
                if isinstance(inner, fx.GraphModule):
                    phs = [p for p in inner.graph.nodes if p.op == "placeholder"]
                    self.bound.update(zip(phs, operands or [], strict=False))
                    self.owner.update({id(p): gm for p in phs})
                    self.consts[id(inner)] = Consts(inner, None)
                    todo.append(inner)
        return out

    def value(self, gm: fx.GraphModule, x: Any) -> Any:
        """`x` with every node replaced by its constant value (None when one is not constant)."""
        if isinstance(x, (list, tuple)):
            items = [self.value(gm, e) for e in x]
            return None if any(e is None for e, o in zip(items, x, strict=True) if isinstance(o, fx.Node)) else items
        if not isinstance(x, fx.Node):
            return x
        if x in self.bound:
            outer = self.bound[x]
            return self.value(self.owner[id(x)], outer) if isinstance(outer, fx.Node) else outer
        found = self.consts.get(id(gm), self.consts[id(self.ep.graph_module)]).tensor(x)
        if found is not None:
            return found
        if x.op != "call_function" or base_name(target_name(x)) != "access_subclass_inner_tensor":
            return None
        outer = self.value(gm, x.args[0])
        inner = getattr(outer, str(x.args[1]), None) if outer is not None else None
        return inner if isinstance(inner, torch.Tensor) else None

    def dequantized_table(self, gm: fx.GraphModule, dq: fx.Node) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The rows a dequantize of constant codes makes, and its step (what one code more adds)."""
        if dq.op != "call_function" or "dequantize" not in base_name(target_name(dq)) or not dq.args:
            return None
        args = [self.value(gm, a) for a in dq.args]
        kwargs = {k: self.value(gm, v) for k, v in dq.kwargs.items()}
        codes = args[0]
        if not isinstance(codes, torch.Tensor) or codes.dim() != 2 or codes.is_floating_point():
            return None
        if any(a is None for a, o in zip(args, dq.args, strict=True) if isinstance(o, fx.Node)):
            return None
        with torch.no_grad():
            real = dq.target(*args, **kwargs)
            step = dq.target(torch.ones_like(codes), *args[1:], **kwargs) - dq.target(
                torch.zeros_like(codes), *args[1:], **kwargs
            )
        return real, step

    def kernel_table(self, gm: fx.GraphModule, node: fx.Node, bits: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Every row a quantized embedding kernel returns, and its step."""
        args = [self.value(gm, a) for a in node.args]
        if len(args) < 6 or not all(isinstance(a, torch.Tensor) for a in args[:2]):
            return None
        if isinstance(node.args[2], fx.Node) and args[2] is None:
            return None
        # (the functional overload: a program after to_executorch calls the out variant)
        kwargs = {k: v for k, v in node.kwargs.items() if k != "out"}
        packet = getattr(torch.ops.quantized_decomposed, base_name(target_name(node)))
        kernel = packet.dtype if kwargs else packet.default
        packed, rows = args[0], torch.arange(args[0].shape[0]).reshape(1, -1)
        zero, one = (torch.full(packed.shape, b, dtype=torch.uint8).view(packed.dtype) for b in _PACKED[bits])
        with torch.no_grad():
            real, at0, at1 = (kernel(w, *args[1:5], rows, **kwargs)[0] for w in (packed, zero, one))
        return real, at1 - at0
