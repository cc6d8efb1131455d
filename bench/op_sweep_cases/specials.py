"""Masked softmaxes, ±inf and NaN, sequences, shapes computed from the batch (stop 74)."""
# ruff: noqa: E501 (one case per line reads best)

import numpy as np  # noqa: F401
from onnx import TensorProto  # noqa: F401

from .common import I64, X3, X4, F, N, c, case, f32, group, i64, known, w  # noqa: F401

group("specials")

NINF = float("-inf")
def masked(fill, op="Softmax", axis=-1, opset=13, extra=()):
    return ([N("Greater", ["x", "one"], ["g"]), N("Where", ["g", "fill", "x"], ["xm"]), N(op, ["xm"], axis=axis, **dict(extra))],
            X4, [f32("one", 0.5), f32("fill", fill)], opset)
for fill in (NINF, -1e9, -3.4028234663852886e38):
    for op in ("Softmax", "LogSoftmax"):
        nodes, xs, inits, opset = masked(fill, op)
        case(f"{op} masked {fill}", nodes, xs, inits, opset)
case("Softmax all masked row -inf", [N("Where", ["t", "fill", "x"], ["xm"]), N("Softmax", ["xm"], axis=-1)], X4, [c("t", np.array([True] * 6), bool), f32("fill", -1e9)], 13)
for op in ("Exp", "Sigmoid", "Tanh", "Erf", "Softplus", "Log", "Sqrt", "Relu", "Gelu", "HardSigmoid", "Elu", "Selu", "Mish", "Softsign"):
    # specials: x / 0 gives ±inf, 0/0 NaN where x == 0 (none), so ±inf and the finite rest
    opset = 20 if op == "Gelu" else 18
    case(f"{op} of ±inf", [N("Greater", ["x", "one"], ["g"]), N("Less", ["x", "mone"], ["l"]), N("Where", ["g", "pinf", "x"], ["a"]), N("Where", ["l", "ninf", "a"], ["b"]), N(op, ["b"])],
         X4, [f32("one", 1.0), f32("mone", -1.0), f32("pinf", float("inf")), f32("ninf", NINF)], opset)
