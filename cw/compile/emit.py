"""Writing ONNX nodes in place of one that TVM's importer cannot take: the helper the graph
rewrites (cw/compile/recurrent.py, cw/compile/decompose.py) share."""

from __future__ import annotations

import re

import numpy as np
import onnx
from onnx import helper, numpy_helper


def attr(node: onnx.NodeProto, name: str, default=None):
    """Attribute `name` of `node` as a Python value (strings decoded), else `default`."""
    for a in node.attribute:
        if a.name == name:
            value = helper.get_attribute_value(a)
            return value.decode() if isinstance(value, bytes) else value
    return default


class Emitter:
    """Collects the nodes and constants that replace one node, with names derived from its
    own (identifiers: TVM's CUDA code names kernel parameters after tensors)."""

    def __init__(self, prefix: str, inits: dict, opset: int = 17):
        prefix = re.sub(r"\W", "_", prefix)
        self.prefix, self.inits, self.opset, self.nodes, self.count = prefix, inits, opset, [], 0
        self.new_inits: list[onnx.TensorProto] = []

    def name(self, what: str) -> str:
        self.count += 1
        return f"{self.prefix}__cw_{what}{self.count}"

    def op(self, op_type: str, inputs: list[str], what: str = "", outputs=None, **attrs):
        outputs = outputs or [self.name(what or op_type.lower())]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=outputs[0], **attrs))
        return outputs[0]

    def split(self, x: str, sizes: list[int], axis: int, what: str) -> list[str]:
        names = [self.name(f"{what}{k}") for k in range(len(sizes))]
        self.op("Split", [x, self.const(np.array(sizes, np.int64), "sizes")], outputs=names,
                axis=axis)
        return names

    def reduce(self, op_type: str, x: str, axes: list[int], what: str = "", outputs=None,
               keepdims: int = 1) -> str:
        """A Reduce* node in the form the model's opset has (axes an input from opset 18;
        ReduceSum's from 13)."""
        if self.opset >= (13 if op_type == "ReduceSum" else 18):
            return self.op(op_type, [x, self.const(np.array(axes, np.int64), "axes")], what,
                           outputs, keepdims=keepdims)
        return self.op(op_type, [x], what, outputs, axes=axes, keepdims=keepdims)

    def const(self, value: np.ndarray, what: str) -> str:
        name = self.name(what)
        self.new_inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def constant(self, name: str) -> np.ndarray | None:
        """The value of tensor `name` where it is an initializer (constants are, after
        onnxslim), else None."""
        t = self.inits.get(name)
        return numpy_helper.to_array(t) if t is not None else None
