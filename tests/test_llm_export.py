"""ExecuTorch's own LLM export (issue #28): `export_llm` with a tiny random Llama config, 8da4w,
KV cache and custom SDPA, lowered to XNNPACK — the `.pte` most users ship. It used to be called
"nothing quantized"."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import qflow
from qflow.ir.pte_program import read_pte
from qflow.targets.xnnpack.payload import read_payload

PARAMS = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 256, "multiple_of": 32}


def _export_llm(
    out: Path,
    kv_cache: bool,
    qmode: str = "8da4w",
    pt2e: str | None = None,
    embedding: str | None = None,
    etrecord: bool = False,
) -> Path:
    """`qmode`: torchao's `quantize_` mode; `pt2e`: a PT2E quantizer instead (`quantization.pt2e_quantize`);
    `embedding`: `quantization.embedding_quantize` ("bits,group size"); `etrecord`: also write
    `etrecord.bin` beside the `.pte` (`debug.generate_etrecord`)."""
    (out / "params.json").write_text(json.dumps({**PARAMS, "norm_eps": 1e-5}))
    kv = str(kv_cache).lower()
    cmd = [
        sys.executable, "-m", "executorch.extension.llm.export.export_llm",
        "base.model_class=llama3", f"base.params={out / 'params.json'}",
        f"model.use_kv_cache={kv}", f"model.use_sdpa_with_kv_cache={kv}", "backend.xnnpack.enabled=true",
        *([f"quantization.pt2e_quantize={pt2e}"] if pt2e else [f"quantization.qmode={qmode}",
                                                             "quantization.group_size=32"]),
        *([f"quantization.embedding_quantize='{embedding}'"] if embedding else []),
        *(["debug.generate_etrecord=true"] if etrecord else []),
        "export.max_seq_length=64", "export.max_context_length=64",
        f"export.output_dir={out}", "export.output_name=tiny.pte", f"hydra.run.dir={out}",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=out, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return out / "tiny.pte"


@pytest.fixture(scope="session")
def tiny_8da4w_pte(tmp_path_factory) -> Path:
    """With the KV cache and custom SDPA (`llama::custom_sdpa`, `llama::update_cache`), and the
    ETRecord beside it."""
    return _export_llm(tmp_path_factory.mktemp("llm"), kv_cache=True, etrecord=True)


@pytest.fixture(scope="session")
def tiny_8da4w_pte_without_kv_cache(tmp_path_factory) -> Path:
    """The whole sequence at once: aten SDPA decomposed, no cache state."""
    return _export_llm(tmp_path_factory.mktemp("llm-nokv"), kv_cache=False)


@pytest.mark.parametrize("pte", ["tiny_8da4w_pte", "tiny_8da4w_pte_without_kv_cache"])
def test_the_8da4w_llm_pte_proves_with_its_quantized_linears_counted(pte: str, request) -> None:
    report = qflow.analyze(request.getfixturevalue(pte), target="xnnpack")
    assert report.status == "proved", str(report)
    assert not [f for f in report.findings if f.kind in ("unknown-op", "missing-domain")]
    # every linear of the two layers and the head: int4 per-group weights, bf16 scales in the payload
    linears = [f for f in report.findings if f.kind == "rounded-weight-scales"]
    assert len(linears) == 2 * 7 + 1, [f.node for f in linears]


def _one_scale_doubled(pte: Path, out: Path) -> Path:
    """`pte` with the first bfloat16 scale of the first delegate's first int4 weight doubled, in the file."""
    data = bytearray(pte.read_bytes())
    program = read_pte(bytes(data))
    payload = read_payload(next(p for p in program.plans if p.name == "forward").delegates[0].payload)
    weight = next(v for v in payload.values.values() if v.blocks is not None)
    scales = program.named_data(payload.constant_keys[weight.scale_buffer])
    at = data.find(scales)
    assert at > 0 and data.find(scales, at + 1) == -1
    struct.pack_into("<H", data, at, struct.unpack_from("<H", data, at)[0] + 0x80)  # bf16 exponent + 1
    out.write_bytes(data)
    return out


def test_the_llm_pte_is_checked_against_the_etrecord_export_llm_writes(tiny_8da4w_pte, tmp_path) -> None:
    """A `.pte` alone has no program to check its weights against; export_llm keeps none but the
    ETRecord (`debug.generate_etrecord=true`), which holds the program before to_edge. With it
    (`reference=`, `--reference etrecord.bin`) each payload weight is checked against the
    program's: 15 more obligations, proved; one doubled scale in the file is an error. (The
    runtime's output on such a mutant is measured in tests/contracts/test_xnnpack_weight_params.py;
    this model's random weights give -inf logits either way.)"""
    etrecord = tiny_8da4w_pte.parent / "etrecord.bin"
    alone = qflow.analyze(tiny_8da4w_pte, target="xnnpack")
    checked = qflow.analyze(tiny_8da4w_pte, target="xnnpack", reference=etrecord)
    assert checked.status == "proved", str(checked)
    assert checked.obligations["proved"] == alone.obligations["proved"] + 2 * 7 + 1
    bad = _one_scale_doubled(tiny_8da4w_pte, tmp_path / "bad.pte")
    assert qflow.analyze(bad, target="xnnpack").status == "proved"  # (nothing to compare with)
    report = qflow.analyze(bad, target="xnnpack", reference=etrecord)
    assert [(f.kind, f.node) for f in report.errors] == [
        ("payload-weight-mismatch", "forward/delegate_0/3:XNNFullyConnected")
    ], str(report)
    cli = [sys.executable, "-m", "qflow", "check", "--reference", str(etrecord)]
    clean = subprocess.run([*cli, str(tiny_8da4w_pte)], capture_output=True, text=True, timeout=600)
    mutant = subprocess.run([*cli, str(bad)], capture_output=True, text=True, timeout=600)
    assert clean.returncode == 0, clean.stdout[-2000:] + clean.stderr[-2000:]
    assert mutant.returncode == 1 and "payload-weight-mismatch" in mutant.stdout, mutant.stderr[-2000:]


