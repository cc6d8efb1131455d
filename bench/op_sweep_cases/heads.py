"""A model's last layers as exporters write them (stop 77): detection decoding (YOLO's grid and
anchors, SSD's priors), segmentation logits upsampled and argmaxed, keypoints from heatmaps
by argmax and integer division, top-k classes. The heads end in the graph's output, so what
happens after the last convolution is what is compared."""
# ruff: noqa: E501 (one case per line reads best)

import numpy as np

from .common import I64, F, N, c, case, f32, group, i64, w  # noqa: F401

group("heads")

XF = ["N", 8, 6, 6]  # a feature map
HEAD = [N("Conv", ["x", "hw"], ["h"])]  # 1x1 conv to 3 anchors x (4 box + 1 obj + 2 classes) = 21
HEAD_INITS = [w("hw", 21, 8, 1, 1)]
gy, gx = np.meshgrid(np.arange(6), np.arange(6), indexing="ij")
GRID = np.stack([gx, gy], -1).reshape(1, 1, 6, 6, 2).astype(np.float32)
ANCHORS = np.array([[10, 13], [16, 30], [33, 23]], np.float32).reshape(1, 3, 1, 1, 2)
YOLO = HEAD + [N("Reshape", ["h", "s5"], ["r"]), N("Transpose", ["r"], ["t"], perm=[0, 1, 3, 4, 2]), N("Sigmoid", ["t"], ["sg"]),
               N("Split", ["sg", "sp"], ["xy", "wh", "rest"], axis=4), N("Mul", ["xy", "two"], ["xy2"]), N("Sub", ["xy2", "half"], ["xy3"]), N("Add", ["xy3", "grid"], ["xy4"]), N("Mul", ["xy4", "stride"], ["xyo"]),
               N("Mul", ["wh", "two"], ["wh2"]), N("Pow", ["wh2", "two"], ["wh3"]), N("Mul", ["wh3", "anchors"], ["who"]), N("Concat", ["xyo", "who", "rest"], ["dec"], axis=4), N("Reshape", ["dec", "flat"], ["y"])]
YOLO_INITS = HEAD_INITS + [i64("s5", [-1, 3, 7, 6, 6]), i64("sp", [2, 2, 3]), f32("two", 2.0), f32("half", 0.5), f32("grid", GRID), f32("stride", 8.0), f32("anchors", ANCHORS), i64("flat", [0, -1, 7])]
case("YOLOv5 decode (grid, anchors, Split, Pow)", YOLO, XF, YOLO_INITS, 13)
case("YOLOX decode (exp wh)", HEAD + [N("Reshape", ["h", "s5"], ["r"]), N("Transpose", ["r"], ["t"], perm=[0, 1, 3, 4, 2]), N("Slice", ["t", "z", "two_i", "ax4"], ["xy"]), N("Slice", ["t", "two_i", "four", "ax4"], ["wh"]), N("Slice", ["t", "four", "big", "ax4"], ["sc"]),
     N("Add", ["xy", "grid"], ["xyg"]), N("Mul", ["xyg", "stride"], ["xyo"]), N("Exp", ["wh"], ["we"]), N("Mul", ["we", "stride"], ["who"]), N("Sigmoid", ["sc"], ["so"]), N("Concat", ["xyo", "who", "so"], ["dec"], axis=4), N("Reshape", ["dec", "flat"], ["y"])], XF,
     HEAD_INITS + [i64("s5", [-1, 3, 7, 6, 6]), i64("z", [0]), i64("two_i", [2]), i64("four", [4]), i64("big", [100]), i64("ax4", [4]), f32("grid", GRID), f32("stride", 8.0), i64("flat", [0, -1, 7])], 13, scale=0.5)
PRIORS = np.random.default_rng(3).uniform(0.1, 0.9, (1, 108, 4)).astype(np.float32)
case("SSD decode (center-size priors, softmax over classes)", HEAD + [N("Transpose", ["h"], ["t"], perm=[0, 2, 3, 1]), N("Reshape", ["t", "s3"], ["r"]), N("Slice", ["r", "z", "four", "ax2"], ["loc"]), N("Slice", ["r", "four", "big", "ax2"], ["conf"]), N("Softmax", ["conf"], ["p"], axis=-1),
     N("Slice", ["loc", "z", "two_i", "ax2"], ["cxy"]), N("Slice", ["loc", "two_i", "four", "ax2"], ["lwh"]), N("Slice", ["pri", "z", "two_i", "ax2"], ["pxy"]), N("Slice", ["pri", "two_i", "four", "ax2"], ["pwh"]),
     N("Mul", ["cxy", "var0"], ["c1"]), N("Mul", ["c1", "pwh"], ["c2"]), N("Add", ["c2", "pxy"], ["ctr"]), N("Mul", ["lwh", "var1"], ["l1"]), N("Exp", ["l1"], ["l2"]), N("Mul", ["l2", "pwh"], ["size"]),
     N("Div", ["size", "two"], ["hs"]), N("Sub", ["ctr", "hs"], ["lo"]), N("Add", ["ctr", "hs"], ["hi"]), N("Concat", ["lo", "hi", "p"], ["y"], axis=2)], XF,
     [w("hw", 21, 8, 1, 1), i64("s3", [0, 108, 7]), i64("z", [0]), i64("two_i", [2]), i64("four", [4]), i64("big", [100]), i64("ax2", [2]), f32("pri", PRIORS), f32("var0", 0.1), f32("var1", 0.2), f32("two", 2.0)], 13)
