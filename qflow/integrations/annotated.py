"""Adapter: the annotated form (after `quantizer.annotate`, before `prepare_pt2e`).

Scales and zero points do not exist yet. Each observer group (torchao unions
an edge with its producer when the qspecs are equal, and every
SharedQuantizationSpec with its target) becomes one symbolic domain in z3 —
dtype and range known, scale and zero point free; fixed-qparams specs are
concrete. An obligation is then proved for *every* calibration outcome, or z3
names one where it fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any

import torch
import torch.fx as fx

from qflow.domain import Domain
from qflow.graph import Definition, DefKind, DomainGraph, Obligation, ObligationKind, Symbolic, Value
from qflow.integrations import duplicate_users, observer_calibration
from qflow.integrations.observer_calibration import Alike
from qflow.ir.activations import BOUNDED
from qflow.ir.fx_nodes import Consts, constant_nodes, dtype_name, gemm_weight, removed_by_to_edge, target_name
from qflow.ops import ACCUMULATING, OpClass, base_name, classify
from qflow.ranges import COMPARISONS
from qflow.solvers.prove import _UnionFind
from qflow.targets import OpRule, Target
from qflow.targets import get as get_target

KEY = "quantization_annotation"
_SYMMETRIC = {torch.per_tensor_symmetric, torch.per_channel_symmetric}
_RELU_LIKE = {"relu", "relu_", "relu6", "hardtanh", "hardtanh_"}
_FUSED_PRODUCERS = {"conv1d", "conv2d", "conv3d", "linear"}
_MIN_MAX = {"maximum", "minimum"}


def is_annotated(gm: fx.GraphModule) -> bool:
    return any(KEY in n.meta for n in gm.graph.nodes)


def _fixed(qs: Any) -> Domain | None:
    """Concrete qparams of a fixed spec (FixedQParamsQuantizationSpec, or a
    QuantizationSpec whose observer is a FixedQParamsObserver)."""
    scale = getattr(qs, "scale", None)
    zp = getattr(qs, "zero_point", None)
    if scale is None:
        ctor = getattr(qs, "observer_or_fake_quant_ctr", None)
        kw = getattr(getattr(ctor, "p", None), "keywords", {}) or {}
        scale, zp = kw.get("scale"), kw.get("zero_point")
    if scale is None or zp is None:
        return None
    lo, hi = _range(qs)
    return Domain.quantized(dtype_name(qs.dtype), float(scale), int(zp), lo, hi)


def _range(qs: Any) -> tuple[int, int]:
    info = torch.iinfo(qs.dtype) if not qs.dtype.is_floating_point else None
    lo = qs.quant_min if getattr(qs, "quant_min", None) is not None else (info.min if info else 0)
    hi = qs.quant_max if getattr(qs, "quant_max", None) is not None else (info.max if info else 0)
    return int(lo), int(hi)


class AnnotatedAdapter:
    def __init__(self, gm: fx.GraphModule, target: Target | None = None) -> None:
        self.gm = gm
        self.target = target or get_target(None)
        self.dg = DomainGraph(form="annotated", target=self.target.name)
        self.uf = _UnionFind()
        self.spec: dict[tuple[str, ...], Any] = {}
        self._members = [get_target(m) for m in self.target.members] or [self.target]
        #: Nodes computed from constants only (a LayerNorm weight's reshape): the lowering computes them
        #: ahead of time, in float, as the Q/DQ reader knows (`FxAdapter._from_constants`).
        self._from_constants = constant_nodes(gm.graph, Consts(gm, None))
        #: Input edges (producer, op) of a pass-through op whose observers calibrate alike short of one
        #: domain: a mirrored zero point (`Alike.SAME_SCALE`) or the observer's decision (the reason).
        self._alike: dict[tuple[str, str], tuple[Alike, str]] = {}

    @staticmethod
    def out_key(n: fx.Node) -> tuple[str, ...]:
        return ("out", n.name)

    @staticmethod
    def in_key(consumer: fx.Node, producer: fx.Node) -> tuple[str, ...]:
        return ("in", consumer.name, producer.name)

    def _ref_key(self, target: Any) -> tuple[str, ...]:
        if isinstance(target, tuple):  # an edge (producer, consumer)
            return self.in_key(target[1], target[0])
        return self.out_key(target)

    def _share_observers(self) -> None:
        """The observer groups prepare_pt2e makes, by its own function: besides every
        SharedQuantizationSpec, an input edge shares its producer's output observer and its other users'
        edges whenever their root qspecs agree in dtype, range, scheme and fixed qparams (implicit
        sharing: a relu whose cat input is shared with a signed tensor is calibrated on that tensor too,
        campaign case 00079-arm-pt). (Imported here: prepare_pt2e's module imports torch._dynamo, which
        reading a saved program must not pay for.)"""
        from torchao.quantization.pt2e.prepare import _get_edge_or_node_to_group_id

        groups = _get_edge_or_node_to_group_id(self._qspecs())
        first: dict[int, str] = {}
        for e, group in groups.items():
            key = "|".join(self.in_key(e[1], e[0]) if isinstance(e, tuple) else self.out_key(e))
            if key in self.uf.parent:
                self.uf.union(first.setdefault(group, key), key)

    def _qspecs(self) -> dict[Any, Any]:
        """prepare_pt2e's map from each input edge and output to its qspec, over this graph's own nodes:
        a deep-copied graph's annotations keep the original nodes as keys and in its shared qspecs."""
        nodes = {n.name: n for n in self.gm.graph.nodes}

        def here(edge_or_node: Any) -> Any:
            if isinstance(edge_or_node, tuple):
                return nodes[edge_or_node[0].name], nodes[edge_or_node[1].name]
            return nodes[edge_or_node.name]

        def spec(qs: Any) -> Any:
            shared = type(qs).__name__ == "SharedQuantizationSpec"
            return dataclasses.replace(qs, edge_or_node=here(qs.edge_or_node)) if shared else qs

        out: dict[Any, Any] = {}
        for n in self.gm.graph.nodes:
            a = n.meta.get(KEY)
            if a is None:
                continue
            for p, qs in a.input_qspec_map.items():
                out[(nodes[p.name], n)] = spec(qs)
            if a.output_qspec is not None:
                out[n] = spec(a.output_qspec)
        return out

    def _register(self, key: tuple[str, ...], qs: Any) -> None:
        kind = type(qs).__name__
        if kind == "DerivedQuantizationSpec":
            return  # bias: derived from other scales, not an activation domain
        self.uf.find("|".join(key))
        if kind == "SharedQuantizationSpec":
            self.uf.union("|".join(key), "|".join(self._ref_key(qs.edge_or_node)))
        else:
            self.spec[key] = qs

    def build(self) -> DomainGraph:
        anns = {n: n.meta[KEY] for n in self.gm.graph.nodes if KEY in n.meta}
        for n, a in anns.items():
            for p, qs in a.input_qspec_map.items():
                if qs is not None:
                    self._register(self.in_key(n, p), qs)
            if a.output_qspec is not None:
                self._register(self.out_key(n), a.output_qspec)
        self._share_observers()
        self._calibrated_alike(anns)
        twins = self._twins(list(anns))
        self._values()
        for n, a in anns.items():
            self._obligations(n, a)
        self._skipped_requants(anns)
        self._comparisons_before_calibration(anns)
        self._min_max_before_calibration(anns)
        self._wide_accumulators_before_calibration(anns)
        self._ignored_variants()
        self._written_gemm_operands()
        merging = tuple(t.name for t in self._members if t.merges_duplicate_users)
        merge_keys = duplicate_users.keys(self.gm) if twins and merging else {}
        for kept, merged in twins if merging else ():
            fixed = all(self.dg.value(n.name).definition.kind is DefKind.FACT for n in (kept, merged))
            if fixed and not duplicate_users.chained(merged, merge_keys):  # (two fixed domains: known now)
                self.dg.oblige(
                    Obligation(ObligationKind.SAME_AS_FIRST, node=merged.name, value=merged.name, other=kept.name,
                               finding_kind=duplicate_users.KIND, targets=merging)
                )  # fmt: skip
                continue
            why = (
                f"{merged.name} computes what {kept.name} computes (same op, same input), and the backend merges "
                "them after folding the Q/DQ nodes (Arm FuseDuplicateUsersPass); their output observers are not "
                "forced into one domain, or it is a duplicate only through a chain of merges the partitioner may "
                "split, so whether the merge reads codes in the wrong one is known only after calibration and "
                "partitioning (analyze the converted program and its folded partitions)"
            )
            self.dg.oblige_unbounded(merged.name, "its merge", duplicate_users.KIND, why, merging)
        return self.dg

    def _calibrated_alike(self, anns: dict[fx.Node, Any]) -> None:
        """A pass-through op whose input and output observers are made by one qspec and see nothing but
        those two tensors calibrates them by a rule known now (`observer_calibration`): one observer
        group when the domains always agree, else the rest is recorded for its obligation."""
        calls = [(n, a) for n, a in anns.items() if n.op == "call_function"]
        values_of: dict[str, str] = {}  # each tensor's first producer up a chain of ops that keep its values
        for n, a in calls:
            if observer_calibration.keeps_values(base_name(target_name(n))) and len(a.input_qspec_map) == 1:
                [p] = a.input_qspec_map
                values_of[n.name] = values_of.get(p.name, p.name)
        seen: dict[str, set[str]] = {}  # observer group → the values its observers see
        specs: dict[str, list[Any]] = {}  # observer group → its qspecs
        for k in self.uf.parent:
            key = k.split("|")
            tensor = key[1] if key[0] == "out" else key[2]
            seen.setdefault(self.uf.find(k), set()).add(values_of.get(tensor, tensor))
        for k, qs in self.spec.items():
            specs.setdefault(self.uf.find("|".join(k)), []).append(qs)
        for n, a in calls:
            op, out = base_name(target_name(n)), "|".join(self.out_key(n))
            for p in a.input_qspec_map:
                edge = "|".join(self.in_key(n, p))
                if out not in self.uf.parent or edge not in self.uf.parent:
                    continue
                ge, go = self.uf.find(edge), self.uf.find(out)
                alone = seen[ge] == {values_of.get(p.name, p.name)} and seen[go] == {values_of.get(n.name, n.name)}
                one = specs.get(ge, []) + specs.get(go, [])
                if ge == go or not alone or not one or any(qs != one[0] for qs in one):
                    continue
                known = observer_calibration.alike(op, one[0])
                if known is not None and known[0] is Alike.SAME:
                    self.uf.union(edge, out)
                    root = self.uf.find(edge)
                    seen[root], specs[root] = seen.pop(ge) | seen.pop(go), specs.pop(ge, []) + specs.pop(go, [])
                elif known is not None:
                    self._alike[(p.name, n.name)] = known

    def _twins(self, nodes: list[fx.Node]) -> list[tuple[fx.Node, fx.Node]]:
        """Duplicate users a backend may merge after folding (same op, same arguments), as (kept, merged)
        pairs whose output domains calibration may make differ. Two with observers of one qspec each
        that observe nothing but their own output calibrate alike (equal tensors, one observer kind):
        they are one group."""
        groups: dict[Hashable, list[fx.Node]] = {}
        merge_keys = duplicate_users.keys(self.gm)
        for n in nodes:
            if "|".join(self.out_key(n)) in self.uf.parent and (key := merge_keys.get(n)) is not None:
                groups.setdefault(key, []).append(n)
        pairs = []
        for kept, *others in (g for g in groups.values() if len(g) > 1):
            for m in others:
                a, b = "|".join(self.out_key(kept)), "|".join(self.out_key(m))
                alone = all(self._observes_only(x, n.name) for x, n in ((a, kept), (b, m)))
                if alone and self.spec.get(self.out_key(kept)) == self.spec.get(self.out_key(m)):
                    self.uf.union(a, b)
                elif self.uf.find(a) != self.uf.find(b):
                    pairs.append((kept, m))
        return pairs

    def _definition(self, key: tuple[str, ...]) -> Definition:
        group = self.uf.find("|".join(key))
        members = [k for k in self.spec if self.uf.find("|".join(k)) == group]
        for k in members:
            d = _fixed(self.spec[k])
            if d is not None:
                return Definition(DefKind.FACT, d)
        qs = self.spec[members[0]] if members else None
        if qs is None:
            return Definition(DefKind.FREE, reason="shared with an unannotated tensor")
        lo, hi = _range(qs)
        sym = Symbolic(group, dtype_name(qs.dtype), lo, hi, symmetric=qs.qscheme in _SYMMETRIC)
        return Definition(DefKind.SYMBOLIC, symbolic=sym)

    def _values(self) -> None:
        for key_str in list(self.uf.parent):
            key = tuple(key_str.split("|"))
            name = key[1] if key[0] == "out" else f"{key[2]}->{key[1]}"
            node = next((n for n in self.gm.graph.nodes if n.name == key[1]), None)
            target = target_name(node) if node is not None and node.op == "call_function" else "value"
            self.dg.add_value(Value(name, target, classify(target), self._definition(key)))

    def _obligations(self, n: fx.Node, a: Any) -> None:
        cls = classify(target_name(n)) if n.op == "call_function" else OpClass.UNKNOWN
        out = n.name if self.out_key(n) in self._keys() else None
        rule = self.target.rule(base_name(target_name(n))) if n.op == "call_function" else None
        if removed_by_to_edge(n):
            rule = OpRule.RESCALE
        # ops the target lowers as code copies (or with zero points only) need
        # their output in their input's observer group, for every calibration
        kind = {OpRule.CODE_COPY: "passthrough-domain-change", OpRule.ZP_ONLY: "dropped-scale"}.get(rule)  # type: ignore[arg-type]
        if cls is OpClass.PASSTHROUGH and rule is None:
            kind = "passthrough-domain-change"
        if kind == "passthrough-domain-change" and n in self._from_constants:
            kind = None  # (no codes to copy: an exact requant of a constant, computed at compile time)
        if kind is not None and out is not None:
            for p in a.input_qspec_map:
                edge_value = f"{p.name}->{n.name}"
                alike = self._alike.get((p.name, n.name))
                if alike is not None and alike[0] is Alike.UNDECIDED:
                    deciding = tuple(t.name for t in self._members if t.rule(base_name(target_name(n))) is rule)
                    self.dg.oblige_unbounded(n.name, p.name, kind, alike[1], deciding or (self.target.name,))
                elif alike is not None:
                    self.dg.oblige(
                        Obligation(ObligationKind.STRUCTURAL, node=n.name, value=n.name, finding_kind=kind,
                                   holds=True, detail=alike[1])
                    )  # fmt: skip
                elif edge_value in self.dg.g:
                    self.dg.add_use(edge_value, n.name, p.name)
                    self.dg.oblige(
                        Obligation(
                            ObligationKind.SAME_AS_FIRST,
                            node=n.name,
                            value=edge_value,
                            other=n.name,
                            edge=(p.name, n.name),
                            arg=p.name,
                            finding_kind=kind,
                        )
                    )
        if cls is OpClass.CONSTANT and out is not None and n.kwargs:
            self._factory(n)
        if base_name(target_name(n)) in _RELU_LIKE and out is not None:
            self._shared_activation(n)
        if base_name(target_name(n)) in BOUNDED and out is not None:
            self._activation_after_calibration(n)
        if out is not None:
            self._laid_out_by_lowering(n)
        if cls is OpClass.COMPUTE:
            self._oblige_measured(n, a)

    def _ignored_variants(self) -> None:
        """An op variant a member target ignores (`Target.ignored_variants`): whether the quantizes after it
        round the gap away, and what follows keeps that within an output LSB, is known once the grids are
        (the Q/DQ form weighs it): unproven here, never proved. (An op left in float has no value here:
        its first reader that has one stands for it.)"""
        varied = {op for t in self._members for op in t.ignored_variants}
        for n in self.gm.graph.nodes:
            op = base_name(target_name(n)) if n.op == "call_function" else ""
            at = next((m.name for m in [n, *n.users] if m.name in self.dg.g), None) if op in varied else None
            for t in self._members if at is not None else ():
                v = t.ignored_variants.get(op)
                if v is None or n.kwargs.get(v.argument) != v.value:
                    continue
                why = (
                    f"{n.name} ({op}, {v.argument}={v.value!r}): {t.name} {v.measured}; off by at most "
                    f"{v.max_error:.3g}, which the calibrated grids decide (analyze the converted program)"
                )
                self.dg.oblige_unbounded(at, f"{n.name}'s result", "ignored-op-variant", why, (t.name,))

    def _written_gemm_operands(self) -> None:
        """The annotated form of the Q/DQ reader's check (`Target.unwritten_gemm_weights`): a 2-D GEMM whose
        weight operand the quantizer quantizes as an activation is left on the CPU reading an operand the
        delegate before it never writes. (Observers of a prepared graph are stepped through.)"""
        keys = self._keys()
        for n in self.gm.graph.nodes:
            for t in self._members:
                w = gemm_weight(n, t.unwritten_gemm_weights)
                while isinstance(w, fx.Node) and w.op == "call_module" and w.args and isinstance(w.args[0], fx.Node):
                    w = w.args[0]
                quantized = isinstance(w, fx.Node) and (self.out_key(w) in keys or self.in_key(n, w) in keys)
                if quantized and w.op == "call_function":
                    self.dg.oblige_written_operand(n.name, base_name(target_name(n)), w.name, t.name)

    def _activation_dtype(self, n: fx.Node, a: Any) -> str | None:
        """The dtype of the first annotated tensor input, in argument order (the activation, as
        the Q/DQ form reads it from the first dequantize), resolved through shared specs. By name:
        a deep-copied graph's annotations keep the original nodes as their keys."""
        annotated = {p.name for p, qs in a.input_qspec_map.items() if qs is not None}
        for p in n.all_input_nodes:
            if p.name not in annotated:
                continue
            group = self.uf.find("|".join(self.in_key(n, p)))
            qs = next((self.spec[k] for k in self.spec if self.uf.find("|".join(k)) == group), None)
            if qs is not None and not qs.dtype.is_floating_point:
                return dtype_name(qs.dtype)
        return None

    def _oblige_measured(self, n: fx.Node, a: Any) -> None:
        """The annotated form of the Q/DQ reader's check (issue #30): a compute op the quantizer
        marks for integer codes must have a lowering measured to compute right on each target
        that lowers it (`Target.validated`); else its obligations are unproven, never proved."""
        dtype = self._activation_dtype(n, a)
        if dtype is None:
            return
        op = base_name(target_name(n))
        unmeasured = tuple(
            t.name
            for t in self._members
            if t.rule(op) is not OpRule.CPU_FLOAT
            and t.lowering_unmeasured(op, dtype)
            and not (t.float_unless_qdq and a.output_qspec is None)  # (no Q after it: float there)
        )
        if not unmeasured:
            return
        how = f"annotated for integer codes with {dtype} activations"
        measured = "; ".join(
            f"{t.name}: {w}" for t in self._members if t.name in unmeasured and (w := t.measured_off_by(op, dtype))
        )
        self.dg.oblige_measured_lowering(n.name, target_name(n), how, unmeasured, measured or None)

    def _observes_only(self, key: str, name: str) -> bool:
        """Does every qspec in `key`'s observer group observe the tensor `name` (its output, or an
        input edge that reads it)?"""
        group = self.uf.find(key)
        members = [k.split("|") for k in self.uf.parent if self.uf.find(k) == group]
        return all((k[1] if k[0] == "out" else k[2]) == name for k in members)

    def _keys(self) -> set[tuple[str, ...]]:
        return {tuple(k.split("|")) for k in self.uf.parent}

    def _factory(self, n: fx.Node) -> None:
        """Seed 003: torchao < 0.16 asserts on an annotated op with kwargs."""
        fails = not prepare_accepts_kwargs()
        self.dg.oblige(
            Obligation(
                ObligationKind.STRUCTURAL,
                node=n.name,
                value=n.name,
                finding_kind="annotated-factory-op",
                holds=not fails,
                inform=not fails,
                detail=(
                    f"{n.name} ({target_name(n)}) is a constant/factory op with kwargs {dict(n.kwargs)} but carries "
                    "an output qspec. "
                    + (
                        "The installed torchao's prepare_pt2e asserts 'expecting kwargs for aten op IR to be empty'."
                        if fails
                        else "The installed torchao accepts it (its prepare skips non-tensor kwargs); "
                        "torchao < 0.16 asserts. Factory outputs are domain-free: let the consumer decide."
                    )
                ),
            )
        )

    def _skipped_requants(self, anns: dict[fx.Node, Any]) -> None:
        """Where a member target's backend may compute a consumer on its producer's unrounded result
        (its ``skipped_requants_before_calibration`` hook), the consumer is unproven there, as in the
        Q/DQ form (which knows the calibrated scales, and proves it where they do not compose)."""
        by_group: dict[str, Any] = {}
        for k, qs in self.spec.items():
            by_group.setdefault(self.uf.find("|".join(k)), qs)

        def dtype(n: fx.Node) -> str | None:
            a = anns.get(n)
            if a is None or a.output_qspec is None:
                return None
            d = getattr(by_group.get(self.uf.find("|".join(self.out_key(n)))), "dtype", None)
            return dtype_name(d) if d is not None and not d.is_floating_point else None

        for t in self._members:
            find = t.hook("skipped_requants_before_calibration")
            for producer, consumer, why in find(self.gm, dtype) if find is not None else ():
                if consumer in self.dg.g:
                    reason = f"{consumer} reads {producer}, but {why}"
                    self.dg.oblige_unbounded(consumer, f"operand {producer}", "skipped-requant", reason, (t.name,))

    def _comparisons_before_calibration(self, anns: dict[fx.Node, Any]) -> None:
        """A comparison whose two operands are not observed as one: on a target that compares two grids on
        rounded codes (the ``rounded_comparisons`` hook), whether a pair of codes compares the other way is
        known only once the grids are (the Q/DQ form checks them): unproven here, never proved."""
        rounding = tuple(t.name for t in self._members if t.hook("rounded_comparisons") is not None)
        for n in anns if rounding else ():
            args = [x for x in n.args[:2] if isinstance(x, fx.Node)]
            # (the annotated graph has no value for a bool: the mask's first reader stands for it)
            at = next((m.name for m in [n, *n.users] if m.name in self.dg.g), None)
            if base_name(target_name(n)) not in COMPARISONS or len(args) != 2 or at is None:
                continue
            keys = ["|".join(self.in_key(n, x)) for x in args]
            if all(k in self.uf.parent for k in keys) and self.uf.find(keys[0]) != self.uf.find(keys[1]):
                why = (
                    f"{n.name} compares two operands observed apart: {', '.join(rounding)} rescales both onto the "
                    "finer grid and rounds the coarser's codes, so a pair of codes may compare the other way once "
                    "calibrated (analyze the converted program)"
                )
                self.dg.oblige_unbounded(at, f"{n.name}'s operands", "rounded-comparison", why, rounding)

    def _min_max_before_calibration(self, anns: dict[fx.Node, Any]) -> None:
        """A maximum / minimum whose two operands are not observed as one: on a target that rounds its result
        twice (the ``rounded_twice`` hook), whether that moves a code, and whether what follows makes the code
        many, is known only once the grids are (the Q/DQ form weighs it): unproven here, never proved."""
        rounding = tuple(t.name for t in self._members if t.hook("rounded_twice") is not None)
        for n in anns if rounding else ():
            args = [x for x in n.args[:2] if isinstance(x, fx.Node)]
            if base_name(target_name(n)) not in _MIN_MAX or len(args) != 2 or n.name not in self.dg.g:
                continue
            keys = ["|".join(self.in_key(n, x)) for x in args]
            if all(k in self.uf.parent for k in keys) and self.uf.find(keys[0]) != self.uf.find(keys[1]):
                why = (
                    f"{n.name} takes the {base_name(target_name(n))} of two operands observed apart: "
                    f"{', '.join(rounding)} rescales both onto the finer grid and the result onto its own, rounding "
                    "the coarser operand twice, one code off where what follows may make it many (analyze the "
                    "converted program)"
                )
                self.dg.oblige_unbounded(n.name, "its rounding", "rounded-twice", why, rounding)

    def _wide_accumulators_before_calibration(self, anns: dict[fx.Node, Any]) -> None:
        """A conv / matmul of int16 activations into int16 on a target that rounds it one code off (the
        ``rounded_twice`` hook: Arm's 16-bit multiplier for an INT48 accumulator): whether what follows makes that
        code many is known only once the grids are (the Q/DQ form weighs it) — unproven here, unless only the
        program's outputs read it."""
        rounding = tuple(t.name for t in self._members if t.hook("rounded_twice") is not None)
        for n, a in anns.items() if rounding else ():
            if base_name(target_name(n)) not in ACCUMULATING or n.name not in self.dg.g or a.output_qspec is None:
                continue
            ins = [getattr(qs, "dtype", None) for qs in a.input_qspec_map.values()]
            if str(getattr(a.output_qspec, "dtype", None)) != "torch.int16" or "torch.int16" not in map(str, ins):
                continue
            if all(u.op == "output" for u in n.users):
                continue
            why = (
                f"{n.name} ({base_name(target_name(n))}) of int16 activations into int16: {', '.join(rounding)} "
                "rescales its INT48 accumulator with a 16-bit multiplier, one code off the program's over the int16 "
                "range, which what follows may make many (analyze the converted program)"
            )
            self.dg.oblige_unbounded(n.name, "its rounding", "rounded-twice", why, rounding)

    def _activation_after_calibration(self, n: fx.Node) -> None:
        """On a target whose lowering of an activation is decided by the calibrated program, the
        annotated graph cannot say whether it computes right: unproven here, never proved."""
        deciding = tuple(t.name for t in self._members if t.activations_decided_after_calibration)
        if not deciding:
            return
        why = (
            f"whether the {', '.join(deciding)} lowering fuses {n.name} ({target_name(n)}) into its producer, "
            "rewrites it into a clamp on codes, or leaves it on the codes with its bounds in real units (a "
            "miscompile) depends on the calibrated program (analyze the converted program)"
        )
        self.dg.oblige_unbounded(n.name, "its lowering", "real-constant-on-codes", why, deciding)

    def _laid_out_by_lowering(self, n: fx.Node) -> None:
        """An op whose lowering writes its arguments for the layout its input has when the lowering
        runs: the annotated graph cannot say it computes right (unproven here, never proved)."""
        deciding = tuple(t.name for t in self._members if base_name(target_name(n)) in t.laid_out_by_lowering)
        if deciding:
            why = (f"the {', '.join(deciding)} lowering writes {n.name}'s ({target_name(n)}) arguments in the memory "
                   "order its input has when the lowering runs (analyze the converted program)")  # fmt: skip
            self.dg.oblige_unbounded(n.name, "its lowering", "kernel-argument-mismatch", why, deciding)

    def _shared_activation(self, n: fx.Node) -> None:
        """A fused conv/linear → relu pattern needs zp == qmin; sharing the relu's
        observer with a tensor that can be negative makes zp > qmin likely."""
        prod = n.args[0] if n.args else None
        if not isinstance(prod, fx.Node) or base_name(target_name(prod)) not in _FUSED_PRODUCERS:
            return
        group = self.uf.find("|".join(self.out_key(n)))
        others = sorted(
            k.split("|")[-1]
            for k in self.uf.parent
            if self.uf.find(k) == group and k.split("|")[-1] not in (n.name,) and k.startswith("out|")
        )
        nodes = {x.name: x for x in self.gm.graph.nodes}
        signed = [o for o in others if o in nodes and not _non_negative(nodes[o])]
        if not signed:
            return
        self.dg.oblige(
            Obligation(
                ObligationKind.STRUCTURAL,
                node=n.name,
                value=n.name,
                finding_kind="non-fuseable-activation",
                holds=False,
                severity="warning",
                detail=(
                    f"{n.name} is fused into {prod.name} (zero point must equal qmin), but its observer is shared "
                    f"with {', '.join(signed)}, which can be negative: calibration will put zp above qmin, and "
                    "the installed ExecuTorch then fuses it anyway by narrowing qmin (values below 0 leak)."
                ),
            )
        )


def _non_negative(n: fx.Node) -> bool:
    """A relu-like output, or a pass-through op of only such tensors."""
    if n.op != "call_function":
        return False
    name = target_name(n)
    if base_name(name) in _RELU_LIKE:
        return True
    if classify(name) is not OpClass.PASSTHROUGH:
        return False
    srcs = [a for a in n.all_input_nodes if a.op != "get_attr"]
    return bool(srcs) and all(_non_negative(a) for a in srcs)


def prepare_accepts_kwargs() -> bool:
    """torchao ≥ 0.16 prepares annotated ops with non-tensor kwargs."""
    try:
        from importlib.metadata import version

        major, minor = (int(x) for x in version("torchao").split(".")[:2])
    except Exception:
        return False
    return (major, minor) >= (0, 16)


def build(gm: fx.GraphModule, target: Target | None = None) -> DomainGraph:
    return AnnotatedAdapter(gm, target).build()
