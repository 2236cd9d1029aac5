"""qflow's own .pt2 reader (qflow.ir.pt2) against torch.export.load.

Real PT2E programs — the bundled examples, the Arm TOSAQuantizer per-channel,
per-tensor and int16 a16w8, XNNPACKQuantizer static and dynamic, and one whose
ops take keyword, None, device, layout, string and float-list arguments — saved with
torch.export.save: the fast reader builds the same FX graph (names, targets,
args, metadata, signature, weights) and the check the same report as from the
ExportedProgram torch loads; it never imports torch._dynamo; what it cannot
read is still checked, through torch.export.load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx as fx
from torch import nn

import qflow
from qflow.cli import bundled_examples, main
from qflow.examples.models import MLP
from qflow.ir import pt2
from qflow.ir.load import read_program

ROOT = Path(__file__).resolve().parents[1]


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


class ArgKinds(nn.Module):
    """Ops whose saved arguments are keywords, None, a device, a layout, a string, a float list."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.ln = nn.LayerNorm([4, 6, 6])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.interpolate(self.conv(x), scale_factor=2.0, mode="nearest")
        y = nn.functional.gelu(nn.functional.max_pool2d(y, 2, ceil_mode=True), approximate="tanh")
        y = torch.clamp(y + torch.full((1, 4, 6, 6), 0.5, dtype=torch.float32), min=-1.0)
        return self.ln(y).to(torch.float32).mean(dim=(2, 3), keepdim=True)


def _xnnpack(dynamic: bool) -> Any:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    return XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic))


def _arm_per_tensor() -> Any:
    from executorch.backends.arm.quantizer import get_symmetric_quantization_config

    from qflow.targets.arm import pipeline as arm

    return arm.default_quantizer(arm.DEFAULT_SPEC, get_symmetric_quantization_config(is_per_channel=False))


def _save(converted: fx.GraphModule, inputs: tuple[torch.Tensor, ...], path: Path, **kw: Any) -> Path:
    torch.export.save(torch.export.export(converted, inputs, **kw), path)
    return path


@pytest.fixture(scope="session")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """name → a .pt2 file: the bundled examples and real PT2E programs, each quantized once."""
    from qflow.examples import models
    from qflow.targets.arm import pipeline as arm

    out = {p.stem: p for p in bundled_examples()}
    d = tmp_path_factory.mktemp("pt2")
    # the Arm examples: per-channel (conv+bn+relu6 residual, attention, linear), int16 a16w8
    for name in ("conv_bn_relu6_residual", "attention", "linear_per_channel", "mixed_a16w8"):
        ex = models.MODELS[name]()
        q = ex.make_quantizer() if ex.make_quantizer else None
        out[name] = _save(arm.quantize(ex.model, ex.inputs, spec=ex.spec, quantizer=q), ex.inputs, d / f"{name}.pt2")
    torch.manual_seed(0)
    conv_in, mlp_in = (torch.randn(1, 3, 6, 6),), (torch.randn(2, 8),)
    programs = {
        "arm_per_tensor": (ConvNet(), conv_in, _arm_per_tensor()),
        "xnnpack_static": (ConvNet(), conv_in, _xnnpack(dynamic=False)),
        "xnnpack_dynamic": (MLP(), mlp_in, _xnnpack(dynamic=True)),
        "xnnpack_arg_kinds": (ArgKinds(), conv_in, _xnnpack(dynamic=False)),
    }
    for name, (model, inputs, quantizer) in programs.items():
        out[name] = _save(arm.quantize(model, inputs, quantizer=quantizer), inputs, d / f"{name}.pt2")
    return out


NAMES = [
    "seed000_cat_requant",
    "seed000_control",
    "conv_bn_relu6_residual",
    "attention",
    "linear_per_channel",
    "mixed_a16w8",
    "arm_per_tensor",
    "xnnpack_static",
    "xnnpack_dynamic",
    "xnnpack_arg_kinds",
]


