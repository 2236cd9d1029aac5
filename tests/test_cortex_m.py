"""Cortex-M (issue #29): the stock CortexMQuantizer → to_edge → CortexMPassManager (M55) on a
small CNN (conv → relu, conv + residual add, avg pool, mul, mean, linear), read with
`target="cortex-m"`, and every folded integer argument of its kernels mutated and run on the
Cortex-M dialect's reference kernels — the measurement the kernel reader answers to."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from executorch.backends.cortex_m.edge_compile_config import cortex_m_edge_compile_config
from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer
from executorch.backends.cortex_m.target_config import CortexM, CortexMTargetConfig
from executorch.exir import to_edge
from torch import nn
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

import qflow
from qflow.cli import main
from qflow.integrations.executorch import QflowPass
from qflow.ir.fx_nodes import target_name
from qflow.ops import base_name
from qflow.targets.cortex_m import pipeline as cortex_m


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.pool, self.fc = nn.AvgPool2d(2), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.c1(x))
        y = self.pool(y + self.c2(y))
        return self.fc((y * y).mean((2, 3)))


def _inputs() -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(1, 3, 8, 8, generator=g).mul(s).to(memory_format=torch.channels_last),)
        for s in (1.0, 1.0, 3.0, 10.0)  # (and clipping ones)
    ]


class DepthwisePool(nn.Module):
    """The depthwise conv (depth multiplier 2) and max pool kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.dw, self.pool = nn.Conv2d(3, 6, 3, padding=1, groups=3), nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.dw(x))).mean((2, 3))


def _lower(make: Callable[[], nn.Module], cpu: CortexM = CortexM.M55):
    """(the converted PT2E program, the program after CortexMPassManager for `cpu`) of the model `make`
    builds, its weights drawn from seed 0 whatever ran before in this process."""
    torch.manual_seed(0)
    # (channels last: CortexMQuantizer quantizes only NHWC convolutions, CMSIS-NN's layout)
    model = make().eval().to(memory_format=torch.channels_last)
    calibration = (torch.randn(1, 3, 8, 8).to(memory_format=torch.channels_last),)
    prepared = prepare_pt2e(torch.export.export(model, calibration).module(check_guards=False), CortexMQuantizer())
    prepared(*calibration)
    exported = torch.export.export(convert_pt2e(prepared), calibration)
    edge = to_edge(exported, compile_config=cortex_m_edge_compile_config())
    passes = CortexMPassManager(edge.exported_program(), target_config=CortexMTargetConfig(cpu=cpu))
    return exported, passes.transform()


@pytest.fixture(scope="module")
def pipeline():
    return _lower(CNN)


@pytest.fixture(scope="module")
def depthwise_pool():
    return _lower(DepthwisePool)


@pytest.fixture(scope="module")
def program(pipeline):
    return pipeline[1]


def _values(ep, node: str) -> list[torch.Tensor]:
    """`node`'s output on each input, run through the reference kernels."""
    seen: list[torch.Tensor] = []

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node):
            out = super().run_node(n)
            if n.name == node:
                seen.append(out)
            return out

    for x in _inputs():
        Recorder(ep.module()).run(*x)
    return seen


def _kernels(ep) -> list[torch.fx.Node]:
    return [n for n in ep.graph.nodes if n.op == "call_function" and n.meta.get("output_qparams") is not None]


def test_every_kernel_is_read_and_only_the_bias_waits_for_the_reference(program) -> None:
    report = qflow.analyze(program, target="cortex-m")
    assert not [f for f in report.findings if f.kind == "unknown-op"], str(report)
    assert report.status == "unproven", str(report)  # not proved: the bias lives in kernel_sum
    [finding] = report.findings
    assert finding.kind == "reference-needed" and "kernel_sum" in finding.message


def test_with_the_program_it_came_from_it_proves(pipeline) -> None:
    reference, program = pipeline
    report = qflow.analyze(program, target="cortex-m", reference=reference)
    assert report.status == "proved", str(report)


def _with_constant(ep, placeholder: str, value: torch.Tensor):
    ep = copy.deepcopy(ep)
    key = next(s.target for s in ep.graph_signature.input_specs if s.arg.name == placeholder)
    (ep.constants if key in ep.constants else ep.state_dict)[key].copy_(value)
    return ep


@torch.no_grad()
def test_a_kernel_sum_that_lost_its_offset_term_is_an_error(pipeline) -> None:
    """ExecuTorch PR #19676's bug class: a linear whose kernel_sum lost input_offset × Σw."""
    reference, program = pipeline
    [linear] = [n for n in program.graph.nodes if "quantized_linear" in str(n.target)]
    kernel_sum, weights = linear.args[3], linear.args[1]
    state = {**program.state_dict, **program.constants}
    sig = {s.arg.name: s.target for s in program.graph_signature.input_specs}
    offset = int(linear.args[4]) * state[sig[weights.name]].to(torch.int32).sum(dim=1)
    broken = _with_constant(program, kernel_sum.name, state[sig[kernel_sum.name]] - offset)
    moved = max(float((broken.module()(*x) - program.module()(*x)).abs().max()) for x in _inputs())
    assert moved > 0.05  # measured: 0.44 on the first input
    report = qflow.analyze(broken, target="cortex-m", reference=reference)
    assert [(f.kind, f.node) for f in report.errors] == [("kernel-argument-mismatch", linear.name)], str(report)
    assert "kernel_sum" in report.errors[0].message


