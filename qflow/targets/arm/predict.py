"""Predict Arm delegate boundaries before partitioning (seed 002).

The lowered-form check sees a wrong boundary only after the backend compiled
it. This one runs just the partitioner's tagging on a copy of the edge
program (no backend compile) and asks, for each predicted partition
boundary, what the Arm ``FoldAndAnnotateQParamsPass`` will make of it:

* an output that is a pass-through op (view, permute, …) fed — through
  pass-through ops only — by a dequantize inside the partition: the fold
  erases the dequantize, so the partition writes integer codes while the
  parent graph will declare the float dtype (seed 002); likewise an output
  whose quantize is inside the partition while the value itself leaves;
* an output that is a quantized compute op whose quantize is outside: after
  the fold it has no output domain (the backend rejects the partition);
* an input where the partition starts at a pass-through op on a float tensor
  and the quantize after it is inside the partition: the fold folds that
  quantize into the op, so nothing converts the real numbers the parent
  feeds into the codes the partition computes on (the backend then rejects
  or miscompiles the partition).

Findings are ``delegate-dtype-mismatch`` with status ``"predicted"``.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.fx as fx

from qflow.analysis import _source as _source_line
from qflow.domain import Domain
from qflow.errors import InputError
from qflow.ir.delegate import ITEMSIZE, byte_factor, compatible
from qflow.ir.fx_nodes import Consts, dtype_name, qdq_domain, target_name
from qflow.ops import OpClass, base_name, classify, code_sources
from qflow.report.kinds import kind
from qflow.report.model import Finding, Report

__all__ = ["predict_boundaries"]

_KIND = "delegate-dtype-mismatch"


def _edge_program(program: Any, partitioner: Any) -> Any:
    """The edge program the partitioner will see, exactly as
    ``to_edge_transform_and_lower`` builds it (ops the partitioner keeps stay
    undecomposed, its pre-decomposition transforms run)."""
    from torch.export import ExportedProgram

    if hasattr(program, "exported_program") and callable(program.exported_program):
        return program.exported_program()
    if not isinstance(program, ExportedProgram):
        raise InputError(
            f"predict_boundaries takes an ExportedProgram (aten or edge) or an EdgeProgramManager, "
            f"not {type(program).__name__}; export the converted module with torch.export.export first"
        )
    if any("EdgeOpOverload" in type(n.target).__name__ for n in program.graph.nodes if n.op == "call_function"):
        return program
    from executorch.exir import EdgeCompileConfig
    from executorch.exir.program._program import _gen_edge_manager_for_partitioners

    manager = _gen_edge_manager_for_partitioners(
        {"forward": [partitioner]},
        {"forward": copy.deepcopy(program)},
        EdgeCompileConfig(_check_ir_validity=False),
        None,
    )
    return manager.exported_program()


def _cls(n: fx.Node) -> OpClass:
    return classify(target_name(n)) if n.op == "call_function" else OpClass.UNKNOWN


def _source(n: fx.Node) -> fx.Node | None:
    """The tensor a pass-through op copies its codes from (cat: the first input,
    whose qparams the fold keeps)."""
    srcs = code_sources(base_name(target_name(n)), n.args)
    return srcs[0] if srcs and isinstance(srcs[0], fx.Node) else None


def _dtype(n: fx.Node) -> str | None:
    val = n.meta.get("val")
    return dtype_name(val.dtype) if isinstance(val, torch.Tensor) else None


class _Predictor:
    def __init__(self, ep: Any, tags: set[str]) -> None:
        from executorch.backends.arm._passes.fold_qdq_with_annotated_qparams_pass import (
            FoldAndAnnotateQParamsPass,
        )

        self.ep, self.tags = ep, tags
        self.foldable = FoldAndAnnotateQParamsPass.is_foldable
        self.consts = Consts(ep.graph_module, ep)
        self.findings: list[Finding] = []
        self.checked = 0

    def tag(self, n: fx.Node) -> str | None:
        t = n.meta.get("delegation_tag")
        return t if t in self.tags else None

    def run(self) -> None:
        for n in self.ep.graph.nodes:
            t = self.tag(n)
            if t is None or n.op != "call_function":
                continue
            if any(self.tag(u) != t for u in n.users):
                self.checked += 1
                self._output(n, t)
            for a in n.all_input_nodes:
                if self.tag(a) != t and isinstance(a.meta.get("val"), torch.Tensor):
                    self.checked += 1
                    self._input(n, a, t)

    def _output(self, o: fx.Node, tag: str) -> None:
        """o leaves partition `tag`: does the fold turn it into codes?"""
        cls = _cls(o)
        if cls in (OpClass.QUANTIZE, OpClass.DEQUANTIZE):
            return  # a quantize writes the codes it declares; a dequantize, real numbers
        if self.foldable(o):
            qs = [u for u in o.users if _cls(u) is OpClass.QUANTIZE and self.tag(u) == tag]
            if qs:
                self._output_finding(o, o, qs[0], tag)  # its quantize folds into it: the value leaving is codes
                return
            dqs = [a for a in o.all_input_nodes if _cls(a) is OpClass.DEQUANTIZE and self.tag(a) == tag]
            if cls is not OpClass.PASSTHROUGH and dqs:
                self._unquantized_output(o, dqs[0], tag)
                return
        cur = o
        for _ in range(256):
            if _cls(cur) is not OpClass.PASSTHROUGH or self.tag(cur) != tag:
                return
            src = _source(cur)
            if src is None or self.tag(src) != tag:
                return
            if _cls(src) is OpClass.DEQUANTIZE and self.foldable(cur):
                self._output_finding(o, cur, src, tag)
                return
            cur = src

    def _output_finding(self, o: fx.Node, into: fx.Node, qdq: fx.Node, tag: str) -> None:
        dom = qdq_domain(qdq, self.consts)
        declared = _dtype(o) or "?"
        if compatible(declared, dom.dtype):
            return
        if _cls(qdq) is OpClass.QUANTIZE:
            why = (
                f"its quantize {qdq.name} is inside the partition while the value also leaves it: "
                f"FoldAndAnnotateQParamsPass will fold the quantize into {o.name}"
            )
        else:
            via = "" if into is o else f" (through {into.name})"
            why = (
                f"a pass-through op, is fed by {qdq.name}{via}, a dequantize inside the partition: "
                "FoldAndAnnotateQParamsPass will fold it"
            )
        self._add(
            o,
            f"predicted partition {tag} output {o.name} ({base_name(target_name(o))}) — {why}, so the partition "
            f"writes {dom.dtype} codes in {dom}, while the parent graph will declare {declared} for this delegate "
            f"output (meta['val'] is copied before the backend runs). Byte-size factor "
            f"{byte_factor(declared, dom.dtype):g}.",
            produced=dom,
            expected=declared,
            edge=[o.name, "<parent>"],
        )

    def _unquantized_output(self, o: fx.Node, dq: fx.Node, tag: str) -> None:
        """A quantized compute op leaving the partition without its quantize: after
        the fold it reads codes but has no output domain to rescale to."""
        declared = _dtype(o) or "?"
        op = f"{base_name(target_name(o))}, a quantized {_cls(o).value} op"
        self._add(
            o,
            f"predicted partition {tag} output {o.name} ({op}) reads {dq.name}, a dequantize inside the "
            "partition, but its quantize is outside: after FoldAndAnnotateQParamsPass it has input qparams "
            f"and no output qparams, so the partition cannot write the {declared} the parent graph will "
            "declare (the Arm backend 1.5.1 rejects a conv/linear there: 'No output quantization parameter "
            "found'; otherwise it would write integer codes or accumulators).",
            produced=None,
            expected=declared,
            edge=[o.name, "<parent>"],
        )

    def _input(self, c: fx.Node, a: fx.Node, tag: str) -> None:
        """c is the first op of partition `tag` on the parent's tensor a."""
        fed = _dtype(a) or "?"
        if not fed.startswith("float") or _cls(c) is not OpClass.PASSTHROUGH or not self.foldable(c):
            return
        qs = [u for u in c.users if _cls(u) is OpClass.QUANTIZE and self.tag(u) == tag]
        if not qs:
            return
        dom = qdq_domain(qs[0], self.consts)
        self._add(
            c,
            f"predicted partition {tag} input {a.name} ({fed}, from outside the partition) enters at {c.name} "
            f"({base_name(target_name(c))}, a pass-through op) whose quantize {qs[0].name} is inside the "
            f"partition: FoldAndAnnotateQParamsPass will fold that quantize into {c.name}, which then claims "
            f"{dom.dtype} codes in {dom} while the delegate input carries {fed}. Nothing quantizes it "
            f"(byte-size factor {byte_factor(fed, dom.dtype):g}); the backend rejects or miscompiles the partition.",
            produced=dom,
            expected=fed,
            edge=[a.name, c.name],
        )

    def _add(self, n: fx.Node, msg: str, produced: Domain | None, expected: str, edge: list[str]) -> None:
        spec = kind(_KIND)
        exp: dict[str, Any] = {"dtype": expected}
        if expected in ITEMSIZE and expected.startswith("float"):
            exp["real"] = True
        self.findings.append(
            Finding(
                kind=_KIND,
                node=n.name,
                severity=spec.severity,
                message=msg,
                status="predicted",
                produced=produced.to_dict() if produced is not None else None,
                expected=exp,
                edge=edge,
                fix=spec.fix,
                source=_source_line(n.meta.get("stack_trace")),
            )
        )


