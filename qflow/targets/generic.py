"""The generic target: sound for every shipped delegate target at once (arm-tosa, xnnpack;
cortex-m rewrites programs in place and is named on its own).

An obligation holds only if it holds on all of them: each op takes the
strictest rule any target applies, activations fuse only where that is exact
everywhere. Findings name the targets on which the program breaks.
"""

from __future__ import annotations

from qflow.targets import arm, xnnpack
from qflow.targets.contract import STRICTNESS, Fusion, Target


def combine(name: str, members: list[Target]) -> Target:
    # an op one target lists and another leaves to its PT2E meaning takes the
    # stricter of the two, so the listing target cannot relax the other's rule
    ops = {op for t in members for op in t.op_rules}
    rules = {op: max((t.effective_rule(op) for t in members), key=STRICTNESS.index) for op in ops}
    fusion = Fusion.NARROW_QMIN if any(t.fusion is Fusion.NARROW_QMIN for t in members) else Fusion.EXACT_ONLY
    return Target(
        name=name,
        description="every shipped delegate target at once: " + ", ".join(t.name for t in members),
        op_rules=rules,
        fusion=fusion,
        int16_zero_point_zero=any(t.int16_zero_point_zero for t in members),
        members=tuple(t.name for t in members),
    )


TARGET = combine("generic", [arm.TARGET, xnnpack.TARGET])
