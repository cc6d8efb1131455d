"""Integer arithmetic with both signs, and values the input computes where other groups have
constants (stop 77): ONNX defines integer division, remainders, shifts, ties and negative
indices exactly, so anything but onnxruntime's integers is wrong. `q` is trunc(4 x) (from -8
to 8 or so at the sweep's inputs) in the type the case names; the result goes back to float."""
# ruff: noqa: E501 (one case per line reads best)

import numpy as np  # noqa: F401
from onnx import TensorProto

from .common import I64, X3, F, N, c, case, f32, group, i64  # noqa: F401

group("integers")

I32, I8, U8, I16 = TensorProto.INT32, TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16
NP = {I64: np.int64, I32: np.int32, I8: np.int8, U8: np.uint8, I16: np.int16}
DIVISORS = [3, -3, 2, -2, 5, -5, 7, -7]  # along the last axis (8)


def q_then(name, nodes, dtype=I64, inits=(), opset=17, scale=4.0, back=True):
    """x -> q = Cast(x * scale) to `dtype` -> `nodes` (reading q, ending in t) -> y = Cast(t)
    to float (`back`), or t is y."""
    pre = [N("Mul", ["x", "k"], ["xk"]), N("Cast", ["xk"], ["q"], to=dtype)]
    post = [N("Cast", ["t"], ["y"], to=F) if back else N("Identity", ["t"], ["y"])]
    case(name, pre + list(nodes) + post, X3, [f32("k", scale), *inits], opset)


def ints(name, values, dtype):
    return c(name, values, NP[dtype])


for dtype, label in ((I64, "int64"), (I32, "int32"), (I8, "int8"), (I16, "int16")):
    q_then(f"Div {label} by divisors of both signs", [N("Div", ["q", "d"], ["t"])], dtype, [ints("d", DIVISORS, dtype)])
    q_then(f"Mod {label} fmod 0, divisors of both signs", [N("Mod", ["q", "d"], ["t"])], dtype, [ints("d", DIVISORS, dtype)], 13)
    q_then(f"Mod {label} fmod 1, divisors of both signs", [N("Mod", ["q", "d"], ["t"], fmod=1)], dtype, [ints("d", DIVISORS, dtype)], 13)
