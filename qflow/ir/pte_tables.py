"""The flatbuffer tables of an ExecuTorch program (.pte) and of the delegate payloads whose
schemas a target registers (`register_schema`), read with Python readers flatc generates from
the schemas the ExecuTorch wheel ships.

Torch-free and backend-blind: the .pte reader (`qflow.ir.pte_program`) and a backend's payload
reader (e.g. `qflow.targets.xnnpack.payload`) both read through it.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from qflow.errors import InputError

# --------------------------------------------------------------------------------------------

PROGRAM_NS = "qflow_fb_program"
_GEN_LOCK = threading.Lock()
_GEN_DIR: Path | None = None

#: namespace qflow generates → its schema files: (file name, path under the ExecuTorch package,
#: the namespace the schema declares, renamed so nothing collides with ExecuTorch's own modules).
_SCHEMAS: dict[str, tuple[tuple[str, tuple[str, ...], str], ...]] = {
    PROGRAM_NS: (
        ("program.fbs", ("schema", "program.fbs"), "executorch_flatbuffer"),
        ("scalar_type.fbs", ("schema", "scalar_type.fbs"), "executorch_flatbuffer"),
    ),
}
_GENERATED: set[str] = set()


def register_schema(namespace: str, path: tuple[str, ...], declared: str) -> None:
    """A backend's payload schema: `path` under the ExecuTorch package, declaring namespace
    `declared`; its readers are generated as package `namespace` on first use."""
    _SCHEMAS.setdefault(namespace, ((path[-1], path, declared),))


def executorch_dir() -> Path:
    """The installed ExecuTorch package directory, found without importing it."""
    spec = importlib.util.find_spec("executorch")
    locs = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locs:
        raise InputError("reading a .pte needs the ExecuTorch wheel (its schemas and flatc): pip install executorch")
    return Path(locs[0])


def _flatc() -> str:
    shipped = executorch_dir() / "data" / "bin" / "flatc"
    if shipped.is_file():
        return str(shipped)
    found = shutil.which("flatc")
    if found is None:
        raise InputError("reading a .pte needs flatc (shipped in the ExecuTorch wheel under data/bin)")
    return found


def generated(namespace: str) -> Any:
    """The Python package flatc generates for one of the shipped schemas (`PROGRAM_NS`:
    program.fbs, or a registered payload schema), generated on first use into a private directory."""
    global _GEN_DIR
    with _GEN_LOCK:
        if namespace not in _GENERATED:
            if namespace not in _SCHEMAS:
                raise InputError(f"no flatbuffer schema is registered for {namespace}")
            if _GEN_DIR is None:
                _GEN_DIR = Path(tempfile.mkdtemp(prefix="qflow-flatc-"))
                atexit.register(shutil.rmtree, _GEN_DIR, ignore_errors=True)
                sys.path.append(str(_GEN_DIR))
            src = _GEN_DIR / "schemas" / namespace
            src.mkdir(parents=True)
            et = executorch_dir()
            for name, path, declared in _SCHEMAS[namespace]:
                full = et.joinpath(*path)
                if not full.is_file():
                    raise InputError(f"the ExecuTorch wheel has no {full}: cannot read .pte files with it")
                text = full.read_text(encoding="utf-8")
                (src / name).write_text(
                    re.sub(rf"\bnamespace\s+{declared}\s*;", f"namespace {namespace};", text), "utf-8"
                )
            cmd = [_flatc(), "--python", "-o", str(_GEN_DIR), str(src / _SCHEMAS[namespace][0][0])]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise InputError(f"flatc could not generate the {namespace} readers: {done.stderr.strip()}")
            importlib.invalidate_caches()
            _GENERATED.add(namespace)
    return importlib.import_module(namespace)


def table(namespace: str, name: str) -> Any:
    """The generated accessor class `name` of a namespace."""
    return getattr(importlib.import_module(f"{generated(namespace).__name__}.{name}"), name)


def union_names(namespace: str, union: str) -> dict[int, str]:
    """Union type code → member name."""
    cls = table(namespace, union)
    return {v: k for k, v in vars(cls).items() if isinstance(v, int) and not k.startswith("_")}


def as_table(namespace: str, name: str, tab: Any) -> Any:
    """A union member (a flatbuffers Table) viewed as table class `name`."""
    obj = table(namespace, name)()
    obj.Init(tab.Bytes, tab.Pos)
    return obj
