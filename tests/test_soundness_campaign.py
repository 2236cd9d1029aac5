"""A fixed slice of the soundness campaign (benchmarks/soundness): real random
models, the real quantizers, the real Arm / XNNPACK / Cortex-M lowering, the TOSA
reference model / ExecuTorch runtime / Cortex-M reference kernels as the oracle.

Each case asserts qflow's verdict before partitioning against what the backend
really computed: a miscompile must be an error, an exact run must not be. The
`expect` column pins what the case is about (so a case cannot drift into a
trivially passing one); cases where qflow is known wrong today are strict
xfails that name the finding — they turn into failures the day they pass, so
the marker is removed with the fix.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

CAMPAIGN = Path(__file__).resolve().parent.parent / "benchmarks" / "soundness"
REDUCED = CAMPAIGN / "reduced"

# id → (expected backend outcome, why the case is here). A case with a file in
# reduced/ runs that (reduced or hand-written) spec; the others are generated.
CASES: dict[str, tuple[str, str]] = {
    "00003-arm-custom": ("miscompile", "seed-000 style: a fixed-qparams requant after stack, folded away (82 LSB)"),
    "00024-arm-pc": (
        "miscompile",
        "reduced campaign miss: clamp(min=0.5) -> neg; TOSA NEGATE drops the scale (20 LSB)",
    ),
    "00001-arm-pt": ("exact", "conv3x3, hardtanh, cat/stack, upsample, per-tensor: proved and exact"),
    "00035-xnn-custom": ("exact", "former false alarm: a requant across a slice, which XNNPACK realises (measured)"),
    "00045-arm-custom": (
        "miscompile",
        "former miss: int16 bilinear upsample requantized to int8; Arm RESIZE copies codes (38 LSB)",
    ),
    "00018-arm-pc": ("exact", "reduced former false alarm: neg with scales 0.9995 apart (< 0.2 LSB over the range)"),
    # former false alarms of the TOSA artifact check (lowered form), hand-reduced
    "00000-arm-pc": (
        "exact",
        "bilinear upsample: RESIZE scales codes and zero point by n_y*n_x, its RESCALE reads zp 0",
    ),
    "00039-arm-pc": (
        "exact",
        "abs -> hardtanh(0.2, 3): the CLAMP after TOSA ABS is the hardtanh (ABS was uninterpreted)",
    ),
    "00014-arm-a16w8": ("exact", "int16 sigmoid TABLE (int32 = 128 x entry); CLAMP on a 16-bit-multiplier grid"),
    "00037-arm-pt": ("exact", "pad with value 0.5: the PAD constant is the value's code, not the zero point"),
    "00027-arm-custom": ("exact", "hardtanh whose bounds lie above the range: CLAMP [qmax, qmax]; bilinear upsample"),
    "00041-xnn-custom": (
        "exact",
        "former false alarm: DQ -> clamp -> max_pool2d -> Q into another domain; XNNPACK computes ops outside a "
        "DQ -> op -> Q sandwich in float (Target.float_unless_qdq)",
    ),
    # former false alarms: requants Arm drops at code copies that later copies cancel (copy_chains)
    "00061-arm-custom": ("exact", "slice requantizes A -> B, the relu after it B -> A; B clips only what relu removes"),
    "00054-arm-custom": (
        "exact",
        "relu into int16 then hardtanh back into int8: one fused CLAMP, its bounds quantized in the int8 output",
    ),
    # the transformer menu (tx-*, issue #30)
    "00130-tx-arm-custom": (
        "miscompile",
        "an A -> B -> A requant round trip through expand / view, B 96x coarser: Arm drops both requants, the "
        "fake-quantized model rounds to B (53 LSB); carried before, as 'within one coarse step'; and a former "
        "lowered-form miss: in the delegate, the wrong codes reached no program output through its call",
    ),
    "00080-tx-arm-pc": (
        "miscompile",
        "two silu(x) in different output domains: Arm's FuseDuplicateUsersPass merges them after the fold (92 LSB)",
    ),
    "00054-tx-arm-custom": (
        "exact",
        "an int16 and an int8 sum of one input: the fold gives each its dtype, so Arm does not merge them "
        "(unproven before partitioning, not an error)",
    ),
    "00066-tx-arm-custom": (
        "exact",
        "a custom domain on the reshape of a LayerNorm weight: computed from constants, so computed ahead of time",
    ),
    "00574-tx-arm-custom": (
        "exact",
        "an int8 -> int16 -> int8 round trip after a linear whose values stay inside the int16 range (+-2.04); "
        "lowered, the linear is in another delegate: its interval is carried out of one and into the next",
    ),
    "00032-tx-arm-pc": ("exact", "gelu(approximate='tanh'): its TABLE is recomputed with the argument (lowered form)"),
    "00077-xnn-custom": (
        "exact",
        "cat([x, x]) with a requant: XNNPACK delegates cat only with 2+ distinct inputs, so it runs in float",
    ),
    # former false alarms: a slice over a whole dimension (Arm's adaptive_avg_pool2d decomposition), which
    # to_edge removes before the fold, so the requant after it is realised
    "00105-arm-custom": ("exact", "whole-dim slice_copy requantized into int16, then back into int8"),
    "00945-arm-custom": ("exact", "two whole-dim slice_copies, each requantized into another int8 domain"),
    # a branch that reaches the outputs only through an activation constant over its dtype (masked-by-constant)
    "00559-arm-pt": (
        "exact",
        "former false alarm: relu -> neg -> relu, stock per-tensor; the neg's output is int8 zp 127, so Arm's "
        "dropped neg scale cannot reach the output through the relu after it (0 for every code)",
    ),
    # Cortex-M (issue #29): CortexMQuantizer -> CortexMPassManager, run on the reference kernels
    "00014-cm": (
        "miscompile",
        "stock: a hardtanh(0, 0.5) after a linear the passes neither fuse nor rewrite, so it clamps the linear's "
        "codes to its real bounds (50 LSB; real-constant-on-codes)",
    ),
    "00015-cm-custom": ("miscompile", "hardtanh(-1, 1) on a linear's codes with a custom domain (194 LSB)"),
    "00018-cm": ("exact", "former false alarm: a relu after an add (int8 codes) is rewritten into a clamp on codes"),
    "00062-cm": ("exact", "former false alarm: a hardtanh after a conv (int8 codes) is rewritten into a clamp"),
    "00118-cm": (
        "miscompile",
        "former miss: clamp(max=1) after an add of a tanh's codes: aten promotes the add's output to float, so "
        "QuantizedClampActivationPass leaves the clamp's real bound on the codes (11 LSB)",
    ),
    # former lowered-form false alarms: what the program after the passes reads, weighed as before them
    "00148-cm": (
        "exact",
        "former lowered-form false alarm: after the passes a relu on codes reads the clamp(127, 127) on codes they "
        "make of clamp(0, 6) over an input domain of [-4.4, 0]: the one code it can read, it gets right",
    ),
    "00283-cm-custom": (
        "exact",
        "former lowered-form false alarm: a relu's requant dropped into a clamp on codes, read next by a requant "
        "into scale 1.2e-7 and two cortex_m.quantized_mul kernels; qflow now follows the wrong codes through them",
    ),
    "00407-cm-custom": (
        "exact",
        "former lowered-form false alarm: a view's requant dropped after the passes, read next by the clamp on codes "
        "they make of a hardtanh(0, 6) over a domain whose reals are <= 0: the clamp is weighed as the activation it "
        "computes (codes 127 to 127, real 0), so every output is 0 on both sides",
    ),
    "00849-cm-custom": (
        "exact",
        "former lowered-form false alarm: a clamp's requant dropped after the passes, its wrong codes read through an "
        "add and a cortex_m.pad, which copies codes: the pad had no edge from what it copies, so no wrong code was "
        "followed to the outputs (the add's grid is 1.6e4 times coarser: 0.02 output LSB)",
    ),
    "00047-cm-custom": (
        "exact",
        "former false alarm in every form: clamp(add, 0.5) into a domain whose codes from 0.5 up are all its top "
        "code, so the clamp is no activation the passes fuse and the add stays an aten add on codes; but the clamp "
        "they make of it keeps code 127 of every int8, the program's one output code (and the clamp of a hardtanh "
        "beside it, on codes [69, 127], is the hardtanh's, as the program it came from says)",
    ),
    "00154-tx-arm-custom": (
        "miscompile",
        "a view's requant into int16 dropped (codes read 104x off, 255 LSB), then a sub of a constant whose float32 "
        "value sits a hair off its code: caught while building the rule for a sum beside a coarse grid",
    ),
    # former false alarms before the passes: value ranges and chains of clamps on codes
    "00789-cm-custom": (
        "exact",
        "relu6 into another domain, then relu back into the first: Cortex-M drops both requants and clamps the "
        "copied codes by each one's bounds in its own domain (codes -36, then 113), which compose to the relu",
    ),
    "00579-cm-custom": (
        "exact",
        "a hardtanh's requant dropped, then + 0.5 (a float constant) into a domain both sides saturate",
    ),
    # former misses: whether the passes leave an activation on codes is measured by running them
    "00628-cm": ("miscompile", "a relu after an avg_pool2d of a linear's int32 codes stays on codes (14 LSB)"),
    "00872-cm": (
        "miscompile",
        "a hardtanh after a hardtanh fused into a conv that reads a cat of a linear's int32 codes (128 LSB)",
    ),
    "00158-cm": (
        "miscompile",
        "former miss: CortexMPassManager writes a pad's pads for the other layout, so it pads C and W instead of H "
        "and W (output (1, 7, 2, 3), not (1, 6, 3, 3)); measured before the passes by running them",
    ),
    "00736-cm": (
        "miscompile",
        "former miss: the pad of a cat of a one-channel input; its fake tensor is channels-last, eager torch.cat "
        "returns it contiguous, and cortex_m.pad (pads in memory order) pads other dimensions: (1, 4, 4, 2), not "
        "(1, 2, 4, 4)",
    ),
    "01099-cm-custom": (
        "miscompile",
        "former miss: hardtanh(0, 6) -> requant -> clamp(-1, 1) round trip; Cortex-M keeps two clamps, each bounded "
        "in its own output domain, so the hardtanh's bound 0 is applied to the other domain's codes (70 LSB)",
    ),
    # found by the domain inputs (2026-11-26): the int16 clamp a requant declares, which the backend skips
    "00110-arm-a16w8": (
        "miscompile",
        "reduced: a16w8 conv3x3 -> sub(constant). RewriteConvPass feeds the sub from the conv's INT48 accumulator "
        "rescaled straight to int32, so the conv's result is never clamped to its int16 range: an input in its "
        "domain is 2513 output LSB off. qflow proves from the conv's exact reach that it moves the output "
        "(skipped-clamp, bound 4482 LSB); no requant fixes it (repair says so)",
    ),
    # the .pte as shipped (its verdict must be the lowered program's):
    "00300-cm": ("exact", "the emitter inserts a dim-order copy before a sum: a layout change, not a kernel"),
    "00316-cm": ("exact", "a pad checked against the program the passes were given, not the PT2E program"),
    "00359-cm-custom": ("miscompile", "a max_pool2d_with_indices left on codes returns two tensors; a cat reads one"),
    # a dropped chain into an activation (2026-11-27)
    "00056-arm-custom": (
        "exact",
        "former false alarm: A -> stack -> B1 -> flatten -> B2 -> hardtanh(0, 6) -> A, all folded; A holds no "
        "positive value, so the CLAMP Arm makes of the hardtanh, its bounds quantized in A, keeps one code",
    ),
    # an artifact that realises the partition's own dropped requant (2026-11-29)
    "00950-tx-arm-custom": (
        "exact",
        "former lowered-form false alarm: the TOSA RESHAPE of a view whose int8 -> int16 requant Arm drops, read "
        "on as int16 by a RESCALE, a CONV2D bias and the output: the drop the partition's own obligation weighs "
        "(masked), seen again downstream in the artifact",
    ),
    "00610-tx-arm-custom": (
        "exact",
        "former lowered-form false alarm: an expand whose int8 -> int16 requant Arm drops, read through a "
        "standalone requant back into int8 (a RESCALE named after no PT2E op) by a bmm",
    ),
    # a miscompile only the narrow inputs show (2026-11-27)
    "00766-tx-arm-custom": (
        "miscompile",
        "former false alarm: two means of one LayerNorm input in different domains, merged by Arm "
        "FuseDuplicateUsersPass; 6 output LSB off only where the row's values lie close together (case.NARROW_LEVELS)",
    ),
    "00081-arm-custom": (
        "exact",
        "former false alarm: relu(abs(t) - t), t >= 0, its requant dropped; lowered, the relu's CLAMP bounds are "
        "quantized in the dropped requant's output domain, on the codes it copies",
    ),
    "02159-arm-custom": (
        "exact",
        "held-out seed, former lowered false alarm: clamp(neg(x)), the neg's output scale dropped (NEGATE keeps "
        "its input's) and pinned by the clamp; the CLAMP's bounds are in the declared domain, on the kept scale",
    ),
    "03110-tx-arm-custom": (
        "exact",
        "held-out seed, former false alarm in every form: a requant Arm drops after a view reaches the outputs "
        "only through where(x > c, x, 2.0), c the top of x's domain: false on every code x can have",
    ),
    "03086-tx-arm-custom": (
        "exact",
        "held-out seed, former lowered false alarm: the TOSA artifact's RESCALE after a cat whose requant Arm "
        "drops and an exp TABLE reading codes in another scale, both behind a relu constant over its input's codes",
    ),
    # the mask menu (mk-*, 2026-12-02): selections that read a value the data they select does not
    "00010-mk-arm-custom": (
        "miscompile",
        "masked_fill(x, m > 0.0, 0.0) whose 0.0 is overridden to int16: where copies two int8 domains (174 LSB); "
        "its folded partition crashed qflow, which evaluated dequantize(..., int16) of the float fill the fold left",
    ),
    "00338-mk-arm-custom": (
        "exact",
        "former false alarm: a neg's dropped scale (3165x) whose input a mask two ops up makes 0 on every element; "
        "the ranges split on the input's codes see it, before partitioning and across the delegates lowered",
    ),
    "00069-mk-cm-custom": (
        "exact",
        "former false alarm: two comparisons the passes run on codes, both of one amax's codes (and of a product "
        "of it): split on the amax's codes, neither flip moves an output; after the passes the amax is an alias",
    ),
    "00063-mk-cm-custom": (
        "exact",
        "former false alarm: x > 0 of a relu whose requant the passes fold, so the kernel compares x's own codes, "
        "clamped at x's zero point, with 0: the same mask; taken one code of x at a time, both sides agree",
    ),
    "00148-mk-cm": (
        "exact",
        "former false alarm: two comparisons of values computed from one input, both run on codes; one code of "
        "the input at a time, the fill they pick apart stays below what a maximum keeps, through a permute",
    ),
    "00226-cm": (
        "exact",
        "former false alarm: a + relu(sigmoid(a)), the relu run on the sigmoid's codes, off only on codes below its "
        "code 0, where a is low enough that the add's output clips on both sides: one code of a at a time",
    ),
    "00004-mk-cm": (
        "miscompile",
        "x * (m > 0.5).float(): the Cortex-M passes compare m's codes with 0.5 (72 LSB); the mask's float cast was "
        "an unknown op after the passes, and the .pte's _to_dim_order_copy.out (no dtype argument) left it unproven",
    ),
}
#: Miscompiles repair does not fix: it inserts requants, and an activation the backend runs on codes
#: with its real bounds needs its annotation changed instead, and no requant makes the backend clamp a
#: conv it reads unclamped or pads a tensor in another layout — it says so (ProofError), never a silently
#: wrong program.
UNREPAIRABLE = {
    "00014-cm",
    "00015-cm-custom",
    "00118-cm",
    "00158-cm",
    "00736-cm",
    "00628-cm",
    "00872-cm",
    "00110-arm-a16w8",
}
UNREPAIRABLE.add("00766-tx-arm-custom")  # (a skipped requant there stays unproven: there is no proof to repair to)
UNREPAIRABLE.add("00004-mk-cm")  # (no requant makes a kernel compare a real constant with codes)
UNREPAIRABLE.add("00010-mk-arm-custom")  # (its minimum's double rounding stays unproven: no requant undoes it)
# Cases where qflow is wrong today (the campaign's open findings).
KNOWN_WRONG: dict[str, str] = {
    "00134-cm": "mul by a constant, x0.5, tanh: the reference kernels' quantized_mul rounds twice (requantize_cmsis: "
    "the doubling high multiply, then the shift), so 1.4934 output LSB (95.575 / 64) becomes 2, one code above the "
    "program's, and tanh carries it onto a 3.8x finer grid: 4 output LSB (2026-11-28). qflow does not bound a "
    "kernel's own rounding: proved",
    "00974-arm-a16w8": "reduced: a16w8 conv -> sum -> mul(conv, sum). The sum and the mul read the conv's "
    "accumulator unclamped (RewriteConvPass's int16 fork): 35612 output LSB off on inputs in the input's domain "
    "(2026-11-26; 8 on the calibration samples). qflow says unproven (skipped-requant), not an error: its proof "
    "that the skipped clamp moves an output (skipped-clamp) covers an add / sub of a constant at an output only",
}


@pytest.fixture(scope="session")
def campaign() -> Any:
    sys.path.insert(0, str(CAMPAIGN))
    import case
    import torchao_case

    cache: dict[str, dict[str, Any]] = {}

    def run(cid: str) -> dict[str, Any]:
        if cid not in cache:
            path = REDUCED / f"{cid}.json"
            spec = json.loads(path.read_text())["spec"] if path.exists() else None
            cache[cid] = (torchao_case if torchao_case.owns(cid) else case).run_case(cid, spec=spec)
        return cache[cid]

    return run


def _params() -> list[Any]:
    out = []
    for cid in list(CASES) + list(KNOWN_WRONG):
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[cid])] if cid in KNOWN_WRONG else []
        out.append(pytest.param(cid, marks=marks, id=cid))
    return out


@pytest.mark.parametrize("cid", _params())
def test_verdict_matches_backend(campaign: Any, cid: str) -> None:
    rec = campaign(cid)
    crashed = {form: q.get("error") for form, q in rec["qflow"].items() if q.get("verdict") == "crash"}
    assert not crashed, f"{cid}: qflow crashed: {crashed}"
    import summary  # the campaign's scoring (issue #31): the capped band, repair against the original

    outcome, verdict = summary.truth(rec), rec["verdict"]
    findings = rec["qflow"]["pre"]["findings"]
    if cid in CASES:  # pinned: the case still exercises what it is here for
        assert outcome == CASES[cid][0], f"{cid}: the backend now gives {outcome} ({rec.get('err')}); re-pick the case"
    if outcome == "miscompile":
        assert verdict == "error", f"{cid}: soundness miss: backend miscompiles ({rec.get('err')}), qflow {verdict}"
        lowered = rec["qflow"].get("lowered", {})
        assert lowered.get("verdict") != "proved", f"{cid}: lowered-form soundness miss: {lowered.get('findings')}"
    if outcome == "exact":
        assert verdict != "error", f"{cid}: false alarm: backend exact, qflow error {findings}"
        lowered = rec["qflow"].get("lowered", {})  # the lowered program, TOSA artifact included
        assert lowered.get("verdict") != "error", f"{cid}: lowered-form false alarm: {lowered.get('findings')}"
    if "pte" in rec["qflow"]:  # a Cortex-M .pte, checked against the PT2E program by lowering it again
        pte, lowered = rec["qflow"]["pte"], rec["qflow"]["lowered"]
        assert pte["verdict"] == lowered["verdict"], f"{cid}: .pte {pte['findings']}; lowered {lowered['findings']}"
    if outcome == "miscompile" and cid in UNREPAIRABLE:
        repair = rec.get("repair") or {}
        assert repair.get("status") == "unrepairable" and "ProofError" in repair.get("error", ""), f"{cid}: {repair}"
    elif outcome == "miscompile":
        repair = rec.get("repair") or {}
        assert repair.get("status") == "repaired", f"{cid}: {repair}"
        assert repair.get("outcome") == "exact", f"{cid}: repaired program: {repair}"
        assert summary.repair_problem(rec) is None, f"{cid}: repair worse against the original: {repair}"


def test_a_constant_weighs_by_the_values_it_holds(campaign: Any) -> None:
    """00005-cm-custom (a former false alarm before the passes): a slice's dropped requant reaches
    tanh(sum) - c, with c a constant at the top of its domain, into an output domain whose lowest code is
    1 - c: whatever the slice's codes, both sides lie within half a step of that code. With the
    constant's domain range instead of its values, qflow bounded the output at 329 LSB. After the passes
    the sub is a `quantized_add` of the constant's codes (a buffer, multiplier negated): the kernel is bounded
    as the sub it stands for, over the constant's values, and the program proves there too (and as a .pte)."""
    rec = campaign("00005-cm-custom")
    import summary

    assert summary.truth(rec) == "exact", rec.get("err")
    assert rec["verdict"] == "proved", rec["qflow"]["pre"]["findings"]
    [masked] = [f for f in rec["qflow"]["pre"]["findings"] if f["kind"] == "requant-after-passthrough"]
    assert masked["severity"] == "info"
    for form in ("lowered", "pte"):
        assert rec["qflow"][form]["verdict"] == "proved", rec["qflow"][form]["findings"]
        [masked] = [f for f in rec["qflow"][form]["findings"] if f["kind"] == "passthrough-domain-change"]
        assert masked["severity"] == "info"


