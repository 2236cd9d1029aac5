"""Propagate domains to a fixpoint over the value definitions."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from qflow.graph import Definition, DefKind
from qflow.lattice.elements import BOTTOM, Elem, free, join, known, symbolic


def transfer(d: Definition, env: Mapping[str, Elem]) -> Elem:
    """The element a definition yields given the current elements of its sources."""
    if d.kind is DefKind.FACT:
        assert d.domain is not None
        return known(d.domain, d.real)
    if d.kind is DefKind.SYMBOLIC:
        assert d.symbolic is not None
        return symbolic(d.symbolic.group)
    if d.kind is DefKind.FREE:
        return free(d.reason or "no fact")
    out = BOTTOM
    for s in d.sources:
        out = join(out, env.get(s, BOTTOM))
    return out


def propagate(defs: Mapping[str, Definition]) -> dict[str, Elem]:
    """Chaotic iteration to the least fixpoint.

    Terminates on any graph, cyclic or not: each element only moves up a
    lattice of height 3, and a value is revisited only when a source moved.
    In a graph listed in topological order (every FX graph) each value is
    visited once. A fact's element is made once per (domain object, real) and
    shared, so equal elements are mostly the same object (compared by identity first).
    """
    facts: dict[tuple[int, bool], Elem] = {}
    env: dict[str, Elem] = {}
    # One pass in the listed order; a value whose source comes later (a cycle,
    # or a graph not listed in topological order) sends the rest to the worklist.
    behind = False
    for name, d in defs.items():
        if d.kind is DefKind.FACT:
            assert d.domain is not None
            key = (id(d.domain), d.real)  # the domain objects live in `defs` meanwhile
            t = facts.get(key)
            if t is None:
                t = facts[key] = known(d.domain, d.real)
            env[name] = t
            continue
        if d.kind is DefKind.ALIAS:
            behind = behind or any(s not in env for s in d.sources)
        env[name] = transfer(d, env)
    if behind:
        _iterate(defs, env)
    return env


def _iterate(defs: Mapping[str, Definition], env: dict[str, Elem]) -> None:
    """Chaotic iteration from `env` (below the fixpoint) up to the least fixpoint."""
    users: dict[str, list[str]] = {}
    for name, d in defs.items():
        for s in d.sources:
            users.setdefault(s, []).append(name)
    work = deque(defs)
    queued = set(defs)
    while work:
        name = work.popleft()
        queued.discard(name)
        t = transfer(defs[name], env)
        old = env.get(name, BOTTOM)
        new = t if old is BOTTOM else join(old, t)  # ⊥ ⊔ t = t
        if new is not old and (new.kind is not old.kind or new != old):
            env[name] = new
            for u in users.get(name, ()):
                if u not in queued:
                    queued.add(u)
                    work.append(u)
