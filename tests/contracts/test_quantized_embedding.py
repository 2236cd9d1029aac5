"""ExecuTorch's quantized embedding kernels, as `export_llm`'s ``quantization.embedding_quantize``
writes them (issue #28): measured on the ExecuTorch runtime against the ops' reference
implementation, and proved by qflow before `to_edge`, on the edge program and in the `.pte`.

Measured (2026-11-27, torch 2.13.0, executorch 1.5.1): `embedding_byte`, `embedding_4bit` and
`embedding_2bit`, per row and per group of 32, return on the runtime exactly what the eager model
returns (the ops' Python definitions, which unpack the codes and dequantize them by their scales).
"""

from __future__ import annotations

from dataclasses import dataclass

import executorch.kernels.quantized  # noqa: F401 - registers the quantized kernels with the runtime
import pytest
import torch
from executorch.examples.models.llama.source_transformation.quantize import get_quant_embedding_transform
from executorch.exir import to_edge

import qflow
from qflow.targets.xnnpack import pipeline as xnnpack

#: bits, group size ("0": one scale per row), as `embedding_quantize` spells them
CONFIGS = ("8,0", "8,32", "4,0", "4,32", "2,32")


class Tokens(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(128, 64)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.emb(tokens) * 2.0


@dataclass(frozen=True)
class Built:
    exported: object
    edge: object
    pte: bytes
    eager: torch.Tensor
    got: torch.Tensor


@pytest.fixture(scope="module")
def built() -> dict[str, Built]:
    out = {}
    tokens = (torch.arange(0, 128, 5).reshape(1, -1),)  # (every row kind: 26 tokens)
    for config in CONFIGS:
        torch.manual_seed(0)
        model = get_quant_embedding_transform(config, quantize_with_hqq=False)(Tokens().eval())
        exported = torch.export.export(model, tokens)
        edge = to_edge(exported)
        pte = xnnpack.to_executorch(edge).buffer
        out[config] = Built(exported, edge, pte, model(*tokens), xnnpack.run(pte, tokens)[0])
    return out


@pytest.mark.parametrize("config", CONFIGS)
def test_the_kernel_computes_its_reference_on_the_runtime(built, config) -> None:
    b = built[config]
    assert b.got.shape == b.eager.shape
    assert torch.equal(b.got.to(b.eager.dtype), b.eager), float((b.got - b.eager).abs().max())


@pytest.mark.parametrize("config", CONFIGS)
def test_qflow_proves_it_before_to_edge_on_the_edge_program_and_in_the_pte(built, config) -> None:
    b = built[config]
    for program in (b.exported, b.edge, b.pte):
        report = qflow.analyze(program)
        assert report.status == "proved", str(report)
        assert not [f for f in report.findings if f.kind in ("unknown-op", "nothing-quantized")]
        assert report.quantized  # (a table of codes is a quantized program)


def test_a_code_range_the_kernel_does_not_unpack_is_an_error(built) -> None:
    """A 4-bit kernel told its codes span [-128, 127] (the eager op refuses it; qflow says why). (It sits
    in the subgraph that the model's `torch.no_grad()` wraps: `wrap_with_set_grad_enabled`.)"""
    ep = built["4,32"].exported
    graphs = [m.graph for m in ep.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]
    node = next(n for g in graphs for n in g.nodes if "embedding_4bit" in str(n.target))
    node.args = (*node.args[:3], -128, 127, *node.args[5:])
    try:
        report = qflow.analyze(ep)
    finally:
        node.args = (*node.args[:3], -8, 7, *node.args[5:])
    found = [f for f in report.errors if f.kind == "kernel-argument-mismatch"]
    assert [f.node.rsplit("/", 1)[-1] for f in found] == [node.name], report.findings
    assert "unpacks 4-bit codes of [-8, 7]" in found[0].message
