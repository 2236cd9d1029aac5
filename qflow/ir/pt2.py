"""qflow's own reader of a `torch.export.save` archive, for checking only.

`torch.export.load` rebuilds every tensor value as a FakeTensor under a
ShapeEnv, which imports torch._dynamo (about 1.8 s, most of a `qflow check`).
A check needs none of it: it reads the graph, each value's dtype and shape,
the node metadata, and the few constant tensors that hold qparams. So this
module reads the archive (a zip: ``models/model.json`` is the serialized
graph, ``data/weights`` and ``data/constants`` the raw tensor bytes) and
builds a real `torch.fx.GraphModule` exactly as torch's deserializer does
(torch/_export/serde/serialize.py: same node names, targets resolved through
``torch.ops``, args/kwargs split by the op schema, the same metadata), with
``meta["val"]`` a meta-device tensor of the saved dtype, shape and strides
instead of a FakeTensor.

It reads only what it fully understands. Anything else — another schema or
archive version, symbolic shapes, higher-order ops, pickled weights, custom
objects, an argument kind it does not know — raises `Unsupported`, and the
caller loads the program with `torch.export.load` instead: a slower check,
never a different graph. Repair and ``--arm`` need the real ExportedProgram
and always use `torch.export.load`.
"""

from __future__ import annotations

import json
import keyword
import math
import operator
import posixpath
import sys
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
from torch.export import graph_signature as gs

#: The serialized-program schema this reader was written against (torch 2.13: 8.20). A newer
#: minor version may add fields whose meaning this reader does not know, so it is refused.
SCHEMA_MAJOR, SCHEMA_MINOR = 8, 20
ARCHIVE_FORMAT, ARCHIVE_VERSION = "pt2", "0"
MODEL = "model"  # torch.export.load returns the program saved under this name
ST_DELIMITER = ";"  # torch's separator of the stack-like metadata entries

#: schema.ScalarType → torch dtype (torch/_export/serde/serialize.py, _TORCH_TO_SERIALIZE_DTYPE).
_DTYPES: dict[int, torch.dtype] = {
    1: torch.uint8,
    2: torch.int8,
    3: torch.int16,
    4: torch.int32,
    5: torch.int64,
    6: torch.float16,
    7: torch.float32,
    8: torch.float64,
    9: torch.complex32,
    10: torch.complex64,
    11: torch.complex128,
    12: torch.bool,
    13: torch.bfloat16,
    28: torch.uint16,
    29: torch.float8_e4m3fn,
    30: torch.float8_e5m2,
    31: torch.float8_e4m3fnuz,
    32: torch.float8_e5m2fnuz,
    33: torch.float8_e8m0fnu,
    34: torch.uint32,
    35: torch.uint64,
}
_MEMORY_FORMATS = {
    1: torch.contiguous_format,
    2: torch.channels_last,
    3: torch.channels_last_3d,
    4: torch.preserve_format,
}
_LAYOUTS = {1: torch.sparse_coo, 2: torch.sparse_csr, 3: torch.sparse_csc, 4: torch.sparse_bsr, 5: torch.sparse_bsc}
_LAYOUTS[7] = torch.strided
_POSITIONAL, _KEYWORD = 1, 2


class Unsupported(Exception):
    """The archive holds something this reader does not read; load it with torch.export.load."""


@dataclass
class SavedProgram:
    """What a check reads of a saved ExportedProgram: its graph module, graph
    signature, weights (``state_dict``) and lifted constants. Tensor values in
    ``meta["val"]`` are meta-device tensors; the weights and constants are real
    CPU tensors, read from the archive when first looked up."""

    graph_module: fx.GraphModule
    graph_signature: gs.ExportGraphSignature
    state_dict: Mapping[str, torch.Tensor] = field(default_factory=dict)
    constants: Mapping[str, torch.Tensor] = field(default_factory=dict)
    schema_version: tuple[int, int] = (SCHEMA_MAJOR, SCHEMA_MINOR)
    #: The archive it was read from (what lowering it again loads with torch.export.load).
    path: Path | None = None

    @property
    def graph(self) -> fx.Graph:
        return self.graph_module.graph


