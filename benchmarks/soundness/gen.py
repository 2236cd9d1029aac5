"""Seeded generator of small valid models for the soundness campaign.

A model is a *spec*: plain JSON (inputs with a shape and a value
distribution, a list of ops over value ids, the outputs). Value ids
0..n_inputs-1 are the inputs; op i produces value n_inputs + i. `SpecModel`
interprets a spec as an `nn.Module`; its weights come from a seed stored in
each op, so a reduced spec (ops dropped by `reduce.py`) keeps the weights of
the ops it keeps. Everything is NCHW with batch 1, so any two values with a
matching shape can meet in cat / add / mul.
"""

from __future__ import annotations

import copy
import math
import random
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Spec = dict[str, Any]
Shape = tuple[int, ...]

UNARY = ["relu", "relu6_mod", "relu6_fn", "hardtanh", "clamp", "sigmoid", "tanh", "abs", "neg"]
LAYOUT = ["permute", "flatten_hw", "merge_ch", "slice_c", "slice_h", "pad"]
COMPUTE = ["conv1x1", "conv3x3", "dwconv3x3", "linear"]
BINARY = ["add", "sub", "mul"]
REDUCE = ["mean", "sum"]
POOL = ["maxpool2", "avgpool2", "adaptive_avg1"]
RESIZE = ["upsample_nearest2", "upsample_bilinear2", "pixel_shuffle2"]
JOIN = ["cat", "stack"]
# The transformer menu (issue #30): norms, softmax, GELU / SiLU, attention matmuls with two activation
# inputs, SDPA, masks — over (1, heads, tokens, features) values, with the CNN ops transformers use too.
TRANSFORMER = ["layer_norm", "rms_norm", "softmax", "gelu", "silu", "matmul_qk", "matmul_av", "sdpa"]
TRANSFORMER += ["masked_fill", "where"]
# Draw weights: compute and activations often, the rest less.
KINDS = (
    COMPUTE * 3
    + UNARY * 1
    + ["relu", "hardtanh", "clamp"] * 2
    + LAYOUT
    + BINARY * 3
    + JOIN * 3
    + REDUCE
    + POOL
    + RESIZE
)
TX_KINDS = TRANSFORMER * 3 + ["linear"] * 4 + BINARY * 2 + ["relu", "permute", "cat", "slice_h", "mean", "tanh"]
# The LLM menu (issue #28, torchao `quantize_`): linears whose input features tile groups of 32, token
# embeddings, RoPE-shaped halves, attention matmuls and the float ops between them.
LLM_KINDS = ["linear_g"] * 6 + TRANSFORMER + ["rope"] * 2 + BINARY * 2 + ["relu", "cat", "slice_h", "permute"]
# The mask menu: values that select rather than compute. A mask, a maximum or an argmax reads a value the
# data it selects does not, so codes that are wrong only there move the output through a choice (the class
# of miss found on 2026-12-02: where(-relu(x) > c, ...), which the transformer menu's where never draws).
SELECT = ["where_by", "masked_fill_by", "mask_mul", "maximum", "minimum", "amax", "argmax_gather"]
MASK_KINDS = SELECT * 3 + TRANSFORMER + ["linear"] * 3 + BINARY * 2 + ["neg", "abs", "relu", "sigmoid", "permute"]
MENUS = {"cnn": KINDS, "transformer": TX_KINDS, "llm": LLM_KINDS, "masks": MASK_KINDS}
#: Input features a group of `linear_g` tiles (torchao PerGroup(32)).
GROUP = 32
MAX_ELEMS = 4096


