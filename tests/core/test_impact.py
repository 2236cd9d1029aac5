"""`impact` and `ranges` (issue #27): the error a wrong code read leaves at the outputs, on hand-built
Q/DQ graphs, each bound checked against the program and a backend emulated in plain Python."""

from __future__ import annotations

import math
import random

import pytest

from qflow import bounds, impact, ranges
from qflow.domain import FLOAT, Domain
from qflow.graph import RETURNED, Definition, DefKind, DomainGraph, Value
from qflow.ops import OpClass
from qflow.solvers import landing

WIDE = Domain.quantized("int8", 0.05, 0, -128, 127)  # [-6.4, 6.35]
NARROW = Domain.quantized("int8", 1e-5, -128, -128, 127)  # [0, 0.00255]
OUT = Domain.quantized("int8", 0.01, 0, -128, 127)


def _graph(mid: Domain, op: str = "linear", gain: float | None = 2.0) -> DomainGraph:
    """x → q(WIDE) → dq → <op> → q(mid) → dq → linear(gain 2) → q(OUT) → dq (the output)."""
    dg = DomainGraph(form="qdq")

    def add(name: str, target: str, cls: OpClass, d: Domain | None, src: str | None, **kw: object) -> None:
        dg.add_value(Value(name, target, cls, Definition(DefKind.FACT, d if d is not None else FLOAT), **kw))
        if src is not None:
            dg.add_use(src, name, "args[0]")

    q, dq = "quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default"
    add("x", "placeholder", OpClass.UNKNOWN, None, None)
    add("q0", q, OpClass.QUANTIZE, WIDE, "x")
    add("dq0", dq, OpClass.DEQUANTIZE, WIDE, "q0")
    add("f", f"aten.{op}.default", OpClass.COMPUTE, None, "dq0", gain=gain, numel=8)
    add("q1", q, OpClass.QUANTIZE, mid, "f")
    add("dq1", dq, OpClass.DEQUANTIZE, mid, "q1")
    add("g", "aten.linear.default", OpClass.COMPUTE, None, "dq1", gain=2.0, channels=((0.0, 1.0, -1.0),))
    add("q2", q, OpClass.QUANTIZE, OUT, "g")
    add("dq2", dq, OpClass.DEQUANTIZE, OUT, "q2")
    return dg


def test_a_narrow_requant_downstream_masks_a_wrong_read() -> None:
    # q0's codes off by anything in WIDE's range: f's output moves a lot, but q1 clamps both sides into
    # [0, 0.00255], and g doubles that: 0.0051, half an output LSB
    hit = impact.output_error(_graph(NARROW), {"q0": impact.width(WIDE)})
    assert hit.output == "dq2" and hit.lsb == pytest.approx(0.51, abs=0.01)
    # the same with an ordinary range in the middle: the error reaches the output
    moved = impact.output_error(_graph(OUT), {"q0": impact.width(WIDE)})
    assert moved.lsb > 100 and not moved.within_rounding
    # with the codes the backend writes at q0 known, g's values on both sides lie in [-0.00255, 0.00255],
    # within a quarter of an output LSB of code 0: one code on both sides, whatever q0's codes are
    backend = {"q0": ranges.domain_range(WIDE)}
    assert impact.output_error(_graph(NARROW), {"q0": impact.width(WIDE)}, backend=backend).lsb == 0.0
    assert impact.output_error(_graph(OUT), {"q0": impact.width(WIDE)}, backend=backend).lsb > 100


def test_what_is_not_modelled_is_unbounded_until_a_requant_clamps_it() -> None:
    for op, gain in (("layer_norm", None), ("linear", None)):
        hit = impact.output_error(_graph(OUT, op, gain), {"q0": 0.05})
        assert hit.lsb == pytest.approx(2 * impact.width(OUT) / OUT.scale)  # type: ignore[operator]


def test_a_landing_fed_a_wrong_value_is_unbounded_unless_weighed_whole() -> None:
    dg = _graph(OUT)
    assert math.isinf(impact.output_error(dg, {"q0": 0.05, "q1": 0.01}).lsb)
    assert impact.output_error(dg, {"q0": 0.05, "q1": 0.0}, frozenset({"q1"})).output is None  # (nothing out)


def test_a_chain_end_still_carries_what_the_codes_it_copies_carry() -> None:
    """A chain of dropped requants weighed whole (its end `replaced`) adds its own error to the codes it
    copies, which may be wrong already (campaign case 00398-tx-arm-custom: a round trip after a wrong
    view; the joint bound said 1 output LSB, the TOSA reference model was 62 off)."""
    dg = _graph(OUT)
    upstream = impact.output_error(dg, {"q0": 0.05}).lsb  # (q0's error alone, through f and g)
    alone = impact.output_error(dg, {"q0": 0.05, "q1": 0.01}, frozenset({"q1"}))
    carried = impact.output_error(dg, {"q0": 0.05, "q1": 0.01}, frozenset({"q1"}), inherits={"q1": "f"})
    assert alone.lsb < upstream <= carried.lsb


