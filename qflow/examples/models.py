"""Tiny real models quantized with the real Arm quantizer.

They are the fixtures qflow is checked against: each exercises a quantization
domain pattern the Arm backend handles (or mishandles) differently, including
the two seed reproducers (000: requant folded through cat, 001: unfusable
conv→relu before cat). Everything is rebuilt on demand; nothing is cached.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
from executorch.backends.arm.quantizer import (
    EthosUQuantizer,
    QuantizationConfig,
    TOSAQuantizer,
    get_symmetric_a16w8_quantization_config,
    get_symmetric_quantization_config,
)
from executorch.backends.arm.quantizer.arm_quantizer import QuantizationSpec
from executorch.backends.arm.quantizer.arm_quantizer_utils import (
    mark_node_as_annotated,
)
from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
from executorch.exir import EdgeCompileConfig, EdgeProgramManager, to_edge_transform_and_lower
from torch import nn
from torch.export import ExportedProgram
from torch.fx.passes.operator_support import OperatorSupportBase
from torchao.quantization.pt2e.observer import FixedQParamsObserver
from torchao.quantization.pt2e.quantizer import QuantizationAnnotation, Quantizer

from qflow.targets.arm import pipeline as arm

__all__ = ["MODELS", "Built", "Example", "build", "names"]

Inputs = tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class Example:
    """A model recipe; ``make_quantizer`` builds a fresh quantizer per build."""

    name: str
    model: nn.Module
    inputs: Inputs
    spec: str
    make_quantizer: Callable[[], Quantizer] | None = None


@dataclass
class Built:
    """Every pipeline stage of one example, from the same quantization run."""

    name: str
    model: nn.Module
    inputs: Inputs
    spec: str
    converted: torch.fx.GraphModule  # convert_pt2e output, aten Q/DQ
    exported: ExportedProgram  # torch.export of ``converted``
    edge: ExportedProgram  # edge dialect, Q/DQ kept
    folded: ExportedProgram  # edge after FoldAndAnnotateQParamsPass alone (no activation fusion)
    lowered: EdgeProgramManager  # to_edge_transform_and_lower with the TOSA partitioner
    partitions: list[ExportedProgram]  # each partition right after the real pipeline's fold pass


# --------------------------------------------------------------------------
# Seed 000: fixed-qparams Probe (requant folded through cat)
# --------------------------------------------------------------------------


def _fixed_qspec(
    *,
    scale: float,
    zero_point: int,
    dtype: torch.dtype,
    qscheme: torch.qscheme,
    quant_min: int,
    quant_max: int,
) -> QuantizationSpec:
    observer_dtype = torch.qint8 if dtype is torch.int8 else torch.int16
    return QuantizationSpec(
        dtype=dtype,
        observer_or_fake_quant_ctr=FixedQParamsObserver.with_args(
            scale=scale,
            zero_point=zero_point,
            dtype=observer_dtype,
            qscheme=qscheme,
            quant_min=quant_min,
            quant_max=quant_max,
        ),
        quant_min=quant_min,
        quant_max=quant_max,
        qscheme=qscheme,
        is_dynamic=False,
    )


def _q8() -> QuantizationSpec:
    return _fixed_qspec(
        scale=0.1,
        zero_point=102,
        dtype=torch.int8,
        qscheme=torch.per_tensor_affine,
        quant_min=-128,
        quant_max=127,
    )


def _q16() -> QuantizationSpec:
    return _fixed_qspec(
        scale=1.0 / 32767.0,
        zero_point=0,
        dtype=torch.int16,
        qscheme=torch.per_tensor_symmetric,
        quant_min=-32767,
        quant_max=32767,
    )


class Probe(nn.Module):
    """Seed 000: two slice·mul branches concatenated, then a constant add."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mul_weight", torch.tensor([[[[1.0]], [[2.0]]]]))
        self.register_buffer("add_bias", torch.full((1, 2, 2, 2), 0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x[:, 0:1] * self.mul_weight[:, 0:1]
        b = x[:, 1:2] * self.mul_weight[:, 1:2]
        return torch.cat([a, b], dim=1) + self.add_bias


PROBE_INPUT = torch.tensor([[[[0.2, 0.4], [0.6, 0.8]], [[-0.1, 0.0], [0.1, 0.2]]]])
PROBE_EXPECTED = torch.tensor([[[[0.3, 0.5], [0.7, 0.9]], [[-0.1, 0.1], [0.3, 0.5]]]])


def _annotate(
    node: torch.fx.Node,
    inputs: dict[torch.fx.Node, QuantizationSpec],
    output: QuantizationSpec,
) -> None:
    """Seed 000's annotate helper; mark_node_as_annotated lets the fold pass fold it."""
    qa = node.meta.get("quantization_annotation", QuantizationAnnotation())
    qa.input_qspec_map = dict(inputs)
    qa.output_qspec = output
    node.meta["quantization_annotation"] = qa
    mark_node_as_annotated(node)


class ProbeQuantizer(TOSAQuantizer):
    """Seed 000's fixed-qparams quantizer, ported to the 1.5.1 V2 annotate hook.

    1.5.1 has no ``_annotate_for_static_quantization_config``; ``annotate()``
    runs the stock composable annotation, then the seed's overrides are
    applied on top. ``cat_q16=False`` gives the control (cat/add stay Q8).
    """

    def __init__(self, spec: str, cat_q16: bool = True) -> None:
        super().__init__(TosaCompileSpec(spec))
        self.cat_q16 = cat_q16
        cfg = QuantizationConfig(input_activation=_q8(), output_activation=_q8(), weight=None, bias=None)
        self.set_global(cfg)
        self.set_io(cfg)

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        model = super().annotate(model)
        muls: list[torch.fx.Node] = []
        cat = add = None
        for node in model.graph.nodes:
            if node.op != "call_function":
                continue
            if node.target == torch.ops.aten.mul.Tensor:
                muls.append(node)
            elif node.target == torch.ops.aten.cat.default:
                cat = node
            elif node.target == torch.ops.aten.add.Tensor:
                add = node
        if len(muls) != 2 or cat is None or add is None:
            raise RuntimeError(f"unexpected Probe graph: muls={len(muls)} cat={cat} add={add}")
        q8 = _q8()
        cat_out = _q16() if self.cat_q16 else q8
        for mul in muls:
            _annotate(mul, {a: q8 for a in mul.args if isinstance(a, torch.fx.Node)}, q8)
        _annotate(cat, {a: q8 for a in cat.args[0] if isinstance(a, torch.fx.Node)}, cat_out)
        _annotate(add, {a: cat_out for a in add.args if isinstance(a, torch.fx.Node)}, cat_out)
        return model


def _seed000(cat_q16: bool) -> Example:
    spec = "TOSA-1.0+INT+int16"
    return Example(
        name="seed000_probe" if cat_q16 else "seed000_control",
        model=Probe().eval(),
        inputs=(PROBE_INPUT.clone(),),
        spec=spec,
        make_quantizer=lambda: ProbeQuantizer(spec, cat_q16=cat_q16),
    )


# --------------------------------------------------------------------------
# Stock-quantizer models
# --------------------------------------------------------------------------


class ConvBnRelu6Residual(nn.Module):
    """conv→bn→relu6→conv plus a residual add: BN folding, hardtanh fusion, add rescale."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu6(self.bn(self.conv1(x)))
        return self.conv2(y) + x


class ConvCatSkip(nn.Module):
    """Two conv branches and skip connections joined by cat (shared-qspec clusters)."""

    def __init__(self, relu_before_cat: bool = False) -> None:
        super().__init__()
        self.relu_before_cat = relu_before_cat
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(3, 4, 1)
        self.c = nn.Conv2d(11, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.a(x)
        if self.relu_before_cat:
            # conv → relu fuses, but the relu's domain is shared with signed b:
            # zp ≠ qmin, which ExecuTorch 1.5.1 miscompiles
            y = torch.cat([F.relu(a), self.b(x)], dim=1)
        else:
            y = F.relu(torch.cat([a, self.b(x)], dim=1))
        return self.c(torch.cat([y, x], dim=1))


class Attention(nn.Module):
    """Single-head-per-split attention: linears, reshape/permute, matmul, softmax."""

    def __init__(self, dim: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads

        def split(z: torch.Tensor) -> torch.Tensor:
            return z.reshape(b, t, h, d // h).permute(0, 2, 1, 3)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / (d // h) ** 0.5)
        y = torch.matmul(att.softmax(dim=-1), v)
        return self.out(y.permute(0, 2, 1, 3).reshape(b, t, d))


class MLP(nn.Module):
    """Three linears with relu: per-channel weights, fused linear+relu."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class ConvMixed(nn.Module):
    """int8 convs around an a16w8 linear head: int8↔int16 requant edges."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, 6)
        self.conv2 = nn.Conv2d(6, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.conv(x))  # [1,4,H,W]
        y = self.fc(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.conv2(y)


class ConvReluCat(nn.Module):
    """conv→relu→cat(·, y)→linear: the fused relu shares a signed observer (notes §3.3)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.linear = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.linear(torch.cat([F.relu(self.conv(x)), y], dim=1))  # linear over W


class TinyConvReluCat(nn.Module):
    """Seed 001's model, verbatim."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 4, 1)
        with torch.no_grad():
            for param in self.parameters():
                param.uniform_(-0.1, 0.1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        relu_out = F.relu(self.conv1(x))
        merged = torch.cat((relu_out, y), dim=1)
        return self.conv2(merged)


def _stock(spec: str, config: QuantizationConfig | None = None) -> Callable[[], Quantizer]:
    return lambda: arm.default_quantizer(spec, config)


def _conv_bn_relu6_residual() -> Example:
    torch.manual_seed(0)
    m = ConvBnRelu6Residual()
    with torch.no_grad():  # non-trivial BN statistics so folding matters
        m.bn.running_mean.uniform_(-0.2, 0.2)
        m.bn.running_var.uniform_(0.5, 1.5)
    spec = arm.DEFAULT_SPEC
    return Example(
        "conv_bn_relu6_residual",
        m.eval(),
        (torch.randn(1, 4, 8, 8),),
        spec,
        _stock(spec),
    )


def _conv_cat_skip(relu_before_cat: bool = False) -> Example:
    torch.manual_seed(1)
    spec = arm.DEFAULT_SPEC
    return Example(
        "conv_relu_cat_skip" if relu_before_cat else "conv_cat_skip",
        ConvCatSkip(relu_before_cat).eval(),
        (torch.randn(1, 3, 8, 8),),
        spec,
        _stock(spec),
    )


def _attention() -> Example:
    torch.manual_seed(2)
    spec = arm.DEFAULT_SPEC
    return Example("attention", Attention().eval(), (torch.randn(1, 4, 8),), spec, _stock(spec))


def _linear_per_channel() -> Example:
    torch.manual_seed(3)
    spec = arm.DEFAULT_SPEC
    return Example("linear_per_channel", MLP().eval(), (torch.randn(2, 8),), spec, _stock(spec))


def _mixed_a16w8() -> Example:
    torch.manual_seed(4)
    spec = "TOSA-1.0+INT+int16"

    def make() -> Quantizer:
        q = arm.default_quantizer(spec)
        q.set_module_type(nn.Linear, get_symmetric_a16w8_quantization_config(is_per_channel=True))
        return q

    return Example("mixed_a16w8", ConvMixed().eval(), (torch.randn(1, 3, 6, 6),), spec, make)


def _conv_relu_cat_signed() -> Example:
    torch.manual_seed(5)
    spec = arm.DEFAULT_SPEC
    x = torch.randn(1, 3, 4, 4)
    # signed y pulls the shared relu observer's zp above qmin
    y = torch.randn(1, 4, 4, 4)
    return Example("conv_relu_cat_signed", ConvReluCat().eval(), (x, y), spec, _stock(spec))


def _seed001() -> Example:
    torch.manual_seed(0)
    model = TinyConvReluCat().eval()
    x = torch.rand(1, 4, 16, 16)
    y = torch.rand(1, 4, 16, 16) - 0.065
    spec = "TOSA-1.0+INT+FP"
    cfg = get_symmetric_quantization_config(
        is_per_channel=True,
        act_qmin=-127,
        act_qmax=127,
        weight_qmin=-127,
        weight_qmax=127,
    )

    def make() -> Quantizer:
        return TOSAQuantizer(TosaCompileSpec(spec)).set_global(cfg)

    return Example("seed001_tiny_conv_relu_cat", model, (x, y), spec, make)


MODELS: dict[str, Callable[[], Example]] = {
    "seed000_probe": lambda: _seed000(cat_q16=True),
    "seed000_control": lambda: _seed000(cat_q16=False),
    "conv_bn_relu6_residual": _conv_bn_relu6_residual,
    "conv_cat_skip": _conv_cat_skip,
    "conv_relu_cat_skip": lambda: _conv_cat_skip(relu_before_cat=True),
    "attention": _attention,
    "linear_per_channel": _linear_per_channel,
    "mixed_a16w8": _mixed_a16w8,
    "conv_relu_cat_signed": _conv_relu_cat_signed,
    "seed001_tiny_conv_relu_cat": _seed001,
}


def names() -> list[str]:
    """Registered example names, in registry order."""
    return list(MODELS)


def build(name: str) -> Built:
    """Quantize ``name`` with its quantizer and produce every stage, fresh."""
    ex = MODELS[name]()
    quantizer = ex.make_quantizer() if ex.make_quantizer is not None else None
    converted = arm.quantize(ex.model, ex.inputs, spec=ex.spec, quantizer=quantizer)
    exported = torch.export.export(converted, ex.inputs, strict=True)
    edge = arm.to_edge_program(converted, ex.inputs, spec=ex.spec)
    with arm.capture_after() as partitions:
        lowered = arm.lower(exported, ex.inputs, spec=ex.spec)
    return Built(
        name=ex.name,
        model=ex.model,
        inputs=ex.inputs,
        spec=ex.spec,
        converted=converted,
        exported=exported,
        edge=edge,
        folded=arm.fold_qparams(edge, spec=ex.spec),
        lowered=lowered,
        partitions=list(partitions),
    )


# --------------------------------------------------------------------------
# Seed 002: an Ethos-U partition that exits at a view (delegate boundary dtype)
# --------------------------------------------------------------------------


class RejectQuantizeAfterView(OperatorSupportBase):
    """Keeps the quantize after a view_copy on the CPU, so the partition ends at
    the view whose dequantize the Arm fold pass then folds into it (seed 002)."""

    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        target = str(node.target)
        if "quantize_per_tensor" in target and "dequantize" not in target:
            src = node.args[0]
            return not (isinstance(src, torch.fx.Node) and "view_copy" in str(src.target))
        return True


def lower_attention(force_view_exit: bool, backend: str = "ethosu") -> tuple[EdgeProgramManager, torch.fx.GraphModule]:
    """The attention example lowered with EthosUPartitioner("ethos-u85-256")
    (Vela compiles offline) or TOSAPartitioner("TOSA-1.0+INT"), optionally
    with every partition forced to exit at a view (seed 002)."""
    checks: list[OperatorSupportBase] | None = [RejectQuantizeAfterView()] if force_view_exit else None
    exported, part, converted, _ = attention_program(checks, backend)
    lowered = to_edge_transform_and_lower(
        exported, partitioner=[part], compile_config=EdgeCompileConfig(_check_ir_validity=False)
    )
    return lowered, converted


class RejectDequantizeBeforeView(OperatorSupportBase):
    """Keeps the dequantize before a view_copy on the CPU, so a partition starts
    at the view on a float tensor while the quantize after the view stays
    inside: the input-side mirror of seed 002 (TOSA-1.0+INT+FP accepts such a
    partition; an INT-only partitioner de-tags the view instead)."""

    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        if "dequantize_per_tensor" in str(node.target):
            return not any("view_copy" in str(u.target) for u in node.users)
        return True


def attention_program(
    checks: list[OperatorSupportBase] | None = None, backend: str = "ethosu", spec: str = arm.DEFAULT_SPEC
) -> tuple[ExportedProgram, Any, torch.fx.GraphModule, Inputs]:
    """What lower_attention lowers, before lowering: the attention example
    quantized for `backend` ("ethosu" or "tosa" with TOSA `spec`) and
    exported, with the partitioner (and its `checks`) it would be lowered
    with — so boundaries can be predicted on the very same program."""
    torch.manual_seed(2)
    model, inputs = Attention().eval(), (torch.randn(1, 4, 8),)
    part: Any
    if backend == "ethosu":
        cs: Any = EthosUCompileSpec(arm.ETHOSU_TARGET)
        quantizer = EthosUQuantizer(cs).set_global(get_symmetric_quantization_config())
        part = EthosUPartitioner(cs, additional_checks=checks)
    else:
        cs = TosaCompileSpec(spec)
        quantizer = TOSAQuantizer(cs).set_global(get_symmetric_quantization_config())
        part = TOSAPartitioner(cs, additional_checks=checks)
    converted = arm.quantize(model, inputs, quantizer=quantizer)
    return torch.export.export(converted, inputs), part, converted, inputs
