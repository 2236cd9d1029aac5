"""The contract probe: single-op programs lowered by the real backends.

For each op with a single-op form, quantize the one-op model with the
target's stock quantizer, then derive variants by moving the op's *output*
domain away from its input's in the converted Q/DQ graph (the op's output
quantize and the dequantizes reading it get new qparams, as a requant after the
op would give):

* ``stock`` — the stock annotation, untouched;
* ``zp``    — output zero point shifted, scale kept;
* ``scale`` — output scale ×1.37, zero point kept.

Each variant is lowered with the real partitioner and run (TOSA reference model
for arm-tosa, the ExecuTorch runtime with the XNNPACK delegate for xnnpack);
the result is compared with the fake-quantized (converted) model in output
LSBs. An op the partitioner will not delegate on its own (Arm rejects
partitions of only no-op nodes) is measured after a carrier ``add`` so it sits
inside a partition, as it would in a real model.

A rule predicts: RESCALE → zp and scale exact; ZP_ONLY → zp exact, scale not;
CODE_COPY → neither; CPU_FLOAT → the op stays on the CPU (exact).
"""

from __future__ import annotations

import copy
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

VARIANTS = ("stock", "zp", "scale")
SCALE_FACTOR = 1.37
ZP_SHIFT = 9
#: Outputs are compared as dequantized floats: one code step is 1 LSB up to float rounding.
TOLERANCE = 0.01


# --------------------------------------------------------------------------- cases


class _Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(*xs)


class _Conv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class _Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


class _ConvReluCat(torch.nn.Module):
    """conv → relu → cat(·, y): the relu shares the cat's domain, which the signed y widens (zp > qmin)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.relu(self.conv(x)), y], 1)


class _LinearReluCat(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.relu(self.linear(x)), y], -1)


class _Carried(torch.nn.Module):
    """``op(x + c)``: puts a lone no-op node into a partition with a compute op."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor, c: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        return self.inner(x + c, *rest)


X4 = (1, 4, 8, 8)
X2 = (2, 8)
#: Attention heads: (batch, heads, tokens, head dim).
HEADS = (1, 2, 8, 16)
POSITIVE = (0.2, 2.2)
#: Inside (-1, 1), where acos, asin, atanh and erfinv are finite.
UNIT = (-0.95, 0.95)


@dataclass(frozen=True)
class Case:
    """One single-op program. `op` is the base name the contract is looked up by."""

    name: str
    op: str
    make: Callable[[], torch.nn.Module]
    shapes: tuple[tuple[int, ...], ...] = (X4,)
    #: Inputs drawn uniformly from this interval (the op's domain: rsqrt's positive reals, acos's
    #: [-1, 1]); None: standard normal.
    span: tuple[float, float] | None = None
    #: The stock quantizer requantizes the op's output before the program's (grid_sampler's symmetric
    #: output): the variants move the op's own output domain, not that requant's.
    requantized: bool = False


def _f(fn: Callable[..., torch.Tensor]) -> Callable[[], torch.nn.Module]:
    return lambda: _Fn(fn)


