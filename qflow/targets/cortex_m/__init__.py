"""The Cortex-M backend (CMSIS-NN): `CortexMQuantizer` → `to_edge` → `CortexMPassManager`.

It has no partitioner: the passes rewrite the edge program in place into `cortex_m::` kernels
whose integer arguments (zero points, requantize multiplier / shift pairs, activation bounds)
are folded from the program's domains. `kernels.py` reads each kernel and `kernel_rules.py` checks that its
arguments realise the domains the fold recorded on it (`input_qparams` / `output_qparams`);
the semantics of each argument is the Cortex-M dialect's reference kernels', and the test
`tests/test_cortex_m.py` measures it by mutating every folded integer and running them.
"""

from __future__ import annotations

from qflow.targets.contract import IgnoredVariant, OpRule, Outcome, Target

#: Measured by the contract probe (benchmarks/contracts.md, cortex-m column; tests/contracts/):
#: a domain change across these miscomputes. The activations are clamps on codes
#: (QuantizedClampActivationPass), the copies and maximum / minimum run on codes on the portable
#: kernels, and quantized_avg_pool2d (also mean over H, W: DecomposeMeanPass) keeps its input's
#: domain: zero point shifted 9-10 LSB, scale ×1.37 3-41 LSB.
_CODE_COPY = (
    "relu relu_ hardtanh hardtanh_ clamp clamp_ avg_pool2d adaptive_avg_pool2d mean maximum minimum "
    "stack slice constant_pad_nd squeeze unsqueeze pixel_shuffle"
).split()

TARGET = Target(
    name="cortex-m",
    description="ExecuTorch Cortex-M backend (CMSIS-NN kernels): before CortexMPassManager and what it returns",
    op_rules={op: OpRule.CODE_COPY for op in _CODE_COPY},
    outcome=Outcome.MISCOMPILE,
    kernel_namespaces=frozenset({"cortex_m"}),
    # ActivationFusionPass.FUSE_OPS; max_pool2d too, but one left unfused keeps its input's domain.
    fusion_producers=frozenset({"add", "sub", "linear", "conv1d", "conv2d", "convolution", "conv_transpose2d"}),
    # An activation CortexMQuantizer annotated with its producer that ActivationFusionPass declines
    # (its bounds cut into the code range) leaves the producer without output_qparams, and the
    # passes then leave it an aten op on codes (measured, tests/test_cortex_m.py).
    unfused_producer=Outcome.MISCOMPILE,
    # The passes fold (FoldAndAnnotateQParamsPass) only nodes CortexMQuantizer marked quantized; an
    # unmarked op stays between a dequantize and a quantize, in float on the portable kernels.
    lowers_only_marked=("_arm_annotation_info", "quantized"),
    # hardtanh → requant → clamp stays two clamps on codes, each bounded in its own output domain
    # (measured: 01099-cm-custom, the program CortexMPassManager returns; 70 LSB when read as one).
    fuses_consecutive_clamps=False,
    activations_decided_after_calibration=True,
    laid_out_by_lowering=frozenset({"constant_pad_nd", "pad"}),
    backend="qflow.targets.cortex_m.backend",
    # Stock CortexMQuantizer single-op programs measured within 1 output LSB of the fake-quantized
    # model on the reference kernels (benchmarks/contracts.json, 2026-11-25); `convolution` is the
    # edge dialect's conv2d. The cortex_m kernels themselves are read and checked one by one.
    validated={
        "int8": frozenset(
            "add sub mul conv2d convolution linear bmm sigmoid tanh gelu rsqrt silu log log10 log1p avg_pool2d "
            "adaptive_avg_pool2d mean maximum minimum".split()
        )
    },
    # Loud, not silent: a hardswish no kernel precedes stays an aten op on int8 codes (nothing for
    # DecomposeHardswishPass to fuse it into), which the portable kernel refuses when it runs.
    measured_off={"int8": {"hardswish": "refused when run after a quantize (no int8 hardswish kernel)"}},
    # Measured on the reference kernels (tests/contracts/test_cortex_m_ignored_variants.py, 2026-12-02): the
    # passes lower a gelu with approximate="tanh" to a quantized_activation table of the exact (erf) GELU; the
    # two differ by at most 4.7324e-4 over the reals (at |x| = 2.699; bound with float32 rounding).
    ignored_variants={
        "gelu": IgnoredVariant(
            "approximate", "tanh", 4.74e-4, "computes the exact (erf) GELU instead (its quantized_activation table)"
        )
    },
)
