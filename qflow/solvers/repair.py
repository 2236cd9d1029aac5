"""Minimal requant planning with z3 Optimize.

The planning model is the *physical* one: a pass-through op's domain is
whatever codes reach it (its claim, if any, is rewritten afterwards), and each
candidate edge carries a boolean "a requant sits here" that relaxes the
equality across it. Minimize the number of requants (or the bytes they move)
subject to every obligation holding. Each independent region is optimized on
its own.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction

import z3

from qflow.domain import DTYPE_RANGE, FLOAT, Domain
from qflow.gc_pause import paused_gc
from qflow.graph import DefKind, DomainGraph, Obligation, ObligationKind
from qflow.lattice import Elem, ElemKind, propagate
from qflow.ops import OpClass
from qflow.solvers.encode import Encoder
from qflow.solvers.prove import Status, _UnionFind, obligation_formula, prove

_ITEMSIZE = {"int4": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4}
#: Integer dtypes a requant can be written in (a quantize/dequantize pair of that dtype).
INSERTABLE_DTYPES = frozenset({"int4", "int8", "uint8", "int16", "int32"})
#: Prefix of the values of a delegate's partition inside a lowered program's graph.
DELEGATE_SEP = "/"


def insertable(d: Domain | None, int16_zero_point_zero: bool = True) -> bool:
    """Can a requant be written *into* `d`? A per-tensor integer domain whose
    code range lies inside its dtype's (int16 is [-32768, 32767]), with zero
    point 0 for int16 where the target demands it (TOSA)."""
    if d is None or d.is_float or d.per_channel or d.opaque is not None or d.dtype not in INSERTABLE_DTYPES:
        return False
    lo, hi = DTYPE_RANGE[d.dtype]
    if not (lo <= d.qmin <= d.qmax <= hi and lo <= int(d.zero_point) <= hi):  # type: ignore[arg-type]
        return False
    if not float(d.scale) > 0:  # type: ignore[arg-type]
        return False
    return not (int16_zero_point_zero and d.dtype == "int16" and d.zero_point != 0)


@dataclass(frozen=True)
class Requant:
    """Insert a requantize on `edge` (producer → consumer): codes in `source`
    become codes in `target`."""

    edge: tuple[str, str]
    source: Domain
    target: Domain
    source_real: bool = False  # the producer hands over real numbers on `source`'s grid
    cost: int = 1
    #: The consumer reads real numbers on `target`'s grid (True), codes (False), or either (None).
    target_real: bool | None = None

    def __str__(self) -> str:
        return f"requant {self.edge[0]} → {self.edge[1]}: {self.source} → {self.target}"


@dataclass
class Plan:
    requants: list[Requant] = field(default_factory=list)
    #: Pass-through ops whose claimed output domain must become their physical one.
    reclaims: dict[str, Domain] = field(default_factory=dict)
    #: Quantize nodes after a non-fuseable activation: (old domain, own domain
    #: with zero point == qmin). The rewrite gives the activation the new domain
    #: and requantizes into the old one right after it.
    activation_domains: dict[str, tuple[Domain, Domain]] = field(default_factory=dict)
    #: Delegate outputs whose parent-side dtype must become the integer domain
    #: the partition really writes (a CPU dequantize then restores the float view).
    boundaries: dict[str, Domain] = field(default_factory=dict)
    #: Obligations no requant can discharge (unknown ops, missing facts).
    unrepairable: list[Obligation] = field(default_factory=list)
    objective: str = "count"
    #: Why each unrepairable obligation cannot be repaired, in words.
    reasons: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.requants or self.reclaims or self.activation_domains or self.boundaries)

    def counts(self) -> dict[str, int]:
        """How many changes of each kind the plan makes (what a summary shows)."""
        return {
            "requants": len(self.requants),
            "reclaims": len(self.reclaims),
            "activation_domains": len(self.activation_domains),
            "boundaries": len(self.boundaries),
            "unrepairable": len(self.unrepairable),
        }

    def summary(self) -> str:
        """One phrase naming every change, e.g. "1 requant, 1 claim corrected"."""
        c = self.counts()
        parts = [
            f"{c['requants']} requant(s) inserted",
            f"{c['reclaims']} claim(s) corrected",
            f"{c['activation_domains']} activation domain(s) given",
            f"{c['boundaries']} delegate output(s) made integer",
        ]
        return ", ".join(parts)

    def delegates(self) -> list[str]:
        """The delegates (``lowered_module_N``) whose partition the plan would change."""
        names: list[str] = []
        for n in self.touched():
            if DELEGATE_SEP in n:
                names.append(n.split(DELEGATE_SEP, 1)[0])
        return list(dict.fromkeys(names))

    def touched(self) -> list[str]:
        """Every graph node the plan rewrites or inserts next to."""
        out = [n for rq in self.requants for n in rq.edge]
        out += list(self.reclaims) + list(self.activation_domains) + list(self.boundaries)
        return out

    def to_json(self) -> dict[str, object]:
        """The plan as plain data (`qflow.plan/1`), for reports and the CLI."""
        return {
            "schema": "qflow.plan/1",
            "objective": self.objective,
            "counts": self.counts(),
            "requants": [
                {
                    "edge": list(rq.edge),
                    "source": rq.source.to_dict(),
                    "target": rq.target.to_dict(),
                    "source_real": rq.source_real,
                    "cost": rq.cost,
                }
                for rq in self.requants
            ],
            "reclaims": {n: d.to_dict() for n, d in self.reclaims.items()},
            "activation_domains": {
                n: {"old": old.to_dict(), "own": own.to_dict()} for n, (old, own) in self.activation_domains.items()
            },
            "boundaries": {n: d.to_dict() for n, d in self.boundaries.items()},
            "unrepairable": [{"node": o.node, "kind": o.finding_kind, "arg": o.arg} for o in self.unrepairable],
            "reasons": list(self.reasons),
        }


def _blocked(dg: DomainGraph, name: str) -> str:
    """The value (and why) that leaves `name`'s domain unknowable, or ""."""
    seen: set[str] = set()
    while name not in seen:
        seen.add(name)
        v = dg.value(name)
        d = v.definition
        if d.kind is DefKind.FREE:
            return f"{name} ({v.target}{': ' + d.reason if d.reason else ''})" if d.blocking else ""
        if d.kind is not DefKind.ALIAS or not d.sources:
            return ""
        name = d.sources[0]
    return ""


