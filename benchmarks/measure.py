"""Benchmark jobs, each run in its own process by ``run.py``.

``python benchmarks/measure.py size N [N ...] [--weights shared|distinct]``
measures synthetic sizes (both forms and the Arm fold pass);
``python benchmarks/measure.py repair NAME ...`` times ``plan_repair`` on the
real example models; ``python benchmarks/measure.py profile N`` profiles qflow
on one size. Each job prints one JSON line after ``MARKER`` on stdout.

Peak memory is the peak *resident set* growth of the process during the
measured step (``/proc/self/clear_refs`` resets ``VmHWM``, then
``VmHWM − VmRSS`` before the step), so z3's native allocations count, which
``tracemalloc`` cannot see. Where the reset is not allowed it falls back to the
``getrusage`` maxrss delta, which only shows growth past the earlier peak.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import ctypes
import gc
import io
import json
import os
import pstats
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

MARKER = "QFLOW_BENCH_JSON "
T = TypeVar("T")


# -- memory / timing ---------------------------------------------------------------
def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _trim() -> None:
    """Hand freed heap back to the OS so reused memory shows up as growth again."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


@dataclass
class Measure:
    """Wall and CPU seconds and peak memory of one measured step."""

    wall_s: float
    cpu_s: float
    peak_mb: float
    how: str


def best_cpu(fn: Callable[[], Any], repeat: int = 3) -> float:
    """The fewest CPU seconds `fn` takes in `repeat` runs (the benchmarks' ratios compare these)."""
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def measured(fn: Callable[[], T]) -> tuple[T, Measure]:
    """``fn()`` and its Measure (peak = MB above the RSS at the start)."""
    gc.collect()
    _trim()
    if _reset_peak():
        base, how = _status_kb("VmRSS"), "rss-hwm"
    else:
        base, how = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "maxrss-delta"
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = _status_kb("VmHWM") if how == "rss-hwm" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return out, Measure(wall, cpu, max(0, peak - base) / 1024, how)


class _TimedCopy:
    """Stands in for the ``copy`` module inside ``qflow.targets.arm.pipeline`` while
    ``fold_qparams`` runs, so the deepcopy it makes is timed apart from the pass."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def deepcopy(self, x: T, memo: dict[int, Any] | None = None) -> T:
        t0 = time.perf_counter()
        try:
            return copy.deepcopy(x, memo)
        finally:
            self.seconds += time.perf_counter() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


def fold(edge: Any, spec: str, repeat: int = 1) -> tuple[Any, dict[str, Any]]:
    """``arm.fold_qparams(edge)`` ``repeat`` times (it copies ``edge`` each time);
    the fastest run's total, its deepcopy and the pass alone."""
    from qflow.targets.arm import pipeline as arm

    best: dict[str, Any] | None = None
    walls = []
    folded = None
    for _ in range(repeat):
        folded = None
        shim = _TimedCopy()
        arm.copy = shim  # type: ignore[assignment]  # instrumentation only, restored below
        try:
            folded, m = measured(lambda: arm.fold_qparams(edge, spec=spec))
        finally:
            arm.copy = copy  # type: ignore[assignment]
        walls.append(m.wall_s)
        run = {
            "fold_s": m.wall_s,
            "fold_cpu_s": m.cpu_s,
            # 0: fold_qparams no longer calls copy.deepcopy through its module's `copy`
            "deepcopy_s": shim.seconds if shim.seconds > 0 else None,
            "pass_s": m.wall_s - shim.seconds,
            "fold_peak_mb": m.peak_mb,
        }
        if best is None or run["fold_s"] < best["fold_s"]:
            best = run
    assert best is not None
    best["fold_runs_s"] = walls
    return folded, best


def walk(gm: Any) -> int:
    """The floor: touch every node's target, args and meta['val'] once."""
    k = 0
    for n in gm.graph.nodes:
        _ = n.target, n.args, n.meta.get("val")
        k += 1
    return k