def predict_boundaries(program: Any, partitioner: Any, name: str = "") -> Report:
    """Predict, before lowering, the delegate boundaries an Arm partitioner
    will cut that the backend's fold pass turns into dtype mismatches.

    `program` is the converted program exported with ``torch.export.export``
    (aten dialect), an edge ``ExportedProgram`` or an ``EdgeProgramManager``;
    `partitioner` a ``TOSAPartitioner`` / ``EthosUPartitioner`` (its
    ``additional_checks`` included). Only the partitioner's tagging runs, on
    a copy; nothing is compiled and `program` is not modified. Pass the aten
    program for an exact prediction: it is moved to the edge dialect the way
    ``to_edge_transform_and_lower`` does it for this partitioner (an edge
    program made otherwise may decompose ops the partitioner would keep). The report is
    proved iff no boundary is predicted to break; the lowered-form check
    (``qflow.analyze`` of the lowered program) remains the authority.
    """
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner

    if not isinstance(partitioner, TOSAPartitioner):
        raise InputError(
            f"predict_boundaries knows the Arm backends' fold pass; {type(partitioner).__name__} "
            "is not a TOSAPartitioner (or EthosUPartitioner / VgfPartitioner)"
        )
    edge = copy.deepcopy(_edge_program(program, partitioner))
    result = partitioner.partition(edge)
    p = _Predictor(result.tagged_exported_program, set(result.partition_tags))
    p.run()
    n_bad = len(p.findings)
    return Report(
        proved=n_bad == 0,
        findings=p.findings,
        obligations={"proved": p.checked - n_bad, "violated": n_bad, "unproven": 0},
        form="predicted",
        name=name,
        notes=[
            f"{len(result.partition_tags)} predicted partition(s), {p.checked} boundary edge(s) checked "
            f"(partitioner tagging only: {type(partitioner).__name__})"
        ],
    )
