"""The Cortex-M target's hooks (`Target.backend`): the kernel reader and, lazily (they import
the ExecuTorch Cortex-M backend), observe mode's capture of the pass manager's programs and a
.pte's check against the reference lowered again."""

from __future__ import annotations

from typing import Any

from qflow.ir.load import load_program
from qflow.targets.cortex_m.kernels import PassRun, read_node, read_reference

__all__ = ["left_without_domain", "passes_of", "read_node", "read_partitions", "read_reference", "relower_plan"]


def left_without_domain(producer: str, producer_op: str, activation: str) -> str:
    """What the passes do with a producer whose output domain only its unfused activation records."""
    run = (
        "the portable kernel refuses to multiply the codes by the int8 weights when it runs"
        if producer_op == "linear"
        else "it computes on the codes as if they were reals: a silent miscompile"
    )
    return (
        f"ActivationFusionPass does not fuse {activation}, AtenToCortexMPass skips {producer} (no output_qparams), "
        f"so {producer} stays an aten {producer_op} on int8 codes and {run}"
    )


def read_partitions(read: Any) -> Any:
    """Observe mode: a context in which every `CortexMPassManager.transform()` hands the program
    it returns, and the one it was given, to `read`; it yields the list of what `read` returned."""
    from qflow.targets.cortex_m.pipeline import read_after_passes

    return read_after_passes(read)


def relower_plan(prog: Any, plan: Any, reference: Any) -> Any:
    """A .pte's plan against the reference lowered by qflow (`pte_plan.Relowered`)."""
    from qflow.targets.cortex_m.pte_plan import relower

    return relower(prog, plan, reference)


def activation_codes(reference: Any, node: Any, domain: Any) -> tuple[int, int] | None:
    """Before the passes: the codes the clamp the passes make of activation `node` keeps, in its output
    `domain` (measured by running them: `PassRun.clamp_codes`), when its requant is dropped."""
    return reference.clamp_codes(node.name) if isinstance(reference, PassRun) else None


def one_code_clamp(reference: Any, node: Any) -> int | None:
    """Before the passes: the one code the clamp the passes make of activation `node` outputs whatever it
    reads (measured by running them: `PassRun.one_code`), or None."""
    return reference.one_code(node.name) if isinstance(reference, PassRun) else None


def passes_of(ep: Any) -> PassRun:
    """Before the passes: what `CortexMPassManager` does with `ep`, measured (when first asked) by
    running it on a copy."""

    def run() -> tuple[Any, Any]:
        from qflow.targets.cortex_m.pipeline import run_passes

        path = getattr(ep, "path", None)  # (qflow's fast .pt2 reader: the passes need the real program)
        program = load_program(path) if path is not None else ep
        return program, run_passes(program)

    return PassRun(run)