q_then("Div int32 by itself shifted (no zero)", [N("Abs", ["q"], ["a"]), N("Add", ["a", "one"], ["a1"]), N("Neg", ["a1"], ["na"]), N("Div", ["q", "na"], ["t"])], I32, [ints("one", 1, I32)])
case("Mod float fmod 1, divisors of both signs", [N("Mod", ["x", "d"], fmod=1)], X3, [f32("d", [0.7, -0.7, 1.5, -1.5, 0.3, -0.3, 2.0, -2.0])], 13)
q_then("Abs Neg Sign int32", [N("Abs", ["q"], ["a"]), N("Neg", ["q"], ["n"]), N("Sign", ["q"], ["s"]), N("Mul", ["a", "s"], ["as"]), N("Add", ["as", "n"], ["t"])], I32)
q_then("Clip int64 with integer bounds", [N("Clip", ["q", "lo", "hi"], ["t"])], I64, [ints("lo", -3, I64), ints("hi", 2, I64)], 13)
q_then("Clip int8 min only", [N("Clip", ["q", "lo"], ["t"])], I8, [ints("lo", -2, I8)], 13)
q_then("Max and Min of int32", [N("Max", ["q", "lo"], ["m"]), N("Min", ["m", "hi"], ["t"])], I32, [ints("lo", -1, I32), ints("hi", 3, I32)], 13)
q_then("Pow int64 squared and cubed", [N("Pow", ["q", "two"], ["p2"]), N("Pow", ["q", "three"], ["p3"]), N("Add", ["p2", "p3"], ["t"])], I64, [ints("two", 2, I64), ints("three", 3, I64)], 15)
q_then("Pow float by int exponent", [N("Pow", ["x", "q"], ["t"])], I64, (), 15, scale=1.0, back=False)
q_then("BitwiseAnd Or Xor int32 of both signs", [N("BitwiseAnd", ["q", "m"], ["a"]), N("BitwiseOr", ["q", "m"], ["o"]), N("BitwiseXor", ["a", "o"], ["t"])], I32, [ints("m", [5, -6, 3, -1, 12, 7, -8, 0], I32)], 18)
q_then("BitShift uint8 left and right", [N("Abs", ["q"], ["a"]), N("BitShift", ["a", "s"], ["l"], direction="LEFT"), N("BitShift", ["l", "s2"], ["t"], direction="RIGHT")], U8, [ints("s", [0, 1, 2, 3, 4, 5, 1, 2], U8), ints("s2", 1, U8)], 11, scale=1.5)
q_then("int8 Add that overflows (wraps)", [N("Mul", ["q", "f"], ["m"]), N("Add", ["m", "m"], ["t"])], I8, [ints("f", 20, I8)])
q_then("Cast int64 to uint8 (wraps)", [N("Cast", ["q"], ["t"], to=U8)], I64, scale=60.0)
q_then("Cast int32 to bool and back", [N("Cast", ["q"], ["b"], to=TensorProto.BOOL), N("Cast", ["b"], ["t"], to=I32)], I32)
q_then("Equal Greater LessOrEqual of int32", [N("Equal", ["q", "z"], ["e"]), N("Greater", ["q", "z"], ["g"]), N("LessOrEqual", ["q", "one"], ["l"]), N("Or", ["e", "g"], ["eg"]), N("Xor", ["eg", "l"], ["t"])], I32, [ints("z", 0, I32), ints("one", 1, I32)], 16)
q_then("Where picks int64", [N("Greater", ["q", "z"], ["g"]), N("Where", ["g", "q", "d"], ["t"])], I64, [ints("z", 0, I64), ints("d", DIVISORS, I64)])
q_then("CumSum int32 exclusive reverse", [N("CumSum", ["q", "ax"], ["t"], exclusive=1, reverse=1)], I32, [i64("ax", 2)])
q_then("ReduceSum ReduceProd ReduceMax of int64", [N("ReduceSum", ["q", "ax"], ["s"], keepdims=0), N("ReduceMax", ["q"], ["m"], axes=[2], keepdims=0), N("ReduceProd", ["q"], ["p"], axes=[2], keepdims=0), N("Add", ["s", "m"], ["sm"]), N("Add", ["sm", "p"], ["t"])], I64, [i64("ax", [2])], 13, scale=1.5)
q_then("ReduceMin int32 keepdims, negative axis", [N("ReduceMin", ["q"], ["t"], axes=[-1], keepdims=1)], I32, (), 13)
# ties: trunc(4 x) repeats values along an axis of 8
q_then("ArgMax of ties, first", [N("ArgMax", ["q"], ["t"], axis=2, keepdims=0)], I64)
q_then("ArgMax of ties, last", [N("ArgMax", ["q"], ["t"], axis=2, keepdims=0, select_last_index=1)], I64)
q_then("ArgMin of ties, last, axis 1", [N("ArgMin", ["q"], ["t"], axis=1, keepdims=1, select_last_index=1)], I32)
q_then("TopK of ties: indices", [N("TopK", ["q", "kk"], ["v", "t"], axis=2)], I64, [i64("kk", [3])], 11, scale=1.5)
q_then("TopK smallest of ties: indices", [N("TopK", ["q", "kk"], ["v", "t"], axis=2, largest=0)], I64, [i64("kk", [4])], 11, scale=1.5)
q_then("TopK of ties: values", [N("TopK", ["q", "kk"], ["t", "i"], axis=-1)], I32, [i64("kk", [3])], 11, scale=1.5)
# computed indices of both signs (ONNX counts a negative one from the end)
q_then("Gather by computed indices of both signs", [N("Clip", ["q", "lo", "hi"], ["ix"]), N("Gather", ["tab", "ix"], ["t"], axis=0)], I64, [ints("lo", -10, I64), ints("hi", 9, I64), f32("tab", np.arange(50).reshape(10, 5) * 0.5)], 13, back=False)
q_then("GatherElements by computed indices of both signs", [N("Clip", ["q", "lo", "hi"], ["ix"]), N("GatherElements", ["x", "ix"], ["t"], axis=2)], I64, [ints("lo", -8, I64), ints("hi", 7, I64)], 13, back=False)
q_then("OneHot of computed indices of both signs", [N("Clip", ["q", "lo", "hi"], ["ix"]), N("OneHot", ["ix", "dep", "v"], ["t"], axis=-1)], I64, [ints("lo", -5, I64), ints("hi", 4, I64), i64("dep", 5), f32("v", [0.0, 1.0])], 13, back=False)
q_then("OneHot of indices past the depth (all off)", [N("OneHot", ["q", "dep", "v"], ["t"], axis=1)], I64, [i64("dep", 4), f32("v", [0.5, 2.0])], 11, back=False)
q_then("ScatterElements at computed indices of both signs", [N("Clip", ["q", "lo", "hi"], ["ix"]), N("ScatterElements", ["x", "ix", "x"], ["t"], axis=2, reduction="add")], I64, [ints("lo", -8, I64), ints("hi", 7, I64)], 18, back=False)
