"""One torchao campaign case (issue #28): generate (the LLM menu) → torchao `quantize_` with the
variant's config → `torch.export` → qflow before lowering (`target="xnnpack"` and no target) →
lower with the stock `XnnpackPartitioner` → qflow on the lowered program and on the `.pte` → run the
`.pte` on the ExecuTorch runtime → compare with the quantized eager model.

Test inputs: three samples of the spec's distributions and one spanning input (`campaign_inputs`).
Truth rule (README.md here), fixed from the backend's measured format and the reference alone —
never from qflow or from the run it judges: the *reference* is the quantized model in eager PyTorch
with its int4 weights' scales rounded to bfloat16, the precision XNNPACK's payload keeps them in
(benchmarks/affine_contract.md: the runtime equals that model within float rounding). An output
computes right when max |runtime − reference| is within TIE_FACTOR × its band; the band is the larger
of FLOAT_REL × max |reference| and how far the reference itself moves when the result of every op
between the inputs and the outputs is perturbed by a relative TIE_JITTER (a float kernel that rounds
differently breaks a dynamic quantization's ties the other way). Otherwise a miscompile. The distance
from the model with float32 scales is recorded beside it.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
from torchao.utils import _cpu_is_amx_tile_supported, _cpu_is_vnni_supported

try:  # run as a script (benchmarks/soundness on sys.path) or as a package
    import case
    from gen import SpecModel, generate, sample_inputs
except ImportError:  # pragma: no cover
    from benchmarks.soundness import case
    from benchmarks.soundness.gen import SpecModel, generate, sample_inputs

TAO_VARIANTS = case.TAO_VARIANTS
N_TEST = 3
#: The spanning input's range: every float input uniform over [-SPAN, SPAN], both signs (the samples
#: of one distribution may never open a sign-gated path: a relu of inputs that are all negative).
SPAN = 4.0
FLOAT_REL = 1e-5
TIE_JITTER = 1e-5
TIE_TRIALS = 40
TIE_FACTOR = 2.0


def config_of(variant: str) -> Any:
    """The torchao config a variant quantizes with (the four of issue #28, and 8da8w)."""
    from torchao.quantization.granularity import PerAxis, PerGroup
    from torchao.quantization.quant_api import (
        Int8DynamicActivationInt8WeightConfig,
        Int8DynamicActivationIntxWeightConfig,
        Int8WeightOnlyConfig,
        IntxWeightOnlyConfig,
    )

    return {
        "tao-8da4w": lambda: Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int4, weight_granularity=PerGroup(32)
        ),
        "tao-8da8w": lambda: Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int8, weight_granularity=PerAxis(0)
        ),
        "tao-int4wo": lambda: IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)),
        "tao-int8wo": Int8WeightOnlyConfig,
        "tao-int8dyn": Int8DynamicActivationInt8WeightConfig,
    }[variant]()


def quantized(spec: dict[str, Any], variant: str) -> torch.nn.Module:
    """The spec's model with every `nn.Linear` quantized by the variant's config (torchao's default filter)."""
    from torchao.quantization import quantize_

    model = SpecModel(spec).eval().requires_grad_(False)
    quantize_(model, config_of(variant))
    return model


def with_payload_scales(model: torch.nn.Module) -> torch.nn.Module:
    """A copy whose int4 weights' scales are rounded to bfloat16, as the XNNPACK payload keeps them."""
    out = copy.deepcopy(model)
    for mod in out.modules():
        w = getattr(mod, "weight", None)
        scale = getattr(w, "scale", None)
        if isinstance(scale, torch.Tensor) and scale.is_floating_point() and _is_int4(w):
            with torch.no_grad():
                scale.copy_(scale.to(torch.bfloat16).to(scale.dtype))
    return out


def _is_int4(w: Any) -> bool:
    qdata = getattr(w, "qdata", None)
    return getattr(w, "target_dtype", None) == torch.int4 or (
        isinstance(qdata, torch.Tensor) and qdata.numel() > 0 and int(qdata.min()) >= -8 and int(qdata.max()) <= 7
    )


