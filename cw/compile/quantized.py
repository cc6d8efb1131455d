"""Quantized ONNX graphs (QuantizeLinear, DequantizeLinear, onnxruntime's QLinearAdd and
QLinearGlobalAveragePool; in cw/compile/quantized_products.py QLinearConv, QLinearMatMul,
onnxruntime's QGemm and dynamic quantization's DynamicQuantizeLinear, MatMulInteger and
ConvInteger; in cw/compile/quantized_activations.py, onnxruntime's QLinearSigmoid,
QLinearLeakyRelu, QLinearMul, QLinearConcat, QLinearAveragePool and QLinearSoftmax) as float32
arithmetic on their integer values, so that TVM compiles them with the float kernels cw
schedules.

TVM 0.27's importer has no QLinear operators (ONNX Model Zoo int8 models, onnxruntime's
quantization tool's output). Rewritten, each quantized tensor keeps its name and holds the same
integers, stored as float32; each operator computes what onnxruntime's integer kernels compute:

- a convolution or matrix product sums (x - x_zero) * (w - w_zero) plus its int32 bias. Those
  are integers, and float32 holds every integer below 2**24 exactly, so the sum is exact while
  its partial sums stay below 16.7 million (an int8 layer's are usually below 10**6);
- the sum is requantized as onnxruntime's MLAS does: times x_scale * w_scale / y_scale (those
  float32 operations in that order), rounded half to even, plus y_zero, saturated to the type;
- QLinearAdd computes what onnxruntime's vector kernel does (the zero points folded into one
  term, two fused multiply-adds; the few elements its scalar loop takes at a tensor's end use
  another formula, which rounds a value at .5 the other way in ~1 of 10^5);
- the average pool sums (x - x_zero) over each map and scales the sum by
  x_scale / (y_scale * pixels), as MLAS does;
- DynamicQuantizeLinear follows ONNX's own definition (the range of x widened to hold 0,
  divided by 255), MatMulInteger and ConvInteger give their int32 sums.

Weights are folded to float32 here: a bundle holds 4x the bytes of the int8 file. What is
gained is a model that runs, on the CPU and on the GPU, at about the speed of its float
counterpart (mobilenet_v2 on the CPU: +12 % for the requantizations); what a user sees of the
quantization (the integers of each layer) is kept.
"""

from __future__ import annotations

import collections
import copy

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cw.compile import onnx_shapes
from cw.compile import quantized_activations as activations, quantized_products as products
from cw.compile.quantized_products import attribute
from cw.errors import ModelError

_ONNX = ("", "ai.onnx")
_MS = ("com.microsoft",)
# (domains, operator): every one of these is rewritten; onnx_load's operator check lets them by
REWRITTEN = {
    "QuantizeLinear": _ONNX, "DequantizeLinear": _ONNX, "QLinearConv": _ONNX,
    "QLinearMatMul": _ONNX, "QLinearAdd": _MS, "QLinearGlobalAveragePool": _MS, "QGemm": _MS,
    # onnxruntime's dynamic quantization (transformers): scales computed from each input
    "DynamicQuantizeLinear": _ONNX, "MatMulInteger": _ONNX, "ConvInteger": _ONNX,
    # between the products (cw/compile/quantized_activations.py)
    "QLinearMul": _MS, "QLinearSigmoid": _MS, "QLinearLeakyRelu": _MS, "QLinearConcat": _MS,
    "QLinearAveragePool": _MS, "QLinearSoftmax": _MS,
}
# operators that move, pick or pad values without computing new ones: on a quantized tensor
# they give the same integers (onnxruntime runs them on the 8-bit tensors as they are)
_VALUE_PRESERVING = {"MaxPool", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten",
                     "Slice", "Split", "Concat", "Identity", "Pad", "Gather", "Tile", "Expand",
                     "DepthToSpace", "SpaceToDepth", "Resize"}
MIN_OPSET = 11  # Round, and Clip taking its bounds as inputs
_QUANTIZED_TYPES = {TensorProto.UINT8: (0, 255), TensorProto.INT8: (-128, 127),
                    TensorProto.UINT16: (0, 65535), TensorProto.INT16: (-32768, 32767)}


