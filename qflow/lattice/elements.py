"""Lattice elements and join.

The order is a chain with a flat middle::

    ⊥  <  FREE(reasons)  <  KNOWN(d) / SYMBOLIC(group)  <  ⊤

⊥ is "nothing known yet" (not yet visited). FREE is "no fact constrains this
value" (a constant, an unknown op): it is below every concrete domain so that
joining it with one keeps the concrete domain, while the obligation on the
free input still ends *unproven*. Two different concrete domains join to ⊤
(a conflict). Join is commutative, associative and idempotent (tested with
hypothesis), so propagation is monotone and terminates.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from qflow.domain import Domain


class ElemKind(enum.IntEnum):
    BOTTOM = 0
    FREE = 1
    KNOWN = 2
    TOP = 3


@dataclass(frozen=True)
class Elem:
    kind: ElemKind
    domain: Domain | None = None
    real: bool = False
    group: str | None = None  # SYMBOLIC: the shared-qspec group
    reasons: frozenset[str] = frozenset()  # FREE: why nothing is known; TOP: the conflict

    @property
    def height(self) -> int:
        return int(self.kind)

    def __str__(self) -> str:
        if self.kind is ElemKind.BOTTOM:
            return "⊥"
        if self.kind is ElemKind.TOP:
            return "⊤"
        if self.kind is ElemKind.FREE:
            return "free"
        if self.group is not None:
            return f"symbolic({self.group})"
        assert self.domain is not None
        if self.real and not self.domain.is_float:
            return f"float32 on {self.domain}"
        return str(self.domain)


BOTTOM = Elem(ElemKind.BOTTOM)
TOP = Elem(ElemKind.TOP)


def known(domain: Domain, real: bool = False) -> Elem:
    return Elem(ElemKind.KNOWN, domain=domain, real=real)


def symbolic(group: str) -> Elem:
    return Elem(ElemKind.KNOWN, group=group)


def free(*reasons: str) -> Elem:
    return Elem(ElemKind.FREE, reasons=frozenset(reasons))


def join(a: Elem, b: Elem) -> Elem:
    """Least upper bound."""
    if a.height != b.height:
        return a if a.height > b.height else b
    if a.kind is ElemKind.FREE:
        return a if a.reasons >= b.reasons else Elem(ElemKind.FREE, reasons=a.reasons | b.reasons)
    if a.height == ElemKind.KNOWN:
        return a if a == b else TOP
    return a  # ⊥ ⊔ ⊥, ⊤ ⊔ ⊤


def leq(a: Elem, b: Elem) -> bool:
    """The lattice order: a ⊑ b iff a ⊔ b == b."""
    return join(a, b) == b
