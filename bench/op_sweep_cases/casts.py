"""float16 and bfloat16 round trips (stops 74, 75)."""
# ruff: noqa: E501 (one case per line reads best)

import numpy as np  # noqa: F401
from onnx import TensorProto  # noqa: F401

from .common import I64, X3, X4, F, N, c, case, f32, group, i64, known, w  # noqa: F401

group("casts")

case("Cast fp16 round trip", [N("Cast", ["x"], ["h"], to=TensorProto.FLOAT16), N("Cast", ["h"], to=F)], X4, (), 13, scale=3)
case("Cast fp16 Relu", [N("Cast", ["x"], ["h"], to=TensorProto.FLOAT16), N("Relu", ["h"], ["r"]), N("Cast", ["r"], to=F)], X4, (), 13, scale=3)
case("Cast fp16 Mul", [N("Cast", ["x"], ["h"], to=TensorProto.FLOAT16), N("Mul", ["h", "hh"], ["m"]), N("Cast", ["m"], to=F)], X4, [c("hh", 1.5, np.float16)], 13)
case("Cast fp16 Add", [N("Cast", ["x"], ["h"], to=TensorProto.FLOAT16), N("Add", ["h", "h"], ["m"]), N("Cast", ["m"], to=F)], X4, (), 13)
case("Cast bf16 round trip", [N("Cast", ["x"], ["h"], to=TensorProto.BFLOAT16), N("Cast", ["h"], to=F)], X4, (), 13, scale=3)
for name in ("Cast fp16 Relu", "Cast fp16 Mul", "Cast fp16 Add"):
    known(name, "onnxruntime's CPU has no float16 kernel for the operator between the casts: it "
          "computes in float32 and drops the casts; cw rounds to float16 as ONNX says")