def is_rewritten(node: onnx.NodeProto) -> bool:
    return node.domain in REWRITTEN.get(node.op_type, ())


class _Rewriter:
    def __init__(self, model: onnx.ModelProto, opset: int):
        self.model, self.opset = model, opset
        graph = model.graph
        self.constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in _ONNX and len(node.attribute) == 1 \
                    and node.attribute[0].name == "value":
                self.constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
            elif node.op_type == "Identity" and node.input[0] in self.constants:
                self.constants[node.output[0]] = self.constants[node.input[0]]
        self.ranks, self.elem_types = _ranks_and_types(model)
        self.types: dict[str, int] = {}  # quantized tensor -> its ONNX integer type
        self.nodes: list[onnx.NodeProto] = []
        self.new_initializers: list[onnx.TensorProto] = []
        self.taken = {v for n in graph.node for v in (*n.input, *n.output)}
        self.taken |= {t.name for t in graph.initializer} | {i.name for i in graph.input}
        self.counter = 0
        self.centered_names: dict[tuple, str] = {}
        self.dynamic = False  # a scale computed in the graph (from the batch's values)

    # --- emitting -------------------------------------------------------------------------

    def fresh(self, hint: str) -> str:
        while True:
            self.counter += 1
            name = f"{hint}__cwq{self.counter}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def tensor(self, value, hint: str) -> str:
        """A tensor's name as it is, a value as a new constant."""
        return value if isinstance(value, str) else self.const(value, hint)

    def const(self, value, hint: str) -> str:
        name = self.fresh(hint)
        self.new_initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def emit(self, op: str, inputs: list[str], hint: str, out: str | None = None,
             **attrs) -> str:
        out = out or self.fresh(hint)
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    # --- reading ---------------------------------------------------------------------------

    def constant(self, node, index: int, what: str, dynamic: bool = False):
        """The constant value of input `index`, None where it is absent; with `dynamic`, the
        name of a tensor computed in the graph (a dynamic quantization's scale) instead of an
        error."""
        if index >= len(node.input) or not node.input[index]:
            return None
        name = node.input[index]
        if name not in self.constants:
            if dynamic:
                self.dynamic = self.dynamic or what == "scale"
                return name
            raise ModelError(f"{node.op_type} at node '{node.name}': its {what} ('{name}') is "
                             "computed in the graph, not a constant",
                             "quantize the model with constant scales and zero points")
        return self.constants[name]

    def scale(self, node, index: int, dynamic: bool = False):
        """A float32 array, or (with `dynamic`) the name of a scale computed in the graph."""
        value = self.constant(node, index, "scale", dynamic)
        return value if isinstance(value, str) else np.asarray(value, dtype=np.float32)

    def zero_point(self, node, index: int, default_type=TensorProto.UINT8,
                   dynamic: bool = False):
        """(zero point as a float32 array, or with `dynamic` the name of one computed in the
        graph as float32; the quantized type it declares)"""
        value = self.constant(node, index, "zero point", dynamic)
        if value is None:
            return np.zeros((), np.float32), default_type
        if isinstance(value, str):
            onnx_type = self.types.get(value) or self.elem_types.get(value, default_type)
            return self.integers(value, value), onnx_type
        onnx_type = helper.np_dtype_to_tensor_dtype(value.dtype)
        # int32: a bias's (DequantizeLinear only, which needs no saturation)
        if onnx_type not in _QUANTIZED_TYPES and onnx_type != TensorProto.INT32:
            raise ModelError(f"{node.op_type} at node '{node.name}': zero point of type "
                             f"{value.dtype}", "cw rewrites 8- and 16-bit quantization")
        return value.astype(np.float32), onnx_type

    def binary_operands(self, node):
        """The quantization of a QLinear operator with two operands (inputs 0-7: a, its scale
        and zero, b, its scale and zero, the output's scale and zero): (a scale, a zero,
        b scale, b zero, y scale, y zero, y type)."""
        a_zero, _ = self.zero_point(node, 2)
        b_zero, _ = self.zero_point(node, 5)
        y_zero, y_type = self.zero_point(node, 7)
        return (self.scale(node, 1), a_zero, self.scale(node, 4), b_zero, self.scale(node, 6),
                y_zero, y_type)

    def integers(self, name: str, hint: str) -> str:
        """`name` as float32 holding its integers: a rewritten tensor as it is, a constant
        converted here, anything else (an integer graph input) cast in the graph."""
        if name in self.types:
            return name
        if name in self.constants:
            return self.const(self.constants[name].astype(np.float32), hint)
        return self.emit("Cast", [name], hint, to=TensorProto.FLOAT)

    def passed_through(self, node) -> None:
        """A node left as it is reads a quantized tensor (float32 integers now): its outputs
        are quantized alike where it only moves values, and an 8-bit constant beside them
        (Pad's value) becomes float32 as well."""
        if node.op_type not in _VALUE_PRESERVING:
            return  # Shape, ArgMax and the like: their outputs hold no quantized values
        mode = attribute(node, "mode", b"nearest")
        if node.op_type == "Resize" and mode not in (b"nearest", "nearest"):
            raise ModelError(f"Resize at node '{node.name}' interpolates ({mode.decode()}) a "
                             "quantized tensor", "cw rewrites nearest-neighbour resizing of "
                             "quantized tensors only; quantize the model in the QDQ format")
        for i, name in enumerate(node.input):
            value = self.constants.get(name)
            if value is not None and name not in self.types \
                    and helper.np_dtype_to_tensor_dtype(value.dtype) in _QUANTIZED_TYPES:
                node.input[i] = self.const(value.astype(np.float32), name)
        data_type = next(self.types[v] for v in node.input if v in self.types)
        for name in node.output:
            if name:
                self.types[name] = data_type

    # --- arithmetic --------------------------------------------------------------------------

    def centered(self, x: str, zero: np.ndarray, hint: str) -> str:
        """x - zero, one node for all consumers of x with that zero point: a second would
        make the kernel that computes x write both x and x - zero, and cw's convolution
        schedule places an epilogue with one output only (12 of mobilenetv2-12-int8's
        convolutions ran unscheduled, 60 of its 80 ms)."""
        if not _nonzero(zero):
            return x
        key = (x, zero) if isinstance(zero, str) else (x, zero.shape, zero.tobytes())
        if key not in self.centered_names:
            self.centered_names[key] = self.emit("Sub", [x, self.tensor(zero, hint + "_zero")],
                                                 hint)
        return self.centered_names[key]

    def requantize(self, acc: str, multiplier: np.ndarray, zero: np.ndarray, onnx_type: int,
                   out: str, hint: str) -> None:
        """MLAS's requantization of an int32 sum: times the multiplier, rounded, plus the zero
        point, saturated."""
        scaled = self.emit("Mul", [acc, self.const(multiplier, hint + "_multiplier")], hint)
        self.rounded(scaled, zero, onnx_type, out, hint)

    def rounded(self, value: str, zero: np.ndarray, onnx_type: int, out: str,
                hint: str) -> None:
        """`out` = value rounded half to even (ONNX Round; TVM lowers it to nearbyint on the
        CPU and the GPU), plus the zero point, saturated to the type."""
        if onnx_type not in _QUANTIZED_TYPES:
            raise ModelError(f"a quantized tensor '{out}' of ONNX type "
                             f"{TensorProto.DataType.Name(onnx_type)}",
                             "cw rewrites 8- and 16-bit quantization")
        low, high = _QUANTIZED_TYPES[onnx_type]
        result = self.emit("Round", [value], hint)
        if _nonzero(zero):
            result = self.emit("Add", [result, self.tensor(zero, hint + "_zero")], hint)
        self.emit("Clip", [result, self.const(np.float32(low), hint + "_low"),
                           self.const(np.float32(high), hint + "_high")], hint, out=out)
        self.types[out] = onnx_type

    def per_channel(self, value: np.ndarray, axis: int, rank: int) -> np.ndarray:
        """A 1-D per-channel value shaped to broadcast along `axis` of a rank-`rank` tensor, of
        that rank: TVM's layout conversion cannot carry a [C, 1, 1] operand into NCHWc (every
        requantization would then go back to NCHW and forth, 5 ms of mobilenetv2-12-int8's 17)."""
        if isinstance(value, str):  # computed in the graph: per tensor
            return value
        if value.ndim == 0 or value.size == 1:
            return value.reshape(())
        if value.ndim == rank > 1:  # one per element already (`blocks`)
            return value
        axis = axis % rank
        return value.reshape([1] * axis + [-1] + [1] * (rank - 1 - axis))

    # --- operators ---------------------------------------------------------------------------

    def blocks(self, node, value, x: np.ndarray | None):
        """`value` (a scale or zero point) as is, or under opset 21's `block_size` one entry per
        element of `x` (each repeated over its block along `axis`). Blocks need `x` constant:
        a weight (an int4 LLM's), not an activation."""
        block = attribute(node, "block_size", 0)
        if not block or isinstance(value, str) or value.ndim == 0:
            return value
        if x is None:
            raise ModelError(f"{node.op_type} at node '{node.name or node.output[0]}' quantizes "
                             f"in blocks of {block} a tensor computed when the model runs",
                             "quantize that tensor per tensor or per channel")
        axis = attribute(node, "axis", 1) % x.ndim
        return np.repeat(value, block, axis=axis).take(range(x.shape[axis]), axis=axis)

    def quantize_linear(self, node) -> None:
        x = node.input[0]
        scale = self.scale(node, 1, dynamic=True)
        zero, onnx_type = self.zero_point(node, 2, dynamic=True)
        scale, zero = self.blocks(node, scale, None), self.blocks(node, zero, None)
        rank = self.ranks.get(x, 4)
        axis = attribute(node, "axis", 1)
        scale, zero = self.per_channel(scale, axis, rank), self.per_channel(zero, axis, rank)
        hint = node.output[0]
        divided = self.emit("Div", [x, self.tensor(scale, hint + "_scale")], hint)
        self.rounded(divided, zero, onnx_type, node.output[0], hint)

    def dequantize_linear(self, node) -> None:
        x, out = node.input[0], node.output[0]
        scale = self.scale(node, 1, dynamic=True)
        zero, _ = self.zero_point(node, 2, default_type=TensorProto.INT32, dynamic=True)
        axis = attribute(node, "axis", 1)
        value = self.constants.get(x)
        scale, zero = self.blocks(node, scale, value), self.blocks(node, zero, value)
        if value is not None and not isinstance(scale, str) and not isinstance(zero, str):
            rank = value.ndim
            centered = (value.astype(np.int64) - self.per_channel(zero, axis, rank)
                        .astype(np.int64)).astype(np.float32)
            folded = centered * self.per_channel(scale, axis, rank)
            self.new_initializers.append(numpy_helper.from_array(folded, out))
            self.constants[out] = folded
            return
        rank = self.ranks.get(x, 4)
        centered = self.centered(self.integers(x, out), self.per_channel(zero, axis, rank), out)
        scale = self.tensor(self.per_channel(scale, axis, rank), out + "_scale")
        self.emit("Mul", [centered, scale], out, out=out)

    def qlinear_add(self, node) -> None:
        """onnxruntime's vector kernel (MLAS, on every whole vector of a tensor): the zero
        points folded into one term, fixed = c_zero - fma(ra, a_zero, rb * b_zero), then two
        fused multiply-adds, fma(ra, a, fma(rb, b, fixed)) with ra = a_scale / c_scale, each
        rounded once to float32 (this order and these fusions, of seven tried, give its
        integers for all 65,536 pairs of values with each of 11 scales that tell them apart:
        test_qlinear_add_rounds_every_pair_of_values_as_onnxruntime_does). ONNX has no fused
        multiply-add; a product of an 8-bit integer and a float32 is exact in float64, so each
        is that product plus its addend in float64, rounded to float32 (exactly the fused
        result; an unfused one rounds twice: 1 output of ~10^5 another integer, and the layers
        after it carry that on)."""
        out = node.output[0]
        a_scale, a_zero, b_scale, b_zero, c_scale, c_zero, c_type = self.binary_operands(node)
        ratio_a, ratio_b = a_scale / c_scale, b_scale / c_scale
        fixed = np.float32(c_zero - _fused_multiply_add(ratio_a, a_zero, ratio_b * b_zero))
        acc = self.const(fixed, out + "_fixed")
        for name, ratio in ((node.input[3], ratio_b), (node.input[0], ratio_a)):
            if name in self.constants:
                value = self.const(self.constants[name].astype(np.float64), out + "_b")
            else:
                value = self.emit("Cast", [self.integers(name, out)], out, to=TensorProto.DOUBLE)
            product = self.emit("Mul", [value, self.const(ratio.astype(np.float64),
                                                          out + "_ratio")], out)
            total = self.emit("Add", [product, self.emit("Cast", [acc], out,
                                                         to=TensorProto.DOUBLE)], out)
            acc = self.emit("Cast", [total], out, to=TensorProto.FLOAT)
        self.rounded(acc, np.zeros((), np.float32), c_type, out, out)

    def qlinear_global_average_pool(self, node) -> None:
        out = node.output[0]
        x_scale, y_scale = self.scale(node, 1), self.scale(node, 3)
        x_zero, _ = self.zero_point(node, 2)
        y_zero, y_type = self.zero_point(node, 4)
        rank = self.ranks.get(node.input[0], 4)
        channels_last = attribute(node, "channels_last", 0)
        axes = list(range(1, rank - 1)) if channels_last else list(range(2, rank))
        x = self.integers(node.input[0], out)
        centered = self.centered(x, x_zero, out)
        if self.opset >= 13:
            acc = self.emit("ReduceSum", [centered, self.const(np.array(axes, np.int64),
                                                               out + "_axes")], out, keepdims=1)
        else:
            acc = self.emit("ReduceSum", [centered], out, axes=axes, keepdims=1)
        # MLAS: scale = x_scale / (y_scale * pixels), pixels from the input's shape (folded by
        # onnxslim once shapes are known)
        shape = self.emit("Shape", [x], out)
        spatial = self.emit("Gather", [shape, self.const(np.array(axes, np.int64), out + "_ax")],
                            out, axis=0)
        pixels = self.emit("Cast", [self.emit("ReduceProd", [spatial], out, keepdims=0)], out,
                           to=TensorProto.FLOAT)
        denominator = self.emit("Mul", [self.const(y_scale, out + "_y_scale"), pixels], out)
        multiplier = self.emit("Div", [self.const(x_scale, out + "_x_scale"), denominator], out)
        scaled = self.emit("Mul", [acc, multiplier], out)
        self.rounded(scaled, y_zero, y_type, out, out)


