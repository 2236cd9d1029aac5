"""Benchmark qflow on synthetic quantized graphs of 1k–100k FX nodes.

    python benchmarks/run.py                 # full run (< 10 min on 2 cores)
    python benchmarks/run.py --quick         # 1k and 5k, < 1 min
    python benchmarks/run.py --sizes 1k,20k --jobs 1
    python benchmarks/run.py --profile       # also cProfile qflow on the largest size

Each size, the repair timing and the profile run in their own process
(``measure.py``), ``--jobs`` at a time, largest first. The table is printed
and written to ``benchmarks/results.md`` (``results-quick.md`` for ``--quick``).
See ``benchmarks/README.md`` for what each column means.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from measure import MARKER  # noqa: E402

FULL_SIZES = [1_000, 5_000, 20_000, 50_000, 100_000]
QUICK_SIZES = [1_000, 5_000]
FULL_DISTINCT = [1_000, 5_000, 10_000]
QUICK_DISTINCT: list[int] = []


def parse_sizes(text: str) -> list[int]:
    """``"1k,5k,20000"`` → ``[1000, 5000, 20000]``."""
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        mult = 1000 if part.endswith("k") else 1
        out.append(int(float(part.rstrip("k")) * mult))
    return sorted(set(out))


def label(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


# -- jobs ---------------------------------------------------------------------------
def run_job(argv: list[str], threads: int) -> dict[str, Any]:
    """Run ``measure.py argv`` in a fresh interpreter and return its JSON result."""
    env = dict(os.environ, QFLOW_BENCH_THREADS=str(threads), OMP_NUM_THREADS=str(threads), PYTHONWARNINGS="ignore")
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(HERE / "measure.py"), *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(HERE),
    )
    for line in proc.stdout.splitlines():
        if line.startswith(MARKER):
            result: dict[str, Any] = json.loads(line[len(MARKER) :])
            result["job_wall_s"] = time.perf_counter() - t0
            return result
    tail = "\n".join(proc.stderr.splitlines()[-30:])
    raise RuntimeError(f"measure.py {' '.join(argv)} failed (exit {proc.returncode}):\n{tail}")


def run_all(jobs: list[tuple[str, list[str]]], workers: int) -> dict[str, dict[str, Any]]:
    """Run the jobs (already ordered longest first) on ``workers`` processes."""
    threads = 1 if workers > 1 else max(1, os.cpu_count() or 1)
    results: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {key: pool.submit(run_job, argv, threads) for key, argv in jobs}
        for key, fut in futures.items():
            results[key] = fut.result()
            print(f"  done: {key} ({results[key]['job_wall_s']:.0f} s)", file=sys.stderr, flush=True)
    return results


# -- tables ---------------------------------------------------------------------------
def table(headers: list[str], rows: list[list[str]]) -> str:
    """A markdown table padded so it also reads well as plain text."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def f3(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def spread(runs: list[float]) -> str:
    """Slowest / fastest of the repeated runs (1.00 for a single run)."""
    return f"{max(runs) / min(runs):.2f}" if runs and min(runs) > 0 else "-"


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log(y) against log(x)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    var = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / var if var else None


def size_table(sizes: list[dict[str, Any]]) -> str:
    headers = [
        "size",
        "form",
        "nodes",
        "regions",
        "largest",
        "checks",
        "walk ms",
        "build s",
        "check s",
        "prop s",
        "prove s",
        "qflow s",
        "cpu/wall",
        "spread",
        "peak MB",
        "fold s",
        "qflow/fold",
        "qflow/pass",
        "z3 %",
        "prove api s",
        "prove ×",
        "qflow/walk",
        "same",
    ]
    rows = []
    for r in sizes:
        for form in ("qdq", "folded"):
            m = r[form]
            rows.append(
                [
                    label(r["target"]),
                    form,
                    str(m["nodes"]),
                    str(m["regions"]),
                    str(m["largest_region"]),
                    str(m["solver_checks"]),
                    f"{m['walk_s'] * 1000:.1f}",
                    f3(m["build_s"]),
                    f3(m["check_s"]),
                    f3(m["propagate_s"]),
                    f3(m["prove_s"]),
                    f3(m["total_s"]),
                    f"{m['cpu_s'] / m['total_s']:.2f}",
                    spread(m["runs_s"]),
                    f"{m['peak_mb']:.0f}",
                    f3(r["fold_s"]),
                    f"{m['total_s'] / r['fold_s']:.2f}",
                    f"{m['total_s'] / r['pass_s']:.2f}",
                    f"{100 * m['prove_s'] / m['total_s']:.0f}",
                    f3(m["prove_api_s"]),
                    f"{m['prove_api_s'] / m['prove_s']:.1f}",
                    f"{m['total_s'] / m['walk_s']:.0f}",
                    "yes" if m["same_verdicts"] else "**NO**",
                ]
            )
    return table(headers, rows)


