"""Lattice laws and propagation properties (hypothesis)."""

from __future__ import annotations

from builder import A, B, C
from hypothesis import given, settings
from hypothesis import strategies as st

from qflow.graph import Definition, DefKind
from qflow.lattice import BOTTOM, TOP, free, join, known, propagate, symbolic
from qflow.lattice.elements import leq
from qflow.lattice.propagate import transfer

elems = st.sampled_from(
    [BOTTOM, TOP, known(A), known(B), known(C), known(A, real=True), free("x"), free("y"), symbolic("g0")]
)


@given(elems, elems)
def test_join_commutative(a, b) -> None:
    assert join(a, b) == join(b, a)


@given(elems, elems, elems)
def test_join_associative(a, b, c) -> None:
    assert join(join(a, b), c) == join(a, join(b, c))


@given(elems)
def test_join_idempotent(a) -> None:
    assert join(a, a) == a


@given(elems, elems)
def test_join_is_an_upper_bound(a, b) -> None:
    assert leq(a, join(a, b)) and leq(b, join(a, b))


def _defs(draw_edges, facts):
    """Definitions over n values: value i aliases its listed sources, or is a fact."""
    defs = {}
    for i, srcs in enumerate(draw_edges):
        if i in facts:
            defs[f"v{i}"] = Definition(DefKind.FACT, facts[i])
        else:
            defs[f"v{i}"] = Definition(DefKind.ALIAS, sources=tuple(f"v{s}" for s in srcs))
    return defs


graphs = st.integers(2, 12).flatmap(
    lambda n: st.tuples(
        st.lists(st.lists(st.integers(0, n - 1), max_size=3), min_size=n, max_size=n),  # may be cyclic
        st.dictionaries(st.integers(0, n - 1), st.sampled_from([A, B, C]), max_size=n),
    )
)


@settings(max_examples=200, deadline=None)
@given(graphs)
def test_propagation_terminates_and_is_a_fixpoint(g) -> None:
    edges, facts = g
    defs = _defs(edges, facts)
    env = propagate(defs)  # terminates on cyclic graphs too
    assert set(env) == set(defs)
    for name, d in defs.items():
        if d.kind is DefKind.ALIAS:
            expect = BOTTOM
            for s in d.sources:
                expect = join(expect, env[s])
            assert leq(expect, env[name])


@settings(max_examples=200, deadline=None)
@given(graphs, st.integers(0, 11), st.sampled_from([A, B, C]))
def test_propagation_is_monotone(g, extra, dom) -> None:
    """Adding a fact never moves any value down the lattice."""
    edges, facts = g
    before = propagate(_defs(edges, facts))
    more = dict(facts)
    k = extra % len(edges)
    if k in facts:
        return
    # raising an unconstrained alias value to a fact only adds information
    if edges[k]:
        return
    more[k] = dom
    after = propagate(_defs(edges, more))
    for name in before:
        assert leq(before[name], after[name])


@settings(max_examples=300, deadline=None)
@given(graphs)
def test_propagation_is_the_least_fixpoint(g) -> None:
    """The same elements as Kleene iteration from ⊥ (sweeps until nothing moves),
    whatever the order: propagate's single pass must not stop above or below it."""
    edges, facts = g
    defs = _defs(edges, facts)
    env = dict.fromkeys(defs, BOTTOM)
    moved = True
    while moved:
        moved = False
        for name, d in defs.items():
            t = transfer(d, env)
            if t != env[name]:
                env[name], moved = t, True
    assert propagate(defs) == env
    assert propagate(dict(reversed(defs.items()))) == env
