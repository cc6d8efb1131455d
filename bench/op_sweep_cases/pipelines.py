"""An image model's pre- and post-processing inside the graph (stop 78), as exporters and
deployment scripts put it there: uint8 images in NHWC cast, scaled and normalized per
channel; BGR to RGB; a letterbox pad; tf2onnx's transposes around convolutions; float16
weights or a float16 model behind float32 inputs; outputs as uint8 images, masks, class maps
and top-k. Each reaches a convolution, so the CPU's blocked layout meets what these do."""
# ruff: noqa: E501 (one case per line reads best)

import numpy as np
from onnx import TensorProto as T

from .common import I64, F, N, c, case_io, f32, group, i64, io, known, w

group("pipelines")

U8, F16 = T.UINT8, T.FLOAT16
CONV8 = [w("k", 8, 3, 3, 3)]  # 3 -> 8 channels, 3x3
NORM = [f32("scale", 255.0), f32("mean", [0.485, 0.456, 0.406]), f32("std", [0.229, 0.224, 0.225])]
NHWC_NORMALIZED = [N("Cast", ["x"], ["f"], to=F), N("Div", ["f", "scale"], ["f1"]), N("Sub", ["f1", "mean"], ["f2"]), N("Div", ["f2", "std"], ["f3"]), N("Transpose", ["f3"], ["img"], perm=[0, 3, 1, 2])]
CONV_RELU = [N("Conv", ["img", "k"], ["cv"], pads=[1, 1, 1, 1]), N("Relu", ["cv"], ["y"])]
OUT8 = [io("y", F, ["N", 8, 8, 8])]

case_io("uint8 NHWC image: cast, /255, mean and std per channel, transpose", NHWC_NORMALIZED + CONV_RELU, [io("x", U8, ["N", 8, 8, 3])], OUT8, CONV8 + NORM)
case_io("uint8 NHWC image: normalized by one Mul and Add (folded constants)", [N("Cast", ["x"], ["f"], to=F), N("Mul", ["f", "a"], ["f1"]), N("Add", ["f1", "b"], ["f2"]), N("Transpose", ["f2"], ["img"], perm=[0, 3, 1, 2])] + CONV_RELU,
        [io("x", U8, ["N", 8, 8, 3])], OUT8, CONV8 + [f32("a", [1 / 58.4, 1 / 57.1, 1 / 57.4]), f32("b", [-2.1, -2.0, -1.8])])
case_io("uint8 NCHW image: mean [1, 3, 1, 1] subtracted", [N("Cast", ["x"], ["f"], to=F), N("Sub", ["f", "m4"], ["img"])] + CONV_RELU, [io("x", U8, ["N", 3, 8, 8])], OUT8, CONV8 + [f32("m4", np.array([1.5, 2.5, 3.5]).reshape(1, 3, 1, 1))])
case_io("uint8 letterbox pad with 114, then normalized", [N("Pad", ["x", "lb", "gray"], ["xp"]), N("Cast", ["xp"], ["f"], to=F), N("Div", ["f", "scale"], ["f1"]), N("Transpose", ["f1"], ["img"], perm=[0, 3, 1, 2])] + CONV_RELU,
        [io("x", U8, ["N", 6, 8, 3])], OUT8, CONV8 + NORM[:1] + [i64("lb", [0, 1, 0, 0, 0, 1, 0, 0]), c("gray", np.uint8(114))])
case_io("uint8 NHWC image resized in the graph (bilinear, NHWC scales)", NHWC_NORMALIZED[:2] + [N("Resize", ["f1", "", "rs"], ["f2"], mode="linear"), N("Transpose", ["f2"], ["img"], perm=[0, 3, 1, 2])] + CONV_RELU,
        [io("x", U8, ["N", 4, 4, 3])], OUT8, CONV8 + NORM[:1] + [f32("rs", [1, 2, 2, 1])])
case_io("uint8 NHWC image resized to sizes (nearest, opset 18 axes)", NHWC_NORMALIZED[:2] + [N("Resize", ["f1", "", "", "sz"], ["f2"], mode="nearest", axes=[1, 2]), N("Transpose", ["f2"], ["img"], perm=[0, 3, 1, 2])] + CONV_RELU,
        [io("x", U8, ["N", 4, 4, 3])], OUT8, CONV8 + NORM[:1] + [i64("sz", [8, 8])], 18)
