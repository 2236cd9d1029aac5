"""Write the .pt2 programs `qflow check` runs on when given no path.

    python -m qflow.examples.bundle

They are seed 000's Probe (a requant the Arm fold pass drops after cat) and
its control, quantized with the real Arm quantizer and saved in Q/DQ form.
Their stack traces name qflow's files relative to the package's parent
(`qflow/examples/models.py`), not the machine that built them, so findings and
SARIF point into the user's checkout.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.export import ExportedProgram

from qflow.examples import models

BUNDLED = {"seed000_probe": "seed000_cat_requant.pt2", "seed000_control": "seed000_control.pt2"}
#: The directory that holds the `qflow` package: stack-trace paths are made relative to it.
ROOT = Path(__file__).resolve().parents[2]


def relative_sources(ep: ExportedProgram, root: Path = ROOT) -> ExportedProgram:
    """Rewrite each node's stack trace so files under `root` are named relative to it."""
    prefix = f'File "{root.as_posix()}/'
    for gm in ep.graph_module.modules():
        if not isinstance(gm, torch.fx.GraphModule):
            continue
        for node in gm.graph.nodes:
            trace = node.meta.get("stack_trace")
            if trace:
                node.meta["stack_trace"] = trace.replace(prefix, 'File "')
    return ep


def main() -> None:
    here = Path(__file__).parent
    for name, filename in BUNDLED.items():
        torch.export.save(relative_sources(models.build(name).exported), here / filename)
        print(f"wrote {here / filename}")


if __name__ == "__main__":
    main()
