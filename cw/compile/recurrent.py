"""ONNX `LSTM` unrolled into the operators TVM imports (MatMul, Add, Sigmoid, Tanh, Mul).

TVM 0.27's Relax importer has no recurrent operators. With the sequence length fixed by the
input shapes, an LSTM is a fixed chain of products: one input projection for every step at
once, then per step a product by the recurrent weights and the gate arithmetic of the ONNX
definition (gates i, o, f, c in that order; C = f*C + i*tanh(c); H = o*tanh(C)). Forward,
reverse and bidirectional layers, optional biases, initial states and peepholes are rewritten;
other variants (clip, input_forget, activations other than the defaults, batch-first layout,
sequence_lens) are refused by name.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
from onnx import helper, numpy_helper

from cw.errors import ModelError

_DOMAINS = ("", "ai.onnx")
_DEFAULT_ACTIVATIONS = ["Sigmoid", "Tanh", "Tanh"]


def is_rewritten(node: onnx.NodeProto) -> bool:
    return node.op_type == "LSTM" and node.domain in _DOMAINS


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            value = helper.get_attribute_value(a)
            return value.decode() if isinstance(value, bytes) else value
    return default


class _Emitter:
    """Appends nodes and constants for one LSTM, with names derived from its own."""

    def __init__(self, prefix: str, inits: dict):
        # identifiers: TVM's CUDA code names kernel parameters after tensors
        prefix = re.sub(r"\W", "_", prefix)
        self.prefix, self.inits, self.nodes, self.count = prefix, inits, [], 0
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

    def const(self, value: np.ndarray, what: str) -> str:
        name = self.name(what)
        self.new_inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, source: str, direction: int, what: str, transpose: bool) -> str:
        """`source[direction]` (transposed), computed here when `source` is an initializer,
        else as graph nodes (which cw lifts as weight-only math)."""
        if source in self.inits:
            w = numpy_helper.to_array(self.inits[source])[direction]
            return self.const(np.ascontiguousarray(w.T if transpose else w), what)
        picked = self.op("Gather", [source, self.const(np.array(direction, np.int64), "d")],
                         what, axis=0)
        return self.op("Transpose", [picked], what, perm=[1, 0]) if transpose else picked


def _refusal(node, what: str) -> ModelError:
    return ModelError(f"LSTM '{node.name or node.output[0]}' {what}: cw unrolls only the "
                      "standard LSTM", "export it with default activations, no clip, "
                      "input_forget=0, layout=0 and no sequence_lens")


def _check(node, seq_len) -> None:
    activations = _attr(node, "activations")
    if activations and [a.decode() if isinstance(a, bytes) else a for a in activations] \
            not in (_DEFAULT_ACTIVATIONS, _DEFAULT_ACTIVATIONS * 2):
        raise _refusal(node, f"has activations {activations}")
    for name, default in (("clip", None), ("input_forget", 0), ("layout", 0)):
        if _attr(node, name, default) != default:
            raise _refusal(node, f"has {name}={_attr(node, name)}")
    if len(node.input) > 4 and node.input[4]:
        raise _refusal(node, "has sequence_lens")
    if seq_len is None:
        raise ModelError(f"LSTM '{node.name or node.output[0]}': its sequence length is not "
                         "fixed", "fix the input's time axis with --input-shape")


def _input(node, i: int) -> str:
    return node.input[i] if len(node.input) > i else ""


def _unroll(node, e: _Emitter, seq_len: int, hidden: int) -> None:
    directions = {"forward": [0], "reverse": [1], "bidirectional": [0, 1]}
    direction = _attr(node, "direction", "forward")
    x, w, r, b = node.input[0], node.input[1], node.input[2], _input(node, 3)
    h0, c0, p = _input(node, 5), _input(node, 6), _input(node, 7)
    ys, hs, cs = [], [], []
    for d, reverse in enumerate(directions[direction]):
        xw = e.op("MatMul", [x, e.weight(w, d, "wt", True)], "xw")  # [T, B, 4H]
        if b:
            if b in e.inits:
                bias = numpy_helper.to_array(e.inits[b])[d]
                bias_name = e.const(bias[:4 * hidden] + bias[4 * hidden:], "bias")
            else:
                halves = e.split(e.weight(b, d, "b", False), [4 * hidden] * 2, 0, "b")
                bias_name = e.op("Add", halves, "bias")
            xw = e.op("Add", [xw, bias_name], "xwb")
        rt = e.weight(r, d, "rt", True)
        peep = e.split(e.weight(p, d, "p", False), [hidden] * 3, 0, "p") if p else None
        h = e.op("Gather", [h0, e.const(np.array(d, np.int64), "d")], "h", axis=0) if h0 else None
        c = e.op("Gather", [c0, e.const(np.array(d, np.int64), "d")], "c", axis=0) if c0 else None
        steps = range(seq_len - 1, -1, -1) if reverse else range(seq_len)
        outputs = {}
        for t in steps:
            gates = e.op("Gather", [xw, e.const(np.array(t, np.int64), "t")], "g", axis=0)
            if h is not None:
                gates = e.op("Add", [gates, e.op("MatMul", [h, rt], "hr")], "gates")
            i, o, f, cand = e.split(gates, [hidden] * 4, -1, "gate")
            if peep and c is not None:
                i = e.op("Add", [i, e.op("Mul", [peep[0], c], "pic")], "ip")
                f = e.op("Add", [f, e.op("Mul", [peep[2], c], "pfc")], "fp")
            i, f = e.op("Sigmoid", [i], "i"), e.op("Sigmoid", [f], "f")
            new_c = e.op("Mul", [i, e.op("Tanh", [cand], "cand")], "ic")
            if c is not None:  # an absent initial state is zeros: f*C is 0 at the first step
                new_c = e.op("Add", [e.op("Mul", [f, c], "fc"), new_c], "cnew")
            c = new_c
            if peep:
                o = e.op("Add", [o, e.op("Mul", [peep[1], c], "poc")], "op")
            h = e.op("Mul", [e.op("Sigmoid", [o], "o"), e.op("Tanh", [c], "tc")], "h")
            outputs[t] = h
        axis0 = e.const(np.array([0], np.int64), "axis0")
        ys.append(e.op("Concat", [e.op("Unsqueeze", [outputs[t], axis0], "yt")
                                  for t in range(seq_len)], "y", axis=0))  # [T, B, H]
        hs.append(e.op("Unsqueeze", [h, axis0], "hn"))
        cs.append(e.op("Unsqueeze", [c, axis0], "cn"))
    axis1 = e.const(np.array([1], np.int64), "axis1")
    wanted = list(node.output) + [""] * (3 - len(node.output))
    if wanted[0]:
        e.op("Concat", [e.op("Unsqueeze", [y, axis1], "yd") for y in ys], axis=1,
             outputs=[wanted[0]])
    for out, parts in ((wanted[1], hs), (wanted[2], cs)):
        if out:
            e.op("Concat", parts, axis=0, outputs=[out])


def rewrite(model: onnx.ModelProto) -> int:
    """Unroll every LSTM of `model` in place; returns how many. Needs the sequence length
    and the hidden size from the shapes (fixed by then)."""
    graph = model.graph
    if not any(is_rewritten(n) for n in graph.node):
        return 0
    inferred = onnx.shape_inference.infer_shapes(model)
    dims = {vi.name: [d.dim_value if d.HasField("dim_value") else None
                      for d in vi.type.tensor_type.shape.dim]
            for vi in (*inferred.graph.input, *inferred.graph.value_info)}
    inits = {t.name: t for t in graph.initializer}
    nodes, count = [], 0
    for node in graph.node:
        if not is_rewritten(node):
            nodes.append(node)
            continue
        x, r = node.input[0], node.input[2]
        x_dims = list(inits[x].dims) if x in inits else dims.get(x)
        seq_len = x_dims[0] if x_dims else None
        _check(node, seq_len)
        hidden = _attr(node, "hidden_size")
        if hidden is None:  # optional: R is [directions, 4H, H]
            r_dims = list(inits[r].dims) if r in inits else dims.get(r)
            hidden = r_dims[2] if r_dims and r_dims[2] else None
        if hidden is None:
            raise _refusal(node, "has no hidden_size and its R has no known shape")
        e = _Emitter(node.name or node.output[0], inits)
        _unroll(node, e, seq_len, int(hidden))
        nodes.extend(e.nodes)
        graph.initializer.extend(e.new_inits)
        count += 1
    del graph.node[:]
    graph.node.extend(nodes)
    return count