case_io("NHWC resized to sizes, batch given as 1", [N("Resize", ["x", "", "", "sz"], ["f2"], mode="nearest"), N("Transpose", ["f2"], ["img"], perm=[0, 3, 1, 2])] + CONV_RELU,
        [io("x", F, [1, 4, 4, 3])], [io("y", F, [1, 8, 8, 8])], CONV8 + [i64("sz", [1, 8, 8, 3])])
case_io("NHWC resized keeping the aspect ratio (not_larger)", [N("Resize", ["x", "", "", "sz"], ["f2"], mode="linear", axes=[1, 2], keep_aspect_ratio_policy="not_larger"), N("Transpose", ["f2"], ["img"], perm=[0, 3, 1, 2])] + CONV_RELU,
        [io("x", F, ["N", 4, 6, 3])], [io("y", F, ["N", 8, 8, 12])], CONV8 + [i64("sz", [9, 12])], 18)
case_io("NHWC resized by half_pixel_symmetric", [N("Resize", ["x", "", "rs"], ["f2"], mode="linear", coordinate_transformation_mode="half_pixel_symmetric"), N("Transpose", ["f2"], ["img"], perm=[0, 3, 1, 2])] + CONV_RELU,
        [io("x", F, ["N", 4, 4, 3])], OUT8, CONV8 + [f32("rs", [1, 2, 2, 1])], 19)
case_io("NHWC resized with antialias (by 0.5)", [N("Resize", ["x", "", "rs"], ["f2"], mode="linear", antialias=1), N("Transpose", ["f2"], ["img"], perm=[0, 3, 1, 2])] + CONV_RELU,
        [io("x", F, ["N", 16, 16, 3])], OUT8, CONV8 + [f32("rs", [1, 0.5, 0.5, 1])], 18)
case_io("NHWC resize by 1.5 (scales that give no whole sizes)", [N("Resize", ["x", "", "rs"], ["f2"], mode="linear"), N("Transpose", ["f2"], ["img"], perm=[0, 3, 1, 2])] + CONV_RELU,
        [io("x", F, ["N", 5, 5, 3])], [io("y", F, ["N", 8, 7, 7])], CONV8 + [f32("rs", [1, 1.5, 1.5, 1])])
case_io("[N, L, C] features resized along L (linear)", [N("Resize", ["x", "", "rs"], ["y"], mode="linear")], [io("x", F, ["N", 6, 4])], [io("y", F, ["N", 12, 4])], [f32("rs", [1, 2, 1])])
case_io("uint16 depth image in millimetres", [N("Cast", ["x"], ["f"], to=F), N("Div", ["f", "mm"], ["img"]), N("Conv", ["img", "k1"], ["cv"], pads=[1, 1, 1, 1]), N("Relu", ["cv"], ["y"])], [io("x", T.UINT16, ["N", 1, 8, 8])], OUT8, [f32("mm", 1000.0), w("k1", 8, 1, 3, 3)])
case_io("BGR to RGB by a reversed slice", [N("Slice", ["x", "s2", "smin", "ax1", "m1"], ["img"])] + CONV_RELU, [io("x", F, ["N", 3, 8, 8])], OUT8, CONV8 + [i64("s2", [2]), i64("smin", [-(2 ** 63)]), i64("ax1", [1]), i64("m1", [-1])])
case_io("BGR to RGB by Gather [2, 1, 0]", [N("Gather", ["x", "bgr"], ["img"], axis=1)] + CONV_RELU, [io("x", F, ["N", 3, 8, 8])], OUT8, CONV8 + [i64("bgr", [2, 1, 0])])
case_io("BGR to RGB by Split and Concat", [N("Split", ["x"], ["b", "g", "r"], axis=1, num_outputs=3), N("Concat", ["r", "g", "b"], ["img"], axis=1)] + CONV_RELU, [io("x", F, ["N", 3, 8, 8])], OUT8, CONV8, 18)
case_io("grayscale by weights per channel and a sum", [N("Mul", ["x", "luma"], ["l"]), N("ReduceSum", ["l", "ax1"], ["img"], keepdims=1), N("Conv", ["img", "k1"], ["cv"], pads=[1, 1, 1, 1]), N("Relu", ["cv"], ["y"])], [io("x", F, ["N", 3, 8, 8])], OUT8,
        [f32("luma", np.array([0.299, 0.587, 0.114]).reshape(1, 3, 1, 1)), i64("ax1", [1]), w("k1", 8, 1, 3, 3)])