class Planner:
    def __init__(self, dg: DomainGraph, objective: str = "count", int16_zero_point_zero: bool = True) -> None:
        if objective not in ("count", "bytes"):
            raise ValueError("objective must be 'count' or 'bytes'")
        self.dg, self.objective = dg, objective
        #: The target demands int16 zero point 0 (TOSA; the generic target, which is every shipped one).
        self.int16_zp0 = int16_zero_point_zero
        self.enc = Encoder()
        self.ctx = self.enc.ctx
        self._r: dict[tuple[str, str], z3.BoolRef] = {}
        self._env: dict[str, Elem] | None = None
        self._ids: set[str] = set()

    def r(self, edge: tuple[str, str]) -> z3.BoolRef:
        b = self._r.get(edge)
        if b is None:
            b = z3.Bool(f"rq[{edge[0]}->{edge[1]}]", self.ctx)
            self._r[edge] = b
        return b

    def cost(self, edge: tuple[str, str], target: Domain | None = None) -> int:
        if self.objective == "count":
            return 1
        v = self.dg.value(edge[0])
        size = _ITEMSIZE.get(target.dtype if target else (v.dtype or ""), 1)
        return max(1, (v.numel or 1) * size)

    # -- constraints ------------------------------------------------------------
    def _identity_values(self) -> list[str]:
        return [
            v.name
            for v in self.dg.values()
            if v.definition.kind is DefKind.ALIAS and v.definition.sources and v.op_class is not OpClass.UNKNOWN
        ]

    def constraints(self, ob: Obligation) -> list[z3.BoolRef]:
        if ob.kind not in (ObligationKind.USE, ObligationKind.NO_FOLD_CHANGE) or ob.expected is None:
            return []  # SAME_AS_FIRST and CLAIM are covered by the identity constraints
        lhs = self.enc.var(ob.value)  # physical: a claim is rewritten, not trusted
        rhs = self.enc.literal(ob.expected, bool(ob.expected_real))
        holds = obligation_formula(self.enc, ob, lhs, rhs)
        if not ob.edge:
            return [holds]
        if ob.edge[1] in self._ids:
            # the consumer is a pass-through op of the region: a requant there is
            # written into that op's own (physical) domain, which must then hold
            after = obligation_formula(self.enc, ob, self.enc.var(ob.edge[1]), rhs)
            return [z3.If(self.r(ob.edge), after, holds)]
        return [z3.Or(z3.And(self.r(ob.edge), self._writable(ob.value, ob.expected, ob.expected_real)), holds)]

    def _writable(self, source: str, target: Domain, target_real: bool | None) -> z3.BoolRef:
        """A requant from `source`'s physical domain into `target` can be written:
        into an insertable integer domain, or a dequantize of integer codes into
        real numbers."""
        if insertable(target, self.int16_zp0):
            return z3.BoolVal(True, self.ctx)
        if target.is_float:
            t = self.enc.var(source)
            return z3.And(t.dt != 0, z3.Not(t.real))
        return z3.BoolVal(False, self.ctx)

    def identity(self, name: str, candidates: list[Domain], obs: list[Obligation] = ()) -> list[z3.BoolRef]:  # type: ignore[assignment]
        """A pass-through op's codes equal every input's, unless a requant sits
        on that input; a requant on an input makes the op's domain one of the
        region's insertable `candidates` (never a float or a made-up range) in
        the input's representation (codes stay codes, real numbers stay real),
        and no coarser than what each direct consumer declares unless it is
        exactly that: a second requant after a coarser grid would round twice
        and change what the model computes."""
        out = []
        t = self.enc.var(name)
        one_of = z3.Or(*[self.enc.eq(t, self.enc.literal(c), with_real=False) for c in candidates], self.ctx)
        fine = [
            z3.Or(self.enc.same_meaning(t, self.enc.literal(o.expected)), t.s <= Fraction(float(o.expected.scale)))  # type: ignore[arg-type]
            for o in obs
            if o.value == name and o.expected is not None and insertable(o.expected, False)
        ]
        one_of = z3.And(one_of, *fine) if fine else one_of
        for s in self.dg.value(name).definition.sources:
            rq = self.r((s, name))
            out.append(z3.Or(rq, self.enc.eq(t, self.enc.var(s))))
            if _blocked(self.dg, s):  # codes of unknown meaning: no requant can start from them
                out.append(z3.Not(rq))
            else:
                out.append(z3.Implies(rq, z3.And(one_of, t.real == self.enc.var(s).real)))
        return out

    def candidates(self, names: Iterable[str], obs: list[Obligation]) -> list[Domain]:
        """The integer domains a requant in this region may target: those the
        program itself uses there (facts, declared inputs, claims), if insertable."""
        found: list[Domain] = []
        for n in names:
            v = self.dg.value(n)
            found += [d for d in (v.definition.domain, v.claim) if d is not None]
        found += [o.expected for o in obs if o.expected is not None]
        return [d for d in dict.fromkeys(found) if insertable(d, self.int16_zp0)]

    def _boundary_input(self, ob: Obligation) -> Requant | None:
        """A delegate input fed the wrong dtype: real numbers where the partition
        reads codes get a CPU quantize into its domain; codes where it reads
        real numbers get a CPU dequantize with the codes' own domain (from the
        lattice: unknown there means no repair)."""
        if ob.expected is None or ob.edge is None:
            return None
        if not ob.expected.is_float:
            return Requant(ob.edge, FLOAT, ob.expected, source_real=True)
        if self._env is None:
            self._env = propagate({v.name: v.definition for v in self.dg.values()})
        e = self._env.get(ob.value)
        if e is None or e.kind is not ElemKind.KNOWN or e.domain is None or e.domain.is_float or e.real:
            return None
        return Requant(ob.edge, e.domain, FLOAT)

    # -- solve --------------------------------------------------------------------
    def plan(self) -> Plan:
        plan = Plan(objective=self.objective)
        obs: list[Obligation] = []
        for ob in self.dg.obligations:
            if ob.kind is ObligationKind.STRUCTURAL:
                # a rule that knows a domain in which the quantize at the end of
                # its edge computes right (an activation's exactly fuseable one,
                # a zero-point-only op's input scale) gets it, then a requant
                fixable = not ob.holds or ob.finding_kind == "non-fuseable-activation"
                if (
                    fixable
                    and ob.fix_domain
                    and ob.edge
                    and ob.expected
                    and not insertable(ob.fix_domain, self.int16_zp0)
                ):
                    # the domain that would make it exact cannot be written here (TOSA: int16 zero point 0)
                    if not ob.holds:
                        self._unrepairable(plan, ob, self._not_writable(ob.fix_domain, "the domain it needs"))
                elif fixable and ob.fix_domain and ob.edge and ob.expected:
                    plan.activation_domains[ob.edge[1]] = (ob.expected, ob.fix_domain)
                elif ob.finding_kind == "delegate-dtype-mismatch" and not ob.holds and ob.arg.startswith("input"):
                    rq = self._boundary_input(ob)
                    if rq is None:
                        self._unrepairable(plan, ob, "the domain of the codes fed to the delegate is unknown")
                    else:
                        plan.requants.append(rq)
                elif ob.finding_kind == "delegate-dtype-mismatch" and not ob.holds and ob.expected:
                    plan.boundaries[ob.node] = ob.expected
                elif not ob.holds:
                    self._unrepairable(plan, ob, "no requant changes this (a rule outside domain equality)")
                continue
            deps = [ob.value] + ([ob.other] if ob.other else [])
            blockers = [b for d in deps if (b := _blocked(self.dg, d))]
            if blockers:
                self._unrepairable(plan, ob, f"it depends on {', '.join(blockers)}, whose domain qflow cannot know")
            elif ob.kind in (ObligationKind.USE, ObligationKind.NO_FOLD_CHANGE):
                obs.append(ob)
        identities = self._identity_values()
        uf = _UnionFind()
        for n in identities:
            for s in self.dg.value(n).definition.sources:
                uf.union(n, s)
        for ob in obs:
            uf.find(ob.value)
        regions: dict[str, tuple[list[str], list[Obligation]]] = {}
        for n in identities:
            regions.setdefault(uf.find(n), ([], []))[0].append(n)
        for ob in obs:
            regions.setdefault(uf.find(ob.value), ([], []))[1].append(ob)
        failing = self._failing_roots(uf)
        for root, (ids, region_obs) in regions.items():
            if root in failing:
                self._solve_region(ids, region_obs, plan)
        return plan

    def _not_writable(self, d: Domain, what: str) -> str:
        why = f"{what}, {d}, is not one a requant can write on this target"
        if d.dtype == "int16" and d.zero_point != 0 and self.int16_zp0:
            why += " (int16 needs zero point 0 on TOSA)"
        return why

    @staticmethod
    def _unrepairable(plan: Plan, ob: Obligation, why: str) -> None:
        plan.unrepairable.append(ob)
        plan.reasons.append(f"{ob.node} ({ob.finding_kind}): {why}")

    def _failing_roots(self, uf: _UnionFind) -> set[str]:
        """Regions with an obligation that does not prove. Every other region's
        optimum is no requant and no reclaim, so it is not solved: one batched
        proof instead of one z3 Optimize call per region (minutes at 100k nodes)."""
        results, _ = prove(self.dg)
        return {
            uf.find(n)
            for r in results
            if r.status is not Status.PROVED
            for n in (r.obligation.value, r.obligation.other)
            if n is not None
        }

    def _region_values(self, ids: list[str], obs: list[Obligation]) -> set[str]:
        names = set(ids)
        for n in ids:
            names.update(self.dg.value(n).definition.sources)
        names.update(o.value for o in obs)
        return names

    def region_constraints(self, ids: list[str], obs: list[Obligation]) -> list[z3.BoolRef]:
        """Definitions of the region's other values, relaxable identities, and
        every obligation unless a requant sits on its edge."""
        out = []
        self._ids = set(ids)
        names = self._region_values(ids, obs)
        cands = self.candidates(names, obs)
        for n in names - set(ids):
            out += self.enc.define(n, self.dg.value(n).definition)
        for n in ids:
            out += self.identity(n, cands, obs)
        for ob in obs:
            out += self.constraints(ob)
        return out

    def _solve_region(self, ids: list[str], obs: list[Obligation], plan: Plan) -> None:
        opt = z3.Optimize(ctx=self.ctx)
        for f in self.region_constraints(ids, obs):
            opt.add(f)
        edges = self._region_edges(ids, obs)
        if not edges:
            return
        for edge in edges:
            opt.add_soft(z3.Not(self.r(edge)), self.cost(edge))
        if opt.check() != z3.sat:
            for ob in obs:
                exp = ob.expected
                if exp is not None and not exp.is_float and not insertable(exp, self.int16_zp0):
                    self._unrepairable(plan, ob, self._not_writable(exp, "its declared domain"))
                else:
                    plan.unrepairable.append(ob)
            if not plan.reasons:
                plan.reasons.append(f"no requant into a domain the program uses makes {obs[0].node} hold")
            return
        model = opt.model()
        self._read_plan(model, ids, obs, edges, plan)

    def _region_edges(self, ids: list[str], obs: list[Obligation]) -> list[tuple[str, str]]:
        edges: list[tuple[str, str]] = []
        for n in ids:
            edges.extend((s, n) for s in self.dg.value(n).definition.sources)
        edges.extend(o.edge for o in obs if o.edge is not None)
        return list(dict.fromkeys(edges))

    def _read_plan(
        self,
        model: z3.ModelRef,
        ids: list[str],
        obs: list[Obligation],
        edges: Iterable[tuple[str, str]],
        plan: Plan,
    ) -> None:
        needed: dict[tuple[str, str], tuple[Domain, bool | None]] = {}
        for n in ids:  # a requant into a pass-through op writes that op's physical domain
            dom, real = self.enc.read(model, self.enc.var(n))
            for s in self.dg.value(n).definition.sources:
                needed[(s, n)] = (dom, real)
        for ob in obs:
            if ob.edge is not None and ob.expected is not None:
                needed.setdefault(ob.edge, (ob.expected, ob.expected_real))
        for edge in edges:
            if not z3.is_true(model.eval(self.r(edge), model_completion=True)):
                continue
            src, src_real = self.enc.read(model, self.enc.var(edge[0]))
            target, target_real = needed[edge]
            rq = Requant(edge, src, target, src_real, self.cost(edge, target), target_real)
            if not (insertable(target, self.int16_zp0) or (target.is_float and not src.is_float and not src_real)):
                # the constraints forbid this; should it ever happen, refuse rather than write it
                plan.reasons.append(f"{edge[1]}: qflow found no requant it can write ({rq})")
                continue
            plan.requants.append(rq)
        for n in ids:
            claim = self.dg.value(n).claim
            if claim is None or any(_blocked(self.dg, x) for x in (n, *self.dg.value(n).definition.sources)):
                continue  # an unknown physical domain is not one to claim
            phys, _ = self.enc.read(model, self.enc.var(n))
            if phys != claim:
                plan.reclaims[n] = phys


