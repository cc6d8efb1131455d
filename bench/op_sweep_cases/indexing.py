"""Scatters and gathers with indices a batch can carry, comparisons, shape-valued operators,
sampling grids, windows and the newer opsets' operators no other group has (stop 76)."""
# ruff: noqa: E501 (one case per line reads best)

import numpy as np  # noqa: F401
from onnx import TensorProto  # noqa: F401

from .common import I64, X3, X4, F, N, c, case, f32, group, i64, known, w  # noqa: F401

group("indexing")

# indices that follow the batch: computed from x (TopK, ArgMax, a clipped cast), so every sample
# has its own; constant indices on the sample axes after a transpose puts them first
T = [N("Transpose", ["x"], ["t"], perm=[1, 2, 0])]  # [N, 6, 8] -> [6, 8, N]
BACK = lambda src: N("Transpose", [src], perm=[2, 0, 1])  # noqa: E731
ROWS = [N("Slice", ["t", "s0", "s2", "a0"], ["u0"]), N("Mul", ["u0", "two"], ["u"])]
ROWS_INITS = [i64("s0", [0]), i64("s2", [2]), i64("a0", [0]), f32("two", 2.0)]
case("ScatterND rows of the sample axes", T + ROWS + [N("ScatterND", ["t", "i", "u"], ["s"]), BACK("s")], X3, [i64("i", [[2], [5]])] + ROWS_INITS, 16)
for red in ("add", "mul", "max", "min"):
    case(f"ScatterND reduction {red} repeated row", T + ROWS + [N("ScatterND", ["t", "i", "u"], ["s"], reduction=red), BACK("s")], X3, [i64("i", [[3], [3]])] + ROWS_INITS, 18)
case("ScatterND elements of the sample axes", T + [N("Slice", ["t", "s0", "s2", "a0"], ["r"]), N("Slice", ["r", "s0", "s1", "a1"], ["u0"]), N("Reshape", ["u0", "sh"], ["u"]), N("ScatterND", ["t", "i", "u"], ["s"]), BACK("s")], X3, [i64("s0", [0]), i64("s2", [2]), i64("s1", [1]), i64("a0", [0]), i64("a1", [1]), i64("sh", [2, -1]), i64("i", [[1, 7], [4, 0]])], 16)
case("ScatterND negative index", T + ROWS + [N("ScatterND", ["t", "i", "u"], ["s"]), BACK("s")], X3, [i64("i", [[-1], [-4]])] + ROWS_INITS, 16)
ARG = [N("ArgMax", ["x"], ["a"], axis=2, keepdims=1), N("Slice", ["x", "z", "one", "two_ax"], ["u"])]
ARG_INITS = [i64("z", [0]), i64("one", [1]), i64("two_ax", [2])]
case("ScatterElements at the argmax", ARG + [N("ScatterElements", ["x", "a", "u"], axis=2)], X3, ARG_INITS, 16)
case("ScatterElements add at the argmax", ARG + [N("ScatterElements", ["x", "a", "u"], axis=2, reduction="add")], X3, ARG_INITS, 18)
CLIPPED = [N("Abs", ["x"], ["ab"]), N("Mul", ["ab", "k"], ["m"]), N("Clip", ["m", "lo", "hi"], ["cl"]), N("Cast", ["cl"], ["ix"], to=I64)]
CLIPPED_INITS = [f32("k", 3.0), f32("lo", 0.0), f32("hi", 5.0)]
case("ScatterElements add into x, indices from values", CLIPPED + [N("ScatterElements", ["x", "ix", "x"], axis=1, reduction="add")], X3, CLIPPED_INITS, 18)
case("ScatterElements max, indices from values", CLIPPED + [N("ScatterElements", ["x", "ix", "x"], axis=1, reduction="max")], X3, CLIPPED_INITS, 18)
case("Scatter opset 10 at the argmax", ARG + [N("Scatter", ["x", "a", "u"], axis=2)], X3, ARG_INITS, 10)
TOPK = [N("TopK", ["x", "k"], ["v", "ix"], axis=2)]
case("GatherElements by TopK's indices", TOPK + [N("GatherElements", ["x", "ix"], axis=2)], X3, [i64("k", [3])], 13)
case("GatherElements negative indices", TOPK + [N("Sub", ["ix", "eight"], ["neg"]), N("GatherElements", ["x", "neg"], axis=2)], X3, [i64("k", [3]), i64("eight", 8)], 13)
case("GatherElements axis 1 indices from values", CLIPPED + [N("GatherElements", ["x", "ix"], axis=1)], X3, CLIPPED_INITS, 13)
case("GatherND batch_dims 1 by TopK", [N("ReduceMax", ["x"], ["r"], axes=[2], keepdims=1), N("TopK", ["r", "k"], ["v", "ix"], axis=1), N("GatherND", ["x", "ix"], batch_dims=1)], X3, [i64("k", [2])], 13)
case("GatherND on the sample axes", T + [N("GatherND", ["t", "i"], ["g"]), N("Transpose", ["g"], perm=[1, 0])], X3, [i64("i", [[0, 1], [5, 7], [-1, -2]])], 13)
case("Gather 2-D negative indices", [N("Gather", ["x", "i"], axis=2)], X3, [i64("i", [[0, -1], [3, -8]])], 13)

