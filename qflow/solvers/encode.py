"""Encode domains and obligations for z3.

Each value gets seven terms: `real` (Bool: the tensor holds real numbers on the
domain's grid), `dt` (Int: dtype code, 0 = float with no grid), `s` (Real:
per-tensor scale), `zp`, `qmin`, `qmax` (Int) and `pc` (Int: an interned id of
a per-channel (axis, scales, zero points) triple, -1 when per-tensor).
Scales enter z3 as exact rationals of their float32 value.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import z3

from qflow.domain import FLOAT, Domain
from qflow.graph import Definition, DefKind, Symbolic


@dataclass(frozen=True)
class Terms:
    real: z3.BoolRef
    dt: z3.ArithRef
    s: z3.ArithRef
    zp: z3.ArithRef
    qmin: z3.ArithRef
    qmax: z3.ArithRef
    pc: z3.ArithRef

    def fields(self) -> tuple[z3.ExprRef, ...]:
        return (self.dt, self.s, self.zp, self.qmin, self.qmax, self.pc)

    def meaning(self) -> tuple[z3.ExprRef, ...]:
        """The fields that say what a code means (not which codes may occur)."""
        return (self.dt, self.s, self.zp, self.pc)


class Encoder:
    """Owns the interning tables so a z3 model can be read back as a Domain."""

    def __init__(self, ctx: z3.Context | None = None) -> None:
        self._ctx = ctx
        self._dtypes: dict[str, int] = {"float": 0}
        self._dtype_names: dict[int, str] = {0: "float32"}
        self._pc: dict[Domain, int] = {}
        self._pc_domains: list[Domain] = []
        self._vars: dict[str, Terms] = {}
        self._literals: dict[tuple[Domain, bool], Terms] = {}
        self._groups: dict[str, tuple[z3.ArithRef, z3.ArithRef]] = {}

    @property
    def ctx(self) -> z3.Context:
        """The z3 context, made when first needed: one costs ≈ 7 ms, and a program whose
        every obligation is a tautology is proved without z3 (observe mode proves
        hundreds of small programs)."""
        if self._ctx is None:
            self._ctx = z3.Context()
        return self._ctx

    # -- interning -----------------------------------------------------------
    def dtype_code(self, dtype: str) -> int:
        if dtype in ("float32", "float16", "bfloat16", "float64", "float"):
            return 0
        if dtype not in self._dtypes:
            code = len(self._dtypes)
            self._dtypes[dtype] = code
            self._dtype_names[code] = dtype
        return self._dtypes[dtype]

    def pc_code(self, d: Domain) -> int:
        key = Domain(d.dtype, d.scale, d.zero_point, 0, 0, d.axis, d.opaque)
        if key not in self._pc:
            self._pc[key] = len(self._pc_domains)
            self._pc_domains.append(key)
        return self._pc[key]

    # -- terms ---------------------------------------------------------------
    def var(self, name: str) -> Terms:
        t = self._vars.get(name)
        if t is None:
            c = self.ctx
            t = Terms(
                z3.Bool(f"{name}.real", c),
                z3.Int(f"{name}.dt", c),
                z3.Real(f"{name}.s", c),
                z3.Int(f"{name}.zp", c),
                z3.Int(f"{name}.qmin", c),
                z3.Int(f"{name}.qmax", c),
                z3.Int(f"{name}.pc", c),
            )
            self._vars[name] = t
        return t

    def literal(self, d: Domain, real: bool = False) -> Terms:
        key = (d, real)
        t = self._literals.get(key)
        if t is None:
            t = self._literals[key] = self._make_literal(d, real)
        return t

    def _make_literal(self, d: Domain, real: bool) -> Terms:
        c = self.ctx
        if d.is_float:
            s, zp, pc = 0, 0, -1
        elif d.per_channel:
            s, zp, pc = 0, 0, self.pc_code(d)
        else:
            s, zp, pc = d.scale, d.zero_point, -1  # type: ignore[assignment]
        qmin, qmax = (0, 0) if d.is_float else (d.qmin, d.qmax)
        return Terms(
            z3.BoolVal(real, c),
            z3.IntVal(self.dtype_code(d.dtype), c),
            z3.RealVal(Fraction(s), c),
            z3.IntVal(zp, c),
            z3.IntVal(qmin, c),
            z3.IntVal(qmax, c),
            z3.IntVal(pc, c),
        )

    def group_terms(self, sym: Symbolic) -> tuple[z3.ArithRef, z3.ArithRef]:
        g = self._groups.get(sym.group)
        if g is None:
            g = (z3.Real(f"{sym.group}.scale", self.ctx), z3.Int(f"{sym.group}.zp", self.ctx))
            self._groups[sym.group] = g
        return g

    # -- formulas ------------------------------------------------------------
    def eq(self, a: Terms, b: Terms, with_real: bool = True) -> z3.BoolRef:
        """Same domain, range included (definitions, aliases)."""
        parts = [x == y for x, y in zip(a.fields(), b.fields(), strict=True)]
        if with_real:
            parts.append(a.real == b.real)
        return z3.And(*parts)

    def fits(self, a: Terms, b: Terms, with_real: bool = True) -> z3.BoolRef:
        """Codes of `a` read correctly as `b`: same meaning, and `a`'s code
        range lies within `b`'s (a consumer may accept more codes than occur)."""
        parts = [x == y for x, y in zip(a.meaning(), b.meaning(), strict=True)]
        parts += [a.qmin >= b.qmin, a.qmax <= b.qmax]
        if with_real:
            parts.append(a.real == b.real)
        return z3.And(*parts)

    def same_meaning(self, a: Terms, b: Terms) -> z3.BoolRef:
        return z3.And(*[x == y for x, y in zip(a.meaning(), b.meaning(), strict=True)])

    def is_gridless_float(self, a: Terms) -> z3.BoolRef:
        return z3.And(a.real, a.dt == 0)

    def symbolic_terms(self, name: str, d: Definition) -> tuple[Terms, list[z3.BoolRef]]:
        """A value of a symbolic group: known dtype/range, the group's scale/zp."""
        sym = d.symbolic
        assert sym is not None
        s, zp = self.group_terms(sym)
        c = self.ctx
        t = Terms(
            z3.BoolVal(d.real, c),
            z3.IntVal(self.dtype_code(sym.dtype), c),
            s,
            zp,
            z3.IntVal(sym.qmin, c),
            z3.IntVal(sym.qmax, c),
            z3.IntVal(-1, c),
        )
        facts = [s > 0, zp >= sym.qmin, zp <= sym.qmax]
        if sym.symmetric:
            facts.append(zp == 0)
        return t, facts

    def define(self, name: str, d: Definition) -> list[z3.BoolRef]:
        """Background facts for one value (always satisfiable together: each
        value is defined once, from earlier values or literals)."""
        t = self.var(name)
        if d.kind is DefKind.FACT:
            assert d.domain is not None
            return [self.eq(t, self.literal(d.domain, d.real))]
        if d.kind is DefKind.ALIAS and d.sources:
            return [self.eq(t, self.var(d.sources[0]))]
        if d.kind is DefKind.SYMBOLIC:
            sym = d.symbolic
            assert sym is not None
            s, zp = self.group_terms(sym)
            facts = [
                t.real == z3.BoolVal(d.real, self.ctx),
                t.dt == self.dtype_code(sym.dtype),
                t.qmin == sym.qmin,
                t.qmax == sym.qmax,
                t.pc == -1,
                t.s == s,
                t.zp == zp,
                s > 0,
                zp >= sym.qmin,
                zp <= sym.qmax,
            ]
            if sym.symmetric:
                facts.append(zp == 0)
            return facts
        return []

    # -- reading models back -------------------------------------------------
    def read(self, model: z3.ModelRef, t: Terms) -> tuple[Domain, bool]:
        def ev(x: z3.ExprRef) -> z3.ExprRef:
            return model.eval(x, model_completion=True)

        real = z3.is_true(ev(t.real))
        dt = ev(t.dt).as_long()  # type: ignore[attr-defined]
        if dt == 0:
            return FLOAT, real
        dtype = self._dtype_names.get(dt, f"dtype#{dt}")
        pc = ev(t.pc).as_long()  # type: ignore[attr-defined]
        qmin = ev(t.qmin).as_long()  # type: ignore[attr-defined]
        qmax = ev(t.qmax).as_long()  # type: ignore[attr-defined]
        if 0 <= pc < len(self._pc_domains):
            base = self._pc_domains[pc]
            return Domain(dtype, base.scale, base.zero_point, qmin, qmax, base.axis, base.opaque), real
        sval = ev(t.s)
        frac = sval.as_fraction() if z3.is_rational_value(sval) else Fraction(0)  # type: ignore[attr-defined]
        return Domain(dtype, float(frac), ev(t.zp).as_long(), qmin, qmax), real  # type: ignore[attr-defined]
