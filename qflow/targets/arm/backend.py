"""The Arm target's reader hooks (see `Target.backend_module`): each imports
its ExecuTorch / TOSA machinery only when called."""

from __future__ import annotations

from typing import Any

from qflow.ops import base_name


def refine_boundaries(lowered: Any, inputs: list[Any], outputs: list[Any]) -> None:
    from qflow.targets.arm.boundary import refine_boundaries as refine

    refine(lowered, inputs, outputs)


def add_artifact_evidence(dg: Any, gm: Any, call: Any, lowered: Any, prefix: str, reference: Any = None) -> None:
    from qflow.targets.arm.boundary import add_artifact_evidence as add

    add(dg, gm, call, lowered, prefix, reference)


def read_reference(ep: Any) -> Any:
    """What the PT2E program a lowered one came from declares: the scales of the weights a
    TOSA payload keeps as bare codes (`tosa_anchors.Reference`)."""
    from qflow.targets.arm.tosa_anchors import reference

    return reference(ep)


def left_without_domain(producer: str, producer_op: str, activation: str) -> str:
    from qflow.targets.arm.passes import left_without_domain as consequence

    return consequence(producer, producer_op, activation)


def predict_boundaries(program: Any, partitioner: Any, name: str = "") -> Any:
    from qflow.targets.arm.predict import predict_boundaries as predict

    return predict(program, partitioner, name)


def read_payload(delegate: Any, fed: list[str], declared: list[str]) -> Any:
    """The IO of an Arm delegate's payload in a .pte (`qflow.ir.payload_io.PayloadIO`)."""
    from qflow.targets.arm.pte_payload import read_payload as read

    return read(delegate, fed, declared)


def check_payload(dg: Any, delegate: Any, site: Any) -> bool:
    """Check a TOSA payload of a .pte against what the program around it states."""
    from qflow.targets.arm.pte_payload import check_payload as check

    return check(dg, delegate, site)


def parse_spec(text: str) -> Any:
    """`qflow check --arm`: the TOSA specification `text` names."""
    from qflow.targets.arm.cli_lowering import parse_spec as parse

    return parse(text)


def folded_partitions(path: Any, ep: Any, spec: Any, say: Any) -> list[tuple[str, Any]]:
    """`qflow check --arm`: each partition of the program's Arm lowering after its fold pass."""
    from qflow.targets.arm.cli_lowering import folded_partitions as partitions

    return partitions(path, ep, spec, say)


def check_per_pass(path: Any, spec: str, analyze: Any) -> list[Any]:
    """`qflow check --arm --per-pass`: per partition, the report after the first pass that breaks
    an obligation."""
    from qflow.targets.arm.per_pass import check_file

    return check_file(path, spec, analyze)


def read_partitions(read: Any) -> Any:
    """Observe mode: a context in which every Arm lowering hands each partition's program, right
    after the fold pass, to `read(program, "arm-tosa", reference)` (`pipeline.read_after_fold`); it
    yields the list of what `read` returned."""
    from qflow.targets.arm.pipeline import read_after_fold

    return read_after_fold(read)


def skipped_requants(gm: Any, consts: Any, folded: bool) -> list[Any]:
    """The requants the Arm backend skips: between two int32-computed ops (`rescale_fusion`) and
    after an int16 conv an int32-computed op reads (`conv_widening`)."""
    from qflow.targets.arm import conv_widening, rescale_fusion

    return rescale_fusion.skipped_requants(gm, consts, folded) + conv_widening.skipped_requants(gm, consts, folded)


def rounded_comparisons(gm: Any, consts: Any, folded: bool) -> list[Any]:
    """The comparisons of two grids whose mask the backend's rescale onto the finer one can flip."""
    from qflow.targets.arm import comparisons

    return comparisons.rounded_comparisons(gm, consts, folded)


def rounded_twice(gm: Any, consts: Any, folded: bool) -> list[Any]:
    """The results the backend's own rounding can put one code off the program's: a maximum / minimum of two
    grids it rounds twice, an int16 conv / matmul whose accumulator it rescales with a 16-bit multiplier."""
    from qflow.targets.arm import min_max, wide_accumulators

    return [*min_max.rounded_twice(gm, consts, folded), *wide_accumulators.coarse_rescales(gm, consts, folded)]


def skipped_requants_before_calibration(gm: Any, annotated: Any) -> list[tuple[str, str, str]]:
    """(producer, consumer, why) for each consumer of an annotated graph the Arm backend may feed from its
    producer's unrounded result once calibrated: a fused rescale pair, or an int16 conv's accumulator."""
    from qflow.targets.arm import conv_widening, rescale_fusion

    fused = (
        "the Arm backend computes both on int32, and its FuseConsecutiveRescalesPass removes the rescale pair "
        "between them when the calibrated scales compose to 1.0 (not known before calibration)"
    )
    widened = (
        "with int16 activations the Arm backend's RewriteConvPass feeds the consumer from the conv's int32 "
        "accumulator: the conv's requantize (its rounding and its clamp to the range) never happens there"
    )
    return [(p, c, fused) for p, c in rescale_fusion.before_calibration(gm, annotated)] + [
        (p, c, widened) for p, c in conv_widening.before_calibration(gm, annotated)
    ]


def activation_codes(reference: Any, node: Any, domain: Any) -> tuple[int, int] | None:
    """The codes of output `domain` the CLAMP Arm makes of activation `node` keeps when the fold drops
    its requant: ConvertToClampPass makes a clamp of relu / hardtanh / clamp (one that does not read a
    conv or linear directly, which FuseQuantizedActivationPass takes) and QuantizeClampArgumentsPass
    quantizes its bounds with the output's qparams (executorch 1.5.1), whatever domain the codes it
    reads are in — the bounds the TOSA artifact check reads its CLAMPs by (`reference` is not needed)."""
    from qflow.ir.activations import PRODUCERS, bounds  # (torch.fx, loaded when asked)
    from qflow.ir.fx_nodes import target_name
    from qflow.targets.arm.tosa_interpreter import Activation, clamp_codes

    real = bounds(node)
    src = node.args[0] if node.args else None
    if real is None or src is None or base_name(target_name(src)) in PRODUCERS:
        return None
    if domain.is_float or domain.per_channel or not isinstance(domain.zero_point, int):
        return None
    return clamp_codes(Activation(node.name, *real, domain), domain)
