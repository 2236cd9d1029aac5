"""The collector is paused inside qflow's work and restored as it was."""

from __future__ import annotations

import gc

import pytest

from qflow.gc_pause import paused_gc


def test_paused_and_restored_even_on_error() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused_gc():
        assert not gc.isenabled()
        raise RuntimeError
    assert gc.isenabled()


def test_a_caller_who_disabled_it_keeps_it_disabled() -> None:
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_analyze_proves_inside_one_pause_and_restores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building and proving share one pause (the graph is freed before the collector
    runs again), and the collector is on again afterwards."""
    from builder import A, G

    import qflow.api

    seen = []
    real = qflow.api.analyze_graph

    def spy(dg, name=""):
        seen.append(gc.isenabled())
        return real(dg, name=name)

    monkeypatch.setattr(qflow.api, "analyze_graph", spy)
    g = G()
    g.fact("conv", A)
    g.passthrough("view", "conv")
    g.use("view", "linear", A)
    assert qflow.api.analyze(g.dg).proved
    assert seen == [False] and gc.isenabled()
