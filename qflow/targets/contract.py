"""What a target is: one backend's contract for quantization domains.

A target says, for each op qflow knows, how that backend lowers a domain change
across it, how it fuses activations, and which dtype / zero-point rules it
enforces. The FX reader asks the target; it knows no backend itself. Contracts
are measured against the real backend by the contract probe
(`tests/contracts/`), not believed.

Torch-free: targets are data.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from qflow.ops import OpClass, classify


class OpRule(enum.Enum):
    """How a backend lowers an op whose output domain differs from its input's."""

    RESCALE = "rescale"  # any output domain is realised (a real requant)
    ZP_ONLY = "zp-only"  # zero points are applied, the scale is kept: the scales must agree
    CODE_COPY = "code-copy"  # codes are copied: the output must be the input's domain
    CPU_FLOAT = "cpu-float"  # computed in float (left on the CPU, or converted around it): exact


#: Strictness order: the generic target takes the strictest rule of all targets.
STRICTNESS = (OpRule.CPU_FLOAT, OpRule.RESCALE, OpRule.ZP_ONLY, OpRule.CODE_COPY)


class Fusion(enum.Enum):
    """How a backend folds conv/linear → relu/hardtanh/clamp → quantize."""

    NARROW_QMIN = "narrow-qmin"  # drops the clamp, narrows qmin to zp: wrong when the bounds cut inside
    CODE_CLAMP = "code-clamp"  # clamps in code space (output_min/max): exact for any zero point
    EXACT_ONLY = "exact-only"  # fuses only when dropping the clamp is exact


class Outcome(enum.Enum):
    """What a broken obligation does on a target."""

    MISCOMPILE = "silent miscompile"
    REFUSED_AT_LOWERING = "refused at lowering"
    REFUSED_AT_LOAD = "refused at load"


@dataclass(frozen=True)
class IgnoredVariant:
    """An op argument whose value the backend does not honour: it computes the op's default variant,
    at most `max_error` (real units, over every real input) from the one asked for. Measured."""

    argument: str
    value: object
    max_error: float
    measured: str


