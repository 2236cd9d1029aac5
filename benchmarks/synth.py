"""Synthetic quantized graphs of a chosen size, built from one really quantized block.

One ``Block`` (conv/relu/cat, a residual add, and an attention-ish part with
reshape/permute/bmm) goes through the real PT2E flow with the stock Arm TOSA
quantizer (``qflow.targets.arm.pipeline.quantize`` → ``to_edge_program``). The real
flow is far too slow to produce large graphs (measured: 1 block ≈ 8 s, 4 blocks
≈ 54 s, growing faster than linearly), so ``replicate`` copies the edge
program's FX nodes N times with fresh names, chaining each copy's output into
the next copy's input, and wraps the result in a new ``ExportedProgram``
(copies share the block's buffers, or get their own aliasing the same tensors).
The Arm ``FoldAndAnnotateQParamsPass`` then runs on that program for real.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn
from torch.export import ExportedProgram
from torch.export.graph_signature import (
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    TensorArgument,
)

from qflow.targets.arm import pipeline as arm

SPEC = arm.DEFAULT_SPEC


class Block(nn.Module):
    """conv→cat→relu→conv + residual, then a one-head attention over the pixels."""

    def __init__(self, c: int = 4) -> None:
        super().__init__()
        self.a = nn.Conv2d(c, c, 3, padding=1)
        self.b = nn.Conv2d(c, c, 1)
        self.mix = nn.Conv2d(2 * c, c, 1)
        self.q = nn.Linear(c, c)
        self.k = nn.Linear(c, c)
        self.o = nn.Linear(c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(torch.cat([self.a(x), self.b(x)], dim=1))
        y = self.mix(y) + x  # residual
        b, c, h, w = y.shape
        t = y.reshape(b, c, h * w).permute(0, 2, 1)  # pixels as tokens
        att = torch.matmul(self.q(t), self.k(t).transpose(1, 2))
        z = self.o(torch.matmul(att, t))
        return z.permute(0, 2, 1).reshape(b, c, h, w) + y


@dataclass
class Seed:
    """The one really quantized block and what its real flow cost."""

    edge: ExportedProgram
    quantize_s: float
    to_edge_s: float


def quantize_block(seed: int = 0) -> Seed:
    """Quantize one Block with the real PT2E flow and move it to the edge dialect."""
    torch.manual_seed(seed)
    model = Block().eval()
    inputs = (torch.randn(1, 4, 4, 4),)
    t0 = time.perf_counter()
    converted = arm.quantize(model, inputs, spec=SPEC)
    t1 = time.perf_counter()
    edge = arm.to_edge_program(converted, inputs, spec=SPEC)
    t2 = time.perf_counter()
    return Seed(edge, t1 - t0, t2 - t1)


def nodes_per_copy(ep: ExportedProgram, shared_weights: bool = True) -> int:
    """Nodes one more copy adds: its ops, plus its state placeholders unless shared."""
    ops = sum(1 for n in ep.graph.nodes if n.op not in ("placeholder", "output"))
    state = len(ep.graph_signature.input_specs) - len(ep.graph_signature.user_inputs)
    return ops if shared_weights else ops + state


def _vary(n: fx.Node, args: tuple[Any, ...], k: int) -> tuple[Any, ...]:
    """Copy k's per-tensor Q/DQ scale: the block's scale × (1 + k·2⁻²⁰)."""
    if k and "_per_tensor" in str(n.target) and isinstance(args[1], float):
        return (args[0], args[1] * (1.0 + k * 2.0**-20), *args[2:])
    return args


def replicate(
    ep: ExportedProgram, copies: int, shared_weights: bool = True, vary_qparams: bool = True
) -> ExportedProgram:
    """An edge program running ``copies`` chained copies of ``ep``'s graph.

    ``ep`` must have buffer/parameter/constant placeholders, exactly one user
    input and one user output. Copy k's nodes are named ``k{k}_<name>``; its
    user input is the previous copy's output (the first copy keeps the input).
    With ``shared_weights`` every copy reads the same state placeholders (a
    weight-tied stack); otherwise each copy gets its own placeholders, as an
    ``nn.Sequential`` of N blocks would, aliasing the same tensors.
    With ``vary_qparams`` copy k scales every per-tensor activation scale by the
    same factor 1 + k·2⁻²⁰ (distinct in float32, so each copy has its own
    domains, as separately calibrated layers do, while every equality inside a
    copy still holds); otherwise all copies share the block's domains and any
    cache keyed by domain would see the whole graph as one block.
    """
    sig = ep.graph_signature
    src = ep.graph
    placeholders = [n for n in src.nodes if n.op == "placeholder"]
    (out_node,) = [n for n in src.nodes if n.op == "output"]
    user_inputs = [s for s in sig.input_specs if s.kind is InputKind.USER_INPUT]
    if len(user_inputs) != 1 or len(sig.output_specs) != 1 or len(out_node.args[0]) != 1:
        raise ValueError("replicate needs exactly one user input and one user output")
    spec_of = {s.arg.name: s for s in sig.input_specs if isinstance(s.arg, TensorArgument)}
    user_name = user_inputs[0].arg.name

    g = fx.Graph()
    state_dict = dict(ep.state_dict)
    constants = dict(ep.constants)
    input_specs: list[InputSpec] = []
    # placeholders first (the signature's order: all state, then the user input)
    remaps: list[dict[fx.Node, fx.Node]] = [{} for _ in range(copies)]
    for k in range(copies):
        if shared_weights and k:
            remaps[k] = dict(remaps[0])
            continue
        for p in placeholders:
            if p.name == user_name:
                continue
            s = spec_of[p.name]
            new = g.placeholder(f"k{k}_{p.name}" if k else p.name)
            new.meta = copy.copy(p.meta)
            target = s.target if k == 0 or s.target is None else f"k{k}_{s.target}"
            if k and s.target is not None:
                store = constants if s.kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ) else state_dict
                store[target] = store[s.target]  # an alias: no extra memory
            input_specs.append(InputSpec(s.kind, TensorArgument(new.name), target, s.persistent))
            remaps[k][p] = new
    user = next(p for p in placeholders if p.name == user_name)
    x = g.placeholder(user_name)
    x.meta = copy.copy(user.meta)
    input_specs.append(InputSpec(InputKind.USER_INPUT, TensorArgument(x.name), None))

    prev: fx.Node = x
    for k in range(copies):
        env = remaps[k]
        env[user] = prev
        for n in src.nodes:
            if n.op in ("placeholder", "output"):
                continue
            args = fx.map_arg(n.args, lambda a, env=env: env[a])
            if vary_qparams:
                args = _vary(n, args, k)
            kwargs = fx.map_arg(n.kwargs, lambda a, env=env: env[a])
            new = g.create_node(n.op, n.target, args, kwargs, name=f"k{k}_{n.name}")  # type: ignore[arg-type]
            new.meta = copy.copy(n.meta)
            env[n] = new
        prev = env[out_node.args[0][0]]
    g.output((prev,))

    gm = fx.GraphModule(ep.graph_module, g)
    signature = ExportGraphSignature(
        input_specs=input_specs,
        output_specs=[OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(prev.name), None)],
    )
    mcg = copy.deepcopy(ep.module_call_graph)
    if mcg and mcg[0].signature is not None:
        mcg[0].signature.outputs = [TensorArgument(prev.name)]
    out = ExportedProgram(
        root=gm,
        graph=g,
        graph_signature=signature,
        state_dict=state_dict,
        range_constraints=copy.copy(ep.range_constraints),
        module_call_graph=mcg,
        example_inputs=ep.example_inputs,
        constants=constants,
        verifiers=[ep.verifier],
    )
    return out


def copies_for(nodes: int, per_copy: int) -> int:
    """Copies that bring a replicated graph closest to ``nodes`` nodes."""
    return max(1, round(nodes / per_copy))