def read(path: str | Path) -> SavedProgram:
    """The program `torch.export.save` wrote to `path`, or `Unsupported`."""
    with zipfile.ZipFile(path) as zf:
        archive = _Archive(Path(path), zf)
        if archive.text("archive_format") != ARCHIVE_FORMAT:
            raise Unsupported("not a pt2 archive (archive_format)")
        if archive.text("archive_version") != ARCHIVE_VERSION:
            raise Unsupported("archive version")
        if archive.has("byteorder") and archive.text("byteorder") != sys.byteorder:
            raise Unsupported("tensors saved in another byte order")
        for name in archive.sizes:
            if name.startswith(("data/aotinductor/", "data/executorch/", "xl_model_weights/")):
                raise Unsupported(f"archive entry {name}")
        program = json.loads(archive.bytes(f"models/{MODEL}.json"))
        state_dict = _Payloads(archive, "data/weights/", f"data/weights/{MODEL}_weights_config.json", "weight_")
        constants = _Payloads(archive, "data/constants/", f"data/constants/{MODEL}_constants_config.json", "tensor_")
    saved = _Deserializer(program).program(state_dict, constants)
    saved.path = Path(path)
    return saved


class _Archive:
    """The records of a pt2 zip, named relative to its one top-level folder (as torch's reader does)."""

    def __init__(self, path: Path, zf: zipfile.ZipFile) -> None:
        self.path, self.zf = path, zf
        entries = [i for i in zf.infolist() if not i.is_dir()]
        roots = {i.filename.split("/", 1)[0] for i in entries}
        if len(roots) != 1 or any("/" not in i.filename for i in entries):
            raise Unsupported("a pt2 archive keeps every record under one top-level folder")
        self.root = roots.pop()
        self.sizes = {i.filename.split("/", 1)[1]: i.file_size for i in entries}

    def has(self, name: str) -> bool:
        return name in self.sizes

    def bytes(self, name: str) -> bytes:
        if name not in self.sizes:
            raise Unsupported(f"no {name} in the archive")
        return self.zf.read(f"{self.root}/{name}")

    def text(self, name: str) -> str:
        return self.bytes(name).decode()


# -- weights and constants --------------------------------------------------------


@dataclass(frozen=True)
class _Payload:
    """One raw tensor of a payload config: its record and how torch views it."""

    record: str
    dtype: torch.dtype
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    is_param: bool
    requires_grad: bool


