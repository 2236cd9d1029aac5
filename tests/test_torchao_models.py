"""torchao `quantize_` on the model shapes users quantize (issue #28), lowered to XNNPACK and run
on the ExecuTorch runtime against the quantized eager model: a Llama-shaped decoder layer
(embedding, RMSNorm, q/k/v/o linears, RoPE, SDPA, SiLU-gated MLP, head), a ViT-shaped encoder
(patch embedding, LayerNorm, fused qkv, SDPA, GELU MLP, mean-pooled head) and an LSTM head.

Measured (2026-11-26, torchao 0.18.0, executorch 1.5.1): the dynamic configs (8da4w, 8da8w) run
right and qflow proves them before lowering, lowered and as a `.pte`; both weight-only configs
miscompute by orders of magnitude (the weights' scales are lost at lowering), or are refused
when they run (int8 on the ViT), and qflow says so at every linear before lowering and lowered,
and at each delegate of the `.pte` that is passed those scales unread. The fourth config,
int8 dynamic × int8 weights, exports torchao's integer matmul recipe (`aten._int_mm`; u8s8 or
s8s8 by the exporting CPU, both exported here on any machine), which `to_edge` refuses (not Core
ATen): qflow proves it before lowering, and calls each mutant of the recipe that changes the eager
output an error (or leaves it unproven), never proved.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
from collections.abc import Callable
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.verification.verifier import SpecViolationError
from torch import nn
from torchao.kernel import intmm
from torchao.quantization import quantize_
from torchao.quantization.granularity import PerAxis, PerGroup
from torchao.quantization.quant_api import (
    Int8DynamicActivationInt8WeightConfig,
    Int8DynamicActivationIntxWeightConfig,
    Int8WeightOnlyConfig,
    IntxWeightOnlyConfig,
)

import qflow
from qflow.ir import int_matmul
from qflow.targets.xnnpack import pipeline as xnnpack

#: float32 rounding, relative to the output's magnitude (fixed, not read from what is measured)
FLOAT_ROUNDING = 1e-5


class Decoder(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4, vocab: int = 128) -> None:
        super().__init__()
        self.emb, self.heads = nn.Embedding(vocab, dim), heads
        self.n1, self.n2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(dim, 128, bias=False), nn.Linear(dim, 128, bias=False)
        self.w2, self.head = nn.Linear(128, dim, bias=False), nn.Linear(dim, vocab, bias=False)

    @staticmethod
    def rope(x: torch.Tensor) -> torch.Tensor:
        a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return x * 0.9 + torch.cat([-b, a], -1) * 0.1

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens)
        b, t, d = x.shape
        h = self.n1(x)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (self.q(h), self.k(h), self.v(h)))
        a = F.scaled_dot_product_attention(self.rope(q), self.rope(k), v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        h = self.n2(x)
        return self.head(x + self.w2(F.silu(self.w1(h)) * self.w3(h)))


class ViT(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4, patch: int = 4, classes: int = 10) -> None:
        super().__init__()
        self.heads, self.patch = heads, patch
        self.embed = nn.Linear(4 * patch * patch, dim)  # (4 channels: 64 inputs, two groups of 32)
        self.pos = nn.Parameter(torch.randn(1, 16, dim) * 0.02)
        self.n1, self.n2, self.n3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2, self.head = nn.Linear(dim, 128), nn.Linear(128, dim), nn.Linear(dim, classes)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        b, c, h, w = img.shape
        p = self.patch
        x = img.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).reshape(b, (h // p) * (w // p), c * p * p)
        x = self.embed(x) + self.pos
        t, d = x.shape[1], x.shape[2]
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in self.qkv(self.n1(x)).chunk(3, -1))
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        x = x + self.fc2(F.gelu(self.fc1(self.n2(x))))
        return self.head(self.n3(x).mean(1))


class LSTMHead(nn.Module):
    """`quantize_` replaces nn.Linear only: the LSTM's own weights stay float."""

    def __init__(self, features: int = 32, hidden: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.inp, self.lstm = nn.Linear(features, hidden), nn.LSTM(hidden, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(torch.relu(self.inp(x)))
        return self.head(y[:, -1])


#: model → (how to make it, its example input, its nn.Linear count)
MODELS = {
    "llama": (Decoder, lambda: (torch.randint(0, 128, (1, 8)),), 8),  # q, k, v, o, w1, w3, w2, head
    "vit": (ViT, lambda: (torch.randn(1, 4, 16, 16),), 6),  # embed, qkv, proj, fc1, fc2, head
    "lstm": (LSTMHead, lambda: (torch.randn(1, 8, 32),), 2),  # inp, head
}
CONFIGS = {
    "8da4w": lambda: Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)),
    "8da8w": lambda: Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0)),
    "int4-weight-only": lambda: IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)),
    "int8-weight-only": lambda: Int8WeightOnlyConfig(),
}
CASES = [(m, c) for m in MODELS for c in CONFIGS]


