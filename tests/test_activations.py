"""Activation fuseability (zp == qmin) and its repair, on the real pipeline."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import qflow
from qflow.domain import Domain
from qflow.ir import activations
from qflow.targets import Fusion
from qflow.targets.arm import pipeline as arm

# int8 domains: zp at qmin (fuseable for relu) and above it (not)
AT_QMIN = Domain.quantized("int8", 6 / 255, -128, -128, 127)
ABOVE = Domain.quantized("int8", 0.05, -20, -128, 127)


@pytest.mark.parametrize(
    "name, lo, hi, dom, exact",
    [
        ("relu", 0.0, None, AT_QMIN, True),
        ("relu", 0.0, None, ABOVE, False),
        ("relu6", 0.0, 6.0, AT_QMIN, True),  # 6 quantizes to qmax
        ("relu6", 0.0, 6.0, Domain.quantized("int8", 0.1, -128, -128, 127), False),  # 6.0 cuts inside: code -68
        ("hardtanh", 0.0, 6.0, AT_QMIN, True),
        ("hardtanh", -1.0, 1.0, ABOVE, False),
        ("clamp", None, None, ABOVE, True),  # no bounds: nothing to drop
        ("clamp", 0.0, None, ABOVE, False),
    ],
)
def test_exact_fusion_condition(name, lo, hi, dom, exact) -> None:
    assert activations.exact(dom, lo, hi) is exact
    if exact:  # the installed pass may fuse an exact activation; never a problem
        return
    # the Arm pass fuses relu (and hardtanh(0, x) reaching qmax) regardless; clamp never;
    # a backend that clamps in code space, or fuses only exactly, never drops a cutting clamp
    assert activations.would_fuse(Fusion.NARROW_QMIN, name, dom, lo, hi) is (name == "relu")
    assert not activations.would_fuse(Fusion.CODE_CLAMP, name, dom, lo, hi)
    assert not activations.would_fuse(Fusion.EXACT_ONLY, name, dom, lo, hi)


class LinearReluCat(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.b(torch.cat([torch.relu(self.a(x)), y], dim=-1))


class ConvRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.out = nn.Conv2d(4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.conv(x)))


def test_linear_producer_with_signed_cat_is_reported() -> None:
    torch.manual_seed(7)
    m = LinearReluCat().eval()
    gm = arm.quantize(m, (torch.randn(2, 6), torch.randn(2, 6)))
    [f] = qflow.analyze(gm).errors
    assert f.kind == "non-fuseable-activation" and "relu" in f.node
    assert "linear" in f.message


def test_fuseable_conv_relu_control_has_no_finding() -> None:
    torch.manual_seed(8)
    gm = arm.quantize(ConvRelu().eval(), (torch.randn(1, 3, 6, 6),))
    r = qflow.analyze(gm)
    assert r.proved and not r.findings


@pytest.mark.parametrize("name", ["conv_relu_cat_signed", "seed001_tiny_conv_relu_cat"])
def test_repair_makes_the_tosa_output_match_fake_quant(built, name) -> None:
    b = built(name)
    reference = b.converted(*b.inputs)
    out_scale = next(n for n in b.converted.graph.nodes if n.op == "output").args[0][0].args[1]
    [unrepaired] = arm.run_tosa_reference(b.lowered, b.inputs)

    plan = qflow.plan(b.converted)
    [(old, own)] = plan.activation_domains.values()
    assert own.zero_point == own.qmin and own.scale == old.scale
    repaired = qflow.repair(b.converted)
    assert qflow.analyze(repaired).proved
    with arm.capture_after() as parts:
        lowered = arm.lower(repaired, b.inputs, spec=b.spec)
    assert all(qflow.analyze(p).proved for p in parts)
    [out] = arm.run_tosa_reference(lowered, b.inputs)

    lsb = lambda t: ((t - reference).abs().max() / out_scale).item()  # noqa: E731
    assert lsb(out) <= 1.0 + 1e-4
    assert lsb(unrepaired) > 1.0 + 1e-4


# --------------------------------------------------------------------------
# relu6 / hardtanh / clamp after conv and linear producers, on the real
# pipeline: stock quantizer, real lowering, TOSA reference model.
# --------------------------------------------------------------------------


def _hardtanh01(t: torch.Tensor) -> torch.Tensor:
    return nn.functional.hardtanh(t, 0.0, 1.0)


ACTIVATIONS = {
    "relu6": nn.ReLU6(),  # a Hardtanh(0, 6): exports as aten.hardtanh, a fused pattern with conv/linear
    "relu6_op": nn.functional.relu6,  # exports as aten.relu6: not a fused pattern
    "hardtanh01": _hardtanh01,
    "clamp_min0": lambda t: torch.clamp(t, min=0.0),
    "clamp_wide": lambda t: torch.clamp(t, -50.0, 50.0),
}


class ProducerActivation(nn.Module):
    """conv|linear → activation [→ cat(·, y)] → conv|linear. With `y`, the
    stock quantizer shares the activation's output domain with y's."""

    def __init__(self, producer: str, activation: str, with_y: bool) -> None:
        super().__init__()
        self.conv = producer == "conv"
        self.act = ACTIVATIONS[activation]
        width = 8 if with_y else 4
        if self.conv:
            self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(width, 2, 1)
        else:
            self.a, self.b = nn.Linear(6, 4), nn.Linear(width, 3)
        with torch.no_grad():  # outputs well beyond the activations' bounds
            for p in self.a.parameters():
                p.mul_(3)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        h = self.act(self.a(x))
        if y is not None:
            h = torch.cat([h, y], dim=1 if self.conv else -1)
        return self.b(h)


class Case:
    """One model through the real pipeline: converted, each partition after the
    real fold pass, the lowered program (or the lowering's error) and the TOSA
    reference output against the fake-quantized model in output LSBs."""

    def __init__(self, producer: str, activation: str, y_scale: float | None, spec: str) -> None:
        torch.manual_seed(3)
        x = torch.randn(1, 3, 4, 4) if producer == "conv" else torch.randn(2, 6)
        y_shape = (1, 4, 4, 4) if producer == "conv" else (2, 4)
        self.inputs = (x,) if y_scale is None else (x, torch.randn(*y_shape) * y_scale)
        self.spec = spec
        self.model = ProducerActivation(producer, activation, y_scale is not None).eval()
        self.converted = arm.quantize(self.model, self.inputs, spec=spec)
        self.reference = self.converted(*self.inputs)
        self.out_scale = next(n for n in self.converted.graph.nodes if n.op == "output").args[0][0].args[1]
        self.report = qflow.analyze(self.converted)
        self.error: Exception | None = None
        with arm.capture_after() as parts:
            try:
                self.lowered = arm.lower(self.converted, self.inputs, spec=spec)
            except Exception as e:  # noqa: BLE001 - the pipeline's own failure is what some tests assert
                self.error = e
        self.partitions = list(parts)

    def lsb(self, lowered: object) -> float:
        [out] = arm.run_tosa_reference(lowered, self.inputs)
        return ((out - self.reference).abs().max() / self.out_scale).item()

    def act_q(self) -> Domain:
        """The domain of the quantize right after the activation."""
        [q] = [
            n
            for n in self.converted.graph.nodes
            if "quantize_per_tensor" in str(n.target)
            and "dequantize" not in str(n.target)
            and n.args[0].op == "call_function"
            and any(k in str(n.args[0].target) for k in ("hardtanh", "relu", "clamp"))
        ]
        return Domain.quantized("int8", q.args[1], q.args[2], q.args[3], q.args[4])


@pytest.fixture(scope="module")
def case():
    cache: dict[tuple, Case] = {}

    def get(producer: str, activation: str, y_scale: float | None, spec: str = arm.DEFAULT_SPEC) -> Case:
        key = (producer, activation, y_scale, spec)
        if key not in cache:
            cache[key] = Case(*key)
        return cache[key]

    return get


# the activation's bound reaches the top of the shared domain: 1.5.1 fuses it
FUSED_NON_FUSEABLE = [("conv", "relu6", 1.0), ("linear", "hardtanh01", 0.3)]


@pytest.mark.parametrize("producer, activation, y_scale", FUSED_NON_FUSEABLE)
def test_non_fuseable_bounded_activation_is_reported_and_repaired(case, producer, activation, y_scale) -> None:
    c = case(producer, activation, y_scale)
    q = c.act_q()
    assert q.zero_point > q.qmin  # shared with the signed y
    [f] = c.report.errors
    assert f.kind == "non-fuseable-activation" and "hardtanh" in f.node
    assert f"zp={q.zero_point}" in f.message and f"qmin={q.qmin}" in f.message and "narrowing qmin" in f.message
    assert producer in f.message
    # after the real fold, the producer claims the narrowed range nobody enforces
    folded = [g for p in c.partitions for g in qflow.analyze(p).findings]
    assert [g.kind for g in folded] == ["unenforced-narrow-range"]
    assert "non-fuseable-activation" in {g.kind for g in qflow.analyze(c.lowered).errors}
    assert c.lsb(c.lowered) > 1.0 + 1e-4  # the miscompile, measured

    repaired = qflow.repair(c.converted)
    assert qflow.analyze(repaired).proved
    with arm.capture_after() as parts:
        lowered = arm.lower(repaired, c.inputs, spec=c.spec)
    assert all(qflow.analyze(p).proved for p in parts)
    assert c.lsb(lowered) <= 1.0 + 1e-4


@pytest.mark.parametrize("producer, activation", [("conv", "relu6"), ("linear", "hardtanh01")])
def test_fuseable_bounded_activation_has_no_finding(case, producer, activation) -> None:
    c = case(producer, activation, None)
    q = c.act_q()
    assert q.zero_point == q.qmin
    assert c.report.proved and not c.report.findings
    assert all(qflow.analyze(p).proved for p in c.partitions)
    assert c.lsb(c.lowered) <= 1.0 + 1e-4


@pytest.mark.parametrize(
    "producer, activation",
    [
        ("conv", "clamp_min0"),
        ("linear", "clamp_min0"),
        ("conv", "clamp_wide"),
        ("linear", "clamp_wide"),
        ("conv", "relu6_op"),
    ],
)
def test_explicit_clamp_after_a_producer_with_its_own_domain_proves(case, producer, activation) -> None:
    """The stock quantizer gives the producer its own domain before a clamp or
    an aten.relu6 (not fused patterns), and the pass never fuses them: with
    bounds inside the range (zp > qmin) or outside it (clamp_wide), exact."""
    c = case(producer, activation, 1.0)
    q = c.act_q()
    if activation != "clamp_wide":
        assert q.zero_point > q.qmin  # not fuseable: the clamp must stay
    assert c.report.proved and not c.report.errors
    assert all(qflow.analyze(p).proved for p in c.partitions)
    assert c.lsb(c.lowered) <= 1.0 + 1e-4


def test_unfused_activation_conv_domain_inferred_through_the_clamp(case) -> None:
    """Seed 001's folded shape in 1.5.1: hardtanh(0, 1) in a domain reaching 3
    is not fused, so after the fold the conv has no output_qparams and the clamp
    has them. qflow infers the conv's domain through the clamp (what the
    installed RewriteConvPass does), warns, and the TOSA run agrees."""
    c = case("conv", "hardtanh01", 3.0, "TOSA-1.0+INT+FP")
    [w] = c.report.findings
    assert (w.kind, w.severity) == ("non-fuseable-activation", "warning") and c.report.proved
    assert "stays an explicit clamp" in w.message
    [part] = c.partitions
    conv = next(n for n in part.graph.nodes if "convolution" in str(n.target))
    assert conv.meta["input_qparams"] and not conv.meta.get("output_qparams")  # the seed's shape, for real
    r = qflow.analyze(part)
    [f] = r.findings
    assert (f.kind, f.severity, f.node) == ("missing-domain", "warning", conv.name)
    assert "RewriteConvPass" in f.message and "infers int8" in f.message
    assert r.proved
    assert c.lsb(c.lowered) <= 1.0 + 1e-4


def test_unfused_activation_after_linear_predicts_the_1_5_1_crash(case) -> None:
    """The same shape with a linear producer: DecomposeLinearPass puts a view
    between the conv and the clamp, and 1.5.1's RewriteConvPass fails. qflow
    says so before partitioning and on the folded partition."""
    c = case("linear", "hardtanh01", 3.0, "TOSA-1.0+INT+FP")
    [w] = c.report.findings
    assert (w.kind, w.severity) == ("non-fuseable-activation", "warning")
    assert "DecomposeLinearPass" in w.message and "No output quantization parameter found" in w.message
    assert c.error is not None  # the real lowering
    assert "No output quantization parameter found" in "".join(
        str(e) for e in (c.error, c.error.__cause__, c.error.__context__) if e
    )
    [part] = c.partitions
    [f] = qflow.analyze(part).findings
    assert f.kind == "missing-domain" and "DecomposeLinearPass" in f.message

    # repair: hardtanh(0, 1) gets its own domain [0, 1] with zp == qmin, where
    # the installed pass fuses it exactly, then a requant into the shared domain
    [(old, own)] = qflow.plan(c.converted).activation_domains.values()
    assert (own.zero_point, own.qmin) == (old.qmin, old.qmin) and own.scale < old.scale
    repaired = qflow.repair(c.converted)
    r = qflow.analyze(repaired)
    assert r.proved and not r.findings
    with arm.capture_after() as parts:
        lowered = arm.lower(repaired, c.inputs, spec=c.spec)
    assert parts and all(qflow.analyze(p).proved and not qflow.analyze(p).findings for p in parts)
    assert c.lsb(lowered) <= 1.0 + 1e-4
