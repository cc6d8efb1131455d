"""ONNX's `Attention` (opset 23: what PyTorch's exporter writes for
scaled_dot_product_attention) as MatMul, Softmax and masking arithmetic.

TVM 0.27's importer maps `Attention` to onnxruntime's com.microsoft operator of that name, whose
attributes differ, and fails ("'num_heads'"). The ONNX definition, as onnx's reference
implementation computes it: heads split from 3-D inputs, grouped-query heads repeated, scores
Q·Kᵀ·scale (scale 1/√head_size unless given), softcap, a bias from `attn_mask` (boolean: -inf
where False) and `is_causal`, softmax (a row with no key to attend gives zeros), times V.
Caches (`past_key`, `nonpad_kv_seqlen`), the extra outputs and sliding windows are refused by
name.
"""

from __future__ import annotations

import numpy as np
import onnx

from cw.compile.emit import Emitter, attr
from cw.errors import ModelError


def is_rewritten(node: onnx.NodeProto, opset: int) -> bool:
    return node.op_type == "Attention" and node.domain in ("", "ai.onnx") and opset >= 23


def _refusal(where: str, what: str) -> ModelError:
    return ModelError(f"{where} {what}: cw rewrites attention without caches",
                      "export the model without a key/value cache and with Y its only output")