_HANDLERS = {
    "QuantizeLinear": _Rewriter.quantize_linear, "DequantizeLinear": _Rewriter.dequantize_linear,
    "QLinearConv": products.qlinear_conv, "QLinearMatMul": products.qlinear_matmul,
    "QLinearAdd": _Rewriter.qlinear_add, "QGemm": products.qgemm,
    "QLinearGlobalAveragePool": _Rewriter.qlinear_global_average_pool,
    "DynamicQuantizeLinear": products.dynamic_quantize_linear,
    "MatMulInteger": products.matmul_integer, "ConvInteger": products.conv_integer,
    "QLinearMul": activations.qlinear_mul,
    "QLinearSigmoid": activations.qlinear_table_activation,
    "QLinearLeakyRelu": activations.qlinear_table_activation,
    "QLinearConcat": activations.qlinear_concat,
    "QLinearAveragePool": activations.qlinear_average_pool,
    "QLinearSoftmax": activations.qlinear_softmax,
}


def _fused_multiply_add(a, b, c) -> np.float32:
    """a * b + c rounded once to float32 (a and b float32 with b an 8-bit integer: the product
    is exact in float64)."""
    return np.float32(np.float64(a) * np.float64(b) + np.float64(np.float32(c)))


def _nonzero(zero) -> bool:
    """Whether a zero point needs subtracting: one computed in the graph (a name) always."""
    return isinstance(zero, str) or bool(np.any(zero))


