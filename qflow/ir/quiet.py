"""Keep the libraries qflow drives quiet while it drives them.

torch, torchao and ExecuTorch log and warn on paths qflow takes for every user
(torchao's optional CUDA kernels at import, pytree deprecations inside the Arm
passes' deep copies, torch.export's logged traceback before it raises): noise a
qflow user cannot act on, which buries qflow's own one-line answer. Inside
qflow's calls their log records and warnings go to the ``qflow.libraries``
logger at DEBUG instead (``qflow -v``, or the caller's own logging config,
shows them); outside qflow's calls nothing about the user's process changes.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections.abc import Iterator

# torch configures its loggers' handlers when it is imported: imported here, before any
# swap, so what it installs is what a swap saves and restores
import torch  # noqa: F401

#: The loggers of the libraries qflow drives (their children propagate to them).
LIBRARIES = ("torch", "torchao", "executorch")
log = logging.getLogger("qflow.libraries")

_state = threading.local()


class _Forward(logging.Handler):
    """Keeps a library's record and hands it to the ``qflow.libraries`` logger at DEBUG."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        log.debug("%s %s: %s", record.levelname, record.name, record.getMessage(), exc_info=record.exc_info)


@contextlib.contextmanager
def library_noise() -> Iterator[list[logging.LogRecord]]:
    """Route the libraries' log records and warnings to ``qflow.libraries`` (DEBUG)
    for the duration; yields the records (a reader may name the cause of a failure
    from them). Nested uses share the outermost's. Errors still reach qflow, as exceptions."""
    outer = getattr(_state, "forward", None)
    if outer is not None:
        yield outer.records
        return
    forward = _state.forward = _Forward()
    saved = []
    # torch gives some of its child loggers (torch.export, torch._dynamo, ...) handlers of their own
    names = [n for n in list(logging.root.manager.loggerDict) if n.split(".", 1)[0] in LIBRARIES]
    for name in sorted({*LIBRARIES, *names}):
        lg = logging.getLogger(name)
        if name not in LIBRARIES and not lg.handlers:
            continue  # (it propagates to one that is swapped)
        saved.append((lg, lg.handlers[:], lg.propagate, lg.level))
        lg.handlers, lg.propagate = [forward], False
        if lg.level == logging.NOTSET or lg.level > logging.DEBUG:
            lg.setLevel(logging.DEBUG if log.isEnabledFor(logging.DEBUG) else logging.WARNING)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield forward.records
        for w in caught:
            log.debug("%s: %s (%s:%s)", w.category.__name__, w.message, w.filename, w.lineno)
    finally:
        for lg, handlers, propagate, level in saved:
            # a library imported during the call may have configured its own logger: keep that
            added = [h for h in lg.handlers if h is not forward and h not in handlers]
            lg.handlers, lg.propagate = handlers + added, propagate
            lg.setLevel(level)
        _state.forward = None