def campaign_inputs(spec: dict[str, Any], seed: int) -> list[case.Inputs]:
    """The spec's N_TEST samples, then one spanning input (token ids: another draw)."""
    samples = sample_inputs(spec, N_TEST + 1, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    span = tuple(
        torch.rand(t.shape, generator=g) * 2 * SPAN - SPAN if t.is_floating_point() else t for t in samples[-1]
    )
    return [*samples[:N_TEST], span]


def tie_spread(program: Any, tests: list[case.Inputs]) -> list[float]:
    """Per output, how far the reference moves when every op result that depends on an input is
    perturbed by a relative TIE_JITTER (seeded), the worst of TIE_TRIALS trials per test input."""
    gm = program.module()
    gen = torch.Generator().manual_seed(0)

    def jitter(x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            return x
        return x * (1 + TIE_JITTER * torch.randn(x.shape, generator=gen))

    live = {n for n in gm.graph.nodes if n.op == "placeholder"}
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or not any(a in live for a in n.all_input_nodes):
            continue
        live.add(n)
        if not isinstance(n.meta.get("val"), torch.Tensor) or "quantize" in str(n.target):
            continue  # (a quantize's codes are integers: its float input is jittered instead)
        with gm.graph.inserting_after(n):
            j = gm.graph.call_function(jitter, (n,))
        n.replace_all_uses_with(j, delete_user_cb=lambda u, j=j: u is not j)
        live.add(j)
    gm.recompile()
    worst: list[float] = []
    with torch.no_grad():
        for x in tests:
            want = case._as_list(program.module()(*x))
            for _ in range(TIE_TRIALS):
                got = case._as_list(gm(*x))
                moved = [float((g - w).abs().max()) if w.numel() else 0.0 for g, w in zip(got, want, strict=True)]
                worst = [max(a, b) for a, b in zip(worst, moved, strict=True)] if worst else moved
    return worst


def compare(got: list[list[torch.Tensor]], want: list[list[torch.Tensor]], bands: list[float]) -> dict[str, Any]:
    """The worst output's error against its band; `truth` is `exact` or `miscompile`."""
    worst: dict[str, Any] = {"abs": 0.0, "ratio": 0.0, "truth": "exact"}
    for g_outs, w_outs in zip(got, want, strict=True):
        if len(g_outs) != len(w_outs):
            return {"truth": "miscompile", "why": f"{len(g_outs)} outputs, expected {len(w_outs)}"}
        for k, (g, w) in enumerate(zip(g_outs, w_outs, strict=True)):
            if tuple(g.shape) != tuple(w.shape):
                return {"truth": "miscompile", "why": f"shape {tuple(g.shape)} vs {tuple(w.shape)}"}
            d = float((g.float() - w.float()).abs().max()) if g.numel() else 0.0
            if d != d:
                return {"truth": "miscompile", "why": "nan"}
            ratio = d / bands[k] if bands[k] > 0 else (0.0 if d == 0 else float("inf"))
            if ratio >= worst["ratio"]:
                scale = float(w.abs().max()) if w.numel() else 0.0
                worst = {"abs": d, "ratio": ratio, "output": k, "band": bands[k], "rel": d / scale if scale else d}
                worst["truth"] = "exact" if ratio <= TIE_FACTOR else "miscompile"
    return worst


def run_case(cid: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything about one torchao case, as one JSON-able dict (every stage's failure an outcome)."""
    index, variant = case.parse_id(cid)
    spec = spec if spec is not None else generate(index, "llm")
    rec: dict[str, Any] = {"id": cid, "variant": variant, "target": "xnnpack", "n_ops": len(spec["ops"])}
    rec["ops"] = sorted({op["kind"] for op in spec["ops"]})
    rec["qflow"], rec["qflow_rev"] = {}, case.qflow_revision()
    if variant == "tao-int8dyn":  # (torchao exports one of two integer matmuls, by this CPU)
        rec["int_mm"] = "u8s8" if _cpu_is_vnni_supported() and not _cpu_is_amx_tile_supported() else "s8s8"
    case._CURRENT.clear()
    case._CURRENT.update(rec)
    rec = case._CURRENT
    t0 = time.perf_counter()
    tests = campaign_inputs(spec, index)
    try:
        case.stage("quantize")
        model = case._timed(rec, "quantize", lambda: quantized(spec, variant))
        exported = torch.export.export(model, tests[0])
        reference = torch.export.export(with_payload_scales(model), tests[0])
    except Exception as e:  # noqa: BLE001 - an invalid case, not the backend's
        rec.update(outcome="quantize-failed", error=case._err(e))
        rec["time"]["total"] = round(time.perf_counter() - t0, 3)
        return dict(rec)
    with torch.no_grad():
        want = [case._as_list(reference.module()(*x)) for x in tests]
        eager = [case._as_list(model(*x)) for x in tests]
    spread = case._timed(rec, "band", lambda: tie_spread(reference, tests))
    scale = [max(float(w[k].abs().max()) if w[k].numel() else 0.0 for w in want) for k in range(len(spread))]
    bands = [max(FLOAT_REL * s, t) for s, t in zip(scale, spread, strict=True)]
    rec["bands"] = [{"band": b, "tie": t, "scale": s} for b, t, s in zip(bands, spread, scale, strict=True)]
    case.stage("qflow_pre")
    case._qflow(rec, "pre", lambda: case.analyze(copy.deepcopy(exported), "xnnpack"))
    case._qflow(rec, "generic", lambda: case.analyze(copy.deepcopy(exported)))
    rec["verdict"] = rec["qflow"]["pre"]["verdict"]
    _lower_and_run(rec, exported, tests, want, eager, bands)
    rec["time"]["total"] = round(time.perf_counter() - t0, 3)
    case.stage("done")
    return dict(rec)


def _lower_and_run(
    rec: dict[str, Any],
    exported: Any,
    tests: list[case.Inputs],
    want: list[list[torch.Tensor]],
    eager: list[list[torch.Tensor]],
    bands: list[float],
) -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from qflow.targets.xnnpack import pipeline as xnnpack

    case.stage("lower")
    try:
        edge = case._timed(
            rec,
            "lower",
            lambda: to_edge_transform_and_lower(copy.deepcopy(exported), partitioner=[XnnpackPartitioner()]),
        )
        pte = case._timed(rec, "to_executorch", lambda: xnnpack.to_executorch(edge).buffer)
    except Exception as e:  # noqa: BLE001 - a refused lowering is loud, an outcome
        rec.update(outcome="lowering-failed", error=case._err(e))
        return
    rec["delegates"] = case.n_delegates(edge)
    case.stage("qflow_lowered")
    case._qflow(rec, "lowered", lambda: case.analyze(edge.exported_program(), "xnnpack"))
    case.stage("qflow_pte")
    case._qflow(rec, "pte", lambda: case.analyze(pte, "xnnpack"))
    case.stage("qflow_pte_ref")  # (its weights against the program's: reference=)
    case._qflow(rec, "pte_ref", lambda: case.analyze(pte, "xnnpack", reference=exported))
    if rec["delegates"] == 0:
        rec["outcome"] = "not-delegated"
        return
    case.stage("run")
    try:
        got = case._timed(rec, "run", lambda: [xnnpack.run(pte, x) for x in tests])
    except Exception as e:  # noqa: BLE001 - refused when it runs: loud
        rec.update(outcome="run-failed", error=case._err(e))
        return
    cmp = compare(got, want, bands)
    rec["outcome"] = cmp["truth"]
    rec["cmp"] = cmp
    rec["cmp_fp32_scales"] = compare(got, eager, bands)


def reanalyze(rec: dict[str, Any]) -> dict[str, Any]:
    """`rec` with its `pre` / `generic` verdicts re-made by this qflow (the backend's outcome kept)."""
    index, variant = case.parse_id(rec["id"])
    spec = generate(index, "llm")
    tests = campaign_inputs(spec, index)
    exported = torch.export.export(quantized(spec, variant), tests[0])
    out = copy.deepcopy(rec)
    out.setdefault("time", {})
    out["qflow"] = dict(out.get("qflow", {}))
    case._qflow(out, "pre", lambda: case.analyze(copy.deepcopy(exported), "xnnpack"))
    case._qflow(out, "generic", lambda: case.analyze(exported))
    out["verdict"] = out["qflow"]["pre"]["verdict"]
    out["qflow_rev_pre"] = case.qflow_revision()
    return out


def owns(cid: str) -> bool:
    return cid.split("-", 1)[-1] in TAO_VARIANTS