CASES: tuple[Case, ...] = (
    Case("neg", "neg", _f(torch.neg)),
    Case("abs", "abs", _f(torch.abs)),
    Case("relu", "relu", _f(torch.relu)),
    Case("relu6", "relu6", _f(F.relu6)),
    Case("hardtanh(0,6)", "hardtanh", _f(lambda x: F.hardtanh(x, 0.0, 6.0))),
    Case("hardtanh(-1,1)", "hardtanh", _f(lambda x: F.hardtanh(x, -1.0, 1.0))),
    Case("hardtanh(-0.5,2)", "hardtanh", _f(lambda x: F.hardtanh(x, -0.5, 2.0))),
    Case("clamp(-0.5,0.5)", "clamp", _f(lambda x: torch.clamp(x, -0.5, 0.5))),
    Case("clamp(min=0.2)", "clamp", _f(lambda x: torch.clamp(x, min=0.2))),
    Case("cat", "cat", _f(lambda x, y: torch.cat([x, y], 1)), (X4, X4)),
    Case("stack", "stack", _f(lambda x, y: torch.stack([x, y], 1)), (X4, X4)),
    Case("view", "view", _f(lambda x: x.view(1, 4, 64))),
    Case("reshape", "reshape", _f(lambda x: x.reshape(1, 16, 16))),
    Case("permute", "permute", _f(lambda x: x.permute(0, 2, 3, 1))),
    Case("transpose", "transpose", _f(lambda x: x.transpose(1, 2))),
    Case("slice", "slice", _f(lambda x: x[:, 1:3, 2:7])),
    Case("constant_pad_nd", "constant_pad_nd", _f(lambda x: F.pad(x, (1, 1, 2, 0)))),
    Case("squeeze", "squeeze", _f(lambda x: x.squeeze(0))),
    Case("unsqueeze", "unsqueeze", _f(lambda x: x.unsqueeze(1))),
    Case("flatten", "flatten", _f(lambda x: torch.flatten(x, 1))),
    Case("max_pool2d", "max_pool2d", _f(lambda x: F.max_pool2d(x, 2))),
    Case("avg_pool2d", "avg_pool2d", _f(lambda x: F.avg_pool2d(x, 2))),
    Case("adaptive_avg_pool2d", "adaptive_avg_pool2d", _f(lambda x: F.adaptive_avg_pool2d(x, 1))),
    Case("mean", "mean", _f(lambda x: x.mean(dim=(2, 3), keepdim=True))),
    Case("sum", "sum", _f(lambda x: x.sum(dim=3, keepdim=True))),
    Case("upsample_nearest2d", "upsample_nearest2d", _f(lambda x: F.interpolate(x, scale_factor=2.0, mode="nearest"))),
    Case(
        "upsample_bilinear2d",
        "upsample_bilinear2d",
        _f(lambda x: F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)),
    ),
    Case("pixel_shuffle", "pixel_shuffle", _f(lambda x: F.pixel_shuffle(x, 2))),
    Case("add", "add", _f(torch.add), (X4, X4)),
    Case("sub", "sub", _f(torch.sub), (X4, X4)),
    Case("mul", "mul", _f(torch.mul), (X4, X4)),
    Case("add(scalar)", "add", _f(lambda x: x + 0.75)),
    Case("sub(scalar)", "sub", _f(lambda x: x - 0.75)),
    Case("mul(scalar)", "mul", _f(lambda x: x * 0.6)),
    Case("maximum", "maximum", _f(torch.maximum), (X4, X4)),
    Case("minimum", "minimum", _f(torch.minimum), (X4, X4)),
    Case("sigmoid", "sigmoid", _f(torch.sigmoid)),
    Case("tanh", "tanh", _f(torch.tanh)),
    Case("sin", "sin", _f(torch.sin)),
    Case("cos", "cos", _f(torch.cos)),
    Case("hardswish", "hardswish", _f(F.hardswish)),
    Case("leaky_relu", "leaky_relu", _f(lambda x: F.leaky_relu(x, 0.1))),
    Case("softmax", "softmax", _f(lambda x: torch.softmax(x, -1))),
    Case("gelu", "gelu", _f(F.gelu)),
    Case("exp", "exp", _f(torch.exp)),
    Case("rsqrt", "rsqrt", _f(torch.rsqrt), span=POSITIVE),
    Case("reciprocal", "reciprocal", _f(torch.reciprocal), span=POSITIVE),
    Case("bmm", "bmm", _f(torch.bmm), ((2, 8, 16), (2, 16, 8))),
    Case("pow(2)", "pow", _f(lambda x: x**2)),
    Case("elu", "elu", _f(F.elu)),
    # transformer ops (issue #30): norms, gated activations, masks, attention
    Case("layer_norm", "layer_norm", lambda: torch.nn.LayerNorm(8)),
    Case("rms_norm", "rms_norm", lambda: torch.nn.RMSNorm(8)),
    Case("group_norm", "group_norm", lambda: torch.nn.GroupNorm(2, 4)),
    Case("var", "var", _f(lambda x: x.var(dim=-1, keepdim=True))),
    Case("log_softmax", "log_softmax", _f(lambda x: torch.log_softmax(x, -1))),
    Case("silu", "silu", _f(F.silu)),
    Case("where", "where", _f(lambda x, y: torch.where(x > 0, x, y)), (X4, X4)),
    Case("gt", "gt", _f(lambda x, y: torch.where(x > y, x, y)), (X4, X4)),
    Case("log", "log", _f(torch.log), span=POSITIVE),
    Case("masked_fill", "masked_fill", _f(lambda x, y: x.masked_fill(y > 0.5, -1.0)), (X4, X4)),
    Case("amax", "amax", _f(lambda x: x.amax(dim=-1, keepdim=True))),
    Case("amin", "amin", _f(lambda x: x.amin(dim=-1, keepdim=True))),
    Case("matmul(4d)", "matmul", _f(torch.matmul), (HEADS, (1, 2, 16, 8))),
    Case("sdpa", "scaled_dot_product_attention", _f(F.scaled_dot_product_attention), (HEADS, HEADS, HEADS)),
    Case("conv2d", "conv2d", _Conv),
    Case("linear", "linear", _Linear, (X2,)),
    # ops of the Arm suite's nn_functional models (issue #30 item 3): grid_sample, fold (col2im, an
    # index_put into zeros after to_edge), index_put
    Case("grid_sample", "grid_sampler", _f(F.grid_sample), (X4, (1, 5, 5, 2)), requantized=True),
    Case("fold", "col2im", _f(lambda x: F.fold(x, (4, 5), (2, 2))), ((1, 12, 12),)),
    Case("index_put", "index_put", _f(lambda x, y: x.index_put((torch.tensor([0, 2]),), y)), ((4, 8), (2, 8))),
    # the Arm suite's ops/test_cumsum.py (issue #30 item 5): lowered on codes
    Case("cumsum", "cumsum", _f(lambda x: torch.cumsum(x, 3))),
    # the Arm suite's other ops/ files (issue #30 item 5): elementwise ops it lowers on codes
    Case("acos", "acos", _f(torch.acos), span=UNIT),
    Case("asin", "asin", _f(torch.asin), span=UNIT),
    Case("atan", "atan", _f(torch.atan)),
    Case("atanh", "atanh", _f(torch.atanh), span=UNIT),
    Case("acosh", "acosh", _f(torch.acosh), span=(1.05, 4.0)),
    Case("asinh", "asinh", _f(torch.asinh)),
    Case("sinh", "sinh", _f(torch.sinh)),
    Case("cosh", "cosh", _f(torch.cosh)),
    Case("tan", "tan", _f(torch.tan), span=(-1.2, 1.2)),
    Case("erf", "erf", _f(torch.erf)),
    Case("erfinv", "erfinv", _f(torch.erfinv), span=UNIT),
    Case("expm1", "expm1", _f(torch.expm1)),
    Case("log10", "log10", _f(torch.log10), span=POSITIVE),
    Case("log1p", "log1p", _f(torch.log1p), span=POSITIVE),
    Case("hardsigmoid", "hardsigmoid", _f(F.hardsigmoid)),
    Case("ceil", "ceil", _f(torch.ceil)),
    Case("floor", "floor", _f(torch.floor)),
    Case("round", "round", _f(torch.round)),
    Case("remainder", "remainder", _f(lambda x: torch.remainder(x, 0.7))),
    Case("mm", "mm", _f(torch.mm), ((8, 16), (16, 8))),
    Case("addmm", "addmm", _f(torch.addmm), ((8, 8), (8, 16), (16, 8))),
)


