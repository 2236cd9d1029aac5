"""qflow at LLM scale (issue #28): a Llama-shaped decoder of N layers, quantized with torchao's
8da4w (`Int8DynamicActivationIntxWeightConfig`, int4 weights, group 32), checked before lowering
and as the `.pte`, next to the time ExecuTorch takes to lower it — ratios in one run.

    python benchmarks/llm.py                 # 16 layers, dim 128; writes benchmarks/llm.md
    python benchmarks/llm.py --layers 4      # a quick look
"""

from __future__ import annotations

import argparse
import datetime
import time
from importlib import metadata
from pathlib import Path

import torch
import torch.nn.functional as F
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch import nn
from torchao.quantization import quantize_
from torchao.quantization.granularity import PerGroup
from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

import qflow

HERE = Path(__file__).resolve().parent


class Layer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.n1, self.n2 = heads, nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.qkv = nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.o = nn.Linear(dim, dim, bias=False)
        self.w1, self.w3 = nn.Linear(dim, 2 * dim, bias=False), nn.Linear(dim, 2 * dim, bias=False)
        self.w2 = nn.Linear(2 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.n1(x)
        q, k, v = (lin(h).view(b, t, self.heads, d // self.heads).transpose(1, 2) for lin in self.qkv)
        half = d // self.heads // 2
        q, k = (torch.cat([-y[..., half:], y[..., :half]], -1) * 0.1 + y for y in (q, k))  # RoPE's shape
        x = x + self.o(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, layers: int, dim: int = 128, heads: int = 4, vocab: int = 256) -> None:
        super().__init__()
        self.emb, self.layers = nn.Embedding(vocab, dim), nn.ModuleList(Layer(dim, heads) for _ in range(layers))
        self.norm, self.head = nn.RMSNorm(dim), nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def best(fn, repeat: int = 3) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--out", type=Path, default=HERE / "llm.md")
    args = ap.parse_args()
    torch.manual_seed(0)
    model, tokens = Llama(args.layers, args.dim).eval(), (torch.randint(0, 256, (1, 16)),)
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)))
    t_export, ep = best(lambda: torch.export.export(model, tokens), 1)
    nodes = sum(1 for _ in ep.graph.nodes)  # type: ignore[attr-defined]
    t_pre, pre = best(lambda: qflow.analyze(ep, target="xnnpack"))
    t_lower, edge = best(
        lambda: to_edge_transform_and_lower(torch.export.export(model, tokens), partitioner=[XnnpackPartitioner()]), 1
    )
    t_et, et = best(lambda: edge.to_executorch(), 1)  # type: ignore[attr-defined]
    pte = et.buffer  # type: ignore[attr-defined]
    t_pte, on_pte = best(lambda: qflow.analyze(pte, target="xnnpack"))
    t_ref, on_ref = best(lambda: qflow.analyze(pte, target="xnnpack", reference=ep))
    rows = [
        ("qflow.analyze, exported program (before lowering)", t_pre, pre.status),  # type: ignore[attr-defined]
        ("qflow.analyze, .pte", t_pte, on_pte.status),  # type: ignore[attr-defined]
        ("qflow.analyze, .pte against its program (its weights checked)", t_ref, on_ref.status),  # type: ignore[attr-defined]
        ("torch.export.export", t_export, ""),
        ("to_edge_transform_and_lower (XnnpackPartitioner)", t_lower, ""),
        ("to_executorch", t_et, ""),
    ]
    versions = ", ".join(f"{p} {metadata.version(p)}" for p in ("torch", "torchao", "executorch"))
    lines = [
        "# qflow at LLM scale",
        "",
        f"Measured {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC by `python benchmarks/llm.py "
        f"--layers {args.layers} --dim {args.dim}` on {versions}: a Llama-shaped decoder ({args.layers} layers, dim "
        f"{args.dim}, RMSNorm, RoPE-shaped slices, SDPA, SiLU-gated MLP; {nodes} exported nodes, "
        f"{len(pte) / 1e6:.1f} MB .pte), torchao 8da4w (group 32), lowered to XNNPACK. qflow's times are the best "
        "of 3; the pipeline steps ran once. Only ratios within this run mean anything.",
        "",
        "| step | seconds | % of lowering | verdict |",
        "|---|---|---|---|",
        *(f"| {name} | {t:.3f} | {100 * t / t_lower:.2f} | {status} |" for name, t, status in rows),
        "",
    ]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
