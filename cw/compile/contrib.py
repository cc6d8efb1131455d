"""onnxruntime's own operators (the com.microsoft domain) as standard ONNX ones.

onnxruntime's transformer optimizer (`onnxruntime.transformers.optimizer`, and models shipped
"optimized" on model hubs) fuses BERT-, GPT-, ViT- and T5-style graphs into its own operators:
Gelu, FastGelu, BiasGelu, QuickGelu, EmbedLayerNormalization, SkipLayerNormalization and its
RMS form, FusedMatMul, Attention and MultiHeadAttention; SimplifiedLayerNormalization it
registers in the ONNX domain. TVM 0.27's importer has some of them under the same names but
refuses common forms (SkipLayerNormalization without beta and bias, Attention with a symbolic
batch), so all are written here as the arithmetic onnxruntime's kernels compute (checked
against them, tests/integration/test_decompose.py). Variants they would need more for (caches,
rotary embeddings, packed inputs, batched transposes) are refused by name.
"""

from __future__ import annotations

import numpy as np
import onnx

from cw.compile.attention import heads_of
from cw.compile.emit import Emitter, attr
from cw.errors import ModelError

_MS = "com.microsoft"
_MS_OPS = {"Gelu", "FastGelu", "BiasGelu", "QuickGelu", "SkipLayerNormalization",
           "EmbedLayerNormalization",
           "SkipSimplifiedLayerNormalization", "FusedMatMul", "Attention",
           "MultiHeadAttention"}
_SQRT_2_OVER_PI = 0.7978845608028654


def is_rewritten(node: onnx.NodeProto) -> bool:
    return node.domain == _MS and node.op_type in _MS_OPS or \
        node.domain in ("", "ai.onnx") and node.op_type == "SimplifiedLayerNormalization"


def _refusal(where: str, what: str) -> ModelError:
    return ModelError(f"{where} {what}: cw rewrites only its plain form",
                      "export the model without onnxruntime's fusions (or with fewer options)")


def _f(e: Emitter, value: float, what: str = "c") -> str:
    return e.const(np.float32(value), what)


def _gelu(e: Emitter, x: str, out: str) -> None:
    """0.5·x·(1 + erf(x/√2)), the exact Gelu."""
    erf = e.op("Erf", [e.op("Mul", [x, _f(e, 1 / np.sqrt(2))])])
    half = e.op("Mul", [x, _f(e, 0.5)])
    e.op("Mul", [half, e.op("Add", [erf, _f(e, 1.0)])], outputs=[out])


def _fast_gelu(e: Emitter, x: str, out: str) -> None:
    """0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), as onnxruntime's FastGelu."""
    inner = e.op("Mul", [x, e.op("Add", [_f(e, _SQRT_2_OVER_PI), e.op("Mul", [
        e.op("Mul", [x, x]), _f(e, _SQRT_2_OVER_PI * 0.044715)])])])
    half = e.op("Mul", [x, _f(e, 0.5)])
    e.op("Mul", [half, e.op("Add", [e.op("Tanh", [inner]), _f(e, 1.0)])], outputs=[out])


def _present(node, i: int) -> str:
    return node.input[i] if len(node.input) > i and node.input[i] else ""


def _output(node, i: int, used: set) -> str | None:
    """Output `i` of `node` where something reads it (i < 0: none)."""
    name = node.output[i] if 0 <= i < len(node.output) else ""
    return name if name and name in used else None


def _moments(e: Emitter, x: str, axes: list[int], eps: float, rms: bool):
    """`x` centered over `axes` (as it is for the RMS form), its mean (None for RMS) and
    1/√(variance + eps)."""
    if rms:
        centered, mean = x, None
    else:
        mean = e.reduce("ReduceMean", x, axes)
        centered = e.op("Sub", [x, mean])
    variance = e.reduce("ReduceMean", e.op("Mul", [centered, centered]), axes)
    return centered, mean, e.op("Reciprocal", [e.op("Sqrt", [e.op("Add", [variance,
                                                                        _f(e, eps)])])])