def test_the_joint_output_bound_holds_where_an_activation_clamps_a_dropped_chain(campaign: Any) -> None:
    """01139-cm-custom: relu's requant A → C and pixel_shuffle's C → D are both dropped. The pair was weighed as
    a copy of A's codes read as D (`output_lsb` 85) while the backend clamps those codes by the relu's bound
    quantized in C on the way (measured 122 LSB beyond the band, 2026-11-27): a chain through an activation
    is no copy, so its end is not bounded as one (the campaign's output-bound check)."""
    import summary

    rec = campaign("01139-cm-custom")
    assert summary.truth(rec) == "miscompile" and rec["verdict"] == "error", rec.get("err")
    assert not summary.reach_exceeded(rec), summary.reach_check(rec)


def test_the_joint_output_bound_holds_where_a_chain_copies_wrong_codes(campaign: Any) -> None:
    """00398-tx-arm-custom: a requant dropped after a view (wrong codes into an attention), then a round trip
    A → B → A after a permute and a clone, weighed whole. The chain's end was bounded by the round trip's own
    one code of A, forgetting that the codes it copies carried the view's error: `output_lsb` 1, measured 62
    LSB beyond the band on the TOSA reference model (2026-11-27). Now 256."""
    import summary

    rec = campaign("00398-tx-arm-custom")
    assert summary.truth(rec) == "miscompile" and rec["verdict"] == "error", rec.get("err")
    assert not summary.reach_exceeded(rec), summary.reach_check(rec)


