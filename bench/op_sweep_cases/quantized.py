"""Quantized forms: QuantizeLinear / DequantizeLinear per tensor, per axis and per block, their
integer types and opsets, half-way values, QLinear and Integer products, onnxruntime's QLinear
operators (stop 75)."""
# ruff: noqa: E501 (one case per line reads best)

import numpy as np
from onnx import TensorProto as T
from onnx import helper

from .common import X4, F, N, c, case, case_io, f32, group, vi, w

group("quantized")

U8, I8 = np.uint8, np.int8
rng = np.random.default_rng(7)


def qdq(name, scale, zero, opset=13, axis=None, xs=X4, pre=(), inits=(), **attrs):
    """x -> QuantizeLinear -> DequantizeLinear -> y, the same scale and zero point."""
    axis_attr = {} if axis is None else {"axis": axis}
    inputs = ["s"] + (["z"] if zero is not None else [])
    src = pre[-1].output[0] if pre else "x"
    nodes = [*pre, N("QuantizeLinear", [src, *inputs], ["q"], **axis_attr, **attrs),
             N("DequantizeLinear", ["q", *inputs], **axis_attr, **({"block_size": attrs["block_size"]} if "block_size" in attrs else {}))]
    consts = [f32("s", scale)] + ([c("z", zero)] if zero is not None else [])
    case(name, nodes, xs, consts + list(inits), opset, scale=3.0)


qdq("QDQ uint8 per tensor", 0.02, np.array(128, U8))
qdq("QDQ int8 per tensor", 0.02, np.array(-3, I8))
qdq("QDQ int8 no zero point", 0.02, None)
qdq("QDQ uint8 per channel axis 1", [0.01, 0.02, 0.05, 0.1], np.array([0, 10, 128, 255], U8), axis=1)
qdq("QDQ int8 per axis -1", [0.01, 0.02, 0.03, 0.04, 0.05, 0.06], np.array([0, 1, -1, 2, -2, 3], I8), axis=-1)
qdq("QDQ int8 per axis 2 opset 13", [0.01, 0.02, 0.03, 0.04, 0.05, 0.06], np.array([0, 1, -1, 2, -2, 3], I8), axis=2)
qdq("QDQ uint16 opset 21", 0.0005, np.array(30000, np.uint16), opset=21)
qdq("QDQ int16 opset 21", 0.0005, np.array(-7, np.int16), opset=21)
qdq("QDQ saturating large values", 0.001, np.array(0, I8))
# half-way values: x * 4 rounded then / 4 gives multiples of 0.25; scale 0.5 makes x / scale k + .5
qdq("QDQ ties to even", 0.5, np.array(0, I8), pre=[N("Mul", ["x", "four"], ["x4"]), N("Round", ["x4"], ["r"]), N("Mul", ["r", "quarter"], ["xt"])],
    inits=[f32("four", 4.0), f32("quarter", 0.25)])
case("QDQ per block opset 21 (weights)", [N("DequantizeLinear", ["wq", "ws"], ["wd"], axis=0, block_size=2), N("MatMul", ["x", "wd"])], ["N", 6, 4],
     [c("wq", rng.integers(-8, 8, (4, 5)), I8), f32("ws", rng.uniform(0.01, 0.1, (2, 5)))], 21)
case_io("Quantize to uint8 output", [N("QuantizeLinear", ["x", "s", "z"])], [vi("x", X4)], [vi("y", X4, T.UINT8)], [f32("s", 0.02), c("z", np.array(128, U8))], 13)
case("Dequantize int32 bias", [N("DequantizeLinear", ["b", "s"], ["bd"]), N("Add", ["x", "bd"])], X4, [c("b", np.array([100, -200, 3000, 7], np.int32).reshape(4, 1, 1)), f32("s", 0.001)], 13)
# products
xq = [N("QuantizeLinear", ["x", "xs", "xz"], ["xq"])]
xq_inits = [f32("xs", 0.03), c("xz", np.array(120, U8))]
case("QLinearConv uint8 x, int8 per-channel w", xq + [N("QLinearConv", ["xq", "xs", "xz", "wq", "ws", "wz", "ys", "yz", "bq"], ["yq"], pads=[1, 1, 1, 1]), N("DequantizeLinear", ["yq", "ys", "yz"])],
     X4, xq_inits + [c("wq", rng.integers(-60, 60, (5, 4, 3, 3)), I8), f32("ws", rng.uniform(0.005, 0.02, 5)), c("wz", np.zeros(5, I8)), f32("ys", 0.05), c("yz", np.array(128, U8)), c("bq", rng.integers(-500, 500, 5), np.int32)], 13, scale=2.0)
case("QLinearConv grouped strided", xq + [N("QLinearConv", ["xq", "xs", "xz", "wq", "ws", "wz", "ys", "yz"], ["yq"], group=2, strides=[2, 2]), N("DequantizeLinear", ["yq", "ys", "yz"])],
     X4, xq_inits + [c("wq", rng.integers(0, 255, (4, 2, 3, 3)), U8), f32("ws", 0.004), c("wz", np.array(128, U8)), f32("ys", 0.04), c("yz", np.array(100, U8))], 13, scale=2.0)
case("QLinearMatMul uint8", xq + [N("QLinearMatMul", ["xq", "xs", "xz", "wq", "ws", "wz", "ys", "yz"], ["yq"]), N("DequantizeLinear", ["yq", "ys", "yz"])],
     X4, xq_inits + [c("wq", rng.integers(0, 255, (6, 7)), U8), f32("ws", 0.01), c("wz", np.array(127, U8)), f32("ys", 0.08), c("yz", np.array(128, U8))], 13, scale=2.0)