def _numel(shape: Shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class SpecModel(nn.Module):
    """An `nn.Module` that runs a spec. Construction does one dry run on zeros
    to size every weight from the shapes it meets; an invalid spec raises."""

    def __init__(self, spec: Spec) -> None:
        super().__init__()
        self.spec = copy.deepcopy(spec)
        self.mods = nn.ModuleDict()
        self._built = False
        with torch.no_grad():
            self.forward(*[_zeros(i) for i in spec["inputs"]])
        self._built = True

    def _param(self, i: int, op: dict[str, Any], make: Any) -> nn.Module:
        key = f"op{i}"
        if not self._built:
            torch.manual_seed(int(op["p"].get("wseed", i)))
            self.mods[key] = make()
        return self.mods[key]

    def _const(self, i: int, op: dict[str, Any], shape: Shape) -> torch.Tensor:
        name = f"c{i}"
        if not self._built:
            g = torch.Generator().manual_seed(int(op["p"].get("wseed", i)))
            lo, hi = op["p"].get("crange", (-1.0, 1.0))
            self.register_buffer(name, torch.rand(shape, generator=g) * (hi - lo) + lo)
        return getattr(self, name)

    def forward(self, *inputs: torch.Tensor) -> Any:
        vals: list[torch.Tensor] = list(inputs)
        for i, op in enumerate(self.spec["ops"]):
            vals.append(self._apply(i, op, [vals[a] for a in op["args"]]))
        outs = tuple(vals[o] for o in self.spec["outputs"])
        return outs[0] if len(outs) == 1 else outs

    def _apply(self, i: int, op: dict[str, Any], a: list[torch.Tensor]) -> torch.Tensor:  # noqa: C901
        k, p, x = op["kind"], op["p"], a[0]
        c = x.shape[1]
        if k == "conv1x1":
            return self._param(i, op, lambda: nn.Conv2d(c, p["cout"], 1))(x)
        if k == "conv3x3":
            return self._param(i, op, lambda: nn.Conv2d(c, p["cout"], 3, padding=1))(x)
        if k == "dwconv3x3":
            return self._param(i, op, lambda: nn.Conv2d(c, c, 3, padding=1, groups=c))(x)
        if k == "linear":
            return self._param(i, op, lambda: nn.Linear(x.shape[-1], p["out"]))(x)
        if k == "linear_g":
            return self._param(i, op, lambda: nn.Linear(x.shape[-1], p["out"], bias=p["bias"]))(x)
        if k == "embedding":  # token ids (1, T) → (1, 1, T, dim)
            return self._param(i, op, lambda: nn.Embedding(p["vocab"], p["dim"]))(x).unsqueeze(1)
        if k == "rope":  # x·cos + rotate_half(x)·sin with constant angles: slices, neg, cat, mul
            a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
            return x * p["cos"] + torch.cat([-b, a], -1) * p["sin"]
        if k == "relu":
            return F.relu(x)
        if k == "relu6_mod":
            return self._param(i, op, nn.ReLU6)(x)
        if k == "relu6_fn":
            return F.relu6(x)
        if k == "hardtanh":
            return F.hardtanh(x, p["lo"], p["hi"])
        if k == "clamp":
            return torch.clamp(x, p["lo"], p["hi"])
        if k == "sigmoid":
            return torch.sigmoid(x)
        if k == "tanh":
            return torch.tanh(x)
        if k == "abs":
            return torch.abs(x)
        if k == "neg":
            return torch.neg(x)
        if k == "permute":
            return x.permute(0, 1, 3, 2)
        if k == "flatten_hw":
            return x.reshape(1, c, -1, 1)
        if k == "merge_ch":
            return x.reshape(1, c * x.shape[2], x.shape[3], 1)
        if k == "slice_c":
            return x[:, p["start"] : p["end"]]
        if k == "slice_h":
            return x[:, :, p["start"] : p["end"]]
        if k == "pad":
            return F.pad(x, p["pad"], value=p["value"])
        if k in BINARY:
            fn = {"add": torch.add, "sub": torch.sub, "mul": torch.mul}[k]
            mode = p["mode"]
            if mode in ("tensor", "bcast_tensor"):
                return fn(x, a[1])
            if mode == "scalar":
                return fn(x, p["s"])
            if mode == "const":
                return fn(x, self._const(i, op, tuple(x.shape)))
            if mode == "bcast_const":
                return fn(x, self._const(i, op, (1, c, 1, 1)))
            raise ValueError(f"unknown binary mode {mode}")
        if k == "mean":
            return x.mean(dim=p["dims"], keepdim=True)
        if k == "sum":
            return x.sum(dim=p["dims"], keepdim=True)
        if k == "maxpool2":
            return F.max_pool2d(x, 2)
        if k == "avgpool2":
            return F.avg_pool2d(x, 2)
        if k == "adaptive_avg1":
            return F.adaptive_avg_pool2d(x, 1)
        if k == "upsample_nearest2":
            return F.interpolate(x, scale_factor=2, mode="nearest")
        if k == "upsample_bilinear2":
            return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        if k == "pixel_shuffle2":
            return F.pixel_shuffle(x, 2)
        if k == "layer_norm":
            return self._param(i, op, lambda: _affine(nn.LayerNorm(x.shape[-1])))(x)
        if k == "rms_norm":
            return self._param(i, op, lambda: _affine(nn.RMSNorm(x.shape[-1])))(x)
        if k == "softmax":
            return F.softmax(x, dim=-1)
        if k == "gelu":
            return F.gelu(x, approximate=p["approximate"])
        if k == "silu":
            return F.silu(x)
        if k == "matmul_qk":  # scores of queries x against keys a[1]: two activation inputs
            return torch.matmul(x, a[1].transpose(-1, -2)) * p["s"]
        if k == "matmul_av":  # attention weights x applied to values a[1]
            return torch.matmul(x, a[1])
        if k == "sdpa":
            return F.scaled_dot_product_attention(x, a[1], a[1], is_causal=p["causal"])
        if k == "masked_fill":  # the causal mask of a decoder, a constant
            mask = torch.ones(x.shape[-2:], dtype=torch.bool).triu(1)
            return x.masked_fill(mask, p["value"])
        if k == "where":
            return torch.where(x > p["thr"], x, a[1] if len(a) > 1 else p["other"])
        if k == "where_by":  # the mask reads a[1], the branches x and a[2] (or a scalar)
            return torch.where(a[1] > p["thr"], x, a[2] if len(a) > 2 else p["other"])
        if k == "masked_fill_by":
            return x.masked_fill(a[1] > p["thr"], p["value"])
        if k == "mask_mul":  # a mask cast to the data's dtype and multiplied in
            return x * (a[1] > p["thr"]).to(x.dtype)
        if k == "maximum":
            return torch.maximum(x, a[1])
        if k == "minimum":
            return torch.minimum(x, a[1])
        if k == "amax":
            return x.amax(dim=-1, keepdim=True)
        if k == "argmax_gather":  # x's element at the position of a[1]'s largest, along the last dim
            return torch.gather(x, -1, a[1].argmax(dim=-1, keepdim=True))
        if k == "cat":
            return torch.cat([x, a[1]], dim=1)
        if k == "stack":
            return torch.stack([x, a[1]], dim=1).flatten(1, 2)
        raise ValueError(f"unknown op kind {k}")


def _affine(norm: nn.Module) -> nn.Module:
    """A norm with a seeded non-trivial affine part (a fresh one is the identity)."""
    with torch.no_grad():
        norm.weight.copy_(1.0 + 0.5 * torch.randn(norm.weight.shape))
        if getattr(norm, "bias", None) is not None:
            norm.bias.copy_(0.3 * torch.randn(norm.bias.shape))
    return norm


def shapes_of(spec: Spec) -> list[Shape]:
    """Every value's shape (raises when the spec is invalid)."""
    m = SpecModel(spec)
    with torch.no_grad():
        xs: list[torch.Tensor] = [_zeros(i) for i in spec["inputs"]]
        for i, op in enumerate(m.spec["ops"]):
            xs.append(m._apply(i, op, [xs[a] for a in op["args"]]))
    return [tuple(t.shape) for t in xs]


def _zeros(inp: dict[str, Any]) -> torch.Tensor:
    """An input of zeros: token ids are int64."""
    return torch.zeros(inp["shape"], dtype=torch.long if inp["dist"][0] == "tokens" else torch.float32)


def _dist(rng: random.Random) -> list[Any]:
    """A value distribution that moves the observed zero point around."""
    r = rng.random()
    if r < 0.25:
        return ["uniform", 0.0, round(rng.uniform(0.5, 4.0), 3)]  # non-negative: zp at qmin
    if r < 0.45:
        hi = rng.uniform(-3.0, -0.2)
        return ["uniform", round(hi - rng.uniform(0.5, 3.0), 3), round(hi, 3)]  # non-positive
    if r < 0.8:
        lo = rng.uniform(-4.0, 1.0)
        return ["uniform", round(lo, 3), round(lo + rng.uniform(0.3, 6.0), 3)]
    return ["normal", round(rng.uniform(-2.0, 2.0), 3), round(rng.uniform(0.2, 2.0), 3)]


def sample_inputs(spec: Spec, n: int, seed: int) -> list[tuple[torch.Tensor, ...]]:
    """`n` input tuples drawn from the spec's distributions (a fixed generator)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        xs = []
        for inp in spec["inputs"]:
            kind, a, b = inp["dist"]
            if kind == "tokens":  # ids in [a, b)
                t = torch.randint(a, b, inp["shape"], generator=g)
            elif kind == "uniform":
                t = torch.rand(inp["shape"], generator=g) * (b - a) + a
            else:
                t = torch.randn(inp["shape"], generator=g) * b + a
            xs.append(t)
        out.append(tuple(xs))
    return out


def _pick(rng: random.Random, ids: list[int]) -> int:
    """Prefer recent values so the DAG stays connected (few dead ops)."""
    w = [1.0 + 3.0 * (j == len(ids) - 1) + 1.5 * (j >= len(ids) - 3) for j in range(len(ids))]
    return rng.choices(ids, weights=w)[0]


def _propose(rng: random.Random, kind: str, x: int, shapes: list[Shape]) -> dict[str, Any] | None:  # noqa: C901
    s = shapes[x]
    _, c, h, w = s
    p: dict[str, Any] = {"wseed": rng.randrange(1 << 30)}
    args = [x]
    if kind in ("conv1x1", "conv3x3"):
        p["cout"] = rng.choice([2, 3, 4, 8])
    elif kind == "linear":
        p["out"] = rng.choice([2, 4, 6, 8])
    elif kind == "linear_g":
        if w % GROUP:
            return None
        p["out"], p["bias"] = rng.choice([32, 64]), rng.random() < 0.5
    elif kind == "rope":
        if w % 2:
            return None
        angle = rng.uniform(0.0, 3.14)
        p["cos"], p["sin"] = round(math.cos(angle), 4), round(math.sin(angle), 4)
    elif kind == "hardtanh":
        p["lo"], p["hi"] = rng.choice([(0.0, 6.0), (0.0, 1.0), (-1.0, 1.0), (-0.5, 2.0), (0.0, 0.5), (0.2, 3.0)])
    elif kind == "clamp":
        lo, hi = rng.choice([(0.0, None), (None, 1.0), (-1.0, 1.0), (0.0, 6.0), (-0.3, 0.8), (0.5, None)])
        p["lo"], p["hi"] = lo, hi
    elif kind == "slice_c":
        if c < 2:
            return None
        start = rng.randrange(c - 1)
        p["start"], p["end"] = start, rng.randrange(start + 1, c + 1)
    elif kind == "slice_h":
        if h < 2:
            return None
        start = rng.randrange(h - 1)
        p["start"], p["end"] = start, rng.randrange(start + 1, h + 1)
    elif kind == "pad":
        p["pad"] = rng.choice([[1, 1, 1, 1], [0, 1, 0, 1], [1, 0, 0, 0]])
        p["value"] = rng.choice([0.0, 0.0, 0.5, -1.0])
    elif kind in BINARY:
        same = [j for j, t in enumerate(shapes) if t == s and j != x]
        bc = [j for j, t in enumerate(shapes) if t == (1, c, 1, 1) and j != x and s != (1, c, 1, 1)]
        modes = ["scalar", "const", "bcast_const"] + ["tensor"] * 3 * bool(same) + ["bcast_tensor"] * 2 * bool(bc)
        mode = rng.choice(modes)
        p["mode"] = mode
        if mode == "tensor":
            args.append(_pick(rng, same))
        elif mode == "bcast_tensor":
            args.append(_pick(rng, bc))
        elif mode == "scalar":
            p["s"] = rng.choice([0.5, -0.25, 2.0, 1.5, -1.0, 0.1])
        else:
            lo = rng.uniform(-2.0, 1.0)
            p["crange"] = [round(lo, 3), round(lo + rng.uniform(0.2, 3.0), 3)]
    elif kind == "gelu":
        p["approximate"] = rng.choice(["none", "tanh"])
    elif kind in ("matmul_qk", "matmul_av", "sdpa"):
        if kind == "matmul_av":
            cands = [j for j, t in enumerate(shapes) if len(t) == 4 and t[:2] == s[:2] and t[2] == w and j != x]
        else:
            cands = [j for j, t in enumerate(shapes) if len(t) == 4 and t[:2] == s[:2] and t[3] == w]
        if not cands:
            return None
        args.append(_pick(rng, cands))
        if kind == "matmul_qk":
            p["s"] = rng.choice([1.0, 0.5, 0.25, 1 / 8**0.5])
        if kind == "sdpa":
            p["causal"] = h == shapes[args[1]][2] and rng.random() < 0.5
    elif kind == "masked_fill":
        if h < 2 or w < 2:
            return None
        p["value"] = rng.choice([0.0, -3.0, -10.0])
    elif kind == "where":
        same = [j for j, t in enumerate(shapes) if t == s and j != x]
        p["thr"] = rng.choice([0.0, 0.5, -0.5])
        if same and rng.random() < 0.7:
            args.append(_pick(rng, same))
        else:
            p["other"] = rng.choice([0.0, -1.0, 2.0])
    elif kind in SELECT:
        if kind == "amax":
            return None if w < 2 else {"kind": kind, "args": args, "p": p}
        other = [j for j, t in enumerate(shapes) if t == s and j != x]
        if not other:
            return None
        m = _pick(rng, other)
        args.append(m)
        if kind == "where_by":
            branch = [j for j in other if j != m]
            if branch and rng.random() < 0.6:
                args.append(_pick(rng, branch))
            else:
                p["other"] = rng.choice([0.0, -1.0, 2.0])
        if kind in ("where_by", "masked_fill_by", "mask_mul"):
            p["thr"] = rng.choice([0.0, 0.5, -0.5, -1.5])
        if kind == "masked_fill_by":
            p["value"] = rng.choice([0.0, -3.0, 1.0])
    elif kind in ("cat", "stack"):
        if kind == "cat":
            cands = [j for j, t in enumerate(shapes) if t[2:] == s[2:]]
        else:
            cands = [j for j, t in enumerate(shapes) if t == s]
        args.append(_pick(rng, cands))  # may be x itself: cat(x, x) is valid
    elif kind in REDUCE:
        if h * w == 1:
            return None
        p["dims"] = rng.choice([[2, 3], [3], [1]]) if c > 1 else [2, 3]
    elif kind in ("maxpool2", "avgpool2"):
        if h < 2 or w < 2:
            return None
    elif kind == "adaptive_avg1":
        if h * w == 1:
            return None
    elif kind in ("upsample_nearest2", "upsample_bilinear2"):
        if h * w > 64:
            return None
    elif kind == "pixel_shuffle2":
        if c % 4:
            return None
    elif kind == "merge_ch":
        if c * h > 32:
            return None
    return {"kind": kind, "args": args, "p": p}


def generate(seed: int, menu: str = "cnn") -> Spec:
    """A random valid model spec: a DAG of 3-12 ops over 1-2 inputs, drawn from `menu` (`MENUS`)."""
    rng = random.Random(seed)
    kinds = MENUS[menu]
    n_in = rng.choice([1, 1, 2])
    if menu in ("transformer", "masks"):  # (1, heads, tokens, features)
        c, h, w = rng.choice([1, 2, 4]), rng.choice([2, 4, 6, 8]), rng.choice([4, 8, 12, 16])
    elif menu == "llm":  # (1, heads, tokens, features), features tiling groups
        c, h, w = rng.choice([1, 1, 2]), rng.choice([2, 4, 8]), rng.choice([GROUP, 2 * GROUP])
    else:
        c = rng.choice([1, 2, 3, 4, 8])
        h, w = rng.choice([2, 4, 4, 6, 8]), rng.choice([2, 4, 4, 6, 8])
    inputs = [{"shape": [1, c, h, w], "dist": _dist(rng)}]
    tokens = menu == "llm" and rng.random() < 0.4
    if tokens:  # token ids into an embedding: the first op
        vocab = rng.choice([64, 128, 256])
        inputs = [{"shape": [1, h], "dist": ["tokens", 0, vocab]}]
    if n_in == 2:
        shape = [1, c, h, w] if rng.random() < 0.7 else [1, rng.choice([1, 2, 4]), h, w]
        inputs.append({"shape": shape, "dist": _dist(rng)})
    spec: Spec = {"seed": seed, "inputs": inputs, "ops": [], "outputs": []}
    if menu != "cnn":
        spec["menu"] = menu
    shapes: list[Shape] = [tuple(i["shape"]) for i in inputs]
    if tokens:
        spec["ops"].append(
            {"kind": "embedding", "args": [0], "p": {"vocab": vocab, "dim": w, "wseed": rng.randrange(1 << 30)}}
        )
        shapes.append((1, 1, h, w))
    n_ops = rng.randint(3, 12)
    tries = 0
    while len(spec["ops"]) < n_ops and tries < 200:
        tries += 1
        kind = rng.choice(kinds)
        x = _pick(rng, [j for j, t in enumerate(shapes) if len(t) == 4])  # (never the token ids)
        op = _propose(rng, kind, x, shapes)
        if op is None:
            continue
        trial = dict(spec, ops=spec["ops"] + [op], outputs=[len(shapes)])
        try:
            new = shapes_of(trial)[-1]
        except Exception:  # noqa: BLE001 - an invalid proposal is just skipped
            continue
        if _numel(new) > MAX_ELEMS or len(new) != 4:
            continue
        spec["ops"].append(op)
        shapes.append(new)
    if menu == "llm" and not any(op["kind"] == "linear_g" for op in spec["ops"]):  # something to quantize
        x = next((j for j in reversed(range(len(shapes))) if len(shapes[j]) == 4 and shapes[j][3] % GROUP == 0), None)
        op = None if x is None else _propose(rng, "linear_g", x, shapes)
        if op is not None:
            spec["ops"].append(op)
            shapes.append((*shapes[x][:3], op["p"]["out"]))
    spec["outputs"] = sinks(spec)
    return spec


def sinks(spec: Spec) -> list[int]:
    """Op values nobody reads (the last two at most; the rest are dead code)."""
    n_in = len(spec["inputs"])
    used = {a for op in spec["ops"] for a in op["args"]}
    free = [n_in + i for i in range(len(spec["ops"])) if n_in + i not in used]
    return free[-2:] if free else [n_in + len(spec["ops"]) - 1]


def describe(spec: Spec) -> str:
    """One line per op, for reports: `v3 = conv3x3(v0) {cout: 4}`."""
    n_in = len(spec["inputs"])
    lines = [f"v{j}: input {i['shape']} {i['dist']}" for j, i in enumerate(spec["inputs"])]
    for i, op in enumerate(spec["ops"]):
        p = {k: v for k, v in op["p"].items() if k != "wseed"}
        args = ", ".join(f"v{a}" for a in op["args"])
        lines.append(f"v{n_in + i} = {op['kind']}({args}) {p if p else ''}".rstrip())
    lines.append("out: " + ", ".join(f"v{o}" for o in spec["outputs"]))
    return "\n".join(lines)
