"""torchao's integer matmul recipe (``Int8DynamicActivationInt8WeightConfig``): a linear computed on codes.

The exported program quantizes each token of the input (``choose_qparams_affine`` + ``quantize_affine``,
symmetric int8) and multiplies the codes with the int8 weight codes in ``aten._int_mm``: as they are
(s8s8), or shifted into uint8 (``+ 128``) with the shift taken back out after (``- 128 * Σw``; u8s8,
which torchao exports on AVX512-VNNI machines without AMX). It casts the int32 accumulator to float
and scales it by the token's scale and the weight's per-channel scale. Every step is exact integer
arithmetic (the accumulator cannot overflow below 65 536 inputs), so the recipe is the linear of the
dequantized operands when its pieces agree: the same offset added and taken out, codes that fit
the type the matmul reads, a zero point of 0, and the scales multiplied in those of the codes it read.
`match` recognises the recipe and says which pieces disagree; anything that is not this recipe is
left to the ops' own rules (`aten._int_mm` stays an unknown op).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import fx

from qflow.ir.fx_nodes import static_int, target_name, val_dtype, val_of
from qflow.ops import CASTS, OpClass, base_name, classify

_VIEWS = frozenset({"reshape", "view", "_unsafe_view", "view_copy", "flatten", "squeeze", "unsqueeze", "clone"})
_TRANSPOSES = frozenset({"t", "permute", "transpose", "t_copy", "permute_copy"})
_SUBS = frozenset({"sub", "sub_"})
_ADDS = frozenset({"add", "add_"})
_MULS = frozenset({"mul", "mul_"})
_INNER = "access_subclass_inner_tensor"


@dataclass(frozen=True)
class IntMatmul:
    """One recognised recipe: the quantize whose codes it reads, its integer ops and its float result."""

    matmul: fx.Node  # the aten._int_mm
    quantize: fx.Node  # the quantize of the activation (its codes' domain is what the recipe reads)
    codes: fx.Node  # the node the recipe's first cast reads (the quantize, or a view of it)
    inner: frozenset[fx.Node]  # the integer ops, from the cast of the codes to the accumulator
    result: fx.Node  # the cast of the corrected accumulator to float
    problems: tuple[str, ...]


def _op(n: object) -> str:
    return base_name(target_name(n)) if isinstance(n, fx.Node) and n.op == "call_function" else ""


def _through(n: object, names: frozenset[str]) -> object:
    while isinstance(n, fx.Node) and _op(n) in names and n.args:
        n = n.args[0]
    return n


def _cast_to(n: object, dtype: torch.dtype) -> fx.Node | None:
    return n if isinstance(n, fx.Node) and _op(n) in CASTS and val_dtype(n) == dtype and n.args else None


def _only_user(n: fx.Node) -> fx.Node | None:
    """`n`'s one user (the checks torch.export adds on its metadata aside)."""
    users = [u for u in n.users if not _op(u).startswith("_assert")]
    return users[0] if len(users) == 1 else None


def _int_arg(node: fx.Node, other: fx.Node) -> int | None:
    """The integer `node` (an add / mul) combines `other` with."""
    args = [a for a in node.args if a is not other]
    return args[0] if len(args) == 1 and isinstance(args[0], int) and not isinstance(args[0], bool) else None


def _inner_tensor(n: object) -> tuple[object, str] | None:
    """(the parameter, the field) a torchao tensor subclass field is read from."""
    if isinstance(n, fx.Node) and _op(n) == _INNER and len(n.args) >= 2:
        return n.args[0], str(n.args[1])
    return None


def _shifted_codes(mm: fx.Node) -> tuple[list[fx.Node], object, int] | None:
    """u8s8: the integer ops that shift the codes into uint8 (``(codes.to(int32) + offset).to(uint8)``),
    the codes they read and the offset; None when `mm` reads no such shift."""
    shifted = _cast_to(mm.args[0], torch.uint8)
    add = shifted.args[0] if shifted is not None else None
    if not isinstance(add, fx.Node) or _op(add) not in _ADDS:
        return None
    wide = next((a for a in add.args if _cast_to(a, torch.int32) is not None), None)
    offset = _int_arg(add, wide) if wide is not None else None
    if offset is None:
        return None
    return [shifted, add, wide], wide.args[0], offset  # type: ignore[list-item,union-attr]


