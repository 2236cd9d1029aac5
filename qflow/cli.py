"""The `qflow` command.

Exit codes (a contract for CI): 0 every program proved, 1 some obligation
violated or unproven, 2 bad input (unreadable file, malformed graph).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from qflow.errors import QflowError
from qflow.report.kinds import KINDS

EXIT_PROVED, EXIT_NOT_PROVED, EXIT_BAD_INPUT = 0, 1, 2


def bundled_examples() -> list[Path]:
    """The .pt2 programs shipped with qflow (seed 000's graph and a clean control)."""
    here = Path(__file__).parent / "examples"
    return sorted(here.glob("*.pt2"))


def _check(args: argparse.Namespace) -> int:
    from qflow.api import analyze

    paths = [Path(p) for p in args.paths] or bundled_examples()
    if not paths:
        print("qflow: no program given and no bundled example found", file=sys.stderr)
        return EXIT_BAD_INPUT
    reports = []
    for p in paths:
        try:
            if args.arm:
                reports += _arm_partitions(p, args.arm)
            else:
                reports.append(analyze(p, form=args.form, name=p.name))
        except QflowError as e:
            print(f"qflow: {p}: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if args.format == "json":
        out = [r.to_json() for r in reports]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2))
    else:
        print("\n\n".join(str(r) for r in reports))
    return EXIT_PROVED if all(r.proved for r in reports) else EXIT_NOT_PROVED


def _arm_partitions(path: Path, spec: str) -> list:
    """Lower with the real Arm TOSA partitioner and prove each partition as the
    backend sees it right after its fold pass."""
    from qflow.api import analyze
    from qflow.integrations.arm import capture_after, lower
    from qflow.integrations.load import load_program

    ep = load_program(path)
    with capture_after() as partitions:
        lower(ep, (), spec=spec)
    return [analyze(part, name=f"{path.name} partition {i} ({spec})") for i, part in enumerate(partitions)]


def _explain(args: argparse.Namespace) -> int:
    k = KINDS.get(args.kind)
    if k is None:
        print(f"qflow: unknown finding kind {args.kind!r}; known: {', '.join(sorted(KINDS))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{k.id} ({k.severity}): {k.title}\n\n{k.explanation}\n\nFix: {k.fix}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="qflow", description=__doc__.split("\n")[0] if __doc__ else None)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser(
        "check",
        help="prove the quantization domains of saved programs",
        description="Prove every consumer sees the quantization domain it declares. With no PATH, "
        "checks the bundled examples (seed 000's miscompiled cat and a clean control). "
        "Exit 0 proved, 1 violated or unproven, 2 bad input.",
    )
    c.add_argument("paths", nargs="*", metavar="PATH", help="a torch.export.save'd program (.pt2)")
    c.add_argument("--format", choices=("text", "json"), default="text", help="report format (default text)")
    c.add_argument("--form", choices=("qdq", "folded"), default=None, help="override the detected IR form")
    c.add_argument(
        "--arm",
        metavar="TOSA_SPEC",
        help="lower with the real ExecuTorch Arm TOSA partitioner (e.g. TOSA-1.0+INT+int16) and prove "
        "each partition as the backend sees it after FoldAndAnnotateQParamsPass",
    )
    c.set_defaults(func=_check)
    e = sub.add_parser("explain", help="what a finding kind means and how to fix it")
    e.add_argument("kind", help=f"one of: {', '.join(sorted(KINDS))}")
    e.set_defaults(func=_explain)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