def heads_of(e: Emitter, x: str, dims: list, heads: int | None, where: str) -> tuple[str, list]:
    """[B, heads, S, d] from a 4-D input as it is, or from a 3-D one [B, S, heads * d]."""
    if len(dims) == 4:
        return x, dims
    if not heads or not isinstance(dims[2], int) or dims[2] % heads:
        raise ModelError(f"{where}: a 3-D input of {dims[2]} features does not split into "
                         f"{heads} heads", "give q_num_heads and kv_num_heads that divide them")
    split = e.op("Reshape", [x, e.const(np.array([0, 0, heads, dims[2] // heads], np.int64),
                                        "shape")])
    return e.op("Transpose", [split], perm=[0, 2, 1, 3]), [dims[0], heads, dims[1],
                                                             dims[2] // heads]


# A masked score: -inf in ONNX's definition, finite here. TVM's max reductions start from the
# lowest finite float, so a row of -inf has the maximum -3.4e38, not -inf: a guard testing for
# -inf missed the row and softmax's NaN came through. With this value a masked row's softmax is
# finite, and its maximum is exactly this.
_MASKED = -1e30


def _causal_bias(q_len: int, kv_len: int) -> np.ndarray:
    allowed = np.arange(kv_len)[None, :] <= np.arange(q_len)[:, None]
    return np.where(allowed, np.float32(0), np.float32(-np.inf)).astype(np.float32)


def rewrite_node(e: Emitter, node: onnx.NodeProto, shapes: dict, types: dict, used: set,
                 where: str) -> None:
    inputs = list(node.input) + [""] * (7 - len(node.input))
    if any(inputs[4:]):
        raise _refusal(where, "has a key/value cache input")
    if any(o in used for o in node.output[1:] if o):
        raise _refusal(where, "has its present_key, present_value or qk_matmul_output used")
    for name in ("left_window_size", "right_window_size"):
        if attr(node, name, -1) != -1:
            raise _refusal(where, f"has a sliding window ({name})")
    q, k, v, mask = inputs[:4]
    dims = [shapes.get(t) for t in (q, k, v)]
    if any(d is None or len(d) not in (3, 4) or not all(isinstance(x, int) for x in d[1:])
           for d in dims) or len({len(d) for d in dims}) != 1:
        raise ModelError(f"{where}: Q, K and V need known shapes of rank 3 or 4",
                         "fix the input shapes with --input-shape")
    if types.get(q, onnx.TensorProto.FLOAT) != onnx.TensorProto.FLOAT:
        raise ModelError(f"{where} is not float32: cw rewrites float32 attention only",
                         "export the model in float32")
    q_heads, kv_heads = attr(node, "q_num_heads"), attr(node, "kv_num_heads")
    q, q_dims = heads_of(e, q, dims[0], q_heads, where)
    k, k_dims = heads_of(e, k, dims[1], kv_heads, where)
    v, v_dims = heads_of(e, v, dims[2], kv_heads, where)
    hq, hkv = q_dims[1], k_dims[1]
    if hq != hkv:
        if hq % hkv or v_dims[1] != hkv:
            raise ModelError(f"{where}: {hq} query heads cannot share {hkv} key/value heads",
                             "export heads in a whole multiple")
        group = hq // hkv  # each key/value head serves `group` query heads in a row

        def repeated(t: str, d: list) -> str:
            wide = e.op("Tile", [e.op("Unsqueeze", [t, e.const(np.array([2], np.int64), "axes")]),
                                 e.const(np.array([1, 1, group, 1, 1], np.int64), "repeats")])
            return e.op("Reshape", [wide, e.const(np.array([0, hq, d[2], d[3]], np.int64),
                                                  "shape")])
        k, v = repeated(k, k_dims), repeated(v, v_dims)
    scale = attr(node, "scale")
    scale = float(scale) if scale is not None else 1.0 / np.sqrt(q_dims[3])
    scores = e.op("Mul", [e.op("MatMul", [q, e.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                          e.const(np.float32(scale), "scale")])
    softcap = float(attr(node, "softcap", 0.0) or 0.0)
    if softcap > 0:
        cap = e.const(np.float32(softcap), "softcap")
        scores = e.op("Mul", [e.op("Tanh", [e.op("Div", [scores, cap])]), cap])
    q_len, kv_len = q_dims[2], k_dims[2]
    causal = _causal_bias(q_len, kv_len) if attr(node, "is_causal", 0) else None
    bias, guard = None, False
    masked = e.const(np.float32(_MASKED), "masked")
    if mask:
        mask_dims = shapes.get(mask)
        if not mask_dims or mask_dims[-1] != kv_len:
            raise ModelError(f"{where}: its attn_mask does not cover the {kv_len} keys",
                             "export a mask as long as the key sequence")
        value = e.constant(mask)
        if value is not None:  # a constant mask: the whole bias computed here
            if value.dtype == np.bool_:
                value = np.where(value, np.float32(0), np.float32(-np.inf))
            value = value.astype(np.float32) + (causal if causal is not None else 0)
            guard = bool((value.max(axis=-1) <= _MASKED).any())
            bias = e.const(np.maximum(value, _MASKED).astype(np.float32), "bias")
        else:
            bias = mask
            if types.get(mask) == onnx.TensorProto.BOOL:
                bias = e.op("Where", [mask, e.const(np.float32(0), "zero"), masked])
            if causal is not None:
                bias = e.op("Add", [bias, e.const(np.maximum(causal, _MASKED), "causal")])
            bias = e.op("Max", [bias, masked])
            guard = True  # which rows it masks whole is known only when the model runs
    elif causal is not None:  # every query attends its first key: no guard
        bias = e.const(np.maximum(causal, _MASKED), "causal")
    if bias is not None:
        scores = e.op("Add", [scores, bias])
    weights = e.op("Softmax", [scores], axis=-1)
    if guard:  # a row with every key masked: zeros, as ONNX defines it
        row_max = e.reduce("ReduceMax", bias, [-1])
        empty = e.op("Not", [e.op("Greater", [row_max, masked])])
        weights = e.op("Where", [empty, e.const(np.float32(0), "zero"), weights])
    if len(dims[0]) == 4:
        e.op("MatMul", [weights, v], outputs=[node.output[0]])
        return
    heads_out = e.op("Transpose", [e.op("MatMul", [weights, v])], perm=[0, 2, 1, 3])
    e.op("Reshape", [heads_out, e.const(np.array([0, 0, -1], np.int64), "shape")],
         outputs=[node.output[0]])


def rotary_node(e: Emitter, node: onnx.NodeProto, shapes: dict, where: str) -> None:
    """ONNX's RotaryEmbedding (opset 23): each head's first `rotary_embedding_dim` features
    taken as pairs (the two halves, or neighbours where `interleaved`) and turned by the angle
    whose cosine and sine the caches hold for the token's position."""
    x, cos, sin = node.input[:3]
    positions = node.input[3] if len(node.input) > 3 else ""
    dims = shapes.get(x)
    if not dims or len(dims) not in (3, 4) or not all(isinstance(d, int) for d in dims[1:]):
        raise ModelError(f"{where}: its input needs a known shape of rank 3 or 4",
                         "fix the input shapes with --input-shape")
    if len(dims) == 3:  # [B, S, heads * d] as [B, S, heads, d]
        heads = int(attr(node, "num_heads", 0) or 0)
        if not heads or dims[2] % heads:
            raise ModelError(f"{where}: {dims[2]} features do not split into num_heads={heads}",
                             "give num_heads for a 3-D input")
        head = dims[2] // heads
        x = e.op("Reshape", [x, e.const(np.array([0, 0, heads, head], np.int64), "shape")])
        head_axis = 2  # where the caches' values broadcast over the heads
    else:
        head, head_axis = dims[3], 1
    rotated = int(attr(node, "rotary_embedding_dim", 0) or 0) or head
    half = rotated // 2
    if positions:  # the caches hold every position: each token's rows picked
        cos, sin = (e.op("Gather", [t, positions], axis=0) for t in (cos, sin))
    # [B, S, half] -> beside each head
    cos, sin = (e.op("Unsqueeze", [t, e.const(np.array([head_axis], np.int64), "axes")])
                for t in (cos, sin))
    kept = None
    if rotated < head:
        x, kept = e.split(x, [rotated, head - rotated], -1, "rot")
    interleaved = bool(attr(node, "interleaved", 0))
    if interleaved:  # pairs of neighbours: [..., half, 2]
        pairs = e.op("Reshape", [x, e.const(np.array([0, 0, 0, half, 2], np.int64), "shape")])
        first, second = e.split(pairs, [1, 1], -1, "pair")
        cos, sin = (e.op("Unsqueeze", [t, e.const(np.array([-1], np.int64), "axes")])
                    for t in (cos, sin))
    else:
        first, second = e.split(x, [half, half], -1, "half")
    real = e.op("Sub", [e.op("Mul", [cos, first]), e.op("Mul", [sin, second])])
    imaginary = e.op("Add", [e.op("Mul", [sin, first]), e.op("Mul", [cos, second])])
    turned = e.op("Concat", [real, imaginary], axis=-1)
    if interleaved:
        turned = e.op("Reshape", [turned, e.const(np.array([0, 0, 0, rotated], np.int64),
                                                  "shape")])
    if kept is not None:
        turned = e.op("Concat", [turned, kept], axis=-1)
    if len(dims) == 3:
        e.op("Reshape", [turned, e.const(np.array([0, 0, -1], np.int64), "shape")],
             outputs=[node.output[0]])
    else:
        e.op("Identity", [turned], outputs=[node.output[0]])
