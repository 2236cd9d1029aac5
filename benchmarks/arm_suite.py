"""Run a slice of the ExecuTorch Arm (or Cortex-M, XNNPACK) backend's own test suite under `--qflow-observe`.

    python benchmarks/arm_suite.py                         # the README slice, with qflow (≈ 15-25 min on 2 cores)
    python benchmarks/arm_suite.py --baseline              # the same slice without qflow, for the wall-time ratio
    python benchmarks/arm_suite.py --baseline --repeat 2   # each side twice, alternating; the fastest of each counts
    python benchmarks/arm_suite.py --files ops/test_cat.py # any files of the suite (paths relative to its folder)
    python benchmarks/arm_suite.py --summarize DIR         # only print the tables of an earlier run
    python benchmarks/arm_suite.py --suite cortex-m --out /tmp/qflow-cortex-m-suite   # the Cortex-M suite's
                                                           # dialect tests (ops, models; reference kernels)
    python benchmarks/arm_suite.py --suite xnnpack --out /tmp/qflow-xnnpack-suite   # the XNNPACK suite's
                                                           # quantized op tests (ExecuTorch runtime)

The suites ship in the executorch wheel (`executorch/backends/arm/test/`,
`executorch/backends/cortex_m/test/`) and run from their folder; nothing in it is modified. Results go to `--out`
(default /tmp/qflow-arm-suite): `qflow-observe.json` (session totals),
`observed/*.json` (one per test), SARIF, JUnit, `pytest.log` and `wall.json`.
The tables (totals, per file, every error finding, unknown ops) are printed in
Markdown so they can be pasted into the README.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

SLICE = [
    "ops/test_cat.py",
    "ops/test_conv2d.py",
    "ops/test_linear.py",
    "ops/test_relu.py",
    "ops/test_permute.py",
    "ops/test_view.py",
    # the mobilenet-class models that import here (no torchvision: mobilenet_v2/v3, resnet18, inception_v3 do not)
    "models/test_mobilenet_v1_025.py",
    "models/test_ds_cnn.py",
    "models/test_resnet8.py",
    "models/test_deep_autoencoder.py",
    "models/test_residual_conv_block.py",
]


#: The Cortex-M suite's tests that run here: `test_dialect_*` runs each program on the Cortex-M
#: dialect's reference kernels (`test_implementation_*` needs a Corstone FVP runner).
CORTEX_M_SLICE = ["ops"] + [
    f"models/test_{m}.py"  # the models that import here (mobilenet_v2 / v3 need torchvision, wav2letter torchaudio)
    for m in (
        "deep_autoencoder ds_cnn mobilenet_v1_025 nn_functional nn_modules resnet8 silero_vad torch_functions yolo11"
    ).split()
]
#: The XNNPACK suite's op tests (unittest classes; the quantized ones are named qs8 / qd8 / quant).
XNNPACK_SLICE = ["ops"]
SUITES = {
    "arm": ("arm", SLICE, "tosa_INT"),
    "cortex-m": ("cortex_m", CORTEX_M_SLICE, "dialect"),
    "xnnpack": ("xnnpack", XNNPACK_SLICE, "qs8 or qd8 or quant or q8 or qc8"),
}


def test_dir(backend: str = "arm") -> Path:
    """A backend's suite inside the installed executorch wheel (a namespace package: no __file__)."""
    import executorch

    return Path(list(executorch.__path__)[0]) / "backends" / backend / "test"


