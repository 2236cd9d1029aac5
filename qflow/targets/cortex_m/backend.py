"""The Cortex-M target's hooks (`Target.backend`): the kernel reader and, lazily (it imports
the ExecuTorch Cortex-M backend), observe mode's capture of the pass manager's programs."""

from __future__ import annotations

from typing import Any

from qflow.targets.cortex_m.kernels import read_node, read_reference

__all__ = ["read_node", "read_partitions", "read_reference"]


def read_partitions(read: Any) -> Any:
    """Observe mode: a context in which every `CortexMPassManager.transform()` hands the program
    it returns, and the one it was given, to `read`; it yields the list of what `read` returned."""
    from qflow.targets.cortex_m.pipeline import read_after_passes

    return read_after_passes(read)