@pytest.fixture(scope="module")
def programs() -> dict[tuple[str, str], dict]:
    """Per (model, config): the exported program, the lowered one, the .pte and the runtime's error
    relative to the quantized eager model (inf: the runtime refused it) — each built once."""
    out = {}
    for model_name, config in CASES:
        make, example, _ = MODELS[model_name]
        torch.manual_seed(0)
        model, inputs = make().eval(), example()
        quantize_(model, CONFIGS[config]())
        with torch.no_grad():
            want = model(*inputs)
        edge = to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()])
        pte = xnnpack.to_executorch(edge).buffer
        try:
            off = float((xnnpack.run(pte, inputs)[0] - want).abs().max() / want.abs().max())
        except RuntimeError:  # (refused when it runs: loud, not silent)
            off = math.inf
        out[model_name, config] = {
            "exported": torch.export.export(model, inputs),
            "lowered": edge.exported_program(),
            "pte": pte,
            "off": off,
        }
    return out


@pytest.mark.parametrize("model", MODELS)
def test_the_runtime_computes_the_dynamic_configs_right_and_the_weight_only_ones_wrong(programs, model) -> None:
    assert programs[model, "8da8w"]["off"] <= FLOAT_ROUNDING
    assert programs[model, "8da4w"]["off"] <= 0.02  # bf16 group scales (measured 0.3-0.8 %)
    # measured: int4 3e6 (llama), 1e2 (vit, lstm); int8 2e11 (llama), refused (vit), 3e3 (lstm)
    assert programs[model, "int4-weight-only"]["off"] > 1.0
    assert programs[model, "int8-weight-only"]["off"] > 1.0


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("config", ["8da4w", "8da8w"])
@pytest.mark.parametrize("form", ["exported", "lowered", "pte"])
@pytest.mark.parametrize("target", ["xnnpack", None])
def test_the_dynamic_configs_prove(programs, model, config, form, target) -> None:
    report = qflow.analyze(programs[model, config][form], target=target)
    assert report.status == "proved", str(report)
    assert not [f for f in report.findings if f.kind == "unknown-op"]  # rms_norm, sdpa, lstm: float ops


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("config", ["int4-weight-only", "int8-weight-only"])
@pytest.mark.parametrize("form", ["exported", "lowered"])
@pytest.mark.parametrize("target", ["xnnpack", None])
def test_the_weight_only_configs_are_an_error_at_every_linear(programs, model, config, form, target) -> None:
    """int8 weight-only exports no dequantize: the weight's codes are cast to float, multiplied, and the
    product scaled after (read as a dequantize whose scale the program applies elsewhere)."""
    report = qflow.analyze(programs[model, config][form], target=target)
    assert report.status == "violated", str(report)
    assert len([f for f in report.findings if f.kind == "miscompiled-lowering"]) == MODELS[model][2], str(report)
    assert not [f for f in report.findings if f.kind == "unknown-op"], str(report)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("config", ["int4-weight-only", "int8-weight-only"])
