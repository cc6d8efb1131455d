"""BERT encoders (Devlin et al. 2019) as Hugging Face's BertForSequenceClassification exports
them at inference: token ids in, word and position embeddings, post-LayerNorm encoder layers
(multi-head self-attention, a GELU feed-forward), the [CLS] pooler and a 2-way classifier.

One input (token ids, int64, a fixed sequence length): every sequence is padded to it, so the
model is a static DNN with one execution time per batch size, which is what cw serves.
Attention masks and token types are left out (a serving system pads to the length either way).
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from .builder import GraphBuilder


def _linear(g: GraphBuilder, x: str, name: str, fin: int, fout: int) -> str:
    """x @ W + b with W stored fin x fout (how PyTorch exports a Linear on 3-D input)."""
    bound = 1.0 / math.sqrt(fin)
    w = g.weight(f"{name}.weight", (fin, fout), -bound, bound)
    b = g.weight(f"{name}.bias", (fout,), -bound, bound)
    return g.node("Add", [g.node("MatMul", [x, w], prefix=name), b])


def _layer_norm(g: GraphBuilder, x: str, name: str, hidden: int) -> str:
    gamma = g.weight(f"{name}.weight", (hidden,), 0.9, 1.1)
    beta = g.weight(f"{name}.bias", (hidden,), -0.05, 0.05)
    return g.node("LayerNormalization", [x, gamma, beta], prefix=name, axis=-1, epsilon=1e-12)


def _gelu(g: GraphBuilder, x: str) -> str:
    """The exact GELU, x/2 (1 + erf(x / sqrt 2)), as PyTorch exports it before opset 20."""
    scaled = g.node("Div", [x, g.constant(g._fresh("sqrt2"), np.array(math.sqrt(2), np.float32))])
    one = g.node("Add", [g.node("Erf", [scaled]), g.constant(g._fresh("one"),
                                                              np.array(1, np.float32))])
    return g.node("Mul", [g.node("Mul", [x, one]),
                          g.constant(g._fresh("half"), np.array(0.5, np.float32))])


def _attention(g: GraphBuilder, x: str, name: str, seq: int, hidden: int, heads: int) -> str:
    head = hidden // heads
    split = g.constant(f"{name}.split_shape", np.array([0, seq, heads, head], np.int64))
    merge = g.constant(f"{name}.merge_shape", np.array([0, seq, hidden], np.int64))

    def heads_of(t: str, perm: list[int]) -> str:  # [N, S, H] -> [N, heads, S, d] (or K^T)
        return g.node("Transpose", [g.node("Reshape", [t, split])], perm=perm)

    q = heads_of(_linear(g, x, f"{name}.query", hidden, hidden), [0, 2, 1, 3])
    k = heads_of(_linear(g, x, f"{name}.key", hidden, hidden), [0, 2, 3, 1])
    v = heads_of(_linear(g, x, f"{name}.value", hidden, hidden), [0, 2, 1, 3])
    scale = g.constant(f"{name}.scale", np.array(math.sqrt(head), np.float32))
    scores = g.node("Div", [g.node("MatMul", [q, k]), scale])
    probs = g.node("Softmax", [scores], axis=-1)
    context = g.node("Transpose", [g.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    return _linear(g, g.node("Reshape", [context, merge]), f"{name}.output", hidden, hidden)


def bert(layers: int, hidden: int, heads: int, seq: int, vocab: int, name: str,
         batch: int | None = None):
    g = GraphBuilder(name)
    words = g.weight("embeddings.word", (vocab, hidden), -0.1, 0.1)
    positions = g.weight("embeddings.position", (seq, hidden), -0.1, 0.1)
    x = g.node("Add", [g.node("Gather", [words, "input_ids"], axis=0), positions])
    x = _layer_norm(g, x, "embeddings.norm", hidden)
    for i in range(layers):
        p = f"layer{i}"
        x = _layer_norm(g, g.node("Add", [_attention(g, x, f"{p}.attention", seq, hidden, heads),
                                          x]), f"{p}.attention.norm", hidden)
        y = _gelu(g, _linear(g, x, f"{p}.intermediate", hidden, 4 * hidden))
        x = _layer_norm(g, g.node("Add", [_linear(g, y, f"{p}.output", 4 * hidden, hidden), x]),
                        f"{p}.output.norm", hidden)
    first = g.node("Gather", [x, g.constant("cls_index", np.array(0, np.int64))], axis=1)
    pooled = g.node("Tanh", [g.gemm(first, "pooler", hidden, hidden)])
    y = g.gemm(pooled, "classifier", hidden, 2)
    return g.finish("input_ids", (seq,), y, (2,), batch, input_dtype=TensorProto.INT64)
