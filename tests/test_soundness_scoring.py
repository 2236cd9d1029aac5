"""The campaign's scoring cannot hide a miss (issue #31): `summary.py --check` on real records from
benchmarks/soundness/results.jsonl (copied to tests/data/soundness_records.jsonl), each altered into one
of the situations the old rules let through, and the runner's accounting of a worker that dies in a stage.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CAMPAIGN = ROOT / "benchmarks" / "soundness"
sys.path.insert(0, str(CAMPAIGN))

import run  # noqa: E402
import summary  # noqa: E402

RECORDS = {r["id"]: r for r in map(json.loads, (ROOT / "tests/data/soundness_records.jsonl").read_text().splitlines())}
STAGES = ["quantize", "qflow_annotated", "qflow_pre", "lower", "qflow_folded", "qflow_lowered", "repair"]
STAGES += ["repair_lower"]


def rec(cid: str) -> dict[str, Any]:
    return copy.deepcopy(RECORDS[cid])


def check(tmp_path: Path, *recs: dict[str, Any]) -> tuple[int, list[str]]:
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    loaded = summary.load([path])
    summary.render(loaded)  # every record renders
    return summary.main([str(path), "--check", "-o", str(tmp_path / "s.md")]), summary.failures(loaded, 100.0)


def proved(r: dict[str, Any]) -> dict[str, Any]:
    r["verdict"] = "proved"
    ob = {"proved": 9, "violated": 0, "unproven": 0}
    r["qflow"]["pre"] = {"verdict": "proved", "obligations": ob, "findings": []}
    return r


def test_correct_records_pass(tmp_path: Path) -> None:
    code, fails = check(tmp_path, rec("00001-arm-pt"), rec("00870-arm-pc"))
    assert (code, fails) == (0, [])
    assert summary.truth(rec("00870-arm-pc")) == "exact"


def test_marginal_with_proved_verdict_is_a_miss(tmp_path: Path) -> None:
    r = proved(rec("00243-arm-custom"))
    assert r["outcome"] == "marginal" and r["err"]["lsb"] > 246  # the recorded case
    code, fails = check(tmp_path, r)
    assert code == 1
    assert any(f.startswith("soundness miss (pre): 00243-arm-custom") and "was marginal" in f for f in fails)
    assert "00243-arm-custom" in summary.render([r]).split("### Soundness misses")[1]


@pytest.mark.parametrize("lsb", [3.0, 127.0, 255.0])
def test_constant_output_at_qmax_is_not_exact(tmp_path: Path, lsb: float) -> None:
    """00870's output 1 (int8, scale 2^-16, 0.0246 grid upstream): the old band was 1614 LSB, wider than the
    int8 range, so a constant at qmax passed whatever the reference was; the capped band is CAP_LSB."""
    r = rec("00870-arm-pc")
    g = r["grids"][1]
    assert (g["coarsest"] / g["out_scale"]) > 255
    b, upstream, capped = summary.band(g)
    assert b == summary.CAP_LSB and capped and upstream > 1600
    r["err"]["outputs"] = [{"abs": 0.0, "lsb": 0.0}, {"abs": lsb * g["out_scale"], "lsb": lsb}]
    code, fails = check(tmp_path, r)
    assert code == 1 and any("00870-arm-pc" in f and "miss" in f for f in fails)


@pytest.mark.parametrize(("output_lsb", "fails"), [(300.0, False), (3.0, True)])
def test_a_measured_error_beyond_the_joint_output_bound_fails(tmp_path: Path, output_lsb: float, fails: bool) -> None:
    """`output_lsb` bounds how far all the violations together move the outputs (qflow.impact, which also
    proves masked violations): a measured error beyond it + half an LSB + the output's band is a bug."""
    r = rec("00243-arm-custom")  # (recorded before per-output errors: given them, 200 LSB on the second)
    r["outcome"], r["err"]["outputs"] = "miscompile", [{"abs": 0.0, "lsb": 0.0}, {"abs": 3.4, "lsb": 200.0}]
    errors = [f for f in r["qflow"]["pre"]["findings"] if f["severity"] == "error"]
    assert errors and len(r["grids"]) == 2
    for f in errors:
        f["output_lsb"] = output_lsb
    code, found = check(tmp_path, r)
    assert any(f.startswith("output bound exceeded (pre): 00243-arm-custom") for f in found) is fails
    assert ("Output bounds (issue #27): on 1 flagged cases" in summary.render([r])) is True


