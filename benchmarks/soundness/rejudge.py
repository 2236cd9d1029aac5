"""Judge recorded cases again on more test inputs: is a false alarm a miscompile the inputs missed?

    python benchmarks/soundness/rejudge.py --records results-a.jsonl results-b.jsonl \\
        --ids @ids.txt --inputs 64 --out rejudged.jsonl [--attribute]

A false alarm is an error on a program the campaign's inputs (3 samples and ~25 chosen from the program:
`case.domain_inputs`) found within the band; qflow's bounds are over every code that can reach a value,
so the question is whether those inputs reach the codes. For each case this rebuilds the same program
(its seeds), lowers it, and runs `--inputs` more inputs (`case.random_inputs`: uniform and narrow over each
input's quantization range, chosen from the program and the seed alone — no verdict of qflow steers them)
on the backend against the fake-quantized model, under the record's own grids (the same band).

Each output record is the input record with `err` the worse of the campaign's and the new inputs' per
output (`err_campaign` keeps the first; `more` says what ran), so `summary.py` reads the verdicts
against the stronger oracle. Judge every verdict class alike (the proved ones too, where the stronger
oracle can only add misses): re-judging the flagged cases alone can only turn false alarms into hits.
`--attribute` also runs qflow's repair of the program on the same inputs (`more.repaired`: its error
against the original fake-quantized model) — whether the flagged violation is what moves the outputs.
`--cmsis-single-rounding` runs the Cortex-M reference kernels with CMSIS-NN's single rounding (a build with
`CMSIS_NN_USE_SINGLE_ROUNDING`) in place of the double rounding they simulate, on the campaign's inputs and
the new ones, and records that error alone (`err`; not merged with the campaign's, which ran double
rounding): on the same inputs as a run without it, whether a deviation is the kernels' rounding or something
else.
`--levels N` adds N constant inputs (`case.level_inputs`: every element at one level of its input's range, and 0):
rows of equal values, which random inputs seldom give a mask or a row maximum.
`--search N` then spends N more backend runs looking for the input furthest from the fake-quantized model
(`case.searched_inputs`: random moves from the worst input so far, kept when the backend's error does not
shrink): steered by the backend's error alone, so run it on proved cases as on flagged ones.
`--ties N` judges nothing anew: on the inputs a record was judged on it records, per output, how far the
backend's result is from the nearest of N results the fake-quantized model gives with what it requantizes
jittered (`case.tie_resolutions`, in output LSB: `more.ties`). Within the band, each code the backend wrote is one
the model itself writes when a rounding tie breaks the other way, input by input and element by element:
the evidence that a proved miscompile is a tie resolution and not a wrong domain.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import case  # noqa: E402
from gen import generate  # noqa: E402
from summary import load  # noqa: E402


def _merged(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The worse of two `case.compare` results, output by output."""
    if "outputs" not in a or "outputs" not in b:
        return a if "why" in a else b
    worst = dict(b if b.get("ratio", 0.0) > a.get("ratio", 0.0) else a)
    worst["outputs"] = [x if x["lsb"] >= y["lsb"] else y for x, y in zip(a["outputs"], b["outputs"], strict=True)]
    return worst


def _single_rounding(val: torch.Tensor, multiplier: int, shift: int) -> torch.Tensor:
    """CMSIS-NN's `arm_nn_requantize` built with CMSIS_NN_USE_SINGLE_ROUNDING: val · multiplier / 2^(31 − shift),
    rounded once, half up."""
    result = (val.to(torch.int64) * int(multiplier)) >> (31 - shift - 1)
    return ((result + 1) >> 1).to(torch.int32)


@contextmanager
def cmsis_single_rounding() -> Iterator[None]:
    """The Cortex-M dialect's reference kernels, rounding once where they simulate CMSIS-NN's default double
    rounding (`requantize_cmsis`: a doubling high multiply rounded, then a rounding right shift)."""
    importlib.import_module("qflow.targets.cortex_m.pipeline")  # (the dialect as the campaign loads it, first)
    operators = importlib.import_module("executorch.backends.cortex_m.ops.operators")
    double = operators.requantize_cmsis
    operators.requantize_cmsis = _single_rounding
    try:
        yield
    finally:
        operators.requantize_cmsis = double


def _program(rec: dict[str, Any]) -> tuple[int, str, torch.fx.GraphModule, list[Any], Any]:
    """(seed, variant, converted program, its test inputs, exported program) of a recorded case, rebuilt
    from its seeds and checked to be the recorded one."""
    index, full = case.parse_id(rec["id"])
    variant = case.base_variant(full)
    sink: dict[str, Any] = {}
    converted, samples, tests = case.quantized(variant, generate(index, case.menu_of(full)), index, sink)
    if sink.get("overrides") != rec.get("overrides"):
        raise RuntimeError(f"not the recorded program: overrides {sink.get('overrides')} != {rec.get('overrides')}")
    return index, variant, converted, tests, torch.export.export(converted, samples[0], strict=True)


