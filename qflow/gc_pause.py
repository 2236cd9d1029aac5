"""Pause Python's cyclic garbage collector around qflow's own work.

Building a domain graph and its z3 terms allocates many small, long-lived
objects; each full collection walks all of them, which measured 25–30 % of
qflow's time on 10k–100k-node graphs. qflow creates no reference cycles that
need collecting mid-analysis, so the collector is paused and restored (and
never re-enabled if the caller had disabled it).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
