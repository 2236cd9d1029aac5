"""Minimal requant planning: the optimiser against brute force."""

from __future__ import annotations

from builder import A, B, C, G, noq, seed000_folded

from qflow.domain import Domain
from qflow.solvers.repair import brute_force_size, plan_repair


def _cat(inputs: list, consumer_domain, claim=None) -> G:
    g = G()
    names = [g.fact(f"in{i}", d) for i, d in enumerate(inputs)]
    g.passthrough("cat", *names, claim=claim)
    g.use("cat", "consumer", consumer_domain)
    return g


def test_seed000_shape_one_requant_after_cat() -> None:
    g = _cat([A, A], B, claim=B)
    p = plan_repair(g.dg)
    assert [r.edge for r in p.requants] == [("cat", "consumer")]
    assert p.requants[0].source == A and p.requants[0].target == B
    assert p.reclaims == {"cat": A}
    assert brute_force_size(g.dg) == 1


def test_three_a_one_b_consumer_a_requants_the_b_input() -> None:
    g = _cat([A, A, A, B], A)
    p = plan_repair(g.dg)
    assert [r.edge for r in p.requants] == [("in3", "cat")]
    assert brute_force_size(g.dg) == 1


def test_all_a_consumer_b_requants_after_cat_not_each_input() -> None:
    g = _cat([A, A, A, A], B)
    p = plan_repair(g.dg)
    assert [r.edge for r in p.requants] == [("cat", "consumer")]
    assert brute_force_size(g.dg) == 1


def test_three_a_one_b_consumer_b_requants_the_three_a_inputs() -> None:
    # Two requants (B's input into A, then the cat's A output into B) would
    # round B's values onto A's coarse grid and back: 0.1 against 3e-5, a change
    # of what the model computes. The plan that keeps the meaning requants the
    # three A inputs into B.
    g = _cat([A, A, A, B], B)
    p = plan_repair(g.dg)
    assert sorted(rq.edge for rq in p.requants) == [("in0", "cat"), ("in1", "cat"), ("in2", "cat")]
    assert all(rq.target == B for rq in p.requants)
    assert len(p.requants) == 3 == brute_force_size(g.dg)


def test_requant_before_beats_after_when_the_cat_fans_out() -> None:
    # one B input, one A input, three consumers declaring A: fix the input once
    g = G()
    g.fact("a", A)
    g.fact("b", B)
    g.passthrough("cat", "a", "b")
    for i in range(3):
        g.use("cat", f"c{i}", A)
    p = plan_repair(g.dg)
    assert [r.edge for r in p.requants] == [("b", "cat")]
    assert brute_force_size(g.dg) == 1


def test_q_after_passthrough_gets_one_requant() -> None:
    g = G(form="qdq")
    g.fact("dq0", A, real=True)
    g.fact("dq1", A, real=True)
    g.passthrough("cat", "dq0", "dq1")
    noq(g, "q16", "cat", B)
    p = plan_repair(g.dg)
    assert [r.edge for r in p.requants] == [("cat", "q16")]
    assert p.requants[0].source_real
    assert brute_force_size(g.dg) == 1


def test_bytes_objective_prefers_the_small_tensor() -> None:
    # two inputs in A feeding a cat whose consumer wants B: after the cat moves
    # both inputs' bytes; requanting a tiny input first cannot help, but for a
    # chain view→consumer the requant lands on the smaller tensor.
    g = G()
    g.fact("big", A)
    g.passthrough("slice", "big")
    g.dg.value("big").numel = 10_000
    g.dg.value("slice").numel = 10
    g.use("slice", "consumer", B)
    by_count = plan_repair(g.dg)
    by_bytes = plan_repair(g.dg, objective="bytes")
    assert len(by_count.requants) == 1
    assert [r.edge for r in by_bytes.requants] == [("slice", "consumer")]
    assert by_bytes.requants[0].cost == 10 * 2  # int16 target


def test_proved_graph_has_an_empty_plan() -> None:
    g = _cat([C, C], C, claim=C)
    assert plan_repair(g.dg).empty


def test_only_regions_with_a_failing_obligation_are_optimised(monkeypatch) -> None:
    """30 regions, two wrong in different ways: the plan is the same as solving
    every region, and only those two reach z3 Optimize."""
    from qflow.solvers.repair import Planner

    g = G()
    for i in range(30):
        g.fact(f"m{i}", A)
        g.fact(f"n{i}", C if i == 7 else A)
        g.passthrough(f"cat{i}", f"m{i}", f"n{i}", claim=B if i == 20 else None)
        g.use(f"cat{i}", f"add{i}", B if i == 20 else A)
    solved: list[list[str]] = []
    original = Planner._solve_region

    def counting(self, ids, obs, plan):  # type: ignore[no-untyped-def]
        solved.append(ids)
        return original(self, ids, obs, plan)

    monkeypatch.setattr(Planner, "_solve_region", counting)
    p = plan_repair(g.dg)
    assert sorted(rq.edge for rq in p.requants) == [("cat20", "add20"), ("n7", "cat7")]
    assert p.reclaims == {"cat20": A}
    assert sorted(solved) == [["cat20"], ["cat7"]]


def test_a_requant_never_targets_float_or_a_made_up_range() -> None:
    """permute → Q(int16) in a Q/DQ graph: relaxing the permute's input makes a
    gridless float "satisfy" the no-fold obligation, and the range of the
    permute's domain is otherwise free. The target is the program's own int16."""
    g = G(form="qdq")
    g.fact("dq", A, real=True)
    g.passthrough("permute", "dq")
    noq(g, "q16", "permute", B)
    p = plan_repair(g.dg)
    [rq] = p.requants
    assert rq.target == B and not rq.target.is_float
    assert brute_force_size(g.dg) == 1


def test_an_int16_domain_with_a_zero_point_is_not_a_tosa_target() -> None:
    b5 = Domain.quantized("int16", 1 / 2048, 5, -32767, 32767)
    g = G(form="qdq")
    g.fact("dq", A, real=True)
    g.passthrough("cat", "dq")
    noq(g, "q16", "cat", b5)
    p = plan_repair(g.dg)
    assert p.empty and p.unrepairable and any("zero point 0" in r for r in p.reasons)
    # a target without the int16 rule takes it
    [rq] = plan_repair(g.dg, int16_zero_point_zero=False).requants
    assert rq.target == b5


def test_no_requant_or_claim_comes_from_codes_of_unknown_meaning() -> None:
    """A pass-through op fed by an unknown op (the Cortex-M case): its physical
    domain is unknown, so it is neither reclaimed (once: float32, a KeyError)
    nor requantized from; the plan says what blocks it."""
    g = G()
    g.free("mystery", blocking=True)
    g.fact("m2", A)
    g.passthrough("cat", "mystery", "m2", claim=A)
    g.use("cat", "add", A)
    p = plan_repair(g.dg)
    assert p.empty and p.unrepairable
    assert any("mystery" in r for r in p.reasons)


def test_plan_counts_every_kind_of_change() -> None:
    p = plan_repair(seed000_folded().dg)
    assert p.counts() == {"requants": 1, "reclaims": 1, "activation_domains": 0, "boundaries": 0, "unrepairable": 0}
    assert p.summary().startswith("1 requant(s) inserted, 1 claim(s) corrected, 0 activation domain(s)")
    data = p.to_json()
    assert data["schema"] == "qflow.plan/1" and data["requants"][0]["edge"] == ["cat", "add"]
    assert data["reclaims"]["cat"]["zero_point"] == 102