def fold_table(sizes: list[dict[str, Any]], distinct: list[dict[str, Any]]) -> str:
    headers = [
        "size",
        "weights",
        "state buffers",
        "edge nodes",
        "folded nodes",
        "synth s",
        "fold_qparams s",
        "of it deepcopy s",
        "pass only s",
        "cpu/wall",
        "spread",
        "fold peak MB",
    ]
    rows = [
        [
            label(r["target"]),
            r["weights"],
            str(r["state_placeholders"]),
            str(r["nodes"]),
            str(r["folded_nodes"]),
            f3(r["synth_s"]),
            f3(r["fold_s"]),
            f3(r["deepcopy_s"]) if r["deepcopy_s"] is not None else "n/a",
            f3(r["pass_s"]),
            f"{r['fold_cpu_s'] / r['fold_s']:.2f}",
            spread(r["fold_runs_s"]),
            f"{r['fold_peak_mb']:.0f}",
        ]
        for r in [*sizes, *distinct]
    ]
    return table(headers, rows)


def slope_lines(sizes: list[dict[str, Any]], distinct: list[dict[str, Any]]) -> list[str]:
    if len(sizes) < 2:
        return ["(slopes need at least two sizes)"]
    out = []

    def add(what: str, xs: list[float], ys: list[float]) -> None:
        s = slope(xs, ys)
        out.append(f"- {what}: {s:.2f}" if s is not None else f"- {what}: n/a")

    for form in ("qdq", "folded"):
        xs = [r[form]["nodes"] for r in sizes]
        add(f"qflow total vs nodes, {form}", xs, [r[form]["total_s"] for r in sizes])
        add(f"  CPU time (less sensitive to a shared core), {form}", xs, [r[form]["cpu_s"] for r in sizes])
        add(f"  prove (z3), {form}", xs, [r[form]["prove_s"] for r in sizes])
        add(f"  build, {form}", xs, [r[form]["build_s"] for r in sizes])
        add(f"  bare walk, {form}", xs, [r[form]["walk_s"] for r in sizes])
    xs = [r["nodes"] for r in sizes]
    add("fold pass (arm.fold_qparams) vs edge nodes, shared weights", xs, [r["fold_s"] for r in sizes])
    add("  CPU time", xs, [r["fold_cpu_s"] for r in sizes])
    add("  pass only (without its deepcopy)", xs, [r["pass_s"] for r in sizes])
    if len(distinct) >= 2:
        dx = [r["nodes"] for r in distinct]
        add("fold pass (arm.fold_qparams) vs edge nodes, distinct weights", dx, [r["fold_s"] for r in distinct])
        add("  pass only (without its deepcopy)", dx, [r["pass_s"] for r in distinct])
    return out


def repair_table(rows: list[dict[str, Any]]) -> tuple[str, float, float]:
    by_model: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    headers = [
        "model",
        "nodes aten/edge/folded",
        "regions (max)",
        "max plan_repair s",
        "max region s",
        "requants",
        "unrepairable",
    ]
    out = []
    for model, rs in by_model.items():
        nodes = {r["form"]: r["nodes"] for r in rs}
        count = {r["form"]: r for r in rs if r["objective"] == "count"}
        forms = ("aten-qdq", "edge-qdq", "folded")
        out.append(
            [
                model,
                "/".join(str(nodes[f]) for f in forms),
                str(max(r["regions"] for r in rs)),
                f"{max(r['plan_s'] for r in rs):.4f}",
                f"{max(r['max_region_s'] for r in rs):.4f}",
                "/".join(str(count[f]["requants"]) for f in forms),
                "/".join(str(count[f]["unrepairable"]) for f in forms),
            ]
        )
    worst_plan = max((r["plan_s"] for r in rows), default=0.0)
    worst_region = max((r["max_region_s"] for r in rows), default=0.0)
    return table(headers, out), worst_plan, worst_region