class _Payloads(Mapping[str, torch.Tensor]):
    """fqn → tensor of a payload config (torch's _load_state_dict / _load_constants for raw,
    unpickled tensors; fqns that name one record share its storage, as there). Everything is
    checked when the archive is read; a tensor's bytes are read when it is first looked up,
    since a check reads only the few constants that hold qparams, never the weights."""

    def __init__(self, archive: _Archive, folder: str, config_file: str, prefix: str) -> None:
        self.path, self.root = archive.path, archive.root
        self.payloads: dict[str, _Payload] = {}
        self._flat: dict[str, torch.Tensor] = {}
        self._tensors: dict[str, torch.Tensor] = {}
        for fqn, payload in json.loads(archive.text(config_file)).get("config", {}).items():
            name = payload["path_name"]
            if payload.get("use_pickle") or not name.startswith(prefix):
                raise Unsupported(f"{fqn}: a pickled tensor or an object ({name})")
            meta = payload["tensor_meta"]
            if meta is None or meta["device"]["type"] != "cpu" or meta.get("layout", 7) != 7:
                raise Unsupported(f"{fqn}: not a strided CPU tensor")
            p = _Payload(
                posixpath.join(folder, name),
                _dtype(meta["dtype"]),
                tuple(_ints(meta["sizes"])),
                tuple(_ints(meta["strides"])),
                _ints([meta["storage_offset"]])[0],
                bool(payload.get("is_param")),
                bool(meta["requires_grad"]),
            )
            if not archive.has(p.record):
                raise Unsupported(f"{fqn}: no {p.record} in the archive")
            nbytes = archive.sizes[p.record]
            if nbytes % p.dtype.itemsize:
                raise Unsupported(f"{fqn}: {nbytes} bytes are not whole {p.dtype} elements")
            last = p.offset + sum((n - 1) * st for n, st in zip(p.size, p.stride, strict=True))
            if nbytes and all(p.size) and last >= nbytes // p.dtype.itemsize:
                raise Unsupported(f"{fqn}: its view reaches past the {nbytes} bytes of {p.record}")
            self.payloads[fqn] = p

    def __getitem__(self, fqn: str) -> torch.Tensor:
        if fqn not in self._tensors:
            p = self.payloads[fqn]
            if p.record not in self._flat:
                with zipfile.ZipFile(self.path) as zf:
                    data = zf.read(f"{self.root}/{p.record}")
                flat = torch.frombuffer(bytearray(data), dtype=p.dtype) if data else torch.zeros(p.size, dtype=p.dtype)
                self._flat[p.record] = flat
            t = torch.as_strided(self._flat[p.record], p.size, p.stride, p.offset)
            self._tensors[fqn] = torch.nn.Parameter(t, requires_grad=p.requires_grad) if p.is_param else t
        return self._tensors[fqn]

    def __iter__(self) -> Iterator[str]:
        return iter(self.payloads)

    def __len__(self) -> int:
        return len(self.payloads)


def _dtype(code: int) -> torch.dtype:
    try:
        return _DTYPES[code]
    except KeyError:
        raise Unsupported(f"scalar type {code}") from None


def _ints(sym_ints: list[dict[str, Any]]) -> list[int]:
    """Concrete SymInts; a symbolic size (``as_expr``) needs torch's ShapeEnv."""
    out = []
    for s in sym_ints:
        if set(s) != {"as_int"}:
            raise Unsupported("a symbolic size")
        out.append(int(s["as_int"]))
    return out


def _float(x: Any) -> float:
    """torch writes inf and nan as the strings "Infinity", "-Infinity", "NaN" (float() reads them)."""
    return float(x)


def _device(d: dict[str, Any]) -> torch.device:
    return torch.device(type=d["type"]) if d.get("index") is None else torch.device(type=d["type"], index=d["index"])


# -- the graph ----------------------------------------------------------------------


def _resolve(target: str) -> Any:
    """torch's deserialize_operator: a dotted name under ``torch``, ``_operator`` or ``math``."""
    if target.startswith("_operator"):
        obj: Any = operator
    elif target.startswith("torch"):
        obj = torch
    elif target.startswith("math"):
        obj = math
    else:
        raise Unsupported(f"target {target!r}")
    for part in target.split(".")[1:]:
        if not hasattr(obj, part):
            raise Unsupported(f"target {target!r} is not registered")
        obj = getattr(obj, part)
    return obj


def _meta_func(target: str) -> Any:
    """torch's deserialize_meta_func (the callables named in source_fn_stack)."""
    if target.startswith("torch.nn"):
        obj: Any = torch.nn
        parts = target.split(".")[2:]
    elif target.startswith("torch"):
        obj, parts = torch, target.split(".")[1:]
    else:
        try:
            return _resolve(target)
        except Unsupported:
            return target
    for part in parts:
        if not hasattr(obj, part):
            return target
        obj = getattr(obj, part)
    return obj


def _union(arg: dict[str, Any]) -> tuple[str, Any]:
    if not isinstance(arg, dict) or len(arg) != 1:
        raise Unsupported(f"malformed tagged union {arg!r}")
    ((tag, value),) = arg.items()
    return tag, value


