"""I/O edge cases: several inputs and outputs, dtypes, names, constant outputs (stop 74)."""
# ruff: noqa: E501 (one case per line reads best)

import numpy as np  # noqa: F401
from onnx import TensorProto as T  # noqa: F401

from .common import I64, F, N, c, group, io  # noqa: F401
from .common import case_io as case

group("io")

case("constant second output", [N("Relu", ["x"], ["y"]), N("Add", ["a", "b"], ["z"])], [io("x", F, ["N", 4])], [io("y", F, ["N", 4]), io("z", F, [3])], [c("a", np.ones(3, np.float32)), c("b", np.ones(3, np.float32))])
case("output is input", [N("Relu", ["x"], ["y"])], [io("x", F, ["N", 4])], [io("y", F, ["N", 4]), io("x", F, ["N", 4])]) if False else None
case("identity output", [N("Identity", ["x"], ["y"])], [io("x", F, ["N", 4])], [io("y", F, ["N", 4])])
case("same tensor twice", [N("Relu", ["x"], ["y"]), N("Identity", ["y"], ["z"])], [io("x", F, ["N", 4])], [io("y", F, ["N", 4]), io("z", F, ["N", 4])])
case("unused input", [N("Relu", ["x"], ["y"])], [io("x", F, ["N", 4]), io("u", F, ["N", 2])], [io("y", F, ["N", 4])])
case("tf style names", [N("Relu", ["input:0"], ["output:0"])], [io("input:0", F, ["N", 4])], [io("output:0", F, ["N", 4])])
case("int32 input", [N("Cast", ["x"], ["f"], to=F), N("Relu", ["f"], ["y"])], [io("x", T.INT32, ["N", 4])], [io("y", F, ["N", 4])])
case("bool input", [N("Cast", ["x"], ["f"], to=F), N("Neg", ["f"], ["y"])], [io("x", T.BOOL, ["N", 4])], [io("y", F, ["N", 4])])
case("int64 output", [N("ArgMax", ["x"], ["y"], axis=1, keepdims=0)], [io("x", F, ["N", 4])], [io("y", I64, ["N"])])
case("bool output", [N("Greater", ["x", "z0"], ["y"])], [io("x", F, ["N", 4])], [io("y", T.BOOL, ["N", 4])], [c("z0", np.float32(0))])
case("fp16 input output", [N("Relu", ["x"], ["y"])], [io("x", T.FLOAT16, ["N", 4])], [io("y", T.FLOAT16, ["N", 4])])
case("double input", [N("Relu", ["x"], ["y"])], [io("x", T.DOUBLE, ["N", 4])], [io("y", T.DOUBLE, ["N", 4])])
case("scalar per sample output", [N("ReduceSum", ["x"], ["y"], keepdims=0, axes=[1])], [io("x", F, ["N", 4])], [io("y", F, ["N"])], (), 12)
case("two inputs broadcast", [N("Add", ["x", "m"], ["y"])], [io("x", F, ["N", 4]), io("m", F, ["N", 1])], [io("y", F, ["N", 4])])
case("input rank 1", [N("Relu", ["x"], ["y"])], [io("x", F, ["N"])], [io("y", F, ["N"])])
case("shape output", [N("Shape", ["x"], ["y"])], [io("x", F, ["N", 4])], [io("y", I64, [2])])
case("dynamic conv weights", [N("Reshape", ["x", "sh"], ["img"]), N("Conv", ["img", "k"], ["c"], pads=[1, 1, 1, 1]), N("Relu", ["c"], ["y"])], [io("x", F, ["N", 16]), io("k", F, [2, 1, 3, 3])], [io("y", F, ["N", 2, 4, 4])], [c("sh", np.array([-1, 1, 4, 4], np.int64))])
case("output without batch (sum over batch)", [N("ReduceSum", ["x"], ["y"], keepdims=0, axes=[0])], [io("x", F, ["N", 4])], [io("y", F, [4])], (), 12)
case("fixed batch 2 input", [N("Relu", ["x"], ["y"])], [io("x", F, [2, 4])], [io("y", F, [2, 4])])
case("no batch symbol: dim named differently", [N("Relu", ["x"], ["y"])], [io("x", F, ["batch_size", 4])], [io("y", F, ["batch_size", 4])])
case("two symbolic dims", [N("Relu", ["x"], ["y"])], [io("x", F, ["N", "L"])], [io("y", F, ["N", "L"])])
case("output name same as node name", [N("Relu", ["x"], ["Relu"], name="Relu")], [io("x", F, ["N", 4])], [io("Relu", F, ["N", 4])])
