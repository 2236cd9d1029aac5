"""The pass that broke it: step each partition through the Arm pass pipeline.

The artifact check says *that* the emitted TOSA is wrong; this says *where* it
went wrong. Each partition, as handed to the backend (Q/DQ intact), runs
through the real ``ArmPassManager`` pipeline one pass at a time (on a copy),
and qflow proves the program after every pass: the edge Q/DQ graph, the folded
graph (``input_qparams`` / ``output_qparams``), and the TOSA-dialect graph
after the rewrites (ops qflow does not model there make obligations
*unproven*, which never blames a pass). The first pass after which an
obligation that held is violated is named.

Predictions about later passes (``requant-after-passthrough``,
``non-fuseable-activation``) are not obligations of the stage they are
reported on: a Q/DQ graph with a requant after ``cat`` computes right; the
pass that folds it away is the one to blame.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qflow.ir.fx_nodes import target_name
from qflow.ops import OpClass, classify
from qflow.report.model import Finding, Report
from qflow.targets.arm import TARGET

#: Finding kinds that predict what a later pass will do rather than say the
#: stage at hand miscomputes.
PREDICTIONS = frozenset({"requant-after-passthrough", "non-fuseable-activation"})


@dataclass(frozen=True)
class Step:
    """qflow's verdict on a partition after one pass (index -1: before the pipeline)."""

    index: int
    name: str
    violated: frozenset[tuple[str, str]]  # (kind, node) of each violated error obligation
    unproven: int
    error: str | None = None  # the analysis could not read this stage


@dataclass
class Blame:
    """The first pass after which an obligation that held no longer holds."""

    partition: str
    index: int | None  # None: no pass broke anything
    pass_name: str | None
    findings: list[Finding] = field(default_factory=list)  # the newly violated obligations
    steps: list[Step] = field(default_factory=list)
    report: Report | None = None  # the analysis right after the blamed pass (or before the pipeline)

    def __str__(self) -> str:
        if self.index is None:
            return f"{self.partition}: no pass of {len(self.steps) - 1} breaks an obligation that held"
        what = "; ".join(f"{f.kind} at {f.node}" for f in self.findings)
        if self.index < 0:
            return f"{self.partition}: violated before the Arm pipeline runs: {what}"
        return f"{self.partition}: first broken by pass #{self.index} {self.pass_name}: {what}"


def _pass_name(p: Any) -> str:
    return getattr(p, "__name__", None) or type(p).__name__


def step_passes(partition_ep: Any, spec: str) -> Iterator[tuple[int, str, Any]]:
    """(index, pass name, program after it) for every pass of the real Arm
    pipeline on a copy of `partition_ep` (ARM_PIPELINE_NOTES §5.1)."""
    from executorch.backends.arm._passes.arm_pass_manager import (
        ArmPassManager,
        _ExportedProgramGraphPassAdapter,
    )
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.tosa.specification import TosaLoweringContext
    from torch._export.utils import _get_shape_env_from_gm

    class _Collect(ArmPassManager):  # build the pass list without running it
        def _transform(self, exported_program: Any, graph_module: Any) -> Any:
            return graph_module

    cs = TosaCompileSpec(spec)
    ep = copy.deepcopy(partition_ep)
    pm = _Collect(cs)
    pm.transform_to_backend_pipeline(ep, ep.graph_module)
    with TosaLoweringContext(cs.tosa_spec, _get_shape_env_from_gm(ep.graph_module)):
        for i, p in enumerate(pm.passes):
            ep = _ExportedProgramGraphPassAdapter(p)(ep).exported_program
            yield i, _pass_name(p), ep


#: How a program is read and proved: `qflow.analyze`, handed in by the caller (the readers
#: sit a layer above the backends, so this module does not import them). Called with the
#: partition and `target=` this backend's name.
Analyze = Callable[..., Report]


def _verdict(ep: Any, index: int, name: str, analyze: Analyze) -> tuple[Step, Report | None]:
    try:
        r = analyze(ep, target=TARGET.name)  # (a TOSA partition: read by the Arm contract)
    except Exception as e:  # a TOSA-dialect stage qflow cannot read: no verdict, no blame
        return Step(index, name, frozenset(), 0, f"{type(e).__name__}: {e}"), None
    bad = frozenset(
        (f.kind, f.node)
        for f in r.findings
        if f.status == "violated" and f.severity == "error" and f.kind not in PREDICTIONS
    )
    return Step(index, name, bad, r.obligations.get("unproven", 0)), r


def blame_partition(partition_ep: Any, spec: str, analyze: Analyze, name: str = "partition") -> Blame:
    """Step one partition through the pipeline and name the first pass after
    which an obligation that held is violated."""
    first, report = _verdict(partition_ep, -1, "(before the Arm pipeline)", analyze)
    blame = Blame(name, None, None, steps=[first], report=report)
    if first.violated and report is not None:
        blame.index, blame.pass_name = -1, None
        blame.findings = [f for f in report.findings if (f.kind, f.node) in first.violated]
        return blame
    seen = set(first.violated)
    for i, pname, ep in step_passes(partition_ep, spec):
        step, r = _verdict(ep, i, pname, analyze)
        blame.steps.append(step)
        new = step.violated - seen
        if new and r is not None:
            blame.index, blame.pass_name, blame.report = i, pname, r
            blame.findings = [f for f in r.findings if (f.kind, f.node) in new]
            return blame
        seen |= step.violated
    return blame


def blame_lowered(program: Any, analyze: Analyze, spec: str | None = None) -> list[Blame]:
    """`blame_partition` for every Arm TOSA delegate of a lowered program
    (EdgeProgramManager or ExportedProgram); the spec defaults to the
    delegate's own compile spec."""
    from qflow.ir.delegate import lowered_module
    from qflow.ir.load import graph_module_of

    gm, _ = graph_module_of(program)
    out = []
    for n in gm.graph.nodes:
        if n.op != "call_function" or classify(target_name(n)) is not OpClass.DELEGATE:
            continue
        lm = lowered_module(gm, n)
        if lm is None or lm.backend_id not in ("TOSABackend", "EthosUBackend", "VgfBackend"):
            continue
        s = spec or _spec_of(lm)
        out.append(blame_partition(lm.original_module, s, analyze, f"{n.args[0].name} ({s})"))
    return out


def _spec_of(lm: Any) -> str:
    for cs in lm.compile_specs:
        if cs.key == "tosa_spec":
            v = cs.value
            return (v.decode() if isinstance(v, bytes) else str(v)).strip()
    return "TOSA-1.0+INT"


def check_file(path: Path, spec: str, analyze: Analyze) -> list[Report]:
    """``qflow check --arm SPEC --per-pass``: lower the program with the real
    TOSA partitioner and, per partition, the report right after the first
    pass that breaks an obligation (a note names it)."""
    from qflow.ir.load import load_program
    from qflow.targets.arm.pipeline import lower

    lowered = lower(load_program(path), (), spec=spec)
    reports = []
    for i, b in enumerate(blame_lowered(lowered, analyze, spec)):
        r = b.report or Report(proved=True, findings=[], obligations={"proved": 0, "violated": 0, "unproven": 0})
        r.name = f"{path.name} partition {i} ({spec}) per pass"
        if b.index is not None and b.index >= 0:  # only the findings the blamed pass introduced
            keep = {(f.kind, f.node) for f in b.findings}
            r.findings = [f for f in r.findings if (f.kind, f.node) in keep or f.severity != "error"]
        r.notes.insert(0, f"per-pass: {b}")
        reports.append(r)
    return reports
