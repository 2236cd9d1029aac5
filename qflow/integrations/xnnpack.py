"""The XNNPACK pipeline helpers' old home: `qflow.targets.xnnpack.pipeline` (kept importable here)."""

from qflow.targets.xnnpack.pipeline import *  # noqa: F403
