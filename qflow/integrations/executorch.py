"""Put qflow in front of ExecuTorch lowering with one line.

    edge = to_edge_transform_and_lower(
        torch.export.export(converted, inputs),
        transform_passes=[QflowPass("repair")],   # or QflowPass("check")
        partitioner=[TOSAPartitioner(spec)],
    )

`transform_passes` run on the edge program before partitioning, which is
where a requant must be made explicit for the backend's fold pass to keep it.
"""

from __future__ import annotations

from typing import Any

import torch.fx as fx
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from qflow.errors import InputError, ProofError
from qflow.report.model import Report


class QflowPass(PassBase):
    """A graph pass: "check" raises ProofError unless the program is proved
    (`Report.status`; a program with nothing quantized is not); "repair"
    inserts the minimal requants in place, re-proves, and raises ProofError if
    the result still does not prove.

    `target` is the backend the program is about to be lowered to: a target
    name, or the partitioner object itself (its backend's target); None checks
    against every shipped delegate target (arm-tosa and xnnpack)."""

    def __init__(self, mode: str = "check", objective: str = "count", target: Any = None) -> None:
        super().__init__()
        if mode not in ("check", "repair"):
            raise ValueError("mode must be 'check' or 'repair'")
        from qflow import targets

        self.mode, self.objective, self.target = mode, objective, targets.get(target)
        self.reports: list[Report] = []

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        from qflow.api import analyze, domain_graph
        from qflow.integrations.rewrite import apply_plan
        from qflow.solvers.repair import plan_repair

        report = analyze(graph_module, target=self.target)
        self.reports.append(report)
        if report.proved:
            return PassResult(graph_module, False)
        if self.mode == "check" or report.status == "nothing-quantized":  # (nothing to repair)
            raise ProofError(report)
        plan = plan_repair(domain_graph(graph_module, target=self.target, carry=False), self.objective)
        apply_plan(graph_module, plan)
        after = analyze(graph_module, target=self.target)
        self.reports.append(after)
        if not after.proved:
            raise ProofError(after)
        return PassResult(graph_module, not plan.empty)


def check_program(program: Any, repair: bool = False, target: Any = None) -> Any:
    """Prove `program` (GraphModule / ExportedProgram / EdgeProgramManager) and
    return it — repaired (a copy) when `repair` is set — or raise ProofError."""
    from qflow.api import analyze
    from qflow.api import repair as repair_program

    if repair:
        return repair_program(program, target=target)
    report = analyze(program, target=target)
    if not report.proved:
        raise ProofError(report)
    return program


def predict_boundaries(program: Any, partitioner: Any, name: str = "") -> Report:
    """Before lowering: the delegate boundaries `partitioner` will cut that its
    backend turns into dtype mismatches (the Arm target's: qflow.targets.arm.predict)."""
    from qflow import targets

    target = targets.for_partitioner(partitioner)
    predict = target.hook("predict_boundaries") if target is not None else None
    if predict is None:
        known = sorted(
            p
            for name in targets.NAMES
            if targets.get(name).hook("predict_boundaries")
            for p in targets.get(name).partitioners
        )
        raise InputError(
            f"predict_boundaries: qflow has no boundary prediction for {type(partitioner).__name__} "
            f"(target {target.name if target else 'none'}); it predicts for {', '.join(known)}"
        )
    return predict(program, partitioner, name)