def _normalized(e: Emitter, node, x: str, used: set, rms: bool, axes: list[int],
                stats: tuple[int, int]) -> None:
    """LayerNorm (or its RMS form) of `x` over `axes`: output 0, and the mean and inverse
    standard deviation where outputs `stats` are used."""
    eps = float(attr(node, "epsilon", 1e-12 if node.domain == _MS else 1e-5))
    gamma = node.input[2] if node.op_type.startswith("Skip") else node.input[1]
    beta = _present(node, 3) if node.op_type == "SkipLayerNormalization" else ""
    centered, mean, inv_std = _moments(e, x, axes, eps, rms)
    scaled = e.op("Mul", [e.op("Mul", [centered, inv_std]), gamma])
    e.op("Add" if beta else "Identity", [scaled, beta] if beta else [scaled],
         outputs=[node.output[0]])
    mean_out, inv_out = (_output(node, i, used) for i in stats)
    if mean_out:
        if mean is None:
            raise _refusal(_where(node), "has its mean output used")
        e.op("Identity", [mean], outputs=[mean_out])
    if inv_out:
        e.op("Identity", [inv_std], outputs=[inv_out])


def _where(node) -> str:
    return f"{node.op_type} '{node.name or node.output[0]}'"


def _embed_norm(e: Emitter, node, shapes: dict, used: set, where: str) -> None:
    """Word, position and segment embeddings summed and normalized; output 1 is each batch
    entry's number of unmasked tokens (what Attention takes as its 1-D mask index)."""
    ids, segments, words, positions, segment_table, gamma, beta = \
        (_present(node, i) for i in range(7))
    mask, position_ids = _present(node, 7), _present(node, 8)
    dims = shapes.get(ids)
    if not dims or len(dims) != 2 or not isinstance(dims[1], int):
        raise ModelError(f"{where}: its token ids need a known shape [batch, sequence]",
                         "fix the input shapes with --input-shape")
    seq = dims[1]
    total = e.op("Gather", [words, ids], axis=0)
    if position_ids:
        placed = e.op("Gather", [positions, position_ids], axis=0)
    else:  # positions 0..seq-1, the same for every batch entry
        placed = e.op("Gather", [positions, e.const(np.arange(seq, dtype=np.int64), "pos")],
                      axis=0)
    total = e.op("Add", [total, placed])
    if segments and segment_table:
        total = e.op("Add", [total, e.op("Gather", [segment_table, segments], axis=0)])
    centered, _, inv_std = _moments(e, total, [-1], float(attr(node, "epsilon", 1e-12)), False)
    e.op("Add", [e.op("Mul", [e.op("Mul", [centered, inv_std]), gamma]), beta],
         outputs=[node.output[0]])
    counted = _output(node, 1, used)
    if counted:
        if mask:
            ones = e.op("Cast", [mask], to=onnx.TensorProto.INT32)
            e.op("ReduceSum", [ones, e.const(np.array([1], np.int64), "axes")],
                 outputs=[counted], keepdims=0)
        else:  # onnxruntime gives 0 then (an Attention reading it masks every key alike)
            as_int = e.op("Cast", [ids], to=onnx.TensorProto.INT32)
            e.reduce("ReduceSum", e.op("Sub", [as_int, as_int]), [1], outputs=[counted],
                     keepdims=0)
    summed = _output(node, 2, used)
    if summed:
        e.op("Identity", [total], outputs=[summed])


def _skip_norm(e: Emitter, node, used: set) -> None:
    rms = node.op_type == "SkipSimplifiedLayerNormalization"
    total = e.op("Add", [node.input[0], node.input[1]])
    bias = _present(node, 3 if rms else 4)
    if bias:
        total = e.op("Add", [total, bias])
    _normalized(e, node, total, used, rms, [-1], (1, 2))
    summed = _output(node, 3, used)
    if summed:
        e.op("Identity", [total], outputs=[summed])


def _last_two_swapped(e: Emitter, x: str, rank: int | None, where: str) -> str:
    if rank is None:
        raise ModelError(f"{where}: the rank of its input is not known",
                         "fix the input shapes with --input-shape")
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    return e.op("Transpose", [x], perm=perm)


