"""The campaign's generator (benchmarks/soundness/gen.py): the transformer menu (issue #30) draws every
op it lists and builds valid models, and adding it left the CNN menu's cases as they were recorded."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

CAMPAIGN = Path(__file__).resolve().parent.parent / "benchmarks" / "soundness"
sys.path.insert(0, str(CAMPAIGN))

import gen  # noqa: E402


def test_the_transformer_menu_draws_every_op_into_valid_models() -> None:
    seen: set[str] = set()
    for seed in range(60):
        spec = gen.generate(seed, "transformer")
        assert spec["menu"] == "transformer"
        model = gen.SpecModel(spec).eval()
        with torch.no_grad():
            out = model(*gen.sample_inputs(spec, 1, seed)[0])
        assert all(torch.isfinite(t).all() for t in (out if isinstance(out, tuple) else (out,)))
        seen |= {op["kind"] for op in spec["ops"]}
    assert set(gen.TRANSFORMER) <= seen


def test_the_cnn_cases_are_the_recorded_ones() -> None:
    """The results file's records name each case's op count and op kinds: the generator still makes them."""
    for line in (CAMPAIGN / "results.jsonl").read_text().splitlines()[:60]:
        rec = json.loads(line)
        if "ops" not in rec:
            continue
        spec = gen.generate(int(rec["id"][:5]))
        assert "menu" not in spec
        assert len(spec["ops"]) == rec["n_ops"] and sorted({op["kind"] for op in spec["ops"]}) == rec["ops"]
