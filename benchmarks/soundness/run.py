"""The soundness campaign driver: random models, the real backend as oracle.

    python benchmarks/soundness/run.py --cases 30                 # cases 0..29, resumes
    python benchmarks/soundness/run.py --case 00012-arm-pc        # one case, printed
    python benchmarks/soundness/run.py --ids @rerun.txt --out b.jsonl   # these ids (e.g. to re-run after a fix)
    python benchmarks/soundness/run.py --spec reduced/x.json --variant arm-pc   # a spec file

Cases run in a worker subprocess (one batch of ids per worker; imports cost
~10 s) that appends one JSON line per case to the results file as it goes.
A case that hangs is stopped by an alarm inside the worker (`--time-limit`);
a worker that dies or overruns is killed, its case recorded as `crash` /
`timeout` (or as `run-failed` when it died running the lowered program on the
backend: the TOSA reference model aborts the process on some invalid graphs),
and a fresh worker resumes with the rest. Cases already in the
results file are skipped, so an interrupted campaign resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DEFAULT_OUT = HERE / "results.jsonl"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def done_ids(out: Path) -> set[str]:
    if not out.exists():
        return set()
    ids = set()
    for line in out.read_text().splitlines():
        try:
            ids.add(json.loads(line)["id"])
        except (ValueError, KeyError):
            continue
    return ids


def _append(out: Path, rec: dict) -> None:
    """One write(2) on an O_APPEND descriptor: parallel workers never interleave lines."""
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(rec) + "\n").encode())
    finally:
        os.close(fd)


def worker(ids: list[str], out: Path, time_limit: int) -> None:
    """Runs in the subprocess: each case under an alarm, one line each."""
    import case  # noqa: PLC0415 - heavy imports only in the worker
    import torchao_case  # noqa: PLC0415

    class CaseTimeout(BaseException):  # not an Exception: no pipeline stage may swallow or wrap it
        pass

    def on_alarm(signum: int, frame: object) -> None:
        raise CaseTimeout(f"case exceeded {time_limit} s")

    signal.signal(signal.SIGALRM, on_alarm)
    for cid in ids:
        print(f"[worker] {cid}", file=sys.stderr, flush=True)
        case.CHECKPOINT = _checkpoint(out, cid)
        signal.alarm(time_limit)
        try:
            rec = (torchao_case if torchao_case.owns(cid) else case).run_case(cid)
        except CaseTimeout as e:
            rec = {"id": cid, "outcome": "timeout", "error": str(e)}
        except Exception as e:  # noqa: BLE001 - one case never stops the campaign
            rec = {"id": cid, "outcome": "crash", "error": f"{type(e).__name__}: {e}"[:500]}
        finally:
            signal.alarm(0)
        _append(out, rec)
        case.CHECKPOINT.unlink(missing_ok=True)


def _checkpoint(out: Path, cid: str) -> Path:
    return out.parent / f".{out.name}.{cid}.partial"


def _died(out: Path, cid: str, status: str) -> dict:
    """The record of a case whose worker died, attributed to the stage it died in (its checkpoint's `stage`).

    Dying in the backend run is the backend's run failure (the TOSA reference model aborts the process on some
    invalid graphs): `run-failed`. Dying anywhere else — quantize, a qflow form, lowering, repair — is a crash of
    that stage, recorded with everything the case had recorded before (`died_in`); `--check` fails on it."""
    path = _checkpoint(out, cid)
    if not path.exists():
        return {"id": cid, "outcome": status, "error": "worker exited", "died_in": "start"}
    rec = json.loads(path.read_text())
    path.unlink()
    where = rec.pop("stage", "unknown")
    rec["id"] = cid
    rec["died_in"] = where
    if status == "crash" and where == "run":
        rec.update(outcome="run-failed", error="the backend aborted the worker process running the lowered program")
    elif where == "repair_run" and status == "crash":
        rec.setdefault("repair", {}).update(outcome="run-failed", error="the backend aborted the worker process")
        rec["died_in"] = None  # the backend's failure on the repaired program, not a crash of a stage
    else:  # the backend's truth (when it ran) stays the outcome; the crash is `died_in`
        rec["error"] = f"worker {'exited' if status == 'crash' else 'overran'} in stage {where}"
        rec.setdefault("outcome", status)
    return rec


def _run_chunk(chunk: list[str], out: Path, time_limit: int, log: Path | None, env: dict[str, str]) -> None:
    """Run `chunk` in worker processes until every id has a record (a dead worker's case is recorded)."""
    todo = [c for c in chunk if c not in done_ids(out)]
    while todo:
        cmd = [sys.executable, str(Path(__file__)), "--worker", ",".join(todo), "--out", str(out)]
        cmd += ["--time-limit", str(time_limit)]
        err = log.open("a") if log else subprocess.DEVNULL
        try:
            subprocess.run(cmd, env=env, timeout=time_limit * len(todo) + 120, stdout=err, stderr=err)
            status = "crash"
        except subprocess.TimeoutExpired:
            status = "timeout"
        finally:
            if log:
                err.close()
        have = done_ids(out)
        missing = [c for c in todo if c not in have]
        if missing:  # the worker died on missing[0]: record it, resume after it
            _append(out, _died(out, missing[0], status))
        todo = [c for c in todo if c not in done_ids(out)]


def campaign(ids: list[str], out: Path, batch: int, time_limit: int, log: Path | None, jobs: int = 1) -> None:
    todo = [c for c in ids if c not in done_ids(out)]
    print(f"{len(ids) - len(todo)} of {len(ids)} cases already in {out}; running {len(todo)} with {jobs} job(s)")
    env = _env()
    if jobs > 1:  # one core per worker: torch's own threads would fight each other
        env.setdefault("OMP_NUM_THREADS", "1")
    t0 = time.time()
    chunks = [todo[i : i + batch] for i in range(0, len(todo), batch)]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for _ in as_completed(pool.submit(_run_chunk, c, out, time_limit, log, env) for c in chunks):
            n = len(set(ids) & done_ids(out))
            print(f"{n}/{len(ids)} done, {time.time() - t0:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=30, help="run cases start..start+N-1")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--variants", default="", help="comma-separated: only these variants (default: round robin)")
    ap.add_argument("--case", help="run one case id and print its record")
    ap.add_argument("--ids", help="run these case ids (comma-separated, or @FILE with one per line)")
    ap.add_argument("--spec", help="run a spec JSON file (e.g. a reduced case) with --variant")
    ap.add_argument("--variant", default="arm-pc", help="for a bare spec file without an id")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--json", type=Path, help="with --case / --spec: also write the record to this file")
    ap.add_argument("--batch", type=int, default=10, help="cases per worker process")
    ap.add_argument(
        "--jobs", type=int, default=len(os.sched_getaffinity(0)), help="worker processes (default: one per core)"
    )
    ap.add_argument("--time-limit", type=int, default=240, help="seconds per case")
    ap.add_argument("--log", type=Path, help="worker stderr goes here")
    ap.add_argument(
        "--reanalyze",
        type=Path,
        help="re-make the annotated / pre verdicts of these results (--ids: only those) into --out",
    )
    ap.add_argument("--lowered", action="store_true", help="with --reanalyze: the lowered verdicts too (not run)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker.split(","), a.out, a.time_limit)
        return 0
    if a.reanalyze:
        return reanalyze(a.reanalyze, a.out, a.ids, a.lowered)
    if a.case or a.spec:
        sys.path[:0] = [str(HERE), str(ROOT)]
        import case
        import torchao_case

        if a.spec:
            doc = json.loads(Path(a.spec).read_text())
            spec = doc.get("spec", doc)
            cid = doc.get("id") or case.case_id(int(spec.get("seed", 0)), a.variant)
            rec = (torchao_case if torchao_case.owns(cid) else case).run_case(cid, spec=spec)
        else:
            rec = (torchao_case if torchao_case.owns(a.case) else case).run_case(a.case)
        if a.json:
            a.json.write_text(json.dumps(rec, indent=1) + "\n")
        print(json.dumps(rec, indent=1))
        return 0
    if a.ids:
        text = Path(a.ids[1:]).read_text() if a.ids.startswith("@") else a.ids.replace(",", "\n")
        campaign([i.strip() for i in text.splitlines() if i.strip()], a.out, a.batch, a.time_limit, a.log, a.jobs)
        return 0
    variants = [v for v in a.variants.split(",") if v]
    ids = []
    for i in range(a.start, a.start + a.cases):
        if variants:
            ids.append(f"{i:05d}-{variants[i % len(variants)]}")
        else:
            ids.append(_default_id(i))
    campaign(ids, a.out, a.batch, a.time_limit, a.log, a.jobs)
    return 0


def reanalyze(src: Path, out: Path, ids: str | None, lowered: bool = False) -> int:
    """Re-score a results file's `pre` / `annotated` verdicts with this qflow, in this process (no lowering:
    the backend's outcome stays). Appends to `out`; summary.py reads both files, the later record winning."""
    sys.path[:0] = [str(HERE), str(ROOT)]
    import case
    import torchao_case

    want = None
    if ids:
        text = Path(ids[1:]).read_text() if ids.startswith("@") else ids.replace(",", "\n")
        want = {i.strip() for i in text.splitlines() if i.strip()}
    for line in src.read_text().splitlines():
        rec = json.loads(line)
        if (
            (want is None or rec.get("id") in want)
            and rec.get("id") not in done_ids(out)
            and "pre" in rec.get("qflow", {})
        ):
            mod = torchao_case if torchao_case.owns(rec["id"]) else case
            _append(out, mod.reanalyze(rec, lowered=lowered) if lowered else mod.reanalyze(rec))
    return 0


def _default_id(i: int) -> str:
    """Same rule as case.case_id, without importing torch in the driver."""
    variants = ("arm-pc", "arm-pt", "arm-a16w8", "arm-custom", "xnn", "xnn-custom")
    return f"{i:05d}-{variants[i % len(variants)]}"


if __name__ == "__main__":
    raise SystemExit(main())