def test_the_joint_output_bound_follows_a_bilinear_upsample(campaign: Any) -> None:
    """01023-cm-custom: a clamp whose requant Cortex-M drops feeds both outputs, one through a bilinear
    upsample, which had no error bound (no joint bound at all). Each output of it is a convex combination of
    its inputs (Lipschitz 1): the joint bound is now about 1 output LSB (a tie flip on the way), measured 0."""
    import summary

    rec = campaign("01023-cm-custom")
    bounds = [f.get("output_lsb") for f in rec["qflow"]["pre"]["findings"] if f["severity"] == "error"]
    assert bounds and all(b is not None and b < 1.1 for b in bounds), rec["qflow"]["pre"]["findings"]
    assert not summary.reach_exceeded(rec), summary.reach_check(rec)


def test_a_maximum_on_codes_reads_both_inputs_in_one_domain(campaign: Any) -> None:
    """00091-mk-cm-custom: Cortex-M runs maximum on codes (a cortex_m.maximum of the sub's codes and the
    linear's, in two domains), 67 output LSB off on the reference kernels. qflow obliged only the first input
    (a minimum's requant bounded the outputs at 40 LSB, below what was measured): now each input of a maximum /
    minimum on codes is a code copy into the first one's domain, weighed as one, and the bound holds."""
    import summary

    rec = campaign("00091-mk-cm-custom")
    assert summary.truth(rec) == "miscompile" and rec["verdict"] == "error", rec.get("err")
    kinds = {(f["kind"], f["node"]) for f in rec["qflow"]["pre"]["findings"] if f["severity"] == "error"}
    assert ("mixed-input-domains", "maximum") in kinds, kinds
    assert summary.reach_check(rec) is not None and not summary.reach_exceeded(rec), summary.reach_check(rec)


