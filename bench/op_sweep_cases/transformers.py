"""A transformer's export idioms as PyTorch writes them (stop 77): heads split by Reshape and
Transpose, scaled scores, causal and padding masks built from the input, rotary embeddings by
hand, grouped-query heads expanded, poolings. x is [N, 6, 16]: 6 tokens of 16 features, 4
heads of 4; a second input, where there is one, is a mask or a past (the sweep's integer
inputs are 1 to 5: a mask's "length" is clamped to the sequence's)."""
# ruff: noqa: E501 (one case per line reads best)

import numpy as np
from onnx import TensorProto

from .common import I64, F, N, c, case, case_io, f32, group, i64, io, w  # noqa: F401

group("transformers")

X = ["N", 6, 16]
B = TensorProto.BOOL
HEADS = [i64("heads", [0, 0, 4, 4]), i64("merge", [0, 0, 16])]
QKV = [w("wq", 16, 16), w("wk", 16, 16), w("wv", 16, 16), f32("scale", 0.5)]


def split_heads(src, out):
    """[N, 6, 16] -> [N, 4, 6, 4]"""
    return [N("Reshape", [src, "heads"], [out + "_r"]), N("Transpose", [out + "_r"], [out], perm=[0, 2, 1, 3])]


def projections():
    return [N("MatMul", ["x", "wq"], ["q0"]), N("MatMul", ["x", "wk"], ["k0"]), N("MatMul", ["x", "wv"], ["v0"]),
            *split_heads("q0", "q"), *split_heads("k0", "k"), *split_heads("v0", "v")]


