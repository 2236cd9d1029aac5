"""A delegate output the backend's payload never writes (ExecuTorch 1.5.1, XNNPACK).

The stock XNNPACKQuantizer quantizes two linears; an ``mm`` of their outputs stays on the CPU in float.
The partitioner's mm config takes the dequantizes of the mm's operands into the delegate before it, and
the payload never writes the first one: the CPU mm reads an unwritten buffer and the program returns
numbers the whole output range off the fake-quantized model, with no error. With the second operand
transposed (``q @ k.T``, a permute between the dequantize and the mm) it is lowered right. Measured
here on the ExecuTorch runtime; qflow must call the first an error in every form it reads and prove
the second.
"""

from __future__ import annotations

import pytest
import torch
from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

import qflow
from qflow.targets.xnnpack import pipeline as xnnpack

KIND = "unwritten-delegate-output"


class TwoHeads(torch.nn.Module):
    def __init__(self, transposed: bool) -> None:
        super().__init__()
        self.q, self.k, self.transposed = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16), transposed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.k(x)
        return torch.mm(self.q(x), k.T if self.transposed else k)


def _forms(transposed: bool) -> dict[str, object]:
    torch.manual_seed(0)
    model, x = TwoHeads(transposed).eval(), (torch.randn(16, 16),)
    prepared = prepare_pt2e(torch.export.export(model, x).module(), xnnpack.default_quantizer())
    prepared(*x)
    converted = xnnpack.quantize(model, x)
    edge = xnnpack.lower(converted, x)
    pte = xnnpack.to_executorch(edge).buffer
    off = (converted(*x) - xnnpack.run(pte, x)[0]).abs().max().item()
    scale = converted(*x).abs().max().item()
    return {"off": off / scale, "annotated": prepared, "qdq": converted, "lowered": edge, "pte": pte}


@pytest.fixture(scope="module")
def untransposed() -> dict[str, object]:
    return _forms(transposed=False)


@pytest.fixture(scope="module")
def transposed() -> dict[str, object]:
    return _forms(transposed=True)


FORMS = ("annotated", "qdq", "lowered", "pte")


def test_the_runtime_computes_the_mm_of_two_activations_wrong(untransposed, transposed) -> None:
    assert untransposed["off"] > 0.5  # (of the output's largest magnitude)
    assert transposed["off"] < 0.01


@pytest.mark.parametrize("form", FORMS)
def test_the_unwritten_operand_is_an_error_in_every_form(untransposed, form: str) -> None:
    report = qflow.analyze(untransposed[form], target="xnnpack")
    assert report.status == "violated"
    assert KIND in {f.kind for f in report.errors}, [f.message for f in report.findings]


@pytest.mark.parametrize("form", FORMS)
def test_the_transposed_operand_is_proved_in_every_form(transposed, form: str) -> None:
    report = qflow.analyze(transposed[form], target="xnnpack")
    assert report.status == "proved", [f.message for f in report.findings if f.severity != "info"]


def test_the_finding_names_the_unwritten_output_of_the_first_operand(untransposed) -> None:
    """The mm's first operand (q) is the one the payload never writes."""
    (f,) = [f for f in qflow.analyze(untransposed["pte"], target="xnnpack").errors if f.kind == KIND]
    assert "XNNPACK flatbuffer" in f.message and "writes no tensor" in f.message
    (lowered,) = [f for f in qflow.analyze(untransposed["lowered"], target="xnnpack").errors if f.kind == KIND]
    gm = untransposed["lowered"].exported_program().graph_module
    mm = next(n for n in gm.graph.nodes if "mm" in str(n.target))
    assert lowered.node == mm.name and f"output {mm.args[0].args[1]} " in lowered.message, lowered.message