@pytest.fixture(scope="session")
def tiny_8da4w_emb4_pte(tmp_path_factory) -> Path:
    """With the token embedding quantized too (`embedding_quantize=4,32`, as ExecuTorch's Llama guide
    exports): a `quantized_decomposed::embedding_4bit` kernel on the CPU; and the ETRecord."""
    return _export_llm(tmp_path_factory.mktemp("llm-emb4"), kv_cache=True, embedding="4,32", etrecord=True)


def test_the_quantized_embedding_proves_as_a_kernel_reading_its_own_codes(tiny_8da4w_emb4_pte) -> None:
    """It was an unknown op (unproven); the kernel is measured on the runtime in
    tests/contracts/test_quantized_embedding.py."""
    report = qflow.analyze(tiny_8da4w_emb4_pte, target="xnnpack")
    assert report.status == "proved", str(report)
    assert not [f for f in report.findings if f.kind in ("unknown-op", "missing-domain")]
    dg = qflow.api.domain_graph(tiny_8da4w_emb4_pte, target="xnnpack")
    kernels = [o for o in dg.obligations if o.finding_kind == "kernel-argument-mismatch"]
    assert [o.node for o in kernels] == ["forward/embedding_4bit"] and kernels[0].holds


def test_the_embedding_table_is_checked_against_the_etrecord(tiny_8da4w_emb4_pte, tmp_path) -> None:
    """Against the program in the ETRecord, the kernel's packed table (codes and scales) must unpack to
    the program's: one more obligation, proved; one code byte of the shipped table edited, an error."""
    etrecord = tiny_8da4w_emb4_pte.parent / "etrecord.bin"
    alone = qflow.analyze(tiny_8da4w_emb4_pte, target="xnnpack")
    checked = qflow.analyze(tiny_8da4w_emb4_pte, target="xnnpack", reference=etrecord)
    assert checked.status == "proved", str(checked)
    assert checked.obligations["proved"] == alone.obligations["proved"] + 2 * 7 + 1 + 1
    prog = read_pte(tiny_8da4w_emb4_pte)
    plan = prog.plans[0]
    call = next(c for c in plan.calls if c.kind == "kernel" and "embedding_4bit" in c.name)
    table = prog.array(plan.value(call.args[0])).tobytes()
    data = bytearray(tiny_8da4w_emb4_pte.read_bytes())
    at = data.find(table)
    data[at + 100] ^= 0x11  # (two codes of one byte move by one)
    bad = tmp_path / "bad.pte"
    bad.write_bytes(bytes(data))
    report = qflow.analyze(bad, target="xnnpack", reference=etrecord)
    assert [(f.kind, f.node) for f in report.errors] == [("kernel-argument-mismatch", "forward/embedding_4bit")]
    assert "2 of 16384 values differ" in report.errors[0].message, report.errors[0].message


def test_the_cli_exits_0_on_it(tiny_8da4w_pte) -> None:
    done = subprocess.run([sys.executable, "-m", "qflow", "check", str(tiny_8da4w_pte)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PROVED" in done.stdout


@pytest.fixture(scope="session")
def tiny_int8_pte(tmp_path_factory) -> Path:
    """qmode=int8 (weight-only): measured, nothing is delegated and the weights are float32 codes."""
    return _export_llm(tmp_path_factory.mktemp("llm-int8"), kv_cache=True, qmode="int8")


def test_the_int8_weight_only_llm_pte_is_a_quantized_program_computed_in_float(tiny_int8_pte) -> None:
    """It used to be "nothing quantized": every linear's float32 weight holds int8 codes, and a constant
    per-channel scale multiplies its output (the dequantize, realised in float)."""
    report = qflow.analyze(tiny_int8_pte)
    assert report.status == "proved", str(report)
    found = [f for f in report.findings if f.kind == "float-weight-codes"]
    assert len(found) == 2 * 7 + 1 and all(f.severity == "info" for f in found), [f.node for f in found]


@pytest.fixture(scope="session")
def tiny_pt2e_pte(tmp_path_factory) -> Path:
    """PT2E instead of `quantize_`: the stock XNNPACKQuantizer, dynamic int8 activations and weights."""
    return _export_llm(tmp_path_factory.mktemp("llm-pt2e"), kv_cache=True, pt2e="xnnpack_dynamic")


def test_the_pt2e_dynamic_llm_pte_proves_with_every_linear_read_from_its_payload(tiny_pt2e_pte) -> None:
    """Each of the 15 linears (7 per layer, the head) is an XNNPACK delegate computing on int8 codes of a
    per-token run-time domain, read from the payload; RMSNorm, RoPE, the KV cache and custom SDPA stay on
    the CPU in float."""
    report = qflow.analyze(tiny_pt2e_pte, target="xnnpack")
    assert report.status == "proved", str(report)
    dg = qflow.api.domain_graph(tiny_pt2e_pte, target="xnnpack")
    domains = [(v.name, v.definition.domain) for v in dg.values() if v.definition.domain is not None]
    dynamic = [name for name, d in domains if d.opaque and "dynamic" in d.opaque]
    assert len(dynamic) == 2 * 7 + 1, dynamic
