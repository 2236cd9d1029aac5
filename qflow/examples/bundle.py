"""Write the .pt2 programs `qflow check` runs on when given no path.

    python -m qflow.examples.bundle

They are seed 000's Probe (a requant the Arm fold pass drops after cat) and
its control, quantized with the real Arm quantizer and saved in Q/DQ form.
"""

from __future__ import annotations

from pathlib import Path

import torch

from qflow.examples import models

BUNDLED = {"seed000_probe": "seed000_cat_requant.pt2", "seed000_control": "seed000_control.pt2"}


def main() -> None:
    here = Path(__file__).parent
    for name, filename in BUNDLED.items():
        torch.export.save(models.build(name).exported, here / filename)
        print(f"wrote {here / filename}")


if __name__ == "__main__":
    main()