def ties(rec: dict[str, Any], trials: int) -> dict[str, Any]:
    """`rec` with `more.ties`: per output, the backend's distance in output LSB from the nearest
    tie resolution of the fake-quantized model (`case.tie_resolutions`) on the inputs `rec` was judged
    on (the campaign's, and a re-judged record's `more.inputs` more)."""
    t0 = time.perf_counter()
    index, variant, converted, tests, exported = _program(rec)
    inputs = tests + case.domain_inputs(converted, tests, seed=index)
    if isinstance(more := (rec.get("more") or {}).get("inputs"), int):
        inputs += case.random_inputs(converted, tests, seed=index, n=more)
        inputs += case.level_inputs(converted, tests, (rec.get("more") or {}).get("levels", 0))
    edge, _ = case.lower(variant, copy.deepcopy(exported), tests[0])
    got = [case.run_backend(variant, edge, x) for x in inputs]
    with torch.no_grad():
        want = [case._as_list(converted(*x)) for x in inputs]
    far = case.tie_resolutions(converted, inputs, got, trials)
    grids = rec["grids"]
    lsb = [
        None if g.get("out_scale") is None else round(f / g["out_scale"], 3) for f, g in zip(far, grids, strict=True)
    ]
    ran = {"ties": lsb, "trials": trials, "judged_on": len(inputs), "err": case.compare(got, want, grids)}
    ran["qflow_rev"], ran["time"] = case.qflow_revision(), round(time.perf_counter() - t0, 3)
    return {**copy.deepcopy(rec), "more": ran}


def rejudge(
    rec: dict[str, Any], n: int, attribute: bool, single: bool = False, levels: int = 0, search: int = 0
) -> dict[str, Any]:
    t0 = time.perf_counter()
    index, variant, converted, tests, exported = _program(rec)
    inputs = case.random_inputs(converted, tests, seed=index, n=n) + case.level_inputs(converted, tests, levels)
    if single:  # (the campaign's own inputs too: its verdict ran the double rounding on them)
        inputs = tests + case.domain_inputs(converted, tests, seed=index) + inputs
    with torch.no_grad():
        want = [case._as_list(converted(*x)) for x in inputs]
    grids = rec["grids"]
    edge, _ = case.lower(variant, copy.deepcopy(exported), tests[0])
    err = case.compare([case.run_backend(variant, edge, x) for x in inputs], want, grids)
    more: dict[str, Any] = {"inputs": n, "levels": levels, "err": err}
    if search:
        more["search"] = _search(rec, variant, converted, tests, edge, inputs, search)
        err = _merged(err, more["search"]["err"])
    if attribute and (rec.get("repair") or {}).get("status") == "repaired":
        import qflow

        fixed = case._with_target(qflow.repair, case.target_of(variant))(copy.deepcopy(exported))
        fedge, _ = case.lower(variant, copy.deepcopy(fixed), tests[0])
        more["repaired"] = case.compare([case.run_backend(variant, fedge, x) for x in inputs], want, grids)
    more["qflow_rev"], more["time"] = case.qflow_revision(), round(time.perf_counter() - t0, 3)
    if single:
        more["rounding"] = "CMSIS-NN single rounding"
    out = copy.deepcopy(rec)
    out["err_campaign"], out["err"], out["more"] = rec["err"], err if single else _merged(rec["err"], err), more
    return out


def _search(
    rec: dict[str, Any], variant: str, converted: Any, tests: list[Any], edge: Any, inputs: list[Any], runs: int
) -> dict[str, Any]:
    """`case.searched_inputs` from the campaign's inputs and `inputs`: the furthest input `runs` backend runs
    find, and the error there."""
    index, grids = case.parse_id(rec["id"])[0], rec["grids"]

    def distance(x: Any) -> float:
        with torch.no_grad():
            want = case._as_list(converted(*x))
        err = case.compare([case.run_backend(variant, edge, x)], [want], grids)
        return float(err.get("ratio", float("inf")))

    start = tests + case.domain_inputs(converted, tests, seed=index) + inputs
    best, d, at = case.searched_inputs(converted, tests, start, distance, seed=index, n=runs)
    with torch.no_grad():
        want = case._as_list(converted(*best))
    err = case.compare([case.run_backend(variant, edge, best)], [want], grids)
    return {"runs": runs, "found_at": at, "ratio": round(d, 4), "err": err}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", nargs="+", required=True, help="results files (the last record of an id wins)")
    ap.add_argument("--ids", required=True, help="comma-separated, or @FILE with one per line")
    ap.add_argument("--inputs", type=int, default=64)
    ap.add_argument("--out", required=True)
    ap.add_argument("--attribute", action="store_true", help="also run qflow's repair on the same inputs")
    ap.add_argument(
        "--cmsis-single-rounding", action="store_true", help="Cortex-M: the reference kernels round once (see above)"
    )
    ap.add_argument("--ties", type=int, default=0, metavar="N", help="tie resolutions, N jitters (see above)")
    ap.add_argument("--levels", type=int, default=0, metavar="N", help="N constant inputs more (case.level_inputs)")
    ap.add_argument("--search", type=int, default=0, metavar="N", help="N backend runs searching (see above)")
    args = ap.parse_args()
    ids = Path(args.ids[1:]).read_text().split() if args.ids.startswith("@") else args.ids.split(",")
    recs = {r["id"]: r for r in load([Path(p) for p in args.records])}
    out = Path(args.out)
    done = {r["id"] for r in load([out])} if out.exists() else set()
    for cid in ids:
        rec = recs.get(cid)
        if cid in done or rec is None or not rec.get("err") or not rec.get("grids"):
            continue
        try:
            if args.ties:
                new = ties(rec, args.ties)
            elif args.cmsis_single_rounding:
                with cmsis_single_rounding():
                    new = rejudge(rec, args.inputs, args.attribute, single=True, levels=args.levels)
            else:
                new = rejudge(rec, args.inputs, args.attribute, levels=args.levels, search=args.search)
        except Exception as e:  # noqa: BLE001 - one case's failure is recorded, the rest go on
            new = copy.deepcopy(rec)
            new["more"] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-1500:]}
        with out.open("a") as f:
            f.write(json.dumps(new) + "\n")
        print(cid, json.dumps({k: v for k, v in new["more"].items() if k != "trace"})[:300], flush=True)


if __name__ == "__main__":
    main()
