"""Which int16 conv results the Arm backend reads unclamped: `RewriteConvPass` (executorch 1.5.1).

With int16 activations (a16w8), `RewriteConvPass` forks every 2-D / 3-D, depthwise or transposed
conv whose result an op computed on int32 reads: that op's RESCALE to int32 is moved onto the
conv's INT48 accumulator with the two scales combined, "avoiding unnecessary INT16 rounding and
clamping". The requantize the program declares after the conv — rounding to its int16 domain and
saturating at its range — never happens on that path, so an input whose conv result leaves the
calibrated range makes the consumer compute on a value the fake-quantized program never sees
(soundness campaign 00110-arm-a16w8, `conv3x3 → sub`: 2513 output LSB on the TOSA reference model).

Measured on the TOSA flatbuffer (tests/test_conv_widening.py, and by hand for the rest): the fork
happens for add, sub, mul, abs, maximum / minimum, the comparisons, sum, mean and the layer_norm and
softmax decompositions, directly or through a view, flatten, transpose or permute; not after a fused
relu, through a cat, for conv1d, nor for linear (lowered as a conv between views). (A conv times a
per-channel constant never gets here: FoldScalarMulIntoConvPass folds it before quantization.)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.fx as fx

from qflow.domain import Domain
from qflow.ir.copy_chains import real_range
from qflow.ir.fx_nodes import Consts, dequantized, qdq_domain, quant_args_domain, target_name
from qflow.ops import OpClass, base_name, classify
from qflow.targets.arm.rescale_fusion import SkippedRequant

#: a deviation of at most this many output LSB may be rounding (the backend rounds once where the
#: program rounds twice); beyond it the skipped clamp alone moves the output
_ROUNDING_LSB = 2.0

#: ops whose Arm lowering rescales an int16 operand to int32 (InsertRescaleInt32Pass, or a
#: decomposition into such ops)
WIDENED_BY = frozenset(
    """add add_ sub sub_ rsub mul mul_ sum mean abs maximum minimum eq ge gt le lt ne layer_norm native_layer_norm
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


class OperandReader:
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
            dq = isinstance(a, fx.Node) and classify(target_name(a)) is OpClass.DEQUANTIZE
            d = qdq_domain(a, self.consts) if dq else None  # type: ignore[arg-type]
        return d is not None and not d.is_float and d.dtype == "int16"

    def real(self, a: object) -> torch.Tensor | None:
        """The real values of a constant operand (a literal, a float constant, or a dequantized one)."""
        if isinstance(a, (int, float)):
            return torch.tensor(float(a))
        if not isinstance(a, fx.Node):
            return None
        if classify(target_name(a)) is OpClass.DEQUANTIZE and isinstance(a.args[0], fx.Node):
            codes = self.consts.tensor(a.args[0])
            return dequantized(codes, qdq_domain(a, self.consts)) if codes is not None else None
        t = self.consts.tensor(a)
        return t.to(torch.float64) if t is not None and t.is_floating_point() else None

    def user_input_domain(self, conv: fx.Node) -> Domain | None:
        """The conv input's domain when the input is the program's own: then every element takes
        every value of the domain, independently, and the conv's reach is exact."""
        a = conv.args[0]
        if self.folded or not isinstance(a, fx.Node) or classify(target_name(a)) is not OpClass.DEQUANTIZE:
            return None
        q = a.args[0]
        if not isinstance(q, fx.Node) or classify(target_name(q)) is not OpClass.QUANTIZE:
            return None
        x = q.args[0]
        if not isinstance(x, fx.Node) or x.op != "placeholder" or self.consts.tensor(x) is not None:
            return None
        d = qdq_domain(a, self.consts)
        return None if d.is_float or d.per_channel else d

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
    read = OperandReader(consts, folded)
    found = []
    for c in gm.graph.nodes:
        if _op(c) not in WIDENED_BY:
            continue
        for k, a in enumerate(c.args):
            conv = read.conv_behind(a)
            d = read.operand_domain(c, k) if conv is not None else None
            if conv is None or d is None:
                continue
            moves = clamp_moves_output(conv, c, k, read)
            found.append(
                SkippedRequant(
                    conv.name,
                    c.name,
                    k,
                    d,
                    f"with int16 activations the Arm backend's RewriteConvPass feeds {c.name} from {conv.name}'s "
                    "INT48 accumulator, rescaled straight to int32",
                    moves=moves[0] if moves else None,
                    moves_lsb=moves[1] if moves else None,
                )
            )
    return found