def _plain(x: Any) -> Any:
    """A comparable form of an FX argument or meta value (nodes by name, tensors by dtype/shape/strides)."""
    if isinstance(x, fx.Node):
        return ("node", x.name)
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_plain(e) for e in x))
    if isinstance(x, dict):
        return ("dict", tuple((k, _plain(v)) for k, v in x.items()))
    if isinstance(x, torch.Tensor):
        return ("tensor", x.dtype, tuple(x.shape), tuple(x.stride()), x.requires_grad)
    return x


def _nodes(gm: fx.GraphModule) -> list[tuple[Any, ...]]:
    return [
        (n.name, n.op, n.target, _plain(n.args), _plain(n.kwargs), {k: _plain(v) for k, v in n.meta.items()})
        for n in gm.graph.nodes
    ]


def _report(report: qflow.Report) -> dict[str, Any]:
    """The report without its timings."""
    out = report.to_json()
    out["stats"] = {k: v for k, v in out["stats"].items() if not k.endswith("_s")}
    return out | {"domains": report.domains}


@pytest.mark.parametrize("name", NAMES)
def test_fast_reader_builds_the_graph_torch_loads(saved, name) -> None:
    path = saved[name]
    fast = pt2.read(path)  # raises Unsupported if it would fall back
    ep = torch.export.load(path)
    assert _nodes(fast.graph_module) == _nodes(ep.graph_module)
    assert fast.graph_module.code == ep.graph_module.code
    assert fast.graph_module.meta == ep.graph_module.meta
    assert fast.graph_signature == ep.graph_signature
    for mine, theirs in ((fast.state_dict, ep.state_dict), (fast.constants, ep.constants)):
        assert mine.keys() == theirs.keys()
        for k in mine:
            assert type(mine[k]) is type(theirs[k]) and torch.equal(mine[k], theirs[k]), k
            assert (mine[k].shape, mine[k].stride()) == (theirs[k].shape, theirs[k].stride()), k
    # what the check reads is there: the stack traces and module paths of the model's code
    assert any(n.meta.get("stack_trace") for n in fast.graph.nodes if n.op == "call_function")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("target", [None, "arm-tosa", "xnnpack"])
def test_fast_reader_gives_the_report_torch_load_gives(saved, name, target) -> None:
    from qflow.api import domain_graph

    path = saved[name]
    ep = torch.export.load(path)
    # the domain graph: every value (dtype, numel, stack trace, module path), use and obligation
    mine, theirs = domain_graph(path, target=target), domain_graph(ep, target=target)
    assert mine.values() == theirs.values()
    assert list(mine.g.edges(data=True)) == list(theirs.g.edges(data=True))
    assert (mine.obligations, mine.notes, mine.form) == (theirs.obligations, theirs.notes, theirs.form)
    # and the report: verdict, findings with their node names and source locations, domains
    fast = qflow.analyze(path, name=path.name, target=target)
    slow = qflow.analyze(ep, name=path.name, target=target)
    assert sum(slow.obligations.values()) > 0
    assert _report(fast) == _report(slow)


def test_the_reports_say_what_the_programs_are(saved) -> None:
    """The equal reports are the real ones: seed 000's miscompile found, at its source line."""
    bad = qflow.analyze(saved["seed000_cat_requant"])
    (f,) = [f for f in bad.findings if f.kind == "requant-after-passthrough"]
    assert f.node == "cat" and f.source == "qflow/examples/models.py:137" and not bad.proved
    assert qflow.analyze(saved["seed000_control"]).proved
    mixed = qflow.analyze(saved["mixed_a16w8"])  # (its int16 linear's 16-bit-multiplier rescale, weighed: unproven)
    assert mixed.status == "unproven" and {(f.kind, f.node) for f in mixed.findings} == {("rounded-twice", "linear")}
    dyn = qflow.analyze(saved["xnnpack_dynamic"])  # (XNNPACK quantizes its linears' input per token: unproven)
    assert {f.kind for f in dyn.findings} == {"unvalidated-lowering"} and not dyn.obligations["violated"]
    assert any("run-time" in d for d in dyn.domains.values())