# comparisons, variadic operators, casts like
for op in ("Equal", "GreaterOrEqual", "LessOrEqual", "Greater", "Less"):
    case(f"{op} with rounded x", [N("Round", ["x"], ["r"]), N(op, ["x", "r"], ["b"]), N("Cast", ["b"], to=F)], X4, (), 16, scale=2.0)
case("Equal of integers", [N("Cast", ["x"], ["xi"], to=I64), N("Equal", ["xi", "one"], ["b"]), N("Cast", ["b"], to=F)], X4, [i64("one", 1)], 13, scale=2.0)
case("Min of three, broadcast", [N("Min", ["x", "m", "v"])], X4, [w("m", 6, 6), w("v", 4, 1, 1)], 13)
case("Max of three, broadcast", [N("Max", ["x", "m", "v"])], X4, [w("m", 6, 6), w("v", 4, 1, 1)], 13)
case("Mean of three, broadcast", [N("Mean", ["x", "m", "v"])], X4, [w("m", 6, 6), w("v", 4, 1, 1)], 13)
case("Min of one", [N("Min", ["x"])], X4, (), 13)
case("CastLike to float16 and back", [N("CastLike", ["x", "h"], ["xh"]), N("Cast", ["xh"], to=F)], X4, [c("h", [1.0], np.float16)], 19)
case("CastLike to int64", [N("CastLike", ["x", "i"], ["xi"]), N("Cast", ["xi"], to=F)], X4, [i64("i", [1])], 19, scale=3.0)

# values computed from the shape: with the batch in them they change with it
case("ConstantOfShape of x's shape", [N("Shape", ["x"], ["sh"]), N("ConstantOfShape", ["sh"], ["k"], value=f32("v", [2.5])), N("Add", ["x", "k"])], X4, (), 13)
case("ConstantOfShape of a sample shape", [N("Shape", ["x"], ["sh"], start=1), N("ConstantOfShape", ["sh"], ["k"], value=f32("v", [2.5])), N("Add", ["x", "k"])], X4, (), 15)
case("Size of x as a value", [N("Size", ["x"], ["s"]), N("Cast", ["s"], ["sf"], to=F), N("Mul", ["x", "sf"])], X4, (), 13)
case("Size of a sample slice", [N("Slice", ["x", "s0", "s1", "a0"], ["one"]), N("Size", ["one"], ["s"]), N("Cast", ["s"], ["sf"], to=F), N("Mul", ["x", "sf"])], X4, [i64("s0", [0]), i64("s1", [1]), i64("a0", [0])], 13)
case("the batch size as a value", [N("Shape", ["x"], ["sh"]), N("Gather", ["sh", "z"], ["b"]), N("Cast", ["b"], ["bf"], to=F), N("Div", ["x", "bf"])], X4, [i64("z", 0)], 13)
case("EyeLike of a constant", [N("EyeLike", ["e"], ["i"], k=1), N("MatMul", ["x", "i"])], X4, [f32("e", np.zeros((6, 6)))], 13)

# pools and normalizations of other ranks
case("GlobalAveragePool 1-D", [N("GlobalAveragePool", ["x"])], X3, (), 13)
case("GlobalMaxPool 1-D", [N("GlobalMaxPool", ["x"])], X3, (), 13)
case("GlobalAveragePool 3-D", [N("GlobalAveragePool", ["x"])], ["N", 2, 3, 4, 5], (), 13)
case("GlobalMaxPool 2-D", [N("GlobalMaxPool", ["x"])], X4, (), 13)
case("RMSNormalization last axis", [N("RMSNormalization", ["x", "s"], axis=-1)], X3, [w("s", 8)], 23)
case("RMSNormalization two axes", [N("RMSNormalization", ["x", "s"], axis=-2, epsilon=1e-3)], X3, [w("s", 6, 8)], 23)
case("ReverseSequence batch first, lengths from values", [N("ReduceSum", ["x", "ax"], ["r"], keepdims=0), N("Abs", ["r"], ["ab"]), N("Clip", ["ab", "lo", "hi"], ["cl"]), N("Cast", ["cl"], ["lens"], to=I64), N("ReverseSequence", ["x", "lens"], batch_axis=0, time_axis=1)], X3, [i64("ax", [1, 2]), f32("lo", 1.0), f32("hi", 6.0)], 13, scale=0.5)
case("ReverseSequence time first", [N("Transpose", ["x"], ["t"], perm=[1, 0, 2]), N("ReduceMax", ["x", "ax"], ["r"], keepdims=0), N("Abs", ["r"], ["ab"]), N("Mul", ["ab", "k"], ["m"]), N("Clip", ["m", "lo", "hi"], ["cl"]), N("Cast", ["cl"], ["lens"], to=I64), N("ReverseSequence", ["t", "lens"], ["rs"], batch_axis=1, time_axis=0), N("Transpose", ["rs"], perm=[1, 0, 2])], X3, [i64("ax", [1, 2]), f32("k", 3.0), f32("lo", 1.0), f32("hi", 6.0)], 18)