case("MatMulInteger with zero points", xq + [N("MatMulInteger", ["xq", "wq", "xz", "wz"], ["acc"]), N("Cast", ["acc"], to=F)],
     X4, xq_inits + [c("wq", rng.integers(0, 255, (6, 5)), U8), c("wz", np.array(130, U8))], 13)
case("ConvInteger of quantized x", xq + [N("ConvInteger", ["xq", "wq", "xz"], ["acc"], pads=[1, 1, 1, 1]), N("Cast", ["acc"], to=F)],
     X4, xq_inits + [c("wq", rng.integers(0, 255, (3, 4, 3, 3)), U8)], 13)
case("DynamicQuantizeLinear", [N("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]), N("DequantizeLinear", ["q", "qs", "qz"])], X4, (), 13, scale=2.0)
# a QDQ model's convolution: weights dequantized per channel, activations per tensor
case("QDQ Conv per-channel weights", [N("QuantizeLinear", ["x", "xs", "xz"], ["xq"]), N("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
                                      N("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0), N("Conv", ["xd", "wd", "b"], ["cv"], pads=[1, 1, 1, 1]), N("Relu", ["cv"], ["r"]),
                                      N("QuantizeLinear", ["r", "ys", "yz"], ["rq"]), N("DequantizeLinear", ["rq", "ys", "yz"])],
     X4, [f32("xs", 0.03), c("xz", np.array(0, I8)), c("wq", rng.integers(-127, 127, (6, 4, 3, 3)), I8), f32("ws", rng.uniform(0.002, 0.01, 6)), c("wz", np.zeros(6, I8)), w("b", 6),
          f32("ys", 0.04), c("yz", np.array(-128, I8))], 13, scale=2.0)
# onnxruntime's com.microsoft operators (its quantization tool's QOperator format)
MS = {"domain": "com.microsoft"}
case("QLinearAdd", xq + [N("QuantizeLinear", ["x", "bs", "bz"], ["bq"]), N("QLinearAdd", ["xq", "xs", "xz", "bq", "bs", "bz", "ys", "yz"], ["yq"], **MS), N("DequantizeLinear", ["yq", "ys", "yz"])],
     X4, xq_inits + [f32("bs", 0.05), c("bz", np.array(100, U8)), f32("ys", 0.06), c("yz", np.array(128, U8))], 13, scale=2.0)
case("QLinearGlobalAveragePool", xq + [N("QLinearGlobalAveragePool", ["xq", "xs", "xz", "ys", "yz"], ["yq"], channels_last=0, **MS), N("DequantizeLinear", ["yq", "ys", "yz"])],
     X4, xq_inits + [f32("ys", 0.01), c("yz", np.array(128, U8))], 13, scale=2.0)
case("QLinearSigmoid", xq + [N("QLinearSigmoid", ["xq", "xs", "xz", "ys", "yz"], ["yq"], **MS), N("DequantizeLinear", ["yq", "ys", "yz"])],
     X4, xq_inits + [f32("ys", 1 / 256), c("yz", np.array(0, U8))], 13, scale=2.0)
case("QLinearLeakyRelu", xq + [N("QLinearLeakyRelu", ["xq", "xs", "xz", "ys", "yz"], ["yq"], alpha=0.1, **MS), N("DequantizeLinear", ["yq", "ys", "yz"])],
     X4, xq_inits + [f32("ys", 0.02), c("yz", np.array(20, U8))], 13, scale=2.0)
case("QLinearConcat", xq + [N("QuantizeLinear", ["x", "bs", "bz"], ["bq"]), N("QLinearConcat", ["ys", "yz", "xq", "xs", "xz", "bq", "bs", "bz"], ["yq"], axis=1, **MS), N("DequantizeLinear", ["yq", "ys", "yz"])],
     X4, xq_inits + [f32("bs", 0.05), c("bz", np.array(100, U8)), f32("ys", 0.04), c("yz", np.array(128, U8))], 13, scale=2.0)
case("QLinearAveragePool", xq + [N("QLinearAveragePool", ["xq", "xs", "xz", "ys", "yz"], ["yq"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], **MS), N("DequantizeLinear", ["yq", "ys", "yz"])],
     X4, xq_inits + [f32("ys", 0.02), c("yz", np.array(128, U8))], 13, scale=2.0)
case("QLinearSoftmax", xq + [N("QLinearSoftmax", ["xq", "xs", "xz", "ys", "yz"], ["yq"], axis=-1, opset=13, **MS), N("DequantizeLinear", ["yq", "ys", "yz"])],
     X4, xq_inits + [f32("ys", 1 / 256), c("yz", np.array(0, U8))], 13, scale=2.0)
case("QDQ per block opset 21 (weights, last block short)", [N("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=1, block_size=2), N("MatMul", ["x", "wd"])], ["N", 6, 5],
     [c("wq", rng.integers(-100, 100, (5, 7)), I8), f32("ws", rng.uniform(0.01, 0.1, (5, 4))), c("wz", rng.integers(-3, 3, (5, 4)), I8)], 21)
case("QDQ int4 weights opset 21", [N("DequantizeLinear", ["wq", "ws"], ["wd"], axis=1), N("MatMul", ["x", "wd"])], ["N", 6, 4],
     [helper.make_tensor("wq", T.INT4, [4, 3], rng.integers(-8, 8, 12).tolist()), f32("ws", [0.1, 0.2, 0.3])], 21)
case("Quantize activations in blocks (refused)", [N("QuantizeLinear", ["x", "s"], ["q"], axis=2, block_size=3), N("DequantizeLinear", ["q", "s"], axis=2, block_size=3)], X4, [f32("s", np.full((1, 4, 2, 6), 0.02))], 21)
