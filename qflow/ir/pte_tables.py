"""The flatbuffer tables of an ExecuTorch program (.pte) and of the XNNPACK payload,
read with Python readers flatc generates from the schemas the ExecuTorch wheel ships.

Torch-free and backend-blind: the .pte reader (`qflow.integrations.pte`) and the
XNNPACK payload check (`qflow.targets.xnnpack.payload`) both read through it.
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
XNNPACK_NS = "qflow_fb_xnnpack"
_GEN_LOCK = threading.Lock()
_GEN_DIR: Path | None = None


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
    """The Python package flatc generates for one of the shipped schemas
    (``qflow_fb_program``: program.fbs; ``qflow_fb_xnnpack``: the XNNPACK
    delegate's schema.fbs), generated on first use into a private directory."""
    global _GEN_DIR
    with _GEN_LOCK:
        if _GEN_DIR is None:
            et = executorch_dir()
            out = Path(tempfile.mkdtemp(prefix="qflow-flatc-"))
            atexit.register(shutil.rmtree, out, ignore_errors=True)
            src = out / "schemas"
            src.mkdir()
            schemas = {
                "program.fbs": (et / "schema" / "program.fbs", "executorch_flatbuffer", PROGRAM_NS),
                "scalar_type.fbs": (et / "schema" / "scalar_type.fbs", "executorch_flatbuffer", PROGRAM_NS),
                "xnnpack.fbs": (
                    et / "backends" / "xnnpack" / "serialization" / "schema.fbs",
                    "fb_xnnpack",
                    XNNPACK_NS,
                ),
            }
            for name, (path, ns, new) in schemas.items():
                if not path.is_file():
                    raise InputError(f"the ExecuTorch wheel has no {path}: cannot read .pte files with it")
                text = path.read_text(encoding="utf-8")
                (src / name).write_text(re.sub(rf"\bnamespace\s+{ns}\s*;", f"namespace {new};", text), "utf-8")
            cmd = [_flatc(), "--python", "-o", str(out), str(src / "program.fbs"), str(src / "xnnpack.fbs")]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise InputError(f"flatc could not generate the .pte readers: {done.stderr.strip()}")
            sys.path.append(str(out))
            _GEN_DIR = out
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
