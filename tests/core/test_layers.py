"""One direction through the package: every import of a qflow module, at module level or
inside a function, points to its own layer or one below, and nothing outside
`qflow/targets/` reaches into a backend's folder. Read from the source (ast), torch-free."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2] / "qflow"

#: Bottom to top; a module belongs to the first layer one of whose patterns matches it fully.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", (r"qflow\.(errors|domain|bounds|ops|gc_pause|_version)",)),
    ("graph", (r"qflow\.graph", r"qflow\.targets\.contract")),
    ("contracts", (r"qflow\.targets", r"qflow\.targets\.generic", r"qflow\.targets\.[a-z_]+")),
    ("lattice and solvers", (r"qflow\.lattice(\..+)?", r"qflow\.(ranges|impact)", r"qflow\.solvers(\..+)?")),
    ("report", (r"qflow\.report(\..+)?",)),
    ("analysis", (r"qflow\.analysis",)),
    ("ir toolkit", (r"qflow\.ir(\..+)?",)),
    ("backends", (r"qflow\.targets\.[a-z_]+\..+",)),
    (
        "readers",
        (
            r"qflow\.integrations(\.(fx|fx_[a-z_]+|annotated|masked|duplicate_users|observer_calibration|bias_domain|ignored_variants|pte|pte_[a-z_]+|rewrite|arm|xnnpack))?",
        ),
    ),
    ("surface", (r"qflow", r"qflow\.(api|cli|__main__)", r"qflow\.integrations\..+", r"qflow\.examples(\..+)?")),
)


def _layer(module: str) -> int:
    for i, (_, patterns) in enumerate(LAYERS):
        if any(re.fullmatch(p, module) for p in patterns):
            return i
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(module: str, path: Path) -> list[tuple[str, int]]:
    """(imported qflow module, line) for every import in `path`, type-checking-only ones aside."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "qflow"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import, from the package `node.level - 1` levels up
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base.split(".")[0] != "qflow":
                continue
            for a in node.names:  # `from qflow.x import y` may name the module qflow.x.y
                found.append((f"{base}.{a.name}" if f"{base}.{a.name}" in _MODULES else base, node.lineno))
    return found


_MODULES = _modules()


def test_every_import_points_down() -> None:
    upward = []
    for module, path in sorted(_MODULES.items()):
        for imported, line in _imports(module, path):
            if imported in _MODULES and _layer(imported) > _layer(module):
                upward.append(
                    f"{path.relative_to(ROOT.parent)}:{line}: {module} ({LAYERS[_layer(module)][0]}) imports "
                    f"{imported} ({LAYERS[_layer(imported)][0]})"
                )
    assert not upward, "imports up a layer:\n" + "\n".join(upward)


def test_no_import_circle() -> None:
    g = nx.DiGraph()
    for module, path in _MODULES.items():
        for imported, _ in _imports(module, path):
            if imported in _MODULES and imported != module and not module.startswith(imported + "."):
                g.add_edge(module, imported)
    cycles = list(nx.simple_cycles(g))
    assert not cycles, cycles


def test_only_targets_reach_into_a_backend() -> None:
    """Outside `qflow/targets/`, a backend is reached through the registry and its hooks
    (`qflow.targets.get(...)`, `Target.hook`), never by importing its folder or the ExecuTorch
    backend it reads (`executorch.backends.*`)."""
    reach = []
    for module, path in sorted(_MODULES.items()):
        if module.startswith("qflow.targets") or module in ALLOWED_BACKEND_IMPORTS:
            continue
        for imported, line in _imports(module, path):
            if re.match(r"qflow\.targets\.[a-z_]+\.", imported + "."):
                if imported.split(".")[2] not in ("contract", "generic"):
                    reach.append(f"{path.relative_to(ROOT.parent)}:{line}: {module} imports {imported}")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # nor the backend itself
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                if name.startswith("executorch.backends."):
                    reach.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {module} imports {name}")
    assert not reach, "\n".join(reach)


#: Known debts of issue #25, each to go: `qflow.integrations.arm` / `.xnnpack` keep the pipeline
#: helpers' old import paths, and the bundled examples drive the Arm pipeline.
ALLOWED_BACKEND_IMPORTS = frozenset(
    {
        "qflow.integrations.arm",
        "qflow.integrations.xnnpack",
        "qflow.examples.models",
    }
)