def _taken_out(mm: fx.Node, weight_t: object) -> tuple[list[fx.Node], int | None] | None:
    """u8s8: the ops that take the shift back out (``mm - Σw × offset``) and the offset they take out."""
    sub = _only_user(mm)
    if sub is None or _op(sub) not in _SUBS or sub.args[0] is not mm or not isinstance(sub.args[1], fx.Node):
        return None
    correction = sub.args[1]
    total = next((a for a in correction.args if _op(a) == "sum"), None) if _op(correction) in _MULS else None
    if not isinstance(total, fx.Node) or total.args[0] is not weight_t:
        return None
    return [sub, correction, total], _int_arg(correction, total)


def match(mm: fx.Node, is_constant: Callable[[fx.Node], bool]) -> IntMatmul | None:
    """The recipe around ``aten._int_mm`` node `mm`, or None when it is not this recipe.

    torchao picks one of two by the CPU it runs on (``_int_scaled_matmul_cpu``): u8s8 on AVX512-VNNI
    without AMX (codes shifted into uint8, the shift taken out after), else s8s8 (the int8 codes
    multiplied as they are). The exported program is the one the exporting machine picked."""
    if _op(mm) != "_int_mm" or len(mm.args) != 2:
        return None
    shift = _shifted_codes(mm)
    if shift is None and val_dtype(mm.args[0]) != torch.int8:
        return None
    head, codes, offset = shift if shift is not None else ([], mm.args[0], 0)
    q = _through(codes, _VIEWS)
    if not isinstance(q, fx.Node) or classify(target_name(q)) is not OpClass.QUANTIZE or not isinstance(codes, fx.Node):
        return None
    weight_t = mm.args[1]
    w = _through(weight_t, _TRANSPOSES)
    if not isinstance(w, fx.Node) or val_dtype(w) != torch.int8 or not is_constant(w):
        return None
    if (_inner_tensor(w) or (None, ""))[1] != "qdata":  # (a plain constant: its scales cannot be told)
        return None
    undo = _taken_out(mm, weight_t) if shift is not None else ([], 0)
    if undo is None:
        return None
    tail, taken_out = undo
    result = _cast_to(_only_user(tail[0] if tail else mm), torch.float32)
    if result is None:
        return None
    problems = []
    if taken_out != offset:
        problems.append(f"{offset} is added to the codes and {taken_out} × Σw taken out")
    qmin, qmax = (q.args[5], q.args[6]) if len(q.args) >= 7 else (None, None)
    low, high = (0, 255) if shift is not None else (-128, 127)
    if not (isinstance(qmin, int) and isinstance(qmax, int) and low <= qmin + offset and qmax + offset <= high):
        into = "the uint8 it casts them to" if shift is not None else "the int8 the matmul reads"
        problems.append(f"codes of [{qmin}, {qmax}] plus {offset} do not fit {into}")
    k = static_int(val_of(w).shape[-1]) if isinstance(val_of(w), torch.Tensor) else None
    reach = k * max(abs(low), high) * 128 if k is not None else None
    if reach is None or reach >= 2**31:
        problems.append(f"its int32 accumulator can overflow ({reach} in magnitude)")
    problems += _scale_problems(q, w, result)
    return IntMatmul(mm, q, codes, frozenset([*head, mm, *tail]), result, tuple(problems))


def _scale_problems(q: fx.Node, w: fx.Node, result: fx.Node) -> list[str]:
    """The zero point must be 0, and the result scaled by the codes' own scales: the token's, the weight's."""
    problems = []
    scale, zero = (q.args[2], q.args[3]) if len(q.args) >= 4 else (None, None)
    chooser = zero.args[0] if isinstance(zero, fx.Node) and _op(zero) == "getitem" else None
    symmetric = isinstance(chooser, fx.Node) and len(chooser.args) > 1 and chooser.args[1] == "SYMMETRIC"
    if not (zero is None or zero == 0 or symmetric):
        problems.append(f"the codes' zero point {getattr(zero, 'name', zero)} is not 0, and nothing takes it out")
    factors = []
    at = result
    for _ in range(2):
        mul = _only_user(at)
        if mul is None or _op(mul) not in _MULS:
            break
        other = next((a for a in mul.args if a is not at), None)
        factors.append(_through(other, _VIEWS | CASTS))
        nxt = _only_user(mul)
        at = nxt if nxt is not None and _op(nxt) in CASTS else mul
    parameter = w.args[0]
    if scale not in factors:
        problems.append(f"the accumulator is not scaled by {getattr(scale, 'name', scale)}, the scale of its codes")
    if not any(_inner_tensor(f) == (parameter, "scale") for f in factors):
        problems.append("the accumulator is not scaled by its weight's own scales")
    return problems
