"""Targets: one contract per backend (see `contract.py`), looked up by name.

Each backend's module is imported only when its target is asked for.
"""

from __future__ import annotations

import importlib

from qflow.errors import InputError
from qflow.targets.contract import Fusion, OpRule, Outcome, Target

#: Shipped targets and the module that defines each (`TARGET` in it).
_MODULES = {
    "generic": "qflow.targets.generic",
    "arm-tosa": "qflow.targets.arm",
    "xnnpack": "qflow.targets.xnnpack",
}
NAMES = tuple(_MODULES)
DEFAULT = "generic"


def get(name: str | Target | None) -> Target:
    """The target called `name` (None: the generic one)."""
    if isinstance(name, Target):
        return name
    key = DEFAULT if name is None else str(name)
    if key not in _MODULES:
        raise InputError(f"unknown target {key!r}; expected one of {', '.join(NAMES)}")
    return importlib.import_module(_MODULES[key]).TARGET


def for_backend(backend_id: str) -> Target | None:
    """The target of an ExecuTorch delegate's backend id (``TOSABackend``, ``XnnpackBackend``)."""
    for name in NAMES:
        t = get(name)
        if backend_id in t.backend_ids:
            return t
    return None


__all__ = ["DEFAULT", "NAMES", "Fusion", "OpRule", "Outcome", "Target", "for_backend", "get"]
