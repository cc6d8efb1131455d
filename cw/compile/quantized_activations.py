"""The quantized operators between a model's products, as onnxruntime computes them (its
quantization tool writes them in the QOperator format: yolox through quantize_static has 110
QLinearSigmoid, 104 QLinearMul and 18 QLinearConcat beside its 113 QLinearConv).

- QLinearSigmoid, QLinearLeakyRelu and a QLinearConcat input whose quantization differs from
  the output's: onnxruntime maps each of the 256 input values through a table it builds once
  (dequantize, the function, quantize). Here the table is onnxruntime's own, taken by running
  the operator once on all 256 values at compile time. The graph computes the float formula
  elementwise, and sets the few entries it could round otherwise (near .5, or where
  onnxruntime's approximation of the logistic function rounds another way) to the table's
  value; past a few, it looks each value up (a gather). Its integers exactly, either way.
- QLinearMul as MLAS's vector kernel: the exact product (a - a_zero)(b - b_zero), times
  a_scale * b_scale / c_scale, plus c_zero, each step rounded to float32, then rounded half to
  even and saturated. The product and its scaling go through float64 so that no compiler fuses
  them into the add (a fused multiply-add rounds once and can land on the other integer).
- QLinearAveragePool: onnxruntime dequantizes, sums each window in float32 one value at a time,
  divides by the count and by y_scale, adds y_zero and rounds; so does the rewrite, in the same
  order (a window's shifted slices added one by one).
- QLinearSoftmax: onnxruntime's table of exp((x - max + shift) * x_scale), the sum of the
  row's table values, nearbyint(value * floor(1 / y_scale) / sum) + y_zero. The sum's order
  differs too (one step at most, where it rounds at .5).

Each function takes the rewriter of cw/compile/quantized.py and the node.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from cw.errors import ModelError

_RANGES = {TensorProto.UINT8: (0, 255), TensorProto.INT8: (-128, 127)}
_NUMPY = {TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8}


def qlinear_table_activation(r, node) -> None:
    """QLinearSigmoid, QLinearLeakyRelu. Inputs: x, x_scale, x_zero, y_scale, y_zero; a
    function of x alone, through onnxruntime's table."""
    out = node.output[0]
    x_type = _eight_bit_type(r, node, 2, node.input[0])
    y_type = _eight_bit_type(r, node, 4, None, default=x_type)
    constants = {i: r.constant(node, i, "scale" if i in (1, 3) else "zero point")
                 for i in range(1, 5)}
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    table = onnxruntime_table(node.op_type, attrs, 0, constants, 5, x_type, y_type)
    function = (_sigmoid if node.op_type == "QLinearSigmoid"
                else _leaky_relu(np.float32(attrs.get("alpha", 0.01))))
    mapped(r, r.integers(node.input[0], out), table, x_type, y_type, out, function,
           constants[1], constants[2], constants[3], constants[4])


def qlinear_concat(r, node) -> None:
    """Inputs: y_scale, y_zero, then (x, x_scale, x_zero) per input. An input quantized as the
    output is goes in as it is; any other through onnxruntime's table (dequantize, quantize)."""
    out = node.output[0]
    if len(node.input) < 5 or (len(node.input) - 2) % 3:
        raise ModelError(f"QLinearConcat at node '{node.name}' has {len(node.input)} inputs",
                         "it takes y_scale, y_zero, then (x, x_scale, x_zero) per input")
    y_scale, y_zero = r.constant(node, 0, "scale"), r.constant(node, 1, "zero point")
    y_type = _eight_bit_type(r, node, 1, None)
    parts, requantized = [], False
    for first in range(2, len(node.input), 3):
        x_name = node.input[first]
        x_scale = r.constant(node, first + 1, "scale")
        x_zero = r.constant(node, first + 2, "zero point")
        x = r.integers(x_name, out)
        same = (np.array_equal(np.float32(x_scale), np.float32(y_scale))
                and np.array_equal(_zero(x_zero), _zero(y_zero)))
        if same:
            parts.append(x)
            continue
        constants = {0: y_scale, 1: y_zero, 3: x_scale, 4: x_zero}
        table = onnxruntime_table("QLinearConcat", {"axis": 0}, 2, constants, 5, y_type, y_type)
        parts.append(mapped(r, x, table, y_type, y_type, r.fresh(out), _IDENTITY,
                            x_scale, x_zero, y_scale, y_zero))
        requantized = True
    axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), None)
    if axis is None:
        raise ModelError(f"QLinearConcat at node '{node.name}' has no axis", "fix the model")
    if not requantized:
        r.emit("Concat", parts, out, out=out, axis=axis)
    else:
        # computed into memory: a requantized input reads its x once per corrected entry, and
        # a detector's box decoder slices the concat several times, concats the slices again:
        # inlined all the way, ultraface's decoder was one kernel of 17 ms (7 ms all told
        # before)
        _materialized(r, r.emit("Concat", parts, out, axis=axis), out, out=out)
    r.types[out] = y_type