# -- machine ---------------------------------------------------------------------------
def machine() -> list[str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass

    def ver(pkg: str) -> str:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return "not installed"

    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE).stdout
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", ".", ":!benchmarks"], capture_output=True, text=True, cwd=HERE.parent
        ).stdout
        commit = rev.strip() + (" (working tree modified)" if dirty.strip() else "")
    except OSError:
        commit = "unknown"
    cores = os.cpu_count() or 0
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    return [
        f"- CPU: {cpu}, {cores} cores ({usable} usable)",
        f"- Python {platform.python_version()}, torch {ver('torch')}, executorch {ver('executorch')}, "
        f"torchao {ver('torchao')}, z3-solver {ver('z3-solver')}, networkx {ver('networkx')}",
        f"- qflow commit {commit}",
        f"- date {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
    ]


def _fold_only(n: int) -> list[str]:
    return ["size", str(n), "--weights", "distinct", "--fold-only"]


# -- main -----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Benchmark qflow on synthetic quantized graphs.")
    ap.add_argument("--quick", action="store_true", help="sizes 1k,5k only (< 1 min)")
    ap.add_argument("--sizes", help="comma list of target FX node counts, e.g. 1k,5k,20k")
    ap.add_argument("--weights", choices=("shared", "distinct"), default="shared", help="state placeholders per copy")
    ap.add_argument(
        "--qparams", choices=("vary", "same"), default="vary", help="per-copy activation scales (default vary)"
    )
    ap.add_argument("--distinct-fold", help="sizes at which to also time the fold pass with distinct weights")
    ap.add_argument("--models", help="comma list of qflow.examples.models names for plan_repair (default: all)")
    ap.add_argument("--repeat", type=int, help="runs of each measured step, fastest kept (default 3; --quick 1)")
    ap.add_argument("--jobs", type=int, default=2, help="processes in parallel (default 2)")
    ap.add_argument(
        "--profile", action="store_true", help="cProfile qflow on the largest size (benchmarks/profile.txt)"
    )
    ap.add_argument("--out", type=Path, help="markdown output (default benchmarks/results.md)")
    args = ap.parse_args(argv)

    sizes = parse_sizes(args.sizes) if args.sizes else QUICK_SIZES if args.quick else FULL_SIZES
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.distinct_fold is not None:
        distinct_sizes = parse_sizes(args.distinct_fold)
    else:
        distinct_sizes = QUICK_DISTINCT if args.quick or args.sizes else FULL_DISTINCT
    if args.weights == "distinct":
        distinct_sizes = []  # the main table already has them
    names = args.models.split(",") if args.models else []  # none: every model
    out_path = args.out or HERE / ("results-quick.md" if args.quick else "results.md")

    # the largest size alone, the other sizes in one process, then repair and the
    # distinct-weights fold timing (each process quantizes its own seed block)
    big = sorted(sizes, reverse=True)
    opts = ["--weights", args.weights, "--qparams", args.qparams, "--repeat", str(args.repeat)]
    jobs: list[tuple[str, list[str]]] = [(f"sizes {label(big[0])}", ["size", str(big[0]), *opts])]
    if len(big) > 1:
        rest = sorted(big[1:])
        jobs.append((f"sizes {','.join(map(label, rest))}", ["size", *map(str, rest), *opts]))
    if args.profile:
        jobs.append(("profile", ["profile", str(big[0]), "--qparams", args.qparams]))
    jobs.append(("repair", ["repair", *names]))
    if distinct_sizes:
        key = f"fold distinct {','.join(map(label, distinct_sizes))}"
        fold_opts = ["--weights", "distinct", "--fold-only", "--qparams", args.qparams, "--repeat", str(args.repeat)]
        jobs.append((key, ["size", *map(str, distinct_sizes), *fold_opts]))

    t0 = time.perf_counter()
    print(f"running {len(jobs)} jobs on {args.jobs} processes: {'; '.join(k for k, _ in jobs)}", file=sys.stderr)
    res = run_all(jobs, max(1, args.jobs))
    wall = time.perf_counter() - t0

    by_size = {r["target"]: r for k, v in res.items() if k.startswith("sizes") for r in v["sizes"]}
    size_rows = [by_size[n] for n in sizes]
    distinct_rows = [r for k, v in res.items() if k.startswith("fold distinct") for r in v["sizes"]]
    distinct_rows.sort(key=lambda r: r["target"])
    repair, worst_plan, worst_region = repair_table(res["repair"]["rows"])
    seed = size_rows[0]
    ratios = [r[f]["cpu_s"] / r[f]["total_s"] for r in size_rows for f in ("qdq", "folded")]
    ratios += [r["fold_cpu_s"] / r["fold_s"] for r in size_rows]
    contended = min(ratios) < 0.9
    lines = [
        "# qflow benchmark",
        "",
        *machine(),
        f"- command: `{' '.join(['python benchmarks/run.py', *(argv if argv is not None else sys.argv[1:])])}`",
        f"- {args.jobs} job(s) in parallel, 1 torch thread each; wall time {wall:.0f} s",
        f"- seed block (real PT2E flow, stock TOSA quantizer, {seed['spec']}): "
        f"quantize {seed['block_quantize_s']:.1f} s, to_edge {seed['block_to_edge_s']:.1f} s; "
        f"each size chains copies of its edge program ({args.weights} weights, "
        f"{'per-copy activation scales' if args.qparams == 'vary' else 'identical qparams in every copy'})",
        f"- peak MB = peak RSS growth during the step ({seed['qdq']['mem']}; see README)",
    ]
    if contended:
        lines.append(
            f"- **CPU contention**: lowest cpu/wall of a measured step is {min(ratios):.2f}; "
            "some other process competed for the cores, so wall times are inflated"
        )
    lines += [
        "",
        "## qflow per size and form",
        "",
        size_table(size_rows),
        "",
        f"Every step ran {args.repeat}× in the same process; the table keeps the fastest run and "
        "`spread` = slowest / fastest. "
        "`qflow s` = build + analyze_graph wall time, in one GC pause as `qflow.analyze` runs them; "
        "`cpu/wall` = its process CPU time / wall time "
        "(< 1: the core was shared); `z3 %` = prove_s / qflow s; `fold s` = "
        "`qflow.targets.arm.pipeline.fold_qparams` on the same edge graph, same process; `pass` = that "
        "minus the deepcopy fold_qparams makes first. `prove api s` = the reference encoding "
        '(z3 terms built through the Python API, `prove(dg, engine="api", tautologies=False)`: z3 asked about '
        "every obligation, tautologies too) on the same graph, once; `prove ×` = that / prove s; `qflow/walk` "
        "= qflow s / the bare walk over the FX nodes; `same` = the reference and qflow's prover gave every "
        "obligation the same verdict, counterexample and blockers.",
        "",
        "## Fold pass",
        "",
        fold_table(size_rows, distinct_rows),
        "",
        "## Log-log slopes (least squares over the sizes)",
        "",
        *slope_lines(size_rows, distinct_rows),
        "",
        "## plan_repair on the real models (qflow.examples.models)",
        "",
        repair,
        "",
        "Forms: aten Q/DQ (convert_pt2e), edge Q/DQ, folded (FoldAndAnnotateQParamsPass); objectives count and bytes.",
        f"Max plan_repair time over every model, form and objective: {worst_plan:.4f} s; "
        f"max single region: {worst_region:.4f} s "
        f"(requirement < 1 s: {'met' if worst_region < 1.0 and worst_plan < 1.0 else 'NOT met'}).",
    ]
    if args.profile:
        prof = res["profile"]
        lines += ["", f"Profile of the {label(prof['target'])} size written to benchmarks/profile.txt."]
        write_profile(prof)
    text = "\n".join(lines) + "\n"
    print(text)
    out_path.write_text(text)
    print(f"wrote {out_path} ({wall:.0f} s)", file=sys.stderr)
    return 0


def write_profile(prof: dict[str, Any]) -> None:
    """benchmarks/profile.txt: the shares of qflow's hot spots, then the raw pstats."""
    parts = [f"qflow cProfile, size {label(prof['target'])}\n"]
    for form in ("qdq", "folded"):
        p = prof[form]
        parts.append(f"== {form}: {p['nodes']} nodes, {p['profiled_s']:.1f} s under cProfile ==\n")
        for name, cum, calls in p["shares"]:
            parts.append(f"{name:<45} {cum:9.2f} s {100 * cum / p['profiled_s']:5.1f} %  {calls:>9} calls\n")
        parts.append("\n" + p["text"] + "\n")
    (HERE / "profile.txt").write_text("".join(parts))


if __name__ == "__main__":
    sys.exit(main())
