"""The Cortex-M backend (CMSIS-NN): `CortexMQuantizer` → `to_edge` → `CortexMPassManager`.

It has no partitioner: the passes rewrite the edge program in place into `cortex_m::` kernels
whose integer arguments (zero points, requantize multiplier / shift pairs, activation bounds)
are folded from the program's domains. `kernels.py` reads each kernel and checks that its
arguments realise the domains the fold recorded on it (`input_qparams` / `output_qparams`);
the semantics of each argument is the Cortex-M dialect's reference kernels', and the test
`tests/test_cortex_m.py` measures it by mutating every folded integer and running them.
"""

from __future__ import annotations

from qflow.targets.contract import OpRule, Outcome, Target

TARGET = Target(
    name="cortex-m",
    description="ExecuTorch Cortex-M backend (CMSIS-NN kernels), after CortexMPassManager",
    # Every aten op the passes leave runs on the portable kernels: in float between a
    # dequantize and a quantize, or as a copy of codes (views, and a relu as an aten.clamp on
    # codes, which kernels.py reads).
    op_rules={op: OpRule.CPU_FLOAT for op in ("convolution", "conv2d", "addmm", "linear", "mean", "mm", "bmm")},
    outcome=Outcome.MISCOMPILE,
    backend="qflow.targets.cortex_m.backend",
    # (the cortex_m kernels are read and checked one by one; no aten op runs on codes)
    validated={},
)
