"""The XNNPACK backend (static and dynamic PT2E quantization).

Measured on executorch 1.5.1 with the ExecuTorch runtime by the contract probe.
"""

from __future__ import annotations

from qflow.targets.contract import Fusion, IgnoredVariant, OpRule, Outcome, Target

TARGET = Target(
    name="xnnpack",
    description="ExecuTorch XNNPACK backend",
    op_rules={
        # Measured by the contract probe (benchmarks/contracts.md), custom int8 annotation, output
        # domain moved (zp +9 / scale ×1.37): these are delegated and computed within 1 LSB,
        # so XNNPACK realises any output domain across them.
        "relu": OpRule.RESCALE,
        "relu6": OpRule.RESCALE,
        "hardtanh": OpRule.RESCALE,
        "clamp": OpRule.RESCALE,
        "stack": OpRule.RESCALE,
        "slice": OpRule.RESCALE,
        "constant_pad_nd": OpRule.RESCALE,
        "pad": OpRule.RESCALE,  # F.pad as exported (aten.pad), the probe's constant_pad_nd case
        "squeeze": OpRule.RESCALE,
        "unsqueeze": OpRule.RESCALE,
        "pixel_shuffle": OpRule.RESCALE,
        # Not delegated when quantized: the partitioner leaves them on the CPU in float.
        "sum": OpRule.CPU_FLOAT,
        "upsample_nearest2d": OpRule.CPU_FLOAT,
        "reciprocal": OpRule.CPU_FLOAT,
        # Not delegated at all (XNNPACK has no select): where, and masked_fill, which the edge
        # dialect turns into a where, stay on the CPU in float (probe, custom int8 annotation).
        "where": OpRule.CPU_FLOAT,
        "masked_fill": OpRule.CPU_FLOAT,
        # index_put, grid_sample and fold (col2im, an index_put after to_edge), the same (probe,
        # 2026-11-26, custom int8 annotation: left on the CPU, exact whatever the output domain).
        "index_put": OpRule.CPU_FLOAT,
        "grid_sampler": OpRule.CPU_FLOAT,
        "grid_sampler_2d": OpRule.CPU_FLOAT,
        "col2im": OpRule.CPU_FLOAT,
        "cumsum": OpRule.CPU_FLOAT,  # (the same, 2026-11-27)
        "amax": OpRule.CPU_FLOAT,  # (the same, 2026-12-02: mask campaign 00287-mk-xnn read it as a code copy)
        "amin": OpRule.CPU_FLOAT,
        # The partitioner has no embedding config: a lowered program keeps aten.embedding on the CPU
        # (tests/contracts/test_xnnpack_affine_contract.py: a torchao weight-only embedding, 2026-11-27).
        "embedding": OpRule.CPU_FLOAT,
        # cat, view/reshape/flatten, permute/transpose and max_pool2d keep the PT2E
        # code-copy meaning: XNNPACK refuses a domain change across them at load
        # ("Failed to create cat2 / squeeze / static transpose / maxpool2d node") — when they
        # sit between a dequantize and a quantize; otherwise see float_unless_qdq.
    },
    float_unless_qdq=True,
    # Measured on the runtime (tests/test_unwritten_delegate_output.py, 2026-12-05): the partitioner's mm /
    # addmm config takes an mm's operand dequantizes into the delegate before it, then leaves the mm of two
    # activations on the CPU, and the payload writes none of the first operand's reals: the mm reads an
    # unwritten buffer (stock XNNPACKQuantizer, mm(q(x), k(x)): the whole output range off; 9 of 9 shapes).
    unwritten_gemm_weights={"mm": 1, "addmm": 2, "matmul": 1},
    delegated_min_inputs={"cat": 2, "concat": 2, "concatenate": 2},
    fusion=Fusion.CODE_CLAMP,
    backend_ids=frozenset({"XnnpackBackend"}),
    partitioners=frozenset({"XnnpackPartitioner", "XnnpackDynamicallyQuantizedPartitioner"}),
    outcome=Outcome.REFUSED_AT_LOAD,
    backend="qflow.targets.xnnpack.backend",
    # Single-op programs (the stock XNNPACKQuantizer, or the probe's int8 annotation where it
    # quantizes nothing) measured within 1 output LSB of the fake-quantized model on the
    # ExecuTorch runtime (benchmarks/contracts.json, 2026-11-23; `convolution` and `_softmax`
    # are the edge dialect's names of the measured conv2d and softmax).
    # to_edge_transform_and_lower with XnnpackPartitioner raises "Unsupported dtype for
    # quantization" on an int16 (a16w8) Q/DQ program (tests/test_targets.py).
    refused_dtypes=frozenset({"int16"}),
    validated={
        "int8": frozenset(
            "abs adaptive_avg_pool2d add avg_pool2d bmm ceil conv2d convolution exp floor gelu group_norm hardsigmoid "
            "hardswish "
            "layer_norm leaky_relu linear log matmul maximum mean minimum mul neg rms_norm rsqrt "
            "scaled_dot_product_attention sigmoid silu softmax _softmax sub tanh upsample_bilinear2d".split()
        ),
        # torchao quantize_ linears with a dynamically quantized (per-token int8) input, measured on
        # the runtime (tests/contracts/test_xnnpack_affine_contract.py): int8 per-channel weights
        # within float rounding of the quantized eager model; int4 per-group weights too once their
        # scales are rounded to bfloat16, as the payload keeps them (finding rounded-weight-scales).
        "dynamic-int8": frozenset({"linear"}),
    },
    # PT2E's dynamic config quantizes an activation per tensor at run time (choose_qparams.tensor);
    # XNNPACK quantizes it per token instead (asymmetric int8 per row, qd8): measured on the runtime
    # (tests/contracts/test_xnnpack_affine_contract.py, 2026-11-27), a Linear(64, 32) is 0.87 % of the
    # output range off the program, and within 4e-7 of the per-token computation — another function.
    measured_off={
        "dynamic-per-tensor-int8": dict.fromkeys(
            ("linear", "addmm", "mm"),
            "it quantizes the input per token, not per tensor as the program does (measured: 0.87 % of the "
            "output range off the program, within 4e-7 of the per-token computation)",
        )
    },
    # Measured on the runtime (tests/test_torchao_models.py, tests/contracts/test_xnnpack_affine_contract.py,
    # 2026-11-25): a torchao IntxWeightOnlyConfig linear is lowered with the raw int codes as float
    # weights (the group scales and zero points become delegate arguments the payload never reads).
    # Measured on the runtime (tests/contracts/test_xnnpack_ignored_variants.py): the partitioner
    # delegates a float gelu with approximate="tanh" and XNNPACK computes the exact (erf) GELU; the two
    # differ by at most 4.7324e-4 over the reals (at |x| = 2.699; bound with float32 rounding).
    ignored_variants={
        "gelu": IgnoredVariant(
            "approximate",
            "tanh",
            4.74e-4,
            "computes the exact (erf) GELU instead (ExecuTorch 1.5.1; fixed upstream by pytorch/executorch PR #22851)",
        )
    },  # fmt: skip
    miscompiles={
        "weight-only-int8": {
            op: "a torchao weight-only linear on XNNPACK computed with the raw weight codes as float "
            "weights — the scales dropped (measured: Linear(64, 32), int4 group 32, outputs 65x the "
            "eager model's range; a Llama-shaped layer, 3e6 relative; Int8WeightOnlyConfig: a "
            "Llama-shaped layer 2e11, an LSTM head 3e3, a ViT-shaped encoder refused when it runs)"
            for op in ("linear", "mm", "addmm")
        },
    },
)
