"""What splitting value ranges on a source's codes costs, against the whole-tensor ranges it sharpens.

    python benchmarks/input_splitting.py [BLOCKS ...]     # default 10 100 1000

`ranges.correlated` runs only where a proof of the output impact fails on whole-tensor ranges (one
interval per value). This builds, in one process, a Q/DQ chain of BLOCKS blocks — each
``q(x.masked_fill(x > t, 0) * x)`` on its own grid, the mask reading the value it fills (the shape of campaign
case 00338-mk-arm-custom) — and times `value_ranges` of the whole chain and `correlated` asked about its
last value, each the best of 3 in CPU seconds, with the ratio.
"""

from __future__ import annotations

import sys
from typing import Any

from measure import best_cpu

from qflow import ranges
from qflow.domain import Domain
from qflow.graph import Definition, DefKind, DomainGraph, Value
from qflow.ops import OpClass

Q, DQ = "quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default"
GRID = Domain.quantized("int8", 0.01, 0, -128, 127)


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


def main(sizes: list[int]) -> None:
    print("| blocks | values | value_ranges (s) | correlated (s) | ratio |")
    print("| --- | --- | --- | --- | --- |")
    for n in sizes:
        dg = chain(n)
        whole = ranges.value_ranges(dg)
        t_whole = best_cpu(lambda dg=dg: ranges.value_ranges(dg))
        t_split = best_cpu(lambda dg=dg, whole=whole, n=n: ranges.correlated(dg, whole, [f"q{n}"]))
        print(f"| {n} | {len(dg.g)} | {t_whole:.4f} | {t_split:.4f} | {t_split / t_whole:.0f}x |")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [10, 100, 1000])