@dataclass(frozen=True)
class Target:
    """One backend's contract. `op_rules` maps op base names to the rule the
    backend applies; an op absent from it keeps its PT2E meaning (compute ops
    rescale, pass-through ops copy codes)."""

    name: str
    description: str
    op_rules: Mapping[str, OpRule] = field(default_factory=dict)
    fusion: Fusion = Fusion.EXACT_ONLY
    #: Producers an activation fuses into.
    fusion_producers: frozenset[str] = frozenset({"conv1d", "conv2d", "conv3d", "convolution", "linear"})
    #: What lowering does with a fusion producer annotated together with an activation it does not
    #: fuse (no quantize between them, so the producer has no output domain of its own): None, it is
    #: rescaled into the activation's domain or refused (Arm); else what the program then computes
    #: (Cortex-M: the producer stays an aten op on the codes).
    unfused_producer: Outcome | None = None
    #: int16 tensors must have zero point 0 (TOSA).
    int16_zero_point_zero: bool = False
    #: ExecuTorch backend ids whose delegates this target describes.
    backend_ids: frozenset[str] = frozenset()
    #: Namespaces of the kernels this target's passes rewrite a program into in place (no
    #: delegate): a .pte calling them is checked by the target (its ``relower_plan`` hook).
    kernel_namespaces: frozenset[str] = frozenset()
    #: Class names of the ExecuTorch partitioners that lower to this target.
    partitioners: frozenset[str] = frozenset()
    #: What a code-copy / zp-only violation does on this target.
    outcome: Outcome = Outcome.MISCOMPILE
    #: The targets a generic contract was combined from (empty for a real backend).
    members: tuple[str, ...] = ()
    #: (key in ``node.meta["custom"]``, field): the backend lowers only nodes
    #: whose quantizer marked them so; an unmarked op runs on the CPU in float
    #: (the Arm quantizer's ``_arm_annotation_info.quantized``).
    lowers_only_marked: tuple[str, str] | None = None
    #: The backend computes an op on integer codes only when each of its tensor
    #: inputs is a dequantize's output and each user a quantize; any other op it
    #: computes in float between its own conversions, which realises any domain
    #: change (XNNPACK: campaign case 00041, DQ → clamp → max_pool2d → Q into
    #: another domain, exact on the runtime).
    float_unless_qdq: bool = False
    #: Two activations with only a requant between them become one clamp whose bounds are quantized
    #: in the second's output domain (Arm's FuseConsecutiveClampsPass); False: each stays its own
    #: clamp, its bounds quantized in its own output domain (Cortex-M: campaign case 01099-cm-custom).
    fuses_consecutive_clamps: bool = True
    #: Whether the lowering fuses an activation, rewrites it into a clamp on codes or leaves it as
    #: written on the codes (its bounds in real units: wrong) depends on the calibrated program, which
    #: no rule predicts before calibration (Cortex-M: the dtype each producer's folded output has when
    #: the activation passes run; campaign cases 01078-cm, 01109-cm-custom, 01188-cm, proved on the
    #: annotated graph and 84-255 output LSB off on the reference kernels).
    activations_decided_after_calibration: bool = False
    #: Ops whose lowering writes their arguments for a memory layout known only when the lowering runs
    #: on the converted program (Cortex-M: a pad's pre / post pads in memory order, written for the
    #: other layout in campaign case 00158-cm, proved on the annotated graph): unproven before calibration.
    laid_out_by_lowering: frozenset[str] = frozenset()
    #: Ops the partitioner delegates only with at least this many distinct
    #: tensor inputs; with fewer the op runs on the CPU in float (XNNPACK's
    #: CatConfig: ``len(node.all_input_nodes) >= 2``; campaign case 00077,
    #: ``cat([x, x])`` with a requant, exact on the runtime).
    delegated_min_inputs: Mapping[str, int] = field(default_factory=dict)
    #: The backend merges users of one tensor with the same op and arguments after it folds the
    #: Q/DQ nodes, whatever their output domains (Arm FuseDuplicateUsersPass, executorch 1.5.1;
    #: measured: tests/test_duplicate_users.py). Such duplicates in different domains are an error.
    merges_duplicate_users: bool = False
    #: The backend adds a linear layer's / convolution's int32 bias codes to the accumulator as they
    #: are, whatever domain the program declares for them (measured on the TOSA reference model:
    #: tests/test_masked_downstream.py). A bias not in the accumulator's domain is an error.
    adds_bias_codes: bool = False
    #: The backend lowers a quantized ``while_loop`` to a loop that carries each variable's codes,
    #: read by every iteration in the domain the variable entered with (TOSA WHILE_LOOP; measured:
    #: tests/test_control_flow.py). A body that writes a variable back in another domain miscomputes
    #: from the second iteration on, though the program, which carries reals, is consistent.
    carries_loop_codes: bool = False
    #: GEMM ops (by base name → the argument position of their weight) the partitioner leaves on the
    #: CPU when that operand is a dequantized activation, after taking the dequantizes of their operands
    #: into a delegate that never writes one of them: the op reads an unwritten buffer (XNNPACK,
    #: ExecuTorch 1.5.1, measured: an mm of two quantized activations). A program with one is an error.
    unwritten_gemm_weights: Mapping[str, int] = field(default_factory=dict)
    #: Ops whose variant (an argument's value) the backend ignores, by op base name: it computes the
    #: default variant instead (measured; `integrations.ignored_variants`).
    ignored_variants: Mapping[str, IgnoredVariant] = field(default_factory=dict)
    #: Module path of the backend's reader, imported only when a program of this
    #: target is read: what its delegates really read and write and its own
    #: checks of what it emitted. See `backend_module`.
    backend: str | None = None
    #: The compute ops whose stock lowering was measured to compute right on this
    #: backend (the contract probe, `tests/contracts/`), by activation dtype
    #: ("int8", "int16"). A compute op the backend lowers on integer codes that is
    #: not listed cannot be proved there: its obligations are unproven, never
    #: proved (issue #30: Arm's int16 LayerNorm decomposition miscomputes while
    #: every domain in the program is consistent). None: nothing is validated.
    validated: Mapping[str, frozenset[str]] | None = None
    #: Activation dtypes the backend refuses to lower at all (loudly, at lowering): no silent
    #: miscompile to prove against, so they need no validated lowering.
    refused_dtypes: frozenset[str] = frozenset()
    #: Lowerings measured to compute wrong, silently (the contract probe): by activation key
    #: (as in `validated`), op → what was measured. A program that needs one is an error.
    miscompiles: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: Lowerings measured off on the probe's inputs but not on every program (the error depends on
    #: which codes the data reaches): by activation key, op → what was measured. They stay unproven
    #: (never validated); the finding says what was measured instead of "never measured".
    measured_off: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def lowering_validated(self, op: str, dtype: str) -> bool:
        """Was `op`'s lowering at activation dtype `dtype` measured to compute right here?"""
        return self.validated is not None and op in self.validated.get(dtype, ())

    def measured_miscompile(self, op: str, dtype: str) -> str | None:
        """What was measured when `op`'s lowering at `dtype` computed wrong here, or None."""
        return self.miscompiles.get(dtype, {}).get(op)

    def measured_off_by(self, op: str, dtype: str) -> str | None:
        """What the probe measured where `op`'s lowering at `dtype` was off here, or None."""
        return self.measured_off.get(dtype, {}).get(op)

    def lowering_unmeasured(self, op: str, dtype: str) -> bool:
        """Would lowering `op` at activation dtype `dtype` here compute something never measured?
        (A refused dtype fails loudly at lowering instead.)"""
        return dtype not in self.refused_dtypes and not self.lowering_validated(op, dtype)

    def backend_module(self) -> ModuleType | None:
        """The backend reader, or None. It may define (each optional):
        ``refine_boundaries(lowered, inputs, outputs)`` (a delegate's real IO),
        ``add_artifact_evidence(dg, gm, call, lowered, prefix, reference)`` (check the artifact),
        ``read_reference(ep)`` (what a `reference=` program declares, for the reader and the check),
        ``read_payload(delegate, fed, declared)`` / ``check_payload(dg, delegate, site)`` (a .pte's
        payload and its IO), ``check_against_reference(dg, delegate, prefix, reference, named_data)`` (a
        .pte payload against what ``read_reference`` read),
        ``left_without_domain(producer, producer_op, activation) -> str`` (a finding's consequence),
        ``predict_boundaries(program, partitioner, name) -> Report`` (before partitioning),
        ``read_node(dg, node, consts, reference) -> bool`` (read a kernel the backend emits in place,
        e.g. Cortex-M's), ``passes_of(ep)`` (before in-place passes: what they do with `ep`, measured
        by running them; read_node's `reference` for that program)."""
        return None if self.backend is None else importlib.import_module(self.backend)

    def hook(self, name: str) -> Callable[..., Any] | None:
        """The backend reader's function `name`, or None when it has none."""
        module = self.backend_module()
        return getattr(module, name, None) if module is not None else None

    def rule(self, op: str) -> OpRule | None:
        """The backend's rule for op base name `op`, or None (PT2E meaning)."""
        return self.op_rules.get(op)

    def effective_rule(self, op: str) -> OpRule:
        """The rule with the PT2E meaning filled in: a pass-through (or unknown)
        op copies codes, any other op realises its output domain."""
        return self.op_rules.get(op) or default_rule(op)


def default_rule(op: str) -> OpRule:
    """What an op does with a domain change when no target says otherwise."""
    return OpRule.CODE_COPY if classify(op) in (OpClass.PASSTHROUGH, OpClass.UNKNOWN) else OpRule.RESCALE
