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
* soundness miss: an error beyond the exact band without an error verdict —
  a miscompile or a marginal case alike (`proved` is the worst kind,
  `unproven` is honest but flags nothing). False alarm: an exact case with an
  error verdict.
* the exact band is re-judged here, never widened by the program under test:
  case.py's band (1 output LSB + one step of the coarsest grid upstream, or the
  rounding budget) is capped at `CAP_LSB` output LSB. Beyond a few output codes
  an output is wrong whatever grids lie upstream (case 00870's output 1 had a
  1614-LSB band, wider than int8 itself: a constant at qmax passed for exact).
* repair is judged against the model the user quantized: the repaired
  program's error against the original fake-quantized model must be no larger
  than the unrepaired program's and inside the capped exact band.
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
TRUTHS += ["timeout", "crash"]
VERDICTS = ["error", "warning", "unproven", "proved", "crash", "none"]
ORDER = ["crash", "error", "warning", "unproven", "proved"]


#: The widest exact band any output gets, in its own LSB (see the module docstring).
CAP_LSB = 4.0
#: What a repair may add to the unrepaired program's error against the original model.
REPAIR_ROUNDING_LSB = 1
#: Beyond the band but within this many steps of the coarsest grid: marginal (still a miss).
MARGINAL_STEPS = 4.0


def load(paths: list[Path]) -> list[dict[str, Any]]:
    """Every record the runner writes; one without an `id` (a checkpoint of a worker that
    died before it knew its case) is kept as a crash of its own, never dropped."""
    recs: dict[str, dict[str, Any]] = {}
    for p in paths:
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if line.strip():
                r = json.loads(line)
                if "CaseTimeout" in (r.get("error") or ""):  # a stage wrapped the case's time limit
                    r["outcome"] = "timeout"
                if "id" not in r:
                    r = {**r, "id": f"?{p.name}:{n}", "outcome": "crash"}
                    r.setdefault("error", f"a record without an id (stage {r.get('stage', '?')})")
                recs[r["id"]] = r  # the last run of an id wins
    return sorted(recs.values(), key=lambda r: r["id"])


def judge(err: dict[str, Any] | None) -> str | None:
    """exact / marginal / miscompile for one stored worst-output error, with the band capped
    at CAP_LSB output LSB; None when the record holds no numbers to judge."""
    if not err or "abs" not in err or not err.get("out_scale"):
        return None
    d, out = float(err["abs"]), float(err["out_scale"])
    coarse = float(err.get("coarsest") or out)
    band = d / err["ratio"] if err.get("ratio") else out + coarse  # case.py's band for this output
    band = min(band, CAP_LSB * out)
    if d <= band * (1 + 1e-6):
        return "exact"
    return "marginal" if d <= MARGINAL_STEPS * coarse else "miscompile"


def truth(r: dict[str, Any]) -> str:
    """The case's truth under the capped band (the runner's outcome where it ran nothing)."""
    if r.get("outcome") in ("exact", "marginal", "miscompile"):
        return judge(r.get("err")) or r["outcome"]
    return r.get("outcome", "crash")


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
    return "unproven" if ob.get("unproven", 0) else "proved"


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
    return truth(r) in ("miscompile", "marginal") and verdict(r, form) != "error"


def is_false_alarm(r: dict[str, Any], form: str = "pre") -> bool:
    return truth(r) == "exact" and verdict(r, form) == "error"


def repair_worse(r: dict[str, Any]) -> str | None:
    """Why the repair did not keep the meaning of the model the user quantized, or None."""
    rr = r.get("repair") or {}
    if rr.get("status") != "repaired":
        return None
    orig = rr.get("err_vs_original_fq")
    if not orig or "lsb" not in orig:
        return "no error against the original model recorded"
    before = (r.get("err") or {}).get("lsb", 0.0) or 0.0
    # errors are whole output codes up to float noise in the scales; one more code is the
    # rounding of a requant the repair inserts (the record does not count them: allow one)
    if round(orig["lsb"]) > round(before) + REPAIR_ROUNDING_LSB:
        return f"{orig['lsb']:.1f} LSB from the original model, the unrepaired program was {before:.1f}"
    if judge(orig) != "exact":
        return f"{orig['lsb']:.1f} LSB from the original model: beyond its exact band (≤ {CAP_LSB:g} LSB)"
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
        return ", ".join(vs)
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE).stdout
        vs.append(f"qflow {rev.strip()} (the checkout; the records do not say)")
    except OSError:
        pass
    return ", ".join(vs)


