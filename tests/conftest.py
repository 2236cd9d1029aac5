"""Shared fixtures: every real-pipeline model is built once per session."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "core"))


class _Builds:
    """Builds an example (quantize, export, edge, lower with capture) on first use."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    def __call__(self, name: str) -> Any:
        if name not in self._cache:
            from qflow.examples import models

            self._cache[name] = models.build(name)
        return self._cache[name]


@pytest.fixture(scope="session")
def built() -> _Builds:
    return _Builds()
