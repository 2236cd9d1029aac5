"""The Arm pipeline helpers' old home: `qflow.targets.arm.pipeline` (kept importable here)."""

from qflow.targets.arm.pipeline import *  # noqa: F403
from qflow.targets.arm.pipeline import __all__  # noqa: F401