def render(recs: list[dict[str, Any]]) -> str:  # noqa: C901
    today = datetime.date.today().isoformat()
    variants = Counter(r.get("variant") or (r["id"].split("-", 1) + ["?"])[1] for r in recs)
    dirty = sum(str(r.get("qflow_rev", "")).endswith("-dirty") for r in recs)
    lines = [
        f"{len(recs)} cases, {today}; {_versions(recs)}.",
        *(
            [f"**{dirty} cases ran on uncommitted code** (`-dirty`): their results name no commit to reproduce."]
            if dirty
            else []
        ),
        f"Scored by `python benchmarks/soundness/summary.py` (exact band capped at {CAP_LSB:g} output LSB; "
        "a marginal case is a miss when not flagged; repair judged against the original model).",
        "Variants: " + ", ".join(f"{v} {n}" for v, n in sorted(variants.items())) + ".",
        "",
        "**Truth × qflow before partitioning** (`qflow.analyze` of the converted Q/DQ program):",
        "",
        *confusion(recs, "pre"),
        "",
    ]
    miss = [r for r in recs if is_miss(r)]
    fa = [r for r in recs if is_false_alarm(r)]
    ran = [r for r in recs if truth(r) in ("exact", "marginal", "miscompile")]
    exact = [r for r in recs if truth(r) == "exact"]
    lines += [
        f"Soundness misses (beyond the exact band, no error verdict): **{len(miss)}** "
        f"({sum(truth(r) == 'marginal' for r in miss)} marginal; {sum(verdict(r) == 'proved' for r in miss)} said "
        f"*proved*) of {sum(truth(r) in ('miscompile', 'marginal') for r in recs)} wrong programs; "
        f"false alarms (exact, error verdict): **{len(fa)}** of {len(exact)} exact cases"
        + (f" ({100 * len(fa) / len(exact):.1f} %)" if exact else "")
        + f"; {len(ran)} cases ran on the backend (exact band capped at {CAP_LSB:g} output LSB).",
        "",
    ]
    worse = [(r["id"], w) for r in recs if (w := repair_worse(r))]
    repaired = sum((r.get("repair") or {}).get("status") == "repaired" for r in recs)
    lines += [
        f"Repairs judged against the original model: {repaired} repaired, **{len(worse)}** did not keep its meaning"
        + ("" if not worse else ": " + "; ".join(f"`{i}` {w}" for i, w in worse[:20])),
        "",
    ]
    for form in ("annotated", "folded", "lowered"):
        sub = [r for r in recs if form in r.get("qflow", {})]
        if sub:
            m = sum(is_miss(r, form) for r in sub)
            f = sum(is_false_alarm(r, form) for r in sub)
            n = sum(truth(r) == "exact" for r in sub)
            lines += [f"{form}: {m} misses, {f} false alarms of {n} exact cases ({len(sub)} cases).", ""]
    for form, title in (
        ("annotated", "annotated graph"),
        ("folded", "folded partitions (Arm)"),
        ("lowered", "lowered program"),
    ):
        sub = [r for r in recs if form in r.get("qflow", {})]
        if sub:
            lines += [f"Truth × qflow on the {title} ({len(sub)} cases):", "", *confusion(sub, form), ""]
    if miss:
        lines += ["### Soundness misses", "", "| id | verdict | error | findings | ops |", "|---|---|---|---|---|"]
        lines += [
            f"| `{r['id']}` | {verdict(r)} | {_err(r)} | {findings(r)} | {' '.join(r.get('ops', []))} |" for r in miss
        ]
        lines.append("")
    if fa:
        lines += ["### False alarms", "", "| id | error | findings | ops |", "|---|---|---|---|"]
        lines += [f"| `{r['id']}` | {_err(r)} | {findings(r)} | {' '.join(r.get('ops', []))} |" for r in fa]
        lines.append("")
    marg = [r for r in recs if truth(r) == "marginal"]
    if marg:
        lines += ["### Marginal (beyond the band, within 4 coarse steps: a miss when not flagged)", ""]
        lines += [f"- `{r['id']}`: {_err(r)}, verdict {verdict(r)} {findings(r)}" for r in marg]
        lines.append("")
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
        rows = []
        for r in rep:
            rr = r["repair"]
            if rr.get("status") != "repaired":
                continue
            e1 = (rr.get("err_vs_repaired_fq") or {}).get("lsb")
            e2 = (rr.get("err_vs_original_fq") or {}).get("lsb")
            rows.append(
                f"| `{r['id']}` | {r.get('outcome')} ({_err(r)}) | {rr.get('outcome')} | "
                + (f"{e1:.1f}" if e1 is not None else "—")
                + " | "
                + (f"{e2:.1f}" if e2 is not None else "—")
                + " |"
            )
        if rows:
            lines += [
                "| id | before repair | after repair | LSB vs repaired fake-quant | LSB vs original fake-quant |",
                "|---|---|---|---|---|",
                *rows,
                "",
            ]
        bad = [r for r in rep if r["repair"]["status"] != "repaired"]
        if bad:
            lines += [
                f"- `{r['id']}` ({r.get('outcome')}): {r['repair']['status']}: {r['repair'].get('error')}" for r in bad
            ]
            lines.append("")
    crashes = [
        (r["id"], form, q.get("error"))
        for r in recs
        for form, q in r.get("qflow", {}).items()
        if isinstance(q, dict) and q.get("verdict") == "crash"
    ]
    crashes += [(r["id"], "case", r.get("error")) for r in recs if r.get("outcome") in ("crash", "timeout")]
    if crashes:
        lines += ["### qflow crashes and case crashes", ""]
        lines += [f"- `{cid}` {form}: {err}" for cid, form, err in crashes]
        lines.append("")
    times: dict[str, list[float]] = defaultdict(list)
    for r in recs:
        for k, v in (r.get("time") or {}).items():
            times[k].append(v)
    if times:
        keys = [
            k for k in ("quantize", "qflow_annotated", "qflow_pre", "lower", "run", "qflow_folded", "qflow_lowered")
        ]
        keys += ["repair", "total"]
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