# -- one synthetic size ------------------------------------------------------------
def qflow_form(gm: Any, ep: Any, repeat: int = 1) -> dict[str, Any]:
    """Time qflow on one graph ``repeat`` times: build, then analyze_graph (its
    stats split the rest), in one GC pause as ``qflow.analyze`` runs them (the
    graph is then freed by reference counting, never walked by the collector).
    The fastest run is kept; ``runs_s`` has them all."""
    from qflow.analysis import analyze_graph
    from qflow.gc_pause import paused_gc
    from qflow.integrations.fx import build

    def run() -> tuple[float, Any, float]:
        with paused_gc():
            t0 = time.perf_counter()
            dg = build(gm, ep)
            t1 = time.perf_counter()
            rep = analyze_graph(dg)
            t2 = time.perf_counter()
            del dg  # (in the measured time, as when qflow.analyze returns)
        return t1 - t0, rep, t2 - t1

    best: dict[str, Any] | None = None
    walls, peaks = [], []
    for _ in range(repeat):
        _, w = measured(lambda: walk(gm))
        (build_s, rep, analyze_s), m = measured(run)
        walls.append(m.wall_s)
        peaks.append(m.peak_mb)
        st = rep.stats
        cur = {
            "nodes": len(gm.graph.nodes),
            "values": st["values"],
            "regions": st["regions"],
            "largest_region": st["largest_region"],
            "solver_checks": st["solver_checks"],
            "obligations": rep.obligations,
            "findings": sorted({f.kind for f in rep.findings}),
            "walk_s": w.wall_s if best is None else min(w.wall_s, best["walk_s"]),
            "build_s": build_s,
            "check_s": st["check_s"],
            "propagate_s": st["propagate_s"],
            "prove_s": st["prove_s"],
            "analyze_s": analyze_s,
            "total_s": m.wall_s,
            "cpu_s": m.cpu_s,
            "mem": m.how,
        }
        del rep
        if best is None or cur["total_s"] < best["total_s"]:
            best = cur
        else:
            best["walk_s"] = cur["walk_s"]
    assert best is not None
    best["runs_s"] = walls
    best["peak_mb"] = max(peaks)
    best.update(reference_prove(build(gm, ep)))
    return best


def reference_prove(dg: Any) -> dict[str, Any]:
    """The same graph proved by both engines, in this process: the reference (Python-API)
    encoding asked about every obligation (tautologies too), its prove time, and whether
    every verdict and counterexample is the same as the default prover's."""
    from qflow.gc_pause import paused_gc
    from qflow.solvers.prove import prove

    def outcome(engine: str, tautologies: bool = True) -> tuple[list[Any], float]:
        with paused_gc():  # as analyze_graph runs it
            t0 = time.perf_counter()
            results, _ = prove(dg, engine=engine, tautologies=tautologies)
            wall = time.perf_counter() - t0
        rows = [(r.status, r.produced, r.expected, tuple(r.blockers)) for r in results]
        return rows, wall

    ref, ref_s = outcome("api", tautologies=False)  # z3 asked about every obligation
    fast, fast_s = outcome("text")
    return {"prove_api_s": ref_s, "prove_text_once_s": fast_s, "same_verdicts": ref == fast}


def job_sizes(
    targets: list[int], shared: bool, fold_only: bool = False, vary: bool = True, repeat: int = 1
) -> dict[str, Any]:
    """Each size in turn: qflow on the Q/DQ form, the real fold pass, qflow on the folded form.

    One process, one really quantized seed block for all of them; each step
    ``repeat`` times, the fastest kept.
    """
    from synth import SPEC, copies_for, nodes_per_copy, quantize_block, replicate

    seed = quantize_block()
    results = []
    for target in targets:
        copies = copies_for(target, nodes_per_copy(seed.edge, shared))
        edge, m = measured(lambda copies=copies: replicate(seed.edge, copies, shared, vary))
        out: dict[str, Any] = {
            "target": target,
            "copies": copies,
            "weights": "shared" if shared else "distinct",
            "qparams": "vary" if vary else "same",
            "state_placeholders": _state_placeholders(edge),
            "spec": SPEC,
            "block_quantize_s": seed.quantize_s,
            "block_to_edge_s": seed.to_edge_s,
            "synth_s": m.wall_s,
            "repeat": repeat,
            "nodes": len(edge.graph.nodes),
        }
        if not fold_only:
            out["qdq"] = qflow_form(edge.graph_module, edge, repeat)
        folded, times = fold(edge, SPEC, repeat)
        out.update(times)
        if not fold_only:
            out["folded"] = qflow_form(folded.graph_module, folded, repeat)
        out["folded_nodes"] = len(folded.graph.nodes)
        del edge, folded
        results.append(out)
    return {"sizes": results}