def test_a_softmax_over_one_element_masks_a_dropped_requant(campaign: Any) -> None:
    """00198-tx-arm-custom (a former false alarm): the requant Arm drops after a view moves codes by up to 213
    LSB, but they reach the outputs only through a softmax over a row of one element, decomposed into
    x - amax(x): the same codes on both sides, 0 whatever they are (measured exact). Before partitioning it
    proves; lowered, it is no longer an error (2026-11-29: unproven)."""
    import summary

    rec = campaign("00198-tx-arm-custom")
    assert summary.truth(rec) == "exact", rec.get("err")
    assert rec["verdict"] == "proved", rec["qflow"]["pre"]["findings"]
    assert rec["qflow"]["lowered"]["verdict"] != "error", rec["qflow"]["lowered"]["findings"]


def test_a_value_less_an_op_that_is_the_identity_on_it_is_zero(campaign: Any) -> None:
    """00081-arm-custom (a former false alarm): ``abs(t) - t`` with t a tanh in a domain of reals >= 0 is 0
    everywhere, so the requant Arm drops after the relu that reads it moves no code (measured exact on the
    TOSA reference model). qflow flagged it (228 LSB) when it took abs(t) and t for two values. Lowered, the
    TOSA CLAMP of the relu is its bounds quantized in the requant's output domain, on the codes it copies: the
    partition's own drop (tests/test_tosa_artifact.py edits that CLAMP)."""
    import summary

    rec = campaign("00081-arm-custom")
    assert summary.truth(rec) == "exact", rec.get("err")
    assert rec["verdict"] == "proved", rec["qflow"]["pre"]["findings"]
    assert rec["qflow"]["lowered"]["verdict"] == "proved", rec["qflow"]["lowered"]["findings"]