def failures(recs: list[dict[str, Any]], max_false_alarm_pct: float) -> list[str]:
    """What breaks the campaign's promise (issue #14's acceptance), one line each."""
    out = [f"soundness miss: {r['id']} ({truth(r)}, {verdict(r)}, {_err(r)})" for r in recs if is_miss(r)]
    out += [
        f"qflow crash: {r['id']} {form}: {q.get('error')}"
        for r in recs
        for form, q in r.get("qflow", {}).items()
        if isinstance(q, dict) and q.get("verdict") == "crash"
    ]
    out += [
        f"case {r['outcome']}: {r['id']}: {r.get('error')}" for r in recs if r.get("outcome") in ("crash", "timeout")
    ]
    for r in recs:
        rr = r.get("repair") or {}
        if rr.get("status") == "crash":
            out.append(f"repair crash: {r['id']}: {rr.get('error')}")
        worse = repair_worse(r)
        if worse:
            out.append(f"repair did not keep the model's meaning: {r['id']}: {worse}")
    exact = [r for r in recs if truth(r) == "exact"]
    alarms = [r["id"] for r in exact if is_false_alarm(r)]
    if exact and 100 * len(alarms) / len(exact) > max_false_alarm_pct:
        out.append(f"false alarms {len(alarms)} of {len(exact)} exact cases > {max_false_alarm_pct:g} %: {alarms}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="*", type=Path, default=[HERE / "results.jsonl"])
    ap.add_argument("--output", "-o", type=Path)
    ap.add_argument(
        "--check",
        action="store_true",
        help="exit 1 on a miss, a crash, a repair worse than the original, or too many false alarms",
    )
    ap.add_argument("--max-false-alarms", type=float, default=1.0, help="percent of exact cases (with --check)")
    a = ap.parse_args(argv)
    recs = load(a.results)
    text = render(recs)
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
