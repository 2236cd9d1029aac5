"""The same encoding as `encode.Encoder`, written as SMT-LIB text that z3 parses natively.

Building a term through z3's Python API costs a ctypes call, a wrapper object and
a reference count per node; at 100k FX nodes that was ~80 % of qflow's time
while the solving itself took 2 %. Here a value's seven terms are strings
(constants inline, unknowns as declared constants), an obligation is one
string, and a batch of regions is one `(assert (or (not f1) ...))` that
`Solver.from_string` parses in C. The formulas are those of
`prove.obligation_formula` term for term: a test proves every graph both ways.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from qflow.domain import Domain
from qflow.graph import Definition, Obligation, ObligationKind, Symbolic


@dataclass(frozen=True)
class TextTerms:
    """`encode.Terms` as SMT-LIB expressions; `decls` are the constants they use."""

    real: str
    dt: str
    s: str
    zp: str
    qmin: str
    qmax: str
    pc: str
    #: what a query using these terms must also say: the declarations of its unknowns and,
    #: for a symbolic group, the group's facts (scale > 0, zero point in range)
    decls: tuple[str, ...] = ()

    def fields(self) -> tuple[str, ...]:
        return (self.dt, self.s, self.zp, self.qmin, self.qmax, self.pc)

    def meaning(self) -> tuple[str, ...]:
        return (self.dt, self.s, self.zp, self.pc)


def int_text(v: int) -> str:
    return str(v) if v >= 0 else f"(- {-v})"


def real_text(v: float | Fraction) -> str:
    """An exact rational numeral, as `z3.RealVal(Fraction(v))` is."""
    f = Fraction(v)
    num = f"{abs(f.numerator)}.0" if f.denominator == 1 else f"(/ {abs(f.numerator)}.0 {f.denominator}.0)"
    return num if f >= 0 else f"(- {num})"


class TextEncoder:
    """Owns the interning tables (dtype and per-channel codes, shared with an `Encoder`
    so both number them alike) and the names of the declared constants."""

    def __init__(self, intern: object) -> None:
        #: the `encode.Encoder` whose dtype / per-channel codes the text uses
        self._intern = intern
        self._literals: dict[tuple[Domain, bool], TextTerms] = {}
        self._vars: dict[str, TextTerms] = {}
        self._groups: dict[str, tuple[str, str, tuple[str, ...]]] = {}

    def literal(self, d: Domain, real: bool = False) -> TextTerms:
        key = (d, real)
        t = self._literals.get(key)
        if t is None:
            t = self._literals[key] = self._make_literal(d, real)
        return t

    def _make_literal(self, d: Domain, real: bool) -> TextTerms:
        enc = self._intern
        if d.is_float:
            s, zp, pc = 0.0, 0, -1
        elif d.per_channel:
            s, zp, pc = 0.0, 0, enc.pc_code(d)  # type: ignore[attr-defined]
        else:
            s, zp, pc = d.scale, d.zero_point, -1  # type: ignore[assignment]
        qmin, qmax = (0, 0) if d.is_float else (d.qmin, d.qmax)
        dt = enc.dtype_code(d.dtype)  # type: ignore[attr-defined]
        return TextTerms(
            "true" if real else "false",
            int_text(dt),
            real_text(s),  # type: ignore[arg-type]
            int_text(zp),  # type: ignore[arg-type]
            int_text(qmin),
            int_text(qmax),
            int_text(pc),
        )

    def var(self, name: str) -> TextTerms:
        """A free value's unknowns (interned ids: FX names may hold any character)."""
        t = self._vars.get(name)
        if t is None:
            v = f"v{len(self._vars)}"
            sorts = (("real", "Bool"), ("dt", "Int"), ("s", "Real"), ("zp", "Int"))
            sorts += (("qmin", "Int"), ("qmax", "Int"), ("pc", "Int"))
            decls = tuple(f"(declare-const {v}.{f} {s})" for f, s in sorts)
            t = TextTerms(*(f"{v}.{f}" for f, _ in sorts), decls=decls)
            self._vars[name] = t
        return t

    def symbolic_terms(self, d: Definition) -> tuple[TextTerms, list[str]]:
        """A value of a symbolic group: known dtype/range, the group's scale/zp (declared,
        with the group's facts, by every query that uses them)."""
        sym: Symbolic | None = d.symbolic
        assert sym is not None
        g = self._groups.get(sym.group)
        if g is None:
            k = f"g{len(self._groups)}"
            g = self._groups[sym.group] = (
                f"{k}.scale",
                f"{k}.zp",
                (f"(declare-const {k}.scale Real)", f"(declare-const {k}.zp Int)"),
            )
        s, zp, decls = g
        facts = [f"(> {s} 0.0)", f"(>= {zp} {int_text(sym.qmin)})", f"(<= {zp} {int_text(sym.qmax)})"]
        if sym.symmetric:
            facts.append(f"(= {zp} 0)")
        t = TextTerms(
            "true" if d.real else "false",
            int_text(self._intern.dtype_code(sym.dtype)),  # type: ignore[attr-defined]
            s,
            zp,
            int_text(sym.qmin),
            int_text(sym.qmax),
            int_text(-1),
            decls=decls + tuple(f"(assert {f})" for f in facts),
        )
        return t, facts


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else f"(and {' '.join(parts)})"


def _eqs(a: tuple[str, ...], b: tuple[str, ...]) -> list[str]:
    return [f"(= {x} {y})" for x, y in zip(a, b, strict=True)]


def same_meaning(a: TextTerms, b: TextTerms) -> str:
    return _and(_eqs(a.meaning(), b.meaning()))


def fits(a: TextTerms, b: TextTerms, with_real: bool = True) -> str:
    parts = _eqs(a.meaning(), b.meaning()) + [f"(>= {a.qmin} {b.qmin})", f"(<= {a.qmax} {b.qmax})"]
    if with_real:
        parts.append(f"(= {a.real} {b.real})")
    return _and(parts)


def is_gridless_float(a: TextTerms) -> str:
    return f"(and {a.real} (= {a.dt} 0))"


def obligation_text(ob: Obligation, lhs: TextTerms, rhs: TextTerms) -> str:
    """`prove.obligation_formula`, as text."""
    if ob.kind is ObligationKind.NO_FOLD_CHANGE:
        same = same_meaning(lhs, rhs)
        return f"(or {same} {is_gridless_float(lhs)})" if ob.allow_float else same
    if ob.kind is ObligationKind.SAME_AS_FIRST:
        return _and([*_eqs(lhs.meaning(), rhs.meaning()), f"(= {lhs.real} {rhs.real})"])
    if ob.kind is ObligationKind.CLAIM:
        return fits(lhs, rhs, with_real=False) if ob.check_range else same_meaning(lhs, rhs)
    if ob.expected is not None and ob.expected.is_float and ob.expected_real:
        return lhs.real
    if ob.allow_float:
        return f"(or {lhs.real} {fits(lhs, rhs, with_real=False)})"
    return fits(lhs, rhs, with_real=ob.expected_real is not None)
