"""Thin wrappers around the ExecuTorch Arm backend (executorch 1.5.1).

They produce the real graphs qflow analyses (converted aten Q/DQ, edge Q/DQ,
post-``FoldAndAnnotateQParamsPass``) and run lowered programs on the real TOSA
reference model, so findings can be confirmed numerically. Heavy imports live
here on purpose: the qflow core must stay importable without torch/executorch.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import torch
from executorch.backends.arm._passes.arm_pass_manager import (
    _ExportedProgramGraphPassAdapter,
    _registered_pass_insertions,
    register_pass_insertions_after,
    register_pass_insertions_before,
)
from executorch.backends.arm._passes.fold_qdq_with_annotated_qparams_pass import (
    FoldAndAnnotateQParamsPass,
)
from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
from executorch.backends.arm.quantizer import (
    QuantizationConfig,
    TOSAQuantizer,
    get_symmetric_quantization_config,
)
from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
from executorch.backends.arm.tosa.specification import (
    TosaLoweringContext,
    TosaSpecification,
)
from executorch.exir import (
    EdgeCompileConfig,
    EdgeProgramManager,
    to_edge,
    to_edge_transform_and_lower,
)
from executorch.exir.program._program import _remove_invalid_ops_for_not_decompose
from torch._ops import OpOverload
from torch.export import ExportedProgram
from torch.fx.passes.infra.pass_base import PassBase, PassResult
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
from torchao.quantization.pt2e.quantizer import Quantizer

__all__ = [
    "DEFAULT_SPEC",
    "ETHOSU_TARGET",
    "default_quantizer",
    "capture_after",
    "export_module",
    "fold_qparams",
    "lower",
    "partitioner_preserved_ops",
    "quantize",
    "run_tosa_reference",
    "to_edge_program",
]

DEFAULT_SPEC = "TOSA-1.0+INT"
ETHOSU_TARGET = "ethos-u85-256"
_EDGE_CONFIG = EdgeCompileConfig(_check_ir_validity=False)

Inputs = tuple[torch.Tensor, ...]


def default_quantizer(spec: str = DEFAULT_SPEC, config: QuantizationConfig | None = None) -> TOSAQuantizer:
    """Stock TOSAQuantizer, per-channel symmetric global config unless given one."""
    quantizer = TOSAQuantizer(TosaCompileSpec(spec))
    quantizer.set_global(config if config is not None else get_symmetric_quantization_config(is_per_channel=True))
    return quantizer


def export_module(model: torch.nn.Module, inputs: Inputs) -> torch.fx.GraphModule:
    """Strict export without the torch>=2.13 ``_guards_fn`` node.

    The Arm transform-for-annotation passes reject that ``call_module``
    (notes §6, seed 000), so guards are dropped when the API allows it.
    """
    ep = torch.export.export(model.eval(), inputs, strict=True)
    try:
        return ep.module(check_guards=False)
    except TypeError:  # older torch without check_guards
        return ep.module()


def quantize(
    model: torch.nn.Module,
    inputs: Inputs,
    spec: str = DEFAULT_SPEC,
    quantizer: Quantizer | None = None,
    config: QuantizationConfig | None = None,
) -> torch.fx.GraphModule:
    """PT2E post-training quantization: export → prepare → calibrate → convert.

    Returns the ``convert_pt2e`` GraphModule (aten Q/DQ, frozen int weights).
    ``config`` only applies to the default quantizer.
    """
    if quantizer is None:
        quantizer = default_quantizer(spec, config)
    prepared = prepare_pt2e(export_module(model, inputs), quantizer)
    with torch.no_grad():
        prepared(*inputs)
    return convert_pt2e(prepared)


def partitioner_preserved_ops(aten_ep: ExportedProgram, spec: str = DEFAULT_SPEC) -> list[OpOverload]:
    """Ops ``TOSAPartitioner`` keeps undecomposed in this program (e.g. quantized linear).

    ``to_edge_transform_and_lower`` asks the partitioner for these before
    decomposing, so the backend folds ``aten.linear`` rather than
    ``permute + mm/bmm`` (whose int16×int8 fake kernels fail after folding).
    """
    ops, check = TOSAPartitioner(TosaCompileSpec(spec)).ops_to_not_decompose(aten_ep)
    keep = set(_remove_invalid_ops_for_not_decompose(list(ops)))
    found = {
        n.target
        for n in aten_ep.graph.nodes
        if n.op == "call_function" and n.target in keep and (check is None or check(n))
    }
    return sorted(found, key=str)


def to_edge_program(
    converted: torch.fx.GraphModule, inputs: Inputs, spec: str | None = DEFAULT_SPEC
) -> ExportedProgram:
    """Re-export the converted module and move it to the edge dialect (Q/DQ kept).

    With ``spec``, the ops the TOSA partitioner would preserve stay intact
    (per op type, not per node), matching what the backend sees; ``spec=None``
    gives plain ``to_edge`` with full decomposition.
    """
    aten_ep = torch.export.export(converted, inputs, strict=True)
    preserve = partitioner_preserved_ops(aten_ep, spec) if spec is not None else []
    config = EdgeCompileConfig(_check_ir_validity=False, preserve_ops=preserve)
    return to_edge(aten_ep, compile_config=config).exported_program()


def fold_qparams(
    edge_ep: ExportedProgram,
    spec: str = DEFAULT_SPEC,
    preserve_partial_binary_tensor_qdq: bool = False,
) -> ExportedProgram:
    """Run the real ``FoldAndAnnotateQParamsPass`` on a deep copy of ``edge_ep``.

    The result carries ``meta["input_qparams"]``/``["output_qparams"]`` exactly
    as the backend sees them; ``edge_ep`` is left untouched. The pass runs
    inside a ``TosaLoweringContext`` because Arm passes may query the spec;
    ``spec`` only feeds that context (seed 000 runs the pass with defaults).
    """
    ep = copy.deepcopy(edge_ep)
    fold = FoldAndAnnotateQParamsPass(
        exported_program=ep,
        preserve_partial_binary_tensor_qdq=preserve_partial_binary_tensor_qdq,
    )
    tosa_spec = TosaSpecification.create_from_string(spec)
    with TosaLoweringContext(tosa_spec):
        result = _ExportedProgramGraphPassAdapter(fold)(ep)
    if result is None:
        raise RuntimeError("FoldAndAnnotateQParamsPass returned no result")
    return result.exported_program


class _CapturePass(PassBase):
    """Records a deep copy of the partition's ExportedProgram; changes nothing.
    Having an `exported_program` attribute makes the Arm pass adapter hand it
    the current program (arm_pass_manager._ExportedProgramGraphPassAdapter)."""

    __name__ = "QflowCapturePass"  # the Arm pass manager names passes by this

    def __init__(self, sink: list[ExportedProgram]) -> None:
        super().__init__()
        self.exported_program: ExportedProgram | None = None
        self.sink = sink

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        if self.exported_program is not None:
            self.sink.append(copy.deepcopy(self.exported_program))
        return PassResult(graph_module, False)


@contextlib.contextmanager
def capture_after(pass_type: type = FoldAndAnnotateQParamsPass) -> Iterator[list[ExportedProgram]]:
    """Within the block, every Arm lowering records each partition's program
    right after `pass_type` runs (by default the fold pass: the *folded* form,
    after the activation fusion that precedes it in the real pipeline)."""
    sink: list[ExportedProgram] = []
    capture = _CapturePass(sink)
    register_pass_insertions_after(pass_type, [capture])
    try:
        yield sink
    finally:
        after = _registered_pass_insertions[pass_type].after_passes
        after[:] = [p for p in after if p is not capture]


@contextlib.contextmanager
def read_after_fold(read: Callable[..., Any]) -> Iterator[list[Any]]:
    """Like `capture_after()`, but calls `read(program, "arm-tosa", reference)` on each partition's
    program right where the pass pipeline stands instead of deep-copying the program (weights included)
    to read it later: the copies were most of observe mode's overhead on the Arm suite. `reference` is
    the partition just before the fold pass, copied only when it holds control flow (whose constant
    operands' domains the fold drops), else None. `read` must not write to the program nor raise (it
    runs inside the lowering)."""
    sink: list[Any] = []
    before: list[ExportedProgram] = []

    class _Handed(PassBase):
        """Changes nothing; having `exported_program` makes the Arm pass adapter hand it the
        current program (arm_pass_manager._ExportedProgramGraphPassAdapter)."""

        def __init__(self) -> None:
            super().__init__()
            self.exported_program: Any = None

    class QflowBeforeFoldPass(_Handed):
        __name__ = "QflowBeforeFoldPass"  # the Arm pass manager names passes by this

        def call(self, graph_module: Any) -> PassResult:
            before.clear()
            ep = self.exported_program
            if ep is not None and any(_is_control_flow(n) for n in ep.graph_module.graph.nodes):
                before.append(copy.deepcopy(ep))
            return PassResult(graph_module, False)

    class QflowReadPass(_Handed):
        __name__ = "QflowReadPass"

        def call(self, graph_module: Any) -> PassResult:
            if self.exported_program is not None:
                sink.append(read(self.exported_program, "arm-tosa", before.pop() if before else None))
            return PassResult(graph_module, False)

    snapshot, capture = QflowBeforeFoldPass(), QflowReadPass()
    register_pass_insertions_before(FoldAndAnnotateQParamsPass, [snapshot])
    register_pass_insertions_after(FoldAndAnnotateQParamsPass, [capture])
    try:
        yield sink
    finally:
        inserted = _registered_pass_insertions[FoldAndAnnotateQParamsPass]
        inserted.before_passes[:] = [p for p in inserted.before_passes if p is not snapshot]
        inserted.after_passes[:] = [p for p in inserted.after_passes if p is not capture]


_CONTROL_FLOW = (torch.ops.higher_order.cond, torch.ops.higher_order.while_loop)


def _is_control_flow(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target in _CONTROL_FLOW


def lower(
    converted_or_ep: torch.fx.GraphModule | ExportedProgram,
    inputs: Inputs,
    spec: str = DEFAULT_SPEC,
    partitioner: Literal["tosa", "ethosu"] = "tosa",
) -> EdgeProgramManager:
    """Lower to the Arm backend with the stock partitioner.

    ``"ethosu"`` uses ``EthosUCompileSpec(ETHOSU_TARGET)`` (its own TOSA spec,
    so ``spec`` is ignored) and needs vela; its delegate cannot run on the
    TOSA reference model.
    """
    if isinstance(converted_or_ep, ExportedProgram):
        aten_ep = converted_or_ep
    else:
        aten_ep = torch.export.export(converted_or_ep, inputs, strict=True)
    part: Any
    if partitioner == "tosa":
        part = TOSAPartitioner(TosaCompileSpec(spec))
    elif partitioner == "ethosu":
        part = EthosUPartitioner(EthosUCompileSpec(ETHOSU_TARGET))
    else:
        raise ValueError(f"unknown partitioner {partitioner!r}")
    return to_edge_transform_and_lower(aten_ep, partitioner=[part], compile_config=_EDGE_CONFIG)


def run_tosa_reference(edge_program_manager: EdgeProgramManager, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Run the whole lowered program, dispatching delegates to the TOSA reference model.

    Non-delegated ops (boundary Q/DQ) run eagerly in PyTorch; the dispatch
    raises if no TOSABackend delegate was executed, so a silently fully-CPU
    program cannot pass for a backend result.
    """
    # Imported lazily: the Arm test utilities pull in optional toolchain modules.
    from executorch.backends.arm.test.runner_utils import TosaReferenceModelDispatch

    module = edge_program_manager.exported_program().module()
    with torch.no_grad(), TosaReferenceModelDispatch():
        out = module(*inputs)
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for t in out if isinstance(t, torch.Tensor)]