#: Fusion probes: an activation fused into its producer while sharing a signed cat's domain.
FUSION_CASES: tuple[Case, ...] = (
    Case("conv→relu→cat(·,signed)", "relu", _ConvReluCat, (X4, X4)),
    Case("linear→relu→cat(·,signed)", "relu", _LinearReluCat, (X2, X2)),
)


def inputs_for(case: Case, seed: int, carried: bool = False) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    xs = []
    for shape in case.shapes:
        t = torch.randn(shape, generator=g)
        if case.span is not None:
            low, high = case.span
            t = torch.rand(shape, generator=g) * (high - low) + low
        xs.append(t)
    if carried:  # the carrier's second operand, small so the op's input range stays alike
        xs.insert(1, 0.1 * torch.randn(case.shapes[0], generator=g))
    return tuple(xs)


# --------------------------------------------------------------------------- graph edits


def _base(target: object) -> str:
    name = getattr(target, "__name__", None) or str(target)
    parts = str(name).split(".")
    if len(parts) >= 2 and parts[0] in {"aten", "quantized_decomposed"}:
        return parts[1]
    return parts[-2] if len(parts) >= 2 else parts[0]


def _is_q(node: torch.fx.Node) -> bool:
    return (
        node.op == "call_function" and "quantize_per_tensor" in str(node.target) and "dequant" not in str(node.target)
    )


