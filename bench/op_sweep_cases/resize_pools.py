"""Opset-10 nearest resizes, SAME-padded pools (stop 74)."""
# ruff: noqa: E501 (one case per line reads best)

import numpy as np  # noqa: F401
from onnx import TensorProto  # noqa: F401

from .common import I64, X3, X4, F, N, c, case, f32, group, i64, w  # noqa: F401

group("resize_pools")

for sc in ([1, 1, 0.7, 2.5], [1, 1, 3, 0.34], [1, 1, 0.5, 0.6], [1, 1, 1.3, 1.7]):
    case(f"Resize opset 10 nearest {sc}", [N("Resize", ["x", "s"], mode="nearest")], ["N", 4, 7, 9], [f32("s", sc)], 10)
case("Resize opset 10 nearest Constant node", [N("Constant", [], ["s"], value=f32("v", [1, 1, 0.7, 2.5])), N("Resize", ["x", "s"], mode="nearest")], ["N", 4, 7, 9], (), 10)
case("MaxPool SAME_UPPER 17", [N("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")], ["N", 4, 7, 7], (), 17)
case("MaxPool SAME_LOWER 17", [N("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_LOWER")], ["N", 4, 7, 7], (), 17)
case("MaxPool VALID 17", [N("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="VALID")], ["N", 4, 7, 7], (), 17)
case("AveragePool SAME_LOWER 17", [N("AveragePool", ["x"], kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_LOWER")], ["N", 4, 7, 7], (), 17)
case("LpPool SAME_UPPER", [N("LpPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER", p=2)], ["N", 4, 7, 7], (), 18)
case("MaxPool 1d SAME_UPPER", [N("MaxPool", ["x"], kernel_shape=[3], strides=[2], auto_pad="SAME_UPPER")], ["N", 4, 9], (), 17)
case("Conv SAME_UPPER 1d", [N("Conv", ["x", "k"], auto_pad="SAME_UPPER", strides=[2])], ["N", 4, 9], [w("k", 5, 4, 3)])
case("ConvTranspose SAME_LOWER", [N("ConvTranspose", ["x", "k"], auto_pad="SAME_LOWER", strides=[2, 2])], X4, [w("k", 4, 3, 3, 3)])
case("Dropout mask 13", [N("Dropout", ["x"], ["d", "m"]), N("Cast", ["m"], ["mf"], to=F), N("Add", ["d", "mf"])], X4, (), 13)
case("Dropout mask 12 ratio", [N("Dropout", ["x", "r"], ["d", "m"]), N("Cast", ["m"], ["mf"], to=F), N("Add", ["d", "mf"])], X4, [f32("r", 0.3)], 12)
case("IsInf pos only", [N("Div", ["x", "z"], ["d"]), N("IsInf", ["d"], ["i"], detect_negative=0), N("Cast", ["i"], to=F)], X4, [f32("z", 0.0)])
case("IsInf neg only", [N("Div", ["x", "z"], ["d"]), N("IsInf", ["d"], ["i"], detect_positive=0), N("Cast", ["i"], to=F)], X4, [f32("z", 0.0)])
case("IsInf both", [N("Div", ["x", "z"], ["d"]), N("IsInf", ["d"], ["i"]), N("Cast", ["i"], to=F)], X4, [f32("z", 0.0)])
case("Resize 17 nearest asym floor 1.3 1.7", [N("Resize", ["x", "", "s"], mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")], ["N", 4, 7, 9], [f32("s", [1, 1, 1.3, 1.7])], 17)
case("Resize 17 nearest asym ceil 0.5 0.6", [N("Resize", ["x", "", "s"], mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="ceil")], ["N", 4, 7, 9], [f32("s", [1, 1, 0.5, 0.6])], 17)
case("Resize 17 nearest hp floor 1.3 1.7", [N("Resize", ["x", "", "s"], mode="nearest", nearest_mode="floor")], ["N", 4, 7, 9], [f32("s", [1, 1, 1.3, 1.7])], 17)
case("Resize 17 nearest 1.3 1.7", [N("Resize", ["x", "", "s"], mode="nearest")], ["N", 4, 7, 9], [f32("s", [1, 1, 1.3, 1.7])], 17)
case("Resize 17 linear 1.3 1.7", [N("Resize", ["x", "", "s"], mode="linear")], ["N", 4, 7, 9], [f32("s", [1, 1, 1.3, 1.7])], 17)
case("Resize 17 linear asym 1.3 1.7", [N("Resize", ["x", "", "s"], mode="linear", coordinate_transformation_mode="asymmetric")], ["N", 4, 7, 9], [f32("s", [1, 1, 1.3, 1.7])], 17)
case("Resize 17 cubic 0.6 1.7", [N("Resize", ["x", "", "s"], mode="cubic")], ["N", 4, 7, 9], [f32("s", [1, 1, 0.6, 1.7])], 17)
