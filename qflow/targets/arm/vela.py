"""Ethos-U: the Vela binary stream's own statement of each IO tensor's element size.

Torch-free, so both the in-memory lowered reader and the `.pte` reader use it.
"""

from __future__ import annotations

import struct

#: Element size → integer dtype (4 bytes is int32 or float32: Vela knows bytes, not types).
ELEM_DTYPE = {1: "int8", 2: "int16"}
_VELA_BLOCK = struct.Struct("<16sIB11s")  # executorch/backends/arm/arm_vela.py: name, length, external flag


def io_elem_sizes(blob: bytes) -> dict[str, list[int]] | None:
    """{"inputs": [...], "outputs": [...]} element sizes from a Vela binary stream
    (ArmBackendEthosU's format: 16-byte aligned named blocks; each io block is
    a count, then per tensor a 6-D shape, elem_size, offset, region)."""
    try:
        pos, out = 0, {}
        while pos + _VELA_BLOCK.size <= len(blob):
            name, length, external, _ = _VELA_BLOCK.unpack_from(blob, pos)
            pos += _VELA_BLOCK.size
            key = name.rstrip(b"\x00").decode()
            if key in ("inputs", "outputs") and not external:
                (n,) = struct.unpack_from("<i", blob, pos)
                out[key] = [struct.unpack_from("<9i", blob, pos + 4 + 36 * i)[6] for i in range(n)]
            if key == "vela_end_stream":
                break
            pos += (length + 15) // 16 * 16
        return out if set(out) == {"inputs", "outputs"} else None
    except (struct.error, UnicodeDecodeError):
        return None
