"""The op-class table: how each operator moves quantization domains.

One table decides for every op whether it is an identity on integer codes
(pass-through), an activation clamp, a compute op that rescales, a quantize or
dequantize, a domain-free constant, or unknown. Unknown ops are never treated
as identity: an obligation that crosses one is reported *unproven*.

Ops are looked up by their *base name* ("cat" for ``aten.cat.default``,
``exir_ops.edge.aten.cat.default`` and ``aten::cat``), so one entry covers the
aten, edge and ``_copy`` spellings listed here. Users extend the table with
:func:`register`.
"""

from __future__ import annotations

import enum
from functools import lru_cache


class OpClass(enum.Enum):
    PASSTHROUGH = "passthrough"
    ACTIVATION = "activation"
    COMPUTE = "compute"
    QUANTIZE = "quantize"
    DEQUANTIZE = "dequantize"
    CONSTANT = "constant"
    DELEGATE = "delegate"
    UNKNOWN = "unknown"


_PASSTHROUGH = """
cat concat concatenate stack view view_copy _unsafe_view reshape permute permute_copy
transpose transpose_copy t t_copy numpy_T squeeze squeeze_copy unsqueeze unsqueeze_copy slice
slice_copy select select_copy expand expand_copy flatten clone contiguous alias
alias_copy detach detach_copy detach_ split split_copy split_with_sizes
split_with_sizes_copy chunk unbind unbind_copy getitem max_pool2d max_pool1d
max_pool3d max_pool2d_with_indices adaptive_max_pool2d repeat tile flip
pixel_shuffle pixel_unshuffle index_select gather index unfold unfold_copy
unflatten movedim moveaxis amax amin dropout _clone_dim_order
lift_fresh_copy constant_pad_nd pad as_strided_copy narrow roll where masked_fill index_put index_put_ copy copy_
""".split()
_PASSTHROUGH.append("GATHER")  # (tosa.GATHER: Arm's passes make a gather one before the fold; it copies codes)

_ACTIVATION = "relu relu_ relu6 hardtanh hardtanh_ clamp clamp_ clamp_min clamp_max".split()

_COMPUTE = """
conv1d conv2d conv3d convolution conv_transpose1d conv_transpose2d linear matmul mm bmm
addmm baddbmm add add_ sub sub_ mul mul_ div div_ rsub neg abs softmax _softmax
log_softmax _log_softmax mean sum avg_pool2d avg_pool1d adaptive_avg_pool2d
adaptive_avg_pool1d sigmoid tanh exp log sqrt rsqrt pow reciprocal gelu silu
hardswish hardsigmoid leaky_relu elu erf erfinv sin cos tan sinh cosh asin acos atan atanh asinh acosh
expm1 log2 log10 log1p ceil floor round trunc remainder layer_norm
group_norm rms_norm batch_norm native_layer_norm native_group_norm
_native_batch_norm_legit_no_training _native_batch_norm_legit upsample_nearest2d
upsample_bilinear2d maximum minimum var var_mean prelu
eq ne lt le gt ge bitwise_and bitwise_or bitwise_xor bitwise_not bitwise_left_shift bitwise_right_shift
__and__ __or__ __xor__ __lshift__ __rshift__ logical_and logical_or logical_not
argmax argmin topk sort embedding scaled_dot_product_attention cumsum
grid_sampler grid_sampler_2d col2im im2col
""".split()

_QUANTIZE = "quantize_per_tensor quantize_per_channel quantize_per_token quantize_affine".split()
_DEQUANTIZE = "dequantize_per_tensor dequantize_per_channel dequantize_per_token dequantize_affine".split()
#: Dynamic quantization computes qparams at run time from a float tensor: the
#: scales and zero points are data, not quantized tensors.
_QPARAMS = """choose_qparams choose_qparams_tensor choose_qparams_per_token_asymmetric choose_qparams_symmetric
choose_qparams_affine""".split()
_CONSTANT = """
full full_like zeros zeros_like ones ones_like scalar_tensor arange eye linspace
empty empty_like fill fill_ new_full new_zeros new_ones rand randn _tensor_constant
access_subclass_inner_tensor alloc
""".split()

