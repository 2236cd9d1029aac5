"""XNNPACK's contract for torchao `quantize_` linears (issue #28): each config lowered with the
stock XnnpackPartitioner and run on the ExecuTorch runtime against the quantized eager model.

    python benchmarks/affine_contract.py        # writes benchmarks/affine_contract.md

The same measurements are asserted in tests/contracts/test_xnnpack_affine_contract.py.
"""

from __future__ import annotations

import datetime
from importlib import metadata
from pathlib import Path

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torchao.quantization import quantize_
from torchao.quantization.granularity import PerAxis, PerGroup
from torchao.quantization.quant_api import (
    Int8DynamicActivationInt8WeightConfig,
    Int8DynamicActivationIntxWeightConfig,
    Int8WeightOnlyConfig,
    IntxWeightOnlyConfig,
)

import qflow
from qflow.targets.xnnpack import pipeline as xnnpack

OUT = Path(__file__).resolve().parent / "affine_contract.md"
CONFIGS = {
    "dynamic int8 × int8 per channel (8da8w)": lambda: Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int8, weight_granularity=PerAxis(0)
    ),
    "dynamic int8 × int4 group 32 (8da4w)": lambda: Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4, weight_granularity=PerGroup(32)
    ),
    "dynamic int8 × int4 per channel": lambda: Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4, weight_granularity=PerAxis(0)
    ),
    "weight-only int4 group 32": lambda: IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)),
    "weight-only int8 (Int8WeightOnlyConfig)": lambda: Int8WeightOnlyConfig(),
    "Int8DynamicActivationInt8WeightConfig": lambda: Int8DynamicActivationInt8WeightConfig(),
}


def measure(config) -> tuple[str, str, str]:
    """(the runtime's difference from the eager model, relative to its largest output; the same
    with the eager weight scales rounded to bfloat16; qflow's verdict before lowering)."""
    torch.manual_seed(0)
    model, inputs = torch.nn.Sequential(torch.nn.Linear(64, 32)).eval(), (torch.randn(2, 5, 64),)
    quantize_(model, config())
    verdict = qflow.analyze(torch.export.export(model, inputs), target="xnnpack")
    kinds = sorted({f.kind for f in verdict.findings if f.severity != "info"})
    said = verdict.status + (f" ({', '.join(kinds)})" if kinds else "")
    try:
        edge = to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()])
        got = xnnpack.run(xnnpack.to_executorch(edge), inputs)[0]
    except Exception as e:  # (refused at lowering: loud)
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), "").split(" (")[0]
        return f"refused at lowering: {type(e).__name__}: {first[:90]}", "", said
    with torch.no_grad():
        want = model(*inputs)
        off = float((got - want).abs().max() / want.abs().max())
        scale = getattr(model[0].weight, "scale", None)
        if scale is None or not scale.is_floating_point():
            return f"{off:.2g}", "", said
        scale.copy_(scale.to(torch.bfloat16).to(torch.float32))
        bf16 = float((got - model(*inputs)).abs().max() / want.abs().max())
    return f"{off:.2g}", f"{bf16:.2g}", said


def main() -> None:
    versions = ", ".join(f"{p} {metadata.version(p)}" for p in ("torch", "torchao", "executorch"))
    lines = [
        "# XNNPACK contract for torchao `quantize_` linears",
        "",
        f"Measured {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC by `python benchmarks/affine_contract.py` "
        f"on {versions}: one `Linear(64, 32)`, 10 tokens, lowered with the stock `XnnpackPartitioner` and run "
        "on the ExecuTorch runtime. `off` = the largest difference from the quantized eager model over its largest "
        "output (float32 rounding is ~1e-7); `bf16` = the same against the eager model with its weight scales "
        "rounded to bfloat16, as XNNPACK stores blockwise scales; qflow = its verdict before lowering, "
        '`target="xnnpack"`.',
        "",
        "| config | off | bf16 | qflow |",
        "|---|---|---|---|",
    ]
    for name, config in CONFIGS.items():
        off, bf16, said = measure(config)
        lines.append(f"| {name} | {off} | {bf16} | {said} |")
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