def test_a_where_whose_condition_has_one_outcome_masks_a_dropped_requant(campaign: Any) -> None:
    """03110-tx-arm-custom (a former false alarm, before partitioning and lowered): the requant Arm drops after
    a view moves codes by up to 146 output LSB on the attention scores, but what follows them reaches the
    outputs only through ``where(x > 0.5, x, 2.0)``, whose 0.5 quantizes to the top code of x's domain: the
    comparison is false on every code, on both sides (measured exact on the TOSA reference model). Lowered,
    the comparison runs in one partition, the where on the CPU, and the wrong codes enter the partition
    through an input its call feeds."""
    import summary

    rec = campaign("03110-tx-arm-custom")
    assert summary.truth(rec) == "exact", rec.get("err")
    assert rec["verdict"] == "proved", rec["qflow"]["pre"]["findings"]
    assert rec["qflow"]["lowered"]["verdict"] == "proved", rec["qflow"]["lowered"]["findings"]


@pytest.mark.parametrize(
    "cid, dropped",
    [
        # a bmm reads a view's int8 codes as int16 (4.5x); its scores then go into an add beside a mask on a grid
        # 1.2e4 times coarser, and every sum rounds to the mask's code whatever the scores hold
        ("05038-tx-arm-custom", "view"),
        # a bmm's codes read 25x off, then x 0.25 onto a grid of 2.09: code 0 on both sides
        ("02016-tx-arm-custom", "_unsafe_view"),
    ],
)
def test_a_requant_that_rounds_both_sides_to_one_code_masks_a_dropped_requant(
    campaign: Any, cid: str, dropped: str
) -> None:
    """Former false alarms (measured exact on the TOSA reference model; 100 searched inputs: 05038 moves output
    0 by 1 LSB, a tie, and 02016 nothing): the requant Arm drops after a view hands a bmm codes in the wrong
    domain, but a later requant rounds every value either side can reach to one code."""
    import summary

    rec = campaign(cid)
    assert summary.truth(rec) == "exact", rec.get("err")
    assert rec["verdict"] == "proved", rec["qflow"]["pre"]["findings"]
    masked = {f["node"] for f in rec["qflow"]["pre"]["findings"] if f["kind"] == "requant-after-passthrough"}
    assert dropped in masked, rec["qflow"]["pre"]["findings"]
    assert rec["qflow"]["lowered"]["verdict"] != "error", rec["qflow"]["lowered"]["findings"]


def test_a_folded_round_trip_through_a_narrower_domain_stays_an_error(campaign: Any) -> None:
    """02169-arm-custom (98 output LSB on the TOSA reference model): a view into an int16 domain whose range
    ends at 1.6, then a hardtanh(0.2, 3) back into the view's int8 input domain. The program clips at 1.6, the
    backend copies the codes up to 3.0: the round trip is weighed over the codes the view reads (its input's),
    not over the values the program's requant leaves (a first build of the round trip, with the copy's range
    clipped to the domain it claims, proved this partition)."""
    import summary

    rec = campaign("02169-arm-custom")
    assert summary.truth(rec) == "miscompile", rec.get("err")
    assert rec["qflow"]["folded"]["verdict"] == "error", rec["qflow"]["folded"]


