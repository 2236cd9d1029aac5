"""Session fixtures of the contract probe: each target's table is measured once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import checks  # noqa: E402
import probe  # noqa: E402

import qflow  # noqa: E402


@pytest.fixture(scope="session")
def arm_table() -> dict[tuple[str, str], probe.Measurement]:
    pytest.importorskip("tosa_reference_model")
    return checks.table(probe.ArmBackend(), custom_forced=False)


@pytest.fixture(scope="session")
def xnnpack_table() -> dict[tuple[str, str], probe.Measurement]:
    # Forced variants annotate ops the stock XNNPACKQuantizer leaves float (a custom annotation).
    return checks.table(probe.XnnpackBackend(), custom_forced=True)


@pytest.fixture(scope="session")
def xnnpack_fusion() -> dict[str, probe.Measurement]:
    return {m.case: m for m in probe.measure_batch(probe.XnnpackBackend(), list(probe.FUSION_CASES), "stock")}


@pytest.fixture(scope="session")
def verdicts():
    """Error findings per branch of each analysed program, analysed once."""
    cache: dict[tuple[int, str], dict[int, set[str]]] = {}

    def errors(obj, target: str) -> dict[int, set[str]]:
        key = (id(obj), target)
        if key not in cache:
            hit: dict[int, set[str]] = {}
            for f in qflow.analyze(obj, target=target).errors:
                if (b := checks.branch(f)) is not None:
                    hit.setdefault(b, set()).add(f.kind)
            cache[key] = hit
        return cache[key]

    return errors


@pytest.fixture(scope="session")
def cortex_m_table() -> dict[tuple[str, str], probe.Measurement]:
    return checks.table(probe.CortexMBackend(), custom_forced=False)
