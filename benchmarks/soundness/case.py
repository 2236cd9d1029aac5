"""One campaign case: generate → quantize → qflow in every form → lower → run on
the real backend → compare with the fake-quantized model → repair → lower and
run again. Returns one JSON-able dict; every stage's failure is an outcome,
never an exception out of `run_case`.

Truth rule (see README.md here): the lowered program *computes right* when,
on every output, max |backend − fake-quant| is within the larger of
(a) 1 output LSB + 1 step of the coarsest quantization grid on that output's
path, and (b) the rounding budget (`_Budget`): one code at each quantize
where a correct integer lowering may round the other way, carried through
each op by its sensitivity on the test inputs (a sum of n values adds n
bounds, a mul scales one side's bound by the other side's magnitude). A
*marginal* case (≤ 4 coarse steps) is kept apart from the miscompiles.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import math
import os
import random
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

try:  # run as a script (benchmarks/soundness on sys.path) or as a package
    from gen import SpecModel, generate, sample_inputs
except ImportError:  # pragma: no cover
    from benchmarks.soundness.gen import SpecModel, generate, sample_inputs

VARIANTS = ("arm-pc", "arm-pt", "arm-a16w8", "arm-custom", "xnn", "xnn-custom")
#: The transformer menu's variants (`tx-<variant>`): stock Arm a8w8 and a16w8, custom, stock XNNPACK.
TX_VARIANTS = ("tx-arm-pc", "tx-arm-a16w8", "tx-arm-custom", "tx-xnn")
#: The mask menu's variants (`mk-<variant>`, gen.py SELECT): the same quantizers and backends.
MASK_VARIANTS = ("mk-arm-pc", "mk-arm-a16w8", "mk-arm-custom", "mk-xnn", "mk-cm", "mk-cm-custom")
#: The menu a variant prefix draws from (no prefix: the CNN menu).
MENU_OF_PREFIX = {"tx-": "transformer", "mk-": "masks"}
#: Cortex-M (issue #29): the stock CortexMQuantizer, and seed 000's overrides on it (int8 only);
#: run with `--variants cm,cm-custom` (the default round robin is the six above).
CM_VARIANTS = ("cm", "cm-custom")
#: torchao `quantize_` (issue #28, torchao_case.py): the LLM menu, lowered to XNNPACK; run with
#: `--variants tao-8da4w,tao-8da8w,tao-int4wo,tao-int8wo,tao-int8dyn`.
TAO_VARIANTS = ("tao-8da4w", "tao-8da8w", "tao-int4wo", "tao-int8wo", "tao-int8dyn")
TARGET_OF = {"xnn": "xnnpack", "xnn-custom": "xnnpack", "cm": "cortex-m", "cm-custom": "cortex-m"}
TARGET_OF |= dict.fromkeys(TAO_VARIANTS, "xnnpack")
# (every other variant lowers to arm-tosa)
SPEC_OF = {"arm-pc": "TOSA-1.0+INT", "arm-pt": "TOSA-1.0+INT", "arm-a16w8": "TOSA-1.0+INT+int16"}
SPEC_OF["arm-custom"] = "TOSA-1.0+INT+int16"
N_CALIB = 6
N_TEST = 2
MARGINAL_STEPS = 4.0

Inputs = tuple[torch.Tensor, ...]

#: Set by the runner's worker: where a case leaves its record just before the backend runs the
#: lowered program. The TOSA reference model aborts the whole process on some invalid graphs
#: (ERROR_IF); the runner then records the case from this file as the backend's run failure.
CHECKPOINT: Any = None
#: The record being built: every stage checkpoints it, so a worker death is attributed to its stage.
_CURRENT: dict[str, Any] = {}
#: Test hook: the stage named in this variable ends the worker process (os._exit) as it starts.
DIE_AT = "QFLOW_CAMPAIGN_DIE_AT"


def stage(name: str) -> None:
    """Checkpoint the case's record as entering `name` (the runner attributes a worker death to it)."""
    if CHECKPOINT is not None and _CURRENT:
        rec = {k: v for k, v in _CURRENT.items() if not k.startswith("_")}
        CHECKPOINT.write_text(json.dumps({**rec, "stage": name}))
    if os.environ.get(DIE_AT) == name:
        os._exit(70)


def spanning_input(samples: list[Inputs], seed: int) -> Inputs:
    """A test input whose every element is drawn uniformly from its input's
    calibrated range: the tails a normal or lopsided sample rarely reaches
    (where a dropped clamp or requant shows) are as likely as the middle."""
    g = torch.Generator().manual_seed(seed + 1)
    out = []
    for xs in zip(*samples, strict=True):
        lo, hi = min(float(x.min()) for x in xs), max(float(x.max()) for x in xs)
        out.append(torch.rand(xs[0].shape, generator=g) * (hi - lo) + lo)
    return tuple(out)


#: Test inputs beyond the samples: values each input's quantization domain holds that the samples may not
#: reach. The most quantized values pushed to their extremes per case (chosen by its seed), and the steps.
STRESS_VALUES = 8
STRESS_STEPS = 12
#: Narrow inputs: each input's values within a small part of its range, at these levels (as fractions of the
#: range) and spreads. Norms and softmax compute on a row's spread, not its values: a LayerNorm's variance
#: saturates its domain on every wide input and falls inside it only on a narrow one (measured: a merged
#: duplicate mean 13 output LSB off on inputs in -0.25 ± 0.3, exact on every uniform or stressed input).
NARROW_LEVELS = (0.125, 0.375, 0.625, 0.875)
NARROW_SPREADS = (0.05, 0.2)


def _input_ranges(converted: torch.fx.GraphModule, tests: list[Inputs]) -> list[tuple[float, float]]:
    """Per input, the reals its quantize can hold without saturating ([lo, hi] of the tests' values for an
    input no per-tensor quantize reads)."""
    ranges = [(min(float(x.min()) for x in xs), max(float(x.max()) for x in xs)) for xs in zip(*tests, strict=True)]
    for i, ph in enumerate(n for n in converted.graph.nodes if n.op == "placeholder"):
        for q in ph.users:
            if _is_quantize(q) and all(isinstance(a, (int, float)) for a in q.args[1:5]):
                scale, zp, qmin, qmax = (float(a) for a in q.args[1:5])
                ranges[i] = ((qmin - zp) * scale, (qmax - zp) * scale)
    return ranges


