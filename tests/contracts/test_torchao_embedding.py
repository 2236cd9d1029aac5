"""torchao's weight-only embeddings (`IntxWeightOnlyConfig` on `nn.Embedding`, issue #28) shipped as
ExecuTorch ships them: `to_executorch(ExecutorchBackendConfig(do_quant_fusion_and_const_prop=True))`,
what `export_llm` runs, packs each `dequantize_affine` → `embedding` into a quantized embedding kernel
(`QuantFusionPass`: 4-bit two codes to a byte, 2-bit four).

Measured (2026-11-27, torch 2.13.0, torchao 0.18.0, executorch 1.5.1): for int4 per group of 32
(symmetric), int8 per row and int2 per group of 32 (asymmetric), the `.pte` runs on the ExecuTorch
runtime within float rounding of the quantized eager model, and qflow proves the program before
lowering, lowered and as a `.pte`. Checked against the program it came from (`reference=`), the
kernel's table — its codes unpacked as the kernel unpacks them, dequantized by its scales and zero
points — must be the program's: every mutant of the shipped bytes that changes the output is a
`kernel-argument-mismatch` error there. (Without the program, a `.pte` cannot tell: each mutant is
proved, as the `.pte` states nothing else.)
"""

from __future__ import annotations

import copy

import executorch.kernels.quantized  # noqa: F401 - registers the quantized kernels with the runtime
import numpy as np
import pytest
import torch
from executorch.exir import ExecutorchBackendConfig
from test_quantized_embedding import Built  # (the same record: a program in each form, its two outputs)
from torchao.quantization import quantize_
from torchao.quantization.granularity import PerAxis, PerGroup
from torchao.quantization.quant_api import IntxWeightOnlyConfig, MappingType

import qflow
from qflow.ir.pte_program import read_pte
from qflow.targets.xnnpack import pipeline as xnnpack

CONFIGS = {
    "int4-group32-symmetric": (torch.int4, PerGroup(32), MappingType.SYMMETRIC),
    "int8-per-row-asymmetric": (torch.int8, PerAxis(0), MappingType.ASYMMETRIC),
    "int2-group32-asymmetric": (torch.int2, PerGroup(32), MappingType.ASYMMETRIC),
}
#: every row once
TOKENS = (torch.arange(128).reshape(1, -1),)
#: float32 rounding of a 64-term dot product, relative to the output's magnitude (fixed)
FLOAT_ROUNDING = 1e-5


@pytest.fixture(scope="module")
def shipped() -> dict[str, Built]:
    out = {}
    for name, (dtype, granularity, mapping) in CONFIGS.items():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Embedding(128, 64), torch.nn.Linear(64, 16)).eval()
        config = IntxWeightOnlyConfig(weight_dtype=dtype, granularity=granularity, mapping_type=mapping)
        quantize_(model, config, filter_fn=lambda m, _: isinstance(m, torch.nn.Embedding))
        exported = torch.export.export(model, TOKENS)
        edge = xnnpack.lower(copy.deepcopy(exported), TOKENS)
        pte = edge.to_executorch(ExecutorchBackendConfig(do_quant_fusion_and_const_prop=True)).buffer
        with torch.no_grad():
            eager = model(*TOKENS)
        out[name] = Built(exported, edge, pte, eager, xnnpack.run(pte, TOKENS)[0])
    return out


def _kernel(pte: bytes) -> tuple[str, list]:
    """The embedding kernel the .pte calls and its arguments' values."""
    prog = read_pte(pte)
    plan = prog.plans[0]
    call = next(c for c in plan.calls if c.kind == "kernel" and "embedding_" in c.name)
    return call.name, [plan.value(i) for i in call.args]


@pytest.mark.parametrize("config", CONFIGS)
def test_the_fused_kernel_runs_the_quantized_model(shipped, config) -> None:
    s = shipped[config]
    assert "quantized_decomposed::embedding_" in _kernel(s.pte)[0]
    scale = float(s.eager.abs().max())
    assert float((s.got - s.eager).abs().max()) <= FLOAT_ROUNDING * scale


@pytest.mark.parametrize("config", CONFIGS)
def test_qflow_proves_it_before_lowering_lowered_and_shipped(shipped, config) -> None:
    s = shipped[config]
    for program, kw in [
        (s.exported, {}),
        (s.exported, {"target": "xnnpack"}),
        (s.edge, {"target": "xnnpack"}),
        (s.pte, {}),
        (s.pte, {"reference": s.exported}),
    ]:
        report = qflow.analyze(program, **kw)
        assert report.status == "proved", str(report)
    alone, against = qflow.analyze(s.pte), qflow.analyze(s.pte, reference=s.exported)
    assert against.obligations["proved"] == alone.obligations["proved"] + 1  # (the table, checked)


def _mutants(pte: bytes) -> dict[str, bytes]:
    """One edit of the shipped bytes per argument of the kernel: a code byte, a scale, a zero point."""
    prog = read_pte(pte)
    _, args = _kernel(pte)
    out = {}
    for what, ev in zip(("codes", "scales", "zero points"), args[:3], strict=True):
        data = prog.array(ev) if ev.kind == "Tensor" else None
        if data is None:
            continue
        raw = data.tobytes()
        at = pte.find(raw)
        assert at > 0 and pte.find(raw, at + 1) < 0, f"the {what} are not once in the .pte"
        edited = data.copy().reshape(-1)
        k = edited.size // 3
        if what == "codes":
            edited[k] = edited[k] ^ np.array(0x11, dtype=edited.dtype)  # (a code in every slot of the byte)
        elif what == "scales":
            edited[k] = edited[k] * 2
        else:
            edited[k] = edited[k] + 1
        out[what] = pte[:at] + edited.tobytes() + pte[at + len(raw) :]
    return out


@pytest.mark.parametrize("config", CONFIGS)
def test_every_mutant_of_the_shipped_table_is_an_error_against_the_program(shipped, config) -> None:
    s = shipped[config]
    mutants = _mutants(s.pte)
    assert {"codes", "scales"} <= set(mutants)
    for what, pte in mutants.items():
        got = xnnpack.run(pte, TOKENS)[0]
        assert not torch.equal(got, s.got), f"{config}: the {what} mutant changes nothing"
        report = qflow.analyze(pte, reference=s.exported)
        found = [f for f in report.errors if f.kind == "kernel-argument-mismatch"]
        assert found and "values differ from the reference's" in found[0].message, (what, str(report))
        assert qflow.analyze(pte).status == "proved"  # (the .pte alone states nothing else)