def test_lipschitz_constants_bound_the_real_functions() -> None:
    rng = random.Random(0)
    fns = {"sigmoid": lambda x: 1 / (1 + math.exp(-x)), "tanh": math.tanh, "erf": math.erf, "sin": math.sin,
           "gelu": lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2))), "silu": lambda x: x / (1 + math.exp(-x)),
           "hardswish": lambda x: x * min(max(x + 3, 0), 6) / 6}  # fmt: skip
    for name, f in fns.items():
        for _ in range(2000):
            a, d = rng.uniform(-8, 8), rng.uniform(1e-6, 0.5)
            assert abs(f(a + d) - f(a)) <= impact.LIPSCHITZ[name] * d + 1e-12, name
    for _ in range(2000):  # softmax in the infinity norm
        xs = [rng.uniform(-5, 5) for _ in range(6)]
        ys = [x + rng.uniform(-0.1, 0.1) for x in xs]
        e = max(abs(x - y) for x, y in zip(xs, ys, strict=True))
        sx, sy = ([math.exp(t) / sum(math.exp(u) for u in v) for t in v] for v in (xs, ys))
        assert max(abs(a - b) for a, b in zip(sx, sy, strict=True)) <= impact.LIPSCHITZ["softmax"] * e + 1e-12


def test_value_ranges_follow_clamps_relus_and_weights() -> None:
    r = ranges.value_ranges(_graph(NARROW))
    assert r["dq0"] == pytest.approx((-6.4, 6.35)) and r["q1"] == pytest.approx((0.0, 0.00255))
    assert r["g"] == pytest.approx((-0.00255, 0.00255))  # bias 0, +1 and -1 weight sums
    assert r["x"] == ranges.UNBOUNDED


def test_value_ranges_hold_every_value_of_the_functions_they_follow() -> None:
    """SiLU and GELU (both forms) dip below 0 once, sqrt / log rise and rsqrt / reciprocal fall on each side
    of 0, x * x is a square: each interval holds every value over its input interval (a LayerNorm's
    variance reaches its rsqrt only through these: campaign case 00766-tx-arm-custom)."""
    gelu_tanh = lambda x: 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))  # noqa: E731
    gelu = lambda x: 0.5 * x * (1 + math.erf(x / 2**0.5))  # noqa: E731
    fns = {"silu": [lambda x: x / (1 + math.exp(-x))], "gelu": [gelu, gelu_tanh], "sqrt": [math.sqrt],
           "hardswish": [lambda x: x * min(max(x + 3, 0), 6) / 6],
           "log": [math.log], "rsqrt": [lambda x: x**-0.5], "reciprocal": [lambda x: 1 / x]}  # fmt: skip
    rng = random.Random(1)
    for name, fs in fns.items():
        dg = _graph(WIDE, op=name, gain=None)
        for _ in range(300):
            lo, hi = sorted(rng.uniform(-4, 4) for _ in range(2))
            r = ranges.value_ranges(dg, given={"dq0": (lo, hi)})["f"]
            for x in (lo + (hi - lo) * k / 200 for k in range(201)):
                if x <= 0 and name in ("log", "rsqrt", "reciprocal") or x < 0 and name == "sqrt":
                    assert r == ranges.UNBOUNDED or (name == "reciprocal" and hi < 0 and x < 0), (name, lo, hi)
                    continue
                assert all(r[0] - 1e-12 <= f(x) <= r[1] + 1e-12 for f in fs), (name, lo, hi, x, r)
    at = {name: ranges.value_ranges(_graph(WIDE, op=name, gain=None), given={"dq0": (0.25, 4.0)})["f"] for name in fns}
    assert at["rsqrt"] == (0.5, 2.0) and at["reciprocal"] == (0.25, 4.0) and at["sqrt"] == (0.5, 2.0)
    silu = ranges.value_ranges(_graph(WIDE, op="silu", gain=None), given={"dq0": (-4.0, 0.0)})["f"]
    assert silu == pytest.approx((-0.2785, 0.0))  # (not unbounded: the least value, just below it)
    square = _graph(WIDE, op="mul", gain=None)
    square.add_use("dq0", "f", "args[1]")
    assert ranges.value_ranges(square, given={"dq0": (-3.0, 2.0)})["f"] == (0.0, 9.0)
    assert ranges.value_ranges(square, given={"dq0": (1.0, 2.0)})["f"] == (1.0, 4.0)