def test_a_miscompile_that_quantizes_nothing_is_not_a_proved_miss(tmp_path: Path) -> None:
    """qflow says "nothing quantized" (not proved, no obligation unproven): stored as "unproven", it was
    re-derived as proved from its obligations (fresh seed 04073-tx-xnn, a float XNNPACK program 602 LSB off)."""
    r = rec("00243-arm-custom")
    ob = {"proved": 4, "violated": 0, "unproven": 0}
    r["qflow"]["pre"] = {"verdict": "unproven", "obligations": ob, "findings": []}
    assert summary.verdict(r) == "unproven"
    assert summary.verdict(proved(rec("00243-arm-custom"))) == "proved"
    _, fails = check(tmp_path, r)
    assert not any(f.startswith("soundness miss (pre): 00243-arm-custom") and "proved" in f for f in fails), fails


def test_repair_far_from_the_original_fails(tmp_path: Path) -> None:
    r = rec("00145-arm-pt")
    rr = r["repair"]
    assert rr["err_vs_repaired_fq"]["lsb"] == 0.0 and round(rr["err_vs_original_fq"]["lsb"]) == 46
    code, fails = check(tmp_path, r)
    assert code == 1 and any(f.startswith("repair not never-worse: 00145-arm-pt") for f in fails)
    # within its own rounding against the original: passes
    rr["err_vs_original_fq"] = dict(rr["err_vs_original_fq"], lsb=1.0)
    assert summary.repair_problem(r) is None
    # worse than before repair (the unrepaired program was 0.5 LSB off) fails even inside the band
    r2 = rec("00145-arm-pt")
    r2["err"]["lsb"], r2["repair"]["err_vs_original_fq"]["lsb"] = 0.5, 1.0
    assert "before" in (summary.repair_problem(r2) or "")


@pytest.mark.parametrize("stage", [*STAGES, "run"])
def test_worker_death_is_attributed_to_its_stage(tmp_path: Path, stage: str) -> None:
    out = tmp_path / "results.jsonl"
    r = rec("00870-arm-pc")
    r["stage"] = stage
    run._checkpoint(out, r["id"]).write_text(json.dumps(r))
    died = run._died(out, r["id"], "crash")
    assert not run._checkpoint(out, r["id"]).exists()
    code, fails = check(tmp_path, died)
    if stage == "run":  # the backend aborted the process: its run failure, not a crash of ours
        assert died["outcome"] == "run-failed" and code == 0
    else:
        assert died["died_in"] == stage
        assert code == 1 and fails == [f"crash in {stage}: 00870-arm-pc: worker exited in stage {stage}"]


def test_record_without_id_is_loaded_and_fails(tmp_path: Path) -> None:
    r = rec("00145-arm-pt")["repair"]  # the old repair checkpoint: a record with no id
    code, fails = check(tmp_path, rec("00001-arm-pt"), r)
    assert code == 1 and any("invalid-record" in f for f in fails)


def test_stage_hook_ends_the_worker_and_leaves_its_checkpoint(tmp_path: Path) -> None:
    """case.stage: the checkpoint names the stage before the hook ends the process (as a backend abort would)."""
    cp = tmp_path / "cp.partial"
    code = (
        f"import case, pathlib; case.CHECKPOINT = pathlib.Path({str(cp)!r}); "
        "case._CURRENT.update(id='00001-arm-pt', outcome='exact'); case.stage('qflow_lowered'); print('survived')"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(CAMPAIGN), str(ROOT)]))
    env["QFLOW_CAMPAIGN_DIE_AT"] = "qflow_lowered"  # case.DIE_AT (importing case here would import torch)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 70 and "survived" not in p.stdout
    assert json.loads(cp.read_text())["stage"] == "qflow_lowered"


def test_regen_refuses_a_dirty_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summary, "scored_at", lambda: "abc1234-dirty")
    assert summary.main(["--regen", "-o", str(tmp_path / "s.md")]) == 2 and not (tmp_path / "s.md").exists()
    monkeypatch.setattr(summary, "scored_at", lambda: "abc1234")
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(rec("00001-arm-pt")) + "\n")
    assert summary.main([str(path), "--regen", "-o", str(tmp_path / "s.md")]) == 0
    assert "at commit `abc1234`" in (tmp_path / "s.md").read_text()


REAL_STAGES = [("00001-arm-pt", st) for st in ("quantize", "qflow_annotated", "qflow_pre", "lower", "run")]
REAL_STAGES += [("00001-arm-pt", st) for st in ("qflow_folded", "qflow_lowered")]
REAL_STAGES += [("00145-arm-pt", st) for st in ("repair", "repair_lower", "repair_run")]  # not proved: repaired


