"""Resize forms of opsets 18-19 and inexact sizes (stop 74)."""
# ruff: noqa: E501 (one case per line reads best)

import numpy as np  # noqa: F401
from onnx import TensorProto  # noqa: F401

from .common import I64, X3, X4, F, N, c, case, f32, group, i64, w  # noqa: F401

group("resize")

X79 = ["N", 4, 7, 9]
case("keep_aspect not_larger inexact", [N("Resize", ["x", "", "", "sz"], mode="linear", axes=[2, 3], keep_aspect_ratio_policy="not_larger")], X79, [i64("sz", [10, 20])], 18)
case("keep_aspect not_smaller", [N("Resize", ["x", "", "", "sz"], mode="nearest", axes=[2, 3], keep_aspect_ratio_policy="not_smaller")], X79, [i64("sz", [14, 3])], 18)
case("keep_aspect not_larger full sizes", [N("Resize", ["x", "", "", "sz"], mode="cubic", keep_aspect_ratio_policy="not_larger")], X79, [i64("sz", [1, 4, 14, 100])], 18)
case("symmetric inexact linear", [N("Resize", ["x", "", "s"], mode="linear", coordinate_transformation_mode="half_pixel_symmetric")], X79, [f32("s", [1, 1, 1.3, 0.5])], 19)
case("symmetric sizes", [N("Resize", ["x", "", "", "sz"], mode="linear", coordinate_transformation_mode="half_pixel_symmetric")], ["N", 4, 7, 9], [i64("sz", [1, 4, 10, 5])], 19) if False else None
case("axes sizes inexact", [N("Resize", ["x", "", "", "sz"], mode="linear", axes=[3])], X79, [i64("sz", [13])], 18)
case("axes scales one axis inexact", [N("Resize", ["x", "", "s"], mode="nearest", axes=[-2])], X79, [f32("s", [1.6])], 18)
case("antialias inexact", [N("Resize", ["x", "", "s"], mode="linear", antialias=1)], X79, [f32("s", [1, 1, 0.6, 0.45])], 18)
case("scales 0.5 odd", [N("Resize", ["x", "", "s"], mode="linear")], X79, [f32("s", [1, 1, 0.5, 0.5])], 13)
case("scales 1 everywhere", [N("Resize", ["x", "", "s"], mode="linear")], X79, [f32("s", [1, 1, 1, 1])], 13)
case("1d resize 3d input", [N("Resize", ["x", "", "s"], mode="linear")], ["N", 4, 9], [f32("s", [1, 1, 1.7])], 13)
case("3d resize 5d input", [N("Resize", ["x", "", "s"], mode="nearest")], ["N", 2, 3, 5, 7], [f32("s", [1, 1, 1.5, 2, 0.7])], 13)
