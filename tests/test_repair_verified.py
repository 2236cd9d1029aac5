"""A repair is verified, not assumed (issue 13), on the real Arm pipeline.

For every defect model: the repaired program lowered with the real TOSA
partitioner and run on the TOSA reference model matches its *own*
fake-quantized model within 1 output LSB, and the repaired fake-quantized
model stays within one rounding step of the original one (a repair moves
where requants happen, not what the model computes). A program that already
proves is never touched. The crashes the soundness campaign hit each have a
regression test here, on custom seed-000-style annotations.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from executorch.backends.arm.quantizer import TOSAQuantizer, get_symmetric_quantization_config
from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
from torch import nn

import qflow
from qflow.examples.models import _annotate, _fixed_qspec
from qflow.targets.arm import pipeline as arm

INT16 = "TOSA-1.0+INT+int16"
ONE_LSB = 1.0 + 1e-4


def _q8(scale: float = 0.05, zp: int = 10) -> Any:
    return _fixed_qspec(
        scale=scale, zero_point=zp, dtype=torch.int8, qscheme=torch.per_tensor_affine, quant_min=-128, quant_max=127
    )


def _q16(scale: float = 1 / 4096, zp: int = 0) -> Any:
    scheme = torch.per_tensor_symmetric if zp == 0 else torch.per_tensor_affine
    return _fixed_qspec(
        scale=scale, zero_point=zp, dtype=torch.int16, qscheme=scheme, quant_min=-32767, quant_max=32767
    )


class Overriding(TOSAQuantizer):
    """The stock quantizer, then fixed qparams written over some nodes (seed 000's
    style, as the soundness campaign's custom annotations do)."""

    def __init__(self, spec: str, op: str, inputs: Any, output: Any) -> None:
        super().__init__(TosaCompileSpec(spec))
        self.set_global(get_symmetric_quantization_config())
        self.op, self.inputs, self.output = op, inputs, output

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        model = super().annotate(model)
        for node in list(model.graph.nodes):
            if node.op == "call_function" and self.op in str(node.target):
                qa = node.meta.get("quantization_annotation")
                keep = self.inputs is None
                ins = dict(qa.input_qspec_map) if keep else dict.fromkeys(node.all_input_nodes, self.inputs)
                _annotate(node, ins, self.output)
        return model


class ConvViewCat(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c, self.d = nn.Conv2d(3, 4, 1), nn.Conv2d(8, 2, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.d(torch.cat([self.c(x).view(1, 4, 4, 4), y], 1))


class PermuteCatAdd(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([x.permute(0, 1, 3, 2), y], 1) + 0.5


#: name → (model class, first input shape, overridden op, its input qspec (None: keep), its output qspec)
CUSTOM = {
    # the requant folded through cat, int8 → int16 (seed 000's shape on a conv model)
    "cat_int16": (ConvViewCat, (1, 3, 4, 4), "aten.cat", None, _q16()),
    # a view / permute claiming int16 over int8 input: the planner once took the
    # target's range (int16 [-128, 127]) or a float32 domain from the pass-through op
    "view_int16": (ConvViewCat, (1, 3, 4, 4), "aten.view", None, _q16()),
    "permute_int16": (PermuteCatAdd, (1, 4, 4, 4), "aten.permute", None, _q16()),
    # cat inputs in two int8 domains, output int16: two requants
    "cat_mixed": (PermuteCatAdd, (1, 4, 4, 4), "aten.cat", _q8(), _q16(1 / 2048)),
    # an int16 domain with zero point 5: TOSA has no such int16 domain to requant into
    "cat_int16_zp5": (PermuteCatAdd, (1, 4, 4, 4), "aten.cat", None, _q16(1 / 2048, 5)),
}


@dataclass
class Custom:
    converted: torch.fx.GraphModule
    inputs: tuple[torch.Tensor, ...]
    lowered: Any
    spec: str = INT16


@pytest.fixture(scope="session")
def custom() -> Any:
    cache: dict[str, Custom] = {}

    def get(name: str) -> Custom:
        if name not in cache:
            cls, shape, op, ins, out = CUSTOM[name]
            torch.manual_seed(0)
            inputs = (torch.randn(*shape), torch.randn(1, 4, 4, 4))
            converted = arm.quantize(cls().eval(), inputs, quantizer=Overriding(INT16, op, ins, out))
            lowered = arm.lower(torch.export.export(converted, inputs), inputs, spec=INT16)
            cache[name] = Custom(converted, inputs, lowered)
        return cache[name]

    return get


def _out_scale(gm: torch.fx.GraphModule) -> float:
    return next(n for n in gm.graph.nodes if n.op == "output").args[0][0].args[1]


def _lsb(a: torch.Tensor, b: torch.Tensor, scale: float) -> float:
    return ((a - b).abs().max() / scale).item()


def verify(converted: torch.fx.GraphModule, inputs: tuple[torch.Tensor, ...], spec: str) -> dict[str, float]:
    """Repair `converted`, lower the repair on the real backend, run it on the
    TOSA reference model: the two distances of issue 13, in output LSBs."""
    scale = _out_scale(converted)
    original = converted(*inputs)
    fixed = qflow.repair(converted)
    assert fixed is not converted and qflow.analyze(fixed).proved
    own = fixed(*inputs)
    with arm.capture_after() as parts:
        lowered = arm.lower(fixed, inputs, spec=spec)
    assert parts and all(qflow.analyze(p).proved for p in parts)
    [out] = arm.run_tosa_reference(lowered, inputs)
    return {"backend_vs_own": _lsb(out, own, scale), "drift": _lsb(own, original, scale)}


# -- every defect model ---------------------------------------------------------

DEFECT_EXAMPLES = ["seed000_probe", "conv_relu_cat_skip", "conv_relu_cat_signed", "seed001_tiny_conv_relu_cat"]


@pytest.mark.parametrize("name", DEFECT_EXAMPLES)
def test_repaired_example_matches_its_own_fake_quant_and_keeps_its_meaning(built, name) -> None:
    b = built(name)
    assert not qflow.analyze(b.converted).proved or qflow.analyze(b.converted).findings
    d = verify(b.converted, b.inputs, b.spec)
    assert d["backend_vs_own"] <= ONE_LSB and d["drift"] <= ONE_LSB, d


@pytest.mark.parametrize("name", ["cat_int16", "view_int16", "permute_int16", "cat_mixed"])
def test_repaired_custom_annotation_is_exact_on_the_tosa_reference_model(custom, name) -> None:
    c = custom(name)
    scale = _out_scale(c.converted)
    [before] = arm.run_tosa_reference(c.lowered, c.inputs)
    assert _lsb(before, c.converted(*c.inputs), scale) > 10  # measured 44-160 LSB: a real miscompile
    d = verify(c.converted, c.inputs, c.spec)
    assert d["backend_vs_own"] <= ONE_LSB and d["drift"] <= ONE_LSB, d


ACTIVATION_CASES = [("conv", "relu6", 1.0, arm.DEFAULT_SPEC), ("linear", "hardtanh01", 0.3, arm.DEFAULT_SPEC)]


@pytest.mark.parametrize("producer, activation, y_scale, spec", ACTIVATION_CASES)
def test_repaired_activation_model_matches_and_keeps_its_meaning(producer, activation, y_scale, spec) -> None:
    from test_activations import Case  # the activation models of tests/test_activations.py

    c = Case(producer, activation, y_scale, spec)
    d = verify(c.converted, c.inputs, c.spec)
    assert d["backend_vs_own"] <= ONE_LSB and d["drift"] <= ONE_LSB, d


def test_a_warning_repair_keeps_the_meaning() -> None:
    """Seed 001's linear shape: proved, with a warning (1.5.1 cannot lower it).
    Its repair gives the activation its own domain; the numbers stay put."""
    from test_activations import Case

    c = Case("linear", "hardtanh01", 3.0, "TOSA-1.0+INT+FP")
    r = qflow.analyze(c.converted)
    assert r.proved and [f.severity for f in r.findings] == ["warning"]
    d = verify(c.converted, c.inputs, c.spec)
    assert d["backend_vs_own"] <= ONE_LSB and d["drift"] <= ONE_LSB, d


# -- a proved program is never touched --------------------------------------------


@pytest.mark.parametrize("name", ["seed000_control", "conv_cat_skip", "linear_per_channel", "mixed_a16w8"])
def test_a_proved_program_is_returned_untouched_in_every_form(built, clean, name) -> None:
    """And one left unproven by what no requant fixes (mixed_a16w8: its int16 linear's 16-bit-multiplier rescale)
    is refused with a ProofError naming it, also untouched."""
    b = built(name)
    for obj in (b.converted, b.exported, b.lowered, *b.partitions):
        r = qflow.analyze(obj)
        clean(r, name)
        assert not [f for f in r.findings if f.severity not in ("info", "warning")], str(r)
        gm = obj if isinstance(obj, torch.fx.GraphModule) else getattr(obj, "graph_module", None)
        before = str(gm.graph) if gm is not None else None
        if r.proved:
            assert qflow.repair(obj) is obj
        else:
            with pytest.raises(qflow.ProofError) as e:
                qflow.repair(obj)
            assert {f.kind for f in e.value.report.findings} == {"rounded-twice"}
        assert gm is None or str(gm.graph) == before


# -- the crashes, each on a real pipeline graph -------------------------------------


@pytest.mark.parametrize("name", ["view_int16", "permute_int16", "cat_mixed"])
def test_plans_only_target_integer_domains_the_program_uses(custom, name) -> None:
    """Was: `InputError: ... float32 is not one` (permute, cat_mixed) and an int16
    requant with the int8 range [-128, 127] (view)."""
    c = custom(name)
    plan = qflow.plan(c.converted)
    used = {
        (n.args[5], n.args[1], n.args[2], n.args[3], n.args[4])
        for n in c.converted.graph.nodes
        if "quantize_per_tensor" in str(n.target)
    }
    assert plan.requants
    for rq in plan.requants:
        t = rq.target
        assert not t.is_float and t.dtype in ("int8", "int16")
        assert (t.qmin, t.qmax) in ((-128, 127), (-32767, 32767))
        assert t.dtype != "int16" or t.zero_point == 0
        assert any(u[1:] == (pytest.approx(t.scale), t.zero_point, t.qmin, t.qmax) for u in used)


def test_an_int16_domain_tosa_cannot_hold_is_refused_naming_it(custom) -> None:
    c = custom("cat_int16_zp5")
    plan = qflow.plan(c.converted)
    assert not plan.requants and plan.unrepairable
    assert any("zero point 0" in r for r in plan.reasons)
    with pytest.raises(qflow.ProofError) as e:
        qflow.repair(c.converted)
    assert any("repair blocked" in n and "zero point 0" in n for n in e.value.report.notes)


@pytest.mark.parametrize("name", ["cat_int16", "permute_int16", "cat_mixed"])
def test_a_finding_inside_a_delegate_is_repaired_by_lowering_the_partition_again(custom, name) -> None:
    """Was: `KeyError: 'lowered_module_0/...'` / "the plan names edge ... which is
    not in the graph". The partition as handed to the backend is repaired and
    lowered again by the same backend; the TOSA output is then exact."""
    c = custom(name)
    plan = qflow.plan(c.lowered)
    assert plan.delegates() == ["lowered_module_0"]
    fixed = qflow.repair(c.lowered)
    assert fixed is not c.lowered and qflow.analyze(fixed).proved
    assert not qflow.analyze(c.lowered).proved  # the input is not modified
    [out] = arm.run_tosa_reference(fixed, c.inputs)
    assert _lsb(out, c.converted(*c.inputs), _out_scale(c.converted)) <= ONE_LSB


def test_a_delegate_that_cannot_be_lowered_again_is_named(custom, monkeypatch) -> None:
    from executorch.exir.backend import backend_api

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no backend here")

    monkeypatch.setattr(backend_api, "to_backend", refuse)
    with pytest.raises(qflow.InputError, match="lowered_module_0.*does not lower again"):
        qflow.repair(custom("cat_int16").lowered)


@pytest.fixture(scope="session")
def cortex_m_probe() -> Any:
    """Seed 000's Probe through the Cortex-M quantizer and pass manager."""
    from executorch.backends.cortex_m.edge_compile_config import cortex_m_edge_compile_config
    from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
    from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer
    from executorch.backends.cortex_m.target_config import CortexM, CortexMTargetConfig
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from qflow.examples import models

    inputs = (models.PROBE_INPUT.clone(),)
    gm = torch.export.export(models.Probe().eval(), inputs).module(check_guards=False)
    prepared = prepare_pt2e(gm, CortexMQuantizer())
    prepared(*inputs)
    ep = torch.export.export(convert_pt2e(prepared), inputs)
    edge = to_edge_transform_and_lower(ep, compile_config=cortex_m_edge_compile_config())
    pm = CortexMPassManager(edge.exported_program(), target_config=CortexMTargetConfig(cpu=CortexM.M55))
    return pm.transform()


def test_cortex_m_program_with_unknown_ops_is_refused_not_crashed(cortex_m_probe) -> None:
    """Was: `KeyError: 'float32'` in `_reclaim` (the cat's domain, unknown behind
    the Cortex-M ops, read back as float32) and, before that, an unproved
    program handed back unchanged. Now: no reclaim of an unknown domain, and a
    ProofError that names what blocks the repair."""
    r = qflow.analyze(cortex_m_probe)
    assert not r.proved and "unknown-op" in {f.kind for f in r.findings}
    plan = qflow.plan(cortex_m_probe)
    assert plan.empty and plan.unrepairable
    with pytest.raises(qflow.ProofError) as e:
        qflow.repair(cortex_m_probe)
    notes = [n for n in e.value.report.notes if n.startswith("repair blocked")]
    assert notes and any("cortex_m_quantized_mul" in n for n in notes)


# -- paths, counts, JSON -----------------------------------------------------------


def test_repair_of_a_pt2_path_returns_the_repaired_program(built, tmp_path) -> None:
    """Was: always ProofError (the repaired copy thrown away, the file re-read)."""
    b = built("seed000_probe")
    path = tmp_path / "seed000.pt2"
    torch.export.save(b.exported, path)
    fixed = qflow.repair(path)
    assert isinstance(fixed, torch.export.ExportedProgram)
    assert qflow.analyze(fixed).proved and not qflow.analyze(path).proved
    out = fixed.module()(*b.inputs)
    assert _lsb(out, b.converted(*b.inputs), _out_scale(b.converted)) <= ONE_LSB
    clean = tmp_path / "control.pt2"
    torch.export.save(built("seed000_control").exported, clean)
    assert isinstance(qflow.repair(clean), torch.export.ExportedProgram)


def test_every_change_is_counted_in_the_plan_and_the_json_report(built) -> None:
    from qflow.api import repair_with_plan

    b = built("conv_relu_cat_signed")
    fixed, plan, report = repair_with_plan(b.converted)
    assert plan.counts()["activation_domains"] == 1 and "1 activation domain(s)" in plan.summary()
    data = json.loads(report.dumps())["repair"]
    assert data["counts"] == plan.counts() and data["schema"] == "qflow.plan/1"
    assert len(data["activation_domains"]) == 1
    part = copy.deepcopy(built("seed000_probe").partitions[0])
    _, plan, report = repair_with_plan(part)
    assert report.to_json()["repair"]["counts"] == {
        "requants": 1,
        "reclaims": 1,
        "activation_domains": 0,
        "boundaries": 0,
        "unrepairable": 0,
    }


def test_cli_repair_counts_activation_domains(built, tmp_path, capsys) -> None:
    """Was: "0 requant(s) inserted, 0 claim(s) corrected" after an activation got its own domain."""
    from qflow.cli import main

    b = built("conv_relu_cat_signed")
    src, dst = tmp_path / "in.pt2", tmp_path / "out.pt2"
    torch.export.save(b.exported, src)
    assert main(["repair", str(src), str(dst)]) == 0
    out = capsys.readouterr().out
    assert "1 activation domain(s) given" in out and "0 requant(s)" in out
    assert qflow.analyze(dst).proved


def test_the_picture_draws_an_activation_domain_plan(built) -> None:
    """The planned requant after an activation's own domain is a blue box on the picture."""
    from qflow.analysis import analyze_graph
    from qflow.report.picture import REQUANT, Program, to_dot
    from qflow.solvers.repair import plan_repair

    dg = qflow.domain_graph(built("conv_relu_cat_signed").converted)
    plan = plan_repair(dg)
    [(q, (old, own))] = plan.activation_domains.items()
    dot = to_dot([Program(analyze_graph(dg, name="p"), dg, plan)])
    boxes = [line for line in dot.splitlines() if "planned requant" in line and "class=requant" in line]
    assert boxes and REQUANT[0] in boxes[0] and f"zp={own.zero_point}" in boxes[0]
    assert "plan: activation gets" in dot


# -- an activation whose exact domain TOSA cannot hold (campaign 00033) ---------------


class LinearRelu6(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.act = nn.Linear(8, 4), nn.ReLU6()  # nn.ReLU6 exports as hardtanh(0, 6), as in 00033

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


class OverridingToOutput(Overriding):
    """`Overriding`, and the graph output reads the overridden node in the same
    domain (00033's "consistent" user: no int8 requant after it)."""

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        model = super().annotate(model)
        out = next(n for n in model.graph.nodes if n.op == "output")
        qa = out.meta.get("quantization_annotation")
        for arg in list(qa.input_qspec_map) if qa is not None else []:
            qa.input_qspec_map[arg] = self.output
        return model


def test_an_int16_activation_whose_exact_domain_tosa_refuses_is_blocked_naming_it() -> None:
    """Campaign 00033: relu6 with a fixed int16 output (zero point 0, 6.0 beyond
    qmax). The Arm pass fuses it by narrowing qmin, a miscompile; the only
    domain in which the fusion is exact has zero point qmin, which TOSA refuses
    for int16. Was: the repair inserted that int16 requant (zero point -32767)
    and the repaired program failed to lower. Now: blocked, with the reason."""
    torch.manual_seed(0)
    inputs = (torch.randn(1, 4, 8) * 4,)
    quantizer = OverridingToOutput(INT16, "aten.hardtanh", None, _q16(0.00018042, 0))
    converted = arm.quantize(LinearRelu6().eval(), inputs, quantizer=quantizer)
    r = qflow.analyze(converted, target="arm-tosa")
    assert [f.kind for f in r.errors] == ["non-fuseable-activation"], str(r)
    lowered = arm.lower(torch.export.export(converted, inputs), inputs, spec=INT16)
    [out] = arm.run_tosa_reference(lowered, inputs)
    assert _lsb(out, converted(*inputs), _out_scale(converted)) > 100  # negative values leak through: measured
    plan = qflow.plan(converted, target="arm-tosa")
    assert not plan.activation_domains and any("zero point 0" in w and "hardtanh" in w for w in plan.reasons)
    for d in (rq.target for rq in plan.requants):
        assert d.dtype != "int16" or d.zero_point == 0
    with pytest.raises(qflow.ProofError) as e:
        qflow.repair(converted, target="arm-tosa")
    assert any("repair blocked" in n and "zero point 0" in n for n in e.value.report.notes), e.value.report.notes