# sampling grids: the grid from x, so it follows the batch
GRID = [N("Slice", ["x", "c0", "c2", "a1"], ["g0"]), N("Transpose", ["g0"], ["g1"], perm=[0, 2, 3, 1]), N("Tanh", ["g1"], ["g2"]), N("Mul", ["g2", "k"], ["grid"])]
GRID_INITS = [i64("c0", [0]), i64("c2", [2]), i64("a1", [1]), f32("k", 1.15)]
for mode in ("bilinear", "nearest", "bicubic"):
    for pad in ("zeros", "border", "reflection"):
        for align in (0, 1):
            case(f"GridSample {mode} {pad} align {align}", GRID + [N("GridSample", ["x", "grid"], mode=mode, padding_mode=pad, align_corners=align)], X4, GRID_INITS, 16)
case("GridSample opset 20 linear", GRID + [N("GridSample", ["x", "grid"], mode="linear")], X4, GRID_INITS, 20)
case("AffineGrid of a batch of thetas", [N("Slice", ["x", "z", "six", "ax"], ["th"]), N("Reshape", ["th", "sh"], ["theta"]), N("Shape", ["x"], ["xs"], end=1), N("Concat", ["xs", "rest"], ["size"], axis=0), N("AffineGrid", ["theta", "size"], align_corners=0)], ["N", 8], [i64("z", [0]), i64("six", [6]), i64("ax", [1]), i64("sh", [-1, 2, 3]), i64("rest", [3, 5, 4])], 20)
case("AffineGrid then GridSample", [N("Slice", ["x", "z", "six", "ax"], ["th"]), N("Reshape", ["th", "sh"], ["theta"]), N("Shape", ["x"], ["xs"], end=1), N("Concat", ["xs", "rest"], ["size"], axis=0), N("AffineGrid", ["theta", "size"], ["grid"], align_corners=1), N("ConstantOfShape", ["size"], ["img0"], value=f32("v", [1.0])), N("Mul", ["img0", "pat"], ["img"]), N("GridSample", ["img", "grid"], align_corners=1)], ["N", 8], [i64("z", [0]), i64("six", [6]), i64("ax", [1]), i64("sh", [-1, 2, 3]), i64("rest", [2, 5, 4]), w("pat", 2, 5, 4)], 20, scale=0.5)

# windows and tables on constants (folded), bitwise operators, detection helpers
case("BlackmanWindow", [N("BlackmanWindow", ["n"], ["win"]), N("Mul", ["x", "win"])], X3, [i64("n", 8)], 17)
case("HammingWindow periodic 0", [N("HammingWindow", ["n"], ["win"], periodic=0), N("Mul", ["x", "win"])], X3, [i64("n", 8)], 17)
case("MelWeightMatrix", [N("MelWeightMatrix", ["bins", "dft", "rate", "lo", "hi"], ["mel"]), N("MatMul", ["x", "mel"])], X3, [i64("bins", 4), i64("dft", 14), i64("rate", 16000), f32("lo", 0.0), f32("hi", 8000.0)], 17)
for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
    case(op, [N("Abs", ["x"], ["a"]), N("Mul", ["a", "ten"], ["a10"]), N("Cast", ["a10"], ["xi"], to=TensorProto.INT32), N(op, ["xi", "m"], ["b"]), N("Cast", ["b"], to=F)], X4, [f32("ten", 10.0), c("m", 6, np.int32)], 18)
