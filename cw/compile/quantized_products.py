"""The quantized products, as onnxruntime's integer kernels compute them: QLinearConv,
QLinearMatMul and QGemm (requantized), and dynamic quantization's DynamicQuantizeLinear,
MatMulInteger and ConvInteger (int32 sums). Why float32 holds their sums exactly, and how the
rewrite works, is in cw/compile/quantized.py, whose rewriter each function takes with the node.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from cw.errors import ModelError


def attribute(node, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def qlinear_conv(rw, node) -> None:
    out = node.output[0]
    x_scale, x_zero, w_scale, w_zero, y_scale, y_zero, y_type = rw.binary_operands(node)
    weight = rw.constant(node, 3, "weight")
    if weight is None:
        raise ModelError(f"QLinearConv at node '{node.name}' has no weight", "fix the model")
    rank = weight.ndim
    centered_w = weight.astype(np.float32) - rw.per_channel(w_zero, 0, rank)
    x = rw.centered(rw.integers(node.input[0], out), x_zero, out)
    inputs = [x, rw.const(centered_w, out + "_weight")]
    bias = rw.constant(node, 8, "bias")
    if bias is not None:
        inputs.append(rw.const(bias.astype(np.float32), out + "_bias"))
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    acc = rw.emit("Conv", inputs, out, **attrs)
    # onnxruntime: output_scales[i] = X_scale * W_scale[i] / Y_scale, in float32
    multiplier = (x_scale * w_scale) / y_scale
    rw.requantize(acc, rw.per_channel(multiplier, 1, rank), y_zero, y_type, out, out)


def qlinear_matmul(rw, node) -> None:
    out = node.output[0]
    a_scale, a_zero, b_scale, b_zero, y_scale, y_zero, y_type = rw.binary_operands(node)
    a = rw.centered(rw.integers(node.input[0], out), a_zero, out)
    b_name = node.input[3]
    if b_name in rw.constants:
        # per-column zero points and scales of a [K, N] matrix run along its last axis
        b = rw.const(rw.constants[b_name].astype(np.float32) - b_zero, out + "_b")
    else:
        b = rw.centered(rw.integers(b_name, out), b_zero, out)
    acc = rw.emit("MatMul", [a, b], out)
    rw.requantize(acc, (a_scale * b_scale) / y_scale, y_zero, y_type, out, out)


def qgemm(rw, node) -> None:
    """onnxruntime's QGemm (its quantizer's Gemm): alpha * (A - a_zero) (B - b_zero) + C
    in int32, requantized by alpha * a_scale * b_scale / y_scale where the output is
    quantized (y_zero given), else scaled to float by alpha * a_scale * b_scale."""
    out = node.output[0]
    a_scale, a_zero, b_scale, b_zero = (rw.scale(node, 1), rw.zero_point(node, 2)[0],
                                        rw.scale(node, 4), rw.zero_point(node, 5)[0])
    alpha = np.float32(attribute(node, "alpha", 1.0))
    a = rw.integers(node.input[0], out)
    if attribute(node, "transA", 0):
        a = rw.emit("Transpose", [a], out, perm=[1, 0])
    a = rw.centered(a, a_zero, out)
    weight = rw.constant(node, 3, "weight")
    if weight is None:
        raise ModelError(f"QGemm at node '{node.name}' has no weight", "fix the model")
    weight = weight.astype(np.float32)
    if attribute(node, "transB", 0):
        weight = weight.T
    # per-column zero points of the [K, N] matrix run along its last axis
    acc = rw.emit("MatMul", [a, rw.const(weight - b_zero, out + "_b")], out)
    bias = rw.constant(node, 6, "bias")
    if bias is not None:
        acc = rw.emit("Add", [acc, rw.const(bias.astype(np.float32), out + "_bias")],
                        out)
    # onnxruntime: alpha * a_scale * b_scale[i], then / y_scale, in float32
    multiplier = alpha * a_scale * b_scale
    if len(node.input) > 8 and node.input[8]:
        y_zero, y_type = rw.zero_point(node, 8)
        rw.requantize(acc, multiplier / rw.scale(node, 7), y_zero, y_type, out, out)
    else:
        rw.emit("Mul", [acc, rw.const(multiplier, out + "_scale")], out, out=out)


def dynamic_quantize_linear(rw, node) -> None:
    """ONNX's own definition (its function body): the range of x widened to hold 0, a
    scale of range / 255 and the zero point that puts the range's low end at 0."""
    rw.dynamic = True
    x = node.input[0]
    names = list(node.output) + [""] * (3 - len(node.output))
    out, scale_out, zero_out = (n or rw.fresh(x + "_dq") for n in names)
    hint = out
    low = rw.emit("Min", [rw.emit("ReduceMin", [x], hint, keepdims=0),
                            rw.const(np.float32(0), hint + "_0")], hint)
    high = rw.emit("Max", [rw.emit("ReduceMax", [x], hint, keepdims=0),
                             rw.const(np.float32(0), hint + "_0")], hint)
    rw.emit("Div", [rw.emit("Sub", [high, low], hint),
                      rw.const(np.float32(255), hint + "_255")], hint, out=scale_out)
    shifted = rw.emit("Neg", [rw.emit("Div", [low, scale_out], hint)], hint)
    rw.rounded(shifted, np.zeros((), np.float32), TensorProto.UINT8, zero_out, hint)
    divided = rw.emit("Div", [x, scale_out], hint)
    rw.rounded(divided, zero_out, TensorProto.UINT8, out, hint)


def integer_product(rw, node, op: str) -> None:
    """MatMulInteger / ConvInteger: the int32 sums of (a - a_zero) * (b - b_zero)."""
    out = node.output[0]
    a_zero, _ = rw.zero_point(node, 2, dynamic=True)
    b_zero, _ = rw.zero_point(node, 3, dynamic=True)
    a = rw.centered(rw.integers(node.input[0], out), a_zero, out)
    b_name = node.input[1]
    if b_name in rw.constants and not isinstance(b_zero, str):
        value = rw.constants[b_name].astype(np.float32)
        # ConvInteger's per-channel zero points run along the filters (axis 0), a
        # MatMulInteger's along the columns (the last axis)
        b = rw.const(value - (rw.per_channel(b_zero, 0, value.ndim) if op == "Conv"
                                else b_zero), out + "_b")
    else:
        b = rw.centered(rw.integers(b_name, out), b_zero, out)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    rw.emit(op, [a, b], out, out=out, **attrs)
    rw.types[out] = TensorProto.INT32


def matmul_integer(rw, node) -> None:
    integer_product(rw, node, "MatMul")


def conv_integer(rw, node) -> None:
    integer_product(rw, node, "Conv")
