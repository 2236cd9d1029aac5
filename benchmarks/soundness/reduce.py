"""Shrink a failing case to a minimal model while its verdict mismatch persists.

    python benchmarks/soundness/reduce.py 00012-arm-custom [--kind miss|false-alarm|auto]

The mismatch is re-checked on the real pipeline after every step (quantize,
qflow before partitioning, lower, run on the backend): a *miss* is a
miscompile without an error verdict, a *false alarm* an exact run with one.
Steps, tried greedily until none applies: drop an op (its users read its
first argument instead), drop an output, merge the second input into the
first, drop dead ops. `--kind repair-crash` shrinks a case whose
`qflow.repair` crashes instead. The result goes to `reduced/<id>.json` (the spec, the
final record, a readable description); `run.py --spec reduced/<id>.json`
re-runs it.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent.parent)]

import case  # noqa: E402
import summary  # noqa: E402
from gen import SpecModel, describe, generate  # noqa: E402

Spec = dict[str, Any]


def mismatch(rec: dict[str, Any], form: str = "pre") -> str | None:
    """'miss', 'false-alarm', 'repair-crash' or None for a case record (verdict of qflow's `form`)."""
    v = rec.get("qflow", {}).get(form, {}).get("verdict")
    if (rec.get("repair") or {}).get("status") == "crash":
        return "repair-crash"
    t = summary.truth(rec)  # (the campaign's one scoring rule: per output, the capped band)
    if t == "miscompile" and v != "error":
        return "miss"
    if t == "exact" and v == "error":
        return "false-alarm"
    return None


def _remap(spec: Spec, gone: int, to: int) -> Spec | None:
    """Remove value `gone` (an op's value), its readers read `to`; ids above shift down."""
    n_in = len(spec["inputs"])

    def m(v: int) -> int:
        v = to if v == gone else v
        return v - 1 if v > gone else v

    ops = [dict(op, args=[m(a) for a in op["args"]]) for j, op in enumerate(spec["ops"]) if n_in + j != gone]
    outs = list(dict.fromkeys(m(o) for o in spec["outputs"]))
    if any(o < n_in for o in outs):
        return None
    return dict(spec, ops=ops, outputs=outs)


def dce(spec: Spec) -> Spec:
    """Drop ops no output depends on."""
    n_in = len(spec["inputs"])
    live, stack = set(), list(spec["outputs"])
    while stack:
        v = stack.pop()
        if v in live:
            continue
        live.add(v)
        if v >= n_in:
            stack.extend(spec["ops"][v - n_in]["args"])
    for v in sorted((n_in + j for j in range(len(spec["ops"])) if n_in + j not in live), reverse=True):
        spec = _remap(spec, v, v) or spec
    return spec


def valid(spec: Spec) -> bool:
    try:
        SpecModel(spec)
        return bool(spec["ops"])
    except Exception:  # noqa: BLE001
        return False


def candidates(spec: Spec) -> list[Spec]:
    n_in = len(spec["inputs"])
    out: list[Spec] = []
    for j in reversed(range(len(spec["ops"]))):
        op = spec["ops"][j]
        for a in dict.fromkeys(op["args"]):
            s = _remap(spec, n_in + j, a)
            if s is not None:
                out.append(dce(s))
    if len(spec["outputs"]) > 1:
        for o in spec["outputs"]:
            out.append(dce(dict(spec, outputs=[x for x in spec["outputs"] if x != o])))
    used = {a for op in spec["ops"] for a in op["args"]}
    for k in range(n_in if n_in > 1 else 0):
        if k not in used:  # an unused input: drop it
            ops = [dict(op, args=[a - (a > k) for a in op["args"]]) for op in spec["ops"]]
            inputs = [i for j, i in enumerate(spec["inputs"]) if j != k]
            out.append(dict(spec, inputs=inputs, ops=ops, outputs=[o - (o > k) for o in spec["outputs"]]))
    if n_in == 2 and spec["inputs"][0]["shape"] == spec["inputs"][1]["shape"]:
        s = _remap(dict(spec, ops=spec["ops"]), 1, 0)
        if s is not None:
            s = dict(s, inputs=spec["inputs"][:1])
            out.append(dce(s))
    return [s for s in out if valid(s)]


def reduce(
    cid: str, spec: Spec | None = None, kind: str = "auto", log: Any = print, form: str = "pre"
) -> tuple[Spec, dict[str, Any]]:
    spec = dce(copy.deepcopy(spec if spec is not None else generate(case.parse_id(cid)[0])))
    repair = kind == "repair-crash"
    rec = case.run_case(cid, spec=spec, repair=repair)
    found = mismatch(rec, form)
    if found is None or (kind != "auto" and found != kind):
        raise SystemExit(f"{cid}: no {kind} to reduce (truth {summary.truth(rec)}, verdict {rec.get('verdict')})")
    log(f"{cid}: {found}, {len(spec['ops'])} ops")
    progress = True
    while progress:
        progress = False
        for cand in candidates(spec):
            r = case.run_case(cid, spec=cand, repair=repair)
            if mismatch(r, form) == found:
                spec, rec, progress = cand, r, True
                log(
                    f"  -> {len(spec['ops'])} ops, {len(spec['inputs'])} inputs "
                    f"({r.get('outcome')}, {r.get('verdict')})"
                )
                break
    return spec, rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("id")
    ap.add_argument("--kind", choices=["auto", "miss", "false-alarm", "repair-crash"], default="auto")
    ap.add_argument("--out-dir", type=Path, default=HERE / "reduced")
    ap.add_argument("--form", default="pre", help="whose verdict: pre (default), annotated, folded, lowered")
    ap.add_argument("--spec", type=Path, help="start from this spec file (e.g. an earlier reduction)")
    a = ap.parse_args(argv)
    start = json.loads(a.spec.read_text()).get("spec") if a.spec else None
    spec, rec = reduce(a.id, spec=start, kind=a.kind, form=a.form)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    path = a.out_dir / (f"{a.id}.json" if a.form == "pre" else f"{a.id}.{a.form}.json")
    doc = {
        "id": a.id,
        "form": a.form,
        "kind": mismatch(rec, a.form),
        "description": describe(spec),
        "spec": spec,
        "record": rec,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(describe(spec))
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
