"""The public entry points. Imports torch lazily so `import qflow` stays light."""

from __future__ import annotations

from typing import Any

from qflow.analysis import analyze_graph
from qflow.graph import DomainGraph
from qflow.report.model import Report


def domain_graph(obj: Any, form: str | None = None) -> DomainGraph:
    """The domain graph qflow builds for `obj` (see `analyze` for what it accepts)."""
    if isinstance(obj, DomainGraph):
        return obj
    from qflow.integrations.fx import build
    from qflow.integrations.load import graph_module_of

    gm, ep = graph_module_of(obj)
    return build(gm, ep, form)


def analyze(obj: Any, form: str | None = None, name: str = "") -> Report:
    """Prove that every consumer in `obj` sees the domain it declares.

    `obj` is a torch.fx.GraphModule (PT2E Q/DQ, or Arm-folded), a
    torch.export.ExportedProgram, an ExecuTorch EdgeProgramManager, a path to
    a .pt2 file, or a DomainGraph. `form` overrides the detected IR form
    ("qdq" or "folded").
    """
    return analyze_graph(domain_graph(obj, form), name=name)