class _Unrounded(torch.fx.Interpreter):
    """The converted program with each quantize / dequantize as its affine map (no rounding, no clamp), so
    a gradient reaches the inputs; keeps the values of `watch`."""

    def __init__(self, gm: torch.fx.GraphModule, watch: torch.fx.Node) -> None:
        super().__init__(gm)
        self.watch, self.value = watch, None

    def run_node(self, n: torch.fx.Node) -> Any:
        if _is(n, "quantize_per_tensor"):  # (and dequantize_per_tensor)
            x, scale, zp = (self.env[a] if isinstance(a, torch.fx.Node) else a for a in n.args[:3])
            out = x / scale + zp if _is_quantize(n) else (x.float() - zp) * scale
        else:
            out = super().run_node(n)
        if n is self.watch:
            self.value = out
        return out


def _reads_inputs(node: torch.fx.Node) -> bool:
    """Whether `node` is computed from the program's inputs (not a placeholder itself, nor a constant's
    reshape): the values a gradient can push. Measured: a LayerNorm weight's reshape among the values made
    every stress input fail in 412 of 1000 transformer cases (9d664a9), judged on the samples alone."""
    seen, todo = set(), list(node.all_input_nodes)
    while todo:
        n = todo.pop()
        if n.op == "placeholder":
            return True
        if n not in seen:
            seen.add(n)
            todo.extend(n.all_input_nodes)
    return False


def domain_inputs(converted: torch.fx.GraphModule, tests: list[Inputs], seed: int) -> list[Inputs]:  # noqa: C901
    """Test inputs over the whole range each input's quantization domain holds — a program must compute right
    on every value it was quantized to accept, not only on the calibration samples' range (measured: a
    clamp on codes wrong for inputs in [-0.76, 0], an input domain of [-2.65, 0] and samples below -0.76).

    One input uniform over those ranges; for up to STRESS_VALUES quantized values of the program (drawn by
    `seed`, whatever qflow says), the inputs that push each to its largest and smallest: signed gradient
    steps on the program without rounding, from the uniform input, kept inside the ranges; then the narrow
    inputs (NARROW_LEVELS). Chosen from the program and the seed alone: no verdict of qflow steers them."""
    ranges = _input_ranges(converted, tests)
    gen = torch.Generator().manual_seed(seed + 2)

    def inside(xs: list[torch.Tensor]) -> Inputs:  # each input's dtype and layout kept
        return tuple(
            t.clone().copy_(torch.clamp(x, lo, hi)) if t.is_floating_point() else t
            for t, x, (lo, hi) in zip(tests[0], xs, ranges, strict=True)
        )

    uniform = inside(
        [torch.rand(t.shape, generator=gen) * (b - a) + a for t, (a, b) in zip(tests[0], ranges, strict=True)]
    )
    narrow = [
        inside(
            [
                torch.rand(t.shape, generator=gen) * (2 * w * (b - a)) + (a + level * (b - a) - w * (b - a))
                for t, (a, b) in zip(tests[0], ranges, strict=True)
            ]
        )
        for level in NARROW_LEVELS
        for w in NARROW_SPREADS
    ]
    values = list(
        dict.fromkeys(
            q.args[0]
            for q in converted.graph.nodes
            if _is_quantize(q) and isinstance(q.args[0], torch.fx.Node) and _reads_inputs(q.args[0])
        )
    )
    values = random.Random(seed).sample(values, min(len(values), STRESS_VALUES))
    out = [uniform]
    for node in values:
        for sign in (1.0, -1.0):
            xs = list(uniform)
            for k in range(STRESS_STEPS):
                xs = [x.detach().requires_grad_(x.is_floating_point()) for x in xs]
                run = _Unrounded(converted, node)
                run.run(*xs)
                if not isinstance(run.value, torch.Tensor) or not run.value.requires_grad:
                    break  # an integer value, or one no floating-point input reaches: pushed as far as it goes
                goal = run.value.max() if sign > 0 else -run.value.min()
                grads = torch.autograd.grad(goal, [x for x in xs if x.requires_grad], allow_unused=True)
                it = iter(grads)
                step = 0.25 * 0.7**k
                xs = [
                    x + step * (hi - lo) * g.sign() if x.requires_grad and (g := next(it)) is not None else x
                    for x, (lo, hi) in zip(xs, ranges, strict=True)
                ]
                xs = list(inside([x.detach() for x in xs]))
            out.append(inside([x.detach() for x in xs]))
    return out + narrow


def random_inputs(converted: torch.fx.GraphModule, tests: list[Inputs], seed: int, n: int) -> list[Inputs]:
    """`n` more test inputs over each input's quantization range (`rejudge.py`): every other one uniform
    over it, the rest narrow — a random centre and a random spread of at most 30 % of the range (norms
    and softmax compute on a row's spread). Chosen from the program and the seed alone."""
    ranges = _input_ranges(converted, tests)
    gen = torch.Generator().manual_seed(seed + 3)
    out = []
    for k in range(n):
        xs = []
        for t, (lo, hi) in zip(tests[0], ranges, strict=True):
            if not t.is_floating_point():
                xs.append(t)
                continue
            if k % 2 == 0:
                x = torch.rand(t.shape, generator=gen) * (hi - lo) + lo
            else:
                centre, spread = (float(torch.rand(1, generator=gen)) for _ in range(2))
                x = lo + (hi - lo) * (centre + (torch.rand(t.shape, generator=gen) - 0.5) * 0.3 * spread)
            xs.append(t.clone().copy_(torch.clamp(x, lo, hi)))
        out.append(tuple(xs))
    return out


def level_inputs(converted: torch.fx.GraphModule, tests: list[Inputs], n: int) -> list[Inputs]:
    """`n` constant inputs (`rejudge.py --levels`): every element of every input at one level, evenly spaced from
    the bottom of each input's quantization range to its top (and at 0 where the range holds it). A row of equal
    values is what masks and reductions are least likely to meet in random inputs; chosen from the program alone."""
    ranges = _input_ranges(converted, tests)
    levels = [k / (n - 1) for k in range(n)] if n > 1 else [0.0] * n
    out = []
    for at in levels:
        out.append(tuple(
            t.clone().fill_(lo + at * (hi - lo)) if t.is_floating_point() else t
            for t, (lo, hi) in zip(tests[0], ranges, strict=True)
        ))  # fmt: skip
    if n and all(lo < 0 < hi for lo, hi in ranges):
        out.append(tuple(t.clone().fill_(0.0) if t.is_floating_point() else t for t in tests[0]))
    return out


