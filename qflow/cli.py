"""The `qflow` command.

Exit codes (a contract for CI): 0 every program proved (or nothing at the
--fail-on level), 1 a finding at the --fail-on level (by default: some
obligation violated or unproven), 2 bad input (unreadable file, malformed
graph, unwritable output, --graph .svg without Graphviz).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from qflow.errors import ProofError, QflowError
from qflow.report.junit import render_junit
from qflow.report.kinds import KINDS
from qflow.report.markdown import render_markdown
from qflow.report.model import Report
from qflow.report.sarif import render_sarif

EXIT_PROVED, EXIT_NOT_PROVED, EXIT_BAD_INPUT = 0, 1, 2
FORMATS = ("text", "json", "markdown", "sarif", "junit")
FAIL_ON = ("error", "warning", "never")


def bundled_examples() -> list[Path]:
    """The .pt2 programs shipped with qflow (seed 000's graph and a clean control)."""
    here = Path(__file__).parent / "examples"
    return sorted(here.glob("*.pt2"))


def fails(report: Report, fail_on: str) -> bool:
    """Whether `report` fails CI at the --fail-on level.

    error: an error finding or a violated obligation. warning: also a warning
    finding or an unproven obligation, i.e. anything short of a proof (the
    default, so the exit code says "not proved"). never: nothing.
    """
    if fail_on == "never":
        return False
    violated = report.obligations.get("violated", 0) > 0
    if fail_on == "error":
        return violated or any(f.severity == "error" for f in report.findings)
    if fail_on == "warning":
        return not report.proved or any(f.severity in ("error", "warning") for f in report.findings)
    raise ValueError(f"fail_on must be one of {FAIL_ON}, not {fail_on!r}")


def render(reports: list[Report], fmt: str, artifacts: dict[str, str] | None = None) -> str:
    """The text of `reports` in one of FORMATS (`artifacts`: report name → program file, for SARIF)."""
    if fmt == "text":
        return "\n\n".join(str(r) for r in reports) + "\n"
    if fmt == "json":
        out = [r.to_json() for r in reports]
        return json.dumps(out[0] if len(out) == 1 else out, indent=2) + "\n"
    if fmt == "markdown":
        return render_markdown(reports)
    if fmt == "sarif":
        return json.dumps(render_sarif(reports, artifacts=artifacts), indent=2) + "\n"
    if fmt == "junit":
        return render_junit(reports)
    raise ValueError(f"format must be one of {FORMATS}, not {fmt!r}")


def summary(reports: list[Report]) -> str:
    """One line for stderr when the report itself goes to a file."""
    bad = [r for r in reports if not r.proved]
    sev = [f.severity for r in reports for f in r.findings]
    counts = ", ".join(f"{sev.count(s)} {s}" for s in ("error", "warning", "info") if s in sev) or "no findings"
    verdict = f"{len(bad)} not proved" if bad else "all proved"
    return f"qflow: {len(reports)} program(s) checked, {verdict} ({counts})"


def _graph_path(text: str) -> Path:
    """--graph's argument: the suffix picks the format, so anything else is a usage error (exit 2)."""
    path = Path(text)
    if path.suffix.lower() not in (".svg", ".dot"):
        raise argparse.ArgumentTypeError(
            f"{text!r}: the picture is .svg (rendered with Graphviz dot) or .dot (Graphviz source, no install needed)"
        )
    return path


def _picture_module() -> Any:
    """qflow.report.picture, or None after saying what to install (it needs the `graphviz` package)."""
    try:
        from qflow.report import picture
    except ImportError as e:
        print(f"qflow: --graph needs the graphviz Python package ({e}): pip install 'qflow[graph]'", file=sys.stderr)
        return None
    return picture


def _check(args: argparse.Namespace) -> int:
    from qflow.analysis import analyze_graph
    from qflow.api import domain_graph
    from qflow.solvers.repair import plan_repair

    picture = _picture_module() if args.graph else None
    if args.graph:
        if picture is None:
            return EXIT_BAD_INPUT
        if args.graph.suffix.lower() == ".svg" and not picture.dot_available():
            print(f"qflow: --graph {args.graph}: {picture.INSTALL_HINT}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if getattr(args, "per_pass", False) and not args.arm:
        print("qflow: --per-pass needs --arm TOSA_SPEC", file=sys.stderr)
        return EXIT_BAD_INPUT
    paths = [Path(p) for p in args.paths] or bundled_examples()
    if not paths:
        print("qflow: no program given and no bundled example found", file=sys.stderr)
        return EXIT_BAD_INPUT
    reports: list[Report] = []
    artifacts: dict[str, str] = {}
    drawn: list[Any] = []
    for i, p in enumerate(paths, 1):
        if len(paths) > 1:
            print(f"[{i}/{len(paths)}] {p.name}", file=sys.stderr, flush=True)
        try:
            if getattr(args, "per_pass", False):  # reports come from stepping the Arm passes
                from qflow.targets.arm.per_pass import check_file

                new = check_file(p, args.arm)
                reports += new
                artifacts.update({r.name: str(p) for r in new})
                continue
            programs = _arm_partitions(p, args.arm) if args.arm else [(p.name, p)]
            new = []
            for name, program in programs:
                dg = domain_graph(program, form=None if args.arm else args.form)
                report = analyze_graph(dg, name=name)
                new.append(report)
                if picture is not None:  # the plan marks where the requants would go
                    drawn.append(picture.Program(report, dg, None if report.proved else plan_repair(dg)))
        except QflowError as e:
            print(f"qflow: {p}: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        reports += new
        artifacts.update({r.name: str(p) for r in new})
    text = render(reports, args.format, artifacts)
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as e:
            print(f"qflow: cannot write {args.output}: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"{summary(reports)}; {args.format} report written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    if picture is not None and not _draw(picture, args.graph, drawn):
        return EXIT_BAD_INPUT
    return EXIT_NOT_PROVED if any(fails(r, args.fail_on) for r in reports) else EXIT_PROVED


def _draw(picture: Any, path: Path, programs: list[Any]) -> bool:
    """Write the --graph picture; False (after saying why) when it cannot be written."""
    try:
        picture.write_picture(path, programs)
    except picture.DotNotFound as e:
        print(f"qflow: --graph {path}: {e}", file=sys.stderr)
        return False
    except (OSError, picture.graphviz.CalledProcessError) as e:
        print(f"qflow: cannot write the picture {path}: {e}", file=sys.stderr)
        return False
    findings = sum(len(p.report.findings) for p in programs)
    print(f"qflow: picture of {len(programs)} program(s), {findings} finding(s) written to {path}", file=sys.stderr)
    return True


def _arm_partitions(path: Path, spec: str) -> list[tuple[str, Any]]:
    """Lower with the real Arm TOSA partitioner; (name, partition) for each
    partition as the backend sees it right after its fold pass."""
    from qflow.integrations.arm import capture_after, lower
    from qflow.integrations.load import load_program

    ep = load_program(path)
    with capture_after() as partitions:
        lower(ep, (), spec=spec)
    return [(f"{path.name} partition {i} ({spec})", part) for i, part in enumerate(partitions)]


def _repair(args: argparse.Namespace) -> int:
    import torch

    from qflow.api import analyze, plan, repair
    from qflow.integrations.load import load_program

    src, dst = Path(args.input), Path(args.output)
    try:
        ep = load_program(src)
        before = analyze(ep, form=args.form, name=src.name)
        p = plan(ep, form=before.form, objective=args.objective)  # warnings may have a repair too
        fixed = repair(ep, form=before.form, objective=args.objective) if not p.empty else ep
        after = analyze(fixed, form=before.form, name=dst.name)
    except ProofError as e:
        print(f"qflow: {src}: cannot repair: the repaired graph does not prove\n{e.report}", file=sys.stderr)
        return EXIT_NOT_PROVED
    except QflowError as e:
        print(f"qflow: {src}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not after.proved:  # nothing a requant can fix (unknown ops, missing facts)
        print(f"qflow: {src}: cannot repair: no requant discharges these\n{after}", file=sys.stderr)
        return EXIT_NOT_PROVED
    try:
        torch.export.save(fixed, dst)
    except OSError as e:
        print(f"qflow: cannot write {dst}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    what = (
        "already proved, saved unchanged"
        if p.empty
        else f"{len(p.requants)} requant(s) inserted, {len(p.reclaims)} claim(s) corrected"
    )
    ob = after.obligations
    print(f"qflow: {src} → {dst}: {what}; PROVED ({ob.get('proved', 0)} obligations)")
    return EXIT_PROVED


def _explain(args: argparse.Namespace) -> int:
    k = KINDS.get(args.kind)
    if k is None:
        print(f"qflow: unknown finding kind {args.kind!r}; known: {', '.join(sorted(KINDS))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{k.id} ({k.severity}): {k.title}\n\n{k.explanation}\n\nFix: {k.fix}")
    return 0


def _add_form(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--form",
        choices=("qdq", "folded", "lowered"),
        default=None,
        help="read the graph as this IR form instead of the detected one: qdq (convert_pt2e "
        "quantize/dequantize graph), folded (Arm input_qparams/output_qparams after the fold pass) or "
        "lowered (the output of to_edge_transform_and_lower: ops outside delegates run on the CPU in float; "
        "detected when the graph calls a delegate)",
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="qflow",
        description="Prove that every consumer in a quantized PyTorch / ExecuTorch graph sees the "
        "quantization domain it declares, and repair the graph when it does not.",
        epilog="Exit codes: 0 proved, 1 not proved (see `qflow check --fail-on`), 2 bad input.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    c = sub.add_parser(
        "check",
        help="prove the quantization domains of saved programs",
        description="Prove every consumer sees the quantization domain it declares. With no PATH, "
        "checks the bundled examples (seed 000's miscompiled cat and a clean control). "
        "Progress goes to stderr when several programs are checked.",
        epilog="Exit codes: 0 nothing at the --fail-on level (by default: every program proved), "
        "1 a finding at the --fail-on level, 2 bad input (unreadable or malformed program, unwritable "
        "--output or --graph, --graph .svg without Graphviz installed).",
    )
    c.add_argument("paths", nargs="*", metavar="PATH", help="a torch.export.save'd program (.pt2); several allowed")
    c.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="report format: text (terminal), json (qflow.report/1; a list for several programs), "
        "markdown (a PR-comment / job-summary table), sarif (SARIF 2.1.0, for GitHub code scanning), "
        "junit (JUnit XML, for CI test-report views); default text",
    )
    c.add_argument(
        "--output",
        "-o",
        metavar="FILE",
        help="write the report to FILE instead of stdout, and print a one-line summary to stderr",
    )
    c.add_argument(
        "--fail-on",
        choices=FAIL_ON,
        default="warning",
        help="the least severe finding that makes the exit code 1: error (an error finding or a violated "
        "obligation), warning (also a warning finding or an unproven obligation: exit 1 iff not proved), "
        "never (exit 0 unless the input is bad); default warning",
    )
    _add_form(c)
    c.add_argument(
        "--arm",
        metavar="TOSA_SPEC",
        help="lower with the real ExecuTorch Arm TOSA partitioner (e.g. TOSA-1.0+INT+int16) and prove "
        "each partition as the backend sees it after FoldAndAnnotateQParamsPass",
    )
    c.add_argument(
        "--per-pass",
        action="store_true",
        help="with --arm: step each partition through the Arm pass pipeline, prove it after every pass, "
        "and report the first pass after which an obligation that held no longer holds",
    )
    c.add_argument(
        "--graph",
        metavar="PATH",
        type=_graph_path,
        help="also draw the domain graph around each finding (3 hops, at most 60 values per program) to "
        "PATH: nodes coloured by status (red violated, yellow unproven, green proved, white no obligation), "
        "edges labelled with the domain that flows on them, the requants `qflow repair` would insert in blue; "
        "a proved program is drawn whole when small, else as one summary box; several programs are boxed "
        "side by side. The suffix picks the format: .svg (rendered by the Graphviz `dot` program; without "
        "it, exit 2 with how to install it) or .dot (Graphviz source, no Graphviz needed); "
        "anything else is a usage error",
    )
    c.set_defaults(func=_check)
    r = sub.add_parser(
        "repair",
        help="insert the minimal set of requants and save the repaired program",
        description="Load IN, insert the minimal set of requantize nodes (z3 Optimize), prove the result "
        "and save it to OUT with torch.export.save. A program that already proves is saved unchanged.",
        epilog="Exit codes: 0 OUT written and proved, 1 unrepairable (no requant makes it prove: unknown "
        "ops, missing facts; nothing written), 2 bad input or unwritable OUT.",
    )
    r.add_argument("input", metavar="IN.pt2", help="a torch.export.save'd program")
    r.add_argument("output", metavar="OUT.pt2", help="where to save the repaired program")
    r.add_argument(
        "--objective",
        choices=("count", "bytes"),
        default="count",
        help="minimise the number of requants (count, default) or the bytes they move (bytes)",
    )
    _add_form(r)
    r.set_defaults(func=_repair)
    e = sub.add_parser(
        "explain",
        help="what a finding kind means and how to fix it",
        description="Print the explanation and the fix of a finding kind. Exit 2 for an unknown kind.",
    )
    e.add_argument("kind", help=f"one of: {', '.join(sorted(KINDS))}")
    e.set_defaults(func=_explain)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (argparse exits 2 itself on bad usage)."""
    args = parser().parse_args(argv)
    func: Callable[[argparse.Namespace], Any] = args.func
    return int(func(args))


if __name__ == "__main__":
    sys.exit(main())