def attend(scores_nodes, out="y"):
    """scores (from `scores_nodes`, ending in "s") -> softmax -> @ v -> heads merged into `out`."""
    return [*scores_nodes, N("Softmax", ["s"], ["p"], axis=-1), N("MatMul", ["p", "v"], ["o"]),
            N("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), N("Reshape", ["ot", "merge"], [out])]


SCORES = [N("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), N("MatMul", ["q", "kt"], ["qk"]), N("Mul", ["qk", "scale"], ["s0"])]
case("self-attention, heads by Reshape and Transpose", projections() + attend(SCORES + [N("Identity", ["s0"], ["s"])]), X, HEADS + QKV, 14)
case("scores divided by sqrt(d)", projections() + attend([N("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), N("MatMul", ["q", "kt"], ["qk"]), N("Div", ["qk", "two"], ["s"])]), X, HEADS + QKV + [f32("two", 2.0)], 14)
# causal: a lower-triangular mask of the sequence's own length (Shape -> Gather -> ConstantOfShape -> Trilu)
CAUSAL = [N("Shape", ["x"], ["xs"]), N("Gather", ["xs", "one"], ["len"]), N("Concat", ["len1", "len1"], ["sq"], axis=0),
          N("Unsqueeze", ["len", "zero_ax"], ["len1"]), N("ConstantOfShape", ["sq"], ["ones"], value=c("v", [1.0], np.float32)),
          N("Trilu", ["ones"], ["tri"], upper=0), N("Equal", ["tri", "zero_f"], ["masked"])]
CAUSAL_INITS = [i64("one", 1), i64("zero_ax", [0]), f32("zero_f", 0.0), f32("neg", -1e9)]
case("causal mask from the sequence's length, Where -1e9", projections() + attend(SCORES + CAUSAL + [N("Where", ["masked", "neg", "s0"], ["s"])]), X, HEADS + QKV + CAUSAL_INITS, 14)
case("causal mask as an added -inf bias", projections() + attend(SCORES + [N("Add", ["s0", "bias"], ["s"])]), X, HEADS + QKV + [f32("bias", np.triu(np.full((6, 6), -np.inf), 1))], 14)
# padding: tokens whose features are all below zero count as padding (a mask computed per sample)
PAD = [N("ReduceMax", ["x"], ["mx"], axes=[2], keepdims=0), N("Greater", ["mx", "zero_f"], ["keep"]), N("Unsqueeze", ["keep", "ax12"], ["keep4"]),
       N("Not", ["keep4"], ["pad4"])]
case("key padding mask computed per sample, Where -1e4", projections() + attend(SCORES + PAD + [N("Where", ["pad4", "neg4", "s0"], ["s"])]), X, HEADS + QKV + [f32("zero_f", 0.0), i64("ax12", [1, 2]), f32("neg4", -1e4)], 14)
case_io("attention mask as a second input (HF's extended mask)", projections() + attend(SCORES + [N("Unsqueeze", ["mask", "ax12"], ["m4"]), N("Cast", ["m4"], ["mf"], to=F), N("Sub", ["one_f", "mf"], ["inv"]), N("Mul", ["inv", "neg4"], ["mb"]), N("Add", ["s0", "mb"], ["s"])]),
        [io("x", F, X), io("mask", I64, ["N", 6])], [io("y", F, ["N", 6, 16])], HEADS + QKV + [i64("ax12", [1, 2]), f32("one_f", 1.0), f32("neg4", -1e4)], 14)
# rotary embedding by hand: halves rotated (x1, x2) -> (-x2, x1), constant cos / sin tables
ang = np.outer(np.arange(6), 1.0 / 10000 ** (np.arange(2) / 2))
COS, SIN = np.concatenate([np.cos(ang)] * 2, -1), np.concatenate([np.sin(ang)] * 2, -1)


def rotate(src, out):
    return [N("Slice", [src, "h0", "h2", "ax3"], [src + "_a"]), N("Slice", [src, "h2", "h4", "ax3"], [src + "_b"]), N("Neg", [src + "_b"], [src + "_nb"]),
            N("Concat", [src + "_nb", src + "_a"], [src + "_rot"], axis=-1), N("Mul", [src, "cos"], [src + "_c"]), N("Mul", [src + "_rot", "sin"], [src + "_s"]),
            N("Add", [src + "_c", src + "_s"], [out])]


ROPE_INITS = [i64("h0", [0]), i64("h2", [2]), i64("h4", [4]), i64("ax3", [3]), f32("cos", COS), f32("sin", SIN)]
case("rotary embedding by hand (halves rotated)", projections() + rotate("q", "qr") + rotate("k", "kr") + attend([N("Transpose", ["kr"], ["kt"], perm=[0, 1, 3, 2]), N("MatMul", ["qr", "kt"], ["qk"]), N("Mul", ["qk", "scale"], ["s"])]), X, HEADS + QKV + ROPE_INITS, 14)
# grouped-query attention: 2 key/value heads, each expanded to 2 query heads
GQA_INITS = [w("wq", 16, 16), w("wk2", 16, 8), w("wv2", 16, 8), f32("scale", 0.5), i64("kvheads", [0, 0, 2, 4]), i64("rep", [1, 2, 2, 6, 4]), i64("ax2", [2]), i64("to4", [0, 4, 6, 4]), *HEADS]
case("grouped-query heads by Unsqueeze, Expand, Reshape", [N("MatMul", ["x", "wq"], ["q0"]), *split_heads("q0", "q"), N("MatMul", ["x", "wk2"], ["k0"]), N("MatMul", ["x", "wv2"], ["v0"]),
     N("Reshape", ["k0", "kvheads"], ["k1"]), N("Transpose", ["k1"], ["k2"], perm=[0, 2, 1, 3]), N("Unsqueeze", ["k2", "ax2"], ["k3"]), N("Expand", ["k3", "rep"], ["k4"]), N("Reshape", ["k4", "to4"], ["k"]),
     N("Reshape", ["v0", "kvheads"], ["v1"]), N("Transpose", ["v1"], ["v2"], perm=[0, 2, 1, 3]), N("Unsqueeze", ["v2", "ax2"], ["v3"]), N("Expand", ["v3", "rep"], ["v4"]), N("Reshape", ["v4", "to4"], ["v"])]
     + attend(SCORES + [N("Identity", ["s0"], ["s"])]), X, GQA_INITS, 14)
# a past key / value concatenated (a decoder step's cache as inputs)
case_io("past keys and values concatenated", projections() + [N("Concat", ["pk", "k"], ["kk"], axis=2), N("Concat", ["pv", "v"], ["vv"], axis=2), N("Transpose", ["kk"], ["kt"], perm=[0, 1, 3, 2]), N("MatMul", ["q", "kt"], ["qk"]), N("Mul", ["qk", "scale"], ["s"]),
        N("Softmax", ["s"], ["p"], axis=-1), N("MatMul", ["p", "vv"], ["o"]), N("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), N("Reshape", ["ot", "merge"], ["y"])],
        [io("x", F, X), io("pk", F, ["N", 4, 3, 4]), io("pv", F, ["N", 4, 3, 4])], [io("y", F, ["N", 6, 16])], HEADS + QKV, 14)
# q, k, v from one projection split in three (opset 18's num_outputs)
case("fused qkv projection split (num_outputs)", [N("MatMul", ["x", "wqkv"], ["qkv"]), N("Split", ["qkv"], ["q0", "k0", "v0"], axis=-1, num_outputs=3), *split_heads("q0", "q"), *split_heads("k0", "k"), *split_heads("v0", "v")]
     + attend(SCORES + [N("Identity", ["s0"], ["s"])]), X, HEADS + [w("wqkv", 16, 48), f32("scale", 0.5)], 18)
# the blocks around attention
case("GELU by erf, as exported", [N("Div", ["x", "sqrt2"], ["d"]), N("Erf", ["d"], ["e"]), N("Add", ["e", "one_f"], ["e1"]), N("Mul", ["x", "e1"], ["m"]), N("Mul", ["m", "half"])], X, [f32("sqrt2", np.sqrt(2)), f32("one_f", 1.0), f32("half", 0.5)], 14)
case("RMSNorm by hand (Pow, ReduceMean, Sqrt, Reciprocal)", [N("Pow", ["x", "two"], ["p"]), N("ReduceMean", ["p"], ["m"], axes=[-1], keepdims=1), N("Add", ["m", "eps"], ["me"]), N("Sqrt", ["me"], ["r"]), N("Reciprocal", ["r"], ["ir"]), N("Mul", ["x", "ir"], ["n"]), N("Mul", ["n", "g"])], X, [f32("two", 2.0), f32("eps", 1e-6), w("g", 16)], 14)
case("LayerNorm by hand (T5-style variance)", [N("ReduceMean", ["x"], ["mu"], axes=[-1]), N("Sub", ["x", "mu"], ["d"]), N("Pow", ["d", "two"], ["d2"]), N("ReduceMean", ["d2"], ["v"], axes=[-1]), N("Add", ["v", "eps"], ["ve"]), N("Sqrt", ["ve"], ["sd"]), N("Div", ["d", "sd"], ["n"]), N("Mul", ["n", "g"], ["ng"]), N("Add", ["ng", "b"])], X, [f32("two", 2.0), f32("eps", 1e-5), w("g", 16), w("b", 16)], 14)
case("LayerNormalization without bias, then a residual", [N("LayerNormalization", ["x", "g"], ["n"], axis=-1, epsilon=1e-5), N("MatMul", ["n", "wf"], ["f"]), N("Add", ["x", "f"])], X, [w("g", 16), w("wf", 16, 16)], 17)
case("SwiGLU feed-forward", [N("MatMul", ["x", "w1"], ["a"]), N("MatMul", ["x", "w3"], ["b"]), N("Sigmoid", ["a"], ["sa"]), N("Mul", ["a", "sa"], ["silu"]), N("Mul", ["silu", "b"], ["h"]), N("MatMul", ["h", "w2"])], X, [w("w1", 16, 24), w("w3", 16, 24), w("w2", 24, 16)], 14)
case("position ids by Range over the length, embedded", [N("Shape", ["x"], ["xs"]), N("Gather", ["xs", "one"], ["len"]), N("Range", ["zero", "len", "one"], ["pos"]), N("Gather", ["table", "pos"], ["pe"]), N("Add", ["x", "pe"])], X, [i64("one", 1), i64("zero", 0), w("table", 10, 16)], 14)
# poolings
case("CLS token (Gather index 0 on axis 1)", [N("Gather", ["x", "zero"], ["cls"], axis=1), N("MatMul", ["cls", "wc"])], X, [i64("zero", 0), w("wc", 16, 3)], 14)
case_io("mean pooling under an attention mask", [N("Cast", ["mask"], ["mf"], to=F), N("Unsqueeze", ["mf", "ax2"], ["m3"]), N("Mul", ["x", "m3"], ["xm"]), N("ReduceSum", ["xm", "ax1"], ["s"], keepdims=0), N("ReduceSum", ["m3", "ax1"], ["cnt"], keepdims=0), N("Max", ["cnt", "tiny"], ["cn"]), N("Div", ["s", "cn"], ["y"])],
        [io("x", F, X), io("mask", I64, ["N", 6])], [io("y", F, ["N", 16])], [i64("ax2", [2]), i64("ax1", [1]), f32("tiny", 1e-9)], 14)
case_io("last real token by the mask's length (GatherElements)", [N("ReduceSum", ["mask", "ax1"], ["len"], keepdims=1), N("Sub", ["len", "one"], ["last"]), N("Max", ["last", "zero"], ["l0"]), N("Min", ["l0", "five"], ["lz"]), N("Unsqueeze", ["lz", "ax2"], ["l3"]), N("Expand", ["l3", "shp"], ["idx"]), N("GatherElements", ["x", "idx"], ["g"], axis=1), N("Squeeze", ["g", "ax1"], ["y"])],
        [io("x", F, X), io("mask", I64, ["N", 6])], [io("y", F, ["N", 16])], [i64("ax1", [1]), i64("ax2", [2]), i64("one", 1), i64("zero", 0), i64("five", 5), i64("shp", [1, 1, 16])], 14)
case("L2-normalized embedding (ReduceL2, Div)", [N("ReduceMean", ["x"], ["m"], axes=[1], keepdims=0), N("ReduceL2", ["m"], ["l2"], axes=[-1], keepdims=1), N("Max", ["l2", "tiny"], ["l"]), N("Div", ["m", "l"])], X, [f32("tiny", 1e-12)], 14)
case("logits of the last position, log-softmax over a vocabulary", [N("Gather", ["x", "last"], ["h"], axis=1), N("MatMul", ["h", "wv"], ["lg"]), N("LogSoftmax", ["lg"], axis=-1)], X, [i64("last", -1), w("wv", 16, 50)], 14)
