"""The XNNPACK backend (static and dynamic PT2E quantization).

Measured on executorch 1.5.1 with the ExecuTorch runtime by the contract probe.
"""

from __future__ import annotations

from qflow.targets.contract import Fusion, Outcome, Target

TARGET = Target(
    name="xnnpack",
    description="ExecuTorch XNNPACK backend",
    op_rules={},
    fusion=Fusion.CODE_CLAMP,
    backend_ids=frozenset({"XnnpackBackend"}),
    partitioners=frozenset({"XnnpackPartitioner", "XnnpackDynamicallyQuantizedPartitioner"}),
    outcome=Outcome.REFUSED_AT_LOAD,
)
