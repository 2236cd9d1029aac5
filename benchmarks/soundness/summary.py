"""Markdown summary of a campaign's results: the confusion table truth × verdict,
every soundness miss and false alarm by id, lowering failures and whether qflow
predicted them, repair outcomes, timing.

    python benchmarks/soundness/summary.py [results.jsonl ...] [--output summary.md]

Definitions (the issue's acceptance terms):
* truth: `miscompile` / `exact` / `marginal` from the backend run (case.py's
  rule), or the pipeline's own failure: `lowering-failed`, `run-failed`,
  `not-delegated` (nothing to check), `quantize-failed` (invalid case).
* verdict: qflow before partitioning (`pre`: the converted Q/DQ program):
  `error` (an error finding), `warning` (a warning finding or a violated
  obligation without an error finding), `unproven`, `proved`, `crash`.
* soundness miss: a miscompile without an error verdict (`proved` is the
  worst kind, `unproven` is honest but flags nothing). False alarm: an exact
  case with an error verdict.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TRUTHS = ["miscompile", "marginal", "exact", "lowering-failed", "run-failed", "not-delegated", "quantize-failed"]
TRUTHS += ["timeout", "crash", "invalid-record"]
VERDICTS = ["error", "warning", "unproven", "proved", "crash", "none"]
ORDER = ["crash", "error", "warning", "unproven", "proved"]


#: The widest exact band of any output, in that output's LSB. From first principles, not from the program:
#: a correct integer lowering may land one code off at the output's own requant (a tie broken the other way,
#: the 16-bit rescale multiplier), and one more code from everything upstream together (an upstream code off
#: by one, carried through copies and 1-Lipschitz ops onto a grid no coarser than it). A band the upstream
#: grids would make wider (one coarse code = many fine output codes) is judged at the cap: such a program
#: loses precision the user asked for, which is for qflow to flag, not for the truth rule to absorb.
CAP_LSB = 2.0
#: Repair's own rounding: one output LSB per requant it inserts (a count, never a grid of the repaired program).
REPAIR_STEP_LSB = 1.0
EPS = 1e-3  # whole codes up to float noise in the scales (1.0013 LSB is one code)


def load(paths: list[Path]) -> list[dict[str, Any]]:
    """Every record the runner writes; one without an `id` is kept as `invalid-record` (`--check` fails on it)."""
    recs: dict[str, dict[str, Any]] = {}
    for p in paths:
        for no, line in enumerate(p.read_text().splitlines(), 1):
            if line.strip():
                r = json.loads(line)
                if "CaseTimeout" in (r.get("error") or ""):  # a stage wrapped the case's time limit
                    r["outcome"] = "timeout"
                if not isinstance(r.get("id"), str):
                    r = {"id": f"?{p.name}:{no}", "variant": "?", "outcome": "invalid-record"}
                    r["error"] = "record without id"
                recs[r["id"]] = r  # the last run of an id wins
    return sorted(recs.values(), key=lambda r: r["id"])


def _out_errors(err: dict[str, Any], grids: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """(output index, error in that output's LSB): every output in new records, the recorded worst in old ones."""
    if "outputs" in err:
        return [(i, o["lsb"]) for i, o in enumerate(err["outputs"]) if o.get("lsb") is not None]
    if err.get("lsb") is None:
        return []
    i = next((k for k, g in enumerate(grids) if g.get("out_scale") == err.get("out_scale")), 0)
    return [(i, err["lsb"])]


def band(grid: dict[str, Any]) -> tuple[float, float, bool]:
    """(band in output LSB after the cap, the part of the uncapped band that came from upstream grids, capped?)."""
    out = grid.get("out_scale") or grid.get("coarsest") or 1e-3
    uncapped = max(1.0 + (grid.get("coarsest") or out) / out, (grid.get("budget") or 0.0) / out)
    return min(uncapped, CAP_LSB), uncapped - 1.0, uncapped > CAP_LSB


def judge(r: dict[str, Any], err: dict[str, Any] | None = None) -> dict[str, Any]:
    """The truth under the capped band, from the run's errors and the *original* program's grids only."""
    err = r.get("err") if err is None else err
    if not err:
        return {"truth": None}
    if "why" in err and err.get("lsb") is None:
        return {"truth": "miscompile", "why": err["why"]}
    grids = r.get("grids") or []
    worst: dict[str, Any] = {"truth": "exact", "lsb": 0.0, "band": CAP_LSB, "upstream": 0.0, "capped": False}
    for i, lsb in _out_errors(err, grids):
        b, up, capped = band(grids[i] if i < len(grids) else {})
        over = lsb > b + EPS
        if over or (worst["truth"] == "exact" and lsb - b >= worst["lsb"] - worst["band"]):
            worst = {"truth": "miscompile" if over else "exact", "output": i, "lsb": lsb, "band": b}
            worst.update(upstream=up, capped=capped)
            if over:
                break
    return worst


def truth(r: dict[str, Any]) -> str:
    """`miscompile` / `exact` under the capped band for a case that ran; the pipeline's outcome otherwise."""
    o = r.get("outcome", "crash")
    if o in ("exact", "marginal", "miscompile"):
        return judge(r).get("truth") or o
    return o


def _derive(q: dict[str, Any]) -> str:
    """The verdict from a stored report summary (as case.verdict; recomputed so the rule can change)."""
    if q.get("verdict") == "crash":
        return "crash"
    parts = [v for k, v in q.items() if k.startswith("p") and isinstance(v, dict) and "findings" in v]
    if parts:  # folded: the worst partition
        return min((_derive(p) for p in parts), key=ORDER.index)
    sev = {f["severity"] for f in q.get("findings", [])}
    ob = q.get("obligations", {})
    if "error" in sev:
        return "error"
    if "warning" in sev or ob.get("violated", 0):
        return "warning"
    # (a report that is not proved with nothing unproven quantizes nothing: `case.verdict` stored "unproven")
    return "unproven" if ob.get("unproven", 0) or q.get("verdict") == "unproven" else "proved"


def verdict(r: dict[str, Any], form: str = "pre") -> str:
    q = r.get("qflow", {}).get(form)
    return _derive(q) if q else "none"


def findings(r: dict[str, Any], form: str = "pre") -> str:
    q = r.get("qflow", {}).get(form) or {}
    fs = q.get("findings", [])
    if not fs and form == "folded":
        fs = [f for k, v in q.items() if k.startswith("p") and isinstance(v, dict) for f in v.get("findings", [])]
    s = ", ".join(f"{f['kind']}@{f['node']}({f['severity']})" for f in fs if f["severity"] != "info")
    if q.get("verdict") == "crash":
        s = q.get("error", "")
    return s or "—"


def is_miss(r: dict[str, Any], form: str = "pre") -> bool:
    """An error beyond the capped band that qflow did not flag (a formerly `marginal` one included)."""
    return truth(r) == "miscompile" and verdict(r, form) != "error"


def tie(r: dict[str, Any]) -> float | None:
    """The judged output's FQ tie sensitivity in output LSB (case.tie_sensitivity), when recorded: how far
    the fake-quantized model itself moves under a 1e-5 relative jitter of what it requantizes. Shown beside
    a miss, never used to judge one."""
    grids, out = r.get("grids") or [], judge(r).get("output")
    return grids[out].get("tie") if isinstance(out, int) and out < len(grids) else None


def resolution(r: dict[str, Any]) -> float | None:
    """How far the judged output is from the nearest tie resolution of the FQ model, input by input
    (`rejudge.py --ties`), in output LSB, when recorded: within the band, the backend broke ties."""
    ties, out = (r.get("more") or {}).get("ties") or [], judge(r).get("output")
    return ties[out] if isinstance(out, int) and out < len(ties) else None


def _within_tie(r: dict[str, Any]) -> bool:
    t = tie(r)
    return t is not None and judge(r).get("lsb", float("inf")) <= t + EPS


def is_false_alarm(r: dict[str, Any], form: str = "pre") -> bool:
    return truth(r) == "exact" and verdict(r, form) == "error"


def moved_a_code(r: dict[str, Any]) -> bool:
    """Did the backend move a judged output by a whole code, inside the band? Shown beside a false alarm
    (an error qflow raised where a code really moved, which #27's half-LSB rule calls wrong and the band
    exact), never used to judge one."""
    return truth(r) == "exact" and judge(r).get("lsb", 0.0) >= 1.0 - EPS


def crash_stage(r: dict[str, Any]) -> str | None:
    """The stage a case crashed in: a worker death (the runner's `died_in`), a qflow / repair crash, a case crash."""
    if r.get("died_in") and r.get("outcome") != "run-failed":
        return str(r["died_in"])
    if r.get("outcome") in ("crash", "timeout", "invalid-record"):
        return r["outcome"]
    for form, q in r.get("qflow", {}).items():
        if isinstance(q, dict) and q.get("verdict") == "crash":
            return f"qflow_{form}"
    if (r.get("repair") or {}).get("status") == "crash":
        return "repair"
    return None


def repair_problem(r: dict[str, Any]) -> str | None:
    """Why the repair made the program worse against the model the user quantized, or None.

    Never worse: the repaired program lowered and run is no further from the *original* fake-quantized model
    than the unrepaired program was, and within the capped band plus one output LSB per inserted requant."""
    rr = r.get("repair") or {}
    if rr.get("status") != "repaired" or rr.get("outcome") not in ("exact", "marginal", "miscompile"):
        return None
    vs = rr.get("err_vs_original_fq")
    if not vs:
        return "repaired program ran but its error against the original model was not recorded"
    j = judge(r, vs)
    allow = j.get("band", CAP_LSB) + REPAIR_STEP_LSB * int(rr.get("inserted") or 0)
    rep = j.get("lsb")
    if rep is None:
        return f"repaired program: {j.get('why')}"
    before = (r.get("err") or {}).get("lsb") if r.get("outcome") in ("exact", "marginal", "miscompile") else None
    if before is not None and rep > before + EPS:
        return f"{rep:.1f} LSB from the original after repair, {before:.1f} before"
    if rep > allow + EPS:
        return f"{rep:.1f} LSB from the original after repair > {allow:g} (band + inserted requants)"
    return None


def confusion(recs: list[dict[str, Any]], form: str) -> list[str]:
    cells: Counter[tuple[str, str]] = Counter((truth(r), verdict(r, form)) for r in recs)
    cols = [v for v in VERDICTS if any(cells[(t, v)] for t in TRUTHS)]
    rows = [t for t in TRUTHS if any(cells[(t, v)] for v in VERDICTS)]
    out = ["| truth \\ qflow | " + " | ".join(cols) + " | total |", "|---" * (len(cols) + 2) + "|"]
    for t in rows:
        n = [cells[(t, v)] for v in cols]
        out.append(f"| {t} | " + " | ".join(str(x) for x in n) + f" | {sum(n)} |")
    totals = [sum(cells[(t, v)] for t in rows) for v in cols]
    out.append("| **total** | " + " | ".join(str(x) for x in totals) + f" | {sum(totals)} |")
    return out


def _err(r: dict[str, Any]) -> str:
    if "cmp" in r:  # a torchao case (torchao_case.compare): against its band, not in LSB
        c = r["cmp"]
        return c.get("why") or f"{c['ratio']:.3g}× its band ({c['rel']:.2g} of the output's range)"
    e = r.get("err") or {}
    if "lsb" in e:
        return f"{e['lsb']:.1f} LSB ({e['steps']:.1f} coarse steps)"
    return e.get("why", "—")


def _versions(recs: list[dict[str, Any]]) -> str:
    import importlib.metadata as md

    vs = []
    for pkg in ("torch", "executorch", "torchao", "tosa-tools", "z3-solver"):
        try:
            vs.append(f"{pkg} {md.version(pkg)}")
        except md.PackageNotFoundError:
            continue
    revs = Counter(r["qflow_rev"] for r in recs if r.get("qflow_rev"))
    if revs:  # the commits the cases ran with
        vs.append("qflow " + " / ".join(f"{rev} ({n} cases)" if len(revs) > 1 else rev for rev, n in revs.items()))
        again = Counter(r["qflow_rev_pre"] for r in recs if r.get("qflow_rev_pre"))
        if again:  # run.py --reanalyze: the annotated / pre verdicts re-made without lowering again
            vs.append(
                "annotated / pre re-made by qflow " + " / ".join(f"{rev} ({n} cases)" for rev, n in again.items())
            )
        lowered = Counter(r["qflow_rev_lowered"] for r in recs if r.get("qflow_rev_lowered"))
        if lowered:  # run.py --reanalyze --lowered: the lowered verdicts too, lowered again but not run
            vs.append("lowered re-made by qflow " + " / ".join(f"{rev} ({n} cases)" for rev, n in lowered.items()))
        return ", ".join(vs)
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE).stdout
        vs.append(f"qflow {rev.strip()} (the checkout; the records do not say)")
    except OSError:
        pass
    return ", ".join(vs)