@torch.no_grad()
@pytest.mark.parametrize("what", ["multiplier", "shift"])
def test_a_conv_channel_requantized_by_the_wrong_ratio_is_an_error(pipeline, what: str) -> None:
    """The conv's per-channel requantize multipliers and shifts are constants (not arguments the
    mutation harness edits): one channel's ×1.05 multiplier, or shift + 1, moves the output and is
    an error at that conv."""
    _, program = pipeline
    conv = next(n for n in program.graph.nodes if "quantized_conv2d" in str(n.target))
    arg = conv.args[8 if what == "multiplier" else 9]
    state = {**program.state_dict, **program.constants}
    sig = {s.arg.name: s.target for s in program.graph_signature.input_specs}
    value = state[sig[arg.name]].clone()
    value[3] = int(value[3] * 1.05) if what == "multiplier" else value[3] + 1
    broken = _with_constant(program, arg.name, value)
    moved = max(float((broken.module()(*x) - program.module()(*x)).abs().max()) for x in _inputs())
    assert moved > 0
    report = qflow.analyze(broken, target="cortex-m")
    assert [(f.kind, f.node) for f in report.errors] == [("kernel-argument-mismatch", conv.name)], str(report)
    assert "requantize_multipliers/shifts[3]" in report.errors[0].message


#: The folded integers (by the kernel schema's argument names), and a relu's code bounds.
FOLDED = ("zero_point", "multiplier", "shift", "offset", "activation", "pad_value")


def _mutants(ep):
    """(node, argument, mutated value) for every folded integer of every kernel."""
    for n in _kernels(ep):
        if "quantize_per_tensor" in str(n.target):
            continue  # (the Q/DQ pairs are the ordinary domain obligations)
        names = [a.name for a in n.target._schema.arguments]
        for i, a in enumerate(n.args):
            if not (any(f in names[i] for f in FOLDED) or (names[i] in ("min", "max") and a is not None)):
                continue
            if type(a) is int:
                yield n.name, i, a + 3 if abs(a) < 1000 else int(a * 1.05)
            elif isinstance(a, list) and a and all(type(e) is int for e in a):
                yield n.name, i, [e + 3 if abs(e) < 1000 else int(e * 1.05) for e in a]


def _mutation_outcomes(program) -> tuple[list[str], list[str], list[str], list[str]]:
    """(moved, errors, missed, false alarms): each folded-integer mutant run on the reference kernels
    against the unmutated program at the mutated kernel's own output, and analysed without a reference."""
    moved, errors, missed, false_alarms = [], [], [], []
    for name, i, new in _mutants(program):
        ep = copy.deepcopy(program)
        node = next(n for n in ep.graph.nodes if n.name == name)
        args = list(node.args)
        args[i] = new
        node.args = tuple(args)
        ep.graph_module.recompile()
        try:
            delta = max(
                int((a.int() - b.int()).abs().max())
                for a, b in zip(_values(ep, name), _values(program, name), strict=True)
            )
        except Exception:  # (a kernel that refuses its arguments is loud, not silent)
            delta = 256
        at = [f for f in qflow.analyze(ep, target="cortex-m").findings if f.node == name and f.severity != "info"]
        label = f"{name} {node.target._schema.arguments[i].name} -> {new}: {delta} codes"
        moved += [label] if delta > 1 else []
        errors += [label] if any(f.severity == "error" for f in at) else []
        missed += [label] if delta > 1 and not at else []
        false_alarms += [label] if delta <= 1 and any(f.severity == "error" for f in at) else []
    return moved, errors, missed, false_alarms


def test_every_kernel_argument_that_moves_codes_is_flagged_at_its_kernel(program) -> None:
    """The measurement: mutate each folded integer, run the reference kernels on inputs that also
    reach the ends of the code ranges, and compare the kernel's own output codes with the
    unmutated program's. A mutant that moves a code by more than one (beyond rounding) must be
    flagged at that kernel (an error, or unproven with the reason); none that moves none may be
    an error there."""
    moved, errors, missed, false_alarms = _mutation_outcomes(program)
    assert not missed, missed
    assert not false_alarms, false_alarms
    # measured 2026-11-25 (NHWC, so both convs are quantized_conv2d kernels): 30 mutants move
    # their kernel's codes by more than one and 25 of those are errors; four others are
    # activation_min bounds that cut into the code range (the add's, both convs' and the
    # linear's), which only the program before the passes can tell from a fused activation:
    # unproven, reference-needed; the fifth, the add's other_shift + 3, multiplies its second
    # input by 8, exactly what an add with alpha=8 folds to: unproven without the program it
    # came from (with it, an error: test_a_broken_folded_activation_or_alpha_is_an_error). The
    # six avg_pool2d mutants move codes by at most one (rounding) and are not errors.
    assert (len(moved), len(errors)) == (30, 25), (sorted(set(moved) - set(errors)), len(moved), len(errors))


def test_observe_mode_proves_what_the_pass_manager_returns(pipeline) -> None:
    """The Cortex-M flow has no partitioner: observe mode reads what `CortexMPassManager.transform()`
    returns, with the program it was given as the reference (the kernel_sum's bias is checked
    against it), whoever calls the pass manager — here the wheel's own tester harness stage."""
    from executorch.backends.cortex_m.test.tester import CortexMRunPasses

    from qflow.integrations.observe import Observer

    reference, _ = pipeline
    edge = to_edge(reference, compile_config=cortex_m_edge_compile_config())
    with Observer().observe("cortex-m") as record:
        CortexMRunPasses().run(edge)
    [program] = record.programs
    assert program.kind == "partition" and program.error is None, program.error
    assert program.report.status == "proved", str(program.report)
    assert program.report.obligations["proved"] > 0
    # unhooked afterwards: the pass manager is ExecuTorch's own again
    assert CortexMPassManager.transform.__module__.startswith("executorch.")