def test_the_weight_only_pte_is_an_error_at_each_delegate_that_drops_scales(programs, model, config) -> None:
    """Its payload multiplies the codes as float weights and never reads the scales the program passes
    each linear's delegate, which tile those weights (one per output channel or group): an error at
    each such delegate, never "nothing quantized"."""
    for target in ("xnnpack", None):
        report = qflow.analyze(programs[model, config]["pte"], target=target)
        assert report.status == "violated", str(report)
        dropped = [f for f in report.findings if f.kind == "miscompiled-lowering"]
        tiled = sum(int(re.search(r"is passed (\d+) constant", f.message)[1]) for f in dropped)
        assert tiled >= MODELS[model][2], str(report)  # (at least each linear's scales; a delegate may hold several)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("config", ["8da4w", "8da8w"])
def test_the_dynamic_pte_proves_against_its_program_with_every_weight_checked(programs, model, config) -> None:
    """With the program it was lowered from (`reference=`), each linear's payload weight (codes, and
    scales from the .pte's named data) is matched to the program's and proved the same: one more
    obligation per linear."""
    p = programs[model, config]
    alone = qflow.analyze(p["pte"], target="xnnpack")
    checked = qflow.analyze(p["pte"], target="xnnpack", reference=p["exported"])
    assert checked.status == "proved", str(checked)
    assert checked.obligations["proved"] - alone.obligations["proved"] == MODELS[model][2], str(checked)


#: The two integer matmul recipes torchao exports, by the CPU it exports on (`_int_scaled_matmul_cpu`):
#: u8s8 shifts the codes into uint8 on AVX512-VNNI without AMX, s8s8 multiplies them as they are.
#: Each is exported on any machine by telling torchao which CPU it is on.
RECIPES = {"u8s8": (False, True), "s8s8": (False, False)}  # (AMX, VNNI)


@pytest.fixture(scope="module")
def int8_dynamic() -> dict[tuple[str, str], tuple[torch.export.ExportedProgram, tuple[torch.Tensor, ...]]]:
    """Per (model, recipe): the program `Int8DynamicActivationInt8WeightConfig` exports, and its input."""
    out = {}
    for (name, (make, example, _)), (recipe, (amx, vnni)) in itertools.product(MODELS.items(), RECIPES.items()):
        torch.manual_seed(0)
        model, inputs = make().eval(), example()
        quantize_(model, Int8DynamicActivationInt8WeightConfig())
        with (
            mock.patch.object(intmm, "_cpu_is_amx_tile_supported", return_value=amx),
            mock.patch.object(intmm, "_cpu_is_vnni_supported", return_value=vnni),
        ):
            out[name, recipe] = torch.export.export(model, inputs), inputs
    return out


@pytest.mark.parametrize("recipe", RECIPES)
def test_each_recipe_is_exported_as_named(int8_dynamic, recipe) -> None:
    """The patch takes: u8s8 casts the codes to uint8 before the matmul, s8s8 does not."""
    graph = int8_dynamic["llama", recipe][0].graph
    mm = next(n for n in graph.nodes if n.target == torch.ops.aten._int_mm.default)
    assert mm.args[0].meta["val"].dtype == (torch.uint8 if recipe == "u8s8" else torch.int8)


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("target", ["xnnpack", None])
def test_the_int8_dynamic_recipe_proves_at_every_linear(int8_dynamic, model, recipe, target) -> None:
    """Each linear is torchao's integer matmul: the codes (shifted into uint8 for u8s8), `aten._int_mm`
    (the shift taken out), the accumulator scaled by the token's and the weight's scales — exact
    integer arithmetic, one obligation per linear (it was `unknown-op`)."""
    ep = int8_dynamic[model, recipe][0]
    report = qflow.analyze(ep, target=target)
    assert report.status == "proved", str(report)
    assert not [f for f in report.findings if f.kind == "unknown-op"], str(report)
    dg = qflow.api.domain_graph(ep, target=target)
    recipes = [o for o in dg.obligations if o.finding_kind == "kernel-argument-mismatch" and o.holds]
    assert len(recipes) == MODELS[model][2]


@pytest.mark.parametrize("recipe", RECIPES)
def test_to_edge_refuses_the_int8_dynamic_recipe(int8_dynamic, recipe) -> None:
    """Measured: lowering it is loud (the torchao campaign's 179 refusals), never a silent miscompile."""
    with pytest.raises(SpecViolationError, match="_int_mm"):
        to_edge_transform_and_lower(int8_dynamic["llama", recipe][0], partitioner=[XnnpackPartitioner()])


