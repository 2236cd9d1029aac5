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

import z3

from qflow.domain import FLOAT, Domain
from qflow.gc_pause import paused_gc
from qflow.graph import DefKind, DomainGraph, Obligation, ObligationKind
from qflow.lattice import Elem, ElemKind, propagate
from qflow.ops import OpClass
from qflow.solvers.encode import Encoder
from qflow.solvers.prove import Status, _UnionFind, obligation_formula, prove

_ITEMSIZE = {"int4": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4}


@dataclass(frozen=True)
class Requant:
    """Insert a requantize on `edge` (producer → consumer): codes in `source`
    become codes in `target`."""

    edge: tuple[str, str]
    source: Domain
    target: Domain
    source_real: bool = False  # the producer hands over real numbers on `source`'s grid
    cost: int = 1

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

    @property
    def empty(self) -> bool:
        return not (self.requants or self.reclaims or self.activation_domains or self.boundaries)


def _blocked(dg: DomainGraph, name: str) -> bool:
    seen: set[str] = set()
    while name not in seen:
        seen.add(name)
        d = dg.value(name).definition
        if d.kind is DefKind.FREE:
            return d.blocking
        if d.kind is not DefKind.ALIAS or not d.sources:
            return False
        name = d.sources[0]
    return False


class Planner:
    def __init__(self, dg: DomainGraph, objective: str = "count") -> None:
        if objective not in ("count", "bytes"):
            raise ValueError("objective must be 'count' or 'bytes'")
        self.dg, self.objective = dg, objective
        self.enc = Encoder()
        self.ctx = self.enc.ctx
        self._r: dict[tuple[str, str], z3.BoolRef] = {}
        self._env: dict[str, Elem] | None = None

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
        holds = obligation_formula(self.enc, ob, lhs, self.enc.literal(ob.expected, bool(ob.expected_real)))
        return [z3.Or(self.r(ob.edge), holds)] if ob.edge else [holds]

    def identity(self, name: str) -> list[z3.BoolRef]:
        """A pass-through op's codes equal every input's, unless a requant sits on that input."""
        out = []
        t = self.enc.var(name)
        for s in self.dg.value(name).definition.sources:
            out.append(z3.Or(self.r((s, name)), self.enc.eq(t, self.enc.var(s))))
        return out

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
                if fixable and ob.fix_domain and ob.edge and ob.expected:
                    plan.activation_domains[ob.edge[1]] = (ob.expected, ob.fix_domain)
                elif ob.finding_kind == "delegate-dtype-mismatch" and not ob.holds and ob.arg.startswith("input"):
                    rq = self._boundary_input(ob)
                    if rq is None:
                        plan.unrepairable.append(ob)
                    else:
                        plan.requants.append(rq)
                elif ob.finding_kind == "delegate-dtype-mismatch" and not ob.holds and ob.expected:
                    plan.boundaries[ob.node] = ob.expected
                elif not ob.holds:
                    plan.unrepairable.append(ob)
                continue
            deps = [ob.value] + ([ob.other] if ob.other else [])
            if any(_blocked(self.dg, d) for d in deps):
                plan.unrepairable.append(ob)
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
        for n in self._region_values(ids, obs) - set(ids):
            out += self.enc.define(n, self.dg.value(n).definition)
        for n in ids:
            out += self.identity(n)
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
            plan.unrepairable.extend(obs)
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
        needed: dict[tuple[str, str], Domain] = {}
        for ob in obs:
            if ob.edge is not None and ob.expected is not None:
                needed[ob.edge] = ob.expected
        for n in ids:
            dom, _ = self.enc.read(model, self.enc.var(n))
            for s in self.dg.value(n).definition.sources:
                needed.setdefault((s, n), dom)
        for edge in edges:
            if not z3.is_true(model.eval(self.r(edge), model_completion=True)):
                continue
            src, src_real = self.enc.read(model, self.enc.var(edge[0]))
            plan.requants.append(Requant(edge, src, needed[edge], src_real, self.cost(edge, needed[edge])))
        for n in ids:
            claim = self.dg.value(n).claim
            if claim is None:
                continue
            phys, _ = self.enc.read(model, self.enc.var(n))
            if phys != claim:
                plan.reclaims[n] = phys


@paused_gc()
def plan_repair(dg: DomainGraph, objective: str = "count") -> Plan:
    """The minimal set of requants that makes every repairable obligation hold."""
    return Planner(dg, objective).plan()


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
