"""Value ranges split on a source's codes: what two paths of one element share.

One interval per value loses that a mask and the value it selects come from the same element:
``x.masked_fill(x > t, 0)`` is never above ``max(t, 0)``, but with the mask taken as "either" its
interval is x's whole range. `ranges.correlated` takes each code of x alone and keeps the hull (campaign
case 00338-mk-arm-custom: a neg whose input a mask two ops up makes 0 everywhere; measured exact on the
TOSA reference model, bounded at 255 output LSB without it; tests/test_soundness_campaign.py)."""

from __future__ import annotations

import math
import random

import pytest

from qflow import ranges
from qflow.domain import Domain
from qflow.graph import Definition, DefKind, DomainGraph, Value
from qflow.ops import OpClass

X = Domain.quantized("int8", 0.00706, 56, -128, 127)  # reals [-1.299, 0.501]
Q, DQ = "quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default"
COMPARE = {"aten.gt.Scalar": lambda a, b: a > b, "aten.lt.Scalar": lambda a, b: a < b}


def _filled(compare: str, t: float, fill: float, numel: int = 8) -> DomainGraph:
    """x (codes of X) → dequantize dx; m = compare(dx, t); w = dx.masked_fill(m, fill): the output. `numel`:
    the mask's size (another than x's: a broadcast mask, not x's own elements)."""
    dg = DomainGraph(form="qdq")
    dg.add_value(Value("x", "placeholder", OpClass.UNKNOWN, Definition(DefKind.FACT, X), numel=8))
    dg.add_value(Value("dx", DQ, OpClass.DEQUANTIZE, Definition(DefKind.FACT, X), numel=8))
    dg.add_use("x", "dx", "args[0]")
    free = Definition(DefKind.FREE, reason="op")
    dg.add_value(Value("m", compare, OpClass.COMPUTE, free, numel=numel, scalars=(("args[1]", t),)))
    dg.add_use("dx", "m", "args[0]")
    dg.add_value(
        Value("w", "aten.masked_fill.Scalar", OpClass.PASSTHROUGH, free, numel=8, scalars=(("args[2]", fill),))
    )
    dg.add_use("dx", "w", "args[0]")
    dg.add_use("m", "w", "args[1]")
    dg.outputs = ["w"]
    return dg


def _every_code(compare: str, t: float, fill: float) -> tuple[float, float]:
    """The hull of what the program computes, code by code."""
    ws = []
    for c in range(X.qmin, X.qmax + 1):
        x = X.scale * (c - X.zero_point)
        ws.append(fill if COMPARE[compare](x, t) else x)
    return min(ws), max(ws)


@pytest.mark.parametrize(
    ("compare", "t", "fill"),
    [("aten.gt.Scalar", 0.0, 0.0), ("aten.gt.Scalar", -0.5, -0.25), ("aten.lt.Scalar", 0.2, 0.3),
     ("aten.lt.Scalar", -1.0, 0.0), ("aten.gt.Scalar", 0.6, 0.0)],
)  # fmt: skip
def test_split_ranges_hold_every_code_and_no_more(compare: str, t: float, fill: float) -> None:
    dg = _filled(compare, t, fill)
    whole = ranges.value_ranges(dg)
    split = ranges.correlated(dg, whole, ["w"])
    lo, hi = _every_code(compare, t, fill)
    assert split["w"][0] <= lo + 1e-9 and hi - 1e-9 <= split["w"][1]  # (sound: every code's value)
    assert split["w"] == pytest.approx((lo, hi), abs=1e-6)  # (and tight: no value no code gives)
    assert whole["w"][0] <= split["w"][0] and split["w"][1] <= whole["w"][1]


def test_the_whole_interval_loses_what_one_element_shares() -> None:
    """x.masked_fill(x > 0, 0) is never above 0; one interval per value says up to x's top."""
    dg = _filled("aten.gt.Scalar", 0.0, 0.0)
    whole = ranges.value_ranges(dg)
    assert whole["w"][1] == pytest.approx(X.scale * (X.qmax - X.zero_point))
    assert ranges.correlated(dg, whole, ["w"])["w"][1] == 0.0


def test_a_mask_of_other_elements_splits_nothing() -> None:
    """A mask of another size (broadcast) does not hold x's own elements: no element-wise relation."""
    dg = _filled("aten.gt.Scalar", 0.0, 0.0, numel=1)
    whole = ranges.value_ranges(dg)
    assert ranges.correlated(dg, whole, ["w"]) == whole


# -- soundness on random programs: every code's concrete values lie in the split ranges ---------------

G = Domain.quantized("int8", 0.02, -10, -128, 127)  # a grid values are requantized onto on the way
_OPS = ("add", "sub", "mul", "gt", "lt", "masked_fill", "where", "relu", "neg", "requant")