def run(files: list[str], keyword: str, out: Path, qflow: bool, cwd: Path) -> tuple[float, float]:
    """Run pytest on `files` from the suite's folder `cwd`: (wall, CPU) seconds.

    CPU time (user + sys of pytest) is reported too because this box is
    shared: other jobs stretch the wall time of a run, much less its CPU time."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfEx", "-W", "ignore", "-k", keyword]
    if qflow:
        shutil.rmtree(out / "observed", ignore_errors=True)  # no stale per-test reports
        cmd += ["--qflow-observe", f"--qflow-report={out}"]
    else:
        cmd += ["-p", "no:qflow"]
    env = dict(os.environ)
    # flatc (a8w4 tests) lives next to the interpreter
    env["PATH"] = f"{Path(sys.executable).resolve().parent}{os.pathsep}{env.get('PATH', '')}"
    log = out / ("pytest.log" if qflow else "pytest-baseline.log")
    t0, c0 = time.perf_counter(), _child_cpu()
    with log.open("w") as fh:
        subprocess.run(cmd + files, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT, check=False)
    wall, cpu = time.perf_counter() - t0, _child_cpu() - c0
    tail = log.read_text().strip().splitlines()[-1:]
    label = "with" if qflow else "without"
    print(f"{label} qflow: {wall:.0f} s wall, {cpu:.0f} s CPU — {tail[0] if tail else '?'}", file=sys.stderr)
    return wall, cpu


def _child_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _file_of(test: str) -> str:
    return test.split("::", 1)[0]


def tables(out: Path) -> str:
    """Markdown: totals, per file, error findings, unknown ops."""
    s = json.loads((out / "qflow-observe.json").read_text())
    wall_path = out / "wall.json"
    wall = json.loads(wall_path.read_text()) if wall_path.exists() else {}
    per: dict[str, Counter[str]] = defaultdict(Counter)
    for f in sorted((out / "observed").glob("*.json")):
        t = json.loads(f.read_text())
        c = per[_file_of(t["test"])]
        c["tests"] += 1
        c[f"outcome:{t['outcome']}"] += 1
        for p in t["programs"]:
            c["programs"] += 1
            c["qflow_s"] += p["seconds"]
            r = p.get("report")
            if r is None:
                c["analysis_errors"] += 1
                continue
            c["proved_programs"] += int(r["proved"])
            for k, n in r["obligations"].items():
                c[k] += n
            for fi in r["findings"]:
                c[fi["severity"]] += 1
    lines = [
        "| file | tests (passed/other) | programs (proved) | obligations proved / violated / unproven "
        "| findings error / warning / info | qflow s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, c in sorted(per.items()):
        other = c["tests"] - c["outcome:passed"]
        lines.append(
            f"| `{name}` | {c['tests']} ({c['outcome:passed']}/{other}) | {c['programs']} ({c['proved_programs']}) "
            f"| {c['proved']} / {c['violated']} / {c['unproven']} | {c['error']} / {c['warning']} / {c['info']} "
            f"| {c['qflow_s']:.1f} |"
        )
    ob, fi = s["obligations"], s["findings"]
    lines.append(
        f"| **total** | {s['tests']} ({s['outcomes'].get('passed', 0)}/{s['tests'] - s['outcomes'].get('passed', 0)}) "
        f"| {s['programs']} ({s['proved_programs']}) | {ob['proved']} / {ob['violated']} / {ob['unproven']} "
        f"| {fi['error']} / {fi['warning']} / {fi['info']} | {s['qflow_seconds']:.1f} |"
    )
    lines += [
        "",
        f"Outcomes: {', '.join(f'{k} {v}' for k, v in sorted(s['outcomes'].items()))}. "
        f"Programs: {', '.join(f'{k} {v}' for k, v in sorted(s['programs_by_kind'].items()))}. "
        f"Analysis errors: {s['analysis_errors']}.",
    ]
    for what, label in (("wall", "Wall"), ("cpu", "CPU")):
        on, off = wall.get(f"with_qflow_{what}"), wall.get(f"without_qflow_{what}")
        parts = [f"with qflow {on:.0f} s" if on else "", f"without {off:.0f} s" if off else ""]
        n = len(wall.get("with_qflow_runs", [])) or 1
        ratio = f" (×{on / off:.3f}{f', fastest of {n} alternating runs each' if n > 1 else ''})" if on and off else ""
        if on or off:
            lines.append(f"{label} time: {', '.join(p for p in parts if p)}{ratio}.")
    lines += ["", "Error findings:" if s["error_findings"] else "Error findings: none."]
    for f in s["error_findings"]:
        lines.append(f"* `{f['program']}` ({f['outcome']}): **{f['kind']}** at `{f['node']}` — {f['message']}")
    lines.append(
        "Unknown ops: " + (", ".join(f"`{k}` ×{v}" for k, v in sorted(s["unknown_ops"].items())) or "none") + "."
    )
    by_kind = ", ".join(f"{k} {v}" for k, v in sorted(s["findings_by_kind"].items())) or "none"
    lines.append(f"Findings by kind: {by_kind}.")
    for e in s["errors"]:
        lines.append(f"* analysis error `{e['program']}`: {e['error'][:300]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=sorted(SUITES), default="arm", help="whose suite (default arm)")
    ap.add_argument("--files", nargs="+", help="suite files, relative to its folder (default: the README slice)")
    ap.add_argument("-k", dest="keyword", help="pytest -k expression (default: tosa_INT; Cortex-M: dialect)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/qflow-arm-suite"))
    ap.add_argument("--baseline", action="store_true", help="also run the slice without qflow (wall-time ratio)")
    ap.add_argument("--repeat", type=int, default=1, help="run each side this many times, alternating (min counts)")
    ap.add_argument("--summarize", type=Path, metavar="DIR", help="print the tables of an earlier run and stop")
    args = ap.parse_args(argv)
    if args.summarize:
        print(tables(args.summarize))
        return 0
    folder, default_files, default_keyword = SUITES[args.suite]
    args.files, args.keyword = args.files or default_files, args.keyword or default_keyword
    cwd = test_dir(folder)
    out: Path = args.out.resolve()
    wall: dict[str, Any] = {"files": args.files, "keyword": args.keyword}
    runs: dict[str, list[tuple[float, float]]] = {"with_qflow": [], "without_qflow": []}
    for _ in range(args.repeat):  # alternate, baseline first: neither side gets the warm caches alone
        if args.baseline:
            runs["without_qflow"].append(run(args.files, args.keyword, out, qflow=False, cwd=cwd))
        runs["with_qflow"].append(run(args.files, args.keyword, out, qflow=True, cwd=cwd))
    for side, rs in runs.items():
        if rs:  # the fastest of the repeats: the least disturbed by the rest of the box
            wall[f"{side}_wall"], wall[f"{side}_cpu"] = min(w for w, _ in rs), min(c for _, c in rs)
            wall[f"{side}_runs"] = rs
    (out / "wall.json").write_text(json.dumps(wall, indent=2))
    print(tables(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