def searched_inputs(
    converted: torch.fx.GraphModule,
    tests: list[Inputs],
    start: list[Inputs],
    distance: Callable[[Inputs], float],
    seed: int,
    n: int,
) -> tuple[Inputs, float, int]:
    """The input furthest from the fake-quantized model that `n` backend runs find (`rejudge.py --search`):
    from the worst of `start`, random moves (a few elements or a block of them redrawn over the input's
    range, everything moved to one level, every element nudged by a code or two), each kept when the
    backend is no nearer (`distance`: the backend's error, in band units). Steered by the backend's own
    error alone — no verdict of qflow — so it can find a miss as well as turn a false alarm into a hit.
    Returns (that input, its distance, the run at which it was found)."""
    ranges = _input_ranges(converted, tests)
    gen = torch.Generator().manual_seed(seed + 5)
    scored = [(distance(x), i, x) for i, x in enumerate(start)]
    best_d, _, best = max(scored, key=lambda s: (s[0], -s[1]))
    found = 0

    def rand(shape: torch.Size) -> torch.Tensor:
        return torch.rand(shape, generator=gen)

    def moved(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
        flat, kind = x.flatten().clone(), int(torch.randint(4, (1,), generator=gen))
        if kind == 0:  # a few elements redrawn
            k = 1 + int(torch.randint(max(1, flat.numel() // 8), (1,), generator=gen))
            at = torch.randperm(flat.numel(), generator=gen)[:k]
            flat[at] = lo + (hi - lo) * rand(at.shape)
        elif kind == 1:  # a block of consecutive elements (a row, a window) redrawn narrow
            k = 1 + int(torch.randint(flat.numel(), (1,), generator=gen))
            a = int(torch.randint(flat.numel() - k + 1, (1,), generator=gen))
            centre = float(rand(torch.Size([1])))
            flat[a : a + k] = lo + (hi - lo) * (centre + (rand(torch.Size([k])) - 0.5) * 0.1)
        elif kind == 2:  # everything towards one level
            level, w = (float(v) for v in rand(torch.Size([2])))
            flat = flat * (1 - w) + (lo + (hi - lo) * level) * w
        else:  # every element nudged by about a code of the input's grid (256 codes over the range)
            flat = flat + (hi - lo) / 256 * (2 * rand(flat.shape) - 1) * 2
        return x.clone().copy_(torch.clamp(flat, lo, hi).reshape(x.shape))

    for k in range(n):
        cand = tuple(moved(t, lo, hi) if t.is_floating_point() else t for t, (lo, hi) in zip(best, ranges, strict=True))
        d = distance(cand)
        if d >= best_d:
            found = k + 1 if d > best_d else found
            best_d, best = d, cand
    return best, best_d, found


def quantized(variant: str, spec: dict[str, Any], index: int, sink: dict[str, Any]) -> tuple[Any, ...]:
    """(the converted program, its calibration samples, its test inputs) of a case: its seeds make the
    same program every time (`run_case`, `rejudge.py`). `sink` gets the custom overrides."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from qflow.targets.arm.pipeline import export_module

    rng = random.Random(index * 7919 + 17)
    samples = sample_inputs(spec, N_CALIB, seed=index)
    tests = samples[:N_TEST] + [spanning_input(samples, seed=index)]
    model = SpecModel(spec).eval().requires_grad_(False)  # an inference program (no autograd in the runtime)
    model, samples, tests = _layout(variant, model, samples, tests)
    prepared = prepare_pt2e(export_module(model, samples[0]), make_quantizer(variant, rng, sink))
    with torch.no_grad():
        for s in samples:
            prepared(*s)
    return convert_pt2e(prepared), samples, tests


def case_id(index: int, variant: str | None = None) -> str:
    """`00012-arm-pc`: the generator seed and the quantization variant."""
    return f"{index:05d}-{variant or VARIANTS[index % len(VARIANTS)]}"


def parse_id(cid: str) -> tuple[int, str]:
    index, variant = cid.split("-", 1)
    known = VARIANTS + TX_VARIANTS + MASK_VARIANTS + CM_VARIANTS + TAO_VARIANTS
    if variant not in known:
        raise ValueError(f"unknown variant {variant!r} in case id {cid!r}; expected one of {known}")
    return int(index), variant


def menu_of(variant: str) -> str:
    """The generator's op menu a variant draws from."""
    return MENU_OF_PREFIX.get(variant[:3], "cnn")


def base_variant(variant: str) -> str:
    """The quantizer and backend of a variant (a transformer or mask variant uses its CNN twin's)."""
    return variant.removeprefix(variant[:3]) if variant[:3] in MENU_OF_PREFIX else variant


def target_of(variant: str) -> str:
    return TARGET_OF.get(variant, "arm-tosa")


# ---------------------------------------------------------------- quantizers


def _fixed_qspec(scale: float, zp: int, int16: bool) -> Any:
    from executorch.backends.arm.quantizer.arm_quantizer import QuantizationSpec
    from torchao.quantization.pt2e.observer import FixedQParamsObserver

    dtype = torch.int16 if int16 else torch.int8
    qmin, qmax = (-32767, 32767) if int16 else (-128, 127)
    qscheme = torch.per_tensor_symmetric if int16 else torch.per_tensor_affine
    return QuantizationSpec(
        dtype=dtype,
        observer_or_fake_quant_ctr=FixedQParamsObserver.with_args(
            scale=scale,
            zero_point=zp,
            dtype=torch.int16 if int16 else torch.qint8,
            qscheme=qscheme,
            quant_min=qmin,
            quant_max=qmax,
        ),
        quant_min=qmin,
        quant_max=qmax,
        qscheme=qscheme,
        is_dynamic=False,
    )


def _random_fixed(rng: random.Random, int16_ok: bool) -> tuple[Any, dict[str, Any]]:
    if int16_ok and rng.random() < 0.4:
        scale = rng.uniform(1.0, 8.0) / 32767.0
        return _fixed_qspec(scale, 0, True), {"dtype": "int16", "scale": scale, "zp": 0}
    scale, zp = rng.uniform(0.005, 0.05), rng.randint(-120, 120)
    return _fixed_qspec(scale, zp, False), {"dtype": "int8", "scale": scale, "zp": zp}


_FAVOURED = ("cat", "stack", "view", "reshape", "permute", "slice", "pad", "pool", "relu", "hardtanh", "clamp", "neg")
_FAVOURED += ("abs", "flatten", "squeeze", "upsample", "pixel_shuffle", "mean", "sum")


def override_annotations(gm: torch.fx.GraphModule, rng: random.Random, int16_ok: bool) -> list[dict[str, Any]]:
    """Seed 000's style: some nodes' output qspec replaced by fixed qparams; each
    consumer's input spec for it made the same (consistent), different, or left."""
    from executorch.backends.arm.quantizer.arm_quantizer_utils import mark_node_as_annotated

    cands = [
        n
        for n in gm.graph.nodes
        if n.op == "call_function"
        and n.meta.get("quantization_annotation") is not None
        and n.meta["quantization_annotation"].output_qspec is not None
    ]
    # Pass-through ops and activations are where a folded requant goes missing (seed 000, 001): favour them.
    weights = [3.0 if any(k in str(n.target) for k in _FAVOURED) else 1.0 for n in cands]
    chosen: list[torch.fx.Node] = []
    for _ in range(min(len(cands), rng.randint(1, 3))):
        pick = rng.choices(range(len(cands)), weights=weights)[0]
        chosen.append(cands[pick])
        weights[pick] = 0.0
        if not any(weights):
            break
    done: list[dict[str, Any]] = []
    for node in chosen:
        qspec, desc = _random_fixed(rng, int16_ok)
        node.meta["quantization_annotation"].output_qspec = qspec
        mark_node_as_annotated(node)
        entry: dict[str, Any] = {"node": node.name, "output": desc, "users": {}}
        for user in node.users:
            qa = user.meta.get("quantization_annotation")
            if qa is None or node not in qa.input_qspec_map:
                continue
            how = rng.choice(["consistent", "other", "leave"])
            if how == "consistent":
                qa.input_qspec_map[node] = qspec
            elif how == "other":
                qa.input_qspec_map[node], udesc = _random_fixed(rng, int16_ok)
                how = f"other {udesc}"
            entry["users"][user.name] = how
        done.append(entry)
    return done


def make_quantizer(variant: str, rng: random.Random, sink: dict[str, Any]) -> Any:
    """The variant's real quantizer; `sink` receives the annotated graph and overrides."""
    if variant.startswith("xnn"):
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )

        q: Any = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    elif variant.startswith("cm"):
        from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer

        q = CortexMQuantizer()
    else:
        from executorch.backends.arm.quantizer import (
            get_symmetric_a16w8_quantization_config,
            get_symmetric_quantization_config,
        )

        from qflow.targets.arm import pipeline as arm

        if variant == "arm-a16w8":
            cfg = get_symmetric_a16w8_quantization_config(is_per_channel=True)
        else:
            cfg = get_symmetric_quantization_config(is_per_channel=variant != "arm-pt")
        q = arm.default_quantizer(SPEC_OF[variant], cfg)
    stock = q.annotate

    def annotate(model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        model = stock(model)
        if variant.endswith("-custom"):
            sink["overrides"] = override_annotations(model, rng, int16_ok=variant.startswith("arm"))
        sink["annotated"] = copy.deepcopy(model)
        return model

    q.annotate = annotate
    return q


# ---------------------------------------------------------------- backends


@dataclass(frozen=True)
class CortexMProgram:
    """What the Cortex-M flow runs: the program `CortexMPassManager` returns, and the edge program
    it was given (the reference its kernels' folded integers are checked against)."""

    program: Any
    given: Any


def lower(variant: str, ep: Any, inputs: Inputs) -> tuple[Any, list[Any]]:
    """Lower with the stock partitioner; Arm partitions are captured after the fold pass. Cortex-M
    has no partitioner: its passes rewrite the whole program."""
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    if variant.startswith("cm"):
        from qflow.targets.cortex_m import pipeline as cortex_m

        given, program = cortex_m.lower(ep, inputs)
        return CortexMProgram(program, given), []
    if variant.startswith("xnn"):
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        edge = to_edge_transform_and_lower(
            ep, partitioner=[XnnpackPartitioner()], compile_config=EdgeCompileConfig(_check_ir_validity=False)
        )
        return edge, []
    from qflow.targets.arm import pipeline as arm

    with arm.capture_after() as partitions:
        edge = arm.lower(ep, inputs, SPEC_OF[variant])
    return edge, list(partitions)


def n_delegates(edge: Any) -> int:
    """Delegate calls; for Cortex-M, the quantized `cortex_m` kernels the passes emitted."""
    if isinstance(edge, CortexMProgram):
        return sum(1 for n in edge.program.graph.nodes if "cortex_m.quantized_" in str(n.target))
    gm = edge.exported_program().graph_module
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and "call_delegate" in str(n.target))


def run_backend(variant: str, edge: Any, inputs: Inputs) -> list[torch.Tensor]:
    if isinstance(edge, CortexMProgram):  # the Cortex-M dialect's reference kernels
        from qflow.targets.cortex_m import pipeline as cortex_m

        return cortex_m.run(edge.program, inputs)
    if variant.startswith("xnn"):
        from executorch.runtime import Runtime

        program = Runtime.get().load_program(edge.to_executorch().buffer)
        out = program.load_method("forward").execute(list(inputs))
        return [t for t in out if isinstance(t, torch.Tensor)]
    from qflow.targets.arm import pipeline as arm

    return arm.run_tosa_reference(edge, inputs)


# ---------------------------------------------------------------- truth


def _is(node: torch.fx.Node, name: str) -> bool:
    return node.op == "call_function" and name in str(node.target)


def _is_quantize(node: torch.fx.Node) -> bool:
    return _is(node, "quantize_per_tensor") and not _is(node, "dequantize")


def output_grids(converted: torch.fx.GraphModule, tests: list[Inputs]) -> list[dict[str, float | None]]:
    """Per output: its dequantize's scale, the coarsest activation scale
    upstream, and the rounding budget on the test inputs."""
    out_node = next(n for n in converted.graph.nodes if n.op == "output")
    args = out_node.args[0]
    args = list(args) if isinstance(args, (tuple, list)) else [args]
    grids = []
    for a in args:
        out_scale = None
        if isinstance(a, torch.fx.Node) and _is(a, "dequantize_per_tensor") and isinstance(a.args[1], float):
            out_scale = float(a.args[1])
        coarsest, seen, stack = 0.0, set(), [a]
        while stack:
            n = stack.pop()
            if not isinstance(n, torch.fx.Node) or n in seen:
                continue
            seen.add(n)
            if (_is(n, "quantize_per_tensor") or _is(n, "dequantize_per_tensor")) and isinstance(n.args[1], float):
                coarsest = max(coarsest, float(n.args[1]))
            stack.extend(n.all_input_nodes)
        grids.append({"out_scale": out_scale, "coarsest": coarsest or out_scale})
    for grid, budget in zip(grids, rounding_budget(converted, tests), strict=True):
        grid["budget"] = budget
    for grid, tie in zip(grids, tie_sensitivity(converted, tests), strict=True):
        grid["tie"] = None if grid["out_scale"] is None else round(tie / grid["out_scale"], 3)
    return grids


#: The relative perturbation of every requantized value in `tie_sensitivity`, and its trials per input.
TIE_JITTER = 1e-5
TIE_TRIALS = 40


def _jittered(converted: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`converted` with every value it requantizes (not its inputs) perturbed by a relative TIE_JITTER,
    seeded: another correct kernel's rounding of the same reals."""
    gen = torch.Generator().manual_seed(0)

    def jitter(x: torch.Tensor) -> torch.Tensor:
        return x * (1 + TIE_JITTER * torch.randn(x.shape, generator=gen))

    gm = copy.deepcopy(converted)
    for n in list(gm.graph.nodes):
        requant = n.op == "call_function" and str(n.target).startswith("quantized_decomposed.quantize_per_tensor")
        if requant and isinstance(n.args[0], torch.fx.Node) and n.args[0].op != "placeholder":
            with gm.graph.inserting_before(n):
                n.replace_input_with(n.args[0], gm.graph.call_function(jitter, (n.args[0],)))
    gm.recompile()
    return gm


def tie_sensitivity(converted: torch.fx.GraphModule, tests: list[Inputs]) -> list[float]:
    """Per output, how far the fake-quantized model itself moves (real units) when every value it
    requantizes is perturbed by a relative TIE_JITTER (seeded): the rounding ties another correct
    kernel may break the other way, amplified downstream. Recorded beside the band, never widening
    it (the truth rule is the capped band): it tells a miss that is a tie flip from a wrong domain."""
    gm = _jittered(converted)
    worst: list[float] = []
    with torch.no_grad():
        for x in tests:
            want = _as_list(converted(*x))
            for _ in range(TIE_TRIALS):
                got = _as_list(gm(*x))
                moved = [float((g - w).abs().max()) if w.numel() else 0.0 for g, w in zip(got, want, strict=True)]
                worst = [max(a, b) for a, b in zip(worst, moved, strict=True)] if worst else moved
    return worst


def tie_resolutions(
    converted: torch.fx.GraphModule, tests: list[Inputs], got: list[list[torch.Tensor]], trials: int
) -> list[float]:
    """Per output, the furthest any element of the backend's result `got` (one list per test input) is
    from every result the fake-quantized model itself gives under `trials` jitters of what it requantizes
    (real units; `_jittered`), on the same input. Within the band, each code the backend wrote is one the
    model writes when a rounding tie breaks the other way: a tie resolution, input by input and element by
    element, which the maxima `tie_sensitivity` compares cannot tell from a wrong domain."""
    gm = _jittered(converted)
    worst: list[float] = []
    with torch.no_grad():
        for x, out in zip(tests, got, strict=True):
            nearest = [torch.full(o.shape, math.inf, dtype=torch.float64) for o in out]
            for _ in range(trials):
                for k, j in enumerate(_as_list(gm(*x))):
                    nearest[k] = torch.minimum(nearest[k], (out[k].double() - j.double()).abs())
            far = [float(n.max()) if n.numel() else 0.0 for n in nearest]
            worst = [max(a, b) for a, b in zip(worst, far, strict=True)] if worst else far
    return worst


# Ops through which an error tensor travels by the op itself: copies, and
# linear maps with non-negative coefficients (|f(a) - f(b)| <= f(|a - b|)).
_SAME_OP = {
    "permute", "view", "reshape", "_unsafe_view", "slice", "slice_copy",
    "constant_pad_nd", "pad", "cat", "stack", "upsample_nearest2d", "pixel_shuffle", "flatten", "squeeze",
    "unsqueeze", "clone", "expand", "select", "mean", "sum", "avg_pool2d", "adaptive_avg_pool2d", "max_pool2d",
    "max_pool2d_with_indices", "upsample_bilinear2d", "getitem", "contiguous", "alias", "transpose", "t",
}  # fmt: skip
_LIPSCHITZ = {"relu": 1, "relu6": 1, "hardtanh": 1, "clamp": 1, "abs": 1, "neg": 1, "tanh": 1, "sigmoid": 0.25}
# The coarsest rescale multiplier TOSA allows (16 bits, for int48 inputs), as a relative error.
RESCALE_REL = 2.0**-15


class _Budget(torch.fx.Interpreter):
    """Runs the fake-quantized graph and carries, next to each tensor, an
    elementwise bound on how far a correct integer lowering may be from it.

    Where the reference rounds a float, the backend rounds an exact integer
    through a fixed-point multiplier (relative error <= RESCALE_REL) and may
    break ties the other way: each quantize may move a code by however many
    rounding boundaries lie within that of its (already uncertain) input. The
    bound travels through each op by its sensitivity on these values — a sum
    of n adds n bounds, a mul scales each side's bound by the other side's
    magnitude, a conv by its weights' magnitudes. None: an op with no rule."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.err: dict[torch.fx.Node, Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        out = super().run_node(n)
        if n.op in ("call_method", "call_module"):
            self.err[n] = None  # (exported programs call functions only)
        elif n.op == "call_function" and isinstance(out, (torch.Tensor, tuple, list)):
            self.err[n] = self._rule(n, out)
        else:  # inputs, weights, scalars: the same on both sides
            self.err[n] = torch.zeros_like(out) if isinstance(out, torch.Tensor) else 0.0
        return out

    def _rule(self, n: torch.fx.Node, out: Any) -> Any:  # noqa: C901
        if any(self.err[a] is None for a in n.all_input_nodes):
            return None
        name = getattr(n.target, "_opname", getattr(n.target, "__name__", str(n.target)))
        val = lambda a: self.env[a] if isinstance(a, torch.fx.Node) else a  # noqa: E731
        err = lambda a: self.err[a] if isinstance(a, torch.fx.Node) else 0.0  # noqa: E731
        x = n.args[0]
        if name == "quantize_per_tensor":
            scale, zp, qmin, qmax = (float(val(a)) for a in n.args[1:5])
            pre = val(x).double() / scale
            spread = err(x) / scale + pre.abs() * RESCALE_REL + 1e-3
            code = out.double() - zp
            hi = torch.floor(pre + spread + 0.5).clamp(qmin - zp, qmax - zp)
            lo = torch.ceil(pre - spread - 0.5).clamp(qmin - zp, qmax - zp)
            return (torch.maximum(hi - code, code - lo).clamp(min=0) * scale).float()
        if name in ("dequantize_per_tensor", "dequantize_per_channel", "quantize_per_channel"):
            return err(x)  # a quantize's bound is already in real units; weights have none
        if name in _LIPSCHITZ:
            return _LIPSCHITZ[name] * err(x)
        if name in ("conv2d", "linear"):
            return n.target(err(x), val(n.args[1]).abs(), None, *n.args[3:])
        if name in ("add", "sub"):
            return err(x) + err(n.args[1])
        if name == "mul":
            y = n.args[1]
            return abs(val(x)) * err(y) + abs(val(y)) * err(x) + err(x) * err(y)
        if name in _SAME_OP:
            args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: self.err[a])
            at = {"constant_pad_nd": 2, "pad": 3}.get(name, len(args))  # the pad value has no error
            args = (*args[:at], 0.0, *args[at + 1 :]) if at < len(args) else args
            return n.target(*args, **{k: 0.0 if k == "value" else v for k, v in kwargs.items()})
        if os.environ.get("QFLOW_BUDGET_DEBUG"):
            print("no budget rule:", name)
        return None


def rounding_budget(gm: torch.fx.GraphModule, tests: list[Inputs]) -> list[float | None]:
    """Per output, the largest `_Budget` over the test inputs."""
    worst: list[float | None] | None = None
    for x in tests:
        b = _Budget(gm)
        with torch.no_grad():
            b.run(*x)
        out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        errs = [None if b.err.get(o) is None else float(torch.as_tensor(b.err[o]).max()) for o in outs]
        if worst is not None:
            errs = [None if a is None or e is None else max(a, e) for a, e in zip(worst, errs, strict=True)]
        worst = errs
    return worst or []


def direct_outputs(gm: torch.fx.GraphModule) -> dict[str, int]:
    """Node → the index of the program output that is its own requantized value (node → quantize → dequantize
    → output): there the error measured at the output is in the LSB of the node's requant, so it can be held
    against a bound qflow reports at the node (issue #27: measured error ≤ bound)."""
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    found: dict[str, int] = {}
    for k, dq in enumerate(out):
        q = dq.args[0] if isinstance(dq, torch.fx.Node) and _is(dq, "dequantize_per_tensor") else None
        if isinstance(q, torch.fx.Node) and _is_quantize(q) and isinstance(q.args[0], torch.fx.Node):
            found.setdefault(q.args[0].name, k)
    return found


def compare(
    got: list[list[torch.Tensor]], want: list[list[torch.Tensor]], grids: list[dict[str, float | None]]
) -> dict[str, Any]:
    """Worst output error over the test inputs, in output LSBs and coarse steps."""
    worst: dict[str, Any] = {"abs": 0.0, "lsb": 0.0, "steps": 0.0, "truth": "exact"}
    per: list[dict[str, float]] = [{"abs": 0.0, "lsb": 0.0} for _ in grids]
    for g_outs, w_outs in zip(got, want, strict=True):
        if len(g_outs) != len(w_outs):
            return {"truth": "miscompile", "why": f"{len(g_outs)} outputs, expected {len(w_outs)}"}
        for k, (g, w, grid) in enumerate(zip(g_outs, w_outs, grids, strict=True)):
            if tuple(g.shape) != tuple(w.shape):
                return {"truth": "miscompile", "why": f"shape {tuple(g.shape)} vs {tuple(w.shape)}"}
            d = float((g.float() - w.float()).abs().max()) if g.numel() else 0.0
            if d != d:  # nan
                return {"truth": "miscompile", "why": "nan"}
            out_scale = grid["out_scale"] or grid["coarsest"] or 1e-3
            coarse = grid["coarsest"] or out_scale
            lsb, steps = d / out_scale, d / coarse
            if lsb > per[k]["lsb"]:
                per[k] = {"abs": d, "lsb": lsb}
            tol = max(out_scale + coarse, grid.get("budget") or 0.0)
            truth = "exact" if d <= tol * (1 + 1e-6) else ("marginal" if d <= MARGINAL_STEPS * coarse else "miscompile")
            if d / tol > worst.get("ratio", -1.0):
                worst = {"abs": d, "lsb": lsb, "steps": steps, "ratio": d / tol, "out_scale": out_scale}
                worst["coarsest"] = coarse
            rank = {"exact": 0, "marginal": 1, "miscompile": 2}
            if rank[truth] > rank[worst.get("truth", "exact")]:
                worst["truth"] = truth
            worst.setdefault("truth", "exact")
    worst["outputs"] = per  # every output's own worst error: the summary judges each under its capped band
    return worst


# ---------------------------------------------------------------- qflow


def verdict(report: Any) -> str:
    """error (an error finding) > warning (a warning finding or a violated obligation) > unproven > proved."""
    if report.errors:
        return "error"
    if any(f.severity == "warning" for f in report.findings) or report.obligations.get("violated", 0):
        return "warning"
    return "proved" if report.proved else "unproven"


def _summ(report: Any) -> dict[str, Any]:
    return {
        "verdict": verdict(report),
        "obligations": dict(report.obligations),
        "findings": [
            {"kind": f.kind, "node": f.node, "severity": f.severity, "status": f.status, "message": f.message[:400]}
            | ({"bound_lsb": f.bound_lsb} if getattr(f, "bound_lsb", None) is not None else {})
            | ({"output_lsb": f.output_lsb} if getattr(f, "output_lsb", None) is not None else {})
            for f in report.findings
        ],
    }


def _with_target(fn: Callable[..., Any], target: str | None) -> Callable[..., Any]:
    """`fn` (qflow.analyze / repair) with `target=` where this checkout's qflow accepts it."""
    if target is None or "target" not in inspect.signature(fn).parameters:
        return fn
    return lambda *a, **kw: fn(*a, target=target, **kw)


def analyze(obj: Any, target: str | None = None, **kw: Any) -> Any:
    """`qflow.analyze`, for the backend's target once the parameter exists."""
    import qflow

    return _with_target(qflow.analyze, target)(obj, **kw)


@functools.cache
def qflow_revision() -> str:
    """The last commit that changed qflow/ (+ "-dirty" when its files differ from it), when this process first
    asks: the code it imported then is the code it runs (a commit made while `run.py --reanalyze` runs is not)."""
    import subprocess
    from pathlib import Path

    import qflow

    where = Path(qflow.__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "log", "-1", "--format=%h", "--", "."], cwd=where, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=where, capture_output=True, text=True)
        return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


def _timed(rec: dict[str, Any], key: str, fn: Callable[[], Any]) -> Any:
    t = time.perf_counter()
    try:
        return fn()
    finally:
        rec.setdefault("time", {})[key] = round(time.perf_counter() - t, 3)


def _err(e: BaseException) -> str:
    """One line: the exception and, for wrapped ones (ExecuTorch's pass manager), the root cause."""

    def line(x: BaseException) -> str:
        text = str(x).strip()
        return f"{type(x).__name__}: {text.splitlines()[0][:200] if text else ''}"

    root = e
    while (root.__cause__ or root.__context__) is not None and root is not (root.__cause__ or root.__context__):
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    return line(e) if root is e else f"{line(root)} (in {line(e)[:120]})"


def _qflow(rec: dict[str, Any], key: str, fn: Callable[[], Any]) -> Any:
    try:
        report = _timed(rec, "qflow_" + key, fn)
        rec["qflow"][key] = _summ(report)
        return report
    except Exception as e:  # noqa: BLE001 - a qflow crash is an outcome
        rec["qflow"][key] = {"verdict": "crash", "error": _err(e), "trace": traceback.format_exc()[-1500:]}
        return None


def _cortex_m_pte(rec: dict[str, Any], program: Any) -> bytes | None:
    """The .pte of the program the Cortex-M passes returned (None, recorded, when it cannot be emitted)."""
    from qflow.targets.cortex_m import pipeline as cortex_m

    try:
        return _timed(rec, "pte", lambda: cortex_m.to_pte(program))
    except Exception as e:  # noqa: BLE001 - an emitter failure is the backend's, not qflow's
        rec["pte_error"] = _err(e)
        return None


def _worst(verdicts: list[str]) -> str:
    order = ["crash", "error", "warning", "unproven", "proved"]
    return min(verdicts, key=order.index) if verdicts else "none"


def run_case(cid: str, spec: dict[str, Any] | None = None, repair: bool = True) -> dict[str, Any]:
    """Everything about one case, as one JSON-able dict."""
    index, full = parse_id(cid)
    variant = base_variant(full)
    spec = spec if spec is not None else generate(index, menu_of(full))
    rec: dict[str, Any] = {"id": cid, "variant": full, "target": target_of(variant), "n_ops": len(spec["ops"])}
    rec["ops"] = sorted({op["kind"] for op in spec["ops"]})
    rec["qflow"] = {}
    rec["qflow_rev"] = qflow_revision()
    _CURRENT.clear()
    _CURRENT.update(rec)
    rec = _CURRENT  # the same dict: each stage's checkpoint holds everything recorded so far
    t0 = time.perf_counter()
    sink: dict[str, Any] = {}
    # quantize (a failure here is not the backend's: the case is invalid)
    try:
        stage("quantize")
        converted, samples, tests = _timed(rec, "quantize", lambda: quantized(variant, spec, index, sink))
        exported = torch.export.export(converted, samples[0], strict=True)
    except Exception as e:  # noqa: BLE001
        rec.update(outcome="quantize-failed", error=_err(e), overrides=sink.get("overrides"))
        rec["time"]["total"] = round(time.perf_counter() - t0, 3)
        return dict(rec)
    rec["overrides"] = sink.get("overrides")
    stage("inputs")
    try:
        extra = _timed(rec, "inputs", lambda: domain_inputs(converted, tests, seed=index))
    except Exception as e:  # noqa: BLE001 - the samples still judge the case
        extra, rec["inputs_error"] = [], _err(e)
    rec["inputs"] = {"samples": len(tests), "domain": len(extra)}
    tests = tests + extra
    with torch.no_grad():
        want = [_as_list(converted(*x)) for x in tests]
    grids = output_grids(converted, tests)
    rec["grids"] = grids
    target = target_of(variant)
    # qflow before partitioning: annotated graph, then the converted Q/DQ program
    if "annotated" in sink:
        stage("qflow_annotated")
        _qflow(rec, "annotated", lambda: analyze(sink["annotated"], target))
    stage("qflow_pre")
    pre = _qflow(rec, "pre", lambda: analyze(copy.deepcopy(exported), target))
    rec["output_of"] = direct_outputs(exported.graph_module)
    rec["verdict"] = rec["qflow"]["pre"]["verdict"]
    # lower and run
    lowered = _lower_and_run(rec, "", variant, exported, tests, want, grids)
    if lowered is not None:
        edge, partitions = lowered
        _analyze_folded(rec, target, partitions)
        _analyze_lowered(rec, target, exported, edge)
    # repair
    if repair and pre is not None and not pre.proved:
        stage("repair")
        _repair(rec, variant, exported, tests, want, grids)
    rec.pop("_got", None)
    rec["time"]["total"] = round(time.perf_counter() - t0, 3)
    stage("done")
    return dict(rec)


def _analyze_folded(rec: dict[str, Any], target: str, partitions: list[Any]) -> None:
    """qflow on each Arm partition as the fold pass left it, into `rec` (`folded`: the worst verdict)."""
    if not partitions:
        return
    stage("qflow_folded")
    for i, p in enumerate(partitions):
        _qflow(rec, f"folded{i}", lambda p=p: analyze(p, target))
    verdicts = [rec["qflow"][f"folded{i}"]["verdict"] for i in range(len(partitions))]
    rec["qflow"]["folded"] = {"verdict": _worst(verdicts), "partitions": len(partitions)}
    for i in range(len(partitions)):
        rec["qflow"]["folded"][f"p{i}"] = rec["qflow"].pop(f"folded{i}")
    rec["time"]["qflow_folded"] = round(sum(rec["time"].pop(f"qflow_folded{i}") for i in range(len(partitions))), 3)


def _analyze_lowered(rec: dict[str, Any], target: str, exported: Any, edge: Any) -> None:
    """qflow on the lowered program (and a Cortex-M program's .pte as shipped) into `rec`."""
    stage("qflow_lowered")
    # (the TOSA payload keeps some weights as bare codes: their scales are the PT2E program's)
    ref = {"target": target, "reference": exported} if target == "arm-tosa" else {}
    shipped = None
    if isinstance(edge, CortexMProgram):
        ref, edge = {"target": target, "reference": edge.given}, edge.program
        shipped = _cortex_m_pte(rec, edge)
    _qflow(rec, "lowered", lambda: analyze(edge, **ref))
    if shipped is not None:  # the .pte as shipped, against the PT2E program it came from
        stage("qflow_pte")
        _qflow(rec, "pte", lambda: analyze(shipped, reference=exported))


def reanalyze(rec: dict[str, Any], lowered: bool = False) -> dict[str, Any]:
    """`rec` with its `annotated` and `pre` verdicts re-made by this qflow (the backend's outcome kept):
    the same seeds quantize the same program, so a qflow fix is re-scored without lowering again.
    `qflow_rev_pre` says which qflow made them. `lowered`: the lowered program's (and a .pte's) too, lowered
    again but not run (`qflow_rev_lowered`), and its Arm partitions as the fold pass left them (`folded`)."""
    index, full = parse_id(rec["id"])
    variant, spec = base_variant(full), generate(index, menu_of(full))
    sink: dict[str, Any] = {}
    converted, samples, _ = quantized(variant, spec, index, sink)
    exported = torch.export.export(converted, samples[0], strict=True)
    out = copy.deepcopy(rec)
    out.setdefault("time", {})
    if "annotated" in sink:
        _qflow(out, "annotated", lambda: analyze(sink["annotated"], target_of(variant)))
    _qflow(out, "pre", lambda: analyze(exported, target_of(variant)))
    out["verdict"] = out["qflow"]["pre"]["verdict"]
    out["qflow_rev_pre"] = qflow_revision()
    if lowered and "lowered" in out["qflow"]:
        edge, partitions = lower(variant, copy.deepcopy(exported), samples[0])
        _analyze_folded(out, target_of(variant), partitions)
        _analyze_lowered(out, target_of(variant), exported, edge)
        out["qflow_rev_lowered"] = qflow_revision()
    return out


def _layout(
    variant: str, model: torch.nn.Module, samples: list[Inputs], tests: list[Inputs]
) -> tuple[torch.nn.Module, list[Inputs], list[Inputs]]:
    """Cortex-M quantizes only channels-last (NHWC) convolutions, CMSIS-NN's layout: its model and
    4-d inputs are made channels-last (the same values), as the backend's own tests do."""
    if not variant.startswith("cm"):
        return model, samples, tests
    from qflow.targets.cortex_m.pipeline import channels_last

    for t in [*model.parameters(), *model.buffers()]:  # (SpecModel has an `_apply` of its own: no .to())
        if t.dim() == 4:
            t.data = t.data.contiguous(memory_format=torch.channels_last)
    return model, [channels_last(x) for x in samples], [channels_last(x) for x in tests]


def _as_list(out: Any) -> list[torch.Tensor]:
    return [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)]


def _lower_and_run(
    rec: dict[str, Any],
    prefix: str,
    variant: str,
    ep: Any,
    tests: list[Inputs],
    want: list[list[torch.Tensor]],
    grids: list[dict[str, float | None]],
) -> tuple[Any, list[Any]] | None:
    """Lower `ep` and compare its outputs with `want`; sets `<prefix>outcome`."""
    where = "repair_" if rec is not _CURRENT else ""
    stage(where + "lower")
    try:
        edge, partitions = _timed(rec, prefix + "lower", lambda: lower(variant, copy.deepcopy(ep), tests[0]))
    except Exception as e:  # noqa: BLE001 - a lowering failure is an outcome
        rec[prefix + "outcome"] = "lowering-failed"
        rec[prefix + "error"] = _err(e)
        return None
    rec[prefix + "delegates"] = n_delegates(edge)
    if rec[prefix + "delegates"] == 0 and not isinstance(edge, CortexMProgram):  # (Cortex-M: views run on codes)
        rec[prefix + "outcome"] = "not-delegated"
        return edge, partitions
    stage(where + "run")
    try:
        got = _timed(rec, prefix + "run", lambda: [run_backend(variant, edge, x) for x in tests])
    except Exception as e:  # noqa: BLE001 - the backend refused to run it
        rec[prefix + "outcome"] = "run-failed"
        rec[prefix + "error"] = _err(e)
        return edge, partitions
    rec["_got"] = got
    cmp = compare(got, want, grids)
    rec[prefix + "outcome"] = cmp.pop("truth")
    n = rec.get("inputs", {}).get("samples", len(tests))
    if not prefix and n < len(tests):  # the samples' inputs alone: how many cases the domain inputs decide
        rec["err_samples"] = compare(got[:n], want[:n], grids)
    rec[prefix + "err"] = cmp
    return edge, partitions


def _repair(
    rec: dict[str, Any],
    variant: str,
    exported: Any,
    tests: list[Inputs],
    want: list[list[torch.Tensor]],
    grids: list[dict[str, float | None]],
) -> None:
    import qflow

    rep: dict[str, Any] = {}
    rec["repair"] = rep
    try:
        fixed = _timed(rec, "repair", lambda: _with_target(qflow.repair, target_of(variant))(copy.deepcopy(exported)))
    except qflow.ProofError as e:
        rep["status"] = "unrepairable"
        rep["error"] = _err(e)
        return
    except Exception as e:  # noqa: BLE001
        rep["status"] = "crash"
        rep["error"] = _err(e)
        rep["trace"] = traceback.format_exc()[-1500:]
        return
    rep["status"] = "repaired"
    # repair's own rounding: one step per requant it inserts (counted, its grids never read)
    count = lambda gm: sum(_is(n, "quantize_per_t") and not _is(n, "dequantize") for n in gm.graph.nodes)  # noqa: E731
    rep["inserted"] = max(0, count(fixed.graph_module) - count(exported.graph_module))
    sub: dict[str, Any] = {}
    with torch.no_grad():
        fixed_want = [_as_list(fixed.module()(*x)) for x in tests]
    _lower_and_run(sub, "", variant, fixed, tests, fixed_want, output_grids(fixed.module(), tests))
    rep["outcome"] = sub.get("outcome")
    rep["error"] = sub.get("error")
    rep["err_vs_repaired_fq"] = sub.get("err")
    rep["time"] = sub.get("time")
    if sub.get("outcome") in ("exact", "marginal", "miscompile"):
        # distance from the original fake-quantized model (the repair may move grids)
        cmp = compare(sub["_got"], want, grids)
        rep["err_vs_original_fq"] = cmp
