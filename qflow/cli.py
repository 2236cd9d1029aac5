"""The `qflow` command.

Exit codes (a contract for CI): 0 every program proved (or nothing at the
--fail-on level), 1 a finding at the --fail-on level (by default: some
obligation violated or unproven), 2 bad input (unreadable file, malformed
graph, unwritable output, --graph .svg without Graphviz). A program in
which nothing is quantized has nothing to prove: it is reported as such and
counts as not proved (exit 1 at the default --fail-on warning, 0 at error).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qflow import __version__, targets
from qflow.errors import InputError, ProofError, QflowError
from qflow.gc_pause import paused_gc
from qflow.report.junit import render_junit
from qflow.report.kinds import KINDS
from qflow.report.markdown import render_markdown
from qflow.report.model import FAIL_LEVELS, Report
from qflow.report.sarif import display_path, render_sarif

EXIT_PROVED, EXIT_NOT_PROVED, EXIT_BAD_INPUT = 0, 1, 2
FORMATS = ("text", "json", "markdown", "sarif", "junit")
FAIL_ON = FAIL_LEVELS


def bundled_examples() -> list[Path]:
    """The .pt2 programs shipped with qflow (seed 000's graph and a clean control)."""
    here = Path(__file__).parent / "examples"
    return sorted(here.glob("*.pt2"))


def expand_paths(args: Sequence[str]) -> list[Path]:
    """The programs to check: each PATH, and the .pt2/.pte files under each directory (sorted).
    A directory without any is kept as it is, so it is reported as bad input."""
    out: list[Path] = []
    for a in args:
        p = Path(a)
        found = sorted(f for f in p.rglob("*") if f.suffix in (".pt2", ".pte")) if p.is_dir() else []
        out += found or [p]
    return out


@dataclass(frozen=True)
class BadInput:
    """A program that could not be checked, reported alongside the others' reports."""

    path: str
    message: str


def fails(report: Report, fail_on: str) -> bool:
    """Whether `report` fails CI at the --fail-on level (`Report.fails`)."""
    return report.fails(fail_on)


def render(
    reports: list[Report], fmt: str, artifacts: dict[str, str] | None = None, bad: Sequence[BadInput] = ()
) -> str:
    """The text of `reports` in one of FORMATS (`artifacts`: report name → program file, for SARIF),
    with the programs that could not be read (`bad`) reported in it too."""
    if fmt == "text":
        parts = [str(r) for r in reports] + [f"qflow: {b.path}: BAD INPUT — {b.message}" for b in bad]
        return "\n\n".join(parts) + "\n" if parts else ""
    if fmt == "json":
        out = [r.to_json() for r in reports]
        out += [
            {"schema": BAD_INPUT_SCHEMA, "name": Path(b.path).name, "path": b.path, "error": b.message} for b in bad
        ]
        return json.dumps(out[0] if len(out) == 1 else out, indent=2) + "\n"
    if fmt == "markdown":
        text = render_markdown(reports) if reports else "## qflow\n"
        return text + "".join(f"\n**Bad input** `{b.path}`: {b.message}\n" for b in bad)
    if fmt == "sarif":
        return json.dumps(_sarif_with_bad_inputs(render_sarif(reports, artifacts=artifacts), bad), indent=2) + "\n"
    if fmt == "junit":
        return _junit_with_bad_inputs(render_junit(reports), bad)
    raise ValueError(f"format must be one of {FORMATS}, not {fmt!r}")


BAD_INPUT_SCHEMA = "qflow.bad-input/1"


def _sarif_with_bad_inputs(log: dict[str, Any], bad: Sequence[BadInput]) -> dict[str, Any]:
    """A program that could not be read is an error notification of the run (SARIF's place for
    what kept the tool from analysing an artifact), located at the file."""
    if not bad:
        return log

    def where(path: str) -> dict[str, Any]:
        uri, relative = display_path(path)
        loc: dict[str, Any] = {"uri": uri}
        if relative:
            loc["uriBaseId"] = "%SRCROOT%"
        return {"physicalLocation": {"artifactLocation": loc}}

    log["runs"][0]["invocations"] = [
        {
            "executionSuccessful": False,
            "toolExecutionNotifications": [
                {"level": "error", "message": {"text": f"{b.path}: {b.message}"}, "locations": [where(b.path)]}
                for b in bad
            ],
        }
    ]
    return log


def _junit_with_bad_inputs(xml: str, bad: Sequence[BadInput]) -> str:
    """A program that could not be read is a <testsuite> with one erroring <testcase>."""
    if not bad:
        return xml
    import xml.etree.ElementTree as ET

    root = ET.fromstring(xml)
    for b in bad:
        suite = ET.SubElement(root, "testsuite", name=b.path, tests="1", failures="0", errors="1", skipped="0")
        case = ET.SubElement(suite, "testcase", classname="bad-input", name=Path(b.path).name)
        ET.SubElement(case, "error", message=b.message, type="bad-input").text = b.message
    root.set("errors", str(int(root.get("errors", "0")) + len(bad)))
    root.set("tests", str(int(root.get("tests", "0")) + len(bad)))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def summary(reports: list[Report], bad_inputs: Sequence[BadInput] = ()) -> str:
    """One line for stderr when the report itself goes to a file."""
    bad = [r for r in reports if not r.proved]
    sev = [f.severity for r in reports for f in r.findings]
    counts = ", ".join(f"{sev.count(s)} {s}" for s in ("error", "warning", "info") if s in sev) or "no findings"
    verdict = f"{len(bad)} not proved" if bad else "all proved"
    unread = f", {len(bad_inputs)} bad input(s)" if bad_inputs else ""
    return f"qflow: {len(reports)} program(s) checked, {verdict} ({counts}){unread}"


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


def _explorer_module() -> Any:
    """qflow.report.explorer, or None after saying what to install (it needs ai-edge-model-explorer)."""
    try:
        import model_explorer.node_data_builder  # noqa: F401

        from qflow.report import explorer
    except ImportError as e:
        print(f"qflow: --explorer: {e}: pip install -c constraints.txt 'qflow[explorer]'", file=sys.stderr)
        return None
    return explorer


def _explore(explorer: Any, directory: Path, drawn: list[Any]) -> bool:
    """Write each program's Model Explorer overlay into `directory` and print the command that opens it."""
    try:
        overlays = [explorer.write_overlay(directory, path, r, dg, plan) for r, dg, plan, path in drawn]
    except OSError as e:
        print(f"qflow: cannot write the Model Explorer overlay to {directory}: {e}", file=sys.stderr)
        return False
    print(
        f"qflow: Model Explorer overlay of {len(overlays)} program(s) written to {directory}; open with:",
        file=sys.stderr,
    )
    for o in overlays:
        print(f"  {o.command()}", file=sys.stderr)
    return True


def _check(args: argparse.Namespace) -> int:
    from qflow.analysis import analyze_graph
    from qflow.api import analyze, domain_graph
    from qflow.solvers.repair import plan_repair

    picture = _picture_module() if args.graph else None
    if args.graph:
        if picture is None:
            return EXIT_BAD_INPUT
        if args.graph.suffix.lower() == ".svg" and not picture.dot_available():
            print(f"qflow: --graph {args.graph}: {picture.INSTALL_HINT}", file=sys.stderr)
            return EXIT_BAD_INPUT
    explorer = _explorer_module() if args.explorer else None
    if args.explorer and explorer is None:
        return EXIT_BAD_INPUT
    if args.explorer and args.arm:
        print(
            "qflow: --explorer draws the programs as saved; the --arm partitions have no .pt2 of their own",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    spec = None
    if args.arm:
        try:
            spec = _arm_hook("parse_spec")(args.arm)
        except InputError as e:
            print(f"qflow: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if getattr(args, "per_pass", False) and not args.arm:
        print("qflow: --per-pass needs --arm TOSA_SPEC", file=sys.stderr)
        return EXIT_BAD_INPUT
    paths = expand_paths(args.paths) or bundled_examples()
    if not paths:
        print("qflow: no program given and no bundled example found", file=sys.stderr)
        return EXIT_BAD_INPUT
    reference = None
    if getattr(args, "reference", None):
        from qflow.ir.load import read_program

        try:
            reference = read_program(args.reference)
        except QflowError as e:
            print(f"qflow: --reference {args.reference}: {str(e).removeprefix(f'{args.reference}: ')}", file=sys.stderr)
            return EXIT_BAD_INPUT
    reports: list[Report] = []
    artifacts: dict[str, str] = {}
    drawn: list[Any] = []
    bad: list[BadInput] = []
    for i, p in enumerate(paths, 1):
        if len(paths) > 1:
            print(f"[{i}/{len(paths)}] {p.name}", file=sys.stderr, flush=True)
        try:
            if getattr(args, "per_pass", False):  # reports come from stepping the Arm passes
                new = _arm_hook("check_per_pass")(p, args.arm, analyze)
                reports += new
                artifacts.update({r.name: str(p) for r in new})
                continue
            new = []
            for name, program in _programs(p, args.form, spec):
                target = "arm-tosa" if spec else args.target
                with paused_gc():  # (as qflow.analyze)
                    dg = domain_graph(program, form=None if spec else args.form, target=target, reference=reference)
                    report = analyze_graph(dg, name=name)
                new.append(report)
                if picture is not None or explorer is not None:  # the plan marks where the requants would go
                    plan = None if report.status in ("proved", "nothing-quantized") else plan_repair(dg)
                    drawn.append((report, dg, plan, p))
        except QflowError as e:
            message = "a directory with no .pt2 or .pte program in it" if p.is_dir() else str(e).removeprefix(f"{p}: ")
            print(f"qflow: {p}: {message}", file=sys.stderr)
            bad.append(BadInput(str(p), message))
            continue
        reports += new
        artifacts.update({r.name: str(p) for r in new})
    # bad inputs are said on stderr as they happen; the report carries them too, except the
    # terminal text report, which would only say them twice
    text = render(reports, args.format, artifacts, bad if args.output or args.format != "text" else ())
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as e:
            print(f"qflow: cannot write {args.output}: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"{summary(reports, bad)}; {args.format} report written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    if picture is not None and not _draw(picture, args.graph, [picture.Program(r, dg, pl) for r, dg, pl, _ in drawn]):
        return EXIT_BAD_INPUT
    if explorer is not None and not _explore(explorer, args.explorer, drawn):
        return EXIT_BAD_INPUT
    if bad:
        return EXIT_BAD_INPUT
    return EXIT_NOT_PROVED if any(fails(r, args.fail_on) for r in reports) else EXIT_PROVED


def _programs(path: Path, form: str | None, spec: Any) -> list[tuple[str, Any]]:
    """(report name, program) to check for one PATH: the program itself, or with --arm each
    partition of its Arm lowering. Raises InputError for what cannot be checked as asked."""
    from qflow.ir.load import form_mismatch, is_pte, load_program, read_program

    if spec is None and path.is_file() and is_pte(path):  # read as shipped (qflow.integrations.pte)
        if form is not None:
            raise InputError(f"--form {form}: a .pte program is read as shipped; --form applies to a .pt2")
        return [(path.name, path)]
    if spec is None:  # a check reads the graph only: no torch._dynamo (see read_program)
        program = read_program(path)
        reason = form_mismatch(program.graph_module, form)
        if reason is not None:
            raise InputError(reason)
        return [(path.name, program)]
    return _arm_hook("folded_partitions")(
        path, load_program(path), spec, lambda s: print(f"qflow: {s}", file=sys.stderr)
    )


def _arm_hook(name: str) -> Any:
    """--arm / --per-pass: the Arm target's hook `name` (its lowering, run for the CLI)."""
    hook = targets.get("arm-tosa").hook(name)
    assert hook is not None, name
    return hook


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


def _repair(args: argparse.Namespace) -> int:
    import torch

    from qflow import api
    from qflow.ir.load import load_program

    src, dst = Path(args.input), Path(args.output)
    unwritable = _unwritable(dst)
    if unwritable:
        print(f"qflow: cannot write {dst}: {unwritable}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        ep = load_program(src)
        # the plan carried out, to count every change it made
        fixed, p, after = api.repair_with_plan(
            ep, form=args.form, objective=args.objective, target=args.target, name=dst.name
        )
    except ProofError as e:
        why = "nothing is quantized" if e.report.status == "nothing-quantized" else "the repaired graph does not prove"
        print(f"qflow: {src}: cannot repair: {why}\n{e.report}", file=sys.stderr)
        return EXIT_NOT_PROVED
    except QflowError as e:
        print(f"qflow: {src}: {str(e).removeprefix(f'{src}: ')}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        torch.export.save(fixed, dst)
    except (OSError, RuntimeError) as e:  # torch's zip writer raises RuntimeError for a bad path
        print(f"qflow: cannot write {dst}: {str(e).strip().splitlines()[0]}", file=sys.stderr)
        return EXIT_BAD_INPUT
    what = "already proved, saved unchanged" if fixed is ep else p.summary()
    delegates = p.delegates()
    if delegates:
        what += f" (lowered again: {', '.join(delegates)})"
    ob = after.obligations
    print(f"qflow: {src} → {dst}: {what}; PROVED ({ob.get('proved', 0)} obligations)")
    return EXIT_PROVED


def _unwritable(dst: Path) -> str:
    """Why OUT cannot be written (checked before the work), or ""."""
    if dst.is_dir():
        return "is a directory (give the file name to write, e.g. DIR/fixed.pt2)"
    if not dst.parent.is_dir():
        return f"no such directory {dst.parent}"
    return ""


#: What the bundled examples must give: seed 000's dropped requant found, its control proved.
DEMO_EXPECTED = {"seed000_cat_requant.pt2": ["requant-after-passthrough"], "seed000_control.pt2": []}


def _demo(args: argparse.Namespace) -> int:
    """Check the bundled examples and say whether qflow found exactly what it should."""
    from qflow.api import analyze

    reports = [analyze(p, name=p.name) for p in bundled_examples()]
    sys.stdout.write(render(reports, "text"))
    got = {r.name: sorted(f.kind for f in r.findings if f.severity == "error") for r in reports}
    proved = {r.name: r.proved for r in reports}
    if got == DEMO_EXPECTED and proved == {"seed000_cat_requant.pt2": False, "seed000_control.pt2": True}:
        print(
            "\nqflow demo: as expected — the requant the Arm fold pass drops after seed 000's cat is found "
            "(exit 1 from `qflow check` on it), its control is proved. The install works."
        )
        return EXIT_PROVED
    print(f"\nqflow demo: UNEXPECTED result {got} (expected {DEMO_EXPECTED}): the install is broken", file=sys.stderr)
    return EXIT_NOT_PROVED


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
    p.add_argument(
        "--target",
        choices=targets.NAMES,
        default=None,
        help="the backend the program will be lowered to, whose measured contract decides how each op lowers a "
        "domain change (default: generic, arm-tosa and xnnpack at once; a lowered program's partitions are "
        "always read by their own delegate's target)",
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="qflow",
        description="Prove that every consumer in a quantized PyTorch / ExecuTorch graph sees the "
        "quantization domain it declares, and repair the graph when it does not.",
        epilog="Exit codes: 0 proved, 1 not proved (see `qflow check --fail-on`), 2 bad input.",
    )
    p.add_argument("--version", action="version", version=f"qflow {__version__}")
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also show, on stderr, what the libraries qflow drives (torch, torchao, ExecuTorch) log and warn "
        "while it drives them; quiet by default",
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
    c.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="a torch.export.save'd program (.pt2) or an ExecuTorch program (.pte, checked as shipped: "
        "its execution plan and delegate payloads); several allowed",
    )
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
        "--reference",
        metavar="PT2",
        help="with .pte programs: the program they were lowered from, a torch.export.save'd .pt2 or the "
        "ETRecord ExecuTorch writes with generate_etrecord=True (export_llm: debug.generate_etrecord=true). "
        "An XNNPACK payload's quantized weights and scales are checked against it. A TOSA "
        "payload keeps its weights as bare codes; each one whose values are those of exactly one quantized "
        "constant of PT2 takes its scales, so the artifact check can prove what depends on them. A Cortex-M "
        ".pte is checked against PT2 lowered again (CortexMPassManager), instruction by instruction",
    )
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
    c.add_argument(
        "--explorer",
        metavar="DIR",
        type=Path,
        help="also write Google Model Explorer node data into DIR, next to a copy of each program: "
        "NAME.qflow-status.json colours each node by its obligations' status, NAME.qflow-domains.json "
        "shows produced/expected domains and the planned requants; prints the `model-explorer` command "
        "that opens the program with both (needs the explorer extra)",
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
    d = sub.add_parser(
        "demo",
        help="check the bundled examples and say whether the result is the expected one",
        description="Check the two bundled programs (seed 000's miscompiled cat and its control), print "
        "the report, and say whether qflow found exactly the expected violation.",
        epilog="Exit codes: 0 the expected result (one violation in seed 000, the control proved), "
        "1 anything else (a broken install).",
    )
    d.set_defaults(func=_demo)
    e = sub.add_parser(
        "explain",
        help="what a finding kind means and how to fix it",
        description="Print the explanation and the fix of a finding kind. Exit 2 for an unknown kind.",
    )
    e.add_argument("kind", help=f"one of: {', '.join(sorted(KINDS))}")
    e.set_defaults(func=_explain)
    return p


#: Loggers that report, at import, what every install of the pinned stack prints and nothing a
#: user can act on: torchao's optional CUDA kernels (`Failed to load ..._C_mxfp8...so`) and torch's
#: pytree deprecation of Enum constants registered by torchao/ExecuTorch. Their errors still show.
KNOWN_NOISE = ("torchao", "torch.utils._pytree")
#: Deprecation warnings the pinned ExecuTorch Arm pipeline triggers inside torch (its deep copies of
#: pytree specs), again nothing a user of qflow can act on.
KNOWN_WARNINGS = (r"`isinstance\(treespec, LeafSpec\)` is deprecated",)


def quiet_known_noise() -> None:
    """Keep stderr for what is wrong: raise the known-noisy import loggers to ERROR and drop
    the known library deprecation warnings (any other warning still shows)."""
    import logging
    import warnings

    for name in KNOWN_NOISE:
        logging.getLogger(name).setLevel(logging.ERROR)
    for message in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=FutureWarning)


def _show_library_noise() -> None:
    """-v: what qflow keeps from the libraries it drives (`qflow.libraries`), on stderr."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("qflow -v: %(message)s"))
    log = logging.getLogger("qflow")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (argparse exits 2 itself on bad usage)."""
    args = parser().parse_args(argv)
    if args.verbose:
        _show_library_noise()
    else:
        quiet_known_noise()
    func: Callable[[argparse.Namespace], Any] = args.func
    return int(func(args))


def run() -> None:
    """The `qflow` command: `main`, then the process exits with the collector frozen.

    Everything torch allocates at import lives until the process ends; the
    interpreter's last garbage collection walks all of it again, about 0.5 s of
    a 2.5 s check measured on 2 cores (benchmarks/startup.md). Frozen objects
    are left to the process's end; finalization (atexit, flushing files) runs
    as always. Only the process entry points call this: `main` stays a plain
    function for callers in a longer-lived process."""
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
