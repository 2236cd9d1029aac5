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
    """The quantized_decomposed ops must exist before a Q/DQ program deserializes.
    torch defines them (torchao reuses torch's library), so reading a program needs
    none of torchao: its import costs a second and prints native-library noise."""
    try:
        import torch.ao.quantization.fx._decomposed  # noqa: F401
    except ImportError:  # a torch that no longer ships it: torchao's copy
        import torchao.quantization.pt2e.quantize_pt2e  # noqa: F401


def load_program(path: str | Path) -> torch.export.ExportedProgram:
    """Load a `torch.export.save`d program. torch.export.load reads the graph
    from its JSON serialization and tensors with the weights-only unpickler,
    so no arbitrary pickle in the file is executed."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{p}: is a directory, not a .pt2 program")
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    try:
        import zipfile

        if not zipfile.is_zipfile(p):
            raise InputError(f"{p}: not a .pt2 archive (torch.export.save writes a zip file)")
        _register_quant_ops()
        return torch.export.load(p)
    except InputError:
        raise
    except Exception as e:  # torch raises many kinds on a corrupt archive
        raise InputError(f"{p}: cannot load the exported program: {type(e).__name__}: {e}") from e
