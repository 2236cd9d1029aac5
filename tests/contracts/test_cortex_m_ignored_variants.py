"""Op variants the Cortex-M backend ignores, measured on its reference kernels (`Target.ignored_variants`).

Measured (2026-12-02, torch 2.13.0, executorch 1.5.1): the stock `CortexMQuantizer` flow lowers
`gelu(x, approximate="tanh")` to `cortex_m.quantized_activation` with a 256-entry table of the exact (erf)
GELU — found by the mask campaign (`00060-mk-cm`: the table is one code off the program on 4 of 256 codes,
and a subtraction onto a 13x finer grid after it makes that 3-5 output LSB; proved until then).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_xnnpack_ignored_variants import Gelu

import qflow
from qflow import targets
from qflow.targets.cortex_m import pipeline as cortex_m

#: Inputs on [-3.2, -2.2], where the two GELUs differ most (4.7e-4 at |x| = 2.7) and the output range
#: (-0.045 to -0.003) gives a step of 1.7e-4: the gap is several codes, never hidden by rounding.
X = (torch.linspace(-3.2, -2.2, 512).reshape(1, -1),)


@pytest.fixture(scope="module")
def tanh_gelu() -> dict[str, object]:
    converted = cortex_m.quantize(Gelu("tanh"), [X])
    ep = torch.export.export(converted, X, strict=True)
    _, program = cortex_m.lower(ep, X)
    [got] = cortex_m.run(program, X)
    with torch.no_grad():
        program_out = converted(*X)
        codes_in = torch.fake_quantize_per_tensor_affine(X[0], *_qparams(converted, "x"))
        erf_out = torch.fake_quantize_per_tensor_affine(F.gelu(codes_in), *_qparams(converted, "gelu"))
    step = _qparams(converted, "gelu")[0]
    return {"ep": ep, "after": program, "got": got, "program": program_out, "erf": erf_out, "step": step}


def _qparams(converted: torch.fx.GraphModule, of: str) -> tuple[float, int, int, int]:
    """The scale, zero point and code range of the quantize of `of`."""
    [q] = [
        n
        for n in converted.graph.nodes
        if n.op == "call_function" and "quantize_per_tensor" in str(n.target) and n.args[0].name == of
    ]
    return float(q.args[1]), int(q.args[2]), int(q.args[3]), int(q.args[4])


def test_the_kernels_compute_the_exact_gelu_for_the_tanh_variant(tanh_gelu) -> None:
    got, step = tanh_gelu["got"], tanh_gelu["step"]
    off_program = float((got - tanh_gelu["program"]).abs().max()) / step
    off_erf = float((got - tanh_gelu["erf"]).abs().max()) / step
    assert off_program >= 2.0, off_program  # another function: whole codes from the program
    assert off_erf <= 1.0 + 1e-3, off_erf  # the erf GELU, up to its table's rounding
    variant = targets.get("cortex-m").ignored_variants["gelu"]
    assert (variant.argument, variant.value) == ("approximate", "tanh")


def test_a_tanh_gelu_whose_gap_reaches_an_output_is_not_proved(tanh_gelu) -> None:
    """The gap (4.7e-4) is several steps of this output's grid: no rounding hides it."""
    report = qflow.analyze(tanh_gelu["ep"], target="cortex-m")
    assert not report.proved, str(report)
    assert "ignored-op-variant" in {f.kind for f in report.findings}, str(report)


def test_after_the_passes_its_table_is_checked_against_the_programs_variant(tanh_gelu) -> None:
    """The table is the exact GELU's: right for the program after the passes alone, which does not say which
    GELU the program asked for; against the program it came from, its entries one code from the tanh GELU
    leave it unproven (it was proved: mask campaign 00060-mk-cm)."""
    assert qflow.analyze(tanh_gelu["after"], target="cortex-m").proved
    checked = qflow.analyze(tanh_gelu["after"], target="cortex-m", reference=tanh_gelu["ep"])
    assert checked.status == "unproven" and not checked.errors, str(checked)
    assert "ignored-op-variant" in {f.kind for f in checked.findings}, str(checked)