class _Deserializer:
    """torch's GraphModuleDeserializer, for programs with concrete shapes and OpOverload calls only."""

    def __init__(self, program: dict[str, Any]) -> None:
        version = program.get("schema_version") or {}
        if version.get("major") != SCHEMA_MAJOR or not 0 <= version.get("minor", -1) <= SCHEMA_MINOR:
            raise Unsupported(f"schema version {version}")
        if program.get("range_constraints"):
            raise Unsupported("symbolic shapes (range constraints)")
        self.version = (int(version["major"]), int(version["minor"]))
        self.module = program["graph_module"]
        self.graph = fx.Graph()
        self.nodes: dict[str, fx.Node] = {}
        self.tensor_values: dict[str, Any] = {}

    # -- the program -------------------------------------------------------------------
    def program(self, state_dict: Mapping[str, torch.Tensor], constants: Mapping[str, torch.Tensor]) -> SavedProgram:
        signature = self.signature(self.module["signature"])
        self.read_graph(self.module["graph"])
        # as ExportedProgram.__init__: a flat graph, codegen reset, duplicate getitems merged
        self.graph._codegen = fx.graph.CodeGen()
        try:
            gm = fx.GraphModule(torch.nn.Module(), self.graph)
        except SyntaxError as e:
            raise Unsupported(f"graph code: {e}") from e
        meta: dict[str, Any] = {}
        if custom := (self.module.get("metadata") or {}).get("custom"):
            meta["custom"] = json.loads(custom)
        if "treespec_namedtuple_fields" in self.module:
            meta["treespec_namedtuple_fields"] = {
                k: v["field_names"] for k, v in self.module["treespec_namedtuple_fields"].items()
            }
        gm.meta = meta
        eliminate = getattr(torch.export.exported_program, "_common_getitem_elimination_pass", None)
        if eliminate is None:
            raise Unsupported("this torch has no _common_getitem_elimination_pass")
        eliminate(gm, signature, [])
        return SavedProgram(gm, signature, state_dict, constants, self.version)

    def signature(self, sig: dict[str, Any]) -> gs.ExportGraphSignature:
        inputs = []
        for spec in sig["input_specs"]:
            kind, v = _union(spec)
            if kind == "user_input":
                inputs.append(gs.InputSpec(gs.InputKind.USER_INPUT, self.argument_spec(v["arg"]), None))
            elif kind == "parameter":
                arg = gs.TensorArgument(name=v["arg"]["name"])
                inputs.append(gs.InputSpec(gs.InputKind.PARAMETER, arg, v["parameter_name"]))
            elif kind == "buffer":
                arg = gs.TensorArgument(name=v["arg"]["name"])
                inputs.append(gs.InputSpec(gs.InputKind.BUFFER, arg, v["buffer_name"], persistent=v["persistent"]))
            elif kind == "tensor_constant":
                arg = gs.TensorArgument(name=v["arg"]["name"])
                inputs.append(gs.InputSpec(gs.InputKind.CONSTANT_TENSOR, arg, v["tensor_constant_name"]))
            else:  # custom_obj, token, constant_input
                raise Unsupported(f"input spec {kind}")
        outputs = []
        tensor_outputs = {
            "loss_output": (gs.OutputKind.LOSS_OUTPUT, None),
            "buffer_mutation": (gs.OutputKind.BUFFER_MUTATION, "buffer_name"),
            "parameter_mutation": (gs.OutputKind.PARAMETER_MUTATION, "parameter_name"),
            "gradient_to_parameter": (gs.OutputKind.GRADIENT_TO_PARAMETER, "parameter_name"),
            "gradient_to_user_input": (gs.OutputKind.GRADIENT_TO_USER_INPUT, "user_input_name"),
            "user_input_mutation": (gs.OutputKind.USER_INPUT_MUTATION, "user_input_name"),
        }
        for spec in sig["output_specs"]:
            kind, v = _union(spec)
            if kind == "user_output":
                outputs.append(gs.OutputSpec(gs.OutputKind.USER_OUTPUT, self.argument_spec(v["arg"]), None))
            elif kind in tensor_outputs:
                out_kind, target = tensor_outputs[kind]
                arg = gs.TensorArgument(name=v["arg"]["name"])
                outputs.append(gs.OutputSpec(out_kind, arg, v[target] if target else None))
            else:  # token
                raise Unsupported(f"output spec {kind}")
        return gs.ExportGraphSignature(input_specs=inputs, output_specs=outputs)

    def argument_spec(self, arg: dict[str, Any]) -> Any:
        tag, v = _union(arg)
        if tag == "as_tensor":
            return gs.TensorArgument(name=v["name"])
        if tag in ("as_sym_int", "as_sym_float", "as_custom_obj"):
            raise Unsupported(f"signature argument {tag}")
        return gs.ConstantArgument(name="", value=self.value(arg))

    # -- nodes -------------------------------------------------------------------------
    def read_graph(self, graph: dict[str, Any]) -> None:
        for kind in ("sym_int_values", "sym_bool_values", "sym_float_values", "custom_obj_values"):
            if graph.get(kind):
                raise Unsupported(f"graph {kind}")
        self.tensor_values = graph["tensor_values"]
        for inp in graph["inputs"]:
            tag, v = _union(inp)
            if tag != "as_tensor":
                raise Unsupported(f"graph input {tag}")
            node = self.graph.placeholder(v["name"])
            node.name = v["name"]  # as torch: an illegal FX name ("input") is kept
            self.sync(v["name"], node)
        for sn in graph["nodes"]:
            self.node(sn)
        outputs = []
        for out in graph["outputs"]:
            tag, v = _union(out)
            if tag == "as_tensor":
                outputs.append(self.nodes[v["name"]])
            elif tag in ("as_int", "as_bool"):
                outputs.append(v)
            elif tag == "as_float":
                outputs.append(_float(v))
            elif tag == "as_none":
                outputs.append(None)
            else:
                raise Unsupported(f"graph output {tag}")
        if graph.get("is_single_tensor_return"):
            if len(outputs) != 1 or not isinstance(outputs[0], fx.Node):
                raise Unsupported("a single-tensor return without one tensor")
            out_node = self.graph.output(outputs[0])
            out_node.meta["val"] = outputs[0].meta["val"]
        else:
            out_node = self.graph.output(tuple(outputs))
            out_node.meta["val"] = tuple(a.meta["val"] if isinstance(a, fx.Node) else a for a in outputs)

    def tensor_meta(self, name: str) -> torch.Tensor:
        """A meta-device tensor standing for the FakeTensor torch builds from the same TensorMeta."""
        if name not in self.tensor_values:
            raise Unsupported(f"value {name} has no tensor metadata")
        tm = self.tensor_values[name]
        if tm.get("layout", 7) != 7:
            raise Unsupported(f"value {name}: layout {tm.get('layout')}")
        return torch.empty_strided(
            _ints(tm["sizes"]),
            _ints(tm["strides"]),
            dtype=_dtype(tm["dtype"]),
            device="meta",
            requires_grad=bool(tm.get("requires_grad")),
        )

    def sync(self, name: str, node: fx.Node) -> None:
        if name in self.nodes:
            raise Unsupported(f"value {name} defined twice")
        node.name = name
        self.nodes[name] = node
        node.meta["val"] = self.tensor_meta(name)

    def node(self, sn: dict[str, Any]) -> None:
        target = _resolve(sn["target"])
        if not isinstance(target, torch._ops.OpOverload):  # HOPs, symbolic int ops, callables
            raise Unsupported(f"node {sn.get('name')}: target {sn['target']}")
        if target in (
            torch.ops.aten.item.default,
            torch.ops.aten._assert_scalar.default,
            torch.ops.aten.sym_constrain_range_for_size.default,
        ):
            raise Unsupported(f"node {sn.get('name')}: {sn['target']} works on symbolic values")
        outputs = sn["outputs"]
        name = sn.get("name") or None
        if name is None and _single_tensor_return(target) and outputs and "as_tensor" in outputs[0]:
            name = outputs[0]["as_tensor"]["name"]
        args, kwargs = self.inputs(target, sn["inputs"])
        fx_node = self.graph.create_node("call_function", target, args, kwargs, name)
        self.outputs(sn, fx_node)
        fx_node.meta.update(self.metadata(sn.get("metadata") or {}))
        if "nn_module_stack" not in fx_node.meta:  # serialization drops empty dicts
            fx_node.meta["nn_module_stack"] = {}

    def inputs(self, target: torch._ops.OpOverload, inputs: list[dict[str, Any]]) -> tuple[tuple, dict[str, Any]]:
        """torch's deserialize_inputs: the serialized kind says positional or keyword, the schema the order."""
        kinds = {i["name"]: i.get("kind") for i in inputs}
        actual = {i["name"]: self.value(i["arg"]) for i in inputs}
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for a in target._schema.arguments:
            if a.name in actual:
                kind = kinds[a.name]
                if kind == _POSITIONAL:
                    args.append(actual[a.name])
                    continue
                if kind == _KEYWORD and not keyword.iskeyword(a.name):
                    kwargs[a.name] = actual[a.name]
                    continue
            if not a.has_default_value() and not a.kwarg_only:
                if a.name not in actual:
                    raise Unsupported(f"{target}: no argument {a.name}")
                args.append(actual[a.name])
            elif keyword.iskeyword(a.name):
                raise Unsupported(f"{target}: argument named by a Python keyword ({a.name})")
            elif a.name in actual:
                kwargs[a.name] = actual[a.name]
        return tuple(args), kwargs

    def value(self, arg: dict[str, Any]) -> Any:
        """torch's deserialize_input for the argument kinds of concrete-shape programs."""
        tag, v = _union(arg)
        if tag == "as_none":
            return None
        if tag == "as_tensor":
            return self.nodes[v["name"]]
        if tag == "as_scalar_type":
            return _dtype(v)
        if tag == "as_memory_format":
            if v not in _MEMORY_FORMATS:
                raise Unsupported(f"memory format {v}")
            return _MEMORY_FORMATS[v]
        if tag == "as_layout":
            if v not in _LAYOUTS:
                raise Unsupported(f"layout {v}")
            return _LAYOUTS[v]
        if tag == "as_device":
            return _device(v)
        if tag in ("as_int", "as_bool", "as_string"):
            return v
        if tag == "as_float":
            return _float(v)
        if tag == "as_complex":
            return complex(_float(v["real"]), _float(v["imag"]))
        if tag in ("as_sym_int", "as_sym_float", "as_sym_bool"):
            return self.sym(v)
        if tag == "as_operator":
            return _resolve(v)
        if tag == "as_string_to_argument":
            return {k: self.value(x) for k, x in v.items()}
        if not isinstance(v, list):
            raise Unsupported(f"argument kind {tag}")
        if not v:
            return []
        if tag == "as_tensors":
            return [self.nodes[t["name"]] for t in v]
        if tag in ("as_ints", "as_bools", "as_strings"):
            return list(v)
        if tag == "as_floats":
            return [_float(x) for x in v]
        if tag == "as_int_lists":
            return [tuple(x) for x in v]
        if tag == "as_float_lists":
            return [[_float(x) for x in xs] for xs in v]
        if tag == "as_nested_tensors":
            return [[self.nodes[t["name"]] for t in inner] for inner in v]
        if tag in ("as_sym_ints", "as_sym_floats", "as_sym_bools"):
            return [self.sym(x) for x in v]
        if tag == "as_optional_tensors":
            out = []
            for x in v:
                t, tv = _union(x)
                if t == "as_none":
                    out.append(None)
                elif t == "as_tensor":
                    out.append(self.nodes[tv["name"]])
                else:
                    raise Unsupported(f"optional tensor {t}")
            return out
        raise Unsupported(f"argument kind {tag}")  # as_graph, as_custom_obj, as_optional_tensor, ...

    @staticmethod
    def sym(v: dict[str, Any]) -> Any:
        """A SymInt/SymFloat/SymBool argument that is a constant; a named one is symbolic."""
        tag, x = _union(v)
        if tag in ("as_int", "as_bool"):
            return x
        if tag == "as_float":
            return _float(x)
        raise Unsupported(f"symbolic argument {tag}")

    def outputs(self, sn: dict[str, Any], fx_node: fx.Node) -> None:
        """torch's deserialize_outputs: one tensor names the node; several become getitem nodes."""
        outputs = sn["outputs"]
        if not outputs:
            return
        if len(outputs) == 1:
            tag, v = _union(outputs[0])
            if tag == "as_tensor":
                self.sync(v["name"], fx_node)
                return
            if tag == "as_none":
                fx_node.meta["val"] = None
                fx_node._rename(f"{self.graph._target_to_str(fx_node.target)}_unused")
                return
            if tag != "as_tensors" or not v:
                raise Unsupported(f"node output {tag}")
            items = [{"as_tensor": t} for t in v]
        else:
            items = outputs
        meta = self.metadata(sn.get("metadata") or {})
        vals: list[Any] = []
        for idx, item in enumerate(items):
            tag, v = _union(item)
            if tag == "as_tensor":
                g = self.graph.create_node("call_function", operator.getitem, (fx_node, idx), name=v["name"])
                self.sync(v["name"], g)
                vals.append(g.meta["val"])
            elif tag == "as_none":
                g = self.graph.create_node("call_function", operator.getitem, (fx_node, idx), name="as_none")
                g.meta["val"] = None
                vals.append(None)
            elif tag == "as_tensors":
                g = self.graph.create_node("call_function", operator.getitem, (fx_node, idx))
                inner = []
                for j, t in enumerate(v):
                    gi = self.graph.create_node("call_function", operator.getitem, (g, j), name=t["name"])
                    self.sync(t["name"], gi)
                    gi.meta.update(meta)
                    inner.append(gi.meta["val"])
                g.meta["val"] = inner
                vals.append(inner)
            else:
                raise Unsupported(f"node output {tag}")
            g.meta.update(meta)
        fx_node.meta["val"] = tuple(vals)
        self.nodes[fx_node.name] = fx_node

    @staticmethod
    def metadata(metadata: dict[str, str]) -> dict[str, Any]:
        """torch's deserialize_metadata: the same keys, parsed the same way."""
        ret: dict[str, Any] = {}
        if stack_trace := metadata.get("stack_trace"):
            ret["stack_trace"] = stack_trace
        if stack := metadata.get("nn_module_stack"):
            entries = {}
            for item in stack.split(ST_DELIMITER):
                key, path, ty = _split_module_entry(item)
                entries[key] = (path, ty)
            ret["nn_module_stack"] = entries
        if source_fn := metadata.get("source_fn_stack"):
            st = []
            for entry in source_fn.split(ST_DELIMITER):
                name, target = entry.split(",")
                st.append((name, _meta_func(target)))
            ret["source_fn_stack"] = st
        if torch_fn := metadata.get("torch_fn"):
            ret["torch_fn"] = tuple(torch_fn.split(ST_DELIMITER))
        if custom := metadata.get("custom"):
            ret["custom"] = json.loads(custom)
        if from_node := metadata.get("from_node"):
            from torch.fx.traceback import NodeSource

            sources = json.loads(from_node)
            ret["from_node"] = None if sources is None else [s for d in sources if (s := NodeSource._from_dict(d))]
        return ret


def _split_module_entry(item: str) -> list[str]:
    """An nn_module_stack entry (key, path, type) split at the commas outside brackets (torch's metadata_split)."""
    out, start, depth = [], 0, 0
    for end, c in enumerate(item):
        if c in "[(":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(item[start:end])
            start = end + 1
    out.append(item[start:])
    if len(out) != 3:
        raise Unsupported(f"nn_module_stack entry {item!r}")
    return out


def _single_tensor_return(target: torch._ops.OpOverload) -> bool:
    returns = target._schema.returns
    return len(returns) == 1 and isinstance(returns[0].real_type, torch.TensorType)
