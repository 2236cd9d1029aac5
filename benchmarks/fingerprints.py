"""Verdict fingerprints: what qflow says about a fixed set of real programs, in every form, as
one digest per (program, form, target) — so that a change meant to keep behaviour (a refactor)
can be shown to keep it.

    python benchmarks/fingerprints.py -o /tmp/after.json            # at the change
    git worktree add /tmp/before <commit> && (cd /tmp/before && PYTHONPATH=$PWD python \\
        $OLDPWD/benchmarks/fingerprints.py -o /tmp/before.json)      # at the commit before it
    python benchmarks/fingerprints.py --compare /tmp/before.json /tmp/after.json

The programs: every bundled example (`qflow.examples.models`), quantized for Arm TOSA, in each
form qflow reads (Q/DQ for the generic, arm-tosa and xnnpack targets; the folded program; each
partition after the fold pass; the lowered program, with and without its reference; its .pte),
the same models quantized with the stock XNNPACK quantizer and lowered to XNNPACK (lowered and
.pte), and the repair plan of each Q/DQ program. A digest covers the status, the obligation counts,
every finding (kind, node, severity, status, bound) and every planned requant; the message texts
are left out (a reworded message is no change of verdict).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import qflow


def _digest(report: Any) -> dict[str, Any]:
    findings = sorted(
        (f.kind, f.node, f.severity, f.status, None if f.bound_lsb is None else round(f.bound_lsb, 6))
        for f in report.findings
    )
    body = {"status": report.status, "obligations": dict(report.obligations), "findings": findings}
    text = json.dumps(body, sort_keys=True, default=str)
    return {
        "status": report.status,
        "obligations": dict(report.obligations),
        "sha": hashlib.sha1(text.encode()).hexdigest()[:12],
    }


def _plan_digest(plan: Any) -> dict[str, Any]:
    requants = sorted(f"{rq.edge[0]}->{rq.edge[1]}:{rq.source}->{rq.target}" for rq in plan.requants)
    text = json.dumps([requants, sorted(map(str, plan.reclaims.items()))], default=str)
    return {"requants": len(requants), "sha": hashlib.sha1(text.encode()).hexdigest()[:12]}


def _guard(out: dict[str, Any], key: str, fn: Any) -> None:
    try:
        out[key] = fn()
    except Exception as e:  # a raise is a verdict too
        out[key] = {"raised": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}


def fingerprints() -> dict[str, Any]:
    from qflow.examples import models

    out: dict[str, Any] = {}
    for name in models.names():
        _example(name, models.build(name), out)
    return out


def _example(name: str, b: Any, out: dict[str, Any]) -> None:
    from qflow.targets.xnnpack import pipeline as xp

    for target in ("generic", "arm-tosa", "xnnpack"):
        _guard(out, f"{name}/qdq/{target}", lambda t=target: _digest(qflow.analyze(b.exported, target=t)))
    _guard(out, f"{name}/plan", lambda: _plan_digest(qflow.plan(b.exported, target="arm-tosa")))
    _guard(out, f"{name}/folded", lambda: _digest(qflow.analyze(b.folded, target="arm-tosa")))
    for i, part in enumerate(b.partitions):
        _guard(out, f"{name}/partition{i}", lambda p=part: _digest(qflow.analyze(p, target="arm-tosa")))
    _guard(out, f"{name}/lowered", lambda: _digest(qflow.analyze(b.lowered)))
    _guard(
        out, f"{name}/lowered+ref", lambda: _digest(qflow.analyze(b.lowered, target="arm-tosa", reference=b.exported))
    )
    buf = copy.deepcopy(b.lowered).to_executorch().buffer
    _guard(out, f"{name}/pte", lambda: _digest(qflow.analyze(buf)))
    _guard(out, f"{name}/pte+ref", lambda: _digest(qflow.analyze(buf, reference=b.exported)))
    try:
        lowered = xp.lower(xp.quantize(copy.deepcopy(b.model), b.inputs), b.inputs)
    except Exception as e:  # (the stock XNNPACK flow refuses some examples: recorded as such)
        out[f"{name}/xnn"] = {"raised": type(e).__name__}
        return
    _guard(out, f"{name}/xnn/lowered", lambda: _digest(qflow.analyze(lowered, target="xnnpack")))
    xbuf = xp.to_executorch(copy.deepcopy(lowered)).buffer
    _guard(out, f"{name}/xnn/pte", lambda: _digest(qflow.analyze(xbuf)))


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The keys whose fingerprint differs (or is only on one side)."""
    return [k for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", type=Path, help="write the fingerprints (JSON) here")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    a = ap.parse_args(argv)
    if a.compare:
        before, after = (json.loads(p.read_text()) for p in a.compare)
        diff = compare(before, after)
        for k in diff:
            print(f"{k}: {before.get(k)} -> {after.get(k)}")
        print(f"{len(set(before) | set(after))} fingerprints, {len(diff)} differ")
        return 1 if diff else 0
    fp = fingerprints()
    text = json.dumps(fp, indent=1, sort_keys=True)
    if a.output:
        a.output.write_text(text)
    else:
        print(text)
    print(f"{len(fp)} fingerprints", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
