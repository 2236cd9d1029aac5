"""Measure every shipped target's contract on the real backends and write the table.

    python benchmarks/contracts.py                         # all targets, all cases → benchmarks/contracts.md
    python benchmarks/contracts.py --targets arm-tosa      # one target (merged into the existing JSON)
    python benchmarks/contracts.py --cases neg,relu        # a few cases
    python benchmarks/contracts.py --render                # only rewrite the Markdown from the JSON

Each single-op program (tests/contracts/probe.py) is quantized with the
target's stock quantizer, its output domain moved away from its input's
(``zp``: zero point shifted; ``scale``: scale ×1.37) or left as the stock
annotation gave it, lowered with the real partitioner and run (TOSA reference
model / ExecuTorch runtime with XNNPACK). Outcomes are measured against the
fake-quantized model in output LSBs. Raw rows go to benchmarks/contracts.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "contracts"))

import probe  # noqa: E402

JSON = ROOT / "benchmarks" / "contracts.json"
MD = ROOT / "benchmarks" / "contracts.md"
TARGETS = ("arm-tosa", "arm-tosa+int16", "xnnpack")


def backend(name: str) -> probe.Backend:
    if name == "arm-tosa":
        return probe.ArmBackend()
    if name == "arm-tosa+int16":
        return probe.ArmBackend("TOSA-1.0+INT+int16", int16=True)
    if name == "xnnpack":
        return probe.XnnpackBackend()
    raise SystemExit(f"unknown target {name}")


def versions() -> dict[str, str]:
    out = {}
    for pkg in ("torch", "executorch", "torchao", "tosa-tools"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "-"
    return out


def cell(m: dict) -> str:
    outcome = m["outcome"]
    short = {
        "exact": "exact",
        "miscompile": "MISCOMPILE",
        "refused at lowering": "refused (lowering)",
        "refused at load": "refused (load)",
        "left on CPU": "CPU",
        "not quantized": "float",
    }.get(outcome, outcome)
    if m.get("lsb") is not None and outcome in ("exact", "miscompile"):
        short += f" {m['lsb']:g}"
    if m.get("quantizer") == "custom":
        short += "†"
    if m.get("form") == "after add":
        short += "*"
    return short


def predicted(rule: str | None) -> str:
    return rule or "-"


def render(data: dict) -> str:
    from qflow import targets
    from qflow.ops import OpClass, classify

    rows = data["rows"]
    lines = [
        "# Contract probe: how each backend lowers a domain change across one op",
        "",
        f"Measured {data['date']} by `python benchmarks/contracts.py` on "
        + ", ".join(f"{k} {v}" for k, v in data["versions"].items())
        + ".",
        "",
        "Each single-op program is quantized with the target's stock quantizer; then the op's output",
        "domain is moved away from its input's in the converted Q/DQ graph (`zp`: output zero point",
        f"shifted by {probe.ZP_SHIFT}, scale kept; `scale`: output scale ×{probe.SCALE_FACTOR}, zero point kept) or",
        "left as the stock annotation gave it (`stock`). Each program is lowered with the real partitioner",
        "and run (arm-tosa: `TOSAPartitioner` + TOSA reference model; xnnpack: `XnnpackPartitioner` +",
        "`to_executorch` + the ExecuTorch runtime); the number is the largest difference from the",
        "fake-quantized model over 3 inputs, in output LSBs. *exact* = within 1 LSB.",
        "",
        "`*` measured after a carrier `add` (`op(x + c)`): the partitioner does not delegate the op alone.",
        "`†` the stock quantizer leaves the op in float; it was annotated int8 by the probe (input act qspec,",
        "output shared for pass-through ops / own observer otherwise), as a custom annotation would.",
        "`CPU`: the op stays outside the delegate. `float`: no quantize on the op's output to move.",
        "",
        "Reading: RESCALE = zp and scale exact; ZP_ONLY = zp exact, scale miscompiles; CODE_COPY = neither.",
        "",
    ]
    tnames = [t for t in TARGETS if any(r["target"] == t for r in rows)]
    header = "| case | op | " + " | ".join(f"{t} stock | {t} zp | {t} scale | {t} rule" for t in tnames) + " |"
    lines += [header, "|" + "---|" * (2 + 4 * len(tnames))]
    cases = list(dict.fromkeys(r["case"] for r in rows))
    for c in cases:
        op = next(r["op"] for r in rows if r["case"] == c)
        cells = [c, f"`{op}`"]
        for t in tnames:
            by = {r["variant"]: r for r in rows if r["case"] == c and r["target"] == t}
            for v in probe.VARIANTS:
                cells.append(cell(by[v]) if v in by else "")
            contract = targets.get(t.split("+")[0])
            rule = contract.rule(op)
            if rule is None:
                cls = classify(op)
                default = "RESCALE" if cls is OpClass.COMPUTE else "CODE_COPY" if cls is OpClass.PASSTHROUGH else cls.value
                cells.append(f"({default})")
            else:
                cells.append(rule.name)
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Rule column: the target's `op_rules` entry; in parentheses the PT2E default from `qflow.ops`.", ""]
    details = [r for r in rows if r["detail"] and r["outcome"] not in ("exact", "miscompile")]
    if details:
        lines += ["## Refusals and CPU placements", ""]
        for r in details:
            lines.append(f"- {r['target']} `{r['case']}` {r['variant']}: {r['outcome']} — {r['detail'][:300]}")
        lines.append("")
    for extra in data.get("extras", []):
        lines.append(extra)
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--cases", default="")
    ap.add_argument("--render", action="store_true")
    args = ap.parse_args()
    data = json.loads(JSON.read_text()) if JSON.exists() else {"rows": []}
    if not args.render:
        wanted = [c for c in probe.CASES if not args.cases or c.name in args.cases.split(",")]
        for t in args.targets.split(","):
            be = backend(t)
            variants = ("stock", "scale") if t.endswith("int16") else probe.VARIANTS
            for case in wanted:
                t0 = time.time()
                ms = probe.measure_case(be, case, variants)
                data["rows"] = [
                    r for r in data["rows"] if not (r["target"] == t and r["case"] == case.name)
                ] + [m.row() for m in ms]
                print(f"{t:16} {case.name:22} " + "  ".join(cell(m.row()) for m in ms) + f"  ({time.time() - t0:.0f}s)")
                sys.stdout.flush()
                data["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
                data["versions"] = versions()
                JSON.write_text(json.dumps(data, indent=1))
    MD.write_text(render(data))


if __name__ == "__main__":
    main()
