"""A tiny builder of domain graphs for unit tests of the torch-free core."""

from __future__ import annotations

from qflow.domain import FLOAT, Domain
from qflow.graph import Definition, DefKind, DomainGraph, Obligation, ObligationKind, Value
from qflow.ops import OpClass

A = Domain.quantized("int8", 0.1, 102, -128, 127)
B = Domain.quantized("int16", 1 / 32767, 0, -32767, 32767)
C = Domain.quantized("int8", 0.05, -3, -128, 127)


class G:
    def __init__(self, form: str = "folded") -> None:
        self.dg = DomainGraph(form=form)

    def fact(self, name: str, d: Domain, real: bool = False, cls: OpClass = OpClass.COMPUTE) -> str:
        self.dg.add_value(Value(name, f"t.{name}", cls, Definition(DefKind.FACT, d, real=real)))
        return name

    def free(self, name: str, blocking: bool, cls: OpClass = OpClass.UNKNOWN) -> str:
        self.dg.add_value(Value(name, f"t.{name}", cls, Definition(DefKind.FREE, blocking=blocking, reason="free")))
        return name

    def passthrough(self, name: str, *srcs: str, claim: Domain | None = None) -> str:
        d = Definition(DefKind.ALIAS, sources=tuple(srcs))
        self.dg.add_value(Value(name, f"aten.{name}.default", OpClass.PASSTHROUGH, d, claim=claim))
        for s in srcs:
            self.dg.add_use(s, name, "in")
        for s in srcs[1:]:
            self.dg.oblige(
                Obligation(
                    ObligationKind.SAME_AS_FIRST,
                    name,
                    s,
                    other=srcs[0],
                    edge=(s, name),
                    finding_kind="mixed-input-domains",
                )
            )
        if claim is not None:
            self.dg.oblige(
                Obligation(ObligationKind.CLAIM, name, name, expected=claim, finding_kind="passthrough-domain-change")
            )
        return name

    def use(self, producer: str, consumer: str, declared: Domain, real: bool | None = False) -> None:
        if consumer not in self.dg.g:
            self.fact(consumer, FLOAT, real=True)
        self.dg.add_use(producer, consumer, "args[0]")
        self.dg.oblige(
            Obligation(
                ObligationKind.USE,
                consumer,
                producer,
                expected=declared,
                expected_real=real,
                edge=(producer, consumer),
                arg="args[0]",
            )
        )


def noq(g: G, name: str, src: str, d: Domain) -> None:
    """A quantize `name` to `d` right after pass-through `src` (Q/DQ form)."""
    g.fact(name, d, cls=OpClass.QUANTIZE)
    g.dg.add_use(src, name, "args[0]")
    g.dg.oblige(
        Obligation(
            ObligationKind.NO_FOLD_CHANGE,
            src,
            src,
            expected=d,
            edge=(src, name),
            allow_float=True,
            finding_kind="requant-after-passthrough",
        )
    )


def seed000_folded() -> G:
    """Seed 000 after the Arm fold: cat claims int16 while it copies int8 codes."""
    g = G()
    g.fact("mul", A)
    g.fact("mul_1", A)
    g.passthrough("cat", "mul", "mul_1", claim=B)
    g.use("cat", "add", B)
    return g
