"""The FX reader's folded form: the Arm fold pass's ``input_qparams`` / ``output_qparams`` on each node."""

from __future__ import annotations

import torch
import torch.fx as fx

from qflow.domain import FLOAT, Domain
from qflow.errors import InputError
from qflow.graph import Definition, DefKind, float_fact, integer_data
from qflow.ir import activations
from qflow.ir.fx_nodes import (
    Consts,
    arg_label,
    dequantized,
    dtype_name,
    is_float,
    quant_args_domain,
    target_name,
    tensor_args,
    val_dtype,
)
from qflow.ops import CASTS, OpClass, base_name
from qflow.targets import OpRule

#: The dtypes a folded partition keeps a quantized constant's codes in (weights, biases, scalar operands).
_CODE_DTYPES = frozenset({torch.int8, torch.int16, torch.int32})


def constant_reals(gm: fx.GraphModule, consts: Consts) -> dict[str, torch.Tensor]:
    """The real values of the integer constants a folded partition reads as codes, by node name: the fold
    pass keeps a quantized constant's codes and records its domain in each reader's ``input_qparams``.
    Only where every reader takes the constant as a whole argument and names one and the same domain:
    then those reals are what the program and the backend both multiply by (a weight's gain, a scalar
    operand's value), as the dequantize of the Q/DQ form says."""
    out: dict[str, torch.Tensor] = {}
    for node in gm.graph.nodes:
        if node.op not in ("placeholder", "get_attr") or not consts.is_constant(node) or not node.users:
            continue
        t = consts.tensor(node)
        if t is None or t.dtype not in _CODE_DTYPES:
            continue
        declared: set[Domain] = set()
        for user in node.users:
            iq = user.meta.get("input_qparams") if user.op == "call_function" else None
            at = [i for i, a in enumerate(user.args) if a is node]
            if not isinstance(iq, dict) or not at or any(i not in iq for i in at) or user.kwargs:
                break
            declared.update(quant_args_domain(iq[i], user) for i in at)
        else:
            if len(declared) == 1 and (real := dequantized(t, declared.pop())) is not None:
                out[node.name] = real
    return out


class FoldedReading:
    """`FxAdapter`'s reading of a folded node (a mixin: it uses the adapter's state)."""

    def _add_folded(self, node: fx.Node, cls: OpClass) -> None:
        iq = node.meta.get("input_qparams") or {}
        oq = node.meta.get("output_qparams") or {}
        if not isinstance(iq, dict) or not isinstance(oq, dict):
            raise InputError("input_qparams / output_qparams must be dicts of QuantArgs", node.name)
        declared = {int(k): quant_args_domain(v, node) for k, v in iq.items()}
        out = quant_args_domain(oq[min(oq)], node) if oq else None
        quantized = bool(declared) or out is not None
        rule = self._rule(node)
        if cls in (OpClass.PASSTHROUGH, OpClass.ACTIVATION) or (cls is OpClass.COMPUTE and rule is OpRule.CODE_COPY):
            self._add_identity(node, cls, out)
        elif cls is OpClass.COMPUTE:
            if rule is OpRule.ZP_ONLY and out is not None and 0 in declared:
                self._zp_only(node, declared[0], out, None)
            if out is not None and out.narrowed:
                self._add_narrowed(node, cls, out)
            elif out is not None:
                d = Definition(DefKind.FACT, out, real=False)
            elif declared and (through := activations.domain_through(node)) is not None:
                act, inferred = through  # seed 001's shape: the activation records the domain
                d = Definition(DefKind.FACT, inferred, real=False)
                activations.note_inferred(self.dg, node, act, inferred, self.target)
            elif declared:
                d = Definition(
                    DefKind.FREE,
                    blocking=True,
                    reason=f"{node.name} has input_qparams but no output_qparams: its output domain is not recorded",
                )
            elif is_float(node) or val_dtype(node) is None:
                d = float_fact()
            else:  # integer data the quantizer left alone (an int32 clamp → maximum/minimum, an index_put's add)
                d = integer_data(dtype_name(val_dtype(node)))
            if node.name not in self.dg.g:
                self._value(node, cls, d)
            if declared and not (first := declared[min(declared)]).is_float:  # (what the backend lowers next)
                self._oblige_measured(node, first.dtype)
        elif out is not None and self._integers_as_codes(node, out):
            self._value(node, cls, Definition(DefKind.FACT, out, real=False))
        elif not quantized and self._casts_a_mask_to_reals(node):
            self._add_cpu_float(node, OpClass.COMPUTE)
            return
        else:
            self._add_unknown(node, out)
            return
        for i, j, a in tensor_args(node):
            if a.name not in self.dg.g:
                continue
            if i in declared:
                # A DQ the fold kept (partial binary ops) feeds real numbers on
                # the declared grid, which the backend handles: compare grids.
                kept_dq = self._op_class(a) is OpClass.DEQUANTIZE
                self._use(a, node, arg_label(i, j), declared[i], None if kept_dq else False)
            elif cls is OpClass.COMPUTE and not quantized and _of_reals(self.dg.value(node.name).definition):
                self._use(a, node, arg_label(i, j), FLOAT, True)
            else:
                self.dg.add_use(a.name, node.name, arg_label(i, j))

    def _integers_as_codes(self, node: fx.Node, out: Domain) -> bool:
        """A cast of integer data no domain covers (an `arange`) whose output the fold marked quantized with
        scale 1 and zero point 0 (the Arm quantizer's annotation of integer tensors): each integer is its own
        code, in range, so the codes are exactly the values the program asks for."""
        x = node.args[0] if node.args else None
        dt = val_dtype(x) if isinstance(x, fx.Node) else None
        return (
            base_name(target_name(node)) in CASTS
            and isinstance(x, fx.Node)
            and self._domain_free(x)
            and dt is not None
            and not dt.is_floating_point
            and out.scale == 1.0
            and out.zero_point == 0
            and out.dtype == "int32"
            and dtype_name(dt) in ("int32", "int16", "int8", "uint8", "bool")
        )

    def _casts_a_mask_to_reals(self, node: fx.Node) -> bool:
        """A float cast of a mask or indices that only explicit quantize ops read (the Cortex-M passes keep
        ``x * (m > t).float()``'s quantize as a kernel of its own): its 0.0 / 1.0 are reals, whatever
        the fold did around it, because a quantize takes reals."""
        return (
            base_name(target_name(node)) in CASTS
            and is_float(node)
            and bool(node.args)
            and all(self._domain_free(a) for _, _, a in tensor_args(node))
            and bool(node.users)
            and all(self._op_class(u) is OpClass.QUANTIZE for u in node.users)
        )

    def _add_narrowed(self, node: fx.Node, cls: OpClass, out: Domain) -> None:
        """A compute op whose output_qparams narrow the code range (an activation
        fused by moving qmin): its rescale saturates only to the dtype range, so
        the narrowed range is a claim that some clamp must enforce."""
        self._value(node, cls, Definition(DefKind.FACT, out.widened(), real=False), claim=out)
        self._claim(node, out, kind="unenforced-narrow-range")

    # -- delegate boundaries (lowered programs) ------------------------------------


def _of_reals(d: Definition) -> bool:
    """Reals an op computes where nothing is quantized: floats, or the integers an integer output holds."""
    return d.kind is DefKind.FACT and d.real and d.domain is not None and (d.domain.is_float or d.domain.plain_integers)