_TABLE: dict[str, OpClass] = {}
for _names, _cls in (
    (_PASSTHROUGH, OpClass.PASSTHROUGH),
    (_ACTIVATION, OpClass.ACTIVATION),
    (_COMPUTE, OpClass.COMPUTE),
    (_QUANTIZE, OpClass.QUANTIZE),
    (_DEQUANTIZE, OpClass.DEQUANTIZE),
    (_CONSTANT, OpClass.CONSTANT),
    (_QPARAMS, OpClass.CONSTANT),
):
    for _n in _names:
        _TABLE[_n] = _cls
_TABLE["executorch_call_delegate"] = OpClass.DELEGATE
# (a clamp whose bounds are tensors is an elementwise maximum / minimum of three tensors, no clamp by constants)
for _n in ("aten.clamp.Tensor", "aten.clamp_.Tensor", "aten.clamp_min.Tensor", "aten.clamp_max.Tensor"):
    _TABLE[_n] = OpClass.COMPUTE

#: dtype casts (a cast changes a tensor's dtype, not its values).
CASTS = frozenset({"to", "_to_copy", "_to_dim_order_copy"})

#: Higher-order control flow: the op runs subgraphs (cond's two branches, while_loop's
#: condition and body, the block a ``torch.no_grad()`` in `forward` wraps) passed to it as
#: graph-module attributes.
CONTROL_FLOW = frozenset({"cond", "while_loop", "wrap_with_set_grad_enabled"})

#: Ops whose tensor arguments all share one domain with the output (cat's list):
#: every input beyond the first is an obligation.
MULTI_INPUT_IDENTITY = frozenset({"cat", "concat", "concatenate", "stack"})
#: Ops that multiply and accumulate (a convolution, a matmul): a backend sums their products in a wider integer.
ACCUMULATING = frozenset({"linear", "conv1d", "conv2d", "convolution", "matmul", "bmm", "mm", "addmm"})
#: Ops that select codes from some of their arguments, by position: where's two
#: branches share the output's domain, its condition (a bool mask) carries none; a
#: maximum / minimum a target runs on codes (Cortex-M) picks each element from either; copy(self, src)
#: writes src's values into self's shape.
SELECT_INPUTS: dict[str, tuple[int, ...]] = {
    "where": (1, 2), "index_put": (0, 2), "index_put_": (0, 2), "maximum": (0, 1), "minimum": (0, 1),
    "copy": (1,), "copy_": (1,),
}  # fmt: skip
#: The argument positions of ops that take indices there (integer tensors that address data, never data).
INDEX_ARGS: dict[str, tuple[int, ...]] = {
    "index": (1,), "index_select": (2,), "gather": (2,), "embedding": (1,), "index_put": (1,), "index_put_": (1,),
    "take": (1,), "scatter": (2,), "scatter_add": (2,),
}  # fmt: skip


def code_sources(name: str, args: tuple[object, ...] | list[object]) -> list[object]:
    """The arguments whose codes pass-through op `name` copies into its output: cat's
    list, where's two branches, else the first argument."""
    if name in MULTI_INPUT_IDENTITY:
        first = args[0] if args else None
        return list(first) if isinstance(first, (list, tuple)) else []
    if name in SELECT_INPUTS:
        return [args[i] for i in SELECT_INPUTS[name] if i < len(args)]
    return list(args[:1])


@lru_cache(maxsize=4096)
def base_name(target: str) -> str:
    """``aten.cat.default`` → ``cat``; ``quantized_decomposed.quantize_per_tensor.tensor``
    → ``quantize_per_tensor``; ``operator.getitem`` → ``getitem``."""
    parts = target.replace("::", ".").split(".")
    if len(parts) >= 3:
        return parts[-2]
    if len(parts) == 2:
        # "aten.cat" (no overload) or "operator.getitem"
        return parts[1]
    return parts[0]


def register(name: str, op_class: OpClass | str) -> None:
    """Teach qflow how an op moves domains.

    `name` is a base name (``"my_view"``) or a full canonical target
    (``"my_ns.my_view.default"``); a full name wins over a base name.
    """
    _TABLE[name] = OpClass(op_class)
    classify.cache_clear()


def unregister(name: str) -> None:
    _TABLE.pop(name, None)
    classify.cache_clear()


@lru_cache(maxsize=4096)
def classify(target: str) -> OpClass:
    """The op class of a canonical target string (cached: the hot path of every adapter)."""
    if target in _TABLE:
        return _TABLE[target]
    return _TABLE.get(base_name(target), OpClass.UNKNOWN)
