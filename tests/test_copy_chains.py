"""Requants a code-copying target drops and a later requant cancels (copy_chains).

Real Arm pipelines: ``x * 1.5`` in domain A, a slice whose output is
requantized into B, a relu back into A, the graph output. Arm folds both
requants into the code copies, so the codes never leave A. That is exact when
B clips nothing the relu keeps (campaign case 00061) and a miscompile when it
does, or when the relu's bound, quantized in its output domain, is another
code in A. The TOSA reference model is the judge, in output LSBs.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import qflow
from qflow.examples.models import _fixed_qspec
from qflow.targets.arm import pipeline as arm

A = (0.02, 0)  # int8 [-2.56, 2.54]
X = (torch.linspace(-1.7, 1.7, 32).reshape(1, 2, 4, 4),)  # x * 1.5 spans A's range
CHAINS = {
    # name: (op order, first op's output domain, second op's, what the TOSA reference model gives)
    "carried": ("slice-relu", (0.01, -128), A, "exact"),  # B = [0, 2.55] clips only what relu removes; A ⊂ B
    "clipping": ("slice-relu", (0.005, -128), A, "miscompile"),  # B = [0, 1.275] clips values relu keeps
    "relu-bound": ("relu-slice", (0.02, -50), A, "miscompile"),  # relu's bound quantized in B: code -50, not 0
    "read": ("slice-relu", (0.01, -128), (0.01, -128), "miscompile"),  # the output reads the codes as B
}


class CopyChain(nn.Module):
    def __init__(self, order: str) -> None:
        super().__init__()
        self.order = order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 1.5
        if self.order == "slice-relu":
            return torch.relu(y[:, :, 1:3])
        return torch.relu(y)[:, :, 1:3]


class FixedChain(arm.TOSAQuantizer):
    """The stock per-tensor annotation, then fixed int8 domains for mul and the two copies, each
    read as its producer writes it (the requants sit at the copies' outputs)."""

    def __init__(self, order: str, first: tuple[float, int], second: tuple[float, int]) -> None:
        super().__init__(arm.TosaCompileSpec(arm.DEFAULT_SPEC))
        self.set_global(arm.get_symmetric_quantization_config(is_per_channel=False))
        names = order.split("-")
        self.domains = {"mul": A, names[0]: first, names[1]: second}

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        model = super().annotate(model)
        specs = {}
        for node in model.graph.nodes:
            name = getattr(node.target, "__name__", "").split(".")[0]
            if name in self.domains and "quantization_annotation" in node.meta:
                scale, zp = self.domains[name]
                spec = _fixed_qspec(
                    scale=scale,
                    zero_point=zp,
                    dtype=torch.int8,
                    qscheme=torch.per_tensor_affine,
                    quant_min=-128,
                    quant_max=127,
                )
                qa = node.meta["quantization_annotation"]
                qa.output_qspec = specs[node] = spec
                for src in qa.input_qspec_map:  # read the producer's output as it is (no requant edge)
                    if src in specs:
                        qa.input_qspec_map[src] = specs[src]
        return model


@pytest.fixture(scope="module")
def chains() -> dict[str, Any]:
    out = {}
    for name, (order, first, second, _) in CHAINS.items():
        converted = arm.quantize(CopyChain(order), X, quantizer=FixedChain(order, first, second))
        lowered = arm.lower(converted, X)
        out[name] = (converted, lowered, _lsb(converted, lowered))
    return out


def _lsb(converted: torch.fx.GraphModule, lowered: Any) -> float:
    """The TOSA reference model against the fake-quantized program, in output LSBs (0.02)."""
    [got] = arm.run_tosa_reference(lowered, X)
    return ((got - converted(*X)).abs().max() / A[0]).item()


@pytest.mark.parametrize("name", list(CHAINS))
def test_a_dropped_requant_is_proved_only_when_a_later_one_cancels_it(chains, name) -> None:
    converted, lowered, lsb = chains[name]
    truth = CHAINS[name][3]
    assert (lsb <= 1.0) == (truth == "exact"), f"{name}: {lsb:.1f} LSB on the TOSA reference model"
    report = qflow.analyze(converted, target="arm-tosa")
    kinds = {f.kind for f in report.findings}
    if truth == "exact":
        assert report.proved, report.errors
        assert "requant-carried" in kinds
        assert not qflow.analyze(lowered).errors  # the delegate's own target carries it too
    else:
        assert not report.proved and report.errors
        if name == "read":  # the slice's drop is carried to the relu, whose quantize is read as B
            [f] = report.errors
            assert f.node == "relu" and "the codes are still those of slice" in f.message
        else:
            assert "requant-carried" not in kinds
            assert any("not cancelled further down" in f.message for f in report.errors)
        assert qflow.analyze(lowered).errors


def test_a_target_with_members_does_not_carry(chains) -> None:
    """generic = arm-tosa ∪ xnnpack: a member that rescales across relu reads
    the codes as B, so no chain is carried and the drop stays an error."""
    converted, _, _ = chains["carried"]
    report = qflow.analyze(converted, target=None)
    assert not report.proved and "requant-carried" not in {f.kind for f in report.findings}


@pytest.mark.parametrize("name", [n for n, c in CHAINS.items() if c[3] == "miscompile"])
def test_repair_undoes_the_chain_and_is_exact_on_the_tosa_reference_model(chains, name) -> None:
    """The repair is planned with every dropped requant on its own, so no
    requant it inserts is read through a chain it leaves in place."""
    converted, _, _ = chains[name]
    repaired = qflow.repair(converted, target="arm-tosa")
    assert qflow.analyze(repaired, target="arm-tosa").proved
    assert _lsb(converted, arm.lower(repaired, X)) <= 1.0 + 1e-4


class TwoHops(nn.Module):
    """A slice and a transpose, each requantized, then a relu back into the mul's domain: Arm folds all
    three requants, so the relu's CLAMP reads codes of A, its bounds quantized in A (the relu's output)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu((x * 1.5)[:, :, 1:3].transpose(2, 3))


HOPS = {
    # name: (A, the slice's domain, the transpose's, what the TOSA reference model gives)
    # A holds no positive value: the CLAMP [code of 0, qmax] in A keeps one code whatever the hops did
    "masked": ((0.02, 127), (0.015, 100), (0.015, 30), "exact"),
    # the same hops into a domain with room above 0: the transpose's grid clips what the relu keeps
    "clipping": ((0.02, 0), (0.015, 0), (0.005, 0), "miscompile"),
}


@pytest.mark.parametrize("name", list(HOPS))
def test_a_dropped_chain_into_an_activation_is_weighed_by_the_clamp_it_becomes(name) -> None:
    """Two hops whose roundings move codes of A are no carried chain; what the relu's CLAMP keeps of
    them is (`activation_codes`: QuantizeClampArgumentsPass quantizes its bounds in the output domain).
    Campaign case 00056-arm-custom (a stack, a flatten, a hardtanh) was this false alarm."""
    a, first, second, truth = HOPS[name]
    quantizer = FixedChain("slice-relu", first, a)
    quantizer.domains = {"mul": a, "slice": first, "transpose": second, "relu": a}
    converted = arm.quantize(TwoHops(), X, quantizer=quantizer)
    lowered = arm.lower(converted, X)
    [got] = arm.run_tosa_reference(lowered, X)
    lsb = ((got - converted(*X)).abs().max() / a[0]).item()
    assert (lsb <= 1.0) == (truth == "exact"), f"{name}: {lsb:.1f} LSB on the TOSA reference model"
    report = qflow.analyze(converted, target="arm-tosa")
    lowered_report = qflow.analyze(lowered, target="arm-tosa", reference=torch.export.export(converted, X))
    if truth == "exact":
        assert report.proved, report.errors
        assert not lowered_report.errors
    else:
        assert report.errors and max(f.output_lsb or 0 for f in report.errors) >= lsb
        assert lowered_report.errors