def test_value_ranges_sum_k_values_read_float_constants_and_round_to_the_nearest_code() -> None:
    """A sum of k values in [a, b] lies in [k·a, k·b], not down to 0 (campaign case 00027-cm-custom); a float
    constant operand is the values it holds (an added 0.5: 00579-cm-custom); a quantize rounds its input
    interval's ends to the nearest code, not outward (a sigmoid of x >= 0 is at least 0.5, 127.7 steps of
    0.0039146: code 0, not -1, where a relu left on the codes is wrong: 00384-cm)."""
    sig = Domain.quantized("int8", 0.0039146, -128, -128, 127)
    dg = DomainGraph(form="qdq")
    q, dq = "quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default"
    for name, target, cls, d, srcs, kw in (
        ("x", "placeholder", OpClass.UNKNOWN, FLOAT, (), {}),
        ("q0", q, OpClass.QUANTIZE, WIDE, ("x",), {}),
        ("dq0", dq, OpClass.DEQUANTIZE, WIDE, ("q0",), {"numel": 8}),
        ("s", "aten.sum.dim_IntList", OpClass.COMPUTE, FLOAT, ("dq0",), {"numel": 4}),
        ("c", "placeholder", OpClass.CONSTANT, FLOAT, (), {"values": (0.5, 0.5)}),
        ("a", "aten.add.Tensor", OpClass.COMPUTE, FLOAT, ("s", "c"), {}),
        ("g", "aten.sigmoid.default", OpClass.COMPUTE, FLOAT, ("dq0",), {}),
        ("q1", q, OpClass.QUANTIZE, sig, ("g",), {}),
    ):
        dg.add_value(Value(name, target, cls, Definition(DefKind.FACT, d), **kw))
        for i, src in enumerate(srcs):
            dg.add_use(src, name, f"args[{i}]")
    r = ranges.value_ranges(dg, given={"dq0": (0.2, 0.3)})
    assert r["s"] == pytest.approx((0.4, 0.6)) and r["a"] == pytest.approx((0.9, 1.1))
    r = ranges.value_ranges(dg, given={"dq0": (0.0, 6.35)})
    assert r["q1"][0] == pytest.approx(128 * sig.scale)  # (0.5 rounds to 128 steps)
    assert landing.reach(sig, r["g"]) == (0, 127) and landing.reach(sig, (0.4995, 0.5)) == (0, 0)
    assert landing.reach(sig, (0.5 * sig.scale, 0.5 * sig.scale)) == (-128, -127)  # (a tie: either way)


def test_an_integer_kernel_is_bounded_as_the_op_it_stands_for_and_rounded_to_its_grid() -> None:
    """A Cortex-M `quantized_add` whose second operand (``args[4]``) is a constant of codes, its multiplier
    negated: the sub it stands for, over the constant's values (campaign case 00005-cm-custom after the
    passes: tanh(x) - 1.775 into a domain topped at -0.775 pins every value there, where the kernel's
    domain range alone let a wrong code move the output by 329 LSB). A kernel writes codes: its interval
    is rounded to its grid, as a quantize's (a tanh LUT of x <= 2 reaches code 118 = 246 / 255, not 0.964)."""
    top = Domain.quantized("int8", 0.00303957, 127, -128, 127)  # [-0.775, 0]
    lut = Domain.quantized("int8", 1 / 255, -128, -128, 127)
    dg = DomainGraph(form="lowered")
    for name, target, cls, d, srcs, kw in (
        ("x", "placeholder", OpClass.UNKNOWN, FLOAT, (), {}),
        ("t", "cortex_m.quantized_activation.default", OpClass.COMPUTE, lut, ("x",), {"stands_for": "tanh"}),
        ("c", "placeholder", OpClass.CONSTANT, None, (), {"values": (1.775, 1.775)}),
        ("k", "cortex_m.quantized_add.default", OpClass.COMPUTE, top, ("t", "c"),
         {"stands_for": "sub", "operands": ("args[0]", "args[4]")}),
    ):  # fmt: skip
        defn = Definition(DefKind.FACT, d) if d is not None else Definition(DefKind.FREE)
        dg.add_value(Value(name, target, cls, defn, **kw))
        for src, label in zip(srcs, ("args[0]", "args[4]"), strict=False):
            dg.add_use(src, name, label)
    r = ranges.value_ranges(dg, given={"x": (0.0, 2.0)})
    assert r["t"] == pytest.approx((0.0, 246 / 255))
    assert r["k"] == pytest.approx((-255 * top.scale, -255 * top.scale))
    unordered = Value("k", "cortex_m.quantized_add.default", OpClass.COMPUTE, Definition(DefKind.FACT, top))
    dg.add_value(unordered)  # (no operand order: what it computes is not known, only its domain's range)
    assert ranges.value_ranges(dg, given={"x": (0.0, 2.0)})["k"] == pytest.approx(ranges.domain_range(top))


