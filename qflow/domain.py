"""The quantization domain: what the integer codes of a tensor mean.

A `Domain` is a plain, hashable, immutable value. Scales are stored rounded to
float32 because every backend qflow targets (TOSA RESCALE, Ethos-U, the
ExecuTorch quantized kernels) consumes float32 scales: two scales that agree
in float32 produce the same codes, so they are the same domain.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

Scale = float | tuple[float, ...]
ZeroPoint = int | tuple[int, ...]

FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "float"})

#: Code range of each integer dtype, used to tell a narrowed range from a full one.
DTYPE_RANGE: dict[str, tuple[int, int]] = {
    "int4": (-8, 7),
    "int8": (-128, 127),
    "uint8": (0, 255),
    "int16": (-32768, 32767),
    "uint16": (0, 65535),
    "int32": (-(2**31), 2**31 - 1),
}


def f32(x: float) -> float:
    """Round to the nearest float32, the precision backends use for scales."""
    return struct.unpack("f", struct.pack("f", float(x)))[0]


def _fmt_scale(s: float) -> str:
    return f"{s:.6g}"


@dataclass(frozen=True)
class Domain:
    """The meaning of a tensor's integer codes: real = scale * (code - zero_point).

    `dtype` is a string (``"int8"``, ``"int16"``, …, or ``"float32"`` for a real
    tensor). Per-channel domains carry tuples and the channel `axis`.
    """

    dtype: str
    scale: Scale = 1.0
    zero_point: ZeroPoint = 0
    qmin: int = 0
    qmax: int = 0
    axis: int | None = None
    #: Per-channel parameters qflow could not read (a lifted buffer seen without
    #: its program): the name of the tensor holding them stands for their value.
    opaque: str | None = None

    @staticmethod
    def quantized(
        dtype: str,
        scale: Scale,
        zero_point: ZeroPoint,
        qmin: int,
        qmax: int,
        axis: int | None = None,
    ) -> Domain:
        """Build an integer domain, normalising scales to float32."""
        if isinstance(scale, (list, tuple)):
            sc: Scale = tuple(f32(s) for s in scale)
            zp: ZeroPoint = tuple(int(z) for z in zero_point)  # type: ignore[union-attr]
            if axis is None:
                raise ValueError("a per-channel domain needs a channel axis")
        else:
            sc, zp = f32(scale), int(zero_point)  # type: ignore[arg-type]
            axis = None
        return Domain(str(dtype), sc, zp, int(qmin), int(qmax), axis)

    @staticmethod
    def run_time(dtype: str, params: str, qmin: int, qmax: int) -> Domain:
        """A domain whose scale and zero point are computed at run time (dynamic
        quantization): the tensors `params` that hold them stand for their value."""
        return Domain(str(dtype), (), (), int(qmin), int(qmax), None, params)

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    @staticmethod
    def plain(dtype: str) -> Domain:
        """Integer data: scale 1, zero point 0, `dtype`'s whole range (each code the integer it stands for)."""
        return Domain.quantized(dtype, 1.0, 0, *DTYPE_RANGE[dtype])

    @property
    def plain_integers(self) -> bool:
        """Scale 1, zero point 0, the dtype's whole range: each code is the integer it stands for."""
        return (self.scale, self.zero_point, (self.qmin, self.qmax)) == (1.0, 0, DTYPE_RANGE.get(self.dtype))

    @property
    def per_channel(self) -> bool:
        return isinstance(self.scale, tuple)

    @property
    def narrowed(self) -> bool:
        """True when [qmin, qmax] is narrower than the dtype's code range in a way
        only a clamp can guarantee: not the full range, not the symmetric one
        (qmin = -qmax) and not a sub-byte range carried in a wider dtype."""
        lo, hi = DTYPE_RANGE.get(self.dtype, (self.qmin, self.qmax))
        if (self.qmin, self.qmax) in ((lo, hi), (lo + 1, hi), (-self.qmax, self.qmax)):
            return False
        return self.qmax - self.qmin > 15

    def widened(self) -> Domain:
        """The same meaning over the dtype's full code range: what a rescale
        that saturates only to the dtype produces."""
        lo, hi = DTYPE_RANGE.get(self.dtype, (self.qmin, self.qmax))
        return Domain(self.dtype, self.scale, self.zero_point, lo, hi, self.axis, self.opaque)

    def __str__(self) -> str:
        if self.is_float:
            return self.dtype
        if self.opaque is not None and self.axis is None:
            return f"{self.dtype} run-time qparams ({self.opaque}) [{self.qmin},{self.qmax}]"
        if self.opaque is not None:
            return f"{self.dtype} per-channel(axis={self.axis}, params {self.opaque}) [{self.qmin},{self.qmax}]"
        if self.per_channel:
            scales = self.scale  # type: ignore[assignment]
            head = ", ".join(_fmt_scale(s) for s in scales[:2])  # type: ignore[index]
            more = ", …" if len(scales) > 2 else ""  # type: ignore[arg-type]
            return (
                f"{self.dtype} per-channel(axis={self.axis}, {len(scales)} ch)"  # type: ignore[arg-type]
                f" scale=[{head}{more}] [{self.qmin},{self.qmax}]"
            )
        return (
            f"{self.dtype} scale={_fmt_scale(self.scale)} zp={self.zero_point}"  # type: ignore[arg-type]
            f" [{self.qmin},{self.qmax}]"
        )

    def to_dict(self) -> dict[str, object]:
        if self.is_float:
            return {"dtype": self.dtype}
        d: dict[str, object] = {
            "dtype": self.dtype,
            "scale": list(self.scale) if self.per_channel else self.scale,  # type: ignore[arg-type]
            "zero_point": list(self.zero_point) if self.per_channel else self.zero_point,  # type: ignore[arg-type]
            "qmin": self.qmin,
            "qmax": self.qmax,
        }
        if self.axis is not None:
            d["axis"] = self.axis
        if self.opaque is not None:
            d["params"] = self.opaque
        return d


#: The domain of a real-valued tensor.
FLOAT = Domain("float32")
