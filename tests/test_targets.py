"""Targets: each backend's contract decides the verdict, on real Arm pipelines.

The numbers come from the TOSA reference model against the fake-quantized
PT2E model, in output LSBs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import qflow
from qflow import targets
from qflow.examples.models import _annotate, _fixed_qspec
from qflow.targets import Fusion, OpRule
from qflow.targets.arm import pipeline as arm
from qflow.targets.contract import STRICTNESS


# -- the contracts as data ----------------------------------------------------------
def test_unknown_target_is_a_clear_error() -> None:
    with pytest.raises(qflow.InputError, match="unknown target 'bogus'"):
        targets.get("bogus")


def test_generic_takes_the_strictest_rule_of_every_target() -> None:
    generic, tosa = targets.get(None), targets.get("arm-tosa")
    assert generic.name == "generic" and set(generic.members) == {"arm-tosa", "xnnpack"}
    xnn = targets.get("xnnpack")
    for t in (tosa, xnn):
        for op, rule in t.op_rules.items():
            assert STRICTNESS.index(generic.rule(op)) >= STRICTNESS.index(rule)
    assert generic.rule("neg") is OpRule.ZP_ONLY
    assert generic.fusion is Fusion.NARROW_QMIN  # arm-tosa narrows, so the union must too
    assert targets.get("xnnpack").fusion is Fusion.CODE_CLAMP


#: The edge dialect's names of measured ops (the probe measures the aten op).
_MEASURED_AS = {"convolution": "conv2d", "_softmax": "softmax"}
#: The measured table's variant of each (target, activation dtype).
_VARIANT = {("arm-tosa", "int8"): "arm-tosa", ("arm-tosa", "int16"): "arm-tosa+int16", ("xnnpack", "int8"): "xnnpack"}


@pytest.mark.parametrize(("target", "dtype"), sorted(_VARIANT))
def test_every_validated_lowering_was_measured_to_compute_right(target, dtype) -> None:
    """A target's `validated` ops are data from the contract probe's measured table, not a belief:
    each was measured quantized — stock, or with the probe's int8 annotation where the stock
    quantizer leaves the op float — and delegated, within 1 output LSB of the fake-quantized model
    (the rounding of its one requant) on the backend; and never measured wrong stock."""
    rows = json.loads((Path(__file__).parents[1] / "benchmarks" / "contracts.json").read_text())["rows"]
    rows = [r for r in rows if r["target"] == _VARIANT[(target, dtype)]]
    measured = {
        r["op"]
        for r in rows
        if (r["variant"] == "stock" or r["quantizer"] == "custom")
        and not r["detail"].startswith("float")
        and r["outcome"] == "exact"
        and float(r["lsb"]) <= 1.0
    }
    wrong = {r["op"] for r in rows if r["variant"] == "stock" and r["outcome"] not in ("exact", "left on CPU")}
    validated = targets.get(target).validated[dtype]
    assert {_MEASURED_AS.get(op, op) for op in validated} <= measured - wrong
    assert targets.get(target).lowering_validated("linear", dtype)


def test_xnnpack_refuses_int16_programs_at_lowering() -> None:
    """The measurement behind xnnpack's `refused_dtypes`: an a16w8 program is refused loudly."""
    from executorch.backends.arm.quantizer import get_symmetric_a16w8_quantization_config
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    class Add(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x + y

    x = (torch.randn(1, 4, 16), torch.randn(1, 4, 16))
    converted = arm.quantize(Add(), x, spec="TOSA-1.0+INT+int16", config=get_symmetric_a16w8_quantization_config())
    with pytest.raises(ValueError, match="Unsupported dtype for quantization"):
        to_edge_transform_and_lower(torch.export.export(converted, x), partitioner=[XnnpackPartitioner()])
    assert "int16" in targets.get("xnnpack").refused_dtypes


def test_delegates_name_their_target() -> None:
    assert targets.for_backend("TOSABackend").name == "arm-tosa"
    assert targets.for_backend("EthosUBackend").name == "arm-tosa"
    assert targets.for_backend("XnnpackBackend").name == "xnnpack"
    assert targets.for_backend("SomethingElse") is None


# -- real pipelines: zero-point-only and code-copying lowerings on arm-tosa ------------
class NegHardtanh(nn.Module):
    """The stock TOSAQuantizer lets hardtanh share its signed input's domain and
    gives neg its own observer: TOSA NEGATE applies the zero points, not the scales."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.neg(F.hardtanh(x, 0.0, 6.0))


class Activation(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.conv = nn.Conv2d(2, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 1.5
        if self.kind == "relu":
            y = torch.relu(y)
        elif self.kind == "hardtanh":
            y = F.hardtanh(y, -1.0, 2.0)
        else:
            y = torch.clamp(y, -0.5, 3.0)
        return self.conv(y)


_ACT_TARGETS = {
    "relu": torch.ops.aten.relu.default,
    "hardtanh": torch.ops.aten.hardtanh.default,
    "clamp": torch.ops.aten.clamp.default,
}


class RequantAcrossActivation(arm.TOSAQuantizer):
    """The stock annotation, then the activation's output gets its own fixed
    domain (a requant across it, as custom annotations in the style of seed 000 do)."""

    def __init__(self, kind: str) -> None:
        super().__init__(arm.TosaCompileSpec(arm.DEFAULT_SPEC))
        self.kind = kind
        self.set_global(arm.get_symmetric_quantization_config(is_per_channel=True))

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        model = super().annotate(model)
        [act] = [n for n in model.graph.nodes if n.target == _ACT_TARGETS[self.kind]]
        spec = _fixed_qspec(
            scale=4.0 / 255,
            zero_point=-100,
            dtype=torch.int8,
            qscheme=torch.per_tensor_affine,
            quant_min=-128,
            quant_max=127,
        )
        qa = act.meta["quantization_annotation"]
        _annotate(act, qa.input_qspec_map, spec)
        return model


@dataclass
class Case:
    converted: torch.fx.GraphModule
    inputs: tuple[torch.Tensor, ...]
    lowered: Any
    reference: torch.Tensor
    out_scale: float

    def lsb(self, lowered: Any) -> float:
        [out] = arm.run_tosa_reference(lowered, self.inputs)
        return ((out - self.reference).abs().max() / self.out_scale).item()


def _case(model: nn.Module, inputs: tuple[torch.Tensor, ...], quantizer: Any = None) -> Case:
    converted = arm.quantize(model, inputs, quantizer=quantizer)
    out_q = next(n for n in converted.graph.nodes if n.op == "output").args[0][0]
    return Case(converted, inputs, arm.lower(converted, inputs), converted(*inputs), float(out_q.args[1]))


@pytest.fixture(scope="module")
def cases() -> dict[str, Case]:
    torch.manual_seed(0)
    x4 = torch.randn(1, 2, 4, 4) * 2
    out = {"neg": _case(NegHardtanh(), (torch.randn(1, 2, 4, 4) * 4,))}
    for kind in _ACT_TARGETS:
        out[kind] = _case(Activation(kind).eval(), (x4,), RequantAcrossActivation(kind))
    return out


EXPECTED_KIND = {"neg": "dropped-scale", "relu": "requant-across-activation"}
EXPECTED_KIND["hardtanh"] = EXPECTED_KIND["clamp"] = EXPECTED_KIND["relu"]


@pytest.mark.parametrize("name", ["neg", "relu", "hardtanh", "clamp"])
def test_arm_lowering_that_drops_a_domain_change_is_an_error_before_partitioning(cases, name) -> None:
    c = cases[name]
    assert c.lsb(c.lowered) > 2.0  # the miscompile, measured on the TOSA reference model
    for target in ("arm-tosa", None):
        report = qflow.analyze(c.converted, target=target)
        assert not report.proved
        [f] = report.errors
        assert f.kind == EXPECTED_KIND[name]
        assert f.targets == {"arm-tosa": "silent miscompile"}
        assert report.target == (target or "generic")
    # the lowered program's partition is read by its delegate's own target
    lowered = qflow.analyze(c.lowered)
    assert EXPECTED_KIND[name] in {f.kind for f in lowered.errors}


@pytest.mark.parametrize("name", ["neg", "relu", "hardtanh", "clamp"])
def test_repair_for_the_target_is_exact_on_the_tosa_reference_model(cases, name) -> None:
    c = cases[name]
    repaired = qflow.repair(c.converted, target="arm-tosa")
    assert qflow.analyze(repaired, target="arm-tosa").proved
    lowered = arm.lower(repaired, c.inputs)
    assert c.lsb(lowered) <= 1.0 + 1e-4
    # the repair moves requants, not what the model computes
    assert ((repaired(*c.inputs) - c.reference).abs().max() / c.out_scale).item() <= 1.0 + 1e-4


def test_stock_arm_models_keep_no_error_with_every_target(built) -> None:
    b = built("conv_bn_relu6_residual")
    for target in ("arm-tosa", "xnnpack", None):
        assert not qflow.analyze(b.converted, target=target).errors


def test_the_lowerings_measured_off_are_the_measured_table_rows() -> None:
    """`measured_off` (what an unvalidated-lowering finding says was measured) holds the stock int16
    rows of the contract table measured wrong, with their numbers, those refused at lowering, and the
    int16 TABLE ops the transformer campaign found off."""
    rows = json.loads((Path(__file__).parents[1] / "benchmarks" / "contracts.json").read_text())["rows"]
    stock16 = [r for r in rows if r["target"] == "arm-tosa+int16" and r["variant"] == "stock"]
    wrong = {r["op"]: float(r["lsb"]) for r in stock16 if r["outcome"] == "miscompile"}
    refused = {r["op"] for r in stock16 if r["outcome"] == "refused at lowering"}
    off = targets.get("arm-tosa").measured_off["int16"]
    assert set(wrong) <= {_MEASURED_AS.get(op, op) for op in off}
    for op, text in off.items():
        measured = wrong.get(_MEASURED_AS.get(op, op))
        # the rest: refused, or measured exact on the probe and off in the transformer campaign, as the text says
        if measured is not None:
            assert f" {measured:g} output LSB off" in text
        else:
            assert "refused at lowering" in text if op in refused else "transformer campaign" in text
        assert not targets.get("arm-tosa").lowering_validated(op, "int16")