case("BitwiseNot", [N("Abs", ["x"], ["a"]), N("Mul", ["a", "ten"], ["a10"]), N("Cast", ["a10"], ["xi"], to=TensorProto.INT32), N("BitwiseNot", ["xi"], ["b"]), N("Cast", ["b"], to=F)], X4, [f32("ten", 10.0)], 18)
case("RoiAlign constant boxes", [N("RoiAlign", ["x", "rois", "bi"], output_height=2, output_width=2, sampling_ratio=2)], X4, [f32("rois", [[0, 0, 3, 3], [1, 1, 5, 4]]), i64("bi", [0, 0])], 16)
case("MaxRoiPool constant boxes", [N("MaxRoiPool", ["x", "rois"], pooled_shape=[2, 2])], X4, [f32("rois", [[0, 0, 0, 3, 3], [0, 1, 1, 5, 4]])], 13)
case("DeformConv offsets from x", [N("Conv", ["x", "ow"], ["off"], pads=[1, 1, 1, 1]), N("DeformConv", ["x", "dw", "off"], pads=[1, 1, 1, 1])], X4, [w("ow", 18, 4, 3, 3), w("dw", 5, 4, 3, 3)], 19)
case("Unique", [N("Round", ["x"], ["r"]), N("Unique", ["r"], ["u"], sorted=1)], X4, (), 13, scale=2.0)
case("NegativeLogLikelihoodLoss none, labels from argmax", [N("ArgMax", ["x"], ["lab"], axis=1, keepdims=0), N("NegativeLogLikelihoodLoss", ["x", "lab"], reduction="none")], X3, (), 13)
case("SoftmaxCrossEntropyLoss none, labels from argmin", [N("ArgMin", ["x"], ["lab"], axis=1, keepdims=0), N("SoftmaxCrossEntropyLoss", ["x", "lab"], reduction="none")], X3, (), 13)
case("CumProd", [N("CumProd", ["x", "ax"])], X3, [i64("ax", 2)], 26)

# attributes TVM's importer does not read (an audit of its converters against ONNX's schemas):
# LayerNormalization's stash_type (float32 statistics for a float16 input), Constant's value_*
H = TensorProto.FLOAT16
case("LayerNormalization float16, rows far from 0", [N("Mul", ["x", "k"], ["xs"]), N("Add", ["xs", "off"], ["xo"]), N("Cast", ["xo"], ["h"], to=H), N("LayerNormalization", ["h", "s"], ["ln"], axis=-1), N("Cast", ["ln"], to=F)], X3, [f32("k", 0.5), f32("off", 60.0), c("s", np.ones(8), np.float16)], 17)
case("LayerNormalization float16", [N("Cast", ["x"], ["h"], to=H), N("LayerNormalization", ["h", "s", "b"], ["ln"], axis=-1), N("Cast", ["ln"], to=F)], X3, [c("s", np.linspace(0.5, 2, 8), np.float16), c("b", np.linspace(-1, 1, 8), np.float16)], 17)
case("Constant value_float", [N("Constant", [], ["k"], value_float=2.5), N("Mul", ["x", "k"])], X4, (), 13)
case("Constant value_floats", [N("Constant", [], ["k"], value_floats=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), N("Mul", ["x", "k"])], X4, (), 13)
case("Constant value_ints as a shape", [N("Constant", [], ["sh"], value_ints=[0, -1, 6]), N("Reshape", ["x", "sh"])], X4, (), 13)
case("Constant value_int as an index", [N("Constant", [], ["i"], value_int=2), N("Gather", ["x", "i"], axis=1)], X4, (), 13)
case("DeformConv strided dilated, groups", [N("Conv", ["x", "ow"], ["off"], pads=[1, 1, 1, 1], strides=[2, 1]), N("DeformConv", ["x", "dw", "off", "db"], pads=[2, 1, 2, 1], strides=[2, 1], dilations=[2, 1], group=2, offset_group=2)], X4, [w("ow", 36, 4, 3, 3), w("dw", 6, 2, 3, 3), w("db", 6)], 19)
case("DeformConv with a mask (DCNv2)", [N("Conv", ["x", "ow"], ["off"], pads=[1, 1, 1, 1]), N("Conv", ["x", "mw"], ["m0"], pads=[1, 1, 1, 1]), N("Sigmoid", ["m0"], ["mask"]), N("DeformConv", ["x", "dw", "off", "", "mask"], pads=[1, 1, 1, 1])], X4, [w("ow", 18, 4, 3, 3), w("mw", 9, 4, 3, 3), w("dw", 5, 4, 3, 3)], 19, scale=2.0)
case("DeformConv opset 22 no padding", [N("Conv", ["x", "ow"], ["off"]), N("DeformConv", ["x", "dw", "off"], kernel_shape=[3, 3])], X4, [w("ow", 18, 4, 3, 3), w("dw", 5, 4, 3, 3)], 22, scale=3.0)
