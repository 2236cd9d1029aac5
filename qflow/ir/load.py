"""Turn what users hand qflow into an FX graph module (+ its ExportedProgram)."""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

from qflow.errors import InputError
from qflow.ir import pt2
from qflow.ir.quiet import library_noise

log = logging.getLogger(__name__)


def graph_module_of(obj: Any) -> tuple[fx.GraphModule, Any | None]:
    """(graph module, ExportedProgram or None) for a GraphModule, an
    ExportedProgram, an ExecuTorch EdgeProgramManager, an ETRecord (its program
    from before to_edge) or a .pt2 / ETRecord path (read for checking: see
    `read_program`)."""
    if isinstance(obj, (str, Path)):
        obj = read_program(obj)
    if hasattr(obj, "edge_dialect_program") and hasattr(obj, "exported_program"):  # an ETRecord
        obj = etrecord_program(obj, "the ETRecord")
    if isinstance(obj, fx.GraphModule):
        return obj, None
    if isinstance(obj, (torch.export.ExportedProgram, pt2.SavedProgram)):
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


def is_pte(path: str | Path) -> bool:
    """An ExecuTorch program (.pte, or a file with its flatbuffer identifier "ET..")."""
    p = Path(path)
    if p.suffix == ".pte":
        return True
    try:
        with open(p, "rb") as f:
            return f.read(8)[4:6] == b"ET"
    except OSError:
        return False


def read_program(path: str | Path) -> Any:
    """A `torch.export.save`d program read for checking: qflow's own reader
    (`qflow.ir.pt2`, no torch._dynamo: about half the time of a
    check) when it understands everything in the archive, else the real
    ExportedProgram from `load_program`. Both carry the same graph; only the
    latter can be run, lowered or repaired."""
    _check_path(Path(path))
    if is_etrecord(path):
        return read_etrecord(path)
    _register_quant_ops()
    try:
        return pt2.read(path)
    except Exception as e:  # anything the fast reader does not read: torch reads it (or says why not)
        log.debug("%s: read with torch.export.load (%s: %s)", path, type(e).__name__, e)
    return load_program(path)


def is_etrecord(path: str | Path) -> bool:
    """An ExecuTorch ETRecord (the debug record `generate_etrecord=True` writes: a zip file with an
    ``ETRECORD_V0`` entry beside the programs it keeps)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            return "ETRECORD_V0" in z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def read_etrecord(path: str | Path) -> torch.export.ExportedProgram:
    """The program an ETRecord keeps from before to_edge: what its `.pte` was lowered from, written by
    ExecuTorch itself (`to_edge_transform_and_lower(..., generate_etrecord=True)`, export_llm's
    `debug.generate_etrecord=true`), so a `.pte` whose export kept no .pt2 can still be checked
    against its program. Unpickles like `load_program`: trusted sources only."""
    from executorch.devtools.etrecord import parse_etrecord

    with library_noise():
        try:
            record = parse_etrecord(str(path))
        except Exception as e:  # (a damaged record: ExecuTorch raises many kinds)
            raise InputError(f"{path}: cannot read the ETRecord: {type(e).__name__}: {e}") from e
    return etrecord_program(record, str(path))


def etrecord_program(record: Any, where: str) -> torch.export.ExportedProgram:
    """An ETRecord's program from before to_edge (its edge program is the lowered one: no reference)."""
    if record.exported_program is None:
        raise InputError(
            f"{where}: the ETRecord keeps no program from before to_edge (it is written with one by "
            "to_edge_transform_and_lower(..., generate_etrecord=True))"
        )
    return record.exported_program


def _check_path(p: Path) -> None:
    """InputError for what is no .pt2 archive at all."""
    if p.is_dir():
        raise InputError(f"{p}: is a directory, not a .pt2 program")
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    if is_pte(p):
        raise InputError(
            f"{p}: an ExecuTorch program (.pte): `qflow check` / qflow.analyze read it as shipped; "
            "repair and --arm need the exported program (.pt2)"
        )
    if not zipfile.is_zipfile(p):
        raise InputError(f"{p}: not a .pt2 archive (torch.export.save writes a zip file)")


def load_program(path: str | Path) -> torch.export.ExportedProgram:
    """Load a `torch.export.save`d program with torch.export.load: the real
    ExportedProgram, which repair and lowering need. torch reads the graph from
    its JSON serialization and raw tensors from their bytes, but it unpickles
    what the archive pickled (tensor subclasses, objects; its sample inputs
    retry without weights_only): load only programs from a trusted source."""
    p = Path(path)
    _check_path(p)
    with library_noise() as records:  # torch logs its traceback, then raises "see the warnings above"
        try:
            _register_quant_ops()
            return torch.export.load(p)
        except InputError:
            raise
        except Exception as e:  # torch raises many kinds on a corrupt archive
            causes = [r.exc_info[1] for r in records if r.exc_info and r.exc_info[1] is not None]
            cause = causes[-1] if causes else e
            what = str(cause).strip().splitlines()[-1] if str(cause).strip() else ""
            raise InputError(f"{p}: cannot load the exported program: {type(cause).__name__}: {what}") from e


def form_mismatch(gm: fx.GraphModule, form: str | None) -> str | None:
    """Why reading `gm` in the IR form `form` would contradict what the graph holds, or None.

    An override reads the same nodes under other rules; on a graph of another form
    it would prove what the backend miscomputes (seed 000 read as `lowered` runs its
    requant on the CPU in float; read as `folded` it has no qparams at all), so a
    form the graph does not have is refused instead: a flag never makes a proof."""
    if form is None:
        return None
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    qdq = any("quantize_per_" in str(getattr(n.target, "__name__", n.target)) for n in calls)
    qparams = any("input_qparams" in n.meta or "output_qparams" in n.meta for n in gm.graph.nodes)
    delegate = any("executorch_call_delegate" in str(getattr(n.target, "__name__", n.target)) for n in calls)
    edge = any("EdgeOpOverload" in type(n.target).__name__ for n in calls)
    if form == "folded" and not qparams:
        return (
            "--form folded: no node carries the Arm fold pass's input_qparams/output_qparams (a .pt2 file "
            "cannot: torch.export.save drops them), so there is no folded graph to read; "
            "to check the folded partitions, lower it with --arm TOSA_SPEC"
        )
    if form == "lowered" and not (delegate or edge):
        return (
            "--form lowered: the graph calls no delegate and is not in the edge dialect, so it is not the "
            "output of to_edge_transform_and_lower; read as lowered, its quantized ops would run on the "
            "CPU in float and hide what the backend computes"
        )
    if form == "qdq" and qparams and not qdq:
        return "--form qdq: the graph has no quantize/dequantize node; its domains are Arm qparams (folded form)"
    return None