def _fused_matmul(e: Emitter, node, shapes: dict, where: str) -> None:
    if attr(node, "transBatchA", 0) or attr(node, "transBatchB", 0):
        raise _refusal(where, "transposes batch axes")
    a, b = node.input[0], node.input[1]
    if attr(node, "transA", 0):
        a = _last_two_swapped(e, a, len(shapes[a]) if a in shapes else None, where)
    if attr(node, "transB", 0):
        b = _last_two_swapped(e, b, len(shapes[b]) if b in shapes else None, where)
    alpha = float(attr(node, "alpha", 1.0))
    if alpha == 1.0:
        e.op("MatMul", [a, b], outputs=[node.output[0]])
    else:
        e.op("Mul", [e.op("MatMul", [a, b]), _f(e, alpha)], outputs=[node.output[0]])


def _known(shapes: dict, x: str, where: str, what: str) -> list:
    dims = shapes.get(x)
    if not dims or len(dims) != 3 or not all(isinstance(d, int) for d in dims[1:]):
        raise ModelError(f"{where}: its {what} needs a known shape [batch, sequence, hidden]",
                         "fix the input shapes with --input-shape")
    return dims


def _key_mask(e: Emitter, mask: str, shapes: dict, keys: int, masked: float, where: str) -> str:
    """What onnxruntime adds to the scores for a key mask, broadcast as [batch, 1, 1 or
    queries, keys]: `masked` where a key is masked (1/0 values, or each entry's key count)."""
    dims = shapes.get(mask)
    if not dims or len(dims) not in (1, 2, 3) or len(dims) > 1 and dims[-1] != keys:
        raise _refusal(where, "has a mask other than [batch] key counts, or [batch, keys] "
                       "or [batch, queries, keys] 1/0 values")
    if len(dims) == 1:  # each batch entry's number of keys (EmbedLayerNormalization's)
        counts = e.op("Cast", [e.op("Unsqueeze", [mask, e.const(np.array([1], np.int64),
                                                                  "axes")])],
                      to=onnx.TensorProto.INT32)
        positions = e.const(np.arange(keys, dtype=np.int32)[None], "positions")
        keep = e.op("Cast", [e.op("Less", [positions, counts])], to=onnx.TensorProto.FLOAT)
        dims = [dims[0], keys]
    else:
        keep = e.op("Cast", [mask], to=onnx.TensorProto.FLOAT)
    penalty = e.op("Mul", [e.op("Sub", [_f(e, 1.0), keep]), _f(e, masked)])
    axes = [1, 2] if len(dims) == 2 else [1]
    return e.op("Unsqueeze", [penalty, e.const(np.array(axes, np.int64), "axes")])


