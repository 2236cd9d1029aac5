"""The Cortex-M flow as observe mode sees it: the program each `CortexMPassManager.transform()`
returns, with the edge program it was given (the Q/DQ program the passes rewrote, which declares
what the kernels' folded integers must realise: the `reference=` of the rewritten one).

The backend has no partitioner: the passes rewrite the whole program in place, so the one
"partition" observe mode proves is the rewritten program itself."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager

TARGET_NAME = "cortex-m"


@contextlib.contextmanager
def read_after_passes(read: Callable[..., Any]) -> Iterator[list[Any]]:
    """Within the block, every `CortexMPassManager.transform()` hands its result to
    `read(program, target, reference)` right after it returns (the given program is left as
    the passes left it: measured unmodified, so it is the reference); yields what `read`
    returned, one per call. `read` must not write to the programs nor raise."""
    sink: list[Any] = []
    original = CortexMPassManager.__dict__["transform"]

    def transform(self: CortexMPassManager) -> Any:
        given = self.exported_program
        result = original(self)
        sink.append(read(result, TARGET_NAME, given))
        return result

    transform.__doc__ = original.__doc__
    CortexMPassManager.transform = transform  # type: ignore[method-assign]
    try:
        yield sink
    finally:
        CortexMPassManager.transform = original  # type: ignore[method-assign]