@paused_gc()
def plan_repair(dg: DomainGraph, objective: str = "count", int16_zero_point_zero: bool = True) -> Plan:
    """The minimal set of requants that makes every repairable obligation hold.
    Requants only ever target integer domains the program already uses and the
    target accepts (`int16_zero_point_zero`: TOSA, and the generic target)."""
    return Planner(dg, objective, int16_zero_point_zero).plan()


def brute_force_size(dg: DomainGraph) -> int | None:
    """The smallest number of requants, by enumerating edge subsets (tests only:
    exponential, for graphs with a handful of candidate edges)."""
    p = Planner(dg)
    obs = [o for o in dg.obligations if o.kind in (ObligationKind.USE, ObligationKind.NO_FOLD_CHANGE)]
    ids = p._identity_values()
    edges = p._region_edges(ids, obs)
    base = z3.Solver(ctx=p.ctx)
    for f in p.region_constraints(ids, obs):
        base.add(f)
    for k in range(len(edges) + 1):
        for subset in itertools.combinations(edges, k):
            chosen = set(subset)
            assumptions = [p.r(e) if e in chosen else z3.Not(p.r(e)) for e in edges]
            if base.check(*assumptions) == z3.sat:
                return k
    return None


__all__ = ["Plan", "Requant", "brute_force_size", "plan_repair"]