@pytest.mark.parametrize("cid", ["00950-tx-arm-custom", "00610-tx-arm-custom", "00495-arm-custom", "02159-arm-custom"])
def test_a_folded_partition_weighs_its_dropped_requants_as_the_qdq_form_does(campaign: Any, cid: str) -> None:
    """Each Arm partition as the fold pass leaves it (analysed alone, as observe mode does) proves where the
    program before partitioning proves the same drop masked (issue #27, item 3). 00950 / 00610: the fold keeps
    the weights and a scalar operand as codes, their domains in the reader's ``input_qparams``; read as those
    reals (as the Q/DQ form's dequantize gives them) the drop's error is bounded through the mul and the linear
    after it (unbounded before: an error). 00495: a slice into a finer domain, then a clamp back into the
    slice's input domain — the requant the fold drops and the one it keeps undo each other, weighed as a chain
    (`bounds.copied_through`), as the Q/DQ form's requant-carried. 02159: a neg's dropped scale into a clamp that
    pins both sides to its low end, the clamp itself the partition's output."""
    import summary

    rec = campaign(cid)
    assert summary.truth(rec) == "exact", rec.get("err")
    folded = rec["qflow"]["folded"]
    assert folded["verdict"] == "proved", folded
    parts = [p for k, p in folded.items() if k[0] == "p" and k[1:].isdigit()]
    drops = [f for p in parts for f in p["findings"] if f["kind"] in ("passthrough-domain-change", "dropped-scale")]
    assert drops and all(f["severity"] == "info" for f in drops), drops


@pytest.mark.parametrize(
    "cid",
    [
        "00950-tx-arm-custom",
        "00610-tx-arm-custom",
        "05158-tx-arm-custom",
        "00154-mk-arm-custom",
        "04057-tx-arm-custom",
        "00697-arm-pt",
    ],
)
def test_an_artifact_copy_that_realises_a_dropped_requant_is_weighed_with_it(campaign: Any, cid: str) -> None:
    """The lowered program's artifact check matches the TOSA copy to the view whose requant the partition
    drops (its input domain, its shape, an op after it that came from one of the view's readers), records
    the drop there as the partition's, and checks the ops downstream against the domain they read it in.
    The view's obligation weighs it: masked, and no artifact mismatch is left. 00950: three mismatches, all
    the same drop (a RESCALE's input zero point, a CONV2D bias, the output's scale). 00610: the reader is
    behind a standalone requant (a RESCALE no PT2E op is named for) that takes the codes back into the
    view's input domain, where the copy after it must not be matched to the drop again. 05158 (fresh seed,
    100 searched inputs at 0 LSB): Arm removes the expand whose int8 -> int16 requant it drops, so no copy
    realises it: the standalone requant's RESCALE reads the codes with the int16 zero point; four mismatches
    followed (that zero point, a MATMUL's, an ADD of two int32 grids, an exp TABLE 248x off). 00154-mk: the
    same, then a copy of codes taken back into the expand's input domain, which must not be matched to the
    drop again (as 00610's; a first build of the RESCALE match did, three errors). 04057: Arm
    merges an expand and the view after it into one RESHAPE, whose two requants (there and back) it drops: the
    copy realises both, in turn. 00697 (stock a8w8): a neg's output scale dropped 0.05 % (NEGATE keeps its
    input's), a hair the NEGATE check lets pass but a depthwise conv's bias after it, declared in the neg's
    scale, did not."""
    import summary

    rec = campaign(cid)
    assert summary.truth(rec) == "exact", rec.get("err")
    lowered = rec["qflow"]["lowered"]
    assert lowered["verdict"] == "proved", lowered["findings"]
    drops = [f for f in lowered["findings"] if f["kind"] in ("requant-after-passthrough", "dropped-scale")]
    assert drops and all(f["severity"] == "info" for f in drops), drops  # (masked: an info finding)
    assert not [f for f in lowered["findings"] if f["kind"] == "tosa-artifact-mismatch"]


def test_an_artifact_rescale_reading_a_merged_duplicate_is_weighed_with_it(campaign: Any) -> None:
    """02172-tx-arm-custom (exact; 0 LSB on 64 more inputs, 16 levels and a 30-run search): Arm merges one sum
    into its duplicate of another domain (FuseDuplicateUsersPass), and the RESCALE after it reads the
    survivor's codes with the merged sum's zero point. The partition's own obligation weighs the merge
    (masked, as before partitioning); the artifact check said it again there and at a SUB downstream, two
    errors. It now matches the RESCALE to the merge, says it once, and walks on in the merged sum's domain:
    the lowered program is unproven for what is unproven before partitioning (a skipped requant), no error."""
    import summary

    rec = campaign("02172-tx-arm-custom")
    assert summary.truth(rec) == "exact", rec.get("err")
    lowered = rec["qflow"]["lowered"]
    assert lowered["verdict"] != "error", lowered["findings"]
    merged = [f for f in lowered["findings"] if f["kind"] == "merged-duplicate-users"]
    assert merged and all(f["severity"] == "info" for f in merged), merged
    assert not [f for f in lowered["findings"] if f["kind"] == "tosa-artifact-mismatch"]


def test_an_artifact_mismatch_no_output_sees_is_let_go_with_the_partition(campaign: Any) -> None:
    """03086-tx-arm-custom: a custom domain on a cat whose requant Arm drops, inside attention whose only way to
    the output is a relu whose input's every code is <= 0 (masked-by-constant). The partition's obligations
    there are let go; the TOSA artifact's checks at the same nodes (the RESCALE reading the concat with the cat's
    zero point, the exp TABLE reading the wrong scale) were errors on a program the reference model computes
    exactly. They go with the partition's (`DomainGraph.unreached`); without the constant relu they stay
    errors (tests/test_masked.py)."""
    rec = campaign("03086-tx-arm-custom")
    import summary

    assert summary.truth(rec) == "exact", rec.get("err")
    lowered = rec["qflow"]["lowered"]
    assert lowered["verdict"] == "proved", lowered["findings"]
    assert any(f["kind"] == "masked-by-constant" for f in lowered["findings"]), lowered["findings"]