def test_value_ranges_cross_a_delegate_boundary_where_both_sides_hold_the_same_reals() -> None:
    """A delegate's output holds the partition value it returns; a partition's input, what its call feeds
    it when both read one domain (`DomainGraph.fed`): a linear in one delegate bounds a round trip in the
    next (campaign case 00574-tx-arm-custom, lowered)."""
    dg = _graph(NARROW)
    for name, cls, d in (("call", OpClass.DELEGATE, FLOAT), ("out", OpClass.DELEGATE, NARROW),
                         ("p/x", OpClass.UNKNOWN, FLOAT), ("p/y", OpClass.UNKNOWN, FLOAT)):  # fmt: skip
        dg.add_value(Value(name, "t", cls, Definition(DefKind.FACT, d) if d is not FLOAT else Definition(DefKind.FREE)))
    dg.add_use("dq0", "call", "args[1]")
    dg.add_use("call", "out", "output 0")
    dg.add_use("q1", "out", RETURNED)
    dg.fed["p/x"] = "dq1"
    r = ranges.value_ranges(dg)
    assert r["out"] == r["q1"] == pytest.approx((0.0, 0.00255))
    assert r["p/x"] == r["dq1"] and r["p/y"] == ranges.UNBOUNDED


def test_saturation_on_both_sides_moves_no_code() -> None:
    # g's interval [-0.00255, 0.00255] plus any error below 0.2 sits inside OUT: no saturation; but a
    # requant whose range lies beyond everything g can reach pins both sides at one end
    far = Domain.quantized("int8", 1e-4, -256, -128, 127)  # [0.0128 .. 0.0383]: above g's reach
    dg = _graph(NARROW)
    dg.value("q2").definition = Definition(DefKind.FACT, far)
    dg.value("dq2").definition = Definition(DefKind.FACT, far)
    hit = impact.output_error(dg, {"q0": impact.width(WIDE)})
    assert hit.output is None and hit.lsb == 0.0 and hit.within_rounding


@pytest.mark.parametrize(
    "src, hops, exact",
    [
        (WIDE, [Domain.quantized("int16", 0.05 / 256, 0, -32767, 32767), WIDE], True),  # finer, wide enough
        (WIDE, [Domain.quantized("int16", 1e-5, 0, -32767, 32767), WIDE], False),  # finer, clips at 0.33
        (WIDE, [Domain.quantized("int8", 0.2, 0, -128, 127), WIDE], False),  # coarser: the program loses
    ],
)
def test_a_round_trip_of_dropped_requants_against_every_code(src, hops, exact) -> None:
    got = bounds.copied_through(src, hops)
    assert got is not None and (got == 0.0) is exact
    worst = 0.0  # brute force: the program's chain of requants (round half to even), the backend's copy
    for c in range(src.qmin, src.qmax + 1):
        x = src.scale * (c - src.zero_point)
        for d in hops:
            x = d.scale * (min(max(round(x / d.scale) + d.zero_point, d.qmin), d.qmax) - d.zero_point)
        worst = max(worst, abs(hops[-1].scale * (c - hops[-1].zero_point) - x))
    assert got == pytest.approx(worst, abs=1e-9) or got >= worst  # (ties taken both ways)


def test_activations_on_a_chain_of_dropped_requants_clamp_codes_in_their_own_domains() -> None:
    """relu6 into another domain, then relu back into the first (campaign case 00789-cm-custom): Cortex-M
    drops both requants and clamps the copied codes by each activation's bounds in its own output domain
    (codes -36 and 113, as QuantizedClampActivationPass writes them). The two clamps compose to the
    program's relu on every code; either one alone does not, but for the codes at or below -36 (inputs
    clamped to 0 whatever the domain)."""
    src = Domain.quantized("int8", 0.0140602, 113, -128, 127)
    mid = Domain.quantized("int8", 0.00662032, -36, -128, 127)
    relu6, relu = bounds.Clamp((0.0, 6.0), (-36, 127)), bounds.Clamp((0.0, math.inf), (113, 127))
    assert bounds.copied_through(src, [mid, src], [relu6, relu]) == 0.0
    alone = bounds.copied_through(src, [mid], [relu6])
    assert alone is not None and alone > 100 * mid.scale
    assert bounds.copied_through(src, [mid], [relu6], codes=(-128, -36)) == 0.0
    worst = 0.0  # brute force: the program clamps reals and requantizes, the backend clamps codes
    for c in range(src.qmin, src.qmax + 1):
        x = min(max(src.scale * (c - src.zero_point), 0.0), 6.0)
        x = mid.scale * (min(max(round(x / mid.scale) + mid.zero_point, mid.qmin), mid.qmax) - mid.zero_point)
        worst = max(worst, abs(mid.scale * (min(max(c, -36), 127) - mid.zero_point) - x))
    assert alone == pytest.approx(worst, abs=1e-9)


def test_no_round_trip_bound_for_codes_the_last_dtype_cannot_hold() -> None:
    assert bounds.copied_through(Domain.quantized("int16", 1e-4, 0, -32767, 32767), [WIDE]) is None
    assert bounds.copied_through(WIDE, [FLOAT]) is None


