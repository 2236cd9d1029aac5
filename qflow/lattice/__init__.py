"""Domain lattice and propagation (torch-free)."""

from qflow.lattice.elements import BOTTOM, TOP, Elem, ElemKind, free, join, known, symbolic
from qflow.lattice.propagate import propagate

__all__ = ["BOTTOM", "TOP", "Elem", "ElemKind", "free", "join", "known", "propagate", "symbolic"]