def test_a_weight_reshape_is_computed_ahead_of_time_before_calibration(campaign: Any) -> None:
    """00066-tx-arm-custom (measured exact): a custom domain on the reshape of a LayerNorm weight. The reshape is
    computed from constants, which the lowering does ahead of time, in float: no codes are copied across it.
    The Q/DQ form knew it; the annotated graph called it a `passthrough-domain-change` error (10 of the
    transformer campaign's 19 annotated false alarms, 2026-11-28)."""
    import summary

    rec = campaign("00066-tx-arm-custom")
    assert summary.truth(rec) == "exact", rec.get("err")
    annotated = rec["qflow"]["annotated"]
    assert annotated["verdict"] != "error", annotated["findings"]
    assert not [f for f in annotated["findings"] if f["kind"] == "passthrough-domain-change"], annotated["findings"]


def test_a_stock_program_with_two_partitions_proves_lowered(campaign: Any) -> None:
    """00476-tx-arm-pc (stock a8w8; a former lowered-form false alarm, measured exact): the second partition's
    softmax TABLEs are named after its nodes as Arm's passes number them again (its first ``exp`` is their
    ``aten_exp_default``, the program's ``aten_exp_default_1``), and the SDPA's scale and a masked_fill's
    fill value, equal codes in two domains, are folded into one merged constant. The TABLEs are each read
    against the node they tabulate, each use of the merged constant in the domain its PT2E node reads it
    in: proved lowered (was an error: two TABLEs against the other softmax). Before partitioning the two
    softmax chains are duplicates the pass would merge in one partition: unproven there, not an error."""
    import summary

    rec = campaign("00476-tx-arm-pc")
    assert summary.truth(rec) == "exact", rec.get("err")
    kinds = {f["kind"] for f in rec["qflow"]["pre"]["findings"] if f["severity"] != "info"}
    assert rec["verdict"] == "warning" and kinds == {"merged-duplicate-users"}, rec["qflow"]["pre"]["findings"]
    assert rec["qflow"]["lowered"]["verdict"] == "proved", rec["qflow"]["lowered"]


def test_a_round_trip_whose_rounding_moves_a_code_is_weighed(campaign: Any) -> None:
    """03214-tx-arm-custom (fresh seeds, 2026-11-27; a proved miss): a requant A -> B after an expand and back B -> A
    after a view, both folded away by Arm. B clips nothing, but its half step (0.0099) is more than half of A's
    (0.0076): the fake-quantized model's round trip lands values one code of A away, not only at ties, and a
    matmul of that operand moves the output by 210 LSB on the TOSA reference model. qflow carried such a chain
    as exact; it carries only chains whose skipped roundings move no code of A, and weighs the rest."""
    import summary

    rec = campaign("03214-tx-arm-custom")
    assert summary.truth(rec) == "miscompile", rec.get("err")
    assert rec["verdict"] == "error", rec["qflow"]["pre"]["findings"]


def test_a_dropped_requant_across_a_clamp_is_weighed_by_the_codes_the_passes_keep(campaign: Any) -> None:
    """01161-cm-custom (a former false alarm): Cortex-M drops the requants across two hardtanhs and clamps
    their input's codes by bounds quantized into the output domain (measured by running the passes on a
    copy: clamp(-101, -54), then clamp(127, 127), one code, the program's own). The first moves codes by up
    to 47 LSB, the second keeps only the code the program has (0 at every output, measured exact): before
    the passes it proves; after them, and as a `.pte`, each clamp is read as the same dropped requant, its
    bounds checked against the hardtanh it was made of (they were a `kernel-argument-mismatch` error)."""
    import summary

    rec = campaign("01161-cm-custom")
    assert summary.truth(rec) == "exact", rec.get("err")
    for form in ("pre", "lowered", "pte"):
        assert rec["qflow"][form]["verdict"] == "proved", (form, rec["qflow"][form]["findings"])


#: torchao `quantize_` cases (issue #28, torchao_case.py): id → (the runtime's outcome, qflow's verdict before
#: lowering with target="xnnpack", why the case is here).
TORCHAO_CASES: dict[str, tuple[str, str, str]] = {
    "00001-tao-8da8w": ("exact", "proved", "dynamic int8 x int8 per channel: within float rounding"),
    "00005-tao-8da4w": ("exact", "proved", "dynamic int8 x int4 per group: exact once the scales are bf16"),
    "00002-tao-int4wo": ("miscompile", "error", "weight-only int4: XNNPACK multiplies by the raw codes"),
    "00003-tao-int8wo": ("miscompile", "error", "weight-only int8: the same, every linear"),
    "00123-tao-int8wo": ("exact", "proved", "a weight-only linear no output depends on: dead code, lands nothing"),
    "00116-tao-8da8w": ("miscompile", "warning", "a tanh GELU computed as the exact one, into a float output"),
    "00004-tao-int8dyn": ("lowering-failed", "proved", "int8 x int8 dynamic: integer matmul, refused by to_edge"),
}


@pytest.mark.parametrize("cid", TORCHAO_CASES)
def test_torchao_verdict_matches_the_runtime(campaign: Any, cid: str) -> None:
    rec = campaign(cid)
    outcome, verdict, why = TORCHAO_CASES[cid]
    crashed = {form: q.get("error") for form, q in rec["qflow"].items() if q.get("verdict") == "crash"}
    assert not crashed, f"{cid}: qflow crashed: {crashed}"
    assert rec["outcome"] == outcome, f"{cid} ({why}): the runtime now gives {rec['outcome']} ({rec.get('cmp')})"
    assert rec["verdict"] == verdict, f"{cid} ({why}): {rec['qflow']['pre']['findings']}"
    if outcome == "exact":  # never an error in any form
        assert all(q["verdict"] != "error" for q in rec["qflow"].values()), rec["qflow"]
    if cid == "00005-tao-8da4w":  # against float32 scales the same run is off: the bf16 reference matters
        assert rec["cmp_fp32_scales"]["ratio"] > rec["cmp"]["ratio"] * 10, rec


