"""Which int16 conv results the Arm backend reads unclamped: `RewriteConvPass` (executorch 1.5.1).

With int16 activations (a16w8), `RewriteConvPass` forks every 2-D / 3-D, depthwise or transposed
conv whose result an op computed on int32 reads: that op's RESCALE to int32 is moved onto the
conv's INT48 accumulator with the two scales combined, "avoiding unnecessary INT16 rounding and
clamping". The requantize the program declares after the conv — rounding to its int16 domain and
saturating at its range — never happens on that path, so an input whose conv result leaves the
calibrated range makes the consumer compute on a value the fake-quantized program never sees
(soundness campaign 00110-arm-a16w8, `conv3x3 → sub`: 2513 output LSB on the TOSA reference model).

Measured on the TOSA flatbuffer (tests/test_conv_widening.py): the fork happens for add, sub, abs,
maximum, sum, mean and the layer_norm decomposition, directly or through a view or permute; not for
mul (int16 × int16), a fused relu, cat, conv1d nor linear (lowered as a conv between views).
"""

from __future__ import annotations

import torch.fx as fx

from qflow.domain import Domain
from qflow.ir.fx_nodes import Consts, qdq_domain, quant_args_domain, target_name
from qflow.ops import OpClass, base_name, classify
from qflow.targets.arm.rescale_fusion import SkippedRequant

#: ops whose Arm lowering rescales an int16 operand to int32 (InsertRescaleInt32Pass, or a
#: decomposition into such ops); mul reads int16 operands as they are
WIDENED_BY = frozenset(
    """add add_ sub sub_ rsub sum mean abs maximum minimum eq ge gt le lt ne layer_norm native_layer_norm
    group_norm native_group_norm rms_norm var var_mean std softmax _softmax log_softmax _log_softmax""".split()
)
#: shape ops RewriteConvPass looks through (the fork sits before the layout permute)
_VIEWS = frozenset(
    """view view_copy _unsafe_view reshape permute permute_copy transpose transpose_copy squeeze squeeze_copy
    unsqueeze unsqueeze_copy flatten unflatten""".split()
)
_CONVS = frozenset({"conv2d", "conv3d", "convolution", "conv_transpose2d", "conv_transpose3d"})


def _op(node: fx.Node) -> str:
    return base_name(target_name(node)) if node.op == "call_function" else ""


class _Reader:
    """The value an operand reads once folded, and a conv's int16 input, in either form."""

    def __init__(self, consts: Consts, folded: bool) -> None:
        self.consts, self.folded = consts, folded

    def source(self, a: object) -> fx.Node | None:
        """The node whose result `a` carries: itself when folded, the op before its Q/DQ pair otherwise."""
        if not isinstance(a, fx.Node) or self.folded:
            return a if isinstance(a, fx.Node) else None
        if classify(target_name(a)) is not OpClass.DEQUANTIZE or not isinstance(q := a.args[0], fx.Node):
            return a
        if classify(target_name(q)) is OpClass.QUANTIZE and isinstance(q.args[0], fx.Node):
            return q.args[0]
        return q

    def operand_domain(self, consumer: fx.Node, k: int) -> Domain | None:
        if self.folded:
            iq = consumer.meta.get("input_qparams")
            qa = iq.get(k) if isinstance(iq, dict) else None
            return quant_args_domain(qa, consumer) if qa is not None else None
        a = consumer.args[k]
        if isinstance(a, fx.Node) and classify(target_name(a)) is OpClass.DEQUANTIZE:
            return qdq_domain(a, self.consts)
        return None

    def int16_conv(self, node: fx.Node) -> bool:
        """An a16w8 conv RewriteConvPass forks: int16 input, 2 or more spatial dims."""
        if _op(node) not in _CONVS or not node.args:
            return False
        val = node.meta.get("val")
        if getattr(val, "ndim", 0) < 4:
            return False  # conv1d: the legacy expansion narrows it (pass comment)
        if self.folded:
            iq = node.meta.get("input_qparams")
            d = quant_args_domain(iq[0], node) if isinstance(iq, dict) and 0 in iq else None
        else:
            a = node.args[0]
            d = (
                qdq_domain(a, self.consts)
                if isinstance(a, fx.Node) and classify(target_name(a)) is (OpClass.DEQUANTIZE)
                else None
            )
        return d is not None and not d.is_float and d.dtype == "int16"

    def conv_behind(self, a: object) -> fx.Node | None:
        """The int16 conv `a` reads, directly or through views only."""
        n = self.source(a)
        for _ in range(16):
            if n is None:
                return None
            if self.int16_conv(n):
                return n
            if _op(n) not in _VIEWS or not n.args:
                return None
            n = self.source(n.args[0])
        return None


def skipped_requants(gm: fx.GraphModule, consts: Consts, folded: bool) -> list[SkippedRequant]:
    """Each (int16 conv, consumer operand) the Arm backend wires to the conv's unclamped accumulator."""
    read = _Reader(consts, folded)
    found = []
    for c in gm.graph.nodes:
        if _op(c) not in WIDENED_BY:
            continue
        for k, a in enumerate(c.args):
            conv = read.conv_behind(a)
            d = read.operand_domain(c, k) if conv is not None else None
            if conv is None or d is None:
                continue
            found.append(
                SkippedRequant(
                    conv.name,
                    c.name,
                    k,
                    d,
                    f"with int16 activations the Arm backend's RewriteConvPass feeds {c.name} from {conv.name}'s "
                    "INT48 accumulator, rescaled straight to int32",
                )
            )
    return found
