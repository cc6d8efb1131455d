"""One operator each, in the forms its attributes and opsets allow (stops 74, 75)."""
# ruff: noqa: E501 (one case per line reads best)

import numpy as np  # noqa: F401
from onnx import TensorProto  # noqa: F401

from .common import I64, X3, X4, F, N, c, case, f32, group, i64, w  # noqa: F401

group("forms")

# normalizations
case("GroupNormalization 18", [N("GroupNormalization", ["x", "s", "b"], num_groups=2, epsilon=1e-5)], X4, [w("s", 2), w("b", 2)], 18)
case("GroupNormalization 21", [N("GroupNormalization", ["x", "s", "b"], num_groups=2, epsilon=1e-5)], X4, [w("s", 4), w("b", 4)], 21)
case("InstanceNormalization", [N("InstanceNormalization", ["x", "s", "b"])], X4, [w("s", 4), w("b", 4)])
case("LayerNormalization axis 1", [N("LayerNormalization", ["x", "s", "b"], axis=1)], X4, [w("s", 4, 6, 6), w("b", 4, 6, 6)])
case("LayerNormalization axis -1", [N("LayerNormalization", ["x", "s"], axis=-1)], X3, [w("s", 8)])
case("MVN axes 1 2 3", [N("MeanVarianceNormalization", ["x"], axes=[1, 2, 3])], X4)
case("LRN", [N("LRN", ["x"], size=3, alpha=1e-2, beta=0.75, bias=1.0)], X4)
case("LpNormalization axis 1", [N("LpNormalization", ["x"], axis=1, p=2)], X4)
# pads
for mode in ("reflect", "edge", "constant", "wrap"):
    case(f"Pad {mode}", [N("Pad", ["x", "p", "v"] if mode == "constant" else ["x", "p"], mode=mode)], X4,
         [i64("p", [0, 0, 1, 2, 0, 0, 2, 1]), f32("v", 0.5)], 19 if mode == "wrap" else 13)