@pytest.mark.parametrize(("cid", "stage"), REAL_STAGES)
def test_real_worker_killed_in_each_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cid: str, stage: str
) -> None:
    """End to end: the runner's worker dies as `stage` starts (QFLOW_CAMPAIGN_DIE_AT). A backend abort (`run`,
    `repair_run`) is the backend's run failure; any other death is a crash of that stage, with everything recorded
    before it kept (the old runner recorded a death after the backend run as `run-failed`, ignored by `--check`)."""
    monkeypatch.setenv("QFLOW_CAMPAIGN_DIE_AT", stage)
    out = tmp_path / "results.jsonl"
    run.campaign([cid], out, batch=1, time_limit=240, log=None)
    (r,) = summary.load([out])
    assert not list(tmp_path.glob(".*.partial"))
    fails = summary.failures([r], 100.0)
    if stage == "run":
        assert r["outcome"] == "run-failed" and r["died_in"] == "run" and fails == []
    elif stage == "repair_run":
        assert r["repair"]["outcome"] == "run-failed" and r["outcome"] == "miscompile" and fails == []
    else:
        assert r["died_in"] == stage and fails == [f"crash in {stage}: {cid}: worker exited in stage {stage}"]
    if stage in ("qflow_folded", "qflow_lowered", "repair", "repair_lower"):  # after the backend run
        assert r["outcome"] in ("exact", "miscompile") and r["err"]["outputs"] and "pre" in r["qflow"]


@pytest.mark.parametrize(("lsb", "moved"), [(0.0, False), (0.6, False), (1.0, True), (2.0, True), (2.5, False)])
def test_a_false_alarm_says_whether_an_output_code_moved(lsb: float, moved: bool) -> None:
    """Beside the false alarms: those where the backend really moved an output code inside the band (an
    error under #27's half-LSB rule, exact under the band). A miscompile is never counted there."""
    r = rec("00870-arm-pc")
    g = r["grids"][0]
    r["err"]["outputs"] = [{"abs": lsb * g["out_scale"], "lsb": lsb}, {"abs": 0.0, "lsb": 0.0}]
    assert summary.moved_a_code(r) is moved
    assert summary.truth(r) == ("miscompile" if lsb > summary.CAP_LSB else "exact")


def test_tie_resolutions_measure_the_backend_against_the_jittered_fq_model() -> None:
    """`rejudge.py --ties`' measure on a real PT2E program: the fake-quantized model's own result is 0 from
    its nearest tie resolution, a result moved by 3 output steps in one element is about 3 steps from it."""
    import case
    import torch

    from qflow.targets.xnnpack import pipeline as xnnpack

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    tests = [(torch.randn(2, 8),) for _ in range(3)]
    converted = xnnpack.quantize(model, tests[0])
    with torch.no_grad():
        fq = [case._as_list(converted(*x)) for x in tests]
    scale = case.output_grids(converted, tests)[0]["out_scale"]
    assert case.tie_resolutions(converted, tests, fq, trials=20) == [0.0]
    moved = copy.deepcopy(fq)
    moved[1][0][0, 0] += 3 * scale
    (far,) = case.tie_resolutions(converted, tests, moved, trials=20)
    assert 2 * scale < far <= 4 * scale


def test_level_inputs_span_each_inputs_range_with_rows_of_equal_values() -> None:
    """`rejudge.py --levels`: campaign case 00190-mk-cm computes right on its 23 inputs and 64 random ones; a row
    of equal values (all zeros) makes its mask flip, 5 output LSB off on the Cortex-M kernels (2026-12-02)."""
    import case
    import torch

    from qflow.targets.xnnpack import pipeline as xnnpack

    torch.manual_seed(0)
    tests = [(torch.randn(2, 8) * 2,) for _ in range(3)]
    converted = xnnpack.quantize(torch.nn.Sequential(torch.nn.Linear(8, 4)), tests[0])
    (lo, hi), levels = case._input_ranges(converted, tests)[0], case.level_inputs(converted, tests, 5)
    assert [float(x.min()) for (x,) in levels] == [float(x.max()) for (x,) in levels]  # (each one constant)
    assert [float(x[0, 0]) for (x,) in levels] == pytest.approx([lo, lo + (hi - lo) / 4, (lo + hi) / 2,
                                                                 hi - (hi - lo) / 4, hi, 0.0])  # fmt: skip


def test_the_misses_table_shows_the_nearest_tie_resolution(tmp_path: Path) -> None:
    r = proved(rec("00243-arm-custom"))
    out = summary.judge(r)["output"]
    r["more"] = {"ties": [0.5] * (out + 1)}
    assert summary.resolution(r) == 0.5
    assert "(nearest tie resolution 0.5)" in summary.render([r])
