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