class Activations(nn.Module):
    """What the passes fold away: a hardsigmoid fused into the linear's requantize
    (ActivationFusionPass), a hardswish decomposed into mul(x, minimum(x, 3)) with the +3 and /6
    in the mul's domains (DecomposeHardswishPass), a sub and an add's alpha folded into the
    second input's multiplier."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.hardsigmoid(self.a(x))
        z = nn.functional.hardswish(self.b(x))
        return torch.add(y - z, x, alpha=2)


@pytest.fixture(scope="module")
def activations():
    """(the edge program the passes were given, the program they returned, the observed report)."""
    from qflow.integrations.observe import Observer

    torch.manual_seed(0)
    calibration = (torch.randn(4, 8) * 2,)
    prepared = prepare_pt2e(
        torch.export.export(Activations().eval(), calibration).module(check_guards=False), CortexMQuantizer()
    )
    prepared(*calibration)
    edge = to_edge(torch.export.export(convert_pt2e(prepared), calibration),
                   compile_config=cortex_m_edge_compile_config())  # fmt: skip
    given = copy.deepcopy(edge.exported_program())
    with Observer().observe("activations") as record:
        program = CortexMPassManager(
            edge.exported_program(), target_config=CortexMTargetConfig(cpu=CortexM.M55)
        ).transform()
    return given, program, record.programs[0].report


def test_folded_activations_and_alphas_prove_against_the_program_they_came_from(activations) -> None:
    given, program, observed = activations
    ops = {target_name(n).split(".")[1] for n in program.graph.nodes if target_name(n).startswith("cortex_m.")}
    assert {"quantized_linear", "minimum", "quantized_mul", "quantized_add"} <= ops, ops
    assert "hardsigmoid" not in str(program.graph)  # (fused away)
    assert observed.status == "proved", str(observed)
    alone = qflow.analyze(program, target="cortex-m")
    assert alone.status == "unproven" and not alone.errors, str(alone)
    reasons = " ".join(f.message for f in alone.findings)
    assert "hardsigmoid" in reasons and "hardswish" in reasons and "alpha or a sub" in reasons, reasons


@pytest.mark.parametrize("what", ["hardsigmoid", "hardswish clamp", "add alpha"])
def test_a_broken_folded_activation_or_alpha_is_an_error(activations, what: str) -> None:
    """Each folded fact mutated the way a broken pass would: the linear's fused hardsigmoid zero
    point, the hardswish clamp's constant code, the second shift of the add with alpha=2."""
    given, program, _ = activations
    ep = copy.deepcopy(program)
    nodes = {n.name: n for n in ep.graph.nodes}
    if what == "hardsigmoid":
        node = next(n for n in nodes.values() if "quantized_linear" in target_name(n))  # (the first: hardsigmoid)
        args = list(node.args)
        args[6] += 3  # output_offset
    elif what == "hardswish clamp":
        [node] = [n for n in nodes.values() if target_name(n).startswith("cortex_m.minimum")]
        key = next(s.target for s in ep.graph_signature.input_specs if s.arg.name == node.args[1].name)
        table = ep.constants if key in ep.constants else ep.state_dict
        table[key] = table[key] - 5
        args = list(node.args)
    else:
        node = [n for n in nodes.values() if "quantized_add" in target_name(n)][-1]  # (+ 2x: the alpha)
        args = list(node.args)
        args[7] += 1  # other_shift: 4x, an integer multiple like the alpha itself
    node.args = tuple(args)
    ep.graph_module.recompile()
    report = qflow.analyze(ep, target="cortex-m", reference=given)
    assert [f.node for f in report.errors] == [node.name], str(report)


@pytest.mark.parametrize("model", ["cnn", "depthwise_pool"])
def test_each_kernels_gain_bounds_how_far_a_wrong_input_code_moves_its_output(pipeline, depthwise_pool, model) -> None:
    """`impact` follows a wrong code through a kernel by its gain (`Value.gain`): for conv, depthwise conv,
    add, mul, avg / max pool and linear, every input code moved by up to 3 (run on the reference kernels)
    moves the output by at most the gain times the inputs' errors summed, plus the output's rounding step."""
    reference, program = pipeline if model == "cnn" else depthwise_pool
    dg = qflow.api.domain_graph(program, target="cortex-m", reference=reference)
    gm, x = program.module(), _inputs()[2]
    seen: dict[str, torch.Tensor] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node):
            seen[n.name] = out = super().run_node(n)
            return out

    Recorder(gm).run(*x)
    g = torch.Generator().manual_seed(0)
    checked = []
    for n in gm.graph.nodes:
        if n.name not in dg.g or dg.value(n.name).gain is None or not target_name(n).startswith("cortex_m."):
            continue
        v, qin, qout = dg.value(n.name), n.meta["input_qparams"], n.meta["output_qparams"][0]
        data = [i for i, a in enumerate(n.args) if isinstance(a, torch.fx.Node) and a.name in seen and i in (0, 2, 4)]
        data = [i for i in data if seen[n.args[i].name].dtype == torch.int8 and not n.args[i].name.startswith("b_")]
        for _ in range(8):
            args, moved = list(n.args), 0.0
            for k, i in enumerate(data):
                codes = seen[n.args[i].name]
                step = torch.randint(-3, 4, codes.shape, generator=g)
                args[i] = (codes.int() + step).clamp(-128, 127).to(torch.int8)
                moved += float((args[i].int() - codes.int()).abs().max()) * qin[k].scale  # (impact: their sum)
            args = [seen[a.name] if isinstance(a, torch.fx.Node) and not isinstance(b, torch.Tensor) else b
                    for a, b in zip(n.args, args, strict=True)]  # fmt: skip
            out = n.target(*args, **n.kwargs)
            got = float((out.int() - seen[n.name].int()).abs().max()) * qout.scale
            assert got <= v.gain * moved + qout.scale * (1 + 1e-6), (n.name, got, v.gain, moved)
        checked.append(base_name(target_name(n)))
    assert set(checked) >= ({"quantized_conv2d", "quantized_add", "quantized_mul", "quantized_avg_pool2d",
                             "quantized_linear"} if model == "cnn" else {"quantized_depthwise_conv2d",
                                                                         "quantized_max_pool2d"}), checked  # fmt: skip


