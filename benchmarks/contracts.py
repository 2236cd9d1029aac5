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
TARGETS = ("arm-tosa", "arm-tosa+int16", "xnnpack", "cortex-m")


def backend(name: str) -> probe.Backend:
    if name == "arm-tosa":
        return probe.ArmBackend()
    if name == "arm-tosa+int16":
        return probe.ArmBackend("TOSA-1.0+INT+int16", int16=True)
    if name == "xnnpack":
        return probe.XnnpackBackend()
    if name == "cortex-m":
        return probe.CortexMBackend()
    raise SystemExit(f"unknown target {name}")


def versions() -> dict[str, str]:
    out = {}
    for pkg in ("torch", "executorch", "torchao", "tosa-tools"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "-"
    return out


#: When the rows from before rows carried their own time were measured (the last full run).
FULL_RUN = "2026-11-23 16:14 UTC"


def _dates(rows: list[dict]) -> str:
    dates = sorted({r.get("measured", FULL_RUN) for r in rows})
    return dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"


def cell(m: dict) -> str:
    outcome = m["outcome"]  # as measured: never relabelled here (probe.classify applied its tolerance)
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
    if m.get("form") == "batch":
        short += "‡"
    return short


WRONG = ("MISCOMPILE", "refused")


def measured_rule(by: dict[str, dict]) -> str:
    """The rule the measurement shows: CPU_FLOAT, RESCALE, ZP_ONLY, CODE_COPY (or ? when none fits)."""
    zp, scale = (cell(by[v]) if v in by else "" for v in ("zp", "scale"))
    if "zp" not in by:  # int16: only the scale moves
        if scale.startswith("refused") and cell(by.get("stock", by["scale"])).startswith("refused"):
            return "REFUSED"  # (the op itself is refused: no rule to read off)
        return "RESCALE" if scale.startswith("exact") else "ZP_ONLY/CODE_COPY" if scale.startswith(WRONG) else "?"
    if "scale" not in by:
        return "(scale pending)"
    if zp.startswith("CPU") and scale.startswith("CPU"):
        return "CPU_FLOAT"
    if zp.startswith("exact") and scale.startswith("exact"):
        return "RESCALE"
    if zp.startswith("exact") and scale.startswith(WRONG):
        return "ZP_ONLY"
    if zp.startswith(WRONG) and scale.startswith(WRONG):
        return "CODE_COPY"
    return "?"


def render(data: dict) -> str:
    from qflow import targets
    from qflow.ops import OpClass, classify

    rows = data["rows"]
    lines = [
        "# Contract probe: how each backend lowers a domain change across one op",
        "",
        f"Measured {_dates(rows)} by `python benchmarks/contracts.py` (each row's time is in contracts.json) on "
        + ", ".join(f"{k} {v}" for k, v in data["versions"].items())
        + ".",
        "",
        "Each single-op program is quantized with the target's stock quantizer; then the op's output",
        "domain is moved away from its input's in the converted Q/DQ graph (`zp`: output zero point",
        f"shifted by {probe.ZP_SHIFT}, scale kept; `scale`: output scale ×{probe.SCALE_FACTOR}, zero point kept) or",
        "left as the stock annotation gave it (`stock`). Each program is lowered with the real partitioner",
        "and run (arm-tosa: `TOSAPartitioner` + TOSA reference model; xnnpack: `XnnpackPartitioner` +",
        "`to_executorch` + the ExecuTorch runtime; cortex-m: `CortexMQuantizer`, `to_edge` +",
        "`CortexMPassManager` for an M55, run on the Cortex-M dialect's reference kernels); the number is the",
        "largest difference from the",
        "fake-quantized model over 3 inputs, in output LSBs. *exact* = within 1 LSB.",
        "",
        "`*` measured after a carrier `add` (`op(x + c)`): the partitioner does not delegate the op alone.",
        "`†` the stock quantizer leaves the op in float; it was annotated int8 by the probe (input act qspec,",
        "output shared for pass-through ops / own observer otherwise), as a custom annotation would.",
        "`‡` measured in a batched program (every case an independent branch, one lowering per variant;",
        "XNNPACK one per 17 cases), as `tests/contracts/checks.py` does; unmarked cells are one program per case.",
        "`CPU`: the op stays outside the delegate (cortex-m: an aten op on the portable kernels; a CPU op that",
        "computes on codes and misses is a MISCOMPILE). `float`: no quantize on the op's output to move.",
        "",
        "Reading: RESCALE = zp and scale exact; ZP_ONLY = zp exact, scale miscompiles; CODE_COPY = neither;",
        "REFUSED = the backend refuses the op itself (int16 column: stock and scale refused at lowering).",
        "",
    ]
    tnames = [t for t in TARGETS if any(r["target"] == t for r in rows)]
    header = "| case | op | " + " | ".join(f"{t} stock | zp | scale | measured | rule" for t in tnames) + " |"
    lines += [header, "|" + "---|" * (2 + 5 * len(tnames))]
    order = [c.name for c in (*probe.CASES, *probe.FUSION_CASES)]
    fusion = {c.name for c in probe.FUSION_CASES}
    cases = sorted(
        (c for c in dict.fromkeys(r["case"] for r in rows) if c not in fusion),
        key=lambda c: order.index(c) if c in order else len(order),
    )
    for c in cases:
        op = next(r["op"] for r in rows if r["case"] == c)
        cells = [c, f"`{op}`"]
        for t in tnames:
            by = {r["variant"]: r for r in rows if r["case"] == c and r["target"] == t}
            for v in probe.VARIANTS:
                cells.append(cell(by[v]) if v in by else "")
            got = measured_rule(by) if by else ""
            cells.append(f"**{got}**" if by else "")
            contract = targets.get(t.split("+")[0])
            # (the rule of the op whose output was moved: the last of a decomposition)
            moved = next((r.get("moved") for r in by.values() if r.get("moved")), op)
            rule = contract.rule(moved)
            if rule is None:
                cls = classify(moved)
                default = (
                    "RESCALE" if cls is OpClass.COMPUTE else "CODE_COPY" if cls is OpClass.PASSTHROUGH else cls.value
                )
                shown = f"({default})"
            else:
                default, shown = rule.name, rule.name
            if moved != op:
                shown += f" `{moved}`"
            marked = contract.lowers_only_marked
            stock = by.get("stock") or {}
            meta = stock.get("custom_meta") or {}
            on_cpu = stock.get("outcome") == probe.CPU and "custom_meta" in stock
            if marked is not None and on_cpu and not (meta.get(marked[0]) or {}).get(marked[1], False):
                default, shown = "CPU_FLOAT", "unmarked: CPU float"  # (`lowers_only_marked`, not the op rule)
            if by and got not in (default, "ZP_ONLY/CODE_COPY", "(scale pending)") and "zp" in by:
                shown += " ≠"
            cells.append(shown)
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "*measured*: the rule the outcomes show. *rule*: the target's `op_rules` entry; in parentheses the",
        "PT2E default from `qflow.ops` (compute → RESCALE, pass-through/activation → CODE_COPY); ≠ marks a",
        "disagreement with the measurement. Where the quantizer annotates a decomposition of the op",
        "(Arm: layer_norm, group_norm, var, log_softmax, sdpa; torch.export ends a 4-d matmul with a view),",
        "the probe moves the output of the decomposition's last op, named after the rule.",
        "",
    ]
    frows = [r for r in rows if r["case"] in fusion]
    if frows:
        lines += [
            "## Activation fusion into a shared signed domain (stock quantizer)",
            "",
            "| target | program | cat domain (scale, zp) | outcome |",
            "|---|---|---|---|",
        ]
        for r in frows:
            q = r.get("out_qparams")
            lines.append(
                f"| {r['target']} | {r['case']} | {q[0]:.4g}, {q[1]} | {cell(r)} |"
                if q
                else f"| {r['target']} | {r['case']} | - | {cell(r)} |"
            )
        lines.append("")
    details = [r for r in rows if r["detail"] and r["outcome"] not in ("exact", "miscompile")]
    if details:
        lines += ["## Refusals and CPU placements", ""]
        for r in details:
            lines.append(f"- {r['target']} `{r['case']}` {r['variant']}: {r['outcome']} — {r['detail'][:300]}")
        lines.append("")
    lines += [
        "## Notes",
        "",
        "- arm-tosa `relu6`: the stock `TOSAQuantizer` does not mark a standalone relu6 quantized",
        "  (`_arm_annotation_info`), so the INT partitioner leaves it on the CPU in float — predicted by the",
        "  target's `lowers_only_marked`, not by its op rule; when marked it is a clamp like hardtanh (CODE_COPY).",
        "- arm-tosa+int16 (a16w8, zero point 0): only the scale moves; every op keeps its int8 behaviour.",
        "  Stock a16w8 transformer rows that compute wrong (issue #30): layer_norm, group_norm (0 or 2 LSB",
        "  depending on the batch's inputs), log_softmax, log and sdpa. They are not in",
        "  `Target.validated['int16']`, so qflow calls such a program unproven (`unvalidated-lowering`)",
        "  before partitioning; at int8 every transformer row computes right.",
        "- arm-tosa `rms_norm`: the stock quantizer annotates its output but does not mark it quantized, so",
        "  it stays on the CPU in float (`lowers_only_marked`).",
        "- xnnpack: the stock `XNNPACKQuantizer` quantizes only conv/linear/add/mul/cat/adaptive_avg_pool2d",
        "  here (shared-qspec ops only after a quantized producer); every other op is measured with the probe's",
        "  int8 annotation (†). A refusal names the XNNPACK node the runtime could not create.",
        "- cortex-m: the stock `where(x > 0, x, y)` and `x.masked_fill(y > 0.5, -1)` miscompile (122 / 109",
        "  LSB): the passes fold the dequantize into the comparison, which no kernel lowers, and the portable",
        "  kernel compares the codes with 0 / 0.5 (finding kind `real-constant-on-codes`). A hardswish no",
        "  kernel precedes is refused when the program runs (the portable kernel has no int8 hardswish).",
        "  Ops the stock `CortexMQuantizer` does not mark stay in float between a dequantize and a quantize.",
        "- xnnpack fusion: conv→relu→cat(·, signed) and linear→relu→cat(·, signed) rows: the relu shares the",
        "  cat's domain (zero point above qmin) and XNNPACK clamps in code space (`Fusion.CODE_CLAMP`).",
        "",
    ]
    return "\n".join(lines) + "\n"