case("Pad axes input 18", [N("Pad", ["x", "p", "", "ax"], mode="reflect")], X4, [i64("p", [1, 2, 2, 1]), i64("ax", [-1, 2])], 18)
case("Pad negative", [N("Pad", ["x", "p"])], X4, [i64("p", [0, 0, -1, 1, 0, 0, 1, -2])], 13)
case("CenterCropPad 18", [N("CenterCropPad", ["x", "s"], axes=[2, 3])], X4, [i64("s", [4, 9])], 18)
# split / reduce opset 18
case("Split num_outputs uneven", [N("Split", ["x"], ["a", "b", "c2"], axis=2, num_outputs=3), N("Concat", ["c2", "a"], axis=2)], X3, (), 18)
case("ReduceMean axes input", [N("ReduceMean", ["x", "ax"], keepdims=0)], X4, [i64("ax", [2, 3])], 18)
case("ReduceSum noop empty", [N("ReduceSum", ["x", "ax"], noop_with_empty_axes=1)], X4, [i64("ax", np.zeros(0))], 13)
for op in ("ReduceLogSumExp", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceProd", "ReduceMin", "ReduceMax", "ReduceLogSum"):
    pre = [N("Abs", ["x"], ["ax_"]), N("Add", ["ax_", "one"], ["p"])] if op in ("ReduceLogSum", "ReduceProd") else []
    case(op, pre + [N(op, ["p" if pre else "x", "ax"], keepdims=1)], X4, [i64("ax", [1, -1]), f32("one", 0.5)], 18)
# gathers / scatters
rng = np.random.default_rng(1)
case("GatherElements axis 2", [N("GatherElements", ["x", "i"], axis=2)], ["N", 4, 6, 6], [i64("i", rng.integers(-6, 6, (1, 4, 3, 6)))]) if False else None
case("GatherElements axis 2 on [4,6,6] per sample", [N("Gather", ["x", "zero"], ["s0"], axis=0), N("GatherElements", ["s0", "i"], ["g"], axis=1), N("Unsqueeze", ["g", "zero1"])],
     ["N", 4, 6, 6], [i64("zero", 0), i64("zero1", [0]), i64("i", rng.integers(-6, 6, (4, 3, 6)))])
case("Gather negative indices", [N("Gather", ["x", "i"], axis=2)], X4, [i64("i", [[-1, 0], [2, -3]])])
case("GatherND batch_dims 1", [N("GatherND", ["x", "i"], batch_dims=1)], ["N", 6, 8], [i64("i", [[1, 2], [0, 7], [5, 3]])]) if False else None
case("ScatterND constant idx", [N("ScatterND", ["x", "i", "u"])], ["N", 6, 8], [i64("i", [[0, 2], [0, 5]]), w("u", 2, 8)]) if False else None
case("Trilu upper k1", [N("Trilu", ["x", "k"], upper=1)], X4, [i64("k", 1)], 14)
case("Trilu lower k-1", [N("Trilu", ["x", "k"], upper=0)], X4, [i64("k", -1)], 14)
case("CumSum exclusive reverse", [N("CumSum", ["x", "a"], exclusive=1, reverse=1)], X4, [i64("a", 2)])
case("CumSum axis -1", [N("CumSum", ["x", "a"])], X4, [i64("a", -1)])
for mode in ("DCR", "CRD"):
    case(f"DepthToSpace {mode}", [N("DepthToSpace", ["x"], blocksize=2, mode=mode)], ["N", 8, 3, 3])
case("SpaceToDepth", [N("SpaceToDepth", ["x"], blocksize=2)], X4)
# activations
for op, a in [("Mish", {}), ("HardSwish", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("Softplus", {}), ("Softsign", {}),
              ("Selu", {"alpha": 1.5, "gamma": 1.1}), ("Elu", {"alpha": 0.7}), ("ThresholdedRelu", {"alpha": 0.3}),
              ("Shrink", {"lambd": 0.4, "bias": 0.2}), ("LeakyRelu", {"alpha": 0.2}), ("Sign", {}), ("Erf", {}),
              ("Round", {}), ("Floor", {}), ("Ceil", {}), ("Reciprocal", {}), ("Atan", {}), ("Asinh", {}), ("Sinh", {}), ("Cos", {})]:
    case(op, [N(op, ["x"], **a)], X4, (), 18, scale=2.5 if op == "Round" else 1.0)
case("Round halves", [N("Mul", ["x", "two"], ["x2"]), N("Round", ["x2"], ["r"]), N("Floor", ["x2"], ["f"]), N("Add", ["f", "half"], ["h"]), N("Round", ["h"])], X4, [f32("two", 2.0), f32("half", 0.5)], 13, scale=3)
case("Gelu 20 tanh", [N("Gelu", ["x"], approximate="tanh")], X4, (), 20)
case("Gelu 20", [N("Gelu", ["x"])], X4, (), 20)
case("PRelu per channel", [N("PRelu", ["x", "s"])], X4, [w("s", 4, 1, 1)])
case("PRelu last axis", [N("PRelu", ["x", "s"])], X4, [w("s", 6)])
case("Hardmax", [N("Hardmax", ["x"], axis=-1)], X4, (), 13)
case("Softmax opset 11 axis 1", [N("Softmax", ["x"], axis=1)], X4, (), 11)
case("LogSoftmax opset 11 axis 2", [N("LogSoftmax", ["x"], axis=2)], X4, (), 11)
case("Hardmax opset 11 axis 1", [N("Hardmax", ["x"], axis=1)], X4, (), 11)
case("Softmax axis 1 13", [N("Softmax", ["x"], axis=1)], X4, (), 13)
case("Mod fmod", [N("Mod", ["x", "d"], fmod=1)], X4, [f32("d", 0.7)], 13, scale=3)
case("Mod int", [N("Mul", ["x", "ten"], ["x10"]), N("Cast", ["x10"], ["xi"], to=I64), N("Mod", ["xi", "d"], ["m"]), N("Cast", ["m"], to=F)], X4, [f32("ten", 10.0), i64("d", 3)], 13)
case("Cast trunc", [N("Mul", ["x", "ten"], ["x10"]), N("Cast", ["x10"], ["xi"], to=TensorProto.INT32), N("Cast", ["xi"], to=F)], X4, [f32("ten", 10.0)])
case("Clip min only", [N("Clip", ["x", "m"])], X4, [f32("m", 0.1)], 13)
case("Clip opset 6", [N("Clip", ["x"], min=-0.2, max=0.3)], X4, (), 6)
case("Upsample opset 9", [N("Upsample", ["x", "s"], mode="nearest")], X4, [f32("s", [1, 1, 2, 2])], 9)
case("Upsample opset 9 linear", [N("Upsample", ["x", "s"], mode="linear")], X4, [f32("s", [1, 1, 2, 2])], 9)
# resizes
for ctm in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn", "half_pixel_symmetric"):
    for mode in ("nearest", "linear", "cubic"):
        if ctm == "tf_half_pixel_for_nn" and mode != "nearest":
            continue
        case(f"Resize {mode} {ctm}", [N("Resize", ["x", "", "s"], mode=mode, coordinate_transformation_mode=ctm)], X4, [f32("s", [1, 1, 1.5, 0.5])], 19)
for nm in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
    case(f"Resize nearest {nm}", [N("Resize", ["x", "", "s"], mode="nearest", nearest_mode=nm)], X4, [f32("s", [1, 1, 2.5, 0.5])], 13)
case("Resize cubic exclude_outside a-0.5", [N("Resize", ["x", "", "s"], mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)], X4, [f32("s", [1, 1, 2, 2])], 13)
case("Resize axes 18", [N("Resize", ["x", "", "s"], mode="linear", axes=[2, 3])], X4, [f32("s", [2, 2])], 18)
case("Resize sizes keep_aspect not_larger", [N("Resize", ["x", "", "", "sz"], mode="linear", axes=[2, 3], keep_aspect_ratio_policy="not_larger")], X4, [i64("sz", [12, 9])], 18)
case("Resize tf_crop_and_resize", [N("Resize", ["x", "roi", "s"], mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=0.5)], X4, [f32("roi", [0, 0, 0.2, 0.1, 1, 1, 0.9, 0.8]), f32("s", [1, 1, 2, 2])], 13)
# pools / convs
case("MaxPool dilations ceil", [N("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2], dilations=[2, 1], ceil_mode=1)], ["N", 4, 7, 7], (), 12)
case("AveragePool ceil count_include_pad", [N("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1)], ["N", 4, 8, 8])
case("AveragePool ceil no pad", [N("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)], ["N", 4, 8, 8])
case("AveragePool SAME_UPPER", [N("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")], ["N", 4, 8, 8])
case("AveragePool dilations 19", [N("AveragePool", ["x"], kernel_shape=[2, 2], dilations=[2, 2])], ["N", 4, 8, 8], (), 19)
case("LpPool p3", [N("LpPool", ["x"], kernel_shape=[2, 2], p=3)], ["N", 4, 8, 8], (), 18)
case("GlobalLpPool", [N("GlobalLpPool", ["x"], p=2)], X4)
case("MaxPool indices", [N("MaxPool", ["x"], ["m", "ix"], kernel_shape=[2, 2], strides=[2, 2]), N("Cast", ["ix"], ["ixf"], to=F), N("Add", ["m", "ixf"])], X4, (), 12) if False else None
case("Conv SAME_LOWER s2", [N("Conv", ["x", "k"], auto_pad="SAME_LOWER", strides=[2, 2])], ["N", 4, 7, 7], [w("k", 5, 4, 3, 3)])
case("Conv SAME_UPPER s2 even", [N("Conv", ["x", "k"], auto_pad="SAME_UPPER", strides=[2, 2])], ["N", 4, 8, 8], [w("k", 5, 4, 4, 4)])
case("Conv dilated grouped", [N("Conv", ["x", "k", "b"], dilations=[2, 2], group=2, pads=[2, 2, 2, 2])], ["N", 4, 8, 8], [w("k", 6, 2, 3, 3), w("b", 6)])
case("Conv 1d", [N("Conv", ["x", "k"], pads=[1, 1], strides=[2])], ["N", 4, 16], [w("k", 5, 4, 3)])
case("Conv 3d", [N("Conv", ["x", "k"], pads=[1, 1, 1, 1, 1, 1])], ["N", 2, 4, 4, 4], [w("k", 3, 2, 3, 3, 3)])
case("ConvTranspose SAME_UPPER s2", [N("ConvTranspose", ["x", "k"], auto_pad="SAME_UPPER", strides=[2, 2])], X4, [w("k", 4, 3, 3, 3)])
case("ConvTranspose output_padding dil group", [N("ConvTranspose", ["x", "k"], strides=[2, 2], output_padding=[1, 0], dilations=[1, 2], group=2)], X4, [w("k", 4, 2, 3, 3)])
case("ConvTranspose 1d", [N("ConvTranspose", ["x", "k"], strides=[2], pads=[1, 0])], ["N", 4, 10], [w("k", 4, 3, 4)])
# linear algebra
case("MatMul broadcast 4d x 2d", [N("MatMul", ["x", "m"])], X4, [w("m", 6, 5)])
case("MatMul 1d rhs", [N("MatMul", ["x", "m"])], X4, [w("m", 6)])
case("Gemm transA alpha beta", [N("Flatten", ["x"], ["f"]), N("Gemm", ["m", "f", "cc"], alpha=0.5, beta=2.0, transA=1, transB=1)], ["N", 12], [w("m", 12, 3), w("cc", 3, 1)]) if False else None
case("Gemm transB bias row", [N("Gemm", ["x", "m", "cc"], alpha=0.5, beta=2.0, transB=1)], ["N", 12], [w("m", 3, 12), w("cc", 3)])
for eq, shapes in [("bij,jk->bik", [(8, 3)]), ("bij->bji", []), ("bhw->bh", []), ("bij,ij->bi", [(6, 8)]), ("...ij,jk->...ik", [(8, 2)]), ("bii->bi", [])]:
    xs = ["N", 6, 6] if "ii" in eq else X3
    case(f"Einsum {eq}", [N("Einsum", ["x"] + [f"e{i}" for i in range(len(shapes))], equation=eq)], xs, [w(f"e{i}", *s) for i, s in enumerate(shapes)], 12)
case("Einsum two x", [N("Einsum", ["x", "x"], equation="bij,bkj->bik")], X3, (), 12)
# misc shape
case("Tile constant", [N("Tile", ["x", "r"])], X4, [i64("r", [1, 2, 1, 3])])
case("Slice negative steps", [N("Slice", ["x", "st", "en", "ax", "sp"])], X4, [i64("st", [-1, 5]), i64("en", [-100, 0]), i64("ax", [2, 3]), i64("sp", [-2, -1])])
case("Slice steps 2 axes neg", [N("Slice", ["x", "st", "en", "ax", "sp"])], X4, [i64("st", [1]), i64("en", [100]), i64("ax", [-1]), i64("sp", [2])])
case("Flatten axis 2", [N("Flatten", ["x"], ["f"], axis=2), N("Reshape", ["f", "sh"])], X4, [i64("sh", [-1, 4, 36])]) if False else None
case("ReverseSequence", [N("ReverseSequence", ["x", "lens"], batch_axis=1, time_axis=0)], ["N", 3, 5], [i64("lens", [1, 2, 3])]) if False else None
case("Compress const", [N("Compress", ["x", "cnd"], axis=2)], X4, [c("cnd", [True, False, True, True, False, True], bool)])
case("OneHot", [N("Mul", ["x", "three"], ["x3"]), N("Abs", ["x3"], ["a"]), N("Cast", ["a"], ["ai"], to=I64), N("OneHot", ["ai", "d", "v"], axis=-1)], X3, [f32("three", 3.0), i64("d", 5), f32("v", [0.25, 2.0])])
case("Where broadcast", [N("Greater", ["x", "z"], ["g"]), N("Where", ["g", "x", "k"])], X4, [f32("z", 0.1), w("k", 6)])
case("Sum variadic broadcast", [N("Sum", ["x", "a", "b"]), ], X4, [w("a", 6), w("b", 4, 1, 1)])
case("Mean variadic", [N("Mean", ["x", "a"])], X4, [w("a", 6, 6)])
case("Max variadic", [N("Max", ["x", "a", "b"])], X4, [w("a", 6), w("b", 4, 1, 1)])
case("ArgMax select_last", [N("Round", ["x"], ["r"]), N("ArgMax", ["r"], ["a"], axis=2, select_last_index=1), N("Cast", ["a"], to=F)], X4, (), 13, scale=1.0)
case("ArgMin keepdims0", [N("Round", ["x"], ["r"]), N("ArgMin", ["r"], ["a"], axis=3, keepdims=0), N("Cast", ["a"], to=F)], X4, (), 13)
case("TopK smallest", [N("TopK", ["x", "k"], ["v", "i"], axis=2, largest=0), N("Cast", ["i"], ["fi"], to=F), N("Add", ["v", "fi"])], X4, [i64("k", [3])])
case("Range const", [N("Range", ["s", "l", "d"], ["r"]), N("Add", ["x", "r"])], X3, [f32("s", 0.5), f32("l", 4.5), f32("d", 0.5)])
case("IsInf/IsNaN", [N("Div", ["x", "z"], ["d"]), N("IsInf", ["d"], ["i"], detect_negative=0), N("Cast", ["i"], to=F)], X4, [f32("z", 0.0)]) if False else None
case("Dropout inference", [N("Dropout", ["x", "r"], ["y"])], X4, [f32("r", 0.5)], 13)
case("GridSample bilinear", [N("Slice", ["x", "s0", "s1", "ax"], ["g4"]), N("Transpose", ["g4"], ["g"], perm=[0, 2, 3, 1]), N("Tanh", ["g"], ["gt"]), N("GridSample", ["x", "gt"], align_corners=0)], X4, [i64("s0", [0]), i64("s1", [2]), i64("ax", [1])], 16)
case("GridSample nearest border 20", [N("Slice", ["x", "s0", "s1", "ax"], ["g4"]), N("Transpose", ["g4"], ["g"], perm=[0, 2, 3, 1]), N("GridSample", ["x", "g"], mode="nearest", padding_mode="border", align_corners=1)], X4, [i64("s0", [0]), i64("s1", [2]), i64("ax", [1])], 20)
case("AffineGrid 20", [N("Flatten", ["x"], ["f"]), N("Slice", ["f", "s0", "s1", "ax"], ["t6"]), N("Reshape", ["t6", "sh"], ["t"]), N("AffineGrid", ["t", "size"], ["g"]), N("Reshape", ["g", "o"])],
     X4, [i64("s0", [0]), i64("s1", [6]), i64("ax", [1]), i64("sh", [-1, 2, 3]), i64("size", [1, 1, 3, 4]), i64("o", [-1, 24])], 20) if False else None
case("Col2Im 18", [N("Col2Im", ["x", "img", "blk"], strides=[1, 1])], ["N", 8, 9], [i64("img", [4, 4]), i64("blk", [2, 2])], 18)
case("DequantizeLinear per axis", [N("QuantizeLinear", ["x", "sc", "zp"], ["q"], axis=1), N("DequantizeLinear", ["q", "sc", "zp"], axis=1)], X4, [f32("sc", [0.01, 0.02, 0.05, 0.1]), c("zp", [0, 10, -5, 3], np.int8)], 13)
case("Det", [N("Det", ["x"])], ["N", 3, 3]) if False else None
case("Pow tensor", [N("Abs", ["x"], ["a"]), N("Pow", ["a", "e"])], X4, [f32("e", [1.5, 2, 0.5, 3, 1, 2.5])])
case("BatchNorm training_mode0 15", [N("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=1e-3)], X4, [w("s", 4), w("b", 4), w("m", 4), f32("v", [0.5, 1, 2, 0.1])], 15)
case("Expand 1 to rank up", [N("Expand", ["x", "sh"])], ["N", 1, 6], [i64("sh", [2, 1, 4, 1])]) if False else None
case("ccp crop pad", [N("CenterCropPad", ["x", "s"], axes=[2, 3])], X4, [i64("s", [4, 9])], 18)
case("ccp odd", [N("CenterCropPad", ["x", "s"], axes=[2, 3])], ["N", 4, 7, 8], [i64("s", [4, 11])], 18)
case("ccp negative axes nhwc", [N("CenterCropPad", ["x", "s"], axes=[-3, -2])], ["N", 7, 5, 3], [i64("s", [6, 2])], 18)
case("ccp same", [N("CenterCropPad", ["x", "s"], axes=[1])], X4, [i64("s", [4])], 18)
case("ccp no axes batch", [N("CenterCropPad", ["x", "s"])], X4, [i64("s", [1, 4, 3, 3])], 18)
def fold(name, C, img, blk, x_len=None, **a):
    import numpy as np
    sp = len(blk)
    strides = a.get("strides", [1]*sp); dil = a.get("dilations", [1]*sp); pads = a.get("pads", [0]*2*sp)
    L = 1
    for i in range(sp):
        L *= (img[i] + pads[i] + pads[sp+i] - dil[i]*(blk[i]-1) - 1)//strides[i] + 1
    case(name, [N("Col2Im", ["x", "img", "blk"], **a)], ["N", C*int(np.prod(blk)), L], [i64("img", img), i64("blk", blk)], 18)
fold("col2im basic", 2, [4, 4], [2, 2])
fold("col2im strides pads", 3, [7, 6], [3, 2], strides=[2, 2], pads=[1, 0, 1, 1])
fold("col2im dilations", 1, [9, 8], [2, 3], dilations=[2, 2], strides=[1, 2])
fold("col2im leftover", 2, [8, 8], [3, 3], strides=[2, 3])
fold("col2im 1d", 2, [10], [3], strides=[2], pads=[1, 1])