def conv_reach(conv: fx.Node, read: OperandReader) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The least and the greatest real result the conv reaches at each output element over its
    input's domain — exact, or None. Each element of a program input takes any value of its domain
    on its own, so an output element's extreme is Σ max(w·lo, w·hi) (min for the least) over the
    taps of its window that are not padding, plus the bias: the conv of a tensor of ones with those
    per-tap extremes as weights."""
    if _op(conv) not in ("conv2d", "conv3d", "convolution") or len(conv.args) < 2:
        return None
    if _op(conv) == "convolution":
        if len(conv.args) < 9 or conv.args[6]:
            return None  # transposed, or not the aten signature
        stride, padding, dilation, groups = (*conv.args[3:6], conv.args[8])
    else:  # conv2d / conv3d (input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)
        given = tuple(conv.args[3:7])
        stride, padding, dilation, groups = (*given, *(1, 0, 1, 1)[len(given) :])
    d, w = read.user_input_domain(conv), read.real(conv.args[1])
    bias = read.real(conv.args[2]) if len(conv.args) > 2 and conv.args[2] is not None else None
    x = conv.args[0].meta.get("val") if isinstance(conv.args[0], fx.Node) else None
    fn = {4: torch.nn.functional.conv2d, 5: torch.nn.functional.conv3d}.get(getattr(x, "ndim", 0))
    if d is None or w is None or fn is None or w.dim() != x.dim() or not all(isinstance(n, int) for n in x.shape):
        return None
    lo, hi = real_range(d)
    ones = torch.ones(tuple(x.shape), dtype=torch.float64)
    b = bias.flatten() if bias is not None else None
    try:
        top = fn(ones, torch.maximum(w * lo, w * hi), b, stride, padding, dilation, groups)
        bottom = fn(ones, torch.minimum(w * lo, w * hi), b, stride, padding, dilation, groups)
    except (RuntimeError, TypeError, ValueError):  # arguments this reading does not model
        return None
    return bottom, top


def _output_domain(node: fx.Node, read: OperandReader) -> Domain | None:
    """The domain `node` is requantized to when that requantized value is a program output."""
    qs = [u for u in node.users if classify(target_name(u)) is OpClass.QUANTIZE]
    if len(qs) != 1 or len(node.users) != 1:
        return None
    dqs = [u for u in qs[0].users if classify(target_name(u)) is OpClass.DEQUANTIZE]
    if not any(v.op == "output" for dq in dqs for v in dq.users):
        return None
    d = qdq_domain(qs[0], read.consts)
    return None if d.is_float or d.per_channel else d


def clamp_moves_output(conv: fx.Node, consumer: fx.Node, k: int, read: OperandReader) -> tuple[str, float] | None:
    """Proof that the skipped clamp moves a program output: `consumer` adds a constant to (or
    subtracts it from) the conv's result and is itself an output; the conv reads a program input,
    so its reach is exact. Returns the witness and how many output LSB it moves, or None."""
    op = _op(consumer).rstrip("_")
    if op not in ("add", "sub") or read.folded or consumer.kwargs.get("alpha", 1) != 1 or len(consumer.args) != 2:
        return None
    if read.source(consumer.args[k]) is not conv or (reach := conv_reach(conv, read)) is None:
        return None
    other = read.real(consumer.args[1 - k])
    d_conv, d_out = read.operand_domain(consumer, k), _output_domain(consumer, read)
    if other is None or d_conv is None or d_out is None or d_conv.per_channel:
        return None
    bottom, top = reach
    try:
        const = torch.broadcast_to(other, top.shape)
    except RuntimeError:
        return None  # the constant widens the result: not the conv's shape
    (c_lo, c_hi), (o_lo, o_hi) = real_range(d_conv), real_range(d_out)
    sign = -1.0 if (op, k) == ("sub", 1) else 1.0
    shift = -const if (op, k) == ("sub", 0) else const
    worst: tuple[float, int, float] = (0.0, 0, 0.0)
    for v in (bottom, top):
        program = (sign * v.clamp(c_lo, c_hi) + shift).clamp(o_lo, o_hi)
        backend = (sign * v + shift).clamp(o_lo, o_hi)
        off = (backend - program).abs() / float(d_out.scale)  # type: ignore[arg-type]
        i = int(off.argmax())
        worst = max(worst, (float(off.flatten()[i]), i, float(v.flatten()[i])))
    off, i, x = worst
    if off <= _ROUNDING_LSB:
        return None
    where = tuple(int(j) for j in torch.unravel_index(torch.tensor(i), top.shape))
    x_name = conv.args[0].args[0].args[0].name  # type: ignore[union-attr]
    return (
        f"an input in {x_name}'s domain (each element at the end its weight asks for) drives {conv.name}'s element "
        f"{list(where)} to {x:.6g}, past [{c_lo:.6g}, {c_hi:.6g}], the range its int16 requant clamps to; the backend "
        f"does not clamp it, so {consumer.name}, a program output, is {off:.0f} output LSB off the program",
        off,
    )


def before_calibration(gm: fx.GraphModule, annotated: Callable[[fx.Node], str | None]) -> list[tuple[str, str]]:
    """(conv, consumer) pairs of an annotated graph where RewriteConvPass will feed the consumer from
    the conv's accumulator: an int16 2-D / 3-D conv an op computed on int32 reads, directly or through
    views. A fact of the dtypes, known before calibration. `annotated`: a node's annotated output dtype."""
    pairs = []
    for c in gm.graph.nodes:
        if _op(c) not in WIDENED_BY:
            continue
        for a in dict.fromkeys(x for x in c.args if isinstance(x, fx.Node)):
            n: fx.Node | None = a
            for _ in range(16):
                if n is None or _op(n) in _CONVS or _op(n) not in _VIEWS or not n.args:
                    break
                n = n.args[0] if isinstance(n.args[0], fx.Node) else None
            if n is not None and _op(n) in _CONVS and getattr(n.meta.get("val"), "ndim", 0) >= 4:
                if annotated(n) == "int16":
                    pairs.append((n.name, c.name))
    return pairs