case("segmentation: logits upsampled 4x bilinear, softmax", HEAD + [N("Resize", ["h", "", "sc"], ["u"], mode="linear", coordinate_transformation_mode="half_pixel"), N("Softmax", ["u"], ["y"], axis=1)], XF, HEAD_INITS + [f32("sc", [1, 1, 4, 4])], 13)
case("segmentation: argmax class map, upsampled nearest", HEAD + [N("ArgMax", ["h"], ["am"], axis=1, keepdims=1), N("Cast", ["am"], ["af"], to=F), N("Resize", ["af", "", "sc"], ["y"], mode="nearest")], XF, HEAD_INITS + [f32("sc", [1, 1, 2, 2])], 13)
case("keypoints: argmax of flattened heatmaps, divided into rows and columns", HEAD + [N("Reshape", ["h", "s3"], ["r"]), N("ArgMax", ["r"], ["am"], axis=2, keepdims=0), N("Div", ["am", "six"], ["row"]), N("Mod", ["am", "six"], ["col"]), N("ReduceMax", ["r"], ["conf"], axes=[2], keepdims=0),
     N("Cast", ["row"], ["rf"], to=F), N("Cast", ["col"], ["cf"], to=F), N("Unsqueeze", ["rf", "ax2"], ["r2"]), N("Unsqueeze", ["cf", "ax2"], ["c2"]), N("Unsqueeze", ["conf", "ax2"], ["f2"]), N("Concat", ["c2", "r2", "f2"], ["y"], axis=2)], XF,
     HEAD_INITS + [i64("s3", [0, 21, 36]), i64("six", 6), i64("ax2", [2])], 13)
case("keypoints: soft-argmax (softmax-weighted coordinates)", HEAD + [N("Reshape", ["h", "s3"], ["r"]), N("Softmax", ["r"], ["p"], axis=-1), N("MatMul", ["p", "coords"], ["y"])], XF, HEAD_INITS + [i64("s3", [0, 21, 36]), f32("coords", GRID.reshape(36, 2))], 13)
case("classifier: top-5 classes and their probabilities", [N("GlobalAveragePool", ["x"], ["g"]), N("Flatten", ["g"], ["f"]), N("Gemm", ["f", "cw", "cb"], ["lg"], transB=1), N("Softmax", ["lg"], ["p"], axis=-1), N("TopK", ["p", "k5"], ["v", "i"], axis=-1), N("Cast", ["i"], ["if"], to=F), N("Concat", ["v", "if"], ["y"], axis=1)], XF,
     [w("cw", 10, 8), w("cb", 10), i64("k5", [5])], 13)
case("classifier: normalized image in the graph (mean / std, uint8-like scale)", [N("Mul", ["x", "s255"], ["px"]), N("Div", ["px", "s255"], ["u"]), N("Sub", ["u", "mean"], ["m"]), N("Div", ["m", "std"], ["n"]), N("Conv", ["n", "hw"], ["y"])], XF,
     [f32("s255", 255.0), f32("mean", np.full((8, 1, 1), 0.45)), f32("std", np.full((8, 1, 1), 0.225)), w("hw", 21, 8, 1, 1)], 13)
case("anchor-free heatmap peaks (3x3 max pool equals the value)", HEAD + [N("Sigmoid", ["h"], ["s"]), N("MaxPool", ["s"], ["mp"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]), N("Equal", ["s", "mp"], ["peak"]), N("Cast", ["peak"], ["pf"], to=F), N("Mul", ["s", "pf"], ["y"])], XF, HEAD_INITS, 13)
case("TopK 5 of 10 alone", [N("TopK", ["x", "k5"], ["y", "i"], axis=-1)], ["N", 10], [i64("k5", [5])], 13)
case("TopK 5 of 10, indices as float", [N("TopK", ["x", "k5"], ["v", "i"], axis=-1), N("Cast", ["i"], ["y"], to=F)], ["N", 10], [i64("k5", [5])], 13)
case("TopK 5 of 10, values and indices concatenated", [N("TopK", ["x", "k5"], ["v", "i"], axis=-1), N("Cast", ["i"], ["if"], to=F), N("Concat", ["v", "if"], ["y"], axis=1)], ["N", 10], [i64("k5", [5])], 13)
case("softmax then TopK 5 of 10", [N("Softmax", ["x"], ["p"], axis=-1), N("TopK", ["p", "k5"], ["y", "i"], axis=-1)], ["N", 10], [i64("k5", [5])], 13)
case("Gemm 8 -> 10 with a bias", [N("Gemm", ["x", "cw", "cb"], ["y"], transB=1)], ["N", 8], [w("cw", 10, 8), w("cb", 10)], 13)
