"""What the installed Arm backend's passes do, read from the passes themselves.

Used only for the wording of findings (which pass fails, and how); the
contract in `qflow.targets.arm` is what verdicts rest on. Imports ExecuTorch
lazily: only a program read for the Arm target pays for it.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def conv_reads_activation_domain() -> bool:
    """Does the installed RewriteConvPass take a conv's output domain from a
    direct clamp / view_copy user when the conv has none (the seed 001 fix)?"""
    try:
        from executorch.backends.arm._passes.rewrite_conv_pass import RewriteConvPass
    except ImportError:
        return False
    return hasattr(RewriteConvPass, "_get_effective_output_qparams")


def left_without_domain(producer: str, producer_op: str, activation: str) -> str:
    """What the installed Arm backend does with a producer whose output domain
    only its (unfused) activation records."""
    if not conv_reads_activation_domain():
        return (
            f"RewriteConvPass reads {producer}'s own output_qparams and fails with 'No output quantization "
            "parameter found' (seed 001, executorch ≤ 1.2)"
        )
    if producer_op == "linear":
        return (
            f"the installed RewriteConvPass reads the domain from a clamp only when it is the conv's direct "
            f"user, but DecomposeLinearPass turns {producer} into view → conv2d → view, so the conv's user is "
            "a view without output_qparams and lowering fails with 'No output quantization parameter found' "
            "(seed 001, still in executorch 1.5.1 for linear producers; a TOSA INT-only partitioner rejects "
            "the island instead and it runs on the CPU)"
        )
    return (
        f"the installed RewriteConvPass rescales {producer} into {activation}'s domain and the clamp stays "
        "explicit (exact); a TOSA INT-only partitioner rejects the island instead and it runs on the CPU; "
        "executorch ≤ 1.2 fails in RewriteConvPass (seed 001)"
    )