def test_depthwise_conv_and_max_pool_kernels_are_read_and_their_mutants_flagged(depthwise_pool) -> None:
    """The same measurement as above on `quantized_depthwise_conv2d` and `quantized_max_pool2d`."""
    reference, program = depthwise_pool
    kinds = {target_name(n) for n in _kernels(program)}
    assert {"cortex_m.quantized_depthwise_conv2d.default", "cortex_m.quantized_max_pool2d.default"} <= kinds, kinds
    assert qflow.analyze(program, target="cortex-m", reference=reference).status == "proved"
    moved, errors, missed, false_alarms = _mutation_outcomes(program)
    assert not missed, missed
    assert not false_alarms, false_alarms
    # measured 2026-11-25: 8 mutants move codes by more than one, 6 are errors; the other two are
    # the activation_min bounds that cut into the code range (unproven, reference-needed)
    assert (len(moved), len(errors)) == (8, 6), (sorted(set(moved) - set(errors)), len(moved), len(errors))


class BiasFreeDepthwise(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dw = nn.Conv2d(3, 6, 3, padding=1, groups=3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dw(x)


@torch.no_grad()
def test_a_bias_synthesized_for_a_bias_free_conv_proves_only_while_it_is_zero() -> None:
    """The passes give a bias-free depthwise conv an int32 zero bias with no declared domain: zeros are
    zero in any domain (proved); the same bias made nonzero moves codes and is not proved."""
    reference, program = _lower(BiasFreeDepthwise)
    [conv] = [n for n in program.graph.nodes if "quantized_depthwise_conv2d" in target_name(n)]
    bias = conv.args[2]
    assert 2 not in conv.meta["input_qparams"] and "zero_bias" in bias.name
    assert qflow.analyze(program, target="cortex-m", reference=reference).proved
    broken = _with_constant(program, bias.name, torch.full((6,), 200, dtype=torch.int32))
    assert max(float((broken.module()(*x) - program.module()(*x)).abs().max()) for x in _inputs()) > 0
    assert not qflow.analyze(broken, target="cortex-m", reference=reference).proved


class Luts(nn.Module):
    """Two LUT activations (`cortex_m.quantized_activation`) feeding a quantized mul."""

    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c(x)
        return torch.sigmoid(y) * torch.tanh(y)


@pytest.fixture(scope="module")
def luts():
    return _lower(Luts)


@torch.no_grad()
@pytest.mark.parametrize("how", ["one entry", "output zero point"])
def test_a_lut_that_is_not_its_activation_in_the_declared_domains_is_an_error(luts, how: str) -> None:
    """Each LUT is read entry by entry against its activation (the node's `original_aten`) between the
    declared domains: the stock program proves; one entry + 1, or the whole table built for an output
    zero point 3 off, moves codes on the reference kernels and is an error at that kernel."""
    reference, program = luts
    assert qflow.analyze(program, target="cortex-m", reference=reference).status == "proved"
    lut_nodes = [n for n in program.graph.nodes if "quantized_activation" in str(n.target)]
    assert len(lut_nodes) == 2
    node = lut_nodes[0]
    state = {**program.state_dict, **program.constants}
    sig = {s.arg.name: s.target for s in program.graph_signature.input_specs}
    lut = state[sig[node.args[1].name]].clone()
    if how == "one entry":
        codes = torch.cat([v.flatten() for v in _values(program, node.args[0].name)]).to(torch.int64)
        q = int(codes.mode().values) + 128  # (an entry the inputs reach)
        lut[q] = lut[q] + 1 if lut[q] < 127 else lut[q] - 1
    else:
        lut = (lut.to(torch.int32) + 3).clamp(-128, 127).to(torch.int8)
    broken = _with_constant(program, node.args[1].name, lut)
    moved = max(float((broken.module()(*x) - program.module()(*x)).abs().max()) for x in _inputs())
    assert moved > 0
    report = qflow.analyze(broken, target="cortex-m", reference=reference)
    assert [(f.kind, f.node) for f in report.errors] == [("kernel-argument-mismatch", node.name)], str(report)
    assert "LUT" in report.errors[0].message


class Softmax(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 8)
        nn.init.uniform_(self.fc.weight, -4, 4)  # (logits wide enough that a scale off by 5 % shows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc(x.mean((2, 3))), dim=-1)


def test_the_softmax_kernel_is_read_and_its_mutants_flagged() -> None:
    """arm_softmax_s8's Q5.26 input scale (multiplier / shift) against the declared domain, its fixed output
    domain (1/256, -128): every folded integer that moves codes is an error (its input zero point cancels)."""
    reference, program = _lower(Softmax)
    assert any("cortex_m.softmax" in target_name(n) for n in program.graph.nodes)
    assert qflow.analyze(program, target="cortex-m", reference=reference).proved
    moved, errors, missed, false_alarms = _mutation_outcomes(program)
    assert not missed and not false_alarms, (missed, false_alarms)
    assert any("softmax" in m for m in moved) and all(m in errors for m in moved if "softmax" in m), (moved, errors)


class SharedLinear(nn.Module):
    """A hardtanh after a linear that has another user: ActivationFusionPass does not fuse it, and
    QuantizedClampActivationPass skips it (its input is not int8 yet when it runs)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.fc(x)
        return nn.functional.hardtanh(y, 0.0, 0.5), torch.sigmoid(y)


@torch.no_grad()
def test_an_unfused_activation_after_a_kernel_clamps_codes_to_its_real_bounds() -> None:
    """Stock CortexMQuantizer, ExecuTorch 1.5.1: the hardtanh runs on the linear's codes with its bounds
    0 and 0.5 as written — every output wrong on the reference kernels; qflow says so before the passes
    and after them, at the hardtanh (the sigmoid's LUT output is right, and proved)."""
    torch.manual_seed(0)
    samples = [(torch.randn(4, 8),) for _ in range(3)]
    converted = cortex_m.quantize(SharedLinear().eval(), samples)
    given, program = cortex_m.lower(converted, samples[0])
    [out] = [n for n in converted.graph.nodes if n.op == "output"]
    step = out.args[0][0].args[1]  # (the hardtanh output's dequantize: its scale)
    worst = 0.0
    for x in samples:
        (want_ht, want_sig), (got_ht, got_sig) = converted(*x), cortex_m.run(program, x)
        assert float((got_ht - want_ht).abs().max()) > 0.5  # measured: 1.0, the whole output range twice
        assert torch.equal(got_sig, want_sig)
        worst = max(worst, float((got_ht - want_ht).abs().max()) / step)
    for form in (torch.export.export(converted, samples[0]), program):
        report = qflow.analyze(form, target="cortex-m", reference=given if form is program else None)
        [error] = report.errors
        assert error.kind == "real-constant-on-codes" and "hardtanh" in error.node, str(report)
        assert "[0, 0.5] as written" in error.message
        # (its wrong codes followed to the output: the bound holds the measured error)
        assert error.output_lsb is not None and worst <= error.output_lsb + 0.5, (worst, error.output_lsb)
    # before calibration the passes' choice is not known: unproven at each activation, never proved
    annotated = CortexMQuantizer().annotate(torch.export.export(SharedLinear().eval(), samples[0]).module())
    report = qflow.analyze(annotated, target="cortex-m")
    assert report.form == "annotated" and not report.proved, str(report)
    assert {f.node for f in report.findings if f.kind == "real-constant-on-codes"} == {"hardtanh"}, str(report)


class HardtanhLinear(nn.Module):
    """A hardtanh on the input's codes: ActivationFusionPass has no producer to fuse it into, and the passes
    make it a clamp of codes to its bounds' codes, [-25, 39] — no relu's, so only the program it came from says
    which activation it is."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(nn.functional.hardtanh(x, 0.2, 3.0))


class ClampTensor(nn.Module):
    """The Cortex-M suite's standalone `clamp.Tensor` (ops/test_activation.py): its bounds are quantized
    `full_like` constants; the clamp the passes make keeps codes [-39, -1]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.clamp.Tensor(x, torch.full_like(x, -1.0), torch.full_like(x, 1.0))


@torch.no_grad()
@pytest.mark.parametrize(
    ("model", "shape", "codes", "moved"),
    [(HardtanhLinear, (4, 8), (-25, 39), (-24, 39)), (ClampTensor, (2, 3, 4, 5), (-39, -1), (-38, -1))],
)
def test_a_clamp_on_codes_is_checked_against_the_activation_it_was_made_of(model, shape, codes, moved) -> None:
    torch.manual_seed(0)
    samples = [(torch.randn(*shape) * 2,) for _ in range(3)]
    converted = cortex_m.quantize(model().eval(), samples)
    given, program = cortex_m.lower(converted, samples[0])
    [clamp] = [n for n in program.graph.nodes if target_name(n).startswith("aten.clamp")]
    assert clamp.args[1:] == codes
    run = [(cortex_m.run(program, x)[0], converted(*cortex_m.channels_last(x))) for x in samples]
    assert all(torch.equal(got, want) for got, want in run)  # (measured: exact)
    alone = qflow.analyze(program, target="cortex-m")
    assert ("reference-needed", clamp.name) in [(f.kind, f.node) for f in alone.findings], str(alone)
    assert qflow.analyze(program, target="cortex-m", reference=given).proved
    broken = copy.deepcopy(program)
    [node] = [n for n in broken.graph.nodes if n.name == clamp.name]
    node.args = (node.args[0], *moved)  # (a bound one code off)
    broken.graph_module.recompile()
    assert any(not torch.equal(cortex_m.run(broken, x)[0], converted(*cortex_m.channels_last(x))) for x in samples)
    report = qflow.analyze(broken, target="cortex-m", reference=given)
    assert [(f.kind, f.node) for f in report.errors] == [("kernel-argument-mismatch", clamp.name)], str(report)
    assert f"are codes {list(codes)}" in report.errors[0].message


class PooledLinearRelu(nn.Module):
    """A relu after an avg_pool2d of a linear (campaign case 00628-cm): the pool keeps the linear's
    int32 codes when the activation passes run, so the relu stays on them with its real bound."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(nn.functional.avg_pool2d(self.fc(x), 2))


@torch.no_grad()
def test_whether_the_passes_leave_an_activation_on_codes_is_measured_by_running_them(tmp_path, capsys) -> None:
    """No table of producers predicted this one; qflow runs the passes on a copy before them, also for a
    saved .pt2 (which its fast reader reads without the real program) through the CLI."""
    torch.manual_seed(0)
    samples = [(torch.randn(1, 2, 4, 4),) for _ in range(3)]
    converted = cortex_m.quantize(PooledLinearRelu().eval(), samples)
    given, program = cortex_m.lower(converted, samples[0])
    for x in samples:  # measured: 3 output LSB (the codes between the zero point and 0 become 0)
        assert float((cortex_m.run(program, x)[0] - converted(*cortex_m.channels_last(x))).abs().max()) > 0.04
    exported = torch.export.export(converted, cortex_m.channels_last(samples[0]))
    [error] = qflow.analyze(exported, target="cortex-m").errors
    assert (error.kind, error.node) == ("real-constant-on-codes", "relu") and "measured" in error.message
    # before calibration (the annotated graph): unproven at the relu, where it was proved
    annotated = CortexMQuantizer().annotate(
        torch.export.export(PooledLinearRelu().eval(), samples[0]).module(check_guards=False)
    )
    report = qflow.analyze(annotated, target="cortex-m")
    assert report.status == "unproven" and [(f.kind, f.node) for f in report.findings] == [
        ("real-constant-on-codes", "relu")
    ], str(report)
    torch.export.save(exported, tmp_path / "m.pt2")
    assert main(["check", str(tmp_path / "m.pt2"), "--target", "cortex-m"]) == 1
    assert "real-constant-on-codes at relu" in capsys.readouterr().out


class SigmoidCatRelu(nn.Module):
    """A relu after a cat of a sigmoid (campaign case 00384-cm): not fused, so it runs on the sigmoid's codes
    (zero point -128) with its bound 0 as written — which changes no code when the sigmoid's input is never
    negative (its outputs then lie at or above 0.5, codes >= 0)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(x)
        return torch.relu(torch.cat([s, s], 1))


@pytest.mark.parametrize("span", [(0.5, 6.0), (-3.0, 3.0)])
@torch.no_grad()
def test_an_activation_on_codes_is_weighed_over_the_codes_its_input_reaches(span: tuple[float, float]) -> None:
    """Stock CortexMQuantizer, ExecuTorch 1.5.1, reference kernels: with inputs >= 0 (an input domain whose
    zero point is its qmin) the relu changes no code the program reaches and qflow proves it, before the
    passes and after them (the sigmoid's LUT bounded as the sigmoid); with negative inputs it is an error
    in both, its bound holding the measured error (115 output LSB)."""
    lo, hi = span
    torch.manual_seed(0)
    samples = [(lo + (hi - lo) * torch.rand(1, 4, 2, 8),) for _ in range(3)]
    converted = cortex_m.quantize(SigmoidCatRelu().eval(), samples)
    given, program = cortex_m.lower(converted, samples[0])
    step = [n for n in given.graph.nodes if "dequantize" in target_name(n)][-1].args[1]
    tests = [*samples, (torch.linspace(lo - 1, hi + 1, 64).reshape(1, 4, 2, 8),)]  # (and clipping ones)
    worst = max(float((cortex_m.run(program, x)[0] - converted(*x)).abs().max()) / step for x in tests)
    for form, reference in ((torch.export.export(converted, samples[0]), None), (program, given)):
        report = qflow.analyze(form, target="cortex-m", reference=reference)
        [finding] = [f for f in report.findings if f.kind == "real-constant-on-codes"]
        if lo >= 0:
            assert worst == 0 and report.proved, str(report)
            assert "the program reaches there (0 to 127)" in finding.message, finding.message
        else:
            assert worst > 100 and finding.severity == "error", str(report)
            assert finding.output_lsb is not None and worst <= finding.output_lsb + 0.5, (worst, finding.output_lsb)


class SubRelu(nn.Module):
    """sub → relu, annotated together by CortexMQuantizer; `shared`: the relu's output domain is the
    stack's, whose zero point is above qmin, so ActivationFusionPass declines to fuse it."""

    def __init__(self, shared: bool) -> None:
        super().__init__()
        self.shared = shared

    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        h = torch.relu(x - y)
        return torch.stack([h, z]) if self.shared else h


@pytest.fixture(scope="module")
def sub_relu() -> Callable[[bool], tuple]:
    """shared → (samples, the converted model, the program the passes are given, what they return),
    each built once."""
    built: dict[bool, tuple] = {}

    @torch.no_grad()
    def build(shared: bool) -> tuple:
        if shared not in built:
            torch.manual_seed(0)
            samples = [(torch.randn(2, 8), torch.randn(2, 8), 2 * torch.randn(2, 8)) for _ in range(4)]
            converted = cortex_m.quantize(SubRelu(shared).eval(), samples)
            built[shared] = (samples, converted, *cortex_m.lower(converted, samples[0]))
        return built[shared]

    return build


@pytest.mark.parametrize("shared", [True, False])
@torch.no_grad()
def test_a_producer_whose_activation_is_not_fused_stays_an_aten_op_on_codes(sub_relu, shared: bool) -> None:
    """Stock flow, ExecuTorch 1.5.1: unfused, the sub keeps no output_qparams, AtenToCortexMPass skips
    it and the portable kernel subtracts codes (~100 output LSB off on the reference kernels); qflow
    says so at the relu before the passes and at the sub after them. Fused, it proves and is exact."""
    samples, converted, given, program = sub_relu(shared)
    step = [n for n in given.graph.nodes if "dequantize" in target_name(n)][-1].args[1]
    worst = max(float((cortex_m.run(program, x)[0] - converted(*x)).abs().max()) / step for x in samples)
    pre = qflow.analyze(torch.export.export(converted, samples[0]), target="cortex-m")
    post = qflow.analyze(program, target="cortex-m", reference=given)
    if not shared:
        assert worst == 0 and pre.proved and post.proved, (worst, str(pre), str(post))
        return
    assert worst > 50  # measured: 102
    assert [(f.kind, "relu" in f.node) for f in pre.errors] == [("non-fuseable-activation", True)], str(pre)
    assert "stays an aten sub on int8 codes" in pre.errors[0].message
    assert ("domain-mismatch", "aten_sub_tensor") in [(f.kind, f.node) for f in post.errors], str(post)


@torch.no_grad()
def test_in_the_pipeline_qflow_pass_checks_and_repairs_and_the_cli_reads_the_pt2(sub_relu, capsys, tmp_path) -> None:
    """The Cortex-M flow has no partitioner: QflowPass runs as an edge transform before CortexMPassManager.
    "check" refuses the unfused sub → relu; "repair" gives the relu its own domain (zero point at qmin,
    requantized into the stack's after it), the passes then fuse it and the program they return proves
    and is exact on the reference kernels. `qflow check --target cortex-m` says the same of the .pt2."""
    samples, converted, _, _ = sub_relu(True)
    exported = torch.export.export(converted, samples[0])
    edge = to_edge(exported, compile_config=cortex_m_edge_compile_config())
    with pytest.raises(Exception) as e:  # (ExecuTorch's pass manager may wrap it)
        copy.deepcopy(edge).transform([QflowPass("check", target="cortex-m")])
    assert isinstance(e.value, qflow.ProofError) or isinstance(e.value.__cause__, qflow.ProofError)
    hook = QflowPass("repair", target="cortex-m")
    given = edge.transform([hook]).exported_program()
    assert [r.status for r in hook.reports] == ["violated", "proved"]
    program = CortexMPassManager(copy.deepcopy(given)).transform()
    assert qflow.analyze(program, target="cortex-m", reference=given).proved
    ops = [
        target_name(n) for n in program.graph.nodes if n.op == "call_function" and "quantize_per" not in target_name(n)
    ]
    assert ops == ["cortex_m.quantized_add.default", "aten.cat.default", "aten.view_copy.default"], ops  # (relu fused)
    step = [n for n in given.graph.nodes if "dequantize" in target_name(n)][-1].args[1]
    assert all(float((cortex_m.run(program, x)[0] - converted(*x)).abs().max()) < step / 2 for x in samples)
    torch.export.save(exported, tmp_path / "sub_relu.pt2")
    assert main(["check", str(tmp_path / "sub_relu.pt2"), "--target", "cortex-m"]) == 1
    out = capsys.readouterr().out
    assert "non-fuseable-activation" in out and "stays an aten sub on int8 codes" in out


@pytest.fixture(scope="module")
def dsp_pipeline():
    return _lower(CNN, CortexM.M4)


@torch.no_grad()
def test_on_a_dsp_core_the_linear_reads_its_bias_and_its_mutants_are_flagged(dsp_pipeline) -> None:
    """M4 (DSP; scalar cores the same): CMSIS-NN's linear reads its bias and offsets at run time, no
    kernel_sum. The program proves against the one it came from; every folded integer that moves codes
    is flagged at its kernel; and the bias dropped (ExecuTorch PR #19676's bug on DSP / scalar builds)
    moves the output and is an error at the linear."""
    reference, program = dsp_pipeline
    [linear] = [n for n in program.graph.nodes if "quantized_linear" in str(n.target)]
    assert linear.args[3] is None and linear.args[2] is not None  # (bias, no kernel_sum)
    assert qflow.analyze(program, target="cortex-m", reference=reference).status == "proved"
    moved, errors, missed, false_alarms = _mutation_outcomes(program)
    assert not missed and not false_alarms, (missed, false_alarms)
    # measured 2026-11-25: 31 move codes, 26 errors (one more than on M55: the input_offset the DSP linear
    # reads); the other 5 are unproven as on M55 (four activation_min bounds, the add's other_shift)
    assert (len(moved), len(errors)) == (31, 26), (sorted(set(moved) - set(errors)), len(moved), len(errors))
    broken = copy.deepcopy(program)
    node = next(n for n in broken.graph.nodes if n.name == linear.name)
    node.args = (*node.args[:2], None, *node.args[3:])
    broken.graph_module.recompile()
    assert max(float((broken.module()(*x) - program.module()(*x)).abs().max()) for x in _inputs()) > 0.01
    report = qflow.analyze(broken, target="cortex-m", reference=reference)
    assert [(f.kind, f.node) for f in report.errors] == [("kernel-argument-mismatch", linear.name)], str(report)


class TransposeDiv(nn.Module):
    """The transpose conv and div kernels (a divisor in [1, ∞): quotients that do not saturate)."""

    def __init__(self) -> None:
        super().__init__()
        self.t, self.u = nn.ConvTranspose2d(3, 4, 3, stride=2), nn.ConvTranspose2d(3, 4, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = self.u(x)
        return self.t(x) / (u * u + 1)


def test_transpose_conv_and_div_kernels_are_read_and_their_mutants_flagged() -> None:
    reference, program = _lower(TransposeDiv)
    kernels = {target_name(n).split(".")[1] for n in program.graph.nodes if target_name(n).startswith("cortex_m.")}
    assert {"quantized_transpose_conv2d", "quantized_div"} <= kernels, kernels
    report = qflow.analyze(program, target="cortex-m", reference=reference)
    assert not report.errors and report.status == "unproven", str(report)
    [why] = [f.message for f in report.findings]
    assert "divisor" in why  # (only the division by a real 0 stays unproven)
    moved, errors, missed, false_alarms = _mutation_outcomes(program)
    assert not missed and not false_alarms, (missed, false_alarms)
    # measured 2026-11-25: 16 move codes, 14 errors; the 2 others are the transpose convs' activation_min
    # (a fused activation the program after the passes does not record: unproven, as for conv2d)
    assert (len(moved), len(errors)) == (16, 14), sorted(set(moved) - set(errors))


def _pte_findings(report) -> list[tuple[str, str]]:
    return sorted((f.kind, f.node) for f in report.findings if f.severity != "info")


def test_the_pte_as_shipped_proves_only_against_the_program_it_came_from(pipeline, tmp_path, capsys) -> None:
    """The .pte the device runs: alone its kernels' folded integers are unproven (the domains they
    were folded from are not in it); with the program it came from, qflow lowers that program
    again, matches the .pte instruction by instruction, and proves it. The .pte of another model
    is not that program's lowering: unproven, never proved."""
    reference, program = pipeline
    (tmp_path / "cnn.pte").write_bytes(cortex_m.to_pte(program))
    torch.export.save(reference, tmp_path / "cnn.pt2")
    alone = qflow.analyze(tmp_path / "cnn.pte")
    assert alone.status == "unproven" and alone.target == "cortex-m", str(alone)
    assert [f.kind for f in alone.findings] == ["reference-needed"], str(alone)
    proved = qflow.analyze(tmp_path / "cnn.pte", reference=tmp_path / "cnn.pt2")
    assert proved.status == "proved", str(proved)
    assert any("for M55 (MVE" in n and "every argument and constant is the same" in n for n in proved.notes)
    assert main(["check", str(tmp_path / "cnn.pte"), "--reference", str(tmp_path / "cnn.pt2")]) == 0
    other_pte = cortex_m.to_pte(_lower(DepthwisePool)[1])
    other = qflow.analyze(other_pte, reference=reference)
    assert other.status == "unproven" and {f.kind for f in other.findings} == {"reference-needed"}, str(other)
    assert "is not the reference's lowering" in other.findings[0].message
    # (its output dequantize reads a view the emitter elided, a value no instruction writes: the codes
    # last written to its buffer, not a value nobody checks — it was proved once, with no obligation)
    assert qflow.analyze(other_pte).status == "unproven"
    capsys.readouterr()


@torch.no_grad()
def test_a_pte_whose_folded_integers_changed_after_the_passes_gets_the_programs_verdict(pipeline) -> None:
    """Translation validation: each folded-integer mutant of the program after the passes (every
    third, over every kernel kind), and the PR #19676 kernel_sum without its offset term, serialized
    to a .pte and checked against the unmutated reference, gets the findings the mutated program
    gets in memory — the verdict the mutation tests above measured on the reference kernels."""
    reference, program = pipeline
    mutants, statuses = list(_mutants(program))[::3], []
    for name, i, new in mutants:
        ep = copy.deepcopy(program)
        node = next(n for n in ep.graph.nodes if n.name == name)
        node.args = (*node.args[:i], new, *node.args[i + 1 :])
        ep.graph_module.recompile()
        in_memory = qflow.analyze(ep, target="cortex-m", reference=reference)
        shipped = qflow.analyze(cortex_m.to_pte(ep), reference=reference)
        label = f"{name} {node.target._schema.arguments[i].name} -> {new}"
        assert (shipped.status, _pte_findings(shipped)) == (in_memory.status, _pte_findings(in_memory)), label
        statuses.append(shipped.status)
    assert len({name for name, _, _ in mutants}) == 7  # (2 convs, add, 2 avg pools, mul, linear)
    # (what they are: 8 errors; 3 proved — two avg pool arguments that move codes by at most one, the MVE
    # linear's input_offset, which kernel_sum carries; 2 unproven activation_min bounds)
    assert {s: statuses.count(s) for s in set(statuses)} == {"violated": 8, "proved": 3, "unproven": 2}
    [linear] = [n for n in program.graph.nodes if "quantized_linear" in str(n.target)]
    state = {**program.state_dict, **program.constants}
    sig = {s.arg.name: s.target for s in program.graph_signature.input_specs}
    offset = int(linear.args[4]) * state[sig[linear.args[1].name]].to(torch.int32).sum(dim=1)
    broken = _with_constant(program, linear.args[3].name, state[sig[linear.args[3].name]] - offset)
    report = qflow.analyze(cortex_m.to_pte(broken), reference=reference)
    assert [(f.kind, f.node) for f in report.errors] == [("kernel-argument-mismatch", linear.name)], str(report)
    assert any("kernel_sum" in n for n in report.notes), report.notes


def test_a_dsp_cores_pte_is_matched_to_the_dsp_lowering(dsp_pipeline) -> None:
    """The .pte does not say which core it was built for; the linear's bias convention does (a bias on
    DSP / scalar cores, kernel_sum on MVE), so only the DSP lowering matches it."""
    reference, program = dsp_pipeline
    report = qflow.analyze(cortex_m.to_pte(program), reference=reference)
    assert report.status == "proved", str(report)
    assert any("(DSP" in n for n in report.notes), report.notes
