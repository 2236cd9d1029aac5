"""Wall time of one `qflow check model.pt2`, as a user's shell runs it.

    python benchmarks/cli_startup.py                  # median of 5, writes benchmarks/startup.md
    python benchmarks/cli_startup.py --runs 9 --program path/to/model.pt2

Four commands, interleaved run by run so a change in the machine's load hits
each alike:

- `import torch` alone: the floor (qflow reads FX graphs, so it imports torch);
- `python -m qflow check PATH`: the command as shipped (qflow's own .pt2
  reader, `qflow.ir.pt2`, and `qflow.cli.run`, which exits with the
  garbage collector frozen);
- the same check through `qflow.cli.main`, ending as a plain script does (the
  interpreter's last collection walks everything torch allocated);
- that, with the .pt2 reader standing aside so `torch.export.load` reads the
  program: what `qflow check` did before both changes. The stand-in is
  instrumentation of this script, not a qflow option.

Each row gives the median and the range of the wall times, the median CPU
time (user + sys of the child) and the load average around the runs; a
cpu/wall well below 1 means the run waited for a core. A second table sums
`python -X importtime` self times by top-level package for one shipped check.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PROGRAM = ROOT / "qflow" / "examples" / "seed000_control.pt2"

PLAIN_EXIT = "import sys\nfrom qflow.cli import main\nsys.exit(main(['check', sys.argv[1]]))\n"
TORCH_LOAD = (
    "import sys, qflow.ir.pt2 as pt2\n"
    "def _aside(path):\n"
    "    raise pt2.Unsupported('benchmark: read with torch.export.load')\n"
    "pt2.read = _aside\n"
) + PLAIN_EXIT


def commands(program: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "`import torch` (the floor)": [py, "-c", "import torch"],
        "`qflow check` as shipped": [py, "-m", "qflow", "check", str(program)],
        "… exiting without gc.freeze": [py, "-c", PLAIN_EXIT, str(program)],
        "… and read by torch.export.load (before)": [py, "-c", TORCH_LOAD, str(program)],
    }


def run_once(argv: list[str]) -> tuple[float, float]:
    """(wall s, cpu s) of one run of `argv`, its output discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(), check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{argv} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


#: Where the children cache their bytecode. A user's install has qflow's .pyc files (pip writes
#: them; an editable install on first import); an environment with PYTHONDONTWRITEBYTECODE would
#: compile every qflow module on every run (≈ 0.1 s), so the children cache it here.
PYCACHE = Path(tempfile.gettempdir()) / "qflow-cli-startup-pycache"


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONPYCACHEPREFIX": str(PYCACHE)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def import_times(program: Path) -> Counter[str]:
    """ms of import (self time) per top-level package during one shipped check."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "qflow", "check", str(program)],
        capture_output=True,
        text=True,
        env=_env(),
        check=False,
    )
    out: Counter[str] = Counter()
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = line.removeprefix("import time:").split("|")
        out[name.strip().split(".")[0]] += int(self_us) / 1000
    return out


def _priority() -> str:
    """How this process is scheduled: on a shared box the benchmark can be run ahead of the other
    work (see benchmarks/README.md), which the table then says."""
    try:
        group = Path("/proc/self/autogroup").read_text().split()[-1]
    except (OSError, IndexError):
        group = "?"
    return f"nice {os.nice(0)}, autogroup nice {group}"


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = [f"Python {platform.python_version()}"]
    for pkg in ("torch", "networkx", "z3-solver"):
        try:
            parts.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            pass
    return ", ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--program", type=Path, default=DEFAULT_PROGRAM)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "startup.md")
    args = ap.parse_args()
    cmds = commands(args.program)
    for argv in cmds.values():  # warm the page cache and the .pyc files
        run_once(argv)
    walls: dict[str, list[float]] = {k: [] for k in cmds}
    cpus: dict[str, list[float]] = {k: [] for k in cmds}
    load_before = os.getloadavg()
    for _ in range(args.runs):
        for name, argv in cmds.items():
            w, c = run_once(argv)
            walls[name].append(w)
            cpus[name].append(c)
    load_after = os.getloadavg()
    imports = import_times(args.program)

    try:
        program = args.program.resolve().relative_to(ROOT)
    except ValueError:
        program = args.program
    lines = [
        "# One `qflow check`: wall time",
        "",
        f"`python benchmarks/cli_startup.py` — {datetime.date.today()}, qflow {_commit()}, "
        f"{os.cpu_count()} cores, {platform.machine()}, {_versions()}.",
        f"Program: `{program}`; {args.runs} runs of each command, interleaved; "
        f"load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after; scheduling: {_priority()}.",
        "",
        "| command | wall s (median) | wall s (min–max) | cpu s (median) | cpu/wall |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name in cmds:
        w, c = statistics.median(walls[name]), statistics.median(cpus[name])
        lines.append(f"| {name} | {w:.2f} | {min(walls[name]):.2f}–{max(walls[name]):.2f} | {c:.2f} | {c / w:.2f} |")
    lines += [
        "",
        "Import time of one shipped check, by top-level package (`python -X importtime`, self times summed, ms):",
        "",
        "| package | ms |",
        "| --- | ---: |",
    ]
    shown = imports.most_common(8)
    lines += [f"| {pkg} | {ms:.0f} |" for pkg, ms in shown]
    rest = sum(imports.values()) - sum(ms for _, ms in shown)
    lines += [f"| (everything else) | {rest:.0f} |", f"| **total** | {sum(imports.values()):.0f} |", ""]
    text = "\n".join(lines)
    print(text)
    args.out.write_text(text)
    print(f"written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
