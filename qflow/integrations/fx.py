"""Adapter: torch.fx graphs (PT2E Q/DQ, ExecuTorch edge, Arm folded) → DomainGraph.

qflow reads a Q/DQ graph in *integer-lowering semantics*: a dequantized
tensor keeps the grid of the domain it came from, and an op between a DQ and
a Q is understood to run on the integer codes, which is what every integer
backend (and the Arm `FoldAndAnnotateQParamsPass`) makes of it. So the
quantize after a pass-through op must not change the domain, the inputs of a
cat must share one domain, and so on — each of those is an obligation.

The folded form (``node.meta["input_qparams"]`` / ``["output_qparams"]``)
reads the same way: input qparams are declarations, a compute op's output
qparams are a fact its rescale realizes, a pass-through op's output qparams
are only a *claim* that must equal its input domain.

`FxAdapter` reads the Q/DQ form here; each other job is a module of its own that the
adapter mixes in: the folded form (`fx_folded`), delegate calls and their boundaries in
a lowered program (`fx_delegates`), and control-flow subgraphs (`fx_control_flow`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from qflow import bounds, impact
from qflow.domain import DTYPE_RANGE, FLOAT, Domain
from qflow.errors import InputError
from qflow.gc_pause import paused_gc
from qflow.graph import (
    Definition,
    DefKind,
    DomainGraph,
    Obligation,
    ObligationKind,
    OneCode,
    Value,
    float_fact,
    integer_data,
)
from qflow.integrations import bias_domain, duplicate_users, ignored_variants, masked
from qflow.integrations.fx_control_flow import ControlFlowReading
from qflow.integrations.fx_delegates import DelegateReading
from qflow.integrations.fx_folded import FoldedReading, constant_reals
from qflow.ir import activations, copy_chains, delegate, gains, int_matmul, quantized_embedding
from qflow.ir.fx_nodes import (
    DOMAIN_FREE_DTYPES,
    SLICES,
    Consts,
    all_float_outputs,
    arg_label,
    constant_nodes,
    detect_form,
    dtype_name,
    gemm_weight,
    is_float,
    is_shape_scalar,
    module_path,
    numel_of,
    qdq_domain,
    removed_by_to_edge,
    scalar_operands,
    static_shape,
    target_name,
    tensor_args,
    val_dtype,
    val_of,
)
from qflow.ops import (
    CASTS,
    CONTROL_FLOW,
    INDEX_ARGS,
    MULTI_INPUT_IDENTITY,
    SELECT_INPUTS,
    OpClass,
    base_name,
    classify,
    code_sources,
)
from qflow.targets import OpRule, Target
from qflow.targets import get as get_target
from qflow.targets.contract import STRICTNESS, Outcome

FORMS = ("qdq", "folded", "lowered")

#: compared against, never handed out (a Definition is mutable)
_FLOAT_FACT = float_fact()


#: the integer dtypes a weight's codes are stored in (a cast of one to float is torchao's int8
#: weight-only dequantize, `_casts_weight_codes`)
WEIGHT_CODES = frozenset({"int4", "int8", "uint8", "int16"})


class FxAdapter(ControlFlowReading, FoldedReading, DelegateReading):
    def __init__(
        self,
        gm: fx.GraphModule,
        ep: Any | None,
        form: str,
        target: Target | None = None,
        carry: bool = True,
        reference: Any = None,
        inputs: dict[str, Definition] | None = None,
        inner: bool = False,
    ) -> None:
        if form not in FORMS:
            raise InputError(f"unknown form {form!r}; expected one of {FORMS}")
        self.gm, self.ep, self.form = gm, ep, form
        #: a partition or a branch read for the program around it (which weighs what its values become)
        self.inner = inner
        self.target = target or get_target(None)
        self.consts = Consts(gm, ep)
        if form == "folded":
            self.consts.reals = constant_reals(gm, self.consts)
        self.dg = DomainGraph(form=form, target=self.target.name)
        self.delegates: dict[str, tuple[Any, list[delegate.BoundaryOutput]]] = {}
        from qflow import targets

        #: the targets whose rules count (a combined target's members), looked up once
        self._members = [targets.get(m) for m in self.target.members] or [self.target]
        self._node_readers: list[Callable[..., bool]] | None = None
        self._constant_nodes: set[fx.Node] | None = None
        #: what the program this one came from declares, as the target's backend read it
        self.reference = reference
        self._marking = [t.lowers_only_marked for t in self._members if t.lowers_only_marked is not None]
        self._sandwich = any(t.float_unless_qdq for t in self._members)
        self._sandwich_matters: dict[str, bool] = {}  # op → can the sandwich question change its rule
        self._min_inputs = [t for t in self._members if t.delegated_min_inputs]
        self._min_input_ops = {op for t in self._min_inputs for op in t.delegated_min_inputs}
        self._rule_cache: dict[tuple[str, tuple[bool, ...]], tuple[dict[str, OpRule], OpRule | None]] = {}
        self._by_node: dict[fx.Node, tuple[dict[str, OpRule], OpRule | None]] = {}
        self._classes: dict[fx.Node, OpClass] = {}
        #: quantizes whose requant a code copy drops and later copies carry (copy_chains)
        self._carried: dict[str, copy_chains.Carry] = {}
        self._carry = carry
        #: torchao's integer matmul recipes, by each of their integer ops and their float result
        self._int_matmuls: dict[fx.Node, int_matmul.IntMatmul] = {}
        #: what the caller knows of some placeholders (a folded control-flow subgraph's inputs)
        self._inputs = inputs or {}
        #: each folded control-flow node's results by index (fx_control_flow)
        self._flow_results: dict[str, dict[int, Definition]] = {}

    # -- classification ---------------------------------------------------------
    def _op_class(self, node: fx.Node) -> OpClass:
        cls = self._classes.get(node)
        if cls is None:
            cls = classify(target_name(node)) if node.op == "call_function" else OpClass.UNKNOWN
            if cls is OpClass.UNKNOWN and node.op == "call_function" and base_name(target_name(node)) in CASTS:
                cls = OpClass.DEQUANTIZE if self._casts_weight_codes(node) else self._cast_class(node)
            self._classes[node] = cls
        return cls

    def _cast_class(self, node: fx.Node) -> OpClass:
        """A cast that keeps each value (the same dtype: a dim-order copy; a wider integer) copies it: a
        pass-through. One that changes it computes a new value (a float's rounding to fp16, a narrower
        integer) and one that reads integers as reals reads the numbers they are: a compute op, with what
        that asks of its input and lowering. A quantize's codes (through copies) cast to another dtype are
        integer arithmetic on codes or a dequantize qflow does not know the scale of (torchao's recipes
        it does not recognise): unknown, as any op it does not model."""
        x = node.args[0] if node.args else None
        src, dst = (val_dtype(x) if isinstance(x, fx.Node) else None), val_dtype(node)
        if src is None or dst is None:
            return OpClass.UNKNOWN
        if src == dst:
            return OpClass.PASSTHROUGH
        if not src.is_floating_point and self._op_class(self._through_copies(x)) is OpClass.QUANTIZE:
            return OpClass.UNKNOWN
        return OpClass.PASSTHROUGH if _holds_every_integer(src, dst) else OpClass.COMPUTE

    def _casts_weight_codes(self, node: fx.Node) -> bool:
        """A cast to float of integer codes computed from constants only: torchao's int8 weight-only
        linear (Int8WeightOnlyConfig) multiplies by the codes as reals and scales the product after,
        so the cast dequantizes a weight whose scale the program applies elsewhere."""
        if node.op != "call_function" or base_name(target_name(node)) not in CASTS or not node.args:
            return False
        x = node.args[0]
        return (
            isinstance(x, fx.Node)
            and is_float(node)
            and dtype_name(val_dtype(x)) in WEIGHT_CODES
            and self._from_constants(x)
            and not _reads_a_delegate(x)  # (a delegate's integers: a factory's, not a weight's codes)
        )

    def _rules(self, node: fx.Node) -> dict[str, OpRule]:
        """Each (member) target's rule for a domain change across `node`. A
        backend that lowers only the nodes its quantizer marked leaves an
        unmarked one on the CPU, in float. (Shared per op and marking: do not mutate.)"""
        return self._node_rules(node)[0]

    def _node_rules(self, node: fx.Node) -> tuple[dict[str, OpRule], OpRule | None]:
        """(each target's rule, the strictest) for `node`, read once per node:
        the graph does not change while it is read."""
        hit = self._by_node.get(node)
        if hit is None:
            if node.op != "call_function":
                hit = ({}, None)
            else:
                op = base_name(target_name(node))
                if op in SLICES and removed_by_to_edge(node) or op in CASTS and self._op_class(node) is OpClass.COMPUTE:
                    hit = ({t.name: OpRule.RESCALE for t in self._members}, OpRule.RESCALE)  # (a new value)
                else:
                    hit = self._rules_of(op, self._marks(node, op))
            self._by_node[node] = hit
        return hit

    def _rules_of(self, op: str, marks: tuple[bool, ...]) -> tuple[dict[str, OpRule], OpRule | None]:
        """(each target's rule, the strictest) for op base name `op`, computed once per op and marking."""
        key = (op, marks)
        hit = self._rule_cache.get(key)
        if hit is None:
            rules = self._compute_rules(op, marks)
            strictest = max(rules.values(), key=STRICTNESS.index) if rules else None
            hit = self._rule_cache[key] = (rules, strictest)
        return hit

    def _marks(self, node: fx.Node, op: str) -> tuple[bool, ...]:
        """For each member target that lowers only marked nodes: did its quantizer mark `node`?
        Then, when a member computes ops outside a DQ → op → Q sandwich in float: is `node` in one?
        Then, for each member that delegates some ops only with enough inputs: has `node` enough?
        (A question whose answer cannot change `op`'s rule is answered True unasked.)"""
        out = []
        if self._marking:
            custom = node.meta.get("custom") or {}
            for key, fld in self._marking:
                info = custom.get(key)
                out.append(bool(info and info.get(fld)))
        if self._sandwich:
            asks = self._sandwich_matters.get(op)
            if asks is None:
                asks = self._sandwich_matters[op] = any(
                    t.float_unless_qdq and t.effective_rule(op) in (OpRule.CODE_COPY, OpRule.ZP_ONLY)
                    for t in self._members
                )
            out.append(self._between_qdq(node) if asks else True)
        if self._min_inputs:
            n = len(node.all_input_nodes) if op in self._min_input_ops else 0
            out.extend(n >= t.delegated_min_inputs.get(op, 0) for t in self._min_inputs)
        return tuple(out)

    def _compute_rules(self, op: str, marks: tuple[bool, ...]) -> dict[str, OpRule]:
        out: dict[str, OpRule] = {}
        marked = iter(marks[: len(self._marking)])
        sandwiched = marks[len(self._marking)] if self._sandwich else True
        enough = dict(zip((t.name for t in self._min_inputs), marks[len(marks) - len(self._min_inputs) :], strict=True))
        for t in self._members:
            # each target's PT2E default counts: one that rescales must not
            # relax another's code copy
            r = t.effective_rule(op)
            if t.lowers_only_marked is not None and not next(marked):
                r = OpRule.CPU_FLOAT
            if t.float_unless_qdq and r in (OpRule.CODE_COPY, OpRule.ZP_ONLY) and not sandwiched:
                r = OpRule.CPU_FLOAT
            if not enough.get(t.name, True):  # the partitioner leaves it on the CPU
                r = OpRule.CPU_FLOAT
            out[t.name] = r
        return out

    def _between_qdq(self, node: fx.Node) -> bool:
        """Is every tensor input of `node` a dequantize and every user a quantize?"""
        if not node.users or not all(self._op_class(u) is OpClass.QUANTIZE for u in node.users):
            return False
        ins = [a for _, _, a in tensor_args(node)]
        return bool(ins) and all(self._op_class(a) is OpClass.DEQUANTIZE for a in ins)

    def _rule(self, node: fx.Node) -> OpRule | None:
        """The strictest rule any target applies to `node` (None: its PT2E meaning)."""
        return self._node_rules(node)[1]

    def _copies_codes(self, node: fx.Node) -> bool:
        """Does the target lower `node` as a copy of its input's codes?"""
        rule = self._rule(node)
        if rule is not None:
            return rule is OpRule.CODE_COPY
        return self._op_class(node) in (OpClass.PASSTHROUGH, OpClass.UNKNOWN)

    def _domain_free(self, node: fx.Node) -> bool:
        """Index, mask and shape tensors, sizes, and what a factory op makes (`arange`: real numbers,
        whatever their dtype) carry no quantization domain."""
        cls = self._op_class(node)
        if (node.op == "call_function" and cls is OpClass.CONSTANT) or is_shape_scalar(node):
            return True
        return val_dtype(node) in DOMAIN_FREE_DTYPES and cls not in (OpClass.QUANTIZE, OpClass.DEQUANTIZE)

    # -- build -------------------------------------------------------------------
    def build(self) -> DomainGraph:
        for mm in self.gm.graph.find_nodes(op="call_function", target=torch.ops.aten._int_mm.default):
            recipe = int_matmul.match(mm, self._from_constants)
            if recipe is not None:
                self._int_matmuls.update(dict.fromkeys([*recipe.inner, recipe.result], recipe))
        for node in self.gm.graph.nodes:
            if node.op == "output":
                self.dg.outputs = [a.name for a in node.all_input_nodes if a.name in self.dg.g]
                continue
            if node.op == "call_module" and not node.users:
                continue  # torch.export's _guards_fn and similar
            self._add(node)
        self.dg.settle_inputs("integer graph input")
        merging = tuple(t.name for t in self._members if t.merges_duplicate_users)
        if merging and self.form in ("qdq", "folded"):
            duplicate_users.oblige_distinct_duplicates(self.gm, self.dg, self.consts, merging, self.form == "folded")
        if self.form in ("qdq", "folded"):
            self._oblige_skipped_requants()
            self._oblige_rounded_comparisons()
            self._oblige_rounded_twice()
        adding = tuple(t.name for t in self._members if t.adds_bias_codes)
        if adding and self.form == "qdq":
            bias_domain.oblige_bias_domains(self.gm, self.dg, self.consts, adding)
        if self.form == "qdq" and any(t.ignored_variants for t in self._members):
            ignored_variants.oblige_honoured_variants(self.gm, self.dg, self.consts, self._members)
        if not self.inner:  # (a partition's or a branch's values are weighed with the program around them)
            impact.oblige_one_codes(self.dg)
        if self._carry and not self.target.members and self.target.outcome is Outcome.MISCOMPILE:
            masked.let_go(self.gm, self.dg, self.target.fuses_consecutive_clamps)
        return self.dg

    def _oblige_rounded_comparisons(self) -> None:
        """Where a member target's backend compares two grids on rounded codes (its ``rounded_comparisons``
        hook: Arm's rescale onto the finer one) and some pair of codes compares the other way, what the mask
        selects is unproven there."""
        for t in self._members:
            find = t.hook("rounded_comparisons")
            for c in find(self.gm, self.consts, self.form == "folded") if find is not None else ():
                if c.node in self.dg.g:
                    self.dg.oblige_unbounded(c.node, "its operands", "rounded-comparison", c.detail, (t.name,))

    def _oblige_rounded_twice(self) -> None:
        """Where a member target's backend rounds a result twice (its ``rounded_twice`` hook: Arm's maximum /
        minimum of two grids, an int16 accumulator's 16-bit multiplier), one code off is its contract's own
        rounding; where what follows can make that code more than one output LSB (`impact`: a steep table, an
        argmax, a comparison, a product), unproven there — weighed on the whole program (`build`)."""
        for t in self._members:
            find = t.hook("rounded_twice")
            for r in find(self.gm, self.consts, self.form == "folded") if find is not None else ():
                self.dg.one_code.append(OneCode(r.node, r.value, "rounded-twice", r.detail, (t.name,)))

    def _oblige_skipped_requants(self) -> None:
        """Where a member target's backend computes a consumer on its producer's unrounded result
        (its ``skipped_requants`` hook: the Arm backend's fused rescale pairs), the consumer is
        unproven there."""
        for t in self._members:
            find = t.hook("skipped_requants")
            for s in find(self.gm, self.consts, self.form == "folded") if find is not None else ():
                if s.consumer not in self.dg.g:
                    continue
                if s.moves is None:
                    self.dg.oblige_unbounded(s.consumer, f"operand {s.arg}", "skipped-requant", s.detail, (t.name,))
                    continue
                lsb = s.moves_lsb + 1.0  # the backend rounds once where the program rounds twice
                self.dg.oblige(
                    Obligation(ObligationKind.STRUCTURAL, s.consumer, s.consumer, finding_kind="skipped-clamp",
                               holds=False, targets=(t.name,), detail=s.detail,
                               bound=bounds.Bound(lsb, math.ceil(lsb)))
                )  # fmt: skip

    def _value(self, node: fx.Node, op_class: OpClass, d: Definition, claim: Domain | None = None) -> None:
        meta = node.meta
        val = meta.get("val")
        dt = getattr(val, "dtype", None)
        weighed = op_class is OpClass.COMPUTE  # (a folded partition's weight codes: `Consts.reals`)
        weights = gains.channels(node, self.consts) if weighed else None
        self.dg.add_value(
            Value(
                name=node.name,
                target=target_name(node) if node.op == "call_function" else node.op,
                op_class=op_class,
                definition=d,
                claim=claim,
                dtype=dtype_name(dt) if dt is not None else None,
                numel=numel_of(val),
                stack_trace=meta.get("stack_trace"),
                module_path=module_path(node),
                gain=gains.gain(node, self.consts, weights) if weighed else None,
                channels=weights,
                clamp=gains.clamp(node) if op_class is OpClass.ACTIVATION else None,
                terms=gains.terms(node) if weighed else None,
                values=gains.constant_values(node, self.consts)
                if op_class in (OpClass.DEQUANTIZE, OpClass.CONSTANT)
                else None,
                reduced=gains.reduced(node) if node.op == "call_function" else None,
                scalars=scalar_operands(node),
            )
        )

    def _add(self, node: fx.Node) -> None:
        if node.op in ("placeholder", "get_attr"):
            self._add_leaf(node)
            return
        if node in self._int_matmuls:
            self._add_int_matmul(node, self._int_matmuls[node])
            return
        cls = self._op_class(node)  # (UNKNOWN for a call_module)
        dt = getattr(node.meta.get("val"), "dtype", None)
        # (a backend reads its own kernels first: a comparison it runs on codes has a bool output)
        readable = cls in (OpClass.UNKNOWN, OpClass.ACTIVATION, OpClass.COMPUTE, OpClass.PASSTHROUGH)
        if readable and self._backend_reads(node):
            return
        # (_domain_free, with the class at hand)
        free = dt in DOMAIN_FREE_DTYPES and cls is not OpClass.QUANTIZE and cls is not OpClass.DEQUANTIZE
        if free or cls is OpClass.CONSTANT or is_shape_scalar(node):
            why = "factory op" if cls is OpClass.CONSTANT else f"{dtype_name(dt)} tensor" if free else "size"
            returned = free and cls is OpClass.PASSTHROUGH and self._delegate_output(node) is not None
            self._value(
                node, OpClass.DELEGATE if returned else cls, Definition(DefKind.FREE, reason=f"domain-free {why}")
            )
            if returned:
                self._link_delegate_output(node)  # (a mask the partition computes and returns)
            elif free and node.op == "call_function" and cls is not OpClass.CONSTANT:
                for i, j, a in tensor_args(node):  # (a mask or index computed from values depends on them)
                    if a.name in self.dg.g:
                        self.dg.add_use(a.name, node.name, arg_label(i, j))
            return
        if cls is OpClass.DELEGATE:
            self._add_delegate_call(node)
        elif cls is OpClass.PASSTHROUGH and self._delegate_output(node) is not None:
            self._add_delegate_output(node)
        elif cls is OpClass.QUANTIZE:
            self._add_quantize(node)
        elif cls is OpClass.DEQUANTIZE:
            self._add_dequantize(node)
        elif cls is OpClass.UNKNOWN and base_name(target_name(node)) in CONTROL_FLOW:
            self._add_control_flow(node)
        elif cls is OpClass.UNKNOWN and base_name(target_name(node)) in quantized_embedding.BITS:
            self._add_quantized_embedding(node)
        elif cls is OpClass.PASSTHROUGH and self._flow_result(node) is not None:
            self._add_flow_result(node)
        elif self.form == "folded":
            self._add_folded(node, cls)
        elif self.form == "lowered" and cls in (OpClass.PASSTHROUGH, OpClass.ACTIVATION) and is_float(node):
            self._add_cpu_float(node, cls)
        else:
            self._add_qdq_op(node, cls)

    def _add_leaf(self, node: fx.Node) -> None:
        if node.op == "get_attr" and "lowered_module" in str(node.target):
            return  # the delegate call reads it; it is no tensor
        if node.op == "placeholder" and node.name in self._inputs:
            self._value(node, OpClass.UNKNOWN, self._inputs[node.name])
            return
        if node.op == "get_attr" or self.consts.is_constant(node):
            self._value(node, OpClass.CONSTANT, Definition(DefKind.FREE, reason="constant"))
            return
        dt = val_dtype(node)
        if dt is None or dt.is_floating_point:
            self._value(node, OpClass.CONSTANT, float_fact())
            self.dg.value(node.name).op_class = OpClass.UNKNOWN
            return
        if dt in DOMAIN_FREE_DTYPES:
            self._value(node, OpClass.CONSTANT, Definition(DefKind.FREE, reason="index input"))
            return
        # An integer graph input (a partition's boundary): its domain is set
        # outside this graph; DomainGraph.settle_inputs adopts its first declared use.
        self._value(node, OpClass.UNKNOWN, Definition(DefKind.ALIAS, reason="integer graph input"))

    def _skip_use(self, producer: fx.Node) -> bool:
        v = self.dg.get(producer.name)
        return v is None or v.definition.domain_free

    def _use(
        self,
        producer: fx.Node,
        consumer: fx.Node,
        label: str,
        expected: Domain | None,
        expected_real: bool | None,
        kind: ObligationKind = ObligationKind.USE,
        finding_kind: str = "domain-mismatch",
        allow_real: bool = False,
    ) -> Value | None:
        """Record the use; oblige `expected` where the producer has a domain. The producer's value, or None."""
        pv = self.dg.get(producer.name)
        if pv is None:
            return None
        self.dg.add_use(producer.name, consumer.name, label)
        if expected is None or pv.definition.domain_free:
            return pv
        self.dg.oblige(
            Obligation(
                kind=kind,
                node=consumer.name,
                value=producer.name,
                expected=expected,
                expected_real=expected_real,
                edge=(producer.name, consumer.name),
                arg=label,
                finding_kind=finding_kind,
                allow_float=allow_real,
            )
        )
        return pv

    # -- Q / DQ --------------------------------------------------------------------
    def _data_arg(self, node: fx.Node) -> fx.Node:
        if not node.args or not isinstance(node.args[0], fx.Node):
            raise InputError(f"{target_name(node)} has no tensor input", node.name)
        return node.args[0]

    def _add_quantize(self, node: fx.Node) -> None:
        d = qdq_domain(node, self.consts)
        x = self._data_arg(node)
        self._value(node, OpClass.QUANTIZE, Definition(DefKind.FACT, d, real=False))
        # A quantize takes real numbers; applied to codes already in `d` it is
        # the identity (the fold pass leaves such Q nodes at partition outputs).
        xv = self._use(x, node, "args[0]", d, None, allow_real=True)
        if (
            self.form == "qdq"
            and len(x.users) == 1
            and base_name(target_name(node)) == "quantize_per_tensor"
            and base_name(target_name(x)) in activations.BOUNDED  # (else `check` returns at once)
        ):
            activations.check(x, d, self.dg, node.name, self.target, self._one_code_clamp(x))
            xv = self.dg.get(x.name)  # (check may have changed it)
        if xv is None or xv.claim is not None or xv.definition.domain_free:
            return
        rule = self._rule(x)
        copies = rule is OpRule.CODE_COPY if rule is not None else self._copies_codes(x)  # (_copies_codes)
        # A clamp then a requant is a legal lowering on a target that rescales
        # across activations; on one that copies codes (Arm) the requant is lost.
        if copies and self._from_constants(x):
            return  # (computed at compile time: the quantize is an exact requant of a constant)
        if (xv.op_class is OpClass.UNKNOWN or copies) and xv.definition != _FLOAT_FACT:
            source, why = self._carried_fold(node, x, d) if copies else (x.name, "")
            if source is None:
                return
            across = xv.op_class is OpClass.ACTIVATION
            self.dg.oblige(
                Obligation(
                    kind=ObligationKind.NO_FOLD_CHANGE,
                    node=x.name,
                    value=source,
                    expected=d,
                    detail=why,
                    edge=(x.name, node.name),
                    arg=node.name,
                    allow_float=True,
                    finding_kind="requant-across-activation" if across else "requant-after-passthrough",
                    targets=self._breaking(x, OpRule.CODE_COPY),
                    codes=self._activation_codes(x, d) if across else None,
                )
            )
        elif rule is OpRule.ZP_ONLY:
            self._zp_only(x, self._input_domain(x), d, node.name)

    def _from_constants(self, node: fx.Node) -> bool:
        """Is `node` computed from constants only (a LayerNorm weight's reshape)? The lowering computes
        such a chain ahead of time (measured: transformer campaign 00066-tx-arm-custom, a custom
        domain on the reshape of a LayerNorm weight, exact on the TOSA reference model), and the TOSA
        artifact check anchors what it made (`_fused_const`) by that computation."""
        if self._constant_nodes is None:
            self._constant_nodes = constant_nodes(self.gm.graph, self.consts)
        return node in self._constant_nodes

    def _single_copy(self, node: fx.Node) -> bool:
        """Does the target lower `node` as a copy of its one tensor input's codes?"""
        name = base_name(target_name(node))
        return self._any_copy(node) and name not in MULTI_INPUT_IDENTITY and name not in SELECT_INPUTS

    def _any_copy(self, node: fx.Node) -> bool:
        """Does the target lower `node` as a copy of its inputs' codes (cat and stack included)?"""
        return node.op == "call_function" and self._op_class(node) is not OpClass.UNKNOWN and self._copies_codes(node)

    def _carried_fold(self, q: fx.Node, x: fx.Node, d: Domain) -> tuple[str | None, str]:
        """The fold of quantize `q` into code copy `x` drops a requant into `d`.

        Returns (the value whose domain the codes after `q` are really in, why
        the drop is not carried), or (None, "") when the drop is carried
        (`copy_chains`): then a structural obligation records it, and the
        quantizes below compare against the domain the codes really have."""
        if self.target.members or not self._carry or not self._any_copy(x):
            return x.name, ""
        up = copy_chains.upstream_quantize(x, self._single_copy) if self._single_copy(x) else None
        upstream = self._carried.get(up.name) if up is not None else None
        sources: list[fx.Node] = []
        if upstream:
            actual: Domain | None = upstream.actual
        else:  # the chain starts here: the codes come from dequantizes (through views, cat, stack)
            sources = copy_chains.dequant_leaves(x, self._identity_sources, self._any_copy) or []
            doms = {self._fact_domain(s) for s in sources}
            actual = doms.pop() if len(doms) == 1 else None
        source = upstream.source if upstream else x.name
        if actual is None or actual == d:
            return source, ""
        fuse = self.target.fuses_consecutive_clamps
        carried, why, reached = copy_chains.carry(q, x, actual, d, upstream, sources, self._single_copy, fuse)
        if carried is None:
            return source, f"It is not cancelled further down: {why}."
        self._carried[q.name] = carried
        op = base_name(target_name(x))
        self.dg.oblige(
            Obligation(
                kind=ObligationKind.STRUCTURAL,
                node=x.name,
                value=x.name,
                expected=d,
                edge=(x.name, q.name),
                finding_kind="requant-carried",
                holds=True,
                inform=True,
                detail=(
                    f"{self.target.name} folds the quantize {q.name} into {x.name} ({op}, a code copy) and drops "
                    f"its requant {actual} → {d}: the codes stay in {actual}. Nothing reads them as {d}: they "
                    f"reach {', '.join(reached)} through code copies, checked there against {actual}. {d} "
                    "clips no value the chain keeps, and skipping its rounding moves no value by more than "
                    "a step of the codes' grid."
                ),
            )
        )
        return None, ""

    def _breaking(self, node: fx.Node, rule: OpRule) -> tuple[str, ...]:
        """The member targets of a combined (generic) target whose rule for
        `node` is `rule`: where the obligation breaks. Empty: every target."""
        if not self.target.members:
            return ()
        return tuple(t for t, r in self._rules(node).items() if r is rule)

    def _activation_codes(self, act: fx.Node, d: Domain) -> tuple[int, int] | None:
        """The codes of `d` the lowering of activation `act` keeps when it drops the requant into `d`, when
        every member target that drops it says the same (its ``activation_codes`` hook: Cortex-M's measured
        by running its passes, Arm's the clamp its passes quantize in the output domain), or None."""
        if self._input_domain(act) == d:
            return None
        breaking = set(self._breaking(act, OpRule.CODE_COPY)) or {t.name for t in self._members}
        hooks = [t.hook("activation_codes") for t in self._members if t.name in breaking]
        found = {h(self.reference, act, d) if h is not None else None for h in hooks}
        return found.pop() if len(found) == 1 else None

    def _one_code_clamp(self, act: fx.Node) -> int | None:
        """The one code the clamp the lowering makes of activation `act` outputs whatever it reads, when every
        member target that leaves its producer without a domain measured the same (its ``one_code_clamp`` hook:
        Cortex-M's, by running its passes), or None."""
        hooks = [t.hook("one_code_clamp") for t in self._members if t.unfused_producer is not None]
        found = {h(self.reference, act) if h is not None else None for h in hooks}
        return found.pop() if len(found) == 1 else None

    def _input_domain(self, node: fx.Node) -> Domain | None:
        """The integer grid `node`'s first tensor input is on (a DQ's domain), if known."""
        a = node.args[0] if node.args else None
        return self._fact_domain(a) if isinstance(a, fx.Node) else None

    def _fact_domain(self, a: fx.Node) -> Domain | None:
        """The integer grid value `a` is on, if it is a fact (a Q or DQ)."""
        if a.name not in self.dg.g:
            return None
        d = self.dg.value(a.name).definition
        if d.kind is DefKind.FACT and d.domain is not None and not d.domain.is_float:
            return d.domain
        return None

    def _zp_only(self, node: fx.Node, d_in: Domain | None, d_out: Domain, q_name: str | None) -> None:
        """A target that lowers `node` with zero points only (TOSA NEGATE) keeps
        the input's scale: the output domain must have it too."""
        if d_in is None or d_in.per_channel or d_out.per_channel:
            return
        # scales a hair apart (two observers of one range) may move no reachable code
        bound = bounds.dropped_requant(d_in, d_out, bounds.ZP_ONLY)
        holds = bound is not None and bound.within_rounding
        where = self._breaking(node, OpRule.ZP_ONLY)
        on = ", ".join(where) if where else self.target.name
        op = base_name(target_name(node))
        self.dg.oblige(
            Obligation(
                kind=ObligationKind.STRUCTURAL,
                node=node.name,
                value=node.name,
                expected=d_out,
                edge=(node.name, q_name) if q_name else None,
                finding_kind="dropped-scale",
                holds=holds,
                targets=where,
                detail=(
                    f"{node.name} ({op}) reads codes in {d_in} and its output is declared in {d_out}. "
                    f"On {on} {op} is lowered with the two zero points only and no rescale, so the scale "
                    f"{d_in.scale:.6g} is kept and the declared {d_out.scale:.6g} is silently dropped: every "
                    f"output value is off by the factor {d_in.scale / d_out.scale:.4g}"
                    + (f": it {bound}." if bound is not None else ".")
                ),
                bound=bound,
                fix_domain=Domain.quantized(d_out.dtype, d_in.scale, d_out.zero_point, d_out.qmin, d_out.qmax),
            )
        )

    def _add_dequantize(self, node: fx.Node) -> None:
        if base_name(target_name(node)) in CASTS:  # (weight codes as reals: their scale is applied after)
            dt = dtype_name(val_dtype(node.args[0]))
            d = Domain.run_time(dt, f"cast by {node.name}, scaled after the product", *DTYPE_RANGE[dt])
        else:
            d = qdq_domain(node, self.consts)
        x = self._data_arg(node)
        self._value(node, OpClass.DEQUANTIZE, Definition(DefKind.FACT, d, real=True))
        self._use(x, node, "args[0]", d, False)

    # -- everything else: Q/DQ form ----------------------------------------------------
    def _identity_sources(self, node: fx.Node) -> list[fx.Node]:
        """Tensor inputs that carry codes into a pass-through op's output."""
        srcs = code_sources(base_name(target_name(node)), node.args)
        return [s for s in srcs if isinstance(s, fx.Node) and s.name in self.dg.g]

    def _add_identity(self, node: fx.Node, cls: OpClass, claim: Domain | None) -> None:
        srcs = self._identity_sources(node)
        defining = [s for s in srcs if not self._skip_use(s)]
        if not srcs:
            raise InputError(f"{target_name(node)} is a pass-through op with no tensor input", node.name)
        if not defining:  # all inputs domain-free (e.g. a view of a constant)
            self._value(node, cls, Definition(DefKind.FREE, reason="view of a constant"), claim)
            return
        if len(defining) > 1 and not self._copies_codes(node):
            # a target that rescales (or computes in float) each input into the output's
            # domain: the inputs need not share one, and the output is a new real value
            self._value(node, cls, float_fact(), claim)
            for s in defining:
                self._use(s, node, f"input {s.name}", FLOAT, True)
            return
        d = Definition(
            DefKind.ALIAS,
            sources=tuple(s.name for s in defining),
            reason=f"{base_name(target_name(node))} copies codes",
        )
        self._value(node, cls, d, claim)
        self.dg.oblige_one_input_domain(node.name, [s.name for s in defining])
        if claim is not None:  # a clamp enforces its own range; a copy does not
            self._claim(node, claim, check_range=cls is not OpClass.ACTIVATION)

    def _claim(
        self, node: fx.Node, claim: Domain, kind: str = "passthrough-domain-change", check_range: bool = True
    ) -> None:
        """The node's claimed output domain must be the one it really produces."""
        self.dg.oblige(
            Obligation(
                kind=ObligationKind.CLAIM,
                node=node.name,
                value=node.name,
                expected=claim,
                finding_kind=kind,
                check_range=check_range,
            )
        )

    def _add_qdq_op(self, node: fx.Node, cls: OpClass) -> None:
        if cls in (OpClass.PASSTHROUGH, OpClass.ACTIVATION) or (
            cls is OpClass.COMPUTE and self._rule(node) is OpRule.CODE_COPY
        ):
            self._add_identity(node, cls, None)
            for i, j, a in tensor_args(node):
                if a.name in self.dg.g:
                    self.dg.add_use(a.name, node.name, arg_label(i, j))
            return
        if cls is OpClass.COMPUTE:
            self._value(node, cls, _computed(node))
            for i, j, a in tensor_args(node):
                self._use(a, node, arg_label(i, j), FLOAT, True)
            self._oblige_measured(node, self._lowering_key(node))
            self._oblige_written_gemm_operands(node)
            return
        if cls is OpClass.UNKNOWN and self._computes_on_reals(node):
            self._add_cpu_float(node, OpClass.COMPUTE)
            return
        self._add_unknown(node, None)

    def _through_copies(self, a: fx.Node) -> fx.Node:
        """The node whose values `a` holds, through pass-through ops (a view of a dequantize
        still holds its codes)."""
        while self._op_class(a) is OpClass.PASSTHROUGH and a.args and isinstance(a.args[0], fx.Node):
            a = a.args[0]
        return a

    def _lowering_key(self, node: fx.Node) -> str | None:
        """What a compute op's lowering is validated by (`Target.validated`): the dtype of its
        first dequantized input (static quantization); "dynamic-int8" when an input is
        dequantized from a run-time quantize (a dynamically quantized activation), per token
        ("dynamic-per-tensor-int8" when one scale covers the whole tensor: PT2E's dynamic config);
        "weight-only-int8" when only a weight is, with run-time (torchao affine) qparams —
        float activations, which XNNPACK was measured to lower with the weight's scales dropped."""
        static = dynamic = weight_only = None
        for _, _, a in tensor_args(node):
            src = self._through_copies(a)
            v = self.dg.get(src.name) if self._op_class(src) is OpClass.DEQUANTIZE else None
            d = v.definition.domain if v is not None else None
            if d is None or d.is_float:
                continue
            if d.opaque is None or d.scale or d.axis is not None:
                static = static or (d.dtype if src is a else None)
            elif isinstance(q := src.args[0], fx.Node) and self._op_class(q) is OpClass.QUANTIZE:
                per_tensor = base_name(target_name(q)) == "quantize_per_tensor"
                dynamic = dynamic or f"dynamic-{'per-tensor-' if per_tensor else ''}{d.dtype}"
            else:
                weight_only = weight_only or f"weight-only-{d.dtype}"
        return dynamic or static or weight_only

    def _backend_reads(self, node: fx.Node) -> bool:
        """Does a member target's backend read `node` itself (its `read_node` hook: a kernel
        whose folded integer arguments it checks, e.g. Cortex-M's)?"""
        if self._node_readers is None:
            self._node_readers = [h for t in self._members if (h := t.hook("read_node")) is not None]
            if self.reference is None and self.form == "qdq" and self.ep is not None:
                # (a target that rewrites the program in place: what its passes do with it, measured)
                runs = [h(self.ep) for t in self._members if (h := t.hook("passes_of")) is not None]
                self.reference = runs[0] if runs else None
        return any(read(self.dg, node, self.consts, self.reference) for read in self._node_readers)

    def _computes_on_reals(self, node: fx.Node) -> bool:
        """Is `node` an op whose float output is computed from reals no dequantize produced?
        A backend runs an op on integer codes only when it reads dequantized codes, so whatever
        the op is (aten.rms_norm, a custom kernel), every lowering computes it on reals."""
        if node.op != "call_function" or not all_float_outputs(node):
            return False
        for _, _, a in tensor_args(node):
            if not (is_float(a) or self._domain_free(a)):
                return False
            if self._op_class(self._through_copies(a)) is OpClass.DEQUANTIZE:
                return False
        return True

    def _oblige_measured(self, node: fx.Node, dtype: str | None) -> None:
        """A compute op a target lowers on integer codes (at activation dtype `dtype`) must have been
        measured to compute right there (`Target.validated`); else what it computes is unproven. In a
        folded partition too: the int16 exp / reciprocal of Arm's softmax are still aten ops there."""
        if dtype is None:
            return
        op = base_name(target_name(node))
        rules = self._rules(node)
        # (a dynamic or weight-only linear needs no Q after it to run on codes)
        no_q = dtype.startswith(("dynamic-", "weight-only-"))
        lowering = [
            t
            for t in self._members
            if rules.get(t.name) is not OpRule.CPU_FLOAT
            and t.lowering_unmeasured(op, dtype)
            and not (t.float_unless_qdq and not no_q and not self._between_qdq(node))  # (in float there)
        ]
        for t in lowering:
            if (what := t.measured_miscompile(op, dtype)) is not None:
                self.dg.oblige(
                    Obligation(ObligationKind.STRUCTURAL, node.name, node.name, finding_kind="miscompiled-lowering",
                               holds=False, targets=(t.name,), detail=f"{node.name} ({op}, {dtype}): {what}.")
                )  # fmt: skip
        unmeasured = tuple(t.name for t in lowering if t.measured_miscompile(op, dtype) is None)
        if unmeasured:
            how = f"lowered on integer codes with {dtype} activations"
            measured = "; ".join(
                f"{t.name}: {w}" for t in self._members if t.name in unmeasured and (w := t.measured_off_by(op, dtype))
            )
            self.dg.oblige_measured_lowering(node.name, target_name(node), how, unmeasured, measured or None)

    def _oblige_written_gemm_operands(self, node: fx.Node) -> None:
        """A 2-D GEMM whose weight operand is an activation's dequantize, which a member target leaves on the
        CPU reading an operand its delegate never writes (`Target.unwritten_gemm_weights`): measured wrong."""
        for t in self._members:
            w = gemm_weight(node, t.unwritten_gemm_weights)
            if w is None or self._op_class(w) is not OpClass.DEQUANTIZE:
                continue
            if not (isinstance(q := w.args[0], fx.Node) and self._op_class(q) is OpClass.QUANTIZE):
                continue  # (a constant weight's codes: the partitioner lowers the GEMM itself)
            self.dg.oblige_written_operand(node.name, base_name(target_name(node)), w.name, t.name)

    def _add_cpu_float(self, node: fx.Node, cls: OpClass) -> None:
        """Outside the delegates of a lowered program nothing is lowered any
        more: the portable kernels run a float op on real numbers, so a view or
        a cat between a DQ and a Q copies reals, not codes, and the Q after it
        is an ordinary (exact) quantize."""
        self._value(node, cls, _computed(node))
        indices = INDEX_ARGS.get(base_name(target_name(node)), ())
        for i, j, a in tensor_args(node):
            if i not in indices:
                self._use(a, node, arg_label(i, j), FLOAT, True)
            elif a.name in self.dg.g:  # (addresses, not values: any integer tensor)
                self.dg.add_use(a.name, node.name, arg_label(i, j))

    def _add_quantized_embedding(self, node: fx.Node) -> None:
        """A quantized embedding kernel: real rows dequantized from constant codes by its own scales."""
        a = list(node.args) + [None] * 6

        def shape(x: Any) -> tuple[int, ...] | None:
            v = val_of(x) if isinstance(x, fx.Node) else None
            return static_shape(v) if isinstance(v, torch.Tensor) else None

        op = base_name(target_name(node))
        found = quantized_embedding.problems(op, shape(a[0]) or (), shape(a[1]), shape(a[2]), a[3], a[4], shape(node))
        self._value(node, OpClass.COMPUTE, float_fact())
        for i, j, x in tensor_args(node):
            if x.name in self.dg.g:
                self.dg.add_use(x.name, node.name, arg_label(i, j))
        quantized_embedding.oblige(self.dg, node.name, op, found)

    def _add_int_matmul(self, node: fx.Node, recipe: int_matmul.IntMatmul) -> None:
        """torchao's integer matmul: its integer ops carry no domain of their own; the first reads the
        activation's codes in their quantize's domain, and the float result is the accumulator,
        real once scaled by those codes' scales (checked by the recipe: `kernel-argument-mismatch`)."""
        if node is not recipe.result:
            reason = f"integer arithmetic of the int8 matmul cast to float at {recipe.result.name}"
            self._value(node, OpClass.COMPUTE, Definition(DefKind.FREE, reason=reason))
            if recipe.codes in node.args:
                self._use(recipe.codes, node, "args[0]", self._fact_domain(recipe.quantize), False)
            return
        mm = recipe.matmul
        d = Domain.run_time("int32", f"the accumulator of {mm.name}, scaled after by its codes' scales",
                            *DTYPE_RANGE["int32"])  # fmt: skip
        self._value(node, OpClass.DEQUANTIZE, Definition(DefKind.FACT, d, real=True))
        detail = f"{node.name} casts {mm.name}'s int8 × int8 products of {recipe.quantize.name}'s codes to float"
        found = recipe.problems
        self.dg.oblige(
            Obligation(ObligationKind.STRUCTURAL, node.name, node.name, expected=d,
                       finding_kind="kernel-argument-mismatch", holds=not found,
                       detail=f"{detail}, but " + "; ".join(found) + "." if found else f"{detail}: exact.")
        )  # fmt: skip

    def _add_unknown(self, node: fx.Node, claim: Domain | None) -> None:
        what = target_name(node) if node.op == "call_function" else f"{node.op} {node.target}"
        reason = f"unknown op {what} (register it with qflow.ops.register)"
        self._value(node, OpClass.UNKNOWN, Definition(DefKind.FREE, blocking=True, reason=reason), claim)
        for i, j, a in tensor_args(node):
            if a.name in self.dg.g:
                self.dg.add_use(a.name, node.name, arg_label(i, j))
        if claim is not None:
            self._claim(node, claim)

    # -- everything else: folded form ------------------------------------------------


@paused_gc()
def build(
    gm: fx.GraphModule,
    ep: Any | None = None,
    form: str | None = None,
    target: Target | str | None = None,
    carry: bool = True,
    reference: Any = None,
) -> DomainGraph:
    """The domain graph of an FX graph module (optionally with its ExportedProgram),
    read by `target`'s contract (None: the generic target). `carry=False`
    obliges every requant a code copy drops on its own (`copy_chains`): the
    graph a repair is planned on, so that no requant it inserts is read
    through a chain it leaves in place. `reference`: what the program this one was
    rewritten from declares, as the target's backend reads it (`read_reference`)."""
    return FxAdapter(gm, ep, form or detect_form(gm), get_target(target), carry, reference).build()


def _holds_every_integer(src: torch.dtype, dst: torch.dtype) -> bool:
    """Does integer dtype `dst` hold every value of integer dtype `src` (int8 → int32: a widening copy)?"""
    if src.is_floating_point or dst.is_floating_point or torch.bool in (src, dst):
        return False
    a, b = torch.iinfo(src), torch.iinfo(dst)
    return b.min <= a.min and a.max <= b.max


def _computed(node: fx.Node) -> Definition:
    """What an op computing on reals makes: reals, which an integer output holds as its dtype's integers."""
    dt = val_dtype(node)
    return integer_data(dtype_name(dt)) if dt is not None and not dt.is_floating_point else float_fact()


def _reads_a_delegate(node: fx.Node) -> bool:
    """Is `node` an output of a delegate call (its getitem)?"""
    src = node.args[0] if node.args else None
    return (
        base_name(target_name(node)) == "getitem"
        and isinstance(src, fx.Node)
        and src.op == "call_function"
        and classify(target_name(src)) is OpClass.DELEGATE
    )