def qlinear_mul(r, node) -> None:
    """MLAS's vector kernel (SSE2, the x86 path): float32(float32(p * ratio) + c_zero) rounded
    half to even and saturated, p = (a - a_zero)(b - b_zero) exact, ratio = a_scale * b_scale /
    c_scale in float32."""
    out = node.output[0]
    a_scale, a_zero, b_scale, b_zero, c_scale, c_zero, c_type = r.binary_operands(node)
    a = r.centered(r.integers(node.input[0], out), a_zero, out)
    b = r.centered(r.integers(node.input[3], out), b_zero, out)
    product = r.emit("Mul", [a, b], out)  # below 2**17 in magnitude: exact in float32
    ratio = np.float32(np.float32(a_scale * b_scale) / c_scale)
    scaled = r.emit("Mul", [r.emit("Cast", [product], out, to=TensorProto.DOUBLE),
                            r.const(np.float64(ratio), out + "_ratio")], out)
    scaled = r.emit("Cast", [scaled], out, to=TensorProto.FLOAT)
    if np.any(c_zero):
        scaled = r.emit("Add", [scaled, r.const(np.float32(c_zero), out + "_zero")], out)
    r.rounded(scaled, np.zeros((), np.float32), c_type, out, out)


def qlinear_average_pool(r, node) -> None:
    """onnxruntime's QLinearAveragePool (qlinear_pool.cc): each value dequantized to float32,
    a window's values summed one by one in row-major order, divided by the count, then
    nearbyint(y / y_scale + y_zero), saturated. The sum is the float32 sum of the window's
    shifted slices in that order (zeros for padding add nothing), so every rounding is the
    same: a float32 sum in another order lands on another integer for ~1 output in 10^3."""
    out = node.output[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    kernel = list(attrs.get("kernel_shape", []))
    unsupported = {k: v for k, v in attrs.items()
                   if (k == "channels_last" and v) or (k == "ceil_mode" and v)
                   or (k == "auto_pad" and v not in (b"NOTSET", b"VALID", "NOTSET", "VALID"))
                   or (k == "dilations" and any(d != 1 for d in v))}
    if not kernel or unsupported:
        raise ModelError(f"QLinearAveragePool at node '{node.name}' with "
                         f"{unsupported or 'no kernel_shape'}", "cw rewrites channels-first "
                         "pools with explicit pads, floor rounding and no dilation")
    dims = len(kernel)
    pads = list(attrs.get("pads", [0] * 2 * dims))
    strides = list(attrs.get("strides", [1] * dims))
    x_scale, y_scale = r.scale(node, 1), r.scale(node, 3)
    x_zero, _ = r.zero_point(node, 2)
    y_zero, y_type = r.zero_point(node, 4)
    x = r.integers(node.input[0], out)
    centered = r.emit("Cast", [r.centered(x, x_zero, out)], out, to=TensorProto.DOUBLE)
    # the float32 product x_scale * (x - x_zero): exact in float64, rounded once to float32
    # (a float32 multiply beside the sums could be fused into them)
    product = r.emit("Mul", [centered, r.const(np.float64(x_scale), out + "_x_scale")], out)
    values = _materialized(r, r.emit("Cast", [product], out, to=TensorProto.FLOAT), out)
    total = _window_sum(r, values, kernel, pads, strides, out)
    if attrs.get("count_include_pad", 0):
        count = r.const(np.float32(math.prod(kernel)), out + "_count")
    else:
        ones = r.emit("ConstantOfShape", [r.emit("Shape", [x], out)], out,
                      value=numpy_helper.from_array(np.ones(1, np.float32)))
        count = _window_sum(r, ones, kernel, pads, strides, out)
    average = r.emit("Div", [total, count], out)
    divided = r.emit("Div", [average, r.const(y_scale, out + "_y_scale")], out)
    if np.any(y_zero):
        divided = r.emit("Add", [divided, r.const(y_zero, out + "_zero")], out)
    pooled = r.fresh(out)
    r.rounded(divided, np.zeros((), np.float32), y_type, pooled, out)
    _materialized(r, pooled, out, out=out)
    r.types[out] = y_type


def _materialized(r, x: str, hint: str, out: str | None = None) -> str:
    """x as it is, through a maximum over a new axis of length 1: a reduction, where TVM's
    operator fusion ends, so that x is computed once into memory. A pool's window slices each
    inline what computed their input (9 copies of the layers before a 3x3 pool), and a table
    lookup copies its index expression 4 times (the float-to-integer cast's finiteness mask,
    the negative-index wrap): a pool between a product and a concat made one kernel that LLVM
    took 58 s to compile."""
    axis = r.const(np.array([-1], np.int64), hint + "_axis")
    if r.opset >= 13:
        widened = r.emit("Unsqueeze", [x, axis], hint)
    else:
        widened = r.emit("Unsqueeze", [x], hint, axes=[-1])
    if r.opset >= 18:
        return r.emit("ReduceMax", [widened, axis], hint, out=out, keepdims=0)
    return r.emit("ReduceMax", [widened], hint, out=out, axes=[-1], keepdims=0)


def _window_sum(r, values: str, kernel: list, pads: list, strides: list, out: str) -> str:
    """Each pooling window's sum, added one position at a time in row-major order: the
    window's shifted, strided slices of the zero-padded tensor."""
    dims = len(kernel)
    if any(pads):
        full = [0, 0, *pads[:dims], 0, 0, *pads[dims:]]
        values = r.emit("Pad", [values, r.const(np.array(full, np.int64), out + "_pads")], out)
    axes = np.arange(2, 2 + dims, dtype=np.int64)
    total = None
    for offset in itertools.product(*(range(k) for k in kernel)):
        # the last window starts kernel - 1 before the end: end = offset - kernel + 1
        ends = [o - k + 1 if o - k + 1 < 0 else np.iinfo(np.int64).max
                for o, k in zip(offset, kernel)]
        part = r.emit("Slice", [values, r.const(np.array(offset, np.int64), out + "_starts"),
                                r.const(np.array(ends, np.int64), out + "_ends"),
                                r.const(axes, out + "_axes"),
                                r.const(np.array(strides, np.int64), out + "_steps")], out)
        total = part if total is None else r.emit("Add", [total, part], out)
    return total


def batch_normalization(r, node) -> bool:
    """A float BatchNormalization of dequantized values (onnxruntime's quantizer leaves them
    between a DequantizeLinear and a QuantizeLinear where the model was not pre-processed:
    ultraface has 35) as onnxruntime's kernel computes it: x * new_scale + new_bias, rounded
    after the product and after the sum, new_scale = scale / sqrt(var + epsilon) and new_bias
    = bias - mean * new_scale in float32. TVM's order put a few values on the other side of a
    quantization step, and the layers after carried them on (ultraface: 0.0394 off). The
    product goes through float64 (exact there, rounded once to float32), so that no compiler
    fuses it into the sum. False, left to TVM, where the parameters are not constants or it
    trains."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    params = [r.constants.get(name) if name else None for name in node.input[1:5]]
    rank = r.ranks.get(node.input[0])
    if (len(params) < 4 or any(p is None for p in params) or attrs.get("training_mode")
            or any(node.output[1:]) or rank is None or rank < 2):
        return False
    scale, bias, mean, var = (np.asarray(p, np.float32).reshape(-1) for p in params)
    epsilon = np.float32(attrs.get("epsilon", 1e-5))
    new_scale = (np.float32(1) / np.sqrt(var + epsilon)) * scale
    new_bias = bias - mean * new_scale
    out = node.output[0]
    x = r.emit("Cast", [node.input[0]], out, to=TensorProto.DOUBLE)
    product = r.emit("Mul", [x, r.const(r.per_channel(new_scale.astype(np.float64), 1, rank),
                                        out + "_scale")], out)
    r.emit("Add", [r.emit("Cast", [product], out, to=TensorProto.FLOAT),
                   r.const(r.per_channel(new_bias, 1, rank), out + "_bias")], out, out=out)
    return True


def qlinear_softmax(r, node) -> None:
    """onnxruntime's QLinearSoftmax (qlinear_softmax.cc): its table of exponentials built in
    float64 and stored as float32, a row's values looked up relative to its maximum, summed in
    float32; each output nearbyint(value * floor(1 / y_scale) / sum) + y_zero. The opset
    attribute says which axes a row spans: from `axis` on (below 13) or `axis` alone."""
    out, x_name = node.output[0], node.input[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    opset = attrs.get("opset")
    if opset is None:
        raise ModelError(f"QLinearSoftmax at node '{node.name}' has no opset attribute",
                         "fix the model")
    axis = attrs.get("axis", 1 if opset < 13 else -1)
    x_scale, y_scale = r.scale(node, 1), r.scale(node, 3)
    y_zero, y_type = r.zero_point(node, 4, default_type=_eight_bit_type(r, node, 2, x_name))
    x = r.integers(x_name, out)
    # below opset 13 a row spans every axis from `axis` on; where the rank is unknown, rows of
    # a 2-D view (a view TVM fails to specialize with a symbolic batch)
    rank = r.ranks.get(x_name)
    flat = opset < 13 and rank is None
    rows = r.emit("Flatten", [x], out, axis=axis) if flat else x
    if opset >= 13:
        axes = [axis]
    else:
        axes = [1] if flat else list(range(axis % rank, rank))
    spans = r.emit("Gather", [r.emit("Shape", [rows], out),
                              r.const(np.array(axes, np.int64), out + "_ax")], out, axis=0)
    table = _softmax_table(r, spans, np.float32(x_scale), out)
    axes_const = r.const(np.array(axes, np.int64), out + "_axes")
    if r.opset >= 18:
        row_max = r.emit("ReduceMax", [rows, axes_const], out, keepdims=1)
    else:
        row_max = r.emit("ReduceMax", [rows], out, axes=axes, keepdims=1)
    index = r.emit("Add", [r.emit("Sub", [rows, row_max], out),
                           r.const(np.float32(255), out + "_255")], out)
    index = r.emit("Cast", [index], out, to=TensorProto.INT64)
    values = r.emit("Gather", [table, index], out, axis=0)
    if r.opset >= 13:
        total = r.emit("ReduceSum", [values, axes_const], out, keepdims=1)
    else:
        total = r.emit("ReduceSum", [values], out, axes=axes, keepdims=1)
    inverse = np.float32(math.floor(np.float32(1.0) / np.float32(y_scale)))
    scaled = r.emit("Mul", [values, r.const(inverse, out + "_inverse")], out)
    result = r.fresh(out) if flat else out
    r.rounded(r.emit("Div", [scaled, total], out), y_zero, y_type, result, out)
    if flat:
        r.emit("Reshape", [result, r.emit("Shape", [x], out)], out, out=out)
        r.types[out] = y_type


def _softmax_table(r, spans: str, x_scale: np.float32, out: str) -> str:
    """onnxruntime's exponentials, indexed by x - row max + 255, as a [256] float32 tensor:
    exp((i - 255 + shift) * x_scale) in float64, shift = max(0, log(FLT_MAX / n) - 5) / x_scale
    so that a row of n values sums below float32's largest; n the product of `spans` (the
    row's dimensions, taken from the shape in the graph: once shapes are fixed, onnxslim
    folds the table to a constant)."""
    n = r.emit("Cast", [r.emit("ReduceProd", [spans], out, keepdims=0)], out,
               to=TensorProto.FLOAT)
    # FLT_MAX / n in float32 (onnxruntime divides a float by the count), its log in float64
    ratio = r.emit("Div", [r.const(np.finfo(np.float32).max, out + "_flt_max"), n], out)
    log = r.emit("Log", [r.emit("Cast", [ratio], out, to=TensorProto.DOUBLE)], out)
    shift = r.emit("Max", [r.emit("Sub", [log, r.const(np.float64(5), out + "_5")], out),
                           r.const(np.float64(0), out + "_0")], out)
    scale = r.const(np.float64(x_scale), out + "_x_scale")
    shift = r.emit("Div", [shift, scale], out)
    steps = r.const(np.arange(256, dtype=np.float64) - 255, out + "_steps")
    exponent = r.emit("Mul", [r.emit("Add", [steps, shift], out), scale], out)
    return r.emit("Cast", [r.emit("Exp", [exponent], out)], out, to=TensorProto.FLOAT)


# --- tables ------------------------------------------------------------------------------------

class _Function(NamedTuple):
    """A float function as numpy computes it in float32 and as ONNX nodes (rewriter, value,
    hint -> output)."""
    numpy: Callable[[np.ndarray], np.ndarray]
    emit: Callable[[Any, str, str], str]


def _sigmoid_numpy(v: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.float32(1) / (np.float32(1) + np.exp(-v))


_sigmoid = _Function(_sigmoid_numpy, lambda r, v, hint: r.emit("Sigmoid", [v], hint))


def _leaky_relu(alpha: np.float32) -> _Function | None:
    """max(v, alpha * v), the same values as LeakyRelu for 0 <= alpha <= 1: TVM has a layout
    rule for a maximum and none for its leaky ReLU."""
    if not 0 <= alpha <= 1:
        return None
    return _Function(lambda v: np.maximum(v, alpha * v),
                     lambda r, v, hint: r.emit("Max", [v, r.emit("Mul", [
                         v, r.const(alpha, hint + "_alpha")], hint)], hint))


_IDENTITY = _Function(lambda v: v, lambda r, v, hint: v)

# How far from .5 (in output steps) the scaled value of a table entry must be for the float
# formula to round it as numpy does here. cw's vectorized exp on the CPU is a few units in the
# last place from numpy's; CUDA's __expf (TVM's lowering) up to 22 for the arguments where a
# sigmoid is not saturated: 1.3e-6 relative, 3.4e-4 of a step at most for 256 steps.
_ROUNDING_MARGIN = 1 / 256
_MAX_CORRECTIONS = 8


def mapped(r, x: str, table: np.ndarray, x_type: int, y_type: int, out: str,
           function: _Function | None, x_scale, x_zero, y_scale, y_zero) -> str:
    """`out` = table[x - the type's lowest value], table onnxruntime's (dequantize, function,
    quantize), computed elementwise where it can be: the float formula, with each entry it
    could round otherwise than the table (at most a few) set to the table's value. A lookup
    (gather) is a kernel of its own in TVM, and, having no layout rule, sits between layout
    transforms out of and back into the blocked layout of the convolutions around it: int8
    YOLOX's 110 sigmoids through lookups took ×2.4 of its float model's time."""
    scales = [np.asarray(s, np.float32) for s in (x_scale, y_scale)]
    if function is None or any(s.size != 1 or not s.reshape(()) > 0 for s in scales):
        return lookup(r, x, table, x_type, y_type, out)
    x_scale, y_scale = (s.reshape(()) for s in scales)
    x_zero, y_zero = (_zero(z).astype(np.float32).reshape(()) for z in (x_zero, y_zero))
    low, high = _RANGES[x_type]
    y_low, y_high = _RANGES[y_type]
    values = np.arange(low, high + 1, dtype=np.float32)
    quotient = function.numpy((values - x_zero) * x_scale) / y_scale
    below = np.floor(quotient) + y_zero
    formula = np.clip(np.rint(quotient) + y_zero, y_low, y_high)
    # entries near .5 whose two neighbouring integers both lie inside the type
    undecided = ((np.abs(quotient - np.floor(quotient) - np.float32(0.5)) < _ROUNDING_MARGIN)
                 & (below >= y_low) & (below < y_high))
    corrections = np.flatnonzero(undecided | (formula != table))
    if len(corrections) > _MAX_CORRECTIONS:
        return lookup(r, x, table, x_type, y_type, out)
    v = r.emit("Mul", [r.centered(x, x_zero, out), r.const(x_scale, out + "_x_scale")], out)
    quotient = r.emit("Div", [function.emit(r, v, out), r.const(y_scale, out + "_y_scale")],
                      out)
    one = r.const(np.float32(1), out + "_one")
    for k in corrections:
        # quotient * (1 - is_k) + (table[k] - y_zero) * is_k: exact either way, and every
        # operator in it has a layout rule (a Where has none)
        is_k = r.emit("Cast", [r.emit("Equal", [x, r.const(values[k], out + "_value")], out)],
                      out, to=TensorProto.FLOAT)
        kept = r.emit("Mul", [quotient, r.emit("Sub", [one, is_k], out)], out)
        exact = r.emit("Mul", [is_k, r.const(np.float32(table[k] - y_zero), out + "_entry")],
                       out)
        quotient = r.emit("Add", [kept, exact], out)
    r.rounded(quotient, y_zero, y_type, out, out)
    return out


def lookup(r, x: str, table: np.ndarray, x_type: int, y_type: int, out: str) -> str:
    """`out` = table[x - the type's lowest value], x the float32 integers of an 8-bit tensor."""
    low = _RANGES[x_type][0]
    index = r.emit("Sub", [x, r.const(np.float32(low), out + "_low")], out) if low else x
    index = r.emit("Cast", [index], out, to=TensorProto.INT64)
    r.emit("Gather", [r.const(table, out + "_table"), index], out, out=out, axis=0)
    r.types[out] = y_type
    return out


def onnxruntime_table(op: str, attrs: dict, x_index: int, constants: dict, n_inputs: int,
                      x_type: int, y_type: int) -> np.ndarray:
    """What onnxruntime's `op` (com.microsoft) gives for each of the 256 values of an 8-bit
    x, lowest first, as float32: the operator run once on a [256] tensor, its other inputs the
    node's constants (`constants`: input index -> value, None where absent)."""
    import onnxruntime as ort

    low, high = _RANGES[x_type]
    inputs, initializers = [], []
    for i in range(n_inputs):
        if i == x_index:
            inputs.append("x")
        elif constants.get(i) is None:
            inputs.append("")
        else:
            inputs.append(f"c{i}")
            initializers.append(numpy_helper.from_array(np.asarray(constants[i]), f"c{i}"))
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], domain="com.microsoft", **attrs)], "table",
        [helper.make_tensor_value_info("x", x_type, [high - low + 1])],
        [helper.make_tensor_value_info("y", y_type, [high - low + 1])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        values = np.arange(low, high + 1).astype(_NUMPY[x_type])
        return session.run(None, {"x": values})[0].astype(np.float32)
    except Exception as e:  # onnxruntime's own words say which input it refused
        raise ModelError(f"{op}: onnxruntime could not compute its table of 256 values "
                         f"({str(e).splitlines()[0][:200]})",
                         "check the operator's scales and zero points") from e


def _eight_bit_type(r, node, zero_index: int, tensor: str | None,
                    default: int = TensorProto.UINT8) -> int:
    """The 8-bit type of a quantized tensor: its zero point's, else the tensor's own."""
    zero = r.constant(node, zero_index, "zero point")
    if zero is not None:
        onnx_type = helper.np_dtype_to_tensor_dtype(np.asarray(zero).dtype)
    elif tensor is not None:
        onnx_type = r.types.get(tensor) or r.elem_types.get(tensor, default)
    else:
        onnx_type = default
    if onnx_type not in _RANGES:
        raise ModelError(f"{node.op_type} at node '{node.name}' on "
                         f"{TensorProto.DataType.Name(onnx_type)} values",
                         "cw rewrites this operator for uint8 and int8")
    return onnx_type


def _zero(value) -> np.ndarray:
    return np.zeros((), np.int32) if value is None else np.asarray(value).astype(np.int32)