def test_a_pad_lowered_for_the_other_layout_is_an_error_after_the_passes(campaign: Any) -> None:
    """00158-cm: the program CortexMPassManager returns pads C and W where the program it was given pads
    H and W; read with that program, the pad's shape is an error (and before the passes, run on a copy)."""
    rec = campaign("00158-cm")
    assert "shape" in str(rec.get("err", {}).get("why")), rec.get("err")  # (the outputs' shapes differ)
    found = [f for f in rec["qflow"]["lowered"]["findings"] if f["severity"] == "error"]
    assert [(f["kind"], f["node"]) for f in found] == [("kernel-argument-mismatch", "cortex_m_pad_default")], found
    assert "pads [1, 6, 2, 2] to [1, 7, 2, 3]" in found[0]["message"]
    before = [(f["kind"], f["node"]) for f in rec["qflow"]["pre"]["findings"] if f["severity"] == "error"]
    assert before == [("kernel-argument-mismatch", "pad")], rec["qflow"]["pre"]["findings"]
    # before calibration the passes cannot run: the pad is unproven there (it was proved), never proved
    annotated = rec["qflow"]["annotated"]
    assert annotated["verdict"] == "warning", annotated
    assert [(f["kind"], f["node"]) for f in annotated["findings"]] == [("kernel-argument-mismatch", "pad")]


def test_a_clamp_left_on_codes_is_weighed_by_what_the_program_computes(campaign: Any) -> None:
    """01187-cm-custom: after the passes, ``clamp(-1.0, 1.0)`` is left on the avg pool's codes (zero point 69) as
    written, so it writes codes -1 to 1 (reals near -2.8) where the program clamps reals to [-1, 1]; the output's
    requant then clips the backend's values and not all of the program's. qflow read the clamp's own value as
    what the backend computes on both sides and proved nothing wrong reached the output (until 2026-12-03);
    the program's side is the clamp of reals. The kernels cannot run it (a float clamp of int8 codes is float)."""
    rec = campaign("01187-cm-custom")
    assert rec["outcome"] == "run-failed" and "torch.int8" in rec["error"], (rec["outcome"], rec.get("error"))
    found = [f for f in rec["qflow"]["lowered"]["findings"] if f["severity"] == "error"]
    assert [f["kind"] for f in found] == ["real-constant-on-codes"], rec["qflow"]["lowered"]["findings"]
    assert found[0].get("output_lsb", 0) > 100, found


def test_reducer_keeps_specs_valid() -> None:
    """The reducer's steps yield runnable specs with fewer ops (no pipeline run)."""
    sys.path.insert(0, str(CAMPAIGN))
    import gen
    import reduce as red

    spec = red.dce(gen.generate(1))
    cands = red.candidates(spec)
    assert cands
    for c in cands:
        gen.SpecModel(c)
        assert len(c["ops"]) < len(spec["ops"]) or len(c["outputs"]) < len(spec["outputs"]) or len(c["inputs"]) < 2


def test_rounding_budget_counts_ties_and_carries_them_through_a_sum() -> None:
    """The truth rule's budget: a value on a rounding tie may land on either
    code, and a sum carries that code on to the next quantize."""
    sys.path.insert(0, str(CAMPAIGN))
    import case
    import torch
    from torchao.quantization.pt2e import quantize_pt2e  # noqa: F401 - registers quantized_decomposed

    qd = torch.ops.quantized_decomposed

    def f(x: torch.Tensor) -> torch.Tensor:
        d = qd.dequantize_per_tensor(
            qd.quantize_per_tensor(x, 0.5, 0, -128, 127, torch.int8), 0.5, 0, -128, 127, torch.int8
        )
        s = torch.sum(d, dim=[1], keepdim=True)
        return qd.dequantize_per_tensor(
            qd.quantize_per_tensor(s, 1.0, 0, -128, 127, torch.int8), 1.0, 0, -128, 127, torch.int8
        )

    gm = torch.fx.symbolic_trace(f)
    off_ties = case.rounding_budget(gm, [(torch.tensor([[0.2, 1.0, 2.0, 3.0]]),)])
    on_a_tie = case.rounding_budget(gm, [(torch.tensor([[0.25, 1.0, 2.0, 3.0]]),)])
    assert off_ties == [0.0]
    assert on_a_tie == [1.0]  # 0.25 is half a step of 0.5: one code (0.5) there, one code (1.0) after the sum


def test_every_stress_input_is_built_when_a_constant_is_requantized() -> None:
    """The truth rule's inputs: a LayerNorm's weight reshape is a quantized value no input reaches; it once
    made every stress input fail (412 of 1000 transformer cases judged on the samples alone)."""
    sys.path.insert(0, str(CAMPAIGN))
    import random

    import case
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from qflow.targets.arm.pipeline import export_module

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 4)).eval()
    samples = [(torch.randn(2, 8, generator=torch.Generator().manual_seed(k)),) for k in range(4)]
    prepared = prepare_pt2e(export_module(model, samples[0]), case.make_quantizer("arm-pc", random.Random(0), {}))
    for s in samples:
        prepared(*s)
    converted = convert_pt2e(prepared)
    assert any(
        case._is_quantize(q) and isinstance(q.args[0], torch.fx.Node) and not case._reads_inputs(q.args[0])
        for q in converted.graph.nodes
    ), "the program has no quantized constant: the test lost its point"
    extra = case.domain_inputs(converted, samples, seed=0)
    assert len(extra) == 1 + 2 * case.STRESS_VALUES + len(case.NARROW_LEVELS) * len(case.NARROW_SPREADS)
    assert all(not torch.equal(x[0], extra[0][0]) for x in extra[1:3])  # pushed away from the uniform input