def test_a_clamp_that_pins_both_sides_moves_nothing() -> None:
    """neg → clamp(0, 6): the program's values are <= 0, and so are the backend's (a negate of the same
    codes in another scale): both clamp to 0, whatever the error (campaign case 02159-arm-custom)."""
    dg = DomainGraph(form="qdq")
    q, dq = "quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default"
    pos = Domain.quantized("int8", 0.02, -128, -128, 127)  # [0, 5.1]
    for name, target, cls, d, src, kw in (
        ("x", "placeholder", OpClass.UNKNOWN, None, None, {}),
        ("q0", q, OpClass.QUANTIZE, pos, "x", {}),
        ("dq0", dq, OpClass.DEQUANTIZE, pos, "q0", {}),
        ("neg", "aten.neg.default", OpClass.COMPUTE, None, "dq0", {}),
        ("q1", q, OpClass.QUANTIZE, WIDE, "neg", {}),
        ("dq1", dq, OpClass.DEQUANTIZE, WIDE, "q1", {}),
        ("clamp", "aten.clamp.default", OpClass.ACTIVATION, None, "dq1", {"clamp": (0.0, 6.0)}),
        ("q2", q, OpClass.QUANTIZE, OUT, "clamp", {}),
        ("dq2", dq, OpClass.DEQUANTIZE, OUT, "q2", {}),
    ):
        dg.add_value(Value(name, target, cls, Definition(DefKind.FACT, d if d is not None else FLOAT), **kw))
        if src is not None:
            dg.add_use(src, name, "args[0]")
    assert ranges.value_ranges(dg)["dq1"] == pytest.approx((-5.1, 0.0))  # (rounding keeps 0 on the grid)
    below = impact.output_error(dg, {"q1": 3.0}, backend={"q1": (-6.4, 0.0)})
    assert below.output is None and below.within_rounding
    either = impact.output_error(dg, {"q1": 3.0}, backend={"q1": (-6.4, 6.35)})  # (a backend that may go positive)
    assert either.output == "dq2" and not either.within_rounding
    # the clamp itself an output (a folded partition's activation returned as it is: no quantize after it)
    dg.outputs = ["clamp"]
    below = impact.output_error(dg, {"q1": 3.0}, backend={"q1": (-6.4, 0.0)})
    assert below.output == "clamp" and below.lsb == 0.0
    assert not impact.output_error(dg, {"q1": 3.0}, backend={"q1": (-6.4, 6.35)}).within_rounding


