"""Report and Finding: plain data, the contract users' CI reads."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from qflow.report.text import render_text

SCHEMA = "qflow.report/1"
#: The JSON Schema of `Report.to_json()` (shipped with the package).
SCHEMA_FILE = Path(__file__).with_name("report.schema.json")
SEVERITIES = ("error", "warning", "info")
#: CI gate levels (`Report.fails`, the CLI's --fail-on).
FAIL_LEVELS = ("error", "warning", "never")
#: A report's verdict (`Report.status`), the one every entry point reads: the API,
#: the CLI's exit code, repair, the pytest plugin and QflowPass.
STATUSES = ("proved", "violated", "unproven", "nothing-quantized")
#: The note of a program with nothing quantized: nothing to prove, which is not a proof.
NOTHING_QUANTIZED = (
    "nothing is quantized (no quantize/dequantize node, qparams or quantized delegate), so there is nothing "
    "to prove: is this the program before quantization, rather than the one convert_pt2e returned?"
)


@dataclass
class Finding:
    """One located problem. `node` is the FX node name; `produced` / `expected`
    are the two domains of the failed obligation (as dicts) when it has them."""

    kind: str
    node: str
    severity: str
    message: str
    status: str = "violated"  # "violated" | "unproven" | "predicted"
    produced: dict[str, Any] | None = None
    expected: dict[str, Any] | None = None
    edge: list[str] | None = None
    fix: str = ""
    source: str | None = None  # "file:line" of the model code when the node has a stack trace
    module: str | None = None  # nn.Module path
    #: On which targets the program breaks, and how ("silent miscompile",
    #: "refused at lowering", "refused at load").
    targets: dict[str, str] | None = None
    #: How far the failure moves the output, in output LSB before rounding (a requant a
    #: code copy or a zero-point-only lowering drops), when qflow can bound it.
    bound_lsb: float | None = None
    #: How far all the program's violations together move its outputs (followed through every op to
    #: them), in output LSB before rounding, when qflow can bound it: the worst output, over every
    #: input code the violations can see.
    output_lsb: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, "")}


@dataclass
class Report:
    proved: bool
    findings: list[Finding]
    obligations: dict[str, int]
    form: str = "unknown"
    name: str = ""
    #: The target whose contract the program was proved against.
    target: str = "generic"
    notes: list[str] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    #: The propagated lattice element of every value (for pictures and debugging).
    domains: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: The repair carried out to get this program (`Plan.to_json()`), when it is a repair's result.
    repair: dict[str, Any] | None = None
    #: False when nothing in the program is quantized: then it is not proved (status
    #: "nothing-quantized"), so a CI gate never passes a model that was never quantized.
    quantized: bool = True

    def __post_init__(self) -> None:
        if self.proved and not self.quantized:
            raise ValueError("a report of a program with nothing quantized cannot be proved")

    @property
    def status(self) -> str:
        """The verdict, one of `STATUSES`: proved; violated (an obligation is violated or a
        finding is an error); unproven (short of a proof, nothing shown wrong); or
        nothing-quantized (nothing to prove: no quantization found, and every op read)."""
        if self.proved:
            return "proved"
        if self.obligations.get("violated", 0) or any(f.severity == "error" for f in self.findings):
            return "violated"  # (a float program whose delegate reads its bytes as codes included)
        if not self.quantized and not self.obligations.get("unproven", 0):
            return "nothing-quantized"  # (unless an op qflow cannot read may be the quantizing one)
        return "unproven"

    def fails(self, level: str = "warning") -> bool:
        """Whether this report fails a CI gate at `level` (the CLI's --fail-on).

        error: an error finding or a violated obligation. warning (the default): anything
        short of a proof, i.e. not proved (nothing quantized included) or a warning finding.
        never: nothing."""
        if level == "never":
            return False
        if level == "error":
            return self.obligations.get("violated", 0) > 0 or any(f.severity == "error" for f in self.findings)
        if level == "warning":
            return not self.proved or any(f.severity in ("error", "warning") for f in self.findings)
        raise ValueError(f"fail level must be one of {FAIL_LEVELS}, not {level!r}")

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "name": self.name,
            "form": self.form,
            "target": self.target,
            "proved": self.proved,
            "status": self.status,
            "findings": [f.to_dict() for f in self.findings],
            "obligations": dict(self.obligations),
            "notes": list(self.notes),
            "stats": dict(self.stats),
        } | ({"repair": self.repair} if self.repair is not None else {})

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)

    def __str__(self) -> str:
        return render_text(self)
