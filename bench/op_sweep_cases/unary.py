"""Unary math and old softmax/hardmax opsets (stop 74)."""
# ruff: noqa: E501 (one case per line reads best)

import numpy as np  # noqa: F401
from onnx import TensorProto  # noqa: F401

from .common import I64, X3, X4, F, N, c, case, f32, group, i64, known, w  # noqa: F401

group("unary")

for op in ("Sinh", "Cosh", "Tan", "Asin", "Acos", "Acosh", "Atanh", "Sin", "Atan", "Exp", "Log", "Sqrt", "Neg", "BitwiseNot"):
    pre = []
    src = "x"
    if op in ("Asin", "Acos", "Atanh"):
        pre = [N("Tanh", ["x"], ["t"])]; src = "t"
    if op in ("Acosh", "Log", "Sqrt"):
        pre = [N("Abs", ["x"], ["a"]), N("Add", ["a", "one"], ["t"])]; src = "t"
    if op == "BitwiseNot":
        continue
    case(f"{op} opset 18", pre + [N(op, [src])], X4, [f32("one", 1.01)], 18)
case("Hardmax opset 11 axis -1", [N("Hardmax", ["x"], axis=-1)], X3, (), 11)
case("Hardmax opset 11 axis 1 3d", [N("Hardmax", ["x"], axis=1)], X3, (), 11)
case("LogSoftmax opset 11 axis 1", [N("LogSoftmax", ["x"], axis=1)], X4, (), 11)
case("Softmax opset 1 default axis", [N("Softmax", ["x"])], X4, (), 9)
case("Hardmax opset 9 default", [N("Hardmax", ["x"])], X4, (), 9)
case("Upsample opset 7 linear", [N("Upsample", ["x"], mode="linear", scales=[1.0, 1.0, 2.0, 2.0])], X4, (), 7)
case("Upsample opset 9 linear 1.5", [N("Upsample", ["x", "s"], mode="linear")], X4, [f32("s", [1, 1, 1.5, 3])], 9)
case("Resize opset 10 linear", [N("Resize", ["x", "s"], mode="linear")], X4, [f32("s", [1, 1, 2, 2])], 10)
case("Resize opset 10 nearest 1.5", [N("Resize", ["x", "s"], mode="nearest")], X4, [f32("s", [1, 1, 1.5, 2])], 10)
case("Resize opset 11 linear default", [N("Resize", ["x", "roi", "s"], mode="linear")], X4, [f32("roi", []), f32("s", [1, 1, 2, 2])], 11)
case("Resize 13 nearest default 1.5", [N("Resize", ["x", "", "s"], mode="nearest")], X4, [f32("s", [1, 1, 1.5, 1.5])], 13)
case("GatherND batch_dims 1", [N("GatherND", ["x", "i"], batch_dims=0)], ["N", 6, 8], [i64("i", [[0, 1, 2], [0, 0, 7]])]) if False else None
case("ScatterND on sample axis", [N("Transpose", ["x"], ["t"], perm=[1, 2, 0]), N("ScatterND", ["t", "i", "u"], ["s"]), N("Transpose", ["s"], perm=[2, 0, 1])], ["N", 6, 8], [i64("i", [[2], [5]]), w("u", 2, 8, 1)]) if False else None
case("ScatterElements add const", [N("ScatterElements", ["x", "i", "u"], axis=2, reduction="add")], ["N", 6, 8], [i64("i", np.tile([[[1, 1, 3]]], (1, 6, 1))), w("u", 1, 6, 3)], 18) if False else None
case("MaxPool indices", [N("MaxPool", ["x"], ["m", "ix"], kernel_shape=[2, 2], strides=[2, 2]), N("Cast", ["ix"], ["ixf"], to=F), N("Add", ["m", "ixf"])], X4, (), 12)
case("MaxPool storage_order 1", [N("MaxPool", ["x"], ["m", "ix"], kernel_shape=[2, 2], strides=[2, 2], storage_order=1), N("Cast", ["ix"], ["ixf"], to=F), N("Add", ["m", "ixf"])], X4, (), 12)
case("MaxPool indices to MaxUnpool", [N("Relu", ["x"], ["r"]), N("MaxPool", ["r"], ["m", "ix"], kernel_shape=[2, 2], strides=[2, 2]), N("Mul", ["m", "two"], ["m2"]), N("MaxUnpool", ["m2", "ix"], kernel_shape=[2, 2], strides=[2, 2])], X4, [f32("two", 2.0)], 12)
case("MaxPool 3x3 padded indices to MaxUnpool sized by Shape", [N("Relu", ["x"], ["r"]), N("MaxPool", ["r"], ["m", "ix"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), N("Shape", ["r"], ["rs"]), N("MaxUnpool", ["m", "ix", "rs"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])], ["N", 3, 7, 7], (), 17)
case("MaxPool 1-D indices to MaxUnpool", [N("MaxPool", ["x"], ["m", "ix"], kernel_shape=[3], strides=[3]), N("MaxUnpool", ["m", "ix"], kernel_shape=[3], strides=[3])], ["N", 4, 9], (), 17)
case("MaxPool return_indices as PyTorch exports it", [N("MaxPool", ["x"], ["m", "ix"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1), N("MaxPool", ["x"], ["all", "flat"], kernel_shape=[1, 1], strides=[1, 1]), N("Slice", ["flat", "z2", "o2", "hw"], ["first"]), N("Sub", ["ix", "first"], ["own"]), N("Cast", ["own"], ["ownf"], to=F), N("Add", ["m", "ownf"])], X4, [i64("z2", [0, 0]), i64("o2", [1, 1]), i64("hw", [2, 3])], 17)
case("Flatten axis 2", [N("Flatten", ["x"], ["f"], axis=2), N("Reshape", ["f", "sh"])], X4, [i64("sh", [-1, 4, 36])])
case("ReverseSequence time 1", [N("ReverseSequence", ["x", "lens"], batch_axis=0, time_axis=1)], ["N", 5, 3], [i64("lens", [2])]) if False else None
case("IsInf", [N("Div", ["x", "z"], ["d"]), N("IsInf", ["d"], ["i"], detect_negative=0), N("Cast", ["i"], to=F)], X4, [f32("z", 0.0)])
case("IsNaN", [N("Log", ["x"], ["d"]), N("IsNaN", ["d"], ["i"]), N("Cast", ["i"], to=F)], X4, ())
case("Det", [N("Det", ["x"])], ["N", 3, 3])
case("Expand rank up", [N("Expand", ["x", "sh"])], ["N", 1, 6], [i64("sh", [2, 1, 4, 1])])
case("Gemm transA", [N("Transpose", ["x"], ["xt"]), N("Gemm", ["xt", "m", "cc"], alpha=0.5, beta=2.0, transA=1)], ["N", 12], [w("m", 12, 3), w("cc", 3)])
case("Compress no axis", [N("Compress", ["x", "cnd"])], X4, [c("cnd", [True, False, True], bool)])
case("Shrink lambd only", [N("Shrink", ["x"], lambd=0.4)], X4)
case("Einsum outer", [N("Einsum", ["x", "v"], equation="bi,j->bij")], ["N", 5], [w("v", 3)], 12)
case("Einsum trace-ish", [N("Einsum", ["x"], equation="bii->b")], ["N", 4, 4], (), 12)
case("BitShift", [N("Cast", ["x"], ["u"], to=TensorProto.UINT8), N("BitShift", ["u", "s"], ["b"], direction="LEFT"), N("Cast", ["b"], to=F)], X4, [c("s", 1, np.uint8)], 11, scale=20)
case("Mod int negative", [N("Mul", ["x", "ten"], ["x10"]), N("Cast", ["x10"], ["xi"], to=I64), N("Mod", ["xi", "d"], ["m"]), N("Cast", ["m"], to=F)], X4, [f32("ten", 10.0), i64("d", -3)], 13)
case("Div int", [N("Mul", ["x", "ten"], ["x10"]), N("Cast", ["x10"], ["xi"], to=I64), N("Div", ["xi", "d"], ["m"]), N("Cast", ["m"], to=F)], X4, [f32("ten", 10.0), i64("d", 3)], 13)
case("Cast float to uint8 saturate", [N("Mul", ["x", "ten"], ["x10"]), N("Cast", ["x10"], ["xi"], to=TensorProto.UINT8), N("Cast", ["xi"], to=F)], X4, [f32("ten", 100.0)], 13) if False else None
case("Cast round to int32 negative", [N("Mul", ["x", "ten"], ["x10"]), N("Cast", ["x10"], ["xi"], to=TensorProto.INT8), N("Cast", ["xi"], to=F)], X4, [f32("ten", 10.0)], 13)
case("Where int", [N("Greater", ["x", "z"], ["g"]), N("Where", ["g", "one", "two"], ["wi"]), N("Cast", ["wi"], to=F)], X4, [f32("z", 0.0), i64("one", 1), i64("two", 7)])
case("Erf big", [N("Erf", ["x"])], X4, (), 13, scale=10)
case("Tanh big", [N("Tanh", ["x"])], X4, (), 13, scale=30)
case("Sigmoid big", [N("Sigmoid", ["x"])], X4, (), 13, scale=100)
case("Softmax big", [N("Softmax", ["x"], axis=-1)], X4, (), 13, scale=100)
case("Exp big", [N("Exp", ["x"])], X4, (), 13, scale=30)
case("Softplus big", [N("Softplus", ["x"])], X4, (), 13, scale=60)
case("Mish big", [N("Mish", ["x"])], X4, (), 18, scale=60)
case("LogSoftmax big", [N("LogSoftmax", ["x"], axis=-1)], X4, (), 13, scale=100)
case("HardSwish wide range", [N("HardSwish", ["x"])], X4, (), 14, scale=5)
case("Gelu tanh big", [N("Gelu", ["x"], approximate="tanh")], X4, (), 20, scale=30)
case("ReduceLogSumExp big", [N("ReduceLogSumExp", ["x", "ax"], keepdims=0)], X4, [i64("ax", [-1])], 18, scale=100)
# rows far from 0 against their spread (100 to 1): a variance as E[x²] - E[x]² cancels in float32
FAR = [N("Mul", ["x", "k"], ["xs"]), N("Add", ["xs", "off"], ["xo"])]
FAR_INITS = [f32("k", 0.1), f32("off", 10.0)]
case("LayerNormalization of rows far from 0", FAR + [N("LayerNormalization", ["xo", "s"], axis=-1)], X4, FAR_INITS + [f32("s", np.ones(6))], 17)
case("InstanceNormalization of maps far from 0", FAR + [N("InstanceNormalization", ["xo", "s", "b"])], X4, FAR_INITS + [w("s", 4), w("b", 4)], 17)
case("MeanVarianceNormalization far from 0", FAR + [N("MeanVarianceNormalization", ["xo"], axes=[2, 3])], X4, FAR_INITS, 13)
case("GroupNormalization far from 0", FAR + [N("GroupNormalization", ["xo", "s", "b"], num_groups=2)], X4, FAR_INITS + [w("s", 4), w("b", 4)], 21)
known("GroupNormalization far from 0", "onnxruntime's GroupNormalization is 1.7e-3 off the exact "
      "result here (its variance cancels); cw's, about the mean, 1.1e-5")
case("BatchNormalization far from its mean", FAR + [N("BatchNormalization", ["xo", "s", "b", "m", "v"])], X4, FAR_INITS + [w("s", 4), w("b", 4), f32("m", [10.0] * 4), f32("v", [0.01] * 4)], 15)
