"""Turn what users hand qflow into an FX graph module (+ its ExportedProgram)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

from qflow.errors import InputError


def graph_module_of(obj: Any) -> tuple[fx.GraphModule, Any | None]:
    """(graph module, ExportedProgram or None) for a GraphModule, an
    ExportedProgram, an ExecuTorch EdgeProgramManager or a .pt2 path."""
    if isinstance(obj, (str, Path)):
        obj = load_program(obj)
    if isinstance(obj, fx.GraphModule):
        return obj, None
    if isinstance(obj, torch.export.ExportedProgram):
        return obj.graph_module, obj
    exported = getattr(obj, "exported_program", None)
    if callable(exported):  # EdgeProgramManager / ExecutorchProgramManager
        ep = exported()
        return ep.graph_module, ep
    raise InputError(
        f"qflow cannot analyse a {type(obj).__name__}: pass a torch.fx.GraphModule, "
        "a torch.export.ExportedProgram, an ExecuTorch EdgeProgramManager or a .pt2 path"
    )


def _register_quant_ops() -> None:
    """The quantized_decomposed ops must exist before a Q/DQ program deserializes."""
    try:
        import torchao.quantization.pt2e.quantize_pt2e  # noqa: F401
    except ImportError:  # torch's own copy of the op library
        import torch.ao.quantization.fx._decomposed  # noqa: F401


def load_program(path: str | Path) -> torch.export.ExportedProgram:
    """Load a `torch.export.save`d program. torch.export.load reads the graph
    from its JSON serialization and tensors with the weights-only unpickler,
    so no arbitrary pickle in the file is executed."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    try:
        import zipfile

        with open(p, "rb") as f:
            head = f.read(8)
        if p.suffix == ".pte" or head[4:6] == b"ET":
            raise InputError(
                f"{p}: an ExecuTorch program (.pte): `qflow check` / qflow.analyze read it as shipped; "
                "repair and --arm need the exported program (.pt2)"
            )
        if not zipfile.is_zipfile(p):
            raise InputError(f"{p}: not a .pt2 archive (torch.export.save writes a zip file)")
        _register_quant_ops()
        return torch.export.load(p)
    except InputError:
        raise
    except Exception as e:  # torch raises many kinds on a corrupt archive
        raise InputError(f"{p}: cannot load the exported program: {type(e).__name__}: {e}") from e
