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