IMG = [io("x", F, ["N", 3, 8, 8])]
TO_IMAGE = [N("Conv", ["x", "k3"], ["cv"], pads=[1, 1, 1, 1]), N("Sigmoid", ["cv"], ["s"]), N("Mul", ["s", "scale"], ["s255"])]
case_io("uint8 NHWC image out: round, clip, transpose, cast", TO_IMAGE + [N("Round", ["s255"], ["r"]), N("Clip", ["r", "lo", "hi"], ["cl"]), N("Transpose", ["cl"], ["t"], perm=[0, 2, 3, 1]), N("Cast", ["t"], ["y"], to=U8)], IMG, [io("y", U8, ["N", 8, 8, 3])],
        [w("k3", 3, 3, 3, 3), f32("scale", 255.0), f32("lo", 0.0), f32("hi", 255.0)])
case_io("uint8 image out by truncation (no Round)", TO_IMAGE + [N("Cast", ["s255"], ["y"], to=U8)], IMG, [io("y", U8, ["N", 3, 8, 8])], [w("k3", 3, 3, 3, 3), f32("scale", 255.0)])
case_io("class map: ArgMax over channels as uint8", [N("Conv", ["x", "k5"], ["cv"], pads=[1, 1, 1, 1]), N("ArgMax", ["cv"], ["a"], axis=1, keepdims=0), N("Cast", ["a"], ["y"], to=U8)], IMG, [io("y", U8, ["N", 8, 8])], [w("k5", 5, 3, 3, 3)])
case_io("mask: sigmoid > 0.5 as bool and as uint8 x 255", [N("Conv", ["x", "k1o"], ["cv"], pads=[1, 1, 1, 1]), N("Sigmoid", ["cv"], ["s"]), N("Greater", ["s", "half"], ["y"]), N("Cast", ["y"], ["m"], to=U8), N("Mul", ["m", "u255"], ["z"])], IMG,
        [io("y", T.BOOL, ["N", 1, 8, 8]), io("z", U8, ["N", 1, 8, 8])], [w("k1o", 1, 3, 3, 3), f32("half", 0.5), c("u255", np.uint8(255))])
case_io("logits resized to the input's size (sizes from Shape)", [N("Conv", ["x", "k5"], ["cv"], strides=[2, 2], pads=[1, 1, 1, 1]), N("Shape", ["x"], ["sx"]), N("Slice", ["sx", "two", "four"], ["hw"]), N("Shape", ["cv"], ["sc"]), N("Slice", ["sc", "zero", "two"], ["nc"]),
                                                                  N("Concat", ["nc", "hw"], ["size"], axis=0), N("Resize", ["cv", "", "", "size"], ["y"], mode="linear")], IMG, [io("y", F, ["N", 5, 8, 8])], [w("k5", 5, 3, 3, 3), i64("two", [2]), i64("four", [4]), i64("zero", [0])])
case_io("top-5 classes: values and int64 indices", [N("Conv", ["x", "k3"], ["cv"], pads=[1, 1, 1, 1]), N("GlobalAveragePool", ["cv"], ["g"]), N("Flatten", ["g"], ["fl"]), N("Gemm", ["fl", "fc", "fb"], ["lg"], transB=1), N("Softmax", ["lg"], ["p"], axis=1), N("TopK", ["p", "k"], ["y", "z"], axis=1)], IMG,
        [io("y", F, ["N", 5]), io("z", I64, ["N", 5])], [w("k3", 3, 3, 3, 3), w("fc", 10, 3), w("fb", 10), i64("k", [5])])

