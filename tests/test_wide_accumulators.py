"""int16 convolutions and matmuls: Arm rescales their INT48 accumulators with 16-bit multipliers, real pipeline.

Transformer campaign case 00057-tx-arm-a16w8 (a relu, an rms_norm, a linear, the linear's output times the relu's,
an attention product): every domain consistent, proved before partitioning and lowered until 2026-12-03. The input
42 runs of the campaign's seeded search find (`rejudge.py --search`, steered by the backend alone) is 8 output LSB
off on the TOSA reference model: the linear's RESCALE from INT48 has a 15-bit multiplier (TOSA ``scale32`` false),
its result one int16 code off the program's, and the product with a relu of up to 8 makes that code 8. Now that
one code is followed to the outputs as a maximum rounded twice is (`rounded-twice`): unproven there. A linear
whose one code nothing amplifies stays proved.
"""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path
from typing import Any

import torch
from executorch.backends.arm.quantizer import get_symmetric_a16w8_quantization_config

import qflow
from qflow.targets.arm import pipeline as arm
from qflow.targets.arm.tosa_artifact import analyze_artifact

CAMPAIGN = Path(__file__).resolve().parent.parent / "benchmarks" / "soundness"


def _campaign_case(case_id: str) -> tuple[Any, ...]:
    """Soundness campaign case `case_id` rebuilt from its seeds: (the campaign's `case` module, its index, variant,
    converted model, test inputs, exported program, lowered program)."""
    sys.path.insert(0, str(CAMPAIGN))
    import case
    from gen import generate

    index, full = case.parse_id(case_id)
    variant = case.base_variant(full)
    converted, samples, tests = case.quantized(variant, generate(index, case.menu_of(full)), index, {})
    exported = torch.export.export(converted, samples[0], strict=True)
    edge, _ = case.lower(variant, copy.deepcopy(exported), tests[0])
    return case, index, variant, converted, tests, exported, edge


def test_a_code_an_int16_linear_rescale_moves_is_followed_to_the_outputs() -> None:
    case, index, variant, converted, tests, exported, edge = _campaign_case("00057-tx-arm-a16w8")
    for report in (qflow.analyze(exported, target="arm-tosa"), qflow.analyze(edge, target="arm-tosa")):
        assert report.status == "unproven" and not report.errors, str(report)
        nodes = {f.node.rsplit("/", 1)[-1] for f in report.findings if f.kind == "rounded-twice"}
        assert nodes & {"linear", "aten_linear_default"}, str(report)
    # the artifact alone (no graph to weigh what follows): unproven at the RESCALE, never proved as before
    artifact = analyze_artifact(edge)
    assert artifact.status == "unproven" and not artifact.errors, str(artifact)
    assert any(f.kind == "rounded-twice" and "scale32 false" in f.message for f in artifact.findings), str(artifact)
    grids = case.output_grids(converted, tests)

    def distance(x: Any) -> float:
        with torch.no_grad():
            want = case._as_list(converted(*x))
        return float(case.compare([case.run_backend(variant, edge, x)], [want], grids).get("ratio", math.inf))

    start = tests + case.domain_inputs(converted, tests, seed=index)
    worst, _, _ = case.searched_inputs(converted, tests, start, distance, seed=index, n=42)
    with torch.no_grad():
        want = case._as_list(converted(*worst))
    err = case.compare([case.run_backend(variant, edge, worst)], [want], grids)
    assert err["outputs"][0]["lsb"] >= 8, err  # (what a proof would have missed: beyond the band of 2)


def test_a_code_carried_out_of_its_partition_is_weighed_by_the_program_around_it() -> None:
    """Case 01015-tx-arm-a16w8: the int16 linear's codes leave their partition times a constant, and the host's
    rms_norm (decomposed: pow, mean, rsqrt, mul) between the partitions amplifies them. The lowered program was
    proved (each partition's one code weighed in that partition alone); the input a search found is 23 LSB off."""
    case, _, variant, converted, tests, _, edge = _campaign_case("01015-tx-arm-a16w8")
    report = qflow.analyze(edge, target="arm-tosa")
    assert report.status == "unproven" and not report.errors, str(report)
    assert "lowered_module_0/aten_linear_default" in {f.node for f in report.findings if f.kind == "rounded-twice"}
    worst = torch.load(Path(__file__).parent / "data" / "worst-input-01015-tx-arm-a16w8.pt")
    with torch.no_grad():
        want = case._as_list(converted(*worst))
    err = case.compare([case.run_backend(variant, edge, worst)], [want], case.output_grids(converted, tests))
    assert max(o["lsb"] for o in err["outputs"]) >= 20, err  # (beyond the band of 2: what the proof missed)


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def test_an_int16_linear_alone_stays_proved() -> None:
    """Its one code is the output's own: within the contract, as the TOSA reference model measures."""
    torch.manual_seed(0)
    inputs = (torch.randn(1, 4, 16),)
    spec = "TOSA-1.0+INT+int16"
    converted = arm.quantize(Linear().eval(), inputs, spec=spec, config=get_symmetric_a16w8_quantization_config())
    exported = torch.export.export(converted, inputs)
    report = qflow.analyze(exported, target="arm-tosa")
    assert report.proved, str(report)
    lowered = arm.lower(exported, inputs, spec=spec)
    assert analyze_artifact(lowered).proved  # (its RESCALE's codes are copied out: the output's own code)
    step = float(converted(*inputs).unique().diff().min())
    off = float((arm.run_tosa_reference(lowered, inputs)[0] - converted(*inputs)).abs().max()) / step
    assert off <= 1.0 + 1e-3, off
