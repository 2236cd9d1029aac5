"""What calibration makes of an op's input and output observers, known before it runs.

Before calibration (the annotated form) an op whose annotation does not share its input's observer
gets one of its own, and z3 is free to pick any two domains for them. But an observer is a function
of the values it sees. Two observers of one per-tensor qspec that see the same values, each as
often, compute the same qparams: torchao's observers reduce what they see to running min/max or a
histogram, and neither depends on order or layout. A view's output calibrates exactly like its
input. What `neg` does depends on the observer: a min/max observer sees the range mirrored, and
x - y and (-y) - (-x) are one float, so the scale is the same and a symmetric zero point too; a
histogram's search is not mirror-symmetric (measured with torchao 0.18, 2026-12-02: the scales of
x and -x 0.05-0.15 % apart on 71 of 100 random tensors, affine and symmetric), so calibration decides.
"""

from __future__ import annotations

import enum
from typing import Any

import torch

#: Ops whose output holds exactly its input's values, each as often.
_SAME_VALUES = frozenset(
    """view view_copy _unsafe_view reshape permute permute_copy transpose transpose_copy t t_copy squeeze
    squeeze_copy unsqueeze unsqueeze_copy flatten unflatten clone contiguous alias alias_copy detach detach_copy
    _clone_dim_order movedim moveaxis flip roll pixel_shuffle pixel_unshuffle""".split()
)
#: Ops whose output holds its input's values, some of them repeated: the same extremes.
_SAME_EXTREMES = frozenset("expand expand_copy repeat tile".split())
_MIRRORS = frozenset({"neg"})
_PER_TENSOR = {torch.per_tensor_affine, torch.per_tensor_symmetric}


class Alike(enum.Enum):
    SAME = "same"  # one domain, whatever calibration sees
    SAME_SCALE = "same scale"  # one scale; the zero points mirror each other
    UNDECIDED = "undecided"  # the observer decides: known only after calibration


def keeps_values(op: str) -> bool:
    """Does `op`'s output hold exactly its input's values (so any observer sees the same)?"""
    return op in _SAME_VALUES


def alike(op: str, qs: Any) -> tuple[Alike, str] | None:
    """How the observers that one qspec `qs` makes for `op`'s input and for its output calibrate, each
    seeing nothing else, with the reason; None when nothing is known before calibration."""
    if getattr(qs, "qscheme", None) not in _PER_TENSOR or getattr(qs, "is_dynamic", False):
        return None
    observer = _observer_class(qs)
    if observer is None:
        return None
    name = observer.__name__
    min_max = any(c.__name__ == "MinMaxObserver" for c in observer.__mro__)
    if op in _SAME_VALUES:
        return Alike.SAME, f"{name} sees the same values before and after {op}"
    if op in _SAME_EXTREMES and min_max:
        return Alike.SAME, f"{name} sees the same extremes before and after {op}"
    if op in _SAME_EXTREMES:
        return Alike.UNDECIDED, f"{name} sees {op}'s values repeated: calibration decides whether its scale moves"
    if op in _MIRRORS and min_max:
        symmetric = qs.qscheme == torch.per_tensor_symmetric
        return (Alike.SAME if symmetric else Alike.SAME_SCALE), f"{name} sees {op}'s range mirrored: one scale"
    if op in _MIRRORS:
        return Alike.UNDECIDED, (
            f"{name} sees {op}'s input and output mirrored, and its search is not mirror-symmetric (scales of x "
            "and -x measured 0.05-0.15 % apart): whether the dropped scale moves a code is known after "
            "calibration (analyze the converted program)"
        )
    return None


def _observer_class(qs: Any) -> type | None:
    ctor = getattr(qs, "observer_or_fake_quant_ctr", None)
    cls = getattr(getattr(ctor, "p", None), "func", ctor)
    return cls if isinstance(cls, type) else None
