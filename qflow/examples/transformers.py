"""Transformer-shaped models (issue #30), built from their definitions with random weights.

A ViT encoder block (patch conv, LayerNorm, qkv linear, softmax attention whose matmuls
take two activations, GELU MLP, mean pool), a Llama decoder block (RMSNorm, causal
mask by ``masked_fill``, attention, SiLU-gated MLP) and an LSTM head: the shapes the
issue asks qflow to prove on arm-tosa (a8w8, a16w8) and xnnpack. Small on purpose, so
the TOSA reference model runs them in seconds.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["SHAPES", "DeiT", "LSTMHead", "LlamaBlock", "ViTBlock", "build"]


class ViTBlock(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 2, patch: int = 4, chans: int = 3, classes: int = 10) -> None:
        super().__init__()
        self.heads = heads
        self.patch = nn.Conv2d(chans, dim, patch, patch)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        b, n, d = x.shape
        qkv = self.qkv(self.ln1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        a = torch.softmax((q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5, -1)
        x = x + self.proj((a @ v).transpose(1, 2).reshape(b, n, d))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return self.head(x.mean(1))


class _DeiTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, mlp), nn.Linear(mlp, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.softmax((qkv[0] @ qkv[1].transpose(-2, -1)) * (d // self.heads) ** -0.5, -1)
        x = x + self.proj((a @ qkv[2]).transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class DeiT(nn.Module):
    """DeiT-tiny as defined by Touvron et al. / timm's ``deit_tiny_patch16_224``: 16x16 patches,
    embedding 192, 12 blocks of 3 heads with an MLP of 768, a class token and learned position
    embeddings, LayerNorm eps 1e-6, the head on the class token. ``depth`` and ``image`` shrink it;
    weights are random with timm's init (truncated normal, std 0.02)."""

    def __init__(self, depth: int = 12, image: int = 224, dim: int = 192, heads: int = 3, classes: int = 1000) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 16, 16)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (image // 16) ** 2 + 1, dim))
        self.blocks = nn.Sequential(*(_DeiTBlock(dim, heads, 4 * dim) for _ in range(depth)))
        self.norm, self.head = nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, classes)
        for t in (self.cls, self.pos):
            nn.init.trunc_normal_(t, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


class LlamaBlock(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 2, seq: int = 8) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(dim, 2 * dim, bias=False), nn.Linear(dim, 2 * dim, bias=False)
        self.w2 = nn.Linear(2 * dim, dim, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, d = t.shape
        return t.reshape(b, n, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        h = self.n1(x)
        q, k, v = self._heads(self.wq(h)), self._heads(self.wk(h)), self._heads(self.wv(h))
        # (a finite fill: an observer that sees -inf gives the scores an infinite scale)
        s = ((q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5).masked_fill(self.mask, -8.0)
        x = x + self.wo((torch.softmax(s, -1) @ v).transpose(1, 2).reshape(b, n, d))
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class LSTMHead(nn.Module):
    def __init__(self, features: int = 8, hidden: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        return self.fc(y[:, -1])


#: Each model's input shape.
SHAPES: dict[str, tuple[int, ...]] = {"vit": (1, 3, 16, 16), "llama": (1, 8, 32), "lstm": (1, 6, 8)}
_CLASSES = {"vit": ViTBlock, "llama": LlamaBlock, "lstm": LSTMHead}


def build(name: str, samples: int = 4, seed: int = 0) -> tuple[nn.Module, list[tuple[torch.Tensor, ...]]]:
    """The model (seeded random weights, eval mode) and `samples` seeded inputs."""
    torch.manual_seed(seed)
    model = _CLASSES[name]().eval()
    g = torch.Generator().manual_seed(seed + 1)
    return model, [(torch.randn(SHAPES[name], generator=g),) for _ in range(samples)]
