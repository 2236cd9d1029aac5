"""Thin wrappers around the ExecuTorch XNNPACK backend (executorch 1.5.1).

Quantize with the stock ``XNNPACKQuantizer``, lower with ``XnnpackPartitioner``
and run the ``.pte`` on the real ExecuTorch runtime, so qflow's XNNPACK
contract is checked against what the runtime computes. XNNPACK validates a
delegate's quantization parameters when the program is *loaded*
(``xnn_define_*`` in the delegate's init), so a load refusal is reported with
the runtime's own log lines. Heavy imports live here on purpose: the qflow core
must stay importable without torch/executorch.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
    XNNPACKQuantizer,
    get_symmetric_quantization_config,
)
from executorch.exir import EdgeCompileConfig, EdgeProgramManager, ExecutorchProgramManager, to_edge_transform_and_lower
from torch.export import ExportedProgram
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
from torchao.quantization.pt2e.quantizer import Quantizer

__all__ = [
    "LoadError",
    "default_quantizer",
    "lower",
    "quantize",
    "run",
    "to_executorch",
]

Inputs = tuple[torch.Tensor, ...]


class LoadError(RuntimeError):
    """The ExecuTorch runtime refused to load the program; `log` holds what the runtime printed."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(message + (f"\n{log}" if log else ""))
        self.log = log


def default_quantizer(per_channel: bool = True) -> XNNPACKQuantizer:
    """Stock XNNPACKQuantizer with the static symmetric global config."""
    return XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=per_channel))


def quantize(model: torch.nn.Module, inputs: Inputs, quantizer: Quantizer | None = None) -> torch.fx.GraphModule:
    """PT2E post-training quantization: export → prepare → calibrate → convert."""
    ep = torch.export.export(model.eval(), inputs, strict=True)
    try:
        gm = ep.module(check_guards=False)
    except TypeError:  # older torch without check_guards
        gm = ep.module()
    prepared = prepare_pt2e(gm, quantizer if quantizer is not None else default_quantizer())
    with torch.no_grad():
        prepared(*inputs)
    return convert_pt2e(prepared)


def lower(
    converted_or_ep: torch.fx.GraphModule | ExportedProgram, inputs: Inputs, per_op: bool = False
) -> EdgeProgramManager:
    """Lower with the stock XnnpackPartitioner (``per_op``: one delegate per op, so a
    load refusal can be traced to its op with :func:`load_delegates`)."""
    if isinstance(converted_or_ep, ExportedProgram):
        aten_ep = converted_or_ep
    else:
        aten_ep = torch.export.export(converted_or_ep, inputs, strict=True)
    return to_edge_transform_and_lower(
        aten_ep,
        partitioner=[XnnpackPartitioner(per_op_mode=per_op)],
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    )


def to_executorch(edge: EdgeProgramManager) -> ExecutorchProgramManager:
    return edge.to_executorch()


@contextlib.contextmanager
def _captured_stderr() -> Iterator[list[str]]:
    """Collect what native code writes to fd 2 (ExecuTorch's ET_LOG) inside the block."""
    sink: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            yield sink
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            sink.append(tmp.read().decode(errors="replace"))


def load(buffer: bytes) -> None:
    """Load a program's ``forward`` on the runtime (delegates are initialised); raise :class:`LoadError`."""
    from executorch.runtime import Runtime

    with _captured_stderr() as log:
        try:
            Runtime.get().load_program(buffer).load_method("forward")
            error = None
        except Exception as exc:  # the pybinding raises RuntimeError / ValueError
            error = exc
    if error is not None:
        raise LoadError(f"ExecuTorch runtime refused to load the program: {error}", log[0].strip() if log else "")


def load_delegates(edge: EdgeProgramManager) -> dict[str, str]:
    """Load every XNNPACK delegate of `edge` on its own; the refused ones → the runtime's log."""
    gm = edge.exported_program().graph_module
    refused = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr" and node.target.startswith("lowered_module"):
            try:
                load(getattr(gm, node.target).buffer())
            except LoadError as exc:
                lines = [ln for ln in exc.log.splitlines() if ln.strip()]
                refused[node.target] = " | ".join(lines[-3:]) or str(exc)
    return refused


def run(program: ExecutorchProgramManager | bytes, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Load the program on the ExecuTorch runtime and run ``forward``.

    Raises :class:`LoadError` (with the runtime's log) when the runtime refuses
    to load the program or its delegates.
    """
    from executorch.runtime import Runtime

    buffer = program if isinstance(program, bytes) else program.buffer
    runtime = Runtime.get()
    with _captured_stderr() as log:
        try:
            method = runtime.load_program(buffer).load_method("forward")
        except Exception as exc:  # the pybinding raises RuntimeError / ValueError
            method, error = None, exc
    text = log[0].strip() if log else ""
    if method is None:
        raise LoadError(f"ExecuTorch runtime refused to load the program: {error}", text)
    out = method.execute(list(inputs))
    return [t for t in out if isinstance(t, torch.Tensor)]


@dataclass(frozen=True)
class Delegation:
    """What the partitioner did: ops inside XNNPACK delegates and ops left on the CPU."""

    delegates: int
    cpu_ops: tuple[str, ...]


def delegation(edge: EdgeProgramManager) -> Delegation:
    """Count XNNPACK delegates and list the non-Q/DQ ops left outside them."""
    gm = edge.exported_program().graph_module
    delegates = 0
    cpu: list[str] = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        name = getattr(node.target, "__name__", str(node.target))
        if "executorch_call_delegate" in name:
            delegates += 1
        elif "quantize_per" not in name and name not in {"getitem"}:
            cpu.append(name)
    return Delegation(delegates, tuple(cpu))