def _is_dq(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and "dequantize_per_tensor" in str(node.target)


_ALIASES = {
    "view": {"view", "_unsafe_view"},
    "reshape": {"reshape", "view", "_unsafe_view"},
    "flatten": {"flatten", "view"},
    "slice": {"slice"},
    "squeeze": {"squeeze"},
    "unsqueeze": {"unsqueeze"},
    "softmax": {"softmax", "_softmax"},
    "log_softmax": {"log_softmax", "_log_softmax"},
    "masked_fill": {"masked_fill", "where"},  # (the edge dialect's masked_fill is a where)
    "clamp": {"clamp", "clamp_min", "clamp_max"},
    "relu6": {"relu6", "hardtanh"},
    "add": {"add"},
    "sub": {"sub", "rsub"},
    "constant_pad_nd": {"constant_pad_nd", "pad"},
    "upsample_nearest2d": {"upsample_nearest2d"},
    "upsample_bilinear2d": {"upsample_bilinear2d"},
    "grid_sampler": {"grid_sampler", "grid_sampler_2d"},
    "col2im": {"col2im", "index_put"},  # (to_edge decomposes fold into an index_put into zeros)
}


def op_nodes(gm: torch.fx.GraphModule, op: str) -> list[torch.fx.Node]:
    """The probed op's nodes (the last of them is the one whose output domain is moved)."""
    names = _ALIASES.get(op, {op})
    found = [n for n in gm.graph.nodes if n.op == "call_function" and _base(n.target) in names]
    return found


def output_q(gm: torch.fx.GraphModule, op: str) -> torch.fx.Node | None:
    """The quantize of the probed op's output, or None when the op is not quantized."""
    nodes = op_nodes(gm, op)
    if not nodes:
        return None
    for user in nodes[-1].users:
        if _is_q(user):
            return user
    return None


def move_output_domain(gm: torch.fx.GraphModule, op: str, variant: str) -> torch.fx.GraphModule | None:
    """A copy of `gm` whose op output domain is moved (`zp` or `scale`); None if not quantized."""
    if variant == "stock":
        return gm
    gm = copy.deepcopy(gm)
    q = output_q(gm, op)
    if q is None:
        return None
    _x, scale, zp, qmin, qmax, dtype = q.args[:6]
    if variant == "zp":
        new_scale, new_zp = scale, zp + ZP_SHIFT if zp + ZP_SHIFT <= qmax - 32 else zp - ZP_SHIFT
    elif variant == "scale":
        new_scale, new_zp = scale * SCALE_FACTOR, zp
    else:
        raise ValueError(variant)
    for node in [q, *[u for u in q.users if _is_dq(u)]]:
        args = list(node.args)
        args[1], args[2] = float(new_scale), int(new_zp)
        node.args = tuple(args)
    gm.recompile()
    return gm


def output_scale(gm: torch.fx.GraphModule) -> float | None:
    """The scale of the dequantize feeding the program's output (None if float)."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    first = out.args[0][0] if isinstance(out.args[0], (tuple, list)) else out.args[0]
    if isinstance(first, torch.fx.Node) and _is_dq(first):
        return float(first.args[1])
    return None


# --------------------------------------------------------------------------- outcomes

EXACT = "exact"
MISCOMPILE = "miscompile"
REFUSED_LOWERING = "refused at lowering"
REFUSED_LOAD = "refused at load"
CPU = "left on CPU"
NOT_QUANTIZED = "not quantized"


@dataclass(frozen=True)
class Programs:
    """One batch's programs, for checking qflow's verdict on what was measured: the
    Q/DQ program with the moved domains (before partitioning), the lowered program,
    and each partition right after the backend's fold pass (Arm only)."""

    qdq: torch.fx.GraphModule
    lowered: Any = None
    folded: tuple[Any, ...] = ()
    #: The program the lowered one was made from, where its check needs one (Cortex-M's kernel_sum).
    reference: Any = None


@dataclass
class Measurement:
    case: str
    op: str
    target: str
    variant: str
    outcome: str
    lsb: float | None = None
    form: str = "alone"
    quantizer: str = "stock"
    detail: str = ""
    cpu_ops: tuple[str, ...] = field(default_factory=tuple)
    #: The op node's ``meta["custom"]`` marks, for targets that lower only marked nodes (Arm).
    custom_meta: dict = field(default_factory=dict)
    #: (scale, zero point) of the branch's output quantize as the quantizer chose it.
    out_qparams: tuple[float, int] | None = None
    #: The op whose output domain the variants move: the case's op, or the last op of the
    #: decomposition the quantizer annotated instead (Arm decomposes layer_norm, sdpa, ...;
    #: torch.export ends a 4-d matmul with a view).
    moved: str = ""
    #: The programs this measurement ran (shared by a batch) and the case's branch in them.
    programs: Programs | None = field(default=None, repr=False)
    branch: int = -1

    def row(self) -> dict[str, object]:
        return {
            "case": self.case,
            "op": self.op,
            "target": self.target,
            "variant": self.variant,
            "outcome": self.outcome,
            "lsb": self.lsb,
            "form": self.form,
            "quantizer": self.quantizer,
            "detail": self.detail,
            "out_qparams": self.out_qparams,
            "moved": self.moved,
            "custom_meta": {k: dict(v) if isinstance(v, dict) else repr(v) for k, v in self.custom_meta.items()},
        }


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    head = next((line for line in text if line.strip()), type(exc).__name__)
    return f"{type(exc).__name__}: {head[:200]}"


def compare(reference: Sequence[torch.Tensor], got: Sequence[torch.Tensor], scale: float | None) -> float:
    """Largest |difference| in output LSBs (absolute if the output is float)."""
    worst = 0.0
    for r, g in zip(reference, got, strict=True):
        d = (r.float() - g.float().reshape(r.shape)).abs().max().item()
        worst = max(worst, d / scale if scale else d)
    return worst


# --------------------------------------------------------------------------- backends


class Backend:
    """One target's quantize / lower / run. Subclasses wrap the real pipelines."""

    name: str
    #: Cases measured after a carrier add in batches: their op alone is not delegated.
    carried: frozenset[str] = frozenset()
    #: What the last `lower_and_run_batch` lowered (None: its lowering was refused).
    last: Programs | None = None
    #: Whether an op left on the CPU may compute on codes (no delegate boundary dequantizes for
    #: it): then a CPU op that misses the fake-quantized model is a miscompile, not a float op.
    cpu_reads_codes: bool = False
    #: At most this many cases in one lowered program (None: all). A lowering's cost can grow faster than
    #: the program: XNNPACK lowers each op of a batch to a delegate of its own (`per_op`) and legalizes the
    #: whole graph for each (2026-12-01: 965 of the table's 1400 s profiled there; a forced variant of the
    #: 68 cases took 240 s as one program, 162 s as four).
    batch: int | None = None

    def quantize(self, case: Case, model: torch.nn.Module, samples: list[tuple[torch.Tensor, ...]]) -> tuple:
        raise NotImplementedError

    def lower_and_run(self, gm: torch.fx.GraphModule, op: str, samples: list[tuple[torch.Tensor, ...]]):
        """Returns (delegated: bool, cpu_ops, outputs per sample) or raises _Refused."""
        raise NotImplementedError

    def placement(self, top: torch.fx.GraphModule, i: int, op: str = "") -> tuple[bool, str]:
        return placement(top, i, op)


class PartlyRefused(Exception):  # noqa: N818 - an outcome, not a bug
    """Some delegates (traced to branches) were refused at load; the rest were not run."""

    def __init__(self, branches: dict[int, str]) -> None:
        super().__init__(str(branches))
        self.branches = branches


class Refused(Exception):  # noqa: N818 - an outcome, not a bug
    def __init__(self, stage: str, detail: str) -> None:
        super().__init__(detail)
        self.stage = stage
        self.detail = detail


def _fold_calibration(samples: list[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
    """All samples concatenated along batch: one calibration pass sees every sample."""
    return tuple(torch.cat([s[i] for s in samples], 0) for i in range(len(samples[0])))


class ArmBackend(Backend):
    # The TOSA partitioner rejects a partition of no-op nodes only (a lone view); measured
    # per case by `measure_case`, which falls back to the carrier for exactly these.
    carried = frozenset({"view", "reshape", "flatten"})

    def __init__(self, spec: str = "TOSA-1.0+INT", int16: bool = False) -> None:
        self.spec = spec
        self.int16 = int16
        self.name = "arm-tosa" + ("+int16" if int16 else "")

    def quantize(self, case, model, samples):
        from executorch.backends.arm.quantizer import get_symmetric_a16w8_quantization_config

        from qflow.targets.arm import pipeline as arm

        config = get_symmetric_a16w8_quantization_config() if self.int16 else None
        quantizer = arm.default_quantizer(self.spec, config)
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        prepared = prepare_pt2e(arm.export_module(model, samples[0]), quantizer)
        with torch.no_grad():
            for s in samples:
                prepared(*s)
        return convert_pt2e(prepared), "stock"

    def quantize_batch(self, cases, model, samples, custom):
        return self.quantize(None, model, samples)

    def lower_and_run_batch(self, gm, samples):
        from qflow.targets.arm import pipeline as arm

        try:
            with arm.capture_after() as folded:
                edge = arm.lower(gm, samples[0], spec=self.spec)
        except Exception as exc:  # noqa: BLE001 - any lowering failure is the measured outcome
            raise Refused(REFUSED_LOWERING, _short(exc)) from exc
        self.last = Programs(gm, edge, tuple(folded))
        top = edge.exported_program().graph_module
        outs = []
        for s in samples:
            try:
                outs.append(arm.run_tosa_reference(edge, s))
            except Exception as exc:  # noqa: BLE001
                raise Refused(REFUSED_LOAD, _short(exc)) from exc
        return top, outs

    def lower_and_run(self, gm, op, samples):
        from qflow.targets.arm import pipeline as arm

        try:
            edge = arm.lower(gm, samples[0], spec=self.spec)
        except Exception as exc:  # noqa: BLE001 - any lowering failure is the measured outcome
            raise Refused(REFUSED_LOWERING, _short(exc)) from exc
        top = edge.exported_program().graph_module
        delegated = any("executorch_call_delegate" in str(n.target) for n in top.graph.nodes)
        cpu_ops = tuple(
            _base(n.target)
            for n in top.graph.nodes
            if n.op == "call_function"
            and not _is_q(n)
            and not _is_dq(n)
            and "executorch_call_delegate" not in str(n.target)
            and _base(n.target) != "getitem"
        )
        outs = []
        for s in samples:
            if delegated:
                try:
                    outs.append(arm.run_tosa_reference(edge, s))
                except Exception as exc:  # noqa: BLE001
                    raise Refused(REFUSED_LOAD, _short(exc)) from exc
            else:
                out = edge.exported_program().module()(*s)
                outs.append([out] if isinstance(out, torch.Tensor) else list(out))
        return delegated, cpu_ops, outs


class XnnpackBackend(Backend):
    name = "xnnpack"
    batch = 17

    def quantize(self, case, model, samples):
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        from qflow.targets.xnnpack import pipeline as xnnpack

        def build(quantizer):
            prepared = prepare_pt2e(_export(model, samples[0]), quantizer)
            with torch.no_grad():
                for s in samples:
                    prepared(*s)
            return convert_pt2e(prepared)

        gm = build(xnnpack.default_quantizer())
        if output_q(gm, case.op) is not None:
            return gm, "stock"
        return build(_OpAnnotatingQuantizer(xnnpack.default_quantizer(), [case.op])), "custom"

    def quantize_batch(self, cases, model, samples, custom):
        from qflow.targets.xnnpack import pipeline as xnnpack

        quantizer = xnnpack.default_quantizer()
        if custom:
            quantizer = _OpAnnotatingQuantizer(quantizer, [c.op for c in cases])
        return _convert(model, samples, quantizer), "custom" if custom else "stock"

    def lower_and_run_batch(self, gm, samples):
        from qflow.targets.xnnpack import pipeline as xnnpack

        try:
            edge = xnnpack.lower(gm, samples[0], per_op=True)
            program = xnnpack.to_executorch(edge)
        except Exception as exc:  # noqa: BLE001
            raise Refused(REFUSED_LOWERING, _short(exc)) from exc
        self.last = Programs(gm, edge)
        top = edge.exported_program().graph_module
        refused = xnnpack.load_delegates(edge)
        if refused:
            by_branch = {}
            for i in range(len(_outputs(top))):
                for lm in branch_delegates(top, i):
                    if lm in refused:
                        by_branch[i] = refused[lm]
            if not by_branch:
                raise Refused(REFUSED_LOAD, "; ".join(refused.values()))
            raise PartlyRefused(by_branch)
        outs = []
        for s in samples:
            try:
                outs.append(xnnpack.run(program, s))
            except xnnpack.LoadError as exc:
                lines = [ln for ln in exc.log.splitlines() if ln.strip()]
                raise Refused(REFUSED_LOAD, " | ".join(lines[-3:])[:400] or _short(exc)) from exc
        return top, outs

    def lower_and_run(self, gm, op, samples):
        from qflow.targets.xnnpack import pipeline as xnnpack

        try:
            edge = xnnpack.lower(gm, samples[0])
            program = xnnpack.to_executorch(edge)
        except Exception as exc:  # noqa: BLE001
            raise Refused(REFUSED_LOWERING, _short(exc)) from exc
        d = xnnpack.delegation(edge)
        outs = []
        for s in samples:
            try:
                outs.append(xnnpack.run(program, s))
            except xnnpack.LoadError as exc:
                lines = [ln for ln in exc.log.splitlines() if ln.strip()]
                raise Refused(REFUSED_LOAD, " | ".join(lines[-3:])[:400] or _short(exc)) from exc
        return d.delegates > 0, tuple(_base(o) for o in d.cpu_ops), outs


class CortexMBackend(Backend):
    """CortexMQuantizer → to_edge → CortexMPassManager (M55), run on the Cortex-M dialect's
    reference kernels. No partitioner: an op is "delegated" when a `cortex_m::` kernel computes
    it, and on the CPU when it stays an aten op on the portable kernels."""

    name = "cortex-m"
    cpu_reads_codes = True

    def quantize(self, case, model, samples):
        return self.quantize_batch([case], model, samples, False)

    def quantize_batch(self, cases, model, samples, custom):
        from qflow.targets.cortex_m import pipeline as cortex_m

        return cortex_m.quantize(model, samples), "stock"

    def lower_and_run_batch(self, gm, samples):
        from qflow.targets.cortex_m import pipeline as cortex_m

        try:
            given, program = cortex_m.lower(gm, samples[0])
        except Exception as exc:  # noqa: BLE001
            raise Refused(REFUSED_LOWERING, _short(exc)) from exc
        self.last = Programs(gm, program, reference=given)
        outs = []
        for s in samples:
            try:
                outs.append(cortex_m.run(program, s))
            except Exception as exc:  # noqa: BLE001 - a kernel that refuses its arguments
                raise Refused(REFUSED_LOAD, _short(exc)) from exc
        return program.graph_module, outs

    def placement(self, top, i, op=""):
        """On a kernel when the branch's output comes from a `cortex_m::` op past its Q/DQ."""
        _, what = placement(top, i, op)
        if what in _ALIASES.get(op, {op}):
            return False, what
        node = _outputs(top)[i]
        while isinstance(node, torch.fx.Node) and (_is_q(node) or _is_dq(node)):
            node = node.args[0]
        if isinstance(node, torch.fx.Node) and "cortex_m" in str(node.target):
            return True, ""
        return False, what


def _convert(model, samples, quantizer):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    prepared = prepare_pt2e(_export(model, samples[0]), quantizer)
    with torch.no_grad():
        for s in samples:
            prepared(*s)
    return convert_pt2e(prepared)


def _export(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.fx.GraphModule:
    ep = torch.export.export(model.eval(), inputs, strict=True)
    return ep.module(check_guards=False)


class _OpAnnotatingQuantizer:
    """The stock XNNPACK quantizer, plus an int8 annotation of the probed op when
    the stock one leaves it float: input act qspec on every tensor input, output
    shared with the first input for pass-through ops and activations, its own
    observer otherwise (the op a user would custom-annotate)."""

    def __new__(cls, stock, ops):
        from torchao.quantization.pt2e.quantizer import (
            QuantizationAnnotation,
            Quantizer,
            SharedQuantizationSpec,
        )
        from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

        from qflow.ops import OpClass, classify

        class Q(Quantizer):
            def transform_for_annotation(self, model):
                return stock.transform_for_annotation(model)

            def annotate(self, model):
                stock.annotate(model)
                act = stock.global_config.input_activation
                for node in [n for op in ops for n in op_nodes(model, op)]:
                    ann = node.meta.get(Q_ANNOTATION_KEY)
                    if ann is not None and ann._annotated:
                        continue
                    tensors = [
                        a for a in node.all_input_nodes if "val" in a.meta and a.meta["val"].dtype.is_floating_point
                    ]
                    val = node.meta.get("val")
                    if not tensors or not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point:
                        continue  # (a comparison's bool output holds no codes)
                    shared = classify(_base(node.target)) in (OpClass.PASSTHROUGH, OpClass.ACTIVATION)
                    out = SharedQuantizationSpec((tensors[0], node)) if shared else act
                    node.meta[Q_ANNOTATION_KEY] = QuantizationAnnotation(
                        input_qspec_map={t: act for t in tensors}, output_qspec=out, _annotated=True
                    )
                return model

            def validate(self, model):
                return None

        return Q()


# --------------------------------------------------------------------------- the probe


def measure_case(backend: Backend, case: Case, variants: Sequence[str] = VARIANTS) -> list[Measurement]:
    """Measure every variant of one case on one backend: alone, or after a carrier
    ``add`` when the partitioner will not delegate the op on its own."""
    first = _measure_form(backend, case, variants[:1], carried=False)
    if first[0].outcome == CPU:
        carried = _measure_form(backend, case, variants, carried=True)
        if carried[0].outcome != CPU:
            return carried
    return first + _measure_form(backend, case, variants[1:], carried=False)


def _measure_form(backend: Backend, case: Case, variants: Sequence[str], carried: bool) -> list[Measurement]:
    if not variants:
        return []
    model = case.make()
    torch.manual_seed(0)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    if carried:
        model = _Carried(model)
    samples = [inputs_for(case, seed, carried) for seed in range(3)]
    form = "after add" if carried else "alone"
    try:
        converted, how = backend.quantize(case, model, samples)
    except Exception as exc:  # noqa: BLE001
        return [
            Measurement(case.name, case.op, backend.name, v, "quantize failed", form=form, detail=_short(exc))
            for v in variants
        ]
    results = []
    for variant in variants:
        m = Measurement(case.name, case.op, backend.name, variant, "", form=form, quantizer=how)
        gm = move_output_domain(converted, case.op, variant)
        if gm is None:
            m.outcome = NOT_QUANTIZED
            results.append(m)
            continue
        if variant == "stock" and output_q(gm, case.op) is None:
            m.detail = "the quantizer leaves the op in float"
        with torch.no_grad():
            reference = [[o] if isinstance(o := gm(*s), torch.Tensor) else list(o) for s in samples]
        try:
            delegated, cpu_ops, outs = backend.lower_and_run(gm, case.op, samples)
        except Refused as r:
            m.outcome, m.detail = r.stage, r.detail
            results.append(m)
            continue
        except Exception as exc:  # noqa: BLE001
            m.outcome, m.detail = "probe error", _short(exc) + traceback.format_exc()[-300:]
            results.append(m)
            continue
        scale = output_scale(gm)
        lsb = max(compare(r, o, scale) for r, o in zip(reference, outs, strict=True))
        m.lsb = round(lsb, 2)
        m.cpu_ops = cpu_ops
        names = _ALIASES.get(case.op, {case.op})
        if (not delegated or any(c in names for c in cpu_ops)) and lsb > 1.0 + TOLERANCE:
            m.outcome, m.detail = MISCOMPILE, "on CPU, off the fake-quantized model: " + ", ".join(cpu_ops)
        elif not delegated or any(c in names for c in cpu_ops):
            m.outcome = CPU
            m.detail = "on CPU: " + ", ".join(cpu_ops)
        else:
            m.outcome = EXACT if lsb <= 1.0 + TOLERANCE else MISCOMPILE
        results.append(m)
    return results


# --------------------------------------------------------------------------- batches
#
# The test builds one program per target and variant holding every case as an
# independent branch (own inputs, own output), so a whole table costs a few
# lowerings. A branch's probed quantize is the one feeding its output's
# dequantize. A refusal refuses the whole program, so a refused batch is split
# in halves until the refusing cases stand alone.


class _Batch(torch.nn.Module):
    def __init__(self, cases: Sequence[Case], carried: frozenset[str]) -> None:
        super().__init__()
        branches = []
        self.arity = []
        for case in cases:
            m = case.make()
            torch.manual_seed(0)
            for p in m.parameters():
                torch.nn.init.normal_(p, std=0.3)
            carry = case.name in carried
            branches.append(_Carried(m) if carry else m)
            self.arity.append(len(case.shapes) + (1 if carry else 0))
        self.branches = torch.nn.ModuleList(branches)

    def forward(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = []
        i = 0
        for branch, k in zip(self.branches, self.arity, strict=True):
            outs.append(branch(*xs[i : i + k]))
            i += k
        return tuple(outs)


def batch_inputs(cases: Sequence[Case], carried: frozenset[str], seed: int) -> tuple[torch.Tensor, ...]:
    xs: list[torch.Tensor] = []
    for j, case in enumerate(cases):
        xs += inputs_for(case, seed * 1000 + j, case.name in carried)
    return tuple(xs)


def _outputs(gm: torch.fx.GraphModule) -> list[object]:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    return list(out.args[0]) if isinstance(out.args[0], (tuple, list)) else [out.args[0]]


def branch_q(gm: torch.fx.GraphModule, i: int, own: bool = False) -> torch.fx.Node | None:
    """The quantize of branch `i`'s op output (its output's dequantize's input), or None. `own`
    (`Case.requantized`): the op's own quantize, before the requant the quantizer put after it."""
    dq = _outputs(gm)[i]
    q = dq.args[0] if isinstance(dq, torch.fx.Node) and _is_dq(dq) else None
    if not (isinstance(q, torch.fx.Node) and _is_q(q)):
        return None
    while own and isinstance(x := q.args[0], torch.fx.Node) and _is_dq(x) and isinstance(x.args[0], torch.fx.Node):
        if not _is_q(x.args[0]):
            break
        q = x.args[0]
    return q


def move_branch_domains(
    gm: torch.fx.GraphModule, variant: str, own: Sequence[bool] = ()
) -> tuple[torch.fx.GraphModule, list[bool]]:
    """A copy with every branch's output domain moved (`own[i]`: see `branch_q`); which branches were quantized."""
    gm = copy.deepcopy(gm)
    moved = []
    for i in range(len(_outputs(gm))):
        q = branch_q(gm, i, i < len(own) and own[i])
        moved.append(q is not None)
        if q is None or variant == "stock":
            continue
        _x, scale, zp, _qmin, qmax, _dtype = q.args[:6]
        if variant == "zp":
            new_scale, new_zp = scale, zp + ZP_SHIFT if zp + ZP_SHIFT <= qmax - 32 else zp - ZP_SHIFT
        else:
            new_scale, new_zp = scale * SCALE_FACTOR, zp
        for node in [q, *[u for u in q.users if _is_dq(u)]]:
            args = list(node.args)
            args[1], args[2] = float(new_scale), int(new_zp)
            node.args = tuple(args)
    gm.recompile()
    return gm, moved


def branch_delegates(top: torch.fx.GraphModule, i: int) -> set[str]:
    """The lowered modules branch `i`'s output depends on."""
    seen, stack, found = set(), [_outputs(top)[i]], set()
    while stack:
        node = stack.pop()
        if not isinstance(node, torch.fx.Node) or node in seen:
            continue
        seen.add(node)
        if node.op == "get_attr" and str(node.target).startswith("lowered_module"):
            found.add(str(node.target))
        stack.extend(node.all_input_nodes)
    return found


def placement(top: torch.fx.GraphModule, i: int, op: str = "") -> tuple[bool, str]:
    """Whether branch `i`'s op runs in a delegate; else the CPU op producing its output.

    The op is on the CPU when a node of it is still in the top-level graph upstream
    of the branch's output (its quantize / dequantize may be delegates of their own)."""
    names = _ALIASES.get(op, {op})
    seen, stack = set(), [_outputs(top)[i]]
    while stack:
        node = stack.pop()
        if not isinstance(node, torch.fx.Node) or node in seen:
            continue
        seen.add(node)
        if node.op == "call_function" and _base(node.target) in names:
            return False, _base(node.target)
        stack.extend(node.all_input_nodes)
    node = _outputs(top)[i]
    while isinstance(node, torch.fx.Node) and (_is_q(node) or _is_dq(node)):
        node = node.args[0]
    if not isinstance(node, torch.fx.Node):
        return False, "input"
    if _base(node.target) == "getitem" and "executorch_call_delegate" in str(getattr(node.args[0], "target", "")):
        return True, ""
    return False, _base(node.target)


def measure_batch(
    backend: Backend,
    cases: Sequence[Case],
    variant: str,
    carried: frozenset[str] | None = None,
    custom: bool = False,
) -> list[Measurement]:
    """Measure one variant of many cases with one quantize/lower/run (split on refusal, and into
    `backend.batch` cases a program)."""
    if backend.batch is not None and len(cases) > backend.batch:
        chunks = [cases[k : k + backend.batch] for k in range(0, len(cases), backend.batch)]
        return [m for chunk in chunks for m in measure_batch(backend, chunk, variant, carried, custom)]
    if carried is None:
        carried = backend.carried
    model = _Batch(cases, carried)
    samples = [batch_inputs(cases, carried, seed) for seed in range(3)]
    converted, how = backend.quantize_batch(cases, model, samples, custom)
    metas, qparams, moved = [], [], []
    for i in range(len(cases)):
        q = branch_q(converted, i, cases[i].requantized)
        qparams.append((float(q.args[1]), int(q.args[2])) if q is not None else None)
        op = q.args[0] if q is not None else None
        metas.append(dict(op.meta.get("custom") or {}) if isinstance(op, torch.fx.Node) else {})
        moved.append(_base(op.target) if isinstance(op, torch.fx.Node) and op.op == "call_function" else "")
    gm, quantized = move_branch_domains(converted, variant, [c.requantized for c in cases])
    with torch.no_grad():
        reference = [list(gm(*s)) for s in samples]
    results = [
        Measurement(
            c.name, c.op, backend.name, variant, "", form="after add" if c.name in carried else "alone", quantizer=how
        )
        for c in cases
    ]
    backend.last = None
    try:
        top, outs = backend.lower_and_run_batch(gm, samples)
    except PartlyRefused as p:
        for i, detail in p.branches.items():
            results[i].outcome, results[i].detail = REFUSED_LOAD, detail
            results[i].programs, results[i].branch = backend.last, i
        rest = [c for i, c in enumerate(cases) if i not in p.branches]
        if rest:
            again = {m.case: m for m in measure_batch(backend, rest, variant, carried, custom)}
            results = [again.get(m.case, m) if i not in p.branches else m for i, m in enumerate(results)]
        return results
    except Refused as r:
        if len(cases) == 1:
            results[0].outcome, results[0].detail = r.stage, r.detail
            results[0].programs, results[0].branch = backend.last or Programs(gm), 0
            return results
        half = len(cases) // 2
        return measure_batch(backend, cases[:half], variant, carried, custom) + measure_batch(
            backend, cases[half:], variant, carried, custom
        )
    scales = [float(n.args[1]) if isinstance(n, torch.fx.Node) and _is_dq(n) else None for n in _outputs(gm)]
    programs = backend.last or Programs(gm)
    for i, m in enumerate(results):
        m.programs, m.branch = programs, i
        m.custom_meta = metas[i]
        m.out_qparams = qparams[i]
        m.moved = moved[i]
        if not quantized[i] and variant != "stock":
            m.outcome = NOT_QUANTIZED
            continue
        lsb = max(compare([ref[i]], [out[i]], scales[i]) for ref, out in zip(reference, outs, strict=True))
        m.lsb = round(lsb, 2)
        delegated, cpu_op = backend.placement(top, i, cases[i].op)
        if not quantized[i]:
            m.detail = "float (the quantizer leaves it unquantized)"
        if not delegated and lsb > 1.0 + TOLERANCE:  # (a float op on reals is within float rounding of the model)
            m.outcome = MISCOMPILE
            m.detail = f"on CPU, on codes: {cpu_op}" if backend.cpu_reads_codes else f"on CPU, off the model: {cpu_op}"
        elif not delegated:
            m.outcome, m.detail = CPU, f"on CPU: {cpu_op}"
        else:
            m.outcome = EXACT if lsb <= 1.0 + TOLERANCE else MISCOMPILE
    return results
