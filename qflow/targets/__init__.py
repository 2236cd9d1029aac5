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
    "cortex-m": "qflow.targets.cortex_m",
}
NAMES = tuple(_MODULES)
DEFAULT = "generic"


def get(name: str | Target | object | None) -> Target:
    """The target called `name` (None: the generic one); an ExecuTorch
    partitioner object names its backend's target."""
    if isinstance(name, Target):
        return name
    if name is not None and not isinstance(name, str):
        t = for_partitioner(name)
        if t is None:
            raise InputError(
                f"qflow has no target for partitioner {type(name).__name__}; name one of {', '.join(NAMES)}"
            )
        return t
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


def for_kernel(name: str) -> Target | None:
    """The target whose passes emit the kernel `name` (``cortex_m::quantized_add.out``), if any."""
    namespace = name.split("::", 1)[0] if "::" in name else ""
    for t in map(get, NAMES):
        if namespace in t.kernel_namespaces:
            return t
    return None


def for_partitioner(partitioner: object) -> Target | None:
    """The target an ExecuTorch partitioner lowers to (by its class or a base class)."""
    names = {c.__name__ for c in type(partitioner).__mro__}
    for name in NAMES:
        t = get(name)
        if names & t.partitioners:
            return t
    return None


__all__ = [
    "DEFAULT",
    "NAMES",
    "Fusion",
    "OpRule",
    "Outcome",
    "Target",
    "for_backend",
    "for_kernel",
    "for_partitioner",
    "get",
]
