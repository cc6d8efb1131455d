"""A small ONNX graph builder with deterministic, seeded weights.

Weights come from PCG64's raw 64-bit stream (the bit generator's output is stable across numpy
versions and platforms, unlike its distributions) turned into float32 with integer arithmetic, so
the same model name gives byte-identical ONNX files on any machine.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
BATCH_DIM = "N"


def seeded_uniform(key: str, shape: tuple[int, ...], low: float, high: float) -> np.ndarray:
    """Uniform float32 values in [low, high), a pure function of `key` and `shape`."""
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
    count = math.prod(shape)
    raw = np.random.PCG64(seed).random_raw(count)
    unit = (raw >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24)
    values = np.float32(low) + unit * np.float32(high - low)
    return values.astype(np.float32).reshape(shape)


class GraphBuilder:
    """Accumulates nodes and initializers; every helper returns the name of its output."""

    def __init__(self, model_name: str):
        self.model_name = model_name
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._counter = 0

    def _fresh(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}_{self._counter}"

    def weight(self, name: str, shape: tuple[int, ...], low: float, high: float) -> str:
        array = seeded_uniform(f"{self.model_name}/{name}", shape, low, high)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def constant(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def node(self, op: str, inputs: list[str], prefix: str | None = None, **attrs) -> str:
        out = self._fresh(prefix or op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    # Layers ---------------------------------------------------------------------------------
    def conv(self, x: str, name: str, cin: int, cout: int, kernel, stride=1, pad=0, group=1,
             bias=False) -> str:
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        ph, pw = (pad, pad) if isinstance(pad, int) else pad
        sh, sw = (stride, stride) if isinstance(stride, int) else stride
        fan_in = cin // group * kh * kw
        bound = math.sqrt(6.0 / fan_in)  # He-uniform keeps activation scale through ReLUs
        inputs = [x, self.weight(f"{name}.weight", (cout, cin // group, kh, kw), -bound, bound)]
        if bias:
            inputs.append(self.weight(f"{name}.bias", (cout,), -0.05, 0.05))
        return self.node("Conv", inputs, prefix=name, kernel_shape=[kh, kw],
                         strides=[sh, sw], pads=[ph, pw, ph, pw], group=group)

    def batchnorm(self, x: str, name: str, channels: int, eps: float = 1e-5,
                  gamma_range=(0.8, 1.2)) -> str:
        c = (channels,)
        inputs = [x,
                  self.weight(f"{name}.gamma", c, *gamma_range),
                  self.weight(f"{name}.beta", c, -0.1, 0.1),
                  self.weight(f"{name}.running_mean", c, -0.1, 0.1),
                  self.weight(f"{name}.running_var", c, 0.9, 1.1)]
        return self.node("BatchNormalization", inputs, prefix=name, epsilon=eps)

    def relu(self, x: str) -> str:
        return self.node("Relu", [x])

    def relu6(self, x: str) -> str:
        lo = self._shared_scalar("clip_min", 0.0)
        hi = self._shared_scalar("clip_max", 6.0)
        return self.node("Clip", [x, lo, hi], prefix="relu6")

    def _shared_scalar(self, name: str, value: float) -> str:
        if not any(t.name == name for t in self.initializers):
            self.constant(name, np.array(value, dtype=np.float32))
        return name

    def maxpool(self, x: str, kernel: int, stride: int, pad: int = 0) -> str:
        return self.node("MaxPool", [x], kernel_shape=[kernel, kernel], strides=[stride, stride],
                         pads=[pad] * 4)

    def avgpool(self, x: str, kernel: int, stride: int, pad: int = 0,
                count_include_pad: int = 0) -> str:
        return self.node("AveragePool", [x], kernel_shape=[kernel, kernel],
                         strides=[stride, stride], pads=[pad] * 4,
                         count_include_pad=count_include_pad)

    def global_avgpool(self, x: str) -> str:
        return self.node("GlobalAveragePool", [x])

    def flatten(self, x: str) -> str:
        return self.node("Flatten", [x], axis=1)

    def add(self, a: str, b: str) -> str:
        return self.node("Add", [a, b])

    def concat(self, xs: list[str]) -> str:
        return self.node("Concat", xs, axis=1)

    def gemm(self, x: str, name: str, fin: int, fout: int) -> str:
        bound = 1.0 / math.sqrt(fin)
        w = self.weight(f"{name}.weight", (fout, fin), -bound, bound)
        b = self.weight(f"{name}.bias", (fout,), -bound, bound)
        return self.node("Gemm", [x, w, b], prefix=name, transB=1)

    # Model ----------------------------------------------------------------------------------
    def finish(self, x_name: str, input_shape: tuple[int, ...], y: str, output_shape: tuple,
               batch: int | None = None, input_dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
        """Wrap up as a model; `batch=None` leaves the leading dimension symbolic ("N")."""
        lead = BATCH_DIM if batch is None else batch
        inp = helper.make_tensor_value_info(x_name, input_dtype, [lead, *input_shape])
        self.nodes.append(helper.make_node("Identity", [y], ["output"], name="output"))
        out = helper.make_tensor_value_info("output", TensorProto.FLOAT, [lead, *output_shape])
        graph = helper.make_graph(self.nodes, self.model_name, [inp], [out], self.initializers)
        model = helper.make_model(graph, producer_name="cw.model_zoo",
                                  opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model)
        return model