case("Exp of NaN", [N("Greater", ["x", "one"], ["g"]), N("Where", ["g", "nan", "x"], ["a"]), N("Exp", ["a"])], X4, [f32("one", 1.0), f32("nan", float("nan"))], 13)
case("Sigmoid of NaN", [N("Greater", ["x", "one"], ["g"]), N("Where", ["g", "nan", "x"], ["a"]), N("Sigmoid", ["a"])], X4, [f32("one", 1.0), f32("nan", float("nan"))], 13)
case("Tanh of NaN", [N("Greater", ["x", "one"], ["g"]), N("Where", ["g", "nan", "x"], ["a"]), N("Tanh", ["a"])], X4, [f32("one", 1.0), f32("nan", float("nan"))], 13)
case("Log of 0 and negative", [N("Log", ["x"])], X4, (), 13)
case("Div by zero", [N("Greater", ["x", "one"], ["g"]), N("Where", ["g", "zero", "x"], ["d"]), N("Div", ["x", "d"])], X4, [f32("one", 1.0), f32("zero", 0.0)], 13)
case("LayerNorm of constant row", [N("Mul", ["x", "zero"], ["z"]), N("Add", ["z", "one"], ["c1"]), N("LayerNormalization", ["c1", "s"], axis=-1)], X4, [f32("zero", 0.0), f32("one", 1.0), w("s", 6)], 17)
case("Softmax big negative", [N("Softmax", ["x"], axis=-1)], X4, (), 13, scale=1000)
case("Squeeze no axes", [N("Squeeze", ["x"])], ["N", 1, 6], (), 13)
case("Squeeze no axes 11", [N("Squeeze", ["x"])], ["N", 1, 6], (), 11)
case("Cast to fp16 and back", [N("Cast", ["x"], ["h"], to=TensorProto.FLOAT16), N("Relu", ["h"], ["r"]), N("Mul", ["r", "hh"], ["m"]), N("Cast", ["m"], to=F)], X4, [c("hh", 1.5, np.float16)], 13)
case("fp16 MatMul", [N("Cast", ["x"], ["h"], to=TensorProto.FLOAT16), N("MatMul", ["h", "wh"], ["m"]), N("Cast", ["m"], to=F)], X4, [c("wh", np.random.default_rng(0).standard_normal((6, 5)), np.float16)], 13)
case("Einsum bhqd,bhkd->bhqk", [N("Einsum", ["x", "x"], equation="bhqd,bhkd->bhqk")], X4, (), 12)
case("SplitToSequence ConcatFromSequence", [N("SplitToSequence", ["x", "sp"], ["seq"], axis=2), N("ConcatFromSequence", ["seq"], axis=2, new_axis=0)], X4, [i64("sp", [2, 4])], 13)
case("ConcatFromSequence new axis", [N("SplitToSequence", ["x"], ["seq"], axis=1, keepdims=0), N("ConcatFromSequence", ["seq"], axis=-1, new_axis=1)], X4, (), 13)
case("SequenceConstruct/At", [N("SequenceConstruct", ["x", "x"], ["seq"]), N("SequenceAt", ["seq", "one"], ["y"])], X4, [i64("one", 1)], 13)
case("Resize to other's shape exact", [N("Conv", ["x", "k"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]), N("Shape", ["x"], ["sx"]), N("Slice", ["sx", "s2", "s4"], ["hw"]), N("Shape", ["c"], ["sc"]), N("Slice", ["sc", "s0", "s2"], ["nc"]), N("Concat", ["nc", "hw"], ["sz"], axis=0), N("Resize", ["c", "", "", "sz"], mode="nearest")], X4, [w("k", 4, 4, 3, 3), i64("s0", [0]), i64("s2", [2]), i64("s4", [4])], 13)
case("Resize to other's shape inexact", [N("Conv", ["x", "k"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]), N("Shape", ["x"], ["sx"]), N("Slice", ["sx", "s2", "s4"], ["hw"]), N("Shape", ["c"], ["sc"]), N("Slice", ["sc", "s0", "s2"], ["nc"]), N("Concat", ["nc", "hw"], ["sz"], axis=0), N("Resize", ["c", "", "", "sz"], mode="linear")], ["N", 4, 7, 9], [w("k", 4, 4, 3, 3), i64("s0", [0]), i64("s2", [2]), i64("s4", [4])], 13)
case("Tile by batch", [N("Shape", ["x"], ["sx"]), N("Slice", ["sx", "s0", "s1"], ["n"]), N("Concat", ["n", "ones"], ["r"], axis=0), N("Tile", ["tok", "r"], ["t"]), N("Concat", ["t", "x"], axis=1)], X3, [w("tok", 1, 1, 8), i64("s0", [0]), i64("s1", [1]), i64("ones", [1, 1])], 13)
case("Tile by batch, DETR repeat", [N("Shape", ["x"], ["sx"]), N("Slice", ["sx", "s0", "s1"], ["n"]), N("Concat", ["one", "n", "one"], ["r"], axis=0), N("Tile", ["q", "r"], ["t"]), N("Transpose", ["t"], ["tt"], perm=[1, 0, 2]), N("Add", ["tt", "x"])], X3, [w("q", 6, 1, 8), i64("s0", [0]), i64("s1", [1]), i64("one", [1])], 13)
case("Pad to multiple from shape", [N("Shape", ["x"], ["sx"]), N("Slice", ["sx", "s3", "s4"], ["wd"]), N("Mod", ["wd", "eight"], ["m"]), N("Sub", ["eight", "m"], ["p"]), N("Mod", ["p", "eight"], ["pp"]), N("Concat", ["z3", "pp"], ["pads0"], axis=0), N("Concat", ["pads0", "z3"], ["pads1"], axis=0), N("Concat", ["pads1", "z1"], ["pads"], axis=0), N("Pad", ["x", "pads"])], X4, [i64("s3", [3]), i64("s4", [4]), i64("eight", [8]), i64("z3", [0, 0, 0]), i64("z1", [0])], 13)
case("CumSum position ids", [N("Greater", ["x", "z"], ["g"]), N("Cast", ["g"], ["gi"], to=I64), N("CumSum", ["gi", "ax"], ["cs"]), N("Cast", ["cs"], to=F)], X3, [f32("z", 0.0), i64("ax", 2)], 13)
case("ArgMax then GatherElements", [N("ArgMax", ["x"], ["a"], axis=2, keepdims=1), N("GatherElements", ["x", "a"], axis=2)], X3, (), 13)
case("TopK then Gather per sample", [N("TopK", ["x", "k"], ["v", "i"], axis=2), N("GatherElements", ["x", "i"], ["g"], axis=2), N("Sub", ["g", "v"])], X3, [i64("k", [3])], 13)
case("GatherND batch_dims 1", [N("ArgMax", ["x"], ["a"], axis=2, keepdims=1), N("GatherND", ["x", "a"], batch_dims=2)], X3, (), 13)
case("ScatterElements from input idx", [N("ArgMax", ["x"], ["a"], axis=2, keepdims=1), N("ScatterElements", ["x", "a", "u"], axis=2)], X3, [f32("u", np.full((1, 6, 1), 7.0))], 13) if False else None
case("Not/And/Or/Xor", [N("Greater", ["x", "z"], ["g"]), N("Less", ["x", "h"], ["l"]), N("And", ["g", "l"], ["a"]), N("Or", ["g", "l"], ["o"]), N("Xor", ["a", "o"], ["xo"]), N("Not", ["xo"], ["n"]), N("Cast", ["n"], to=F)], X4, [f32("z", 0.0), f32("h", 0.5)], 13)
case("Pow 0.5 2 3", [N("Abs", ["x"], ["a"]), N("Pow", ["a", "h"], ["p1"]), N("Pow", ["x", "two"], ["p2"]), N("Pow", ["x", "three"], ["p3"]), N("Sum", ["p1", "p2", "p3"])], X4, [f32("h", 0.5), f32("two", 2.0), f32("three", 3.0)], 13)
case("Pow negative base int exponent", [N("Pow", ["x", "three"])], X4, [f32("three", 3.0)], 13)
case("Pow int exponent tensor", [N("Pow", ["x", "e"])], X4, [i64("e", 2)], 13)
known("Cast to fp16 and back", "onnxruntime's CPU computes the float16 Relu and Mul in float32 "
      "and drops the casts; cw rounds to float16 as ONNX says")
known("fp16 MatMul", "onnxruntime's CPU has no float16 MatMul: it computes in float32 and drops "
      "the casts (x is never rounded to float16); cw rounds as ONNX says, and sums in float32 "
      "(until stop 78 in float16, as it went)")
