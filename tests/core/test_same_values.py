"""A difference of one value with itself: `x - mean(x)` over one element, as Arm decomposes a LayerNorm
over one element (a reshape, a sum over the element, a product with 1/n = 1.0, requantized into x's own
domain). Its variance is then exactly 0 and the int16 rsqrt TABLE is read at one code
(tests/test_unvalidated_lowering.py measures that program on the TOSA reference model). Here, on
hand-built Q/DQ graphs, the difference is [0, 0], and only where it is: other domains, a permute, a
factor that is not exactly 1, more than one element or a wrong code on the way keep the interval."""

from __future__ import annotations

import pytest

from qflow import ranges
from qflow.domain import Domain
from qflow.graph import Definition, DefKind, DomainGraph, Value
from qflow.ops import OpClass

X = Domain.quantized("int16", 1 / 4096, 0, -32767, 32767)
OTHER = Domain.quantized("int16", 1 / 2048, 0, -32767, 32767)
ONE = Domain.quantized("int16", 1 / 32767, 0, -32767, 32767)
Q, DQ = "quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default"


def _centered(mean_domain=X, reshape="aten.view_copy.default", factor=1.0, elements=1, second_input_domain=X):
    """x (a delegate input, read as X) - mean(x), the mean as reshape → sum → × factor → requantize."""
    dg = DomainGraph(form="qdq")

    def add(name, target, cls, *ins, domain=None, numel=4, values=None):
        d = Definition(DefKind.FACT, domain) if domain is not None else Definition(DefKind.FREE, reason="op")
        dg.add_value(Value(name, target, cls, d, numel=numel, values=values))
        for k, src in enumerate(ins):
            dg.add_use(src, name, f"args[{k}]")

    add("x", "placeholder", OpClass.UNKNOWN, domain=X, numel=4 * elements)
    add("a", DQ, OpClass.DEQUANTIZE, "x", domain=X, numel=4 * elements)
    add("b", DQ, OpClass.DEQUANTIZE, "x", domain=second_input_domain, numel=4 * elements)
    add("r", reshape, OpClass.PASSTHROUGH, "b", numel=4 * elements)
    add("qr", Q, OpClass.QUANTIZE, "r", domain=second_input_domain, numel=4 * elements)
    add("dr", DQ, OpClass.DEQUANTIZE, "qr", domain=second_input_domain, numel=4 * elements)
    add("s", "aten.sum.dim_IntList", OpClass.COMPUTE, "dr")
    add("qs", Q, OpClass.QUANTIZE, "s", domain=X)
    add("ds", DQ, OpClass.DEQUANTIZE, "qs", domain=X)
    add("c", "placeholder", OpClass.CONSTANT)
    add("dc", DQ, OpClass.DEQUANTIZE, "c", domain=ONE, numel=1, values=(factor, factor))
    add("m", "aten.mul.Tensor", OpClass.COMPUTE, "ds", "dc")
    add("qm", Q, OpClass.QUANTIZE, "m", domain=mean_domain)
    add("dm", DQ, OpClass.DEQUANTIZE, "qm", domain=mean_domain)
    add("d", "aten.sub.Tensor", OpClass.COMPUTE, "a", "dm", numel=4 * elements)
    return dg


def test_x_minus_its_mean_over_one_element_is_zero() -> None:
    assert ranges.value_ranges(_centered())["d"] == (0.0, 0.0)


def test_a_value_minus_itself_is_zero() -> None:
    dg = _centered()
    dg.add_value(Value("z", "aten.sub.Tensor", OpClass.COMPUTE, Definition(DefKind.FREE, reason="op"), numel=4))
    dg.add_use("a", "z", "args[0]")
    dg.add_use("a", "z", "args[1]")
    assert ranges.value_ranges(dg)["z"] == (0.0, 0.0)


@pytest.mark.parametrize(
    "why, kwargs",
    [
        ("the mean requantized into another domain", {"mean_domain": OTHER}),
        ("x read in two domains", {"second_input_domain": OTHER}),
        ("a permute on the way (other elements)", {"reshape": "aten.permute_copy.default"}),
        ("a factor 1/n that is not exactly 1", {"factor": 0.99997}),
        ("a mean over two elements", {"elements": 2}),
    ],
)
def test_the_relation_holds_only_for_one_value(why: str, kwargs: dict) -> None:
    assert ranges.value_ranges(_centered(**kwargs))["d"] != (0.0, 0.0), why


