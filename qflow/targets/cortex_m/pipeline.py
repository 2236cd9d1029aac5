"""The Cortex-M flow as observe mode sees it: the program each `CortexMPassManager.transform()`
returns, with the edge program it was given (the Q/DQ program the passes rewrote, which declares
what the kernels' folded integers must realise: the `reference=` of the rewritten one).

The backend has no partitioner: the passes rewrite the whole program in place, so the one
"partition" observe mode proves is the rewritten program itself."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from executorch.backends.cortex_m.edge_compile_config import cortex_m_edge_compile_config
from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer
from executorch.backends.cortex_m.target_config import CortexM, CortexMTargetConfig
from executorch.exir import EdgeProgramManager, to_edge
from executorch.exir.dialects.edge._ops import EdgeOpOverload
from torch.export import ExportedProgram
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

TARGET_NAME = "cortex-m"


@contextlib.contextmanager
def read_after_passes(read: Callable[..., Any]) -> Iterator[list[Any]]:
    """Within the block, every `CortexMPassManager.transform()` hands its result to
    `read(program, target, reference)` right after it returns (the given program is left as
    the passes left it: measured unmodified, so it is the reference); yields what `read`
    returned, one per call. `read` must not write to the programs nor raise."""
    sink: list[Any] = []
    original = CortexMPassManager.__dict__["transform"]

    def transform(self: CortexMPassManager) -> Any:
        given = self.exported_program
        result = original(self)
        sink.append(read(result, TARGET_NAME, given))
        return result

    transform.__doc__ = original.__doc__
    CortexMPassManager.transform = transform  # type: ignore[method-assign]
    try:
        yield sink
    finally:
        CortexMPassManager.transform = original  # type: ignore[method-assign]


def quantize(model: torch.nn.Module, samples: Sequence[tuple[torch.Tensor, ...]]) -> torch.fx.GraphModule:
    """The stock `CortexMQuantizer` PT2E flow, calibrated on every sample. CMSIS-NN's convolutions
    are NHWC: the quantizer annotates only channels-last convolutions, so 4-d inputs (and the
    model) are made channels-last, as the backend's own tests do."""
    model = model.eval().to(memory_format=torch.channels_last)
    samples = [channels_last(s) for s in samples]
    exported = torch.export.export(model, samples[0], strict=True).module(check_guards=False)
    prepared = prepare_pt2e(exported, CortexMQuantizer())
    with torch.no_grad():
        for s in samples:
            prepared(*s)
    return convert_pt2e(prepared)


def lower(
    model: torch.nn.Module | ExportedProgram, example: tuple[torch.Tensor, ...], cpu: str = "M55"
) -> tuple[ExportedProgram, ExportedProgram]:
    """(the edge program the passes are given, the program `CortexMPassManager` returns for `cpu`)."""
    ep = model if isinstance(model, ExportedProgram) else torch.export.export(model, channels_last(example))
    edge = to_edge(ep, compile_config=cortex_m_edge_compile_config())
    given = edge.exported_program()
    config = CortexMTargetConfig(cpu=CortexM[cpu])
    return given, CortexMPassManager(copy.deepcopy(given), target_config=config).transform()


def run_passes(ep: ExportedProgram, cpu: str = "M55") -> ExportedProgram:
    """A copy of `ep` (a Q/DQ program, ATen or already edge dialect) as `CortexMPassManager`
    rewrites it for `cpu`."""
    if any(isinstance(n.target, EdgeOpOverload) for n in ep.graph.nodes):
        config = CortexMTargetConfig(cpu=CortexM[cpu])
        return CortexMPassManager(copy.deepcopy(ep), target_config=config).transform()
    return lower(copy.deepcopy(ep), (), cpu)[1]


def to_pte(program: ExportedProgram) -> bytes:
    """The .pte of a program after `CortexMPassManager` (what the device runs)."""
    edge = EdgeProgramManager(copy.deepcopy(program), compile_config=cortex_m_edge_compile_config())
    return edge.to_executorch().buffer


def run(program: ExportedProgram, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """`program` on the Cortex-M dialect's reference kernels (the `cortex_m::` ops' Python
    implementations, run by the program's own module) and the portable aten kernels."""
    with torch.no_grad():
        out = program.module()(*channels_last(tuple(inputs)))
    return [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)]


def channels_last(xs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return tuple(x.to(memory_format=torch.channels_last) if x.dim() == 4 else x for x in xs)