def _row_of_one(
    via_amax_domain: Domain, landed_below: bool = False, row: int = 1
) -> tuple[DomainGraph, dict[str, float]]:
    """A softmax's ``x - amax(x)`` over a row of one element: x → q(WIDE) → dq → amax (numel kept) →
    q(<via_amax_domain>) → dq ─┐ ; and the same q(WIDE) → dq ─→ sub → q(OUT) → dq (the output)."""
    dg = DomainGraph(form="qdq")

    def add(name: str, target: str, cls: OpClass, d: Domain | None, *srcs: str, numel: int = 4) -> None:
        dg.add_value(Value(name, target, cls, Definition(DefKind.FACT, d if d is not None else FLOAT), numel=numel))
        for k, src in enumerate(srcs):
            dg.add_use(src, name, f"args[{k}]")

    q, dq = "quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default"
    add("x", "placeholder", OpClass.UNKNOWN, None)
    add("q0", q, OpClass.QUANTIZE, WIDE, "x")
    add("dq0", dq, OpClass.DEQUANTIZE, WIDE, "q0")
    add("dq0b", dq, OpClass.DEQUANTIZE, WIDE, "q0")
    add("amax", "aten.amax.default", OpClass.COMPUTE, None, "dq0b", numel=4 // row)
    add("q1", q, OpClass.QUANTIZE, via_amax_domain, "amax", numel=4 // row)
    add("dq1", dq, OpClass.DEQUANTIZE, via_amax_domain, "q1", numel=4 // row)
    add("sub", "aten.sub.Tensor", OpClass.COMPUTE, None, "dq0", "dq1")
    add("q2", q, OpClass.QUANTIZE, OUT, "sub")
    add("dq2", dq, OpClass.DEQUANTIZE, OUT, "q2")
    dg.outputs = ["dq2"]
    return dg, ({"dq1": 0.05} if landed_below else {"q0": impact.width(WIDE)})


def test_x_minus_x_cancels_whatever_codes_x_has() -> None:
    # q0's codes wrong by anything: both operands of the sub carry them, so it is 0 on both sides
    dg, landed = _row_of_one(WIDE)
    assert impact.output_error(dg, landed).lsb == 0.0
    # through a requant to another domain the two sides are different functions of the codes
    dg, landed = _row_of_one(Domain.quantized("int8", 0.1, 0, -128, 127))
    assert impact.output_error(dg, landed).lsb > 100
    # an error landing on one side only is not cancelled
    dg, landed = _row_of_one(WIDE, landed_below=True)
    assert impact.output_error(dg, landed).lsb >= 5
    # nor is a row of four: amax is not x there
    dg, landed = _row_of_one(WIDE, row=4)
    assert impact.output_error(dg, landed).lsb > 100


def _matmul(k: int) -> DomainGraph:
    """a → q(POS) → dq ─┐
    b → q(WIDE) → dq ─→ bmm (contraction k) → q(OUT) → dq (the output)."""
    dg = DomainGraph(form="qdq")
    q, dq = "quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default"
    pos = Domain.quantized("int8", 0.01, -128, -128, 127)  # [0, 2.55]
    for name, target, cls, d, srcs, kw in (
        ("a", "placeholder", OpClass.UNKNOWN, None, (), {}),
        ("b", "placeholder", OpClass.UNKNOWN, None, (), {}),
        ("qa", q, OpClass.QUANTIZE, pos, ("a",), {}),
        ("dqa", dq, OpClass.DEQUANTIZE, pos, ("qa",), {}),
        ("qb", q, OpClass.QUANTIZE, WIDE, ("b",), {}),
        ("dqb", dq, OpClass.DEQUANTIZE, WIDE, ("qb",), {}),
        ("mm", "aten.bmm.default", OpClass.COMPUTE, None, ("dqa", "dqb"), {"terms": k, "gain": 1e6}),
        ("q", q, OpClass.QUANTIZE, OUT, ("mm",), {}),
        ("dq", dq, OpClass.DEQUANTIZE, OUT, ("q",), {}),
    ):
        dg.add_value(Value(name, target, cls, Definition(DefKind.FACT, d if d is not None else FLOAT), **kw))
        for i, src in enumerate(srcs):
            dg.add_use(src, name, f"args[{i}]")
    dg.outputs = ["dq"]
    return dg


def test_a_matrix_product_of_two_activations_sums_products_of_their_values() -> None:
    """bmm's interval is its contraction length times the product of its operands' intervals, and a wrong
    operand moves each output by at most that length times the other operand's largest magnitude times
    the error (not the loose bilinear gain): each checked on random matrices within the intervals
    (campaign cases 00822 / 00878-tx-arm-custom: a dropped round trip into a score matmul, bound 31 → 12)."""
    k, rng = 3, random.Random(2)
    dg = _matmul(k)
    box = {"dqa": (0.5, 2.0), "dqb": (-1.0, 0.25)}
    r = ranges.value_ranges(dg, given=box)["mm"]
    assert r == pytest.approx((k * 2.0 * -1.0, k * 2.0 * 0.25))
    e = 0.02
    hit = impact.output_error(dg, {"qa": e}, rng=ranges.value_ranges(dg, given=box))
    bound = hit.lsb * OUT.scale  # type: ignore[operator]
    assert bound == pytest.approx(k * 1.0 * e)  # (|b| <= 1.0; a's interval widened by e)
    worst = 0.0
    for _ in range(2000):
        a = [rng.uniform(*box["dqa"]) for _ in range(k)]
        b = [rng.uniform(*box["dqb"]) for _ in range(k)]
        a2 = [x + rng.choice((-e, e)) for x in a]
        value = sum(x * y for x, y in zip(a, b, strict=True))
        assert r[0] - 1e-12 <= value <= r[1] + 1e-12
        worst = max(worst, abs(sum(x * y for x, y in zip(a2, b, strict=True)) - value))
    assert worst <= bound + 1e-12 and worst > 0.8 * bound  # (sound, and nearly reached)


@pytest.mark.parametrize("values", [None, (1.7745, 1.7748)])
def test_a_constant_is_the_values_it_holds_and_a_quantize_pins_what_lies_within_half_a_step(values) -> None:
    """tanh(x) - c with c a constant near its domain's top, into a domain of [-0.775, 0] (campaign case
    00005-cm-custom): with the constant's own values (`Value.values`) the difference lies below the
    output's lowest code + half a step on both sides, whatever x's codes, so a wrong read of x moves
    nothing; with its domain's range it may move the output by its whole range."""
    t_dom, c_dom = (
        Domain.quantized("int8", 1 / 255, -128, -128, 127),
        Domain.quantized("int8", 0.00696, -128, -128, 127),
    )
    out = Domain.quantized("int8", 0.00304, 127, -128, 127)
    dg = DomainGraph(form="qdq")
    q, dq = "quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default"
    for name, target, cls, d, srcs, kw in (
        ("x", "placeholder", OpClass.UNKNOWN, FLOAT, (), {}),
        ("q0", q, OpClass.QUANTIZE, WIDE, ("x",), {}),
        ("dq0", dq, OpClass.DEQUANTIZE, WIDE, ("q0",), {}),
        ("t", "aten.tanh.default", OpClass.COMPUTE, FLOAT, ("dq0",), {}),
        ("q1", q, OpClass.QUANTIZE, t_dom, ("t",), {}),
        ("dq1", dq, OpClass.DEQUANTIZE, t_dom, ("q1",), {}),
        ("c", "placeholder", OpClass.CONSTANT, c_dom, (), {}),
        ("dqc", dq, OpClass.DEQUANTIZE, c_dom, ("c",), {"values": values}),
        ("s", "aten.sub.Tensor", OpClass.COMPUTE, FLOAT, ("dq1", "dqc"), {"gain": 1.0}),
        ("q2", q, OpClass.QUANTIZE, out, ("s",), {}),
        ("dq2", dq, OpClass.DEQUANTIZE, out, ("q2",), {}),
    ):
        dg.add_value(Value(name, target, cls, Definition(DefKind.FACT, d), **kw))
        for i, src in enumerate(srcs):
            dg.add_use(src, name, f"args[{i}]")
    dg.outputs = ["dq2"]
    hit = impact.output_error(dg, {"q0": impact.width(WIDE)})
    if values is None:
        assert hit.lsb > 100
    else:
        assert ranges.value_ranges(dg)["s"][1] < out.scale * (out.qmin - 127) + out.scale / 2
        assert hit.output is None or hit.lsb == 0.0


def _extreme(op: str, low: Domain) -> DomainGraph:
    """a → q(POS) → dq ─┐
    b → q(low) → dq ───→ <op> (maximum / minimum) → q(OUT) → dq (the output)."""
    dg = DomainGraph(form="qdq")
    q, dq = "quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default"
    pos = Domain.quantized("int8", 0.01, -128, -128, 127)  # [0, 2.55]
    for name, target, cls, d, srcs in (
        ("a", "placeholder", OpClass.UNKNOWN, None, ()),
        ("b", "placeholder", OpClass.UNKNOWN, None, ()),
        ("qa", q, OpClass.QUANTIZE, pos, ("a",)),
        ("dqa", dq, OpClass.DEQUANTIZE, pos, ("qa",)),
        ("qb", q, OpClass.QUANTIZE, low, ("b",)),
        ("dqb", dq, OpClass.DEQUANTIZE, low, ("qb",)),
        ("m", f"aten.{op}.default", OpClass.COMPUTE, None, ("dqa", "dqb")),
        ("q", q, OpClass.QUANTIZE, OUT, ("m",)),
        ("dq", dq, OpClass.DEQUANTIZE, OUT, ("q",)),
    ):
        dg.add_value(Value(name, target, cls, Definition(DefKind.FACT, d if d is not None else FLOAT), numel=8))
        for i, src in enumerate(srcs):
            dg.add_use(src, name, f"args[{i}]")
    dg.outputs = ["dq"]
    return dg


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_a_maximum_keeps_the_operand_that_is_larger_on_both_sides(op: str) -> None:
    """b's codes wrong by anything in a domain of reals <= 0 while a >= 0: a maximum is a on both sides, a
    minimum b (campaign case 00148-mk-cm: a flipped mask's fill under a maximum with values above it)."""
    neg = Domain.quantized("int8", 0.01, 127, -128, 127)  # [-2.55, 0]
    wrong_b = impact.output_error(_extreme(op, neg), {"qb": impact.width(neg)})
    assert (wrong_b.output is None or wrong_b.lsb == 0.0) if op == "maximum" else wrong_b.lsb > 100
    wrong_a = impact.output_error(_extreme(op, neg), {"qa": 0.05})
    assert (wrong_a.lsb > 1) if op == "maximum" else (wrong_a.output is None or wrong_a.lsb == 0.0)
    # the operands' ranges overlap (b in [-1.28, 1.27]): either can be the larger, the error reaches
    assert impact.output_error(_extreme(op, OUT), {"qb": 0.5}).lsb > 10


def test_a_maximum_moves_by_its_worse_operand_not_by_both() -> None:
    """|max(a', b') - max(a, b)| <= max(|a' - a|, |b' - b|): two wrong operands do not add up (campaign case
    00188-mk-cm bounded 2.03 output LSB for one tie either operand can flip)."""
    both = impact.output_error(_extreme("maximum", OUT), {"qa": 0.05, "qb": 0.05})
    one = impact.output_error(_extreme("maximum", OUT), {"qb": 0.05})
    assert both.lsb == pytest.approx(one.lsb) and both.lsb > 1


def _score_plus_mask(out_scale: float) -> DomainGraph:
    """score → q(SCORE) → dq ─┐
    mask  → q(MASK)  → dq ─→ add → q(out_scale) → dq (the output): attention scores beside a mask on a grid
    a hundred times coarser (campaign case 05038-tx-arm-custom)."""
    dg = DomainGraph(form="qdq")
    q, dq = "quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default"
    out = Domain.quantized("int8", out_scale, 127, -128, 127)
    for name, target, cls, d, srcs in (
        ("s", "placeholder", OpClass.UNKNOWN, None, ()),
        ("m", "placeholder", OpClass.UNKNOWN, None, ()),
        ("qs", q, OpClass.QUANTIZE, _SCORE, ("s",)),
        ("dqs", dq, OpClass.DEQUANTIZE, _SCORE, ("qs",)),
        ("qm", q, OpClass.QUANTIZE, _MASK, ("m",)),
        ("dqm", dq, OpClass.DEQUANTIZE, _MASK, ("qm",)),
        ("add", "aten.add.Tensor", OpClass.COMPUTE, None, ("dqs", "dqm")),
        ("q", q, OpClass.QUANTIZE, out, ("add",)),
        ("dq", dq, OpClass.DEQUANTIZE, out, ("q",)),
    ):
        dg.add_value(Value(name, target, cls, Definition(DefKind.FACT, d if d is not None else FLOAT)))
        for i, src in enumerate(srcs):
            dg.add_use(src, name, f"args[{i}]")
    dg.outputs = ["dq"]
    return dg


_SCORE = Domain.quantized("int8", 1e-4, -128, -128, 127)  # [0, 0.0255]
_MASK = Domain.quantized("int8", 1.0039, 127, -128, 127)  # [-256, 0]


def _moved_codes(out_scale: float) -> int:
    """The most the output code moves, over every mask code and every two score codes (plain Python)."""
    out = Domain.quantized("int8", out_scale, 127, -128, 127)
    scores = [_SCORE.scale * (c + 128) for c in (-128, 127)]  # (the code is monotone in the score)
    moved = 0
    for cm in range(-128, 128):
        codes = [max(-128, min(127, round((s + _MASK.scale * (cm - 127)) / out.scale) + 127)) for s in scores]
        moved = max(moved, codes[1] - codes[0])
    return moved


@pytest.mark.parametrize("out_scale, absorbed", [(1.0038, True), (1.0039 * 2 / 3, False)])
def test_a_sum_beside_a_coarse_grid_rounds_to_one_code_whatever_its_erring_operand_holds(out_scale, absorbed):
    # the score's codes wrong by anything in its range: on the mask's grid (scaled by 1.0038 / 1.0039) every
    # sum lies within 0.05 of an output code, so both sides round to it; on a grid 2/3 of the mask's, a mask
    # value sits on a rounding boundary, and the score moves the code
    score = ranges.domain_range(_SCORE)
    got = impact.output_error(_score_plus_mask(out_scale), {"qs": impact.width(_SCORE)}, backend={"qs": score})
    assert (_moved_codes(out_scale) == 0) is absorbed
    assert (got.lsb == 0.0) is absorbed


def test_a_sum_beside_a_constant_between_codes_is_not_absorbed() -> None:
    # the mask a constant whose float32 value sits a hair below code -127 (-127.00001): read as no code at
    # all it would leave nothing to check, and the score's whole range would pass as one output code
    dg = _score_plus_mask(1.0038)
    wide = Domain.quantized("int8", 0.05, 0, -128, 127)
    for name in ("qs", "dqs"):
        dg.value(name).definition = Definition(DefKind.FACT, wide)
    dg.value("dqm").values = (v := _MASK.scale * (-127.00001 - 127), v)
    got = impact.output_error(dg, {"qs": impact.width(wide)}, backend={"qs": ranges.domain_range(wide)})
    assert got.lsb > 5


@pytest.mark.parametrize(
    "bias, weight, code, after",
    [
        (0.0048, -1e-4, (0.0, 0.0), 0.0),  # f from 0.00417 to 0.0048: code 0; the backend's up to 0.0051, code 1
        (1.2652, 1e-4, (1.27, 1.27), -126.6),  # f from 1.2652 to 1.26584: the top code; the backend's to 1.2649
    ],
)
def test_a_kernel_s_own_rounding_is_no_cell_both_sides_share(bias: float, weight: float, code: tuple, after: float):
    # folded form: an integer kernel f (its own domain a fact) rounds what it computes to one code of OUT on the
    # program's side (q0 >= 0 after the relu); the backend's q0 codes are up to 3.0 off, so its f is up to 3e-4
    # further, across the rounding boundary 0.03 output LSB away. f's interval is that one code and f's error
    # 0.03 LSB, but the code f writes is what g (100 f + `after`) reads: a code's worth there, 100 output LSB.
    dg = DomainGraph(form="folded")
    q, lin = "quantized_decomposed.quantize_per_tensor.default", "aten.linear.default"
    pos, neg = max(weight, 0.0), min(weight, 0.0)
    for name, target, cls, d, src, kw in (
        ("x", "placeholder", OpClass.UNKNOWN, FLOAT, None, {}),
        ("r", "aten.relu.default", OpClass.ACTIVATION, FLOAT, "x", {"clamp": (0.0, math.inf)}),
        ("q0", q, OpClass.QUANTIZE, WIDE, "r", {}),
        ("f", lin, OpClass.COMPUTE, OUT, "q0", {"gain": abs(weight), "channels": ((bias, pos, neg),)}),
        ("g", lin, OpClass.COMPUTE, OUT, "f", {"gain": 100.0, "channels": ((after, 100.0, 0.0),)}),
    ):
        dg.add_value(Value(name, target, cls, Definition(DefKind.FACT, d), **kw))
        if src is not None:
            dg.add_use(src, name, "args[0]")
    dg.outputs = ["g"]
    assert ranges.value_ranges(dg)["f"] == pytest.approx(code)
    got = impact.output_error(dg, {"q0": 3.0}, backend={"q0": ranges.domain_range(WIDE)})
    assert got.output == "g" and got.lsb > 50
