"""A tiny int8 graph of the operators onnxruntime's quantizer writes between the products in its
QOperator format (tests: cw/compile/quantized_activations.py, on the CPU and the GPU)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# every quantized tensor of the graph, in order
QUANTIZED_TENSORS = ["xq", "sig", "leaky", "mul", "mul_c", "pool", "cat", "soft13", "soft11"]


def int8_activations(batch: int | None = None,
                     onnx_type: int = TensorProto.UINT8) -> onnx.ModelProto:
    """input → Quantize → Sigmoid, LeakyRelu → their product → times a per-channel constant →
    3x3 average pool → concat of the pool and the sigmoid (each requantized) and x (as it is) →
    softmax over the channels (opset 13) and over each map (opset 11); outputs: both softmaxes
    and the concat, dequantized. `onnx_type`: uint8 or int8 quantization throughout."""
    signed = onnx_type == TensorProto.INT8
    dtype, shift = (np.int8, -128) if signed else (np.uint8, 0)
    inits: dict[str, onnx.TensorProto] = {}

    def q(name, scale, zero):
        """The scale and zero point of tensor `name` (defined where first named)."""
        inits.setdefault(name + "_s", numpy_helper.from_array(np.float32(scale), name + "_s"))
        inits.setdefault(name + "_z", numpy_helper.from_array(np.array(zero + shift, dtype),
                                                              name + "_z"))
        return [name + "_s", name + "_z"]

    def node(op, inputs, output, **attrs):
        return helper.make_node(op, inputs, [output], domain="com.microsoft", **attrs)

    c = np.random.default_rng(3).integers(0, 256, (1, 8, 1, 1)) + shift
    inits["c"] = numpy_helper.from_array(c.astype(dtype), "c")
    nodes = [
        helper.make_node("QuantizeLinear", ["input", *q("xq", 0.05, 128)], ["xq"]),
        node("QLinearSigmoid", ["xq", *q("xq", 0.05, 128), *q("sig", 1 / 256, 0)], "sig"),
        node("QLinearLeakyRelu", ["xq", *q("xq", 0.05, 128), *q("leaky", 0.03, 100)], "leaky",
             alpha=0.1),
        node("QLinearMul", ["sig", *q("sig", 1 / 256, 0), "leaky", *q("leaky", 0.03, 100),
                            *q("mul", 0.0021, 90)], "mul"),
        node("QLinearMul", ["mul", *q("mul", 0.0021, 90), "c", *q("c", 0.013, 119),
                            *q("mul_c", 0.0025, 131)], "mul_c"),
        node("QLinearAveragePool", ["mul_c", *q("mul_c", 0.0025, 131), *q("pool", 0.0019, 127)],
             "pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0),
        # quantized as x: x goes in as it is, the pool and the sigmoid are requantized
        node("QLinearConcat", [*q("xq", 0.05, 128), "pool", *q("pool", 0.0019, 127),
                               "xq", *q("xq", 0.05, 128), "sig", *q("sig", 1 / 256, 0)], "cat",
             axis=1),
        node("QLinearSoftmax", ["cat", *q("xq", 0.05, 128), *q("soft13", 1 / 256, 0)],
             "soft13", axis=1, opset=13),
        node("QLinearSoftmax", ["cat", *q("xq", 0.05, 128), *q("soft11", 1 / 256, 0)],
             "soft11", axis=2, opset=11),
        helper.make_node("DequantizeLinear", ["soft13", *q("soft13", 1 / 256, 0)],
                         ["soft_channels"]),
        helper.make_node("DequantizeLinear", ["soft11", *q("soft11", 1 / 256, 0)],
                         ["soft_maps"]),
        helper.make_node("DequantizeLinear", ["cat", *q("xq", 0.05, 128)], ["concat"]),
    ]
    n = batch if batch is not None else "N"
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [n, 24, 6, 6])
               for name in ("soft_channels", "soft_maps", "concat")]
    graph = helper.make_graph(
        nodes, "int8_activations",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [n, 8, 6, 6])], outputs,
        list(inits.values()))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                   helper.make_opsetid("com.microsoft", 1)])