def _ranks_and_types(model: onnx.ModelProto) -> tuple[dict[str, int], dict[str, int]]:
    try:
        light = onnx_shapes.without_weights(model)
        inferred = onnx.shape_inference.infer_shapes(_standing_in(light))
    except Exception:  # a graph onnx cannot infer still gets default ranks
        inferred = model
    ranks, types = {}, {}
    for vi in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output):
        if vi.type.tensor_type.HasField("shape"):
            ranks[vi.name] = len(vi.type.tensor_type.shape.dim)
        if vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    return ranks, types


def _standing_in(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with onnxruntime's operators, which onnx's shape inference does not know (it
    stops at the first), replaced by ONNX operators that give outputs of the same rank and
    type: enough to know each tensor's rank."""
    def unknown(node):
        return node.domain in _MS and node.op_type.startswith(("QLinear", "QGemm"))

    if not any(unknown(node) for node in model.graph.node):
        return model
    model = copy.deepcopy(model)
    for node in model.graph.node:
        if not unknown(node):
            continue
        inputs, attrs = list(node.input), {}
        if node.op_type in ("QLinearAdd", "QLinearMul"):
            op, inputs = "Max", [inputs[0], inputs[3]]  # broadcasts as they do
        elif node.op_type == "QLinearConcat":
            op, inputs, attrs = "Concat", inputs[2::3], {"axis": attribute(node, "axis", 0)}
        elif node.op_type == "QGemm":
            op, inputs = "Flatten", inputs[:1]
        else:  # activations, softmax and pools keep the rank
            op, inputs = "Identity", inputs[:1]
        node.CopyFrom(helper.make_node(op, inputs, list(node.output), name=node.name, **attrs))
    return model


def rewrite(model: onnx.ModelProto, opset: int) -> str | None:
    """Rewrite every quantized operator of `model` in place; a note saying what was rewritten,
    or None when the graph has none."""
    graph = model.graph
    counts = collections.Counter(n.op_type for n in graph.node if is_rewritten(n))
    if not counts:
        return None
    if opset < MIN_OPSET:
        raise ModelError(f"a quantized model at opset {opset}: cw computes its operators with "
                         f"Round, which needs opset {MIN_OPSET}",
                         "convert it with onnx.version_converter to opset 13 or later")
    r = _Rewriter(model, opset)
    dequantized = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear"}
    batch_norms = 0
    for node in graph.node:
        if is_rewritten(node):
            _HANDLERS[node.op_type](r, node)
        elif (node.op_type == "BatchNormalization" and node.input[0] in dequantized
              and activations.batch_normalization(r, node)):
            batch_norms += 1
        else:
            if any(v in r.types for v in node.input):
                r.passed_through(node)
            r.nodes.append(node)
    # a quantized graph output keeps its type: cast back from the float32 integers
    for output in graph.output:
        if output.name in r.types:
            inner = r.fresh(output.name)
            for n in r.nodes:
                n.output[:] = [inner if v == output.name else v for v in n.output]
                n.input[:] = [inner if v == output.name else v for v in n.input]
            r.nodes.append(helper.make_node("Cast", [inner], [output.name],
                                            to=output.type.tensor_type.elem_type))
    del graph.node[:]
    graph.node.extend(r.nodes)
    graph.initializer.extend(r.new_initializers)
    # declared integer types of the rewritten tensors are float32 now; onnxslim infers again
    stale = [vi for vi in graph.value_info if vi.name in r.types
             or vi.type.tensor_type.elem_type in _QUANTIZED_TYPES]
    for vi in stale:
        graph.value_info.remove(vi)
    used = {v for n in graph.node for v in n.input} | {o.name for o in graph.output}
    for t in [t for t in graph.initializer if t.name not in used]:
        graph.initializer.remove(t)
        # an old exporter's graph lists its initializers among the inputs as well
        for i in [i for i in graph.input if i.name == t.name]:
            graph.input.remove(i)
    ops = ", ".join(f"{n} {op}" for op, n in counts.most_common())
    note = (f"{sum(counts.values())} quantized operators ({ops}) as float32 arithmetic on "
            "their integers, rounded and saturated as onnxruntime does; weights stored as "
            "float32")
    if batch_norms:
        note += (f"; {batch_norms} float BatchNormalizations between them computed in "
                 "onnxruntime's order")
    if r.dynamic:
        note += ("; scales computed from the inputs (dynamic quantization) span the whole "
                 "batch: a request's outputs can move by a quantization step with the requests "
                 "batched with it (zero padding moves nothing)")
    return note
