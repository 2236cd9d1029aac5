"""The domain graph: values, uses and what each side says about domains.

Adapters turn an FX graph into a `DomainGraph`; everything after that (the
lattice, the z3 proofs, repair planning, reports) works on this graph only and
never imports torch.

Nodes are values (an FX node's output). Each value has a `Definition`, which
says how its domain comes to be: a fact the node realizes (a quantize, a
compute op's output rescale), an alias of another value (a pass-through op
copies codes), or nothing known (a constant, an unknown op). Definitions form a
function of the inputs, so the background theory is always satisfiable and
every conflict shows up as a failed *obligation*, never as a silent "proved".
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import networkx as nx

from qflow.bounds import Bound, CodeErrors
from qflow.domain import DTYPE_RANGE, FLOAT, Domain
from qflow.ops import OpClass

#: The label of the edge from a value inside a delegate's graph (`call/name`) to the parent's value that
#: returns it: the same codes, which `impact` follows out of the delegate (nothing else reads it).
RETURNED = "returned by the delegate"


class DefKind(enum.Enum):
    FACT = "fact"  # the node realizes `domain` (quantize, compute rescale, float op)
    ALIAS = "alias"  # same codes as value `source` (pass-through, activation)
    FREE = "free"  # no fact: constants (domain-free) and unknown ops (blocking)
    SYMBOLIC = "symbolic"  # annotation time: dtype/range known, scale/zp symbolic


@dataclass(frozen=True)
class Symbolic:
    """An annotation-time domain: dtype and range known, scale and zp decided
    by calibration later. Values sharing `group` are forced equal (a shared
    qspec / one observer); a `fixed` domain is a fixed-qparams qspec."""

    group: str
    dtype: str
    qmin: int
    qmax: int
    symmetric: bool = False
    per_channel_axis: int | None = None


@dataclass(slots=True)
class Definition:
    kind: DefKind
    domain: Domain | None = None
    real: bool = False  # the tensor holds real numbers (on `domain`'s grid when it is an int domain)
    #: ALIAS: the values whose codes this one carries; the first one defines it,
    #: the others must agree (an obligation each).
    sources: tuple[str, ...] = ()
    blocking: bool = False  # FREE: an obligation that depends on it is unproven, not violated
    reason: str = ""  # FREE/ALIAS: why, for messages
    symbolic: Symbolic | None = None
    #: FREE and blocking: the finding kind of an obligation it leaves unproven, when the
    #: reason is a known one with its own remedy (e.g. "reference-needed"); None: the
    #: analysis names it (unknown-op or missing-domain).
    blocks_as: str | None = None

    @property
    def domain_free(self) -> bool:
        """Free and blocking nothing (a constant, an index): a use of it obliges nothing."""
        return self.kind is DefKind.FREE and not self.blocking


@dataclass(slots=True)
class Value:
    """One tensor in the graph (an FX node's output)."""

    name: str
    target: str
    op_class: OpClass
    definition: Definition
    #: What the IR claims the node produces when the node itself does not
    #: realize it (a folded pass-through op's ``output_qparams``).
    claim: Domain | None = None
    dtype: str | None = None  # meta["val"] dtype, informational
    numel: int | None = None
    stack_trace: str | None = None
    module_path: str | None = None
    #: How much the op can amplify an error on its inputs, in the infinity norm, where that takes
    #: its operands' values (a linear layer's largest row sum of absolute weights): `impact`.
    gain: float | None = None
    #: A linear layer's / convolution's output channels as (bias, sum of positive weights, sum of
    #: negative weights): the interval its output can reach from its input's (`ranges`).
    channels: tuple[tuple[float, float, float], ...] | None = None
    #: An activation's real bounds (relu: 0 and inf): `ranges`.
    clamp: tuple[float, float] | None = None
    #: A matrix product's contraction length (each output sums that many products): `ranges`.
    terms: int | None = None
    #: A dequantized constant's real values (their hull, within its domain's range): `ranges`.
    values: tuple[float, float] | None = None
    #: A reduction's dimensions (`gains.reduced`): a row's maximum and a sum over the same rows (`ranges`).
    reduced: tuple[int, ...] | None = None
    #: The op an integer kernel computes in its place, checked entry by entry (a Cortex-M LUT's
    #: sigmoid): `ranges` bounds its output as that op's.
    stands_for: str | None = None
    #: The edge labels of the operands of the op it stands for, in that op's order, where they are not
    #: ``args[0]``, ``args[1]`` (a Cortex-M add reads its second operand as ``args[4]``): `ranges`.
    operands: tuple[str, ...] | None = None
    #: Its scalar operands by edge label (a comparison's threshold, a ``masked_fill``'s fill value, a
    #: ``where``'s scalar branch): `ranges` reads each as an input holding that one value.
    scalars: tuple[tuple[str, float], ...] | None = None

    @property
    def own_domain(self) -> Domain | None:
        """The domain its codes are in: its own fact, else what the IR claims it produces."""
        d = self.definition
        return d.domain if d.kind is DefKind.FACT else self.claim


class ObligationKind(enum.Enum):
    USE = "use"  # the consumer input declares a domain; the producer must produce it
    SAME_AS_FIRST = "same-as-first"  # a multi-input pass-through op: input k == input 0
    CLAIM = "claim"  # a pass-through op's claimed output domain == its input domain
    NO_FOLD_CHANGE = "no-fold-change"  # Q after a pass-through op: no domain change a fold would hide
    STRUCTURAL = "structural"  # a rule outside domain equality (ranges, boundaries)


@dataclass(slots=True)
class Obligation:
    """One thing to prove: `value`'s domain equals `expected` (a domain) or the
    domain of value `other`."""

    kind: ObligationKind
    node: str  # where to report it (FX node name)
    value: str  # the producer side
    expected: Domain | None = None
    expected_real: bool | None = None  # None: representation not constrained
    other: str | None = None  # (a merged duplicate's: the representative whose codes it hands on)
    edge: tuple[str, str] | None = None  # (producer, consumer): where a requant could go
    arg: str = ""  # human label of the consumer input, e.g. "args[0][1]"
    compare_claim: bool = True  # compare the producer's claim when it has one
    allow_float: bool = False  # NO_FOLD_CHANGE: a real tensor with no grid is fine
    check_range: bool = True  # CLAIM: False when the node itself clamps to the claimed range
    finding_kind: str = "domain-mismatch"
    #: STRUCTURAL obligations are decided by the rule that made them.
    holds: bool | None = None
    inform: bool = False  # report an info finding even though it holds
    severity: str | None = None  # overrides the kind's default severity
    detail: str = ""
    #: STRUCTURAL: the domain a repair gives the quantize at the end of `edge`
    #: (an activation's own, exactly fuseable domain), when the rule knows one.
    fix_domain: Domain | None = None
    #: The targets on which a failure breaks the program (empty: every target
    #: the analysis was made for).
    targets: tuple[str, ...] = ()
    #: STRUCTURAL: how far the failure moves the output, when known.
    bound: Bound | None = None
    #: NO_FOLD_CHANGE across an activation: the codes of `expected` the backend's result lies in, measured
    #: (the clamp the lowering makes of the activation, its bounds in that domain's codes); None: unknown.
    codes: tuple[int, int] | None = None
    #: STRUCTURAL: how far the backend's op is off by input code (an int16 TABLE's interpolation); `value`
    #: is the op whose input codes index it, and the codes the program reaches there decide (`prove`).
    off_by_code: CodeErrors | None = None


@dataclass(frozen=True)
class OneCode:
    """`value`, read at `node`, can be one code off the program's on `targets` — the backend's own rounding
    (a maximum of two grids rounded twice, an accumulator rescaled with a 16-bit multiplier), within the op's
    contract. Unproven where what follows makes that code more than one output LSB, which only the whole
    program's graph says (a partition's value can be amplified by the host or by another partition)."""

    node: str
    value: str
    kind: str
    detail: str
    targets: tuple[str, ...]
    #: What an info finding says where nothing makes that code more (None: nothing worth saying).
    otherwise: str | None = None


@dataclass
class DomainGraph:
    """Values by name, their uses as a networkx DiGraph, and the obligations to prove."""

    g: nx.DiGraph = field(default_factory=nx.DiGraph)
    obligations: list[Obligation] = field(default_factory=list)
    form: str = "unknown"
    #: The target whose contract the graph was read by.
    target: str = "generic"
    #: Adapter-level notes (assumptions made) that reports show.
    notes: list[str] = field(default_factory=list)
    #: The values the program returns, when the adapter knows them (`impact` weighs errors there).
    outputs: list[str] = field(default_factory=list)
    #: A partition's input placeholder → the value its delegate call feeds it, where both hold the same
    #: reals (one domain, or both float): `ranges` carries the parent's interval in.
    fed: dict[str, str] = field(default_factory=dict)
    #: A value no output depends on but through an activation that outputs one value for every code it can
    #: read → that activation (`integrations.masked`): what the backend computes there cannot be seen.
    unreached: dict[str, str] = field(default_factory=dict)
    #: Values a backend can write one code off, weighed once the whole program is read (`impact`).
    one_code: list[OneCode] = field(default_factory=list)
    #: name → Value. The networkx graph holds the uses (its nodes carry no attributes):
    #: the analysis reads every value, and a dict is read without networkx's views.
    _by_name: dict[str, Value] = field(default_factory=dict, init=False, repr=False)

    def add_value(self, v: Value) -> None:
        self._by_name[v.name] = v
        g = self.g
        if v.name not in g._succ:
            # a new node written as DiGraph.add_node writes it (its dicts, then the
            # cache cleared): adapters add one node per FX node, and add_node's
            # keyword-argument handling was a tenth of building a graph
            g._succ[v.name] = {}
            g._pred[v.name] = {}
            g._node[v.name] = {}
            nx._clear_cache(g)

    def add_use(self, producer: str, consumer: str, arg: str) -> None:
        g = self.g
        succ = g._succ.get(producer)
        pred = g._pred.get(consumer)
        if succ is None or pred is None:
            g.add_edge(producer, consumer, args=[arg])  # (adds the missing node)
            return
        data = succ.get(consumer)
        if data is not None:
            data["args"].append(arg)
            return
        succ[consumer] = pred[producer] = {"args": [arg]}  # (as DiGraph.add_edge)
        nx._clear_cache(g)

    def value(self, name: str) -> Value:
        return self._by_name[name]

    def get(self, name: str) -> Value | None:
        """The value called `name`, or None when the graph has no such value."""
        return self._by_name.get(name)

    def producer(self, name: str, arg: str = "args[0]") -> str | None:
        """The value `name` reads as its input `arg` (an FX argument label), or None."""
        return next((p for p, data in self.g._pred[name].items() if arg in data["args"]), None)

    def values(self) -> list[Value]:
        return list(self._by_name.values())

    def by_name(self) -> Mapping[str, Value]:
        """Every value by name (read only: add values with `add_value`)."""
        return self._by_name

    def oblige(self, ob: Obligation) -> None:
        self.obligations.append(ob)

    def quantized(self) -> bool:
        """Whether anything in the graph is quantized: a quantize / dequantize, a
        symbolic (annotated) domain, or an integer domain declared, realised or obliged.
        A program with none has nothing to prove, which is not a proof."""
        for v in self._by_name.values():
            if v.op_class in (OpClass.QUANTIZE, OpClass.DEQUANTIZE) or v.definition.symbolic is not None:
                return True
            if any(_quantized(d) for d in (v.definition.domain, v.claim)):
                return True
        # (an artifact's checks declare integer domains of tensors the graph does not model)
        return any(_quantized(ob.expected) for ob in self.obligations)

    def __len__(self) -> int:
        return self.g.number_of_nodes()

    def in_order(self) -> list[str]:
        """Every value, each after the values it reads: the order adapters add them in, unless a
        subgraph (a cond's branch) was read after its users."""
        order = {n: i for i, n in enumerate(self.g)}
        if all(order[v] > order[u] for u, succ in self.g._succ.items() for v in succ):
            return list(self.g)
        return list(nx.topological_sort(self.g))

    def oblige_one_input_domain(self, node: str, sources: tuple[str, ...] | list[str]) -> None:
        """A code copy of several inputs (cat, stack): each must be in the first one's domain."""
        for s in sources[1:]:
            self.oblige(
                Obligation(
                    kind=ObligationKind.SAME_AS_FIRST,
                    node=node,
                    value=s,
                    other=sources[0],
                    edge=(s, node),
                    arg=f"input {s}",
                    finding_kind="mixed-input-domains",
                )
            )

    def oblige_measured_lowering(
        self, node: str, op: str, how: str, targets: tuple[str, ...], measured: str | None = None
    ) -> None:
        """`node` (`op`, `how` it reaches integer codes) has a lowering on `targets` never measured
        to compute right (issue #30): it reads a blocked stand-in, so everything it computes is
        unproven there, never proved. `measured`: what the contract probe saw when it was off."""
        blocker = f"{node}?lowering"
        where = (
            f"where that lowering was measured off ({measured})"
            if measured
            else "where that lowering has not been measured against the backend (contract probe)"
        )
        reason = f"{node} ({op}) is {how} on {', '.join(targets)}, {where}: qflow cannot vouch for what it computes"
        self.add_value(
            Value(blocker, op, OpClass.UNKNOWN,
                  Definition(DefKind.FREE, blocking=True, reason=reason, blocks_as="unvalidated-lowering"))
        )  # fmt: skip
        self.oblige(
            Obligation(ObligationKind.USE, node=node, value=blocker, expected=FLOAT, expected_real=True,
                       arg="its lowering", finding_kind="unvalidated-lowering", targets=targets)
        )  # fmt: skip

    def oblige_written_operand(self, node: str, op: str, weight: str, target: str) -> None:
        """GEMM `node` multiplies by an activation (`weight`), and `target` leaves it on the CPU reading an
        operand the delegate before it never writes (`Target.unwritten_gemm_weights`): an error."""
        why = (f"{node} ({op}) multiplies by an activation ({weight}): {target} leaves it on the CPU and takes its "
               "operands' dequantizes into the delegate before it, which never writes one of them (measured: "
               "the GEMM reads an unwritten buffer)")  # fmt: skip
        if node not in self.g:  # (an op the quantizer left unannotated has no value of its own yet)
            self.add_value(Value(node, op, OpClass.COMPUTE, Definition(DefKind.FREE, reason="a GEMM on the CPU")))
        self.oblige(
            Obligation(ObligationKind.STRUCTURAL, node, node, finding_kind="unwritten-delegate-output", holds=False,
                       targets=(target,), detail=why)
        )  # fmt: skip

    def oblige_unbounded(self, node: str, arg: str, kind: str, reason: str, targets: tuple[str, ...]) -> None:
        """`node` reads its operand `arg` other than the program declares, by an amount qflow does
        not bound (on `targets`): a blocked stand-in makes what it computes unproven there, never
        proved, and the finding (`kind`, a warning) says why."""
        blocker = f"{node}?{arg}"
        why = Definition(DefKind.FREE, blocking=True, reason=reason, blocks_as=kind)
        self.add_value(Value(blocker, kind, OpClass.UNKNOWN, why))
        self.oblige(
            Obligation(ObligationKind.USE, node=node, value=blocker, expected=FLOAT, expected_real=True, arg=arg,
                       finding_kind=kind, targets=targets, severity="warning")
        )  # fmt: skip

    def settle_inputs(self, what: str) -> None:
        """Each integer input (an alias with no source) takes the domain its first
        consumer declares, recorded as an assumption; its other uses must agree.
        One with no declared use has no domain here: what depends on it is unproven
        (a cat of two such inputs is no mixed-domain error), unless nothing is quantized, an op
        reads it as the numbers it holds (a cast to float) or a copy of it claims plain integers:
        then it is those integers, exact reals. `what` names the inputs."""
        inputs = [v for v in self.values() if v.definition.kind is DefKind.ALIAS and not v.definition.sources]
        if not inputs:
            return
        first: dict[str, Obligation] = {}
        as_reals: set[str] = set()  # (read by an op that computes on the reals it holds: a cast to float, an add)
        for ob in self.obligations:
            if ob.kind is ObligationKind.USE and ob.expected is not None and not ob.expected.is_float:
                first.setdefault(ob.value, ob)
            elif ob.kind is ObligationKind.USE and ob.expected is not None and ob.expected_real:
                as_reals.add(ob.value)
            elif ob.kind is ObligationKind.CLAIM and ob.expected is not None and not _quantized(ob.expected):
                as_reals.add(self._alias_root(ob.value))  # (a copy of it claims plain integers: Arm's fold)
        quantized = self.quantized()
        for v in inputs:
            ob = first.get(v.name)
            if ob is None and (not quantized or v.name in as_reals):  # (the integers PyTorch computes with)
                v.definition = integer_data(v.dtype)
                continue
            if ob is None:  # (its domain is set outside: what depends on it is unproven, never violated)
                why = f"{what} {v.name} with no declared use"
                v.definition = Definition(DefKind.FREE, blocking=True, reason=why, blocks_as="missing-domain")
                continue
            v.definition = Definition(DefKind.FACT, ob.expected, real=False)
            self.notes.append(f"assumed {what} {v.name} is in {ob.expected} (declared by {ob.node})")

    def _alias_root(self, name: str) -> str:
        """The value at the end of `name`'s chain of copies."""
        seen = {name}
        while (d := self.value(name).definition).kind is DefKind.ALIAS and d.sources and d.sources[0] not in seen:
            name = d.sources[0]
            seen.add(name)
        return name

    def absorb(self, sub: DomainGraph, prefix: str) -> None:
        """Add another graph's values and obligations (a delegate's partition)
        under `prefix/`, so one report covers the whole program."""

        def ren(n: str | None) -> str | None:
            return None if n is None else f"{prefix}/{n}"

        for v in sub.values():
            d = v.definition
            nd = replace(d, sources=tuple(f"{prefix}/{s}" for s in d.sources))
            self.add_value(replace(v, name=f"{prefix}/{v.name}", definition=nd))
        for a, b, data in sub.g.edges(data=True):
            self.g.add_edge(f"{prefix}/{a}", f"{prefix}/{b}", **data)
        for ob in sub.obligations:
            edge = (f"{prefix}/{ob.edge[0]}", f"{prefix}/{ob.edge[1]}") if ob.edge else None
            self.oblige(replace(ob, node=ren(ob.node), value=ren(ob.value), other=ren(ob.other), edge=edge))
        self.notes += [f"{prefix}: {n}" for n in sub.notes]
        self.unreached.update({f"{prefix}/{n}": f"{prefix}/{a}" for n, a in sub.unreached.items()})
        self.one_code += [replace(c, node=f"{prefix}/{c.node}", value=f"{prefix}/{c.value}") for c in sub.one_code]


def _quantized(d: Domain | None) -> bool:
    """An integer domain other than plain integer data (scale 1, zero point 0, the dtype's range)."""
    return d is not None and not d.is_float and not d.plain_integers


def integer_data(dtype: str | None) -> Definition:
    """The integers PyTorch computes with: exact reals, on their own dtype's grid (scale 1, zero point 0),
    so that an op reading them as numbers and a copy claiming that grid (Arm's fold on integer data) both hold."""
    if dtype not in DTYPE_RANGE:
        return float_fact()
    return Definition(DefKind.FACT, Domain.plain(dtype), real=True)


def float_fact() -> Definition:
    return Definition(DefKind.FACT, FLOAT, real=True)
