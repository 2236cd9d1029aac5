"""A code copy of constants is still a code copy: the Arm lowering does not fold it in the program's semantics.

Arm decomposes a causal SDPA into ``where(mask, 0.0, -256.0)`` over two quantized scalars. With the stock
a8w8 config the two share a domain; a custom domain on the ``-256`` fill (campaign case
00014-tx-arm-custom) makes the fake-quantized program clamp it into that domain, while the TOSA lowering
copies its code and reads it in the ``where``'s output domain: the masked scores differ. Whether a
constant-only subgraph is computed ahead of time in the program's semantics was measured here, on the TOSA
reference model, and not assumed (a fold of the two constants would have made the mismatch harmless).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import fx, nn

import qflow
from qflow.targets.arm import pipeline as arm

torch.manual_seed(0)
X = tuple(torch.randn(1, 2, 4, 8) for _ in range(3))


class CausalAttention(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _give_domain(gm: fx.GraphModule, fill: float, scale: float, zero_point: int) -> None:
    """The quantize of the scalar `fill` and its dequantizes get another domain (a custom annotation's)."""
    (scalar,) = [n for n in gm.graph.nodes if "scalar_tensor" in str(n.target) and n.args[0] == fill]
    (q,) = scalar.users
    for n in (q, *q.users):
        n.args = (n.args[0], scale, zero_point, *n.args[3:])
    gm.recompile()


def _out_scale(gm: fx.GraphModule) -> float:
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    last = out.args[0][0] if isinstance(out.args[0], (tuple, list)) else out.args[0]
    return float(last.args[1])


@pytest.fixture(scope="module")
def runs() -> dict[str, Any]:
    out = {}
    for name in ("stock", "custom fill"):
        gm = arm.quantize(CausalAttention(), X)
        if name == "custom fill":
            _give_domain(gm, -256.0, 0.016384320333600044, -35)
        ep = torch.export.export(gm, X, strict=True)
        report = qflow.analyze(ep, target="arm-tosa")
        tosa = arm.run_tosa_reference(arm.lower(ep, X), X)[0]
        out[name] = (report, float((tosa - gm(*X)).abs().max()) / _out_scale(gm))
    return out


def test_the_stock_causal_mask_is_proved_and_computes_right(runs) -> None:
    report, lsb = runs["stock"]
    assert report.status == "proved" and lsb <= 1.0


def test_a_fill_in_another_domain_is_copied_as_its_code_an_error_the_backend_confirms(runs) -> None:
    report, lsb = runs["custom fill"]
    assert report.status == "violated"
    assert [(f.kind, f.node) for f in report.errors] == [("mixed-input-domains", "where")]
    assert lsb > 40  # (measured 53 output LSB: the masked scores read -256 where the program clamps -1.5)