NHWC = [io("x", F, ["N", 8, 8, 3])]
case_io("tf2onnx: transposes around each convolution, NHWC between", [N("Transpose", ["x"], ["a"], perm=[0, 3, 1, 2]), N("Conv", ["a", "k"], ["b"], pads=[1, 1, 1, 1]), N("Transpose", ["b"], ["c0"], perm=[0, 2, 3, 1]), N("Relu", ["c0"], ["c1"]), N("Mul", ["c1", "per_c"], ["c2"]),
                                                                      N("Transpose", ["c2"], ["d"], perm=[0, 3, 1, 2]), N("Conv", ["d", "k2"], ["e"], pads=[1, 1, 1, 1]), N("Transpose", ["e"], ["y"], perm=[0, 2, 3, 1])], NHWC, [io("y", F, ["N", 8, 8, 16])], CONV8 + [w("per_c", 8), w("k2", 16, 8, 3, 3)])
case_io("tf2onnx: NHWC residual add across two transposes", [N("Transpose", ["x"], ["a"], perm=[0, 3, 1, 2]), N("Conv", ["a", "k"], ["b"], pads=[1, 1, 1, 1]), N("Transpose", ["b"], ["c0"], perm=[0, 2, 3, 1]), N("Relu", ["c0"], ["c1"]),
                                                                   N("Transpose", ["c1"], ["d"], perm=[0, 3, 1, 2]), N("Conv", ["d", "k8"], ["e"], pads=[1, 1, 1, 1]), N("Transpose", ["e"], ["e1"], perm=[0, 2, 3, 1]), N("Add", ["e1", "c1"], ["y"])], NHWC, [io("y", F, ["N", 8, 8, 8])], CONV8 + [w("k8", 8, 8, 3, 3)])

FP16_CONV = [c("k16", (0.3 * np.random.default_rng(1).standard_normal((8, 3, 3, 3))).astype(np.float16)), c("b16", (0.1 * np.arange(8)).astype(np.float16))]
case_io("float16 model behind float32 I/O (keep_io_types)", [N("Cast", ["x"], ["h"], to=F16), N("Conv", ["h", "k16", "b16"], ["cv"], pads=[1, 1, 1, 1]), N("Relu", ["cv"], ["r"]), N("Cast", ["r"], ["y"], to=F)], IMG, OUT8, FP16_CONV)
case_io("float16 model, float16 I/O", [N("Conv", ["x", "k16", "b16"], ["cv"], pads=[1, 1, 1, 1]), N("Sigmoid", ["cv"], ["y"])], [io("x", F16, ["N", 3, 8, 8])], [io("y", F16, ["N", 8, 8, 8])], FP16_CONV)
case_io("float16 weights cast to float32 at load", [N("Cast", ["k16"], ["k32"], to=F), N("Cast", ["b16"], ["b32"], to=F), N("Conv", ["x", "k32", "b32"], ["cv"], pads=[1, 1, 1, 1]), N("Relu", ["cv"], ["y"])], IMG, OUT8, FP16_CONV)
case_io("float64 output of a float32 model", [N("Conv", ["x", "k"], ["cv"], pads=[1, 1, 1, 1]), N("Cast", ["cv"], ["y"], to=T.DOUBLE)], IMG, [io("y", T.DOUBLE, ["N", 8, 8, 8])], CONV8)
case_io("a bool mask input selecting pixels", [N("Unsqueeze", ["m", "ax1"], ["m4"]), N("Where", ["m4", "x", "zero"], ["img"])] + CONV_RELU, [io("x", F, ["N", 3, 8, 8]), io("m", T.BOOL, ["N", 8, 8])], OUT8, CONV8 + [i64("ax1", [1]), f32("zero", 0.0)])
for name in ("float16 model behind float32 I/O (keep_io_types)", "float16 model, float16 I/O"):
    known(name, "onnxruntime's CPU has no float16 Conv: it computes the convolution and what "
          "follows in float32 and rounds once; cw rounds each operator's result to float16, as "
          "ONNX says (its sums in float32): within 1.2 float16 ulps of the exact value")
