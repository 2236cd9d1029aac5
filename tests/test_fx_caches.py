"""The FX adapter's per-graph caches (target names, op rules, qdq domains) answer what
the uncached computation answers. Unit tests on hand-built FX graphs; the real models
and the benchmark graphs go through the same adapter in test_prove_engines."""

from __future__ import annotations

import operator

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
import torch.fx as fx

from qflow.integrations.fx import FxAdapter
from qflow.ir.fx_nodes import Consts, _qdq_domain, _target_name, qdq_domain, target_name
from qflow.targets import OpRule
from qflow.targets import get as get_target

Q = torch.ops.quantized_decomposed.quantize_per_tensor.default
DQ = torch.ops.quantized_decomposed.dequantize_per_tensor.default


def _graph(*calls: tuple[object, tuple[object, ...]]) -> tuple[fx.GraphModule, list[fx.Node]]:
    g = fx.Graph()
    x = g.placeholder("x")
    nodes = [g.call_function(t, (x, *args)) for t, args in calls]  # type: ignore[arg-type]
    g.output(nodes[-1])
    return fx.GraphModule(torch.nn.Module(), g), nodes


def test_qdq_domain_cache_matches_the_uncached_reading() -> None:
    gm, nodes = _graph(
        (Q, (0.5, 3, -128, 127, torch.int8)),
        (DQ, (0.5, 3, -128, 127, torch.int8)),  # the quantize's arguments: one entry
        (Q, (0.5, True, -128, 127, torch.int8)),  # equal to 3? no; True == 1: a key of its own type
        (Q, (0.5, 1, -128, 127, torch.int8)),
        (Q, (0.0, 0, -128, 127, torch.int8)),
        (Q, (-0.0, 0, -128, 127, torch.int8)),  # equal to 0.0, printed apart: never shared
    )
    consts = Consts(gm, None)
    got = [qdq_domain(n, consts) for n in nodes]
    assert got == [_qdq_domain(n, Consts(gm, None)) for n in nodes]
    assert [str(d) for d in got] == [str(_qdq_domain(n, Consts(gm, None))) for n in nodes]
    assert got[0] is got[1]  # a quantize and its dequantize read once
    assert str(got[4]) != str(got[5])
    assert qdq_domain(nodes[2], consts) is got[2] and got[2] == got[3]


def test_target_names_are_those_of_the_uncached_reading() -> None:
    def local(a: object) -> object:
        return a

    gm, nodes = _graph((Q, (0.5, 3, -128, 127, torch.int8)), (operator.getitem, (0,)), (local, ()))
    for _ in range(2):  # the second time from the cache
        assert [target_name(n) for n in nodes] == [_target_name(n.target) for n in nodes]
    assert [target_name(n) for n in nodes] == [
        "quantized_decomposed.quantize_per_tensor.default",
        "_operator.getitem",
        "local",
    ]


def test_rules_are_cached_per_op_and_marking() -> None:
    """Two nodes of one op, one marked by the Arm quantizer and one not: each keeps its own rule."""
    g = fx.Graph()
    x = g.placeholder("x")
    marked = g.call_function(torch.ops.aten.permute.default, (x, [0, 1]))
    plain = g.call_function(torch.ops.aten.permute.default, (marked, [0, 1]))
    g.output(plain)
    marked.meta["custom"] = {"_arm_annotation_info": {"quantized": True}}
    adapter = FxAdapter(fx.GraphModule(torch.nn.Module(), g), None, "qdq", get_target("arm-tosa"))
    for _ in range(2):
        assert adapter._rule(marked) is OpRule.CODE_COPY
        assert adapter._rule(plain) is OpRule.CPU_FLOAT