def store(data: dict, target: str, cases: list[str], ms: list, variant: str | None = None, path: Path = JSON) -> None:
    """Replace the rows of these cases (and variant) with fresh measurements; save the JSON."""
    data["rows"] = [
        r
        for r in data["rows"]
        if not (r["target"] == target and r["case"] in cases and (variant is None or r["variant"] == variant))
    ] + [m.row() for m in ms]
    data["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    for r in data["rows"][len(data["rows"]) - len(ms) :]:
        r["measured"] = data["date"]  # (each row says when it was measured: runs may measure a few cases)
    data["versions"] = versions()
    path.write_text(json.dumps(data, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--cases", default="")
    ap.add_argument("--render", action="store_true")
    ap.add_argument(
        "--alone",
        action="store_true",
        help="one program per case and variant (slow); default: one batched program per variant, as the test does",
    )
    ap.add_argument("--json", type=Path, default=JSON, help="raw rows (merged when several runs write it)")
    ap.add_argument("--merge", type=Path, nargs="*", default=[], help="more JSON files to merge before rendering")
    args = ap.parse_args()
    data = json.loads(args.json.read_text()) if args.json.exists() else {"rows": []}
    if not args.render:
        wanted = [c for c in probe.CASES if not args.cases or c.name in args.cases.split(",")]
        for t in args.targets.split(","):
            be = backend(t)
            variants = ("stock", "scale") if t.endswith("int16") else probe.VARIANTS
            if args.alone:
                for case in wanted:
                    t0 = time.time()
                    ms = probe.measure_case(be, case, variants)
                    store(data, t, [case.name], ms, path=args.json)
                    print(
                        f"{t:16} {case.name:22} "
                        + "  ".join(cell(m.row()) for m in ms)
                        + f"  ({time.time() - t0:.0f}s)"
                    )
                    sys.stdout.flush()
                continue
            for v in variants:
                t0 = time.time()
                custom = t == "xnnpack" and v != "stock"
                ms = probe.measure_batch(be, wanted, v, custom=custom)
                for m in ms:
                    m.form = "batch"
                store(data, t, [c.name for c in wanted], ms, variant=v, path=args.json)
                print(f"{t} {v}: {time.time() - t0:.0f}s", flush=True)
            if t == "xnnpack":
                ms = probe.measure_batch(be, list(probe.FUSION_CASES), "stock")
                store(data, t, [c.name for c in probe.FUSION_CASES], ms, variant="stock", path=args.json)
    for extra in args.merge:
        other = json.loads(extra.read_text())
        keys = {(r["target"], r["case"], r["variant"]) for r in other["rows"]}
        data["rows"] = [r for r in data["rows"] if (r["target"], r["case"], r["variant"]) not in keys] + other["rows"]
        data.setdefault("date", other.get("date", ""))
        data.setdefault("versions", other.get("versions", versions()))
    if args.merge:
        args.json.write_text(json.dumps(data, indent=1))
    MD.write_text(render(data))


if __name__ == "__main__":
    main()
