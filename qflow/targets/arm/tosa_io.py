"""The IO tensor types of a TOSA flatbuffer (torch-free: the .pte and the
in-memory readers share it)."""

from __future__ import annotations

DTYPES = {1: "bool", 2: "int4", 3: "int8", 4: "int16", 5: "int32", 7: "float32", 8: "float16", 9: "bfloat16"}


def io_names(payload: bytes) -> tuple[list[tuple[str, str]], list[tuple[str, str]]] | None:
    """(name, dtype) of each input and output tensor of a TOSA flatbuffer, in
    block order; None when `payload` is not one (a Vela blob, a VGF file)."""
    try:
        from tosa.TosaGraph import TosaGraph

        blk = TosaGraph.GetRootAs(payload, 0).Regions(0).Blocks(0)
        types = {blk.Tensors(i).Name().decode(): blk.Tensors(i).Type() for i in range(blk.TensorsLength())}
        ins = [blk.Inputs(i).decode() for i in range(blk.InputsLength())]
        outs = [blk.Outputs(i).decode() for i in range(blk.OutputsLength())]
        return [(n, DTYPES.get(types[n], "?")) for n in ins], [(n, DTYPES.get(types[n], "?")) for n in outs]
    except Exception:  # not a TOSA flatbuffer, or tosa-tools missing
        return None