def _attend(e: Emitter, node, q: str, k: str, v: str, dims: tuple, heads: int, shapes: dict,
            biases: list[str], mask: str, where: str) -> None:
    """softmax(Q·Kᵀ·scale + biases + mask)·V over `heads`, as onnxruntime's Attention and
    MultiHeadAttention compute it; `dims` are the [batch, sequence, hidden] of Q, K and V."""
    (batch, queries, q_width), (_, keys, k_width), (_, _, v_width) = dims
    q, q_dims = heads_of(e, q, [batch, queries, q_width], heads, where)
    k, _ = heads_of(e, k, [batch, keys, k_width], heads, where)
    v, _ = heads_of(e, v, [batch, keys, v_width], heads, where)
    scale = attr(node, "scale")
    scale = float(scale) if scale else 1.0 / np.sqrt(q_dims[3])
    scores = e.op("Mul", [e.op("MatMul", [q, e.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                          _f(e, scale)])
    # onnxruntime adds this (finite) value where a key is masked: a row with every key masked
    # is a softmax of the raw scores, not zeros
    masked = float(attr(node, "mask_filter_value", -10000.0))
    for bias in biases:
        scores = e.op("Add", [scores, bias])
    if mask:
        scores = e.op("Add", [scores, _key_mask(e, mask, shapes, keys, masked, where)])
    if attr(node, "unidirectional", 0):
        later = np.arange(keys)[None, :] > np.arange(queries)[:, None]
        scores = e.op("Add", [scores, e.const(np.where(later, masked, 0).astype(np.float32),
                                              "causal")])
    out = e.op("MatMul", [e.op("Softmax", [scores], axis=-1), v])
    e.op("Reshape", [e.op("Transpose", [out], perm=[0, 2, 1, 3]),
                     e.const(np.array([0, 0, -1], np.int64), "shape")], outputs=[node.output[0]])


def _attention(e: Emitter, node, shapes: dict, used: set, where: str) -> None:
    """com.microsoft Attention: Q, K and V projected from one input by one weight matrix."""
    inputs = list(node.input) + [""] * (8 - len(node.input))
    if any(inputs[4:]) or _output(node, 1, used):
        raise _refusal(where, "has a past state, an attention bias or its present output used")
    for name in ("do_rotary", "past_present_share_buffer"):
        if attr(node, name, 0):
            raise _refusal(where, f"sets {name}")
    x, weights, bias, mask = inputs[:4]
    dims = _known(shapes, x, where, "input")
    sizes = list(attr(node, "qkv_hidden_sizes", []) or [])
    if not sizes:
        w_dims = shapes.get(weights)
        if not w_dims or w_dims[-1] % 3:
            raise _refusal(where, "has weights of unknown width")
        sizes = [w_dims[-1] // 3] * 3
    projected = e.op("MatMul", [x, weights])
    if bias:
        projected = e.op("Add", [projected, bias])
    q, k, v = e.split(projected, sizes, -1, "qkv")
    _attend(e, node, q, k, v, tuple([dims[0], dims[1], size] for size in sizes),
            int(attr(node, "num_heads")), shapes, [], mask, where)


def _multi_head_attention(e: Emitter, node, shapes: dict, used: set, where: str) -> None:
    """com.microsoft MultiHeadAttention: Q, K and V given (projected), each [batch, sequence,
    hidden], with one bias for the three, a key padding mask and an additive attention bias."""
    inputs = list(node.input) + [""] * (10 - len(node.input))
    if any(inputs[6:]) or any(_output(node, i, used) for i in (1, 2, 3)):
        raise _refusal(where, "has a past state or its present or qk outputs used")
    q, k, v, bias, mask, attention_bias = inputs[:6]
    if not k or not v:
        raise _refusal(where, "has packed query, key and value")
    dims = tuple(_known(shapes, t, where, what) for t, what in ((q, "query"), (k, "key"),
                                                                 (v, "value")))
    if bias:
        q_bias, k_bias, v_bias = e.split(bias, [dims[0][2], dims[1][2], dims[2][2]], 0, "bias")
        q, k, v = (e.op("Add", [t, b]) for t, b in ((q, q_bias), (k, k_bias), (v, v_bias)))
    _attend(e, node, q, k, v, dims, int(attr(node, "num_heads")), shapes,
            [attention_bias] if attention_bias else [], mask, where)


def rewrite_node(e: Emitter, node: onnx.NodeProto, shapes: dict, types: dict, used: set,
                 where: str) -> None:
    op, out = node.op_type, node.output[0]
    if op in ("Gelu", "BiasGelu"):
        x = e.op("Add", node.input[:2]) if op == "BiasGelu" else node.input[0]
        _gelu(e, x, out)
    elif op == "FastGelu":
        bias = _present(node, 1)
        _fast_gelu(e, e.op("Add", [node.input[0], bias]) if bias else node.input[0], out)
    elif op == "QuickGelu":
        alpha = float(attr(node, "alpha", 1.702))
        e.op("Mul", [node.input[0], e.op("Sigmoid", [e.op("Mul", [node.input[0],
                                                                  _f(e, alpha)])])],
             outputs=[out])
    elif op == "EmbedLayerNormalization":
        _embed_norm(e, node, shapes, used, where)
    elif op in ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization"):
        _skip_norm(e, node, used)
    elif op == "SimplifiedLayerNormalization":
        axis = int(attr(node, "axis", -1))
        rank = len(shapes.get(node.input[0]) or [])
        if axis != -1 and not rank:
            raise ModelError(f"{where}: the rank of its input is not known",
                             "fix the input shapes with --input-shape")
        axes = [-1] if axis in (-1, rank - 1) else list(range(axis % rank, rank))
        _normalized(e, node, node.input[0], used, True, axes, (-1, 1))
    elif op == "FusedMatMul":
        _fused_matmul(e, node, shapes, where)
    elif op == "MultiHeadAttention":
        _multi_head_attention(e, node, shapes, used, where)
    else:
        _attention(e, node, shapes, used, where)