def _run_python(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_check_does_not_import_dynamo(saved) -> None:
    """`qflow check model.pt2` and qflow.analyze(path) read the program without torch._dynamo
    (half of a check's time), nor ExecuTorch or torchao."""
    path = saved["conv_bn_relu6_residual"]
    out = _run_python(
        "import sys, json, qflow\n"
        "from qflow.cli import main\n"
        f"rc = main(['check', {str(path)!r}, '--format', 'json'])\n"
        f"report = qflow.analyze({str(path)!r})\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('executorch', 'torchao') "
        "or m.startswith('torch._dynamo') or m == 'torch._export.serde.serialize')\n"
        "print(json.dumps([rc, report.proved, heavy]))\n"
    )
    rc, proved, heavy = json.loads(out.splitlines()[-1])
    assert (rc, proved) == (0, True)
    assert heavy == []


def _rewrite(src: Path, dst: Path, edit: Any) -> Path:
    """A copy of the archive `src` with its model.json passed through `edit`."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("models/model.json"):
                data = json.dumps(edit(json.loads(data))).encode()
            zout.writestr(info, data)
    return dst


def test_an_unknown_schema_version_is_read_by_torch(saved, tmp_path, capsys) -> None:
    """A schema minor version newer than the reader knows: torch reads it (same major), qflow falls back."""

    def newer(program: dict[str, Any]) -> dict[str, Any]:
        program["schema_version"]["minor"] = pt2.SCHEMA_MINOR + 1
        return program

    path = _rewrite(saved["seed000_cat_requant"], tmp_path / "newer.pt2", newer)
    with pytest.raises(pt2.Unsupported, match="schema version"):
        pt2.read(path)
    assert isinstance(read_program(path), torch.export.ExportedProgram)
    assert _report(qflow.analyze(path, name="x")) == _report(qflow.analyze(saved["seed000_cat_requant"], name="x"))
    assert main(["check", str(path)]) == 1
    assert "requant-after-passthrough" in capsys.readouterr().out


def test_a_program_with_symbolic_shapes_is_checked_through_torch(tmp_path) -> None:
    """A dynamic batch dimension (symbolic sizes, range constraints) needs torch's ShapeEnv:
    the fast reader refuses it and the check still reads it, with torch.export.load."""
    from qflow.targets.arm import pipeline as arm

    torch.manual_seed(0)
    inputs = (torch.randn(4, 8),)
    converted = arm.quantize(MLP(), inputs, quantizer=_xnnpack(dynamic=False))
    batch = torch.export.Dim("batch", min=2, max=64)
    path = _save(converted, inputs, tmp_path / "dynamic_batch.pt2", dynamic_shapes=({0: batch},))
    with pytest.raises(pt2.Unsupported):
        pt2.read(path)
    report = qflow.analyze(path)
    assert _report(report) == _report(qflow.analyze(torch.export.load(path)))
    assert report.proved and sum(report.obligations.values()) > 0


def test_a_pickled_weight_is_read_by_torch(saved, tmp_path) -> None:
    """A payload the reader would have to unpickle is left to torch's weights-only loader."""
    src = saved["seed000_control"]
    dst = tmp_path / "pickled.pt2"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("model_weights_config.json"):
                config = json.loads(data)
                fqn, payload = next(iter(config["config"].items()))
                payload["use_pickle"] = True
                data = json.dumps(config).encode()
            zout.writestr(info, data)
    with pytest.raises(pt2.Unsupported, match="pickled"):
        pt2.read(dst)
    # its bytes are no pickle: torch says so, and the check reports bad input (never a graph)
    assert main(["check", str(dst)]) == 2


def test_the_command_exits_with_the_check_code(saved) -> None:
    """`python -m qflow` and the `qflow` script run `qflow.cli.run` (main, then exit with the collector
    frozen): the exit code and the report are main's."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["qflow"] == "qflow.cli:run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name, code, text in (("seed000_control", 0, "PROVED"), ("seed000_cat_requant", 1, "NOT PROVED")):
        done = subprocess.run(
            [sys.executable, "-m", "qflow", "check", str(saved[name])], capture_output=True, text=True, env=env
        )
        assert done.returncode == code and text in done.stdout, done.stderr
    done = subprocess.run([sys.executable, "-m", "qflow", "check", "/nonexistent.pt2"], capture_output=True, env=env)
    assert done.returncode == 2