def _state_placeholders(ep: Any) -> int:
    return len(ep.graph_signature.input_specs) - len(ep.graph_signature.user_inputs)


# -- plan_repair on the real models ------------------------------------------------
def job_repair(names: list[str]) -> dict[str, Any]:
    """plan_repair on every form of each real example model: total and per-region times."""
    from qflow.examples import models
    from qflow.integrations.fx import build
    from qflow.solvers.repair import Plan, Planner
    from qflow.targets.arm import pipeline as arm

    class TimedPlanner(Planner):
        """Records the wall time of each region's z3 Optimize."""

        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            self.region_s: list[float] = []

        def _solve_region(self, ids: list[str], obs: list[Any], plan: Plan) -> None:
            t0 = time.perf_counter()
            super()._solve_region(ids, obs, plan)
            self.region_s.append(time.perf_counter() - t0)

    rows = []
    for name in names or list(models.MODELS):
        ex = models.MODELS[name]()
        quantizer = ex.make_quantizer() if ex.make_quantizer is not None else None
        converted = arm.quantize(ex.model, ex.inputs, spec=ex.spec, quantizer=quantizer)
        edge = arm.to_edge_program(converted, ex.inputs, spec=ex.spec)
        folded = arm.fold_qparams(edge, spec=ex.spec)
        forms = {
            "aten-qdq": (converted, None),
            "edge-qdq": (edge.graph_module, edge),
            "folded": (folded.graph_module, folded),
        }
        for form, (gm, ep) in forms.items():
            for objective in ("count", "bytes"):
                dg = build(gm, ep)
                planner = TimedPlanner(dg, objective)
                t0 = time.perf_counter()
                plan = planner.plan()
                dt = time.perf_counter() - t0
                rows.append(
                    {
                        "model": name,
                        "form": form,
                        "objective": objective,
                        "nodes": len(gm.graph.nodes),
                        "regions": len(planner.region_s),
                        "plan_s": dt,
                        "max_region_s": max(planner.region_s, default=0.0),
                        "requants": len(plan.requants),
                        "reclaims": len(plan.reclaims),
                        "unrepairable": len(plan.unrepairable),
                    }
                )
    return {"rows": rows}


# -- profile -------------------------------------------------------------------------
def job_profile(target: int, top: int = 25, vary: bool = True) -> dict[str, Any]:
    """cProfile of qflow (build + analyze_graph) on both forms of one size."""
    from synth import SPEC, copies_for, nodes_per_copy, quantize_block, replicate

    from qflow.analysis import analyze_graph
    from qflow.integrations.fx import build
    from qflow.targets.arm import pipeline as arm

    seed = quantize_block()
    edge = replicate(seed.edge, copies_for(target, nodes_per_copy(seed.edge)), vary_qparams=vary)
    folded = arm.fold_qparams(edge, spec=SPEC)
    out: dict[str, Any] = {"target": target}
    for form, ep in (("qdq", edge), ("folded", folded)):
        gc.collect()
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        analyze_graph(build(ep.graph_module, ep))
        prof.disable()
        wall = time.perf_counter() - t0
        text = io.StringIO()
        st = pstats.Stats(prof, stream=text)
        st.sort_stats("cumulative").print_stats(top)
        st.sort_stats("tottime").print_stats(top)
        out[form] = {"nodes": len(ep.graph.nodes), "profiled_s": wall, "text": text.getvalue(), "shares": _shares(st)}
    return out


