"""Weight-only quantized linears a `.pte` computes in float: float32 weights that are integer codes.

ExecuTorch's LLM export with ``quantization.qmode=int8`` (and a torchao weight-only linear that no
delegate takes) constant-folds the cast of the int8 weight codes: the `.pte` holds them as float32
and multiplies each output channel by its scale after the product, on the portable kernels. No
tensor in it is quantized, yet the program is a quantized one: qflow says what it computes (the
dequantize realised by that multiply, exact up to float rounding) or, when no scale follows the
product, that it cannot tell where the scales went.
"""

from __future__ import annotations

from qflow.domain import Domain
from qflow.graph import DomainGraph, Obligation, ObligationKind
from qflow.ir.pte_program import Call, EValue, Plan, PteProgram
from qflow.ops import base_name

#: Kernels whose argument 1 is a weight.
_WEIGHTED = {"linear", "mm", "convolution"}
#: Below these a float tensor of whole numbers is more likely a hand-written filter than codes.
MIN_ELEMENTS, MIN_DISTINCT = 64, 8


def codes_dtype(prog: PteProgram, ev: EValue) -> str | None:
    """'int8' / 'int4' when the constant float tensor `ev` holds only integer codes of that range."""
    if ev.kind != "Tensor" or not ev.constant or not (ev.dtype or "").startswith("float") or ev.numel < MIN_ELEMENTS:
        return None
    data = prog.tensor_data(ev)
    if not data or not all(float(x).is_integer() and -128 <= x <= 127 for x in data):
        return None
    if len(set(data)) < MIN_DISTINCT:
        return None
    return "int4" if all(-8 <= x <= 7 for x in data) else "int8"


def check(prog: PteProgram, plan: Plan, dg: DomainGraph, names: dict[int, str]) -> None:
    """An info finding at each such kernel whose output a constant per-channel (or scalar) scale
    multiplies; a warning (unproven) at one that no scale follows."""
    readers: dict[int, list[Call]] = {}
    writer: dict[int, Call] = {}
    for call in plan.calls:
        if call.kind == "kernel":
            for t in plan.tensors(call.args):
                readers.setdefault(t, []).append(call)
            writer.update(dict.fromkeys(plan.tensors(call.returned), call))
    for call in plan.calls:
        if call.kind != "kernel" or base_name(call.name) not in _WEIGHTED or len(call.args) < 2:
            continue
        weight = _constant_through_copies(plan, writer, call.args[1])
        dtype = codes_dtype(prog, weight)
        outs = plan.tensors(call.returned)
        if dtype is None or not outs or outs[0] not in names:
            continue
        name, channels = names[outs[0]], weight.sizes[0] if weight.sizes else 1
        scale = _scale_after(plan, readers.get(outs[0], []), outs[0], channels)
        what = (f"{name} ({base_name(call.name)}) multiplies by a float32 {list(weight.sizes)} weight whose values "
                f"are all {dtype} codes: a weight-only quantized layer computed in float")  # fmt: skip
        if scale is not None:
            lo, hi = (-8, 7) if dtype == "int4" else (-128, 127)
            codes = Domain.run_time(dtype, f"the scale after {name}", lo, hi)  # (what the finding declares)
            detail = f"{what}, each output channel scaled after the product by {scale} (the dequantize, realised)."
            dg.oblige(
                Obligation(ObligationKind.STRUCTURAL, name, name, finding_kind="float-weight-codes", holds=True,
                           inform=True, expected=codes, detail=detail)
            )  # fmt: skip
        else:
            why = f"{what}, and no constant scale multiplies its output: where its scales went, the .pte does not say"
            dg.oblige_unbounded(name, "weight scales", "float-weight-codes", why, ())


def _constant_through_copies(plan: Plan, writer: dict[int, Call], idx: int) -> EValue:
    """The constant a weight argument is (through the transposes / views `to_edge` puts before an mm)."""
    seen = set()
    while idx not in seen and (call := writer.get(idx)) is not None and base_name(call.name) in _COPIES:
        seen.add(idx)
        idx = call.args[0]
    return plan.value(idx)


#: Kernels that copy a weight into another shape without changing its values.
_COPIES = {"permute_copy", "t_copy", "transpose_copy", "view_copy", "expand_copy", "et_view", "clone"}


def _scale_after(plan: Plan, readers: list[Call], out: int, channels: int) -> str | None:
    """The `mul` that scales `out` by a constant float of one value per output channel (or one), if any."""
    for call in readers:
        if base_name(call.name) != "mul" or len(call.args) < 2:
            continue
        other = [plan.value(i) for i in call.args[:2] if i != out]
        if len(other) == 1 and other[0].kind == "Tensor" and other[0].constant and other[0].numel in (1, channels):
            return f"{other[0].dtype}{list(other[0].sizes)} (instruction {call.index})"
    return None
