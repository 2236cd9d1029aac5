"""Prove obligations with z3, one independent region at a time.

An obligation is *proved* when its negation is unsat under the background
(the value definitions), *violated* when z3 finds a model and nothing unknown
stands in the way (the model is the counterexample), and *unproven* when the
model exists only because an unknown op or a missing fact leaves a value free.

Regions are the connected components of "shares a z3 term": alias chains,
obligations between two values, shared symbolic groups. Each region is solved
in its own push/pop scope of one solver, first all its obligations at once
(one call when they all hold), so cost grows with the graph, not its square.

Two engines ask z3 the same questions. `TextProver` (the default) writes each
batch of regions as SMT-LIB text (`qflow.solvers.smtlib`) that z3 parses
natively: building terms through the Python API was ~80 % of qflow's time. A
region that can fail is then asked obligation by obligation through the Python
API (`Prover._refute`, in a context only failing regions enter), so violations,
counterexamples and unproven obligations come from the same z3 calls in both
engines.
`prove(dg, engine="api")` runs the reference alone (tests compare the two).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import z3

from qflow import bounds, impact, ranges, targets
from qflow.bounds import Bound
from qflow.domain import Domain
from qflow.graph import Definition, DefKind, DomainGraph, Obligation, ObligationKind
from qflow.solvers import by_code, landing, smtlib
from qflow.solvers.encode import Encoder, Terms
from qflow.solvers.smtlib import TextTerms
from qflow.targets import Outcome

_MISSING = object()  # not in a cache (None is a cached answer)


def _pair(d: Domain, real: bool) -> tuple[Domain, bool]:
    return d, real


def _leaf_fact(name: str, d: Definition) -> tuple[Domain, bool] | None:
    return (d.domain, d.real) if d.kind is DefKind.FACT and d.domain is not None else None


#: Regions proved together by one solver call (bisected when one fails).
BATCH = 256


class Status(enum.Enum):
    PROVED = "proved"
    VIOLATED = "violated"
    UNPROVEN = "unproven"


@dataclass
class Side:
    """One side of an obligation as the counterexample (or the facts) show it."""

    domain: Domain | None
    real: bool = False


@dataclass(slots=True)
class Result:
    obligation: Obligation
    status: Status
    produced: Side | None = None  # the producer side in the counterexample
    expected: Side | None = None  # the declared / other side
    blockers: tuple[str, ...] = ()  # (a tuple: no list made for each proved obligation)
    #: For a requant a code copy drops: how far that moves the output (`solvers.bounds`).
    bound: Bound | None = None
    #: A violation that holds because no program output moves beyond rounding (`impact`).
    masked: impact.Impact | None = None
    #: A violation's reach: the worst program output all the violations together move, when
    #: `impact` bounds it (beyond rounding: else the violation is `masked`).
    reach: impact.Impact | None = None


@dataclass
class ProofStats:
    regions: int = 0
    largest_region: int = 0
    solver_checks: int = 0


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self._size: dict[str, int] = {}

    def find(self, x: str) -> str:
        parent = self.parent
        p = parent.setdefault(x, x)
        while p != parent[p]:
            parent[p] = parent[parent[p]]
            p = parent[p]
        parent[x] = p
        return p

    def union(self, a: str, b: str) -> None:
        """Union by size: the trees stay shallow, so `find` stays cheap at 100k values."""
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            sa, sb = self._size.get(ra, 1), self._size.get(rb, 1)
            if sa > sb:
                ra, rb = rb, ra
            self.parent[ra] = rb
            self._size[rb] = sa + sb


class Prover:
    def __init__(self, dg: DomainGraph, tautologies: bool = True) -> None:
        self.dg = dg
        #: discharge a region whose every obligation is a tautology (see `tautology`) without z3
        self.tautologies = tautologies
        self._facts: dict[str, tuple[Domain, bool] | None] = {}
        #: name → Value (networkx node-view lookups were a tenth of the prove time)
        self._values = dg.by_name()
        self.enc = Encoder()
        self.stats = ProofStats()
        self._terms: dict[str, Terms] = {}
        self._group_facts: dict[str, list[z3.BoolRef]] = {}
        self._formulas: dict[tuple[object, ...], z3.BoolRef] = {}
        self._refuter: Prover | None = None  # see _refute
        self._refuter_solver: z3.Solver | None = None

    def term(self, name: str) -> Terms:
        """A value's z3 terms, by substitution: a fact is its literal, an alias
        is its source's terms; only free and symbolic values are unknowns. The
        definitions are functional, so this is equivalent to asserting them,
        with far fewer terms."""
        return self._resolve(name, self._terms, self._leaf_terms)

    def _leaf_terms(self, name: str, d: Definition) -> Terms:
        if d.kind is DefKind.FACT:
            assert d.domain is not None
            return self.enc.literal(d.domain, d.real)
        if d.kind is DefKind.SYMBOLIC:
            t, facts = self.enc.symbolic_terms(name, d)
            assert d.symbolic is not None
            self._group_facts.setdefault(d.symbolic.group, facts)
            return t
        return self.enc.var(name)

    def _resolve(self, name: str, cache: dict[str, Any], leaf: Callable[[str, Definition], Any]) -> Any:
        """`leaf` of the definition at the end of `name`'s alias chain, cached for
        every value on the chain (the chain stops where a cycle would start)."""
        t = cache.get(name, _MISSING)
        if t is not _MISSING:
            return t
        chain = []
        while True:
            d = self._values[name].definition
            if d.kind is DefKind.ALIAS and d.sources and name not in chain:
                chain.append(name)
                name = d.sources[0]
                t = cache.get(name, _MISSING)
                if t is not _MISSING:
                    break
                continue
            t = cache[name] = leaf(name, d)
            break
        for n in chain:
            cache[n] = t
        return t

    # -- the two sides of an obligation ---------------------------------------
    def _lhs_of(self, ob: Obligation, literal: Callable[[Domain, bool], Any], term: Callable[[str], Any]) -> Any:
        """The produced side of `ob`, built by `literal` and `term` (z3 terms, text, facts)."""
        v = self._values[ob.value]
        if ob.compare_claim and v.claim is not None and ob.kind is not ObligationKind.CLAIM:
            return literal(v.claim, False)
        return term(ob.value)

    def _rhs_of(self, ob: Obligation, literal: Callable[[Domain, bool], Any], term: Callable[[str], Any]) -> Any:
        """The expected side of `ob`, built by `literal` and `term`."""
        if ob.other is not None:
            o = self._values[ob.other]
            if ob.compare_claim and o.claim is not None:
                return literal(o.claim, False)
            return term(ob.other)
        assert ob.expected is not None
        return literal(ob.expected, bool(ob.expected_real))

    def _lhs(self, ob: Obligation) -> Terms:
        return self._lhs_of(ob, self.enc.literal, self.term)

    def _rhs(self, ob: Obligation) -> Terms:
        return self._rhs_of(ob, self.enc.literal, self.term)

    def formula(self, ob: Obligation) -> z3.BoolRef:
        lhs, rhs = self._lhs(ob), self._rhs(ob)
        # terms are shared (cached literals, substituted aliases), so repeated
        # blocks ask the same question: build each formula once
        exp_float = ob.expected.is_float if ob.expected is not None else None
        key = (ob.kind, ob.allow_float, ob.check_range, ob.expected_real, exp_float, id(lhs), id(rhs))
        f = self._formulas.get(key)
        if f is None:
            f = self._formulas[key] = obligation_formula(self.enc, ob, lhs, rhs)
        return f

    # -- tautologies -------------------------------------------------------------
    def _fact(self, name: str) -> tuple[Domain, bool] | None:
        """(domain, real) of the literal `term(name)` is, or None when it is an unknown
        (follows the defining alias chain exactly as `term` does)."""
        return self._resolve(name, self._facts, _leaf_fact)

    def _rhs_fact(self, ob: Obligation) -> tuple[Domain, bool] | None:
        return self._rhs_of(ob, _pair, self._fact)

    def tautology(self, ob: Obligation) -> bool:
        """Does `obligation_formula` hold whatever the model, by the shape of its two sides?

        True only where both sides are literals and the formula then reduces to ``true`` by
        reflexivity: the two literals are of one domain (so every field the formula compares
        is the same constant on both sides, and ``x >= x``, ``x <= x``), and the ``real``
        flags agree where it compares them; or the formula's disjunct ``lhs.real`` is the
        constant ``true``. Such an obligation is proved by z3 too (tests compare every one).
        """
        # (`_lhs_of(ob, _pair, self._fact)` inlined, and `_rhs_of` where `other` is set: this runs for every obligation)
        k, facts = ob.kind, self._facts
        v = self._values[ob.value]
        if ob.compare_claim and v.claim is not None and k is not ObligationKind.CLAIM:
            lhs: tuple[Domain, bool] | None = (v.claim, False)
        else:
            lhs = facts.get(ob.value, _MISSING)
            if lhs is _MISSING:
                lhs = self._fact(ob.value)
        if lhs is None:
            return False
        if k is not ObligationKind.NO_FOLD_CHANGE and k is not ObligationKind.SAME_AS_FIRST:
            if k is not ObligationKind.CLAIM and ob.expected is not None and ob.expected.is_float and ob.expected_real:
                return lhs[1] and _encodable(lhs[0])  # the formula is `lhs.real`
            if k is not ObligationKind.CLAIM and ob.allow_float and lhs[1]:
                return _encodable(lhs[0])  # `lhs.real or ...`
        if ob.other is None:
            rhs = self._rhs_fact(ob)
        else:
            o = self._values[ob.other]
            if ob.compare_claim and o.claim is not None:
                rhs = (o.claim, False)
            else:
                rhs = facts.get(ob.other, _MISSING)
                if rhs is _MISSING:
                    rhs = self._fact(ob.other)
        # (equal domains write the same literal: one of them encodable, both are;
        # most equal domains are one object, read from one Q/DQ argument list)
        d = lhs[0]
        if rhs is None or (d is not rhs[0] and d != rhs[0]) or not _encodable(d):
            return False
        if k is ObligationKind.NO_FOLD_CHANGE or k is ObligationKind.CLAIM:
            return True  # same meaning (and range): the real flags are not compared
        if k is ObligationKind.SAME_AS_FIRST:
            return lhs[1] == rhs[1]
        if ob.allow_float:
            return True  # `lhs.real or fits(lhs, rhs, with_real=False)`
        return ob.expected_real is None or lhs[1] == rhs[1]  # fits(lhs, rhs, with_real=...)

    # -- regions ---------------------------------------------------------------
    def _depends(self, ob: Obligation) -> list[str]:
        # (whether a side is its claim, inlined: this runs for every obligation)
        claims = ob.compare_claim and ob.kind is not ObligationKind.CLAIM
        values = self._values
        names = [ob.value] if not (claims and values[ob.value].claim is not None) else []
        if ob.other is not None and not (claims and values[ob.other].claim is not None):
            names.append(ob.other)
        return names

    def _root(self, name: str) -> str:
        """Follow the defining alias chain to the value that fixes `name`."""
        seen = set()
        while True:
            d = self._values[name].definition
            if d.kind is not DefKind.ALIAS or not d.sources or name in seen:
                return name
            seen.add(name)
            name = d.sources[0]

    def _blockers(self, names: Iterable[str]) -> list[str]:
        out = []
        for n in names:
            r = self._root(n)
            d = self._values[r].definition
            if (d.kind is DefKind.FREE and d.blocking) or (d.kind is DefKind.ALIAS and not d.sources):
                out.append(f"{r}: {d.reason or 'no domain fact'}")
        return out

    def regions(self, obs: list[Obligation]) -> list[tuple[list[str], list[Obligation]]]:
        uf = _UnionFind()
        parent, find = uf.parent, uf.find
        for name, v in self._values.items():
            d = v.definition
            if d.kind is DefKind.ALIAS and d.sources:
                src = d.sources[0]
                root = parent.get(src)
                if root is not None and name not in parent:
                    # the source is placed already (values come in topological order):
                    # hang this one under its root, as union would
                    while root != parent[root]:
                        root = parent[root]
                    parent[name] = root
                else:
                    uf.union(name, src)
            elif d.kind is DefKind.SYMBOLIC and d.symbolic is not None:
                uf.union(name, "group:" + d.symbolic.group)
            else:
                parent.setdefault(name, name)
        # (_depends inlined: this runs for every obligation) each obligation's first
        # dependency, its two joined where it has two
        values, claim_kind = self._values, ObligationKind.CLAIM
        firsts: list[str | None] = []
        for ob in obs:
            claims = ob.compare_claim and ob.kind is not claim_kind
            a = ob.value if not (claims and values[ob.value].claim is not None) else None
            b = ob.other
            if b is not None and claims and values[b].claim is not None:
                b = None
            if a is not None and b is not None:
                uf.union(a, b)
            firsts.append(a if a is not None else b)
        members: dict[str, list[str]] = {}
        for name in self._values:
            p = parent[name]  # (most values hang right under their root: skip the call)
            members.setdefault(p if parent[p] == p else find(name), []).append(name)
        by_region: dict[str, list[Obligation]] = {}
        loose: list[Obligation] = []
        for ob, first in zip(obs, firsts, strict=True):
            if first is not None:
                p = parent[first]
                by_region.setdefault(p if parent[p] == p else find(first), []).append(ob)
            else:
                loose.append(ob)  # literal vs literal: needs no background
        out = [(members[r], o) for r, o in by_region.items()]
        if loose:
            out.append(([], loose))
        return out

    # -- solving ---------------------------------------------------------------
    def prove(self) -> list[Result]:
        obs = [o for o in self.dg.obligations if o.kind is not ObligationKind.STRUCTURAL]
        results: dict[int, Result] = {}
        regions = self.regions(obs)
        for names, _ in regions:
            self.stats.regions += 1
            self.stats.largest_region = max(self.stats.largest_region, len(names))
        if self.tautologies:
            # a region of tautologies alone cannot fail; any other region goes to z3 whole
            # (its solver state, hence a counterexample, is the same as without this)
            todo = []
            tautology, proved = self.tautology, Status.PROVED
            for region in regions:
                for o in region[1]:
                    if not tautology(o):
                        todo.append(region)
                        break
                else:
                    for o in region[1]:
                        results[id(o)] = Result(o, proved)  # (as _proved)
            regions = todo
        if regions:
            solver = z3.Solver(ctx=self.enc.ctx)
            for i in range(0, len(regions), BATCH):
                self._prove_batch(solver, regions[i : i + BATCH], results)
        for o in self.dg.obligations:
            if o.kind is ObligationKind.STRUCTURAL:
                side = Side(o.expected) if o.expected is not None else None
                results[id(o)] = Result(o, Status.PROVED if o.holds else Status.VIOLATED, expected=side)
        return [results[id(o)] for o in self.dg.obligations]

    def _prove_batch(
        self,
        solver: z3.Solver,
        batch: list[tuple[list[str], list[Obligation]]],
        results: dict[int, Result],
    ) -> None:
        """Regions share no term, so the negations of a whole batch are jointly
        unsat iff each region's are: one solver call proves every region of a
        batch that holds; a batch with a failure is bisected down to its regions."""
        verdict = self._check_jointly(solver, batch)
        self.stats.solver_checks += 1
        if verdict == z3.unsat:
            for _, region_obs in batch:
                for o in region_obs:
                    results[id(o)] = self._proved(o)
        elif len(batch) > 1:
            half = len(batch) // 2
            self._prove_batch(solver, batch[:half], results)
            self._prove_batch(solver, batch[half:], results)
        else:
            self._refute(batch[0], results)

    def _check_jointly(self, solver: z3.Solver, batch: list[tuple[list[str], list[Obligation]]]) -> z3.CheckSatResult:
        """Can any obligation of `batch` fail? (In a push/pop scope of `solver`.)"""
        solver.push()
        verdict = self._ask(solver, batch)
        solver.pop()
        return verdict

    def _ask(self, solver: z3.Solver, batch: list[tuple[list[str], list[Obligation]]]) -> z3.CheckSatResult:
        """Assert the batch's group facts into the current scope; check the negations' disjunction."""
        formulas = [self.formula(o) for _, region_obs in batch for o in region_obs]
        groups = {
            d.symbolic.group
            for names, _ in batch
            for n in names
            if (d := self._values[n].definition).kind is DefKind.SYMBOLIC and d.symbolic is not None
        }
        for g in groups:
            for f in self._group_facts.get(g, ()):
                solver.add(f)
        return solver.check(z3.Or(*[z3.Not(f) for f in formulas]))

    def _refute(self, region: tuple[list[str], list[Obligation]], results: dict[int, Result]) -> None:
        """A region that can fail: each obligation alone, the model of a failing one read back as
        the counterexample. In a context of its own that only failing regions enter, in the
        order the bisection meets them, so a counterexample depends on the failing regions alone,
        not on everything proved before it (nor on the engine that found the region)."""
        if self._refuter is None:
            self._refuter = Prover(self.dg)
            self._refuter_solver = z3.Solver(ctx=self._refuter.enc.ctx)
        ref, solver = self._refuter, self._refuter_solver
        solver.push()
        ref._ask(solver, [region])  # as the bisection asked it (the models below follow from this state)
        for o in region[1]:
            self.stats.solver_checks += 1
            f = ref.formula(o)
            r = solver.check(z3.Not(f))
            if r == z3.unsat:
                results[id(o)] = self._proved(o)
            else:
                results[id(o)] = ref._refuted(o, solver.model() if r == z3.sat else None)
        solver.pop()

    def _proved(self, ob: Obligation) -> Result:
        return Result(ob, Status.PROVED)

    def _refuted(self, ob: Obligation, model: z3.ModelRef | None) -> Result:
        blockers = self._blockers(self._depends(ob))
        status = Status.UNPROVEN if blockers or model is None else Status.VIOLATED
        if model is None:
            return Result(ob, status, blockers=tuple(blockers or ["z3 returned unknown"]))
        expected = Side(*self.enc.read(model, self._rhs(ob)))
        if status is Status.UNPROVEN:  # the model's value for a free term means nothing
            return Result(ob, status, None, expected if ob.other is None else None, tuple(blockers))
        produced = Side(*self.enc.read(model, self._lhs(ob)))
        return Result(ob, status, produced, expected, tuple(blockers))


class TextProver(Prover):
    """The same proofs, each batch of regions parsed by z3 from one SMT-LIB string."""

    def __init__(self, dg: DomainGraph, tautologies: bool = True) -> None:
        super().__init__(dg, tautologies)
        self.text = smtlib.TextEncoder(self.enc)
        self._tterms: dict[str, TextTerms] = {}
        self._tformulas: dict[tuple[object, ...], tuple[str, tuple[str, ...]]] = {}

    def tterm(self, name: str) -> TextTerms:
        """`Prover.term` as text: facts inline, aliases substituted, only free and symbolic values unknown."""
        return self._resolve(name, self._tterms, self._leaf_text)

    def _leaf_text(self, name: str, d: Definition) -> TextTerms:
        if d.kind is DefKind.FACT:
            assert d.domain is not None
            return self.text.literal(d.domain, d.real)
        if d.kind is DefKind.SYMBOLIC:
            return self.text.symbolic_terms(d)[0]
        return self.text.var(name)

    def _tlhs(self, ob: Obligation) -> TextTerms:
        return self._lhs_of(ob, self.text.literal, self.tterm)

    def _trhs(self, ob: Obligation) -> TextTerms:
        return self._rhs_of(ob, self.text.literal, self.tterm)

    def tformula(self, ob: Obligation) -> tuple[str, tuple[str, ...]]:
        """The obligation's negation as text, and what a query asking it must also say
        (declarations, symbolic groups' facts)."""
        lhs, rhs = self._tlhs(ob), self._trhs(ob)
        exp_float = ob.expected.is_float if ob.expected is not None else None
        key = (ob.kind, ob.allow_float, ob.check_range, ob.expected_real, exp_float, id(lhs), id(rhs))
        f = self._tformulas.get(key)
        if f is None:
            f = self._tformulas[key] = (f"(not {smtlib.obligation_text(ob, lhs, rhs)})", lhs.decls + rhs.decls)
        return f

    def _check_jointly(self, solver: z3.Solver, batch: list[tuple[list[str], list[Obligation]]]) -> z3.CheckSatResult:
        """As `Prover._check_jointly`, asked as one SMT-LIB text (a failing single region then goes to
        the reference encoding)."""
        negations: dict[str, None] = {}  # identical formulas (repeated blocks) asked once
        extras: dict[str, None] = {}  # declarations and group facts, each once
        for o in (o for _, region_obs in batch for o in region_obs):
            neg, extra = self.tformula(o)
            negations[neg] = None
            if extra:
                extras.update(dict.fromkeys(extra))
        # a symbolic group's facts come with its terms: a group no formula uses constrains
        # nothing the batch asks (its unknowns occur nowhere else)
        goal = next(iter(negations)) if len(negations) == 1 else f"(or {' '.join(negations)})"
        text = "".join(extras) + f"(assert {goal})"
        solver.push()
        solver.add(z3.parse_smt2_string(text, ctx=self.enc.ctx))
        verdict = solver.check()
        solver.pop()
        return verdict


def obligation_formula(enc: Encoder, ob: Obligation, lhs: Terms, rhs: Terms) -> z3.BoolRef:
    """What it means for `ob` to hold, given its two sides."""
    if ob.kind is ObligationKind.NO_FOLD_CHANGE:
        same = enc.same_meaning(lhs, rhs)
        return z3.Or(same, enc.is_gridless_float(lhs)) if ob.allow_float else same
    if ob.kind is ObligationKind.SAME_AS_FIRST:
        return z3.And(enc.same_meaning(lhs, rhs), lhs.real == rhs.real)
    if ob.kind is ObligationKind.CLAIM:
        return enc.fits(lhs, rhs, with_real=False) if ob.check_range else enc.same_meaning(lhs, rhs)
    if ob.expected is not None and ob.expected.is_float and ob.expected_real:
        return lhs.real  # a float consumer accepts any real tensor
    if ob.allow_float:  # a quantize: real input, or codes already in its domain
        return z3.Or(lhs.real, enc.fits(lhs, rhs, with_real=False))
    return enc.fits(lhs, rhs, with_real=ob.expected_real is not None)


def _encodable(d: Domain) -> bool:
    """A literal both encodings can write (a per-tensor scale z3 takes as an exact rational)."""
    return d.is_float or d.per_channel or math.isfinite(d.scale)  # type: ignore[arg-type]


#: name → prover class; "text" is the default, "api" the reference encoding
ENGINES: dict[str, type[Prover]] = {"text": TextProver, "api": Prover}


def prove(dg: DomainGraph, engine: str = "text", tautologies: bool = True) -> tuple[list[Result], ProofStats]:
    """Every obligation's Result. `tautologies=False` asks z3 even where both sides are one
    literal (the reference the tests compare against)."""
    p = ENGINES[engine](dg, tautologies)
    results = p.prove()
    if dg.form != "annotated":  # (symbolic domains: a proof must hold for every calibration outcome)
        results = [_weigh(r) if r.status is Status.VIOLATED and r.obligation.kind in _COPIES else r for r in results]
        results = _off_by_code(dg, results)
        results = _masked(dg, results)
    return results, p.stats


#: Obligations whose producer's codes reach the consumer by a copy (its domain read as the declared one).
_COPIES = frozenset({ObligationKind.NO_FOLD_CHANGE, ObligationKind.CLAIM})


def _weigh(r: Result) -> Result:
    """A refuted equality of two fixed domains across a code copy is a question of numbers:
    it holds when no reachable code moves by more than the requant's own rounding."""
    if r.produced is None or r.expected is None or r.produced.domain is None or r.expected.domain is None:
        return r
    if r.obligation.kind is ObligationKind.CLAIM and (r.produced.real or r.expected.real):
        return r  # (a claim about a real tensor on a grid is no copy of codes; a dropped requant's codes
        #           are copied whatever the Q/DQ program shows them as)
    bound = bounds.dropped_requant(r.produced.domain, r.expected.domain, bounds.COPY)
    if bound is None:
        return r
    status = Status.PROVED if bound.within_rounding else Status.VIOLATED
    return Result(r.obligation, status, r.produced, r.expected, r.blockers, bound)


def _off_by_code(dg: DomainGraph, results: list[Result]) -> list[Result]:
    """An op the backend computes off by input code (an int16 TABLE's interpolation) is weighed over the
    codes the program reaches at its input: within its band there it holds (an info finding says how far
    off); beyond it, for an op the target's probe measured off, a violation that far off there, weighed
    downstream like any other (`_masked`); for one it measured right, or where qflow cannot read the
    input's codes (an artifact read alone), unproven — or, for a rule that found the op off on some code
    (an activation a Cortex-M kernel runs on codes), violated as it found."""
    if not any(r.obligation.off_by_code is not None for r in results):
        return results
    rng = ranges.value_ranges(dg)
    out = []
    for r in results:
        ob, off = r.obligation, r.obligation.off_by_code
        if off is None or r.status not in (Status.PROVED, Status.VIOLATED):
            out.append(r)
            continue
        codes = landing.indexing_codes(dg, ob, rng)  # (at the op whose input codes index its errors)
        if codes is None and r.status is Status.VIOLATED:
            out.append(replace(r, obligation=replace(ob, detail=f"{ob.detail}.")))
            continue
        if codes is None:
            text = f"{ob.detail}; which of its input codes the program reaches is not known here."
            out.append(replace(r, status=Status.UNPROVEN, obligation=replace(ob, detail=text, severity="warning")))
            continue
        worst, at = off.worst(codes)
        text = (
            f"{ob.detail}; over the input codes the program reaches there ({codes[0]} to {codes[1]}), up to "
            f"{worst:.3g} output LSB off (at input code {at})"
        )
        if worst < off.within:
            out.append(_within_band(dg, r, replace(ob, detail=f"{text}: under {off.within:g} LSB"), worst, rng))
            continue
        if not off.measured_off:  # (the op measured right elsewhere: whether its data get there is open)
            text = f"{text}; the target's probe measured the op right on its own inputs."
            out.append(replace(r, status=Status.UNPROVEN, obligation=replace(ob, detail=text, severity="warning")))
            continue
        bound = Bound(worst, math.ceil(worst - 1e-9))
        ob = replace(ob, detail=f"{text}.", bound=bound)
        out.append(replace(r, status=Status.VIOLATED, obligation=ob, bound=bound))
    return out


def _within_band(
    dg: DomainGraph, r: Result, ob: Obligation, worst: float, rng: Mapping[str, ranges.Interval]
) -> Result:
    """An op off by input code within its band where the program reaches it holds, unless what follows makes
    its error more than that band at an output (measured: 00469-tx-arm-a16w8, an int16 exp TABLE 1.25 LSB off,
    then a softmax's sum and reciprocal: the outputs 11 LSB off) — then it is unproven, as a code rounded twice."""
    assert ob.off_by_code is not None
    reach = _weighed(dg, [_band_read(ob, worst)], rng)
    if reach is None or reach.output is None or reach.lsb <= ob.off_by_code.within:
        return replace(r, status=Status.PROVED, obligation=replace(ob, detail=f"{ob.detail}."))
    far = f"up to {reach.lsb:.3g} LSB" if math.isfinite(reach.lsb) else "an amount qflow cannot bound"
    text = f"{ob.detail} there, but what follows moves output {reach.output} by {far} for that error"
    return replace(r, status=Status.UNPROVEN, obligation=replace(ob, detail=f"{text}.", severity="warning"))


def _band_read(ob: Obligation, worst: float) -> landing.Read:
    """An op off by up to `worst` output LSB within its band, as a wrong read `landing` weighs."""
    return landing.Read(replace(ob, bound=Bound(worst, math.ceil(worst - 1e-9))), None, None, False)


def _in_band(dg: DomainGraph, results: list[Result], rng: Mapping[str, ranges.Interval]) -> list[landing.Read]:
    """The ops off by input code that are no violation (within their band, or unproven): their codes are still
    that far off, so how far the violations move the outputs (`Result.reach`) counts them too
    (00469-tx-arm-a16w8: 6 output LSB weighed without its exp TABLE's 1.25, 11 measured). Not whether the
    violations are masked: within its band an op computes right, and the violations alone are weighed
    against the outputs' rounding."""
    reads = []
    for r in results:
        ob = r.obligation
        if r.status is Status.VIOLATED or ob.off_by_code is None or r.masked is not None:
            continue
        worst = ob.off_by_code.worst(landing.indexing_codes(dg, ob, rng))[0]  # (every code where none is known)
        if worst > 0:
            reads.append(_band_read(ob, worst))
    return reads


def _masked(dg: DomainGraph, results: list[Result]) -> list[Result]:
    """The violations, when every one is a wrong code read qflow can bound and, all of them together,
    they move no program output beyond its rounding (`impact`): each then holds (issue #27)."""
    violated = [r for r in results if r.status is Status.VIOLATED]
    if not violated or not dg.outputs:  # (an adapter that does not say what the program returns)
        return results
    if not all(_silent(dg, r.obligation) for r in violated):  # (a load a target refuses is no number)
        return results
    reads = [landing.Read(r.obligation, _domain(r.produced), _domain(r.expected), _copied(r)) for r in violated]
    rng = ranges.value_ranges(dg)
    worst = _weighed(dg, reads, rng)
    if worst is not None and not worst.within_rounding:  # (sharper ranges, where one value is read twice)
        split = ranges.correlated(dg, rng, {r.obligation.node for r in violated})
        sharper = _weighed(dg, reads, split)
        worst = sharper if sharper is not None and sharper.lsb < worst.lsb else worst
        if not worst.within_rounding:  # (flips, errors by code: both sides, one code of a source at a time)
            pieces = by_code.weighed(dg, reads, split)
            worst = pieces if pieces is not None and pieces.lsb < worst.lsb else worst
    if worst is None:
        return results
    if not worst.within_rounding:
        if worst.output is None or not math.isfinite(worst.lsb):
            return results
        if band := _in_band(dg, results, rng):  # (the outputs also carry what the ops within their band are off)
            total = _weighed(dg, reads + band, rng)
            if total is None or total.output is None or not math.isfinite(total.lsb):
                return results
            worst = max(worst, total, key=lambda i: i.lsb)
        return [replace(r, reach=worst) if r.status is Status.VIOLATED else r for r in results]
    return [replace(r, status=Status.PROVED, masked=worst) if r.status is Status.VIOLATED else r for r in results]


def _weighed(dg: DomainGraph, reads: list[landing.Read], rng: Mapping[str, ranges.Interval]) -> impact.Impact | None:
    """How far all the violations `reads` together move the outputs, weighed with the program's value
    ranges `rng`; None when one has no bound."""
    landed = landing.land(dg, reads, rng)
    if landed is None:
        return None
    program = landed.program if landed.program is not None else rng
    return impact.output_error(dg, landed.errors, landed.replaced, program, landed.backend, landed.inherits)


def _silent(dg: DomainGraph, ob: Obligation) -> bool:
    """Does the obligation break by computing wrong numbers on the one target the graph was read for
    (not by refusing the program, which no masking downstream undoes)? A combined target (generic)
    keeps its errors, as it keeps those a constant masks (`integrations.masked`), but for a lowering
    measured to compute wrong on the member it names."""
    if ob.finding_kind == _MEASURED_MISCOMPILE:
        return True
    t = targets.get(dg.target)
    return not t.members and all(targets.get(n).outcome is Outcome.MISCOMPILE for n in ob.targets or (t.name,))


#: A lowering measured to compute wrong numbers whatever the target's usual outcome (an XNNPACK weight-only
#: linear: the delegate drops the scales and runs; tests/test_torchao_models.py).
_MEASURED_MISCOMPILE = "miscompiled-lowering"


def _domain(s: Side | None) -> Domain | None:
    return s.domain if s is not None else None


def _copied(r: Result) -> bool:
    """Does the backend copy the codes across the violated obligation (as `_weigh` reads it)?"""
    if r.obligation.kind is ObligationKind.NO_FOLD_CHANGE:
        return True
    real = (r.produced is not None and r.produced.real) or (r.expected is not None and r.expected.real)
    return r.obligation.kind is ObligationKind.CLAIM and not real