def _random_program(rng: random.Random) -> tuple[DomainGraph, list[tuple[str, str, tuple[str, ...], float]]]:
    """x (codes of X) → dx, then 3–8 element-wise ops over values drawn from what came before (masks from
    comparisons with random thresholds); `steps` says how to compute each concretely."""
    dg = DomainGraph(form="qdq")
    dg.add_value(Value("x", "placeholder", OpClass.UNKNOWN, Definition(DefKind.FACT, X), numel=8))
    dg.add_value(Value("dx", DQ, OpClass.DEQUANTIZE, Definition(DefKind.FACT, X), numel=8))
    dg.add_use("x", "dx", "args[0]")
    reals, masks, steps = ["dx"], [], []
    free = Definition(DefKind.FREE, reason="op")
    for i in range(rng.randint(3, 8)):
        op = rng.choice(_OPS if masks else [o for o in _OPS if o not in ("masked_fill", "where")])
        name, a, b, c = f"v{i}", rng.choice(reals), rng.choice(reals), round(rng.uniform(-1.2, 1.2), 2)
        if op in ("add", "sub", "mul"):
            v, ins = Value(name, f"aten.{op}.Tensor", OpClass.COMPUTE, free, numel=8), (a, b)
        elif op in ("gt", "lt"):
            v, ins = Value(name, f"aten.{op}.Scalar", OpClass.COMPUTE, free, numel=8, scalars=(("args[1]", c),)), (a,)
        elif op == "masked_fill":
            scal = (("args[2]", c),)
            v = Value(name, "aten.masked_fill.Scalar", OpClass.PASSTHROUGH, free, numel=8, scalars=scal)
            ins = (a, rng.choice(masks))
        elif op == "where":
            v, ins = Value(name, "aten.where.self", OpClass.PASSTHROUGH, free, numel=8), (rng.choice(masks), a, b)
        elif op == "relu":
            v = Value(name, "aten.relu.default", OpClass.ACTIVATION, free, numel=8, clamp=(0.0, math.inf))
            ins = (a,)
        elif op == "neg":
            v, ins = Value(name, "aten.neg.default", OpClass.COMPUTE, free, numel=8), (a,)
        else:
            v, ins = Value(name, Q, OpClass.QUANTIZE, Definition(DefKind.FACT, G), numel=8), (a,)
        dg.add_value(v)
        for k, src in enumerate(ins):
            dg.add_use(src, name, f"args[{k}]")
        (masks if op in ("gt", "lt") else reals).append(name)
        steps.append((name, op, ins, c))
    dg.outputs = [steps[-1][0]]
    return dg, steps


def _step(op: str, a: list[float], c: float) -> float:
    """One op on one element's operands `a` (`c`: its threshold or fill)."""
    if op in ("add", "sub", "mul"):
        return {"add": a[0] + a[1], "sub": a[0] - a[1], "mul": a[0] * a[1]}[op]
    if op in ("gt", "lt"):
        return float(a[0] > c if op == "gt" else a[0] < c)
    if op == "masked_fill":
        return c if a[1] else a[0]
    if op == "where":
        return a[1] if a[0] else a[2]
    if op in ("relu", "neg"):
        return max(a[0], 0.0) if op == "relu" else -a[0]
    return G.scale * (min(max(round(a[0] / G.scale) + G.zero_point, G.qmin), G.qmax) - G.zero_point)


def _run(steps: list[tuple[str, str, tuple[str, ...], float]], x: float) -> dict[str, float]:
    """What the program computes on one element whose source holds `x`."""
    val = {"x": x, "dx": x}
    for name, op, ins, c in steps:
        val[name] = _step(op, [val[i] for i in ins], c)
    return val


def test_split_ranges_hold_what_random_programs_compute() -> None:
    """300 seeded programs, every code of x: each value the program computes lies in its split range (and
    in its whole range), and the split ranges are never wider than the whole ones."""
    narrower = 0
    for seed in range(300):
        dg, steps = _random_program(random.Random(seed))
        whole = ranges.value_ranges(dg)
        split = ranges.correlated(dg, whole, dg.outputs)
        for code in range(X.qmin, X.qmax + 1):
            for name, v in _run(steps, X.scale * (code - X.zero_point)).items():
                for r in (whole[name], split[name]):
                    assert r[0] - 1e-9 <= v <= r[1] + 1e-9, (seed, code, name, v, r)
        for name in whole:
            assert whole[name][0] <= split[name][0] and split[name][1] <= whole[name][1], (seed, name)
        narrower += any(split[n] != whole[n] for n in whole)
    assert narrower > 100  # (measured: 135 of the 300 programs narrow somewhere)