def test_a_wrong_code_on_the_way_breaks_it() -> None:
    """The backend's codes of the mean (`given`: what it really writes) are not x's."""
    dg = _centered()
    assert ranges.value_ranges(dg, {"qs": (-1.0, 1.0)})["d"] != (0.0, 0.0)


def test_a_wrong_read_of_the_input_on_one_side_breaks_it() -> None:
    """The input read wrong by one of its two dequantizes only: the two sides are other reals."""
    assert ranges.value_ranges(_centered(), {"a": (-1.0, 1.0)})["d"] != (0.0, 0.0)


# -- an op that is the identity on what its input holds (campaign case 00081-arm-custom) -------------

NONNEG = Domain.quantized("int8", 0.0019, -128, -128, 127)  # reals [0, 0.48]
SIGNED = Domain.quantized("int8", 0.0019, 0, -128, 127)  # reals [-0.24, 0.24]
ABS, RELU, HARDTANH = "aten.abs.default", "aten.relu.default", "aten.hardtanh.default"


def _minus_itself_through(op: str, domain: Domain, clamp=None, float_op: bool = True) -> DomainGraph:
    """d = f(t) - t, t = dq(q(tanh(x))) in `domain`, f(t) requantized into `domain`."""
    dg = DomainGraph(form="qdq")
    f32 = Definition(DefKind.FACT, Domain("float32"))

    def add(name, target, cls, *ins, d=None, clamp=None):
        dg.add_value(Value(name, target, cls, d or Definition(DefKind.FREE, reason="op"), numel=4, clamp=clamp))
        for k, src in enumerate(ins):
            dg.add_use(src, name, f"args[{k}]")

    add("x", "placeholder", OpClass.UNKNOWN, d=f32)
    add("tanh", "aten.tanh.default", OpClass.COMPUTE, "x", d=f32)
    add("q", Q, OpClass.QUANTIZE, "tanh", d=Definition(DefKind.FACT, domain))
    add("t1", DQ, OpClass.DEQUANTIZE, "q", d=Definition(DefKind.FACT, domain))
    add("t2", DQ, OpClass.DEQUANTIZE, "q", d=Definition(DefKind.FACT, domain))
    if op == ABS:
        add("f", op, OpClass.COMPUTE, "t1", d=f32 if float_op else Definition(DefKind.FACT, domain))
    else:
        add("f", op, OpClass.ACTIVATION, "t1", d=Definition(DefKind.ALIAS, sources=("t1",)), clamp=clamp)
    add("qf", Q, OpClass.QUANTIZE, "f", d=Definition(DefKind.FACT, domain))
    add("df", DQ, OpClass.DEQUANTIZE, "qf", d=Definition(DefKind.FACT, domain))
    add("d", "aten.sub.Tensor", OpClass.COMPUTE, "df", "t2", d=f32)
    return dg


@pytest.mark.parametrize(
    "op, clamp", [(ABS, None), (RELU, (0.0, float("inf"))), (HARDTANH, (0.0, 6.0)), (HARDTANH, (-1.0, 0.5))]
)
def test_an_op_that_is_the_identity_on_its_input_carries_it(op: str, clamp) -> None:
    """abs(t) - t, relu(t) - t, clamp(t) - t are 0 where t never leaves what the op keeps."""
    assert ranges.value_ranges(_minus_itself_through(op, NONNEG, clamp))["d"] == (0.0, 0.0)


@pytest.mark.parametrize(
    "why, op, domain, clamp, float_op",
    [
        ("abs of values that can be negative", ABS, SIGNED, None, True),
        ("relu of values that can be negative", RELU, SIGNED, (0.0, float("inf")), True),
        ("a clamp that cuts values the input holds", HARDTANH, NONNEG, (0.0, 0.25), True),
        ("an abs on codes (an integer kernel: not the reals' abs)", ABS, NONNEG, None, False),
    ],
)
def test_an_op_that_can_change_a_value_does_not(why: str, op: str, domain: Domain, clamp, float_op: bool) -> None:
    assert ranges.value_ranges(_minus_itself_through(op, domain, clamp, float_op))["d"] != (0.0, 0.0), why


def test_a_wrong_code_into_the_identity_breaks_it() -> None:
    """The backend's codes at the abs's input (`given`) are not the program's: no relation is left."""
    dg = _minus_itself_through(ABS, NONNEG)
    assert ranges.value_ranges(dg, {"t1": (0.0, 0.4)})["d"] != (0.0, 0.0)
