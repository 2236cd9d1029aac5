"""The campaign's scoring cannot hide a miss (issue #31): `summary.py --check` fails on each
situation the old rules let through, built from real records of the recorded campaign
(tests/data/campaign_records.jsonl, copied from benchmarks/soundness/results.jsonl), and a
worker that dies is recorded as dying in the stage it died in."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CAMPAIGN = Path(__file__).resolve().parent.parent / "benchmarks" / "soundness"
sys.path.insert(0, str(CAMPAIGN))

import summary  # noqa: E402

RECORDS = {r["id"]: r for r in map(json.loads, (Path(__file__).parent / "data" / "campaign_records.jsonl").open())}
PROVED = {"verdict": "proved", "findings": [], "obligations": {"proved": 10, "violated": 0, "unproven": 0}}


def _check(tmp_path: Path, *recs: dict[str, Any]) -> tuple[int, str]:
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    proc = subprocess.run(
        [sys.executable, str(CAMPAIGN / "summary.py"), str(path), "--check", "-o", str(tmp_path / "s.md")],
        capture_output=True,
        text=True,
    )
    return proc.returncode, proc.stderr


def test_a_correct_record_passes(tmp_path) -> None:
    assert _check(tmp_path, RECORDS["00001-arm-pt"]) == (0, "")


def test_a_marginal_case_said_proved_is_a_miss(tmp_path) -> None:
    r = copy.deepcopy(RECORDS["00243-arm-custom"])  # 247 output LSB off, marginal under the old rule
    r["qflow"]["pre"] = PROVED
    rc, err = _check(tmp_path, r)
    assert rc == 1 and "soundness miss: 00243-arm-custom (marginal, proved" in err


def test_an_output_cannot_hide_in_a_band_wider_than_a_few_lsb(tmp_path) -> None:
    """00870's output 1 (scale 2^-16 downstream of a 0.0246 grid) had a 1614-LSB band: replaced
    by a constant 200 LSB away, the old rule called it exact. The band is capped at CAP_LSB."""
    r = copy.deepcopy(RECORDS["00870-arm-pc"])
    grid = r["grids"][1]
    d = 200 * grid["out_scale"]
    old_band = max(grid["out_scale"] + grid["coarsest"], grid["budget"])
    assert d < old_band  # exact under the old rule
    r["err"] = {"abs": d, "lsb": 200.0, "steps": d / grid["coarsest"], "ratio": d / old_band, **grid}
    assert summary.truth(r) in ("marginal", "miscompile")
    rc, err = _check(tmp_path, r)
    assert rc == 1 and "soundness miss: 00870-arm-pc" in err


def test_repair_is_judged_against_the_model_the_user_quantized(tmp_path) -> None:
    """00145's repair ran 0 LSB from its own fake-quantized model and 46 from the original."""
    r = RECORDS["00145-arm-pt"]
    assert r["repair"]["err_vs_repaired_fq"]["lsb"] == 0.0
    rc, err = _check(tmp_path, r)
    assert rc == 1 and "repair did not keep the model's meaning: 00145-arm-pt: 46.0 LSB" in err


def test_a_record_without_an_id_is_a_crash_not_dropped(tmp_path) -> None:
    checkpoint = {k: v for k, v in RECORDS["00001-arm-pt"].items() if k != "id"} | {"stage": "repair-run"}
    recs = summary.load([_write(tmp_path, checkpoint)])
    assert [r["outcome"] for r in recs] == ["crash"]
    rc, err = _check(tmp_path, checkpoint)
    assert rc == 1 and "case crash" in err


def _write(tmp_path: Path, *recs: dict[str, Any]) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


@pytest.mark.parametrize(("stage", "outcome"), [("qflow_pre", "crash"), ("run", "run-failed"), ("repair", "crash")])
def test_a_worker_that_dies_is_recorded_in_its_stage(tmp_path, stage, outcome) -> None:
    """The real runner, a real case (seed-000 style, flagged, so it is repaired), a worker
    process that dies on entering `stage`: the record says which stage, and --check fails."""
    out = tmp_path / "results.jsonl"
    env = {**os.environ, "QFLOW_CAMPAIGN_DIE_AT": stage}
    cmd = [sys.executable, str(CAMPAIGN / "run.py"), "--ids", "00003-arm-custom", "--out", str(out), "--jobs", "1"]
    cmd.append("--allow-dirty")  # (a test's run is never reported)
    subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    (rec,) = summary.load([out])
    assert (rec["id"], rec["outcome"], rec.get("stage")) == ("00003-arm-custom", outcome, stage), rec.get("error")
    rc, _ = _check(tmp_path, rec)
    assert rc == 1 or outcome == "run-failed"  # (a backend abort is the backend's failure, listed apart)