def _recipe_mutants() -> dict[str, Callable[[torch.fx.Graph, int_matmul.IntMatmul], None]]:
    """Edits of one recipe, each a way its pieces can disagree."""

    def op(r: int_matmul.IntMatmul, name: str) -> torch.fx.Node:
        return next(n for n in r.inner if n.target == getattr(torch.ops.aten, name).Tensor)

    def offset(g: torch.fx.Graph, r: int_matmul.IntMatmul) -> None:
        add = op(r, "add")
        add.args = (add.args[0], 127)

    def taken_out(g: torch.fx.Graph, r: int_matmul.IntMatmul) -> None:
        mul = op(r, "mul")
        mul.args = (mul.args[0], 64)

    def next_mul(n: torch.fx.Node) -> torch.fx.Node:  # (through casts)
        u = next(u for u in n.users if "assert" not in str(u.target))
        return u if u.target == torch.ops.aten.mul.Tensor else next_mul(u)

    def scaled(which: int) -> Callable[[torch.fx.Graph, int_matmul.IntMatmul], None]:
        def edit(g: torch.fx.Graph, r: int_matmul.IntMatmul) -> None:
            mul = next_mul(r.result)  # by the token's scale, then by the weight's
            mul = next_mul(mul) if which else mul
            with g.inserting_before(mul):
                doubled = g.call_function(torch.ops.aten.mul.Tensor, (mul.args[1], 2.0))
            doubled.meta = dict(mul.args[1].meta)
            mul.args = (mul.args[0], doubled)

        return edit

    def asymmetric(g: torch.fx.Graph, r: int_matmul.IntMatmul) -> None:
        chooser = r.quantize.args[3].args[0]
        chooser.args = (chooser.args[0], "ASYMMETRIC", *chooser.args[2:])

    def no_correction(g: torch.fx.Graph, r: int_matmul.IntMatmul) -> None:
        sub = next(n for n in r.inner if "sub" in str(n.target))
        sub.args = (sub.args[0], 0)

    return {
        "offset 127": offset, "128 × Σw → 64 × Σw": taken_out, "token scale ×2": scaled(0),
        "weight scale ×2": scaled(1), "asymmetric codes": asymmetric, "no correction": no_correction,
    }  # fmt: skip


#: The mutants of each recipe (s8s8 has no shift to get wrong).
SHIFT_MUTANTS = {"offset 127", "128 × Σw → 64 × Σw", "no correction"}
RECIPE_MUTANTS = [(r, m) for r in RECIPES for m in _recipe_mutants() if r == "u8s8" or m not in SHIFT_MUTANTS]


@pytest.mark.parametrize(("recipe", "mutant"), RECIPE_MUTANTS)
def test_every_int8_dynamic_recipe_mutant_that_changes_the_output_is_an_error(int8_dynamic, recipe, mutant) -> None:
    """Each mutant edits the first linear's recipe of the exported Llama-shaped program and runs it in
    eager PyTorch: it changes the output, and qflow calls it an error at that recipe — or, where the
    edit leaves no recipe to recognise (no correction at all), unproven. Never proved."""
    ep, inputs = int8_dynamic["llama", recipe]
    clean = ep.module()(*inputs)
    bad = copy.deepcopy(ep)
    g = bad.graph_module.graph
    first = next(n for n in g.nodes if n.target == torch.ops.aten._int_mm.default)
    recipe = int_matmul.match(first, lambda n: True)
    assert recipe is not None and not recipe.problems
    _recipe_mutants()[mutant](g, recipe)
    bad.graph_module.recompile()
    with torch.no_grad():
        assert float((bad.module()(*inputs) - clean).abs().max()) > 1e-3 * float(clean.abs().max())
    report = qflow.analyze(bad, target="xnnpack")
    if mutant == "no correction":
        assert report.status == "unproven", str(report)
    else:
        assert [(f.kind, f.node) for f in report.errors] == [("kernel-argument-mismatch", recipe.result.name)]
