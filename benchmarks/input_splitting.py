"""What splitting value ranges on a source's codes costs, against the whole-tensor ranges it sharpens.

    python benchmarks/input_splitting.py [BLOCKS ...]     # default 10 100 1000

`ranges.correlated` runs only where a proof of the output impact fails on whole-tensor ranges (one
interval per value). This builds, in one process, a Q/DQ chain of BLOCKS blocks — each
``q(x.masked_fill(x > t, 0) * x)`` on its own grid, the mask reading the value it fills (the shape of campaign
case 00338-mk-arm-custom) — and times `value_ranges` of the whole chain and `correlated` asked about its
last value, each the best of 3 in CPU seconds, with the ratio. Then the same chain ending in two comparisons
a backend runs on codes (``where(x > 0, x, -1).masked_fill(x > -1.5, 0)``, campaign case 00045-mk-cm-custom)
and times weighing them with whole ranges (`landing.land`, `impact.output_error`) against weighing them one
code of their source at a time on both sides (`by_code.weighed`).
"""

from __future__ import annotations

import sys
from typing import Any

from measure import best_cpu

from qflow import impact, ranges
from qflow.domain import Domain
from qflow.graph import Definition, DefKind, DomainGraph, Obligation, ObligationKind, Value
from qflow.ops import OpClass
from qflow.solvers import by_code, landing

Q, DQ = "quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default"
GRID = Domain.quantized("int8", 0.01, 0, -128, 127)
POSITIVE = Domain.quantized("int8", 0.01, -128, -128, 127)  # (reals [0, 2.55]: ``> 0`` on codes flips)


def chain(blocks: int) -> DomainGraph:
    dg = DomainGraph(form="qdq")
    free = Definition(DefKind.FREE, reason="op")

    def add(name: str, target: str, cls: OpClass, *ins: str, domain: Domain | None = None, **kw: Any) -> None:
        d = Definition(DefKind.FACT, domain) if domain is not None else free
        dg.add_value(Value(name, target, cls, d, numel=64, **kw))
        for k, src in enumerate(ins):
            dg.add_use(src, name, f"args[{k}]")

    add("q0", "placeholder", OpClass.UNKNOWN, domain=GRID)
    for i in range(blocks):
        add(f"dq{i}", DQ, OpClass.DEQUANTIZE, f"q{i}", domain=GRID)
        add(f"m{i}", "aten.gt.Scalar", OpClass.COMPUTE, f"dq{i}", scalars=(("args[1]", 0.3),))
        fill = (("args[2]", 0.0),)
        add(f"f{i}", "aten.masked_fill.Scalar", OpClass.PASSTHROUGH, f"dq{i}", f"m{i}", scalars=fill)
        add(f"p{i}", "aten.mul.Tensor", OpClass.COMPUTE, f"f{i}", f"dq{i}")
        add(f"q{i + 1}", Q, OpClass.QUANTIZE, f"p{i}", domain=GRID)
    dg.outputs = [f"q{blocks}"]
    return dg


def flipped(blocks: int) -> tuple[DomainGraph, list[landing.Read]]:
    """`chain(blocks)`, its end requantized onto POSITIVE, then two selects whose comparisons of it the
    backend runs on codes with the thresholds as written (the reads a Cortex-M target's rules make)."""
    dg = chain(blocks)
    free = Definition(DefKind.FREE, reason="op")
    last = f"q{blocks}"
    rows = [
        ("x", Q, OpClass.QUANTIZE, (f"dq_{last}",), POSITIVE, {}),
        ("dx", DQ, OpClass.DEQUANTIZE, ("x",), POSITIVE, {}),
        ("gt", "aten.gt.Scalar", OpClass.COMPUTE, ("dx",), None, {"scalars": (("args[1]", 0.0),)}),
        ("w", "aten.where.ScalarOther", OpClass.PASSTHROUGH, ("gt", "dx"), None, {"scalars": (("args[2]", -1.0),)}),
        ("gt_1", "aten.gt.Scalar", OpClass.COMPUTE, ("dx",), None, {"scalars": (("args[1]", -1.5),)}),
        ("f", "aten.masked_fill.Scalar", OpClass.PASSTHROUGH, ("w", "gt_1"), None, {"scalars": (("args[2]", 0.0),)}),
        ("out", Q, OpClass.QUANTIZE, ("f",), POSITIVE, {}),
    ]
    dg.add_value(Value(f"dq_{last}", DQ, OpClass.DEQUANTIZE, Definition(DefKind.FACT, GRID), numel=64))
    dg.add_use(last, f"dq_{last}", "args[0]")
    for name, target, cls, ins, domain, kw in rows:
        d = Definition(DefKind.FACT, domain) if domain is not None else free
        dg.add_value(Value(name, target, cls, d, numel=64, **kw))
        for k, src in enumerate(ins):
            dg.add_use(src, name, f"args[{k}]")
    dg.outputs = ["out"]
    reads = [
        landing.Read(
            Obligation(
                ObligationKind.STRUCTURAL,
                node,
                node,
                finding_kind="real-constant-on-codes",
                arg="gt",
                expected=POSITIVE,
                codes=codes,
            ),
            None,
            POSITIVE,
            False,
        )  # fmt: skip
        for node, codes in (("gt", (-127, 0)), ("gt_1", (-128, -128)))
    ]
    return dg, reads


def _whole(dg: DomainGraph, reads: list[landing.Read], rng: dict) -> impact.Impact:
    landed = landing.land(dg, reads, rng)
    assert landed is not None
    return impact.output_error(dg, landed.errors, landed.replaced, landed.program or rng, landed.backend)


def main(sizes: list[int]) -> None:
    print("| blocks | values | value_ranges (s) | correlated (s) | ratio |")
    print("| --- | --- | --- | --- | --- |")
    for n in sizes:
        dg = chain(n)
        whole = ranges.value_ranges(dg)
        t_whole = best_cpu(lambda dg=dg: ranges.value_ranges(dg))
        t_split = best_cpu(lambda dg=dg, whole=whole, n=n: ranges.correlated(dg, whole, [f"q{n}"]))
        print(f"| {n} | {len(dg.g)} | {t_whole:.4f} | {t_split:.4f} | {t_split / t_whole:.0f}x |")
    print()
    print("| blocks | values | whole ranges (s) | LSB | one code at a time (s) | LSB | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n in sizes:
        dg, reads = flipped(n)
        rng = ranges.value_ranges(dg)
        whole, pieces = _whole(dg, reads, rng), by_code.weighed(dg, reads, rng)
        assert pieces is not None
        t_whole = best_cpu(lambda dg=dg, reads=reads, rng=rng: _whole(dg, reads, rng))
        t_pieces = best_cpu(lambda dg=dg, reads=reads, rng=rng: by_code.weighed(dg, reads, rng))
        print(
            f"| {n} | {len(dg.g)} | {t_whole:.4f} | {whole.lsb:.3g} | {t_pieces:.4f} | {pieces.lsb:.3g} "
            f"| {t_pieces / t_whole:.0f}x |"
        )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [10, 100, 1000])