_BUCKETS = ["0", "(0, 1]", "(1, 4]", "(4, 16]", "(16, 255]", "> 255"]


def _bucket(x: float) -> str:
    for edge, name in ((0.0, "0"), (1.0, "(0, 1]"), (4.0, "(1, 4]"), (16.0, "(4, 16]"), (255.0, "(16, 255]")):
        if x <= edge + EPS:
            return name
    return "> 255"


def scored_at() -> str:
    """The commit this checkout scores at, `-dirty` when any tracked file differs from it."""
    git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True, cwd=HERE).stdout.strip()  # noqa: E731
    rev = git("rev-parse", "--short", "HEAD")
    return rev + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def render(recs: list[dict[str, Any]], command: str | None = None) -> str:  # noqa: C901
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    variants = Counter(r.get("variant") or r["id"].split("-", 1)[-1] for r in recs)
    lines = [f"Scored by `{command}` at commit `{scored_at()}`.", ""] if command else []
    lines += [
        f"{len(recs)} cases, {today}; {_versions(recs)}.",
        "Variants: " + ", ".join(f"{v} {n}" for v, n in sorted(variants.items())) + ".",
        "",
        "**Truth × qflow before partitioning** (`qflow.analyze` of the converted Q/DQ program):",
        "",
        *confusion(recs, "pre"),
        "",
    ]
    ran = [r for r in recs if r.get("outcome") in ("exact", "marginal", "miscompile")]
    by_domain = [
        r
        for r in ran
        if "err_samples" in r and truth(r) == "miscompile" and judge(r, r["err_samples"])["truth"] == "exact"
    ]
    lines += [
        f"Truth: an output is exact when its error is within its band, at most {CAP_LSB:g} output LSB "
        "(README: the rules); otherwise a miscompile, the former `marginal` ones included. "
        f"{len(ran)} cases ran on the backend; {sum(judge(r).get('capped', False) for r in ran)} of them have their "
        "judged output's band capped (the upstream grids alone would have allowed more).",
        "",
    ]
    checked = [r for r in ran if bound_check(r) is not None]
    if checked:
        over = [r for r in checked if bound_exceeded(r)]
        lines += [
            f"Bounds (issue #27): {len(checked)} flagged cases have one error whose bound is at a node whose "
            f"requantized value is an output; the measured error there exceeds the bound + half an LSB + the band "
            f"on {len(over)}" + (": " + ", ".join(f"`{r['id']}`" for r in over) if over else "") + ".",
            "",
        ]
    reached = [r for r in ran if reach_check(r) is not None]
    if reached:
        over = [r for r in reached if reach_exceeded(r)]
        lines += [
            f"Output bounds (issue #27): on {len(reached)} flagged cases qflow bounds how far all the violations "
            "together move the outputs (`output_lsb`); the largest measured output error less its band exceeds "
            f"that bound + half an LSB on {len(over)}"
            + (": " + ", ".join(f"`{r['id']}`" for r in over) if over else "")
            + ".",
            "",
        ]
    if any("err_samples" in r for r in ran):
        flagged = sum(verdict(r) == "error" for r in by_domain)
        lines += [
            f"Inputs: the samples, and inputs over the whole range of each input's quantization domain "
            f"(`case.domain_inputs`). {len(by_domain)} miscompiles compute right on the samples' inputs alone "
            f"({flagged} of them flagged before partitioning: "
            + (", ".join(f"`{r['id']}`" for r in by_domain) or "none")
            + f"). {sum('inputs_error' in r for r in ran)} cases ran on the samples alone (building the domain "
            "inputs failed: `inputs_error`).",
            "",
        ]
    lines += [
        "| form | miscompiles | misses | of which *proved* | of which formerly marginal "
        "| of which within the FQ tie sensitivity | exact | false alarms | of which an output code moved |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for form in ("pre", "generic", "annotated", "folded", "lowered", "pte", "pte_ref"):
        sub = [r for r in recs if form in r.get("qflow", {})]
        if not sub:
            continue
        mis = [r for r in sub if truth(r) == "miscompile"]
        miss = [r for r in sub if is_miss(r, form)]
        exact = [r for r in sub if truth(r) == "exact"]
        fa = [r for r in sub if is_false_alarm(r, form)]
        pct = f" ({100 * len(fa) / len(exact):.1f} %)" if exact else ""
        lines.append(
            f"| {form} | {len(mis)} | **{len(miss)}** | {sum(verdict(r, form) == 'proved' for r in miss)} | "
            f"{sum(r.get('outcome') == 'marginal' for r in miss)} | {sum(_within_tie(r) for r in miss)} | "
            f"{len(exact)} | **{len(fa)}**{pct} | {sum(moved_a_code(r) for r in fa)} |"
        )
    lines += [
        "",
        "An output code moved: the backend's judged output is a whole code off, inside the band (1–2 LSB). "
        "qflow's rule (issue #27: an obligation holds when no output code moves beyond the requant's own "
        "rounding) calls that an error; the band calls it exact.",
        "",
        "Before partitioning, by variant:",
        "",
        "| variant | miscompiles | misses | of which *proved* | exact | false alarms | unproven (warning) on exact |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in sorted(variants):
        sub = [r for r in recs if (r.get("variant") or r["id"].split("-", 1)[-1]) == v and "pre" in r.get("qflow", {})]
        miss = [r for r in sub if is_miss(r)]
        exact = [r for r in sub if truth(r) == "exact"]
        lines.append(
            f"| {v} | {sum(truth(r) == 'miscompile' for r in sub)} | {len(miss)} | "
            f"{sum(verdict(r) == 'proved' for r in miss)} | {len(exact)} | {sum(is_false_alarm(r) for r in sub)} | "
            f"{sum(verdict(r) in ('warning', 'unproven') for r in exact)} |"
        )
    lines.append("")
    for form, title in (
        ("annotated", "annotated graph"),
        ("folded", "folded partitions (Arm)"),
        ("lowered", "lowered program"),
        ("pte", ".pte as shipped (Cortex-M: against the PT2E program; torchao: alone)"),
        ("pte_ref", ".pte as shipped, against the program it was lowered from (torchao)"),
    ):
        sub = [r for r in recs if form in r.get("qflow", {})]
        if sub:
            lines += [f"Truth × qflow on the {title} ({len(sub)} cases):", "", *confusion(sub, form), ""]
    for form in ("pre", "annotated"):
        miss = [r for r in recs if form in r.get("qflow", {}) and is_miss(r, form)]
        if miss:
            lines += [
                f"### Soundness misses ({form})",
                "",
                "| id | verdict | error (LSB) | band (LSB) | upstream part of the band (LSB, uncapped) "
                "| FQ tie sensitivity (LSB) | recorded as | findings | ops |",
                "|---|---|---|---|---|---|---|---|---|",
            ]
            for r in miss:
                j, t, res = judge(r), tie(r), resolution(r)
                if "cmp" in r:  # a torchao case: no output LSB, its error against its band
                    lines.append(
                        f"| `{r['id']}` | {verdict(r, form)} | {_err(r)} | — | — | — | {r.get('outcome')} | "
                        f"{findings(r, form)} | {' '.join(r.get('ops', []))} |"
                    )
                    continue
                lines.append(
                    f"| `{r['id']}` | {verdict(r, form)} | {j.get('lsb', float('nan')):.1f} | {j.get('band', 0):g} | "
                    f"{j.get('upstream', 0):.1f}{' (capped)' if j.get('capped') else ''} | "
                    f"{'—' if t is None else f'{t:g}'}{'' if res is None else f' (nearest tie resolution {res:g})'} | "
                    f"{r.get('outcome')} | "
                    f"{findings(r, form)} | {' '.join(r.get('ops', []))} |"
                )
            lines.append("")
        fa = [r for r in recs if form in r.get("qflow", {}) and is_false_alarm(r, form)]
        if fa:
            lines += [f"### False alarms ({form})", "", "| id | error | findings | ops |", "|---|---|---|---|"]
            lines += [f"| `{r['id']}` | {_err(r)} | {findings(r, form)} | {' '.join(r.get('ops', []))} |" for r in fa]
            lines.append("")
    hist = Counter(_bucket(judge(r).get("upstream", 0.0)) for r in ran)
    lines += [
        "### How much of the band came from upstream grids",
        "",
        "Per case that ran, its judged output (the worst against its band): the uncapped band's part above 1 LSB, "
        "from the coarsest grid upstream or the rounding budget; "
        f"everything above {CAP_LSB - 1:g} LSB is cut by the cap.",
        "",
        "| upstream part (LSB) | cases |",
        "|---|---|",
        *[f"| {k} | {hist[k]} |" for k in _BUCKETS if hist[k]],
        "",
    ]
    fails = [r for r in recs if r.get("outcome") in ("lowering-failed", "run-failed")]
    if fails:
        by: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in fails:
            by[(r.get("error") or "?")[:110]].append(r)
        lines += [
            "### Lowering / run failures",
            "",
            f"{len(fails)} cases; predicted = qflow's verdict before partitioning was `error` "
            f"({sum(verdict(r) == 'error' for r in fails)}) "
            f"or `unproven` ({sum(verdict(r) == 'unproven' for r in fails)}).",
            "",
            "| error | cases | qflow error / unproven / proved | ids |",
            "|---|---|---|---|",
        ]
        for msg, rs in sorted(by.items(), key=lambda kv: -len(kv[1])):
            c = Counter(verdict(r) for r in rs)
            ids = " ".join(f"`{r['id']}`" for r in rs[:6]) + (" …" if len(rs) > 6 else "")
            lines.append(
                f"| {msg.replace('|', '/')} | {len(rs)} | {c['error']} / {c['unproven']} / {c['proved']} | {ids} |"
            )
        lines.append("")
    rep = [r for r in recs if "repair" in r]
    if rep:
        lines += ["### Repair (cases not proved before partitioning)", ""]
        st = Counter((r["repair"]["status"], r["repair"].get("outcome") or "—") for r in rep)
        lines += ["| repair | lowered repaired program | cases |", "|---|---|---|"]
        lines += [f"| {s} | {o} | {n} |" for (s, o), n in sorted(st.items())]
        lines.append("")
        rows, ok = [], 0
        for r in rep:
            rr = r["repair"]
            if rr.get("status") != "repaired" or rr.get("outcome") not in ("exact", "marginal", "miscompile"):
                continue
            if not repair_problem(r):
                ok += 1
                continue
            e0 = (r.get("err") or {}).get("lsb")
            e1 = (rr.get("err_vs_repaired_fq") or {}).get("lsb")
            e2 = (rr.get("err_vs_original_fq") or {}).get("lsb")
            why = repair_problem(r)
            cells = [f"{e:.1f}" if e is not None else "—" for e in (e0, e1, e2)]
            rows.append(
                f"| `{r['id']}` | {r.get('outcome')} | {rr.get('outcome')} | " + " | ".join(cells) + " | "
                f"{rr.get('inserted', '?')} | {'**no**: ' + why if why else 'yes'} |"
            )
        if rows or ok:
            lines += [
                "Repair against the model the user quantized: *never worse* = the repaired program, lowered and "
                "run, is no further from the original fake-quantized model than the unrepaired program, and within "
                f"the band plus {REPAIR_STEP_LSB:g} LSB per inserted requant. Never worse: **{ok}** of "
                f"{ok + len(rows)} repaired programs that ran" + ("; the others:" if rows else "."),
                "",
            ]
        if rows:
            lines += [
                "| id | before repair | after repair | LSB before (vs original) | LSB vs repaired fake-quant "
                "| LSB vs original fake-quant | requants inserted | never worse |",
                "|---|---|---|---|---|---|---|---|",
                *rows,
                "",
            ]
        bad = [r for r in rep if r["repair"]["status"] != "repaired"]
        if bad:
            lines += [
                f"- `{r['id']}` ({r.get('outcome')}): {r['repair']['status']}: {r['repair'].get('error')}" for r in bad
            ]
            lines.append("")
    stages = Counter(crash_stage(r) for r in recs if crash_stage(r))
    lines += ["### Crashes per stage", ""]
    if stages:
        lines += ["| stage | cases |", "|---|---|", *[f"| {k} | {n} |" for k, n in sorted(stages.items())], ""]
        lines += [f"- `{r['id']}` {crash_stage(r)}: {r.get('error')}" for r in recs if crash_stage(r)]
    else:
        lines.append(
            "None: no qflow form, lowering, run or repair crashed, and no worker died outside the backend run."
        )
    lines.append("")
    times: dict[str, list[float]] = defaultdict(list)
    for r in recs:
        for k, v in (r.get("time") or {}).items():
            times[k].append(v)
    if times:
        keys = (
            "quantize qflow_annotated qflow_pre lower run qflow_folded qflow_lowered pte qflow_pte repair total".split()
        )
        lines += ["Timing, seconds (median / max over cases; shared 2-core box):", ""]
        lines += [
            "| " + " | ".join(k for k in keys if times.get(k)) + " |",
            "|---" * sum(bool(times.get(k)) for k in keys) + "|",
        ]
        lines.append(
            "| "
            + " | ".join(f"{statistics.median(times[k]):.2f} / {max(times[k]):.1f}" for k in keys if times.get(k))
            + " |"
        )
    return "\n".join(lines) + "\n"


def bound_check(r: dict[str, Any], form: str = "pre") -> tuple[str, float, float] | None:
    """(node, the bound qflow reported + half an LSB + the output's band, the measured error) for a case with
    one error finding that carries a bound (`bound_lsb`, output LSB before rounding) at a node whose own
    requantized value is a program output (`output_of`, from the program alone), on a case that ran; else
    None. The measured error above it is a soundness bug of the bound (issue #27)."""
    errors = [f for f in (r.get("qflow", {}).get(form) or {}).get("findings", []) if f.get("severity") == "error"]
    if len(errors) != 1 or errors[0].get("bound_lsb") is None or r.get("outcome") not in ("exact", "miscompile"):
        return None
    k = (r.get("output_of") or {}).get(errors[0]["node"])
    outputs, grids = (r.get("err") or {}).get("outputs") or [], r.get("grids") or []
    if k is None or k >= len(outputs) or k >= len(grids):
        return None
    return errors[0]["node"], errors[0]["bound_lsb"] + 0.5 + band(grids[k])[0], outputs[k]["lsb"]


def bound_exceeded(r: dict[str, Any], form: str = "pre") -> bool:
    c = bound_check(r, form)
    return c is not None and c[2] > c[1] + EPS


def reach_check(r: dict[str, Any], form: str = "pre") -> tuple[float, float] | None:
    """(qflow's bound on how far all the violations together move the outputs — `output_lsb`, output LSB
    before rounding — plus half an LSB, the largest measured error of an output less its band) for a case
    that ran and has such a bound; else None. The measured error above it is a soundness bug of
    `qflow.impact`, which also proves programs whose violations it finds masked (issue #27)."""
    found = [f["output_lsb"] for f in (r.get("qflow", {}).get(form) or {}).get("findings", []) if "output_lsb" in f]
    outputs, grids = (r.get("err") or {}).get("outputs") or [], r.get("grids") or []
    if not found or r.get("outcome") not in ("exact", "miscompile") or not outputs or len(outputs) != len(grids):
        return None
    return max(found) + 0.5, max(o["lsb"] - band(g)[0] for o, g in zip(outputs, grids, strict=True))


def reach_exceeded(r: dict[str, Any], form: str = "pre") -> bool:
    c = reach_check(r, form)
    return c is not None and c[1] > c[0] + EPS


def failures(recs: list[dict[str, Any]], max_false_alarm_pct: float) -> list[str]:
    """What breaks the campaign's promise (issue #31's rules), one line each."""
    out = []
    for r in recs:
        for form in ("pre", "annotated"):
            if form in r.get("qflow", {}) and is_miss(r, form):
                j = judge(r)
                out.append(
                    f"soundness miss ({form}): {r['id']} ({verdict(r, form)}, {j.get('lsb', 0):.1f} LSB > band "
                    f"{j.get('band', CAP_LSB):g}{', was ' + r['outcome'] if r.get('outcome') != 'miscompile' else ''})"
                )
        if bound_exceeded(r):
            node, allowed, lsb = bound_check(r)  # type: ignore[misc]
            out.append(f"bound exceeded (pre): {r['id']} at {node}: measured {lsb:.1f} LSB > bound {allowed:.1f}")
        if reach_exceeded(r):
            allowed, lsb = reach_check(r)  # type: ignore[misc]
            out.append(f"output bound exceeded (pre): {r['id']}: {lsb:.1f} LSB beyond the band > {allowed:.1f}")
        stage = crash_stage(r)
        if stage:
            out.append(f"crash in {stage}: {r['id']}: {r.get('error') or (r.get('repair') or {}).get('error')}")
        why = repair_problem(r)
        if why:
            out.append(f"repair not never-worse: {r['id']}: {why}")
    for form in ("pre", "annotated"):
        exact = [r for r in recs if truth(r) == "exact" and form in r.get("qflow", {})]
        alarms = [r["id"] for r in exact if is_false_alarm(r, form)]
        if exact and 100 * len(alarms) / len(exact) > max_false_alarm_pct:
            out.append(
                f"false alarms ({form}) {len(alarms)} of {len(exact)} exact cases > {max_false_alarm_pct:g} %: {alarms}"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="*", type=Path, default=[HERE / "results.jsonl"])
    ap.add_argument("--output", "-o", type=Path)
    ap.add_argument("--check", action="store_true", help="exit 1 on a miss, a crash or too many false alarms")
    ap.add_argument("--max-false-alarms", type=float, default=1.0, help="percent of exact cases (with --check)")
    ap.add_argument(
        "--regen",
        action="store_true",
        help="regenerate benchmarks/soundness/summary.md from results.jsonl at a clean tree, naming the commit",
    )
    ap.add_argument("--allow-dirty", action="store_true", help="with --regen: score a dirty tree (marked -dirty)")
    a = ap.parse_args(argv)
    command = None
    if a.regen:
        if scored_at().endswith("-dirty") and not a.allow_dirty:
            print(
                "refusing: the tree has uncommitted changes (commit them, or --allow-dirty to mark it)", file=sys.stderr
            )
            return 2
        a.output = a.output or HERE / "summary.md"
        command = "python benchmarks/soundness/summary.py --regen"
    recs = load(a.results)
    text = render(recs, command)
    if a.output:
        a.output.write_text(text)
    else:
        print(text, end="")
    if a.check:
        bad = failures(recs, a.max_false_alarms)
        for line in bad:
            print(f"FAIL {line}", file=sys.stderr)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