#: (label, file suffix, function) of the qflow/z3 functions whose cumulative share we report.
HOT = [
    ("fx.build (adapter)", "integrations/fx.py", "build"),
    ("  fx.target_name", "integrations/fx.py", "target_name"),
    ("  fx.qdq_domain", "integrations/fx.py", "qdq_domain"),
    ("  fx.quant_args_domain", "integrations/fx.py", "quant_args_domain"),
    ("  Domain.quantized", "qflow/domain.py", "quantized"),
    ("  DomainGraph.add_value (networkx)", "qflow/graph.py", "add_value"),
    ("  DomainGraph.add_use (networkx)", "qflow/graph.py", "add_use"),
    ("analysis.analyze_graph", "qflow/analysis.py", "analyze_graph"),
    ("  analysis._check_acyclic (networkx)", "qflow/analysis.py", "_check_acyclic"),
    ("  lattice.propagate", "lattice/propagate.py", "propagate"),
    ("  prove.Prover.prove", "solvers/prove.py", "prove"),
    ("    Prover.regions (union-find)", "solvers/prove.py", "regions"),
    ("    DomainGraph.value (networkx lookup)", "qflow/graph.py", "value"),
    ("    Encoder.define (background facts)", "solvers/encode.py", "define"),
    ("    Prover.formula (obligations)", "solvers/prove.py", "formula"),
    ("    Encoder.literal", "solvers/encode.py", "literal"),
    ("    Encoder.var", "solvers/encode.py", "var"),
    ("    Encoder.eq", "solvers/encode.py", "eq"),
    ("    Encoder.fits", "solvers/encode.py", "fits"),
    ("    z3.And", "z3/z3.py", "And"),
    ("    z3.Or", "z3/z3.py", "Or"),
    ("    z3.Not", "z3/z3.py", "Not"),
    ("    z3.IntVal", "z3/z3.py", "IntVal"),
    ("    z3.RealVal", "z3/z3.py", "RealVal"),
    ("    Fraction(scale)", "fractions.py", "__new__"),
    ("    z3 AstRef.__del__ (dec_ref)", "z3/z3.py", "__del__"),
    ("    Solver.add", "z3/z3.py", "add"),
    ("    Solver.check (the solving)", "z3/z3.py", "check"),
    ("    Solver.push", "z3/z3.py", "push"),
]


def _shares(st: pstats.Stats) -> list[tuple[str, float, int]]:
    """(label, cumulative seconds, calls) of each HOT function; where several
    functions match (wrappers of one another), the one with the most time."""
    stats: dict[tuple[str, int, str], tuple[Any, ...]] = st.stats  # type: ignore[attr-defined]
    out = []
    for label, file_suffix, func in HOT:
        best = (0.0, 0)
        for (fname, _line, fn), (_cc, nc, _tt, ct, _callers) in stats.items():
            if fn == func and fname.endswith(file_suffix) and ct > best[0]:
                best = (ct, nc)
        out.append((label, *best))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="job", required=True)
    s = sub.add_parser("size")
    s.add_argument("targets", type=int, nargs="+")
    s.add_argument("--weights", choices=("shared", "distinct"), default="shared")
    s.add_argument("--fold-only", action="store_true")
    s.add_argument("--qparams", choices=("vary", "same"), default="vary")
    s.add_argument("--repeat", type=int, default=1, help="runs of each step; the fastest is kept")
    r = sub.add_parser("repair")
    r.add_argument("names", nargs="*", help="model names (default: all)")
    p = sub.add_parser("profile")
    p.add_argument("target", type=int)
    p.add_argument("--qparams", choices=("vary", "same"), default="vary")
    args = ap.parse_args(argv)
    if os.environ.get("QFLOW_BENCH_THREADS"):
        import torch

        torch.set_num_threads(int(os.environ["QFLOW_BENCH_THREADS"]))
    if args.job == "size":
        vary = args.qparams == "vary"
        result = job_sizes(args.targets, args.weights == "shared", args.fold_only, vary, args.repeat)
    elif args.job == "repair":
        result = job_repair(args.names)
    else:
        result = job_profile(args.target, vary=args.qparams == "vary")
    sys.stdout.write(MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
