"""ONNX `If` nodes whose branch the input shapes decide, replaced by that branch.

PyTorch exports keep Python's shape tests as `If` nodes: "squeeze the last axis if it is 1",
"unsqueeze a batch axis if the input has rank 2" (Silero VAD has 12 of them, nested). Once
`--input-shape` has fixed every dimension but the batch, each such condition is a constant,
and the graph is a static DNN that cw can schedule. A condition that reads an input's values
(data-dependent control flow) or the batch size (a different graph per compiled batch size)
is not folded, and the model is refused with the node's name and the reason.

The condition is evaluated on the shapes ONNX's shape inference gives, with the batch left
symbolic: a `Shape` is a vector whose batch entry is unknown, and any result that needs an
unknown entry stays unknown.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from cw.compile import onnx_shapes

_DOMAINS = ("", "ai.onnx")
_COMPARE = {"Equal": np.equal, "Greater": np.greater, "Less": np.less,
            "GreaterOrEqual": np.greater_equal, "LessOrEqual": np.less_equal,
            "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
            "Add": np.add, "Sub": np.subtract, "Mul": np.multiply}


class _Unknown(Exception):
    """A condition cw cannot evaluate at compile time; the message says why."""


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


class _Evaluator:
    """Values computable from constants and static dimensions, by tensor name."""

    def __init__(self, graph: onnx.GraphProto, shapes: dict[str, list]):
        self.shapes = shapes
        self.producer = {o: n for n in graph.node for o in n.output}
        self.inputs = {i.name for i in graph.input}
        self.values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}

    def shape_of(self, name: str) -> np.ndarray:
        dims = self.shapes.get(name)
        if dims is None:
            raise _Unknown(f"the shape of '{name}' is not known before it runs")
        # None marks an unknown entry (the batch, or a size only running the graph gives)
        return np.array(dims, dtype=object)

    def value(self, name: str) -> np.ndarray:
        if name in self.values:
            return self.values[name]
        if name in self.inputs:
            raise _Unknown(f"it reads the values of input '{name}'")
        node = self.producer.get(name)
        if node is None:
            raise _Unknown(f"'{name}' has no producer")
        result = self._compute(node)
        self.values[name] = result
        return result

    def known(self, name: str) -> np.ndarray:
        v = self.value(name)
        if v.dtype == object:
            if any(x is None for x in v.reshape(-1)):
                raise _Unknown("it depends on the batch size or on a size only running the "
                               "graph gives")
            v = v.astype(np.int64)
        return v

    def _compute(self, node) -> np.ndarray:
        op = node.op_type if node.domain in _DOMAINS else f"{node.domain}.{node.op_type}"
        if op == "Constant":
            return numpy_helper.to_array(_attr(node, "value"))
        if op == "Shape":
            shape = self.shape_of(node.input[0])
            return shape[_attr(node, "start", 0):_attr(node, "end", len(shape))]
        if op == "Size":
            try:  # a Shape's output, say: its length is known when its entries are not
                return np.array(self.value(node.input[0]).size, np.int64)
            except _Unknown:
                return np.array(int(np.prod(self.known_shape(node.input[0]))), np.int64)
        if op == "Identity":
            return self.value(node.input[0])
        if op == "Gather":
            data, indices = self.value(node.input[0]), self.known(node.input[1])
            return np.take(data, indices, axis=_attr(node, "axis", 0))
        if op == "Squeeze":
            axes = self._axes(node)
            return np.squeeze(self.value(node.input[0]), axes)
        if op == "Unsqueeze":
            return np.expand_dims(self.value(node.input[0]), self._axes(node))
        if op == "Concat":
            return np.concatenate([self.value(i) for i in node.input], axis=_attr(node, "axis"))
        if op == "Not":
            return np.logical_not(self.known(node.input[0]))
        if op == "Cast":
            to = helper.tensor_dtype_to_np_dtype(_attr(node, "to"))
            return self.known(node.input[0]).astype(to)
        if op in _COMPARE:
            a, b = self.known(node.input[0]), self.known(node.input[1])
            return np.asarray(_COMPARE[op](a, b))
        read = self._inputs_read(node)
        if read:
            raise _Unknown(f"it reads the values of input '{read[0]}'")
        raise _Unknown(f"cw does not evaluate {node.op_type} ('{node.name}') at compile time")

    def _inputs_read(self, node) -> list[str]:
        """Graph inputs whose values (not only shapes) reach `node`."""
        found, seen, stack = [], set(), [node]
        while stack:
            n = stack.pop()
            if n.op_type in ("Shape", "Size"):
                continue
            for v in n.input:
                if v in seen or not v:
                    continue
                seen.add(v)
                if v in self.inputs:
                    found.append(v)
                elif v in self.producer:
                    stack.append(self.producer[v])
        return found

    def _axes(self, node) -> tuple[int, ...] | None:
        # an input since opset 13, an attribute before
        axes = self.known(node.input[1]) if len(node.input) > 1 and node.input[1] \
            else _attr(node, "axes")
        return None if axes is None else tuple(int(a) for a in np.reshape(axes, -1))

    def known_shape(self, name: str) -> list[int]:
        shape = self.shape_of(name)
        if any(d is None for d in shape):
            raise _Unknown(f"the size of '{name}' depends on the batch")
        return [int(d) for d in shape]


def _inferred_shapes(model: onnx.ModelProto) -> dict[str, list]:
    return onnx_shapes.dims(onnx_shapes.infer(model), model)


def _inline(graph: onnx.GraphProto, index: int, branch: onnx.GraphProto) -> None:
    """Replace graph.node[index] (an If) by `branch`'s nodes, then Identity nodes from the
    branch's outputs to the If's. Names made inside the branch that the outer graph already
    uses are renamed (ONNX scopes them; the flat graph would not)."""
    node = graph.node[index]
    taken = {o for n in graph.node for o in n.output} | {i.name for i in graph.input}
    taken |= {t.name for t in graph.initializer}
    renamed = {}
    for n in branch.node:
        for o in n.output:
            if o in taken:
                renamed[o] = f"{o}__cw_{node.name or node.output[0]}"
    for t in branch.initializer:
        if t.name in taken:
            renamed[t.name] = f"{t.name}__cw_{node.name or node.output[0]}"
    new_nodes = []
    for n in branch.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        copy.input[:] = [renamed.get(v, v) for v in n.input]
        copy.output[:] = [renamed.get(v, v) for v in n.output]
        new_nodes.append(copy)
    for t in branch.initializer:
        copy = onnx.TensorProto()
        copy.CopyFrom(t)
        copy.name = renamed.get(t.name, t.name)
        graph.initializer.append(copy)
    for out, result in zip(branch.output, node.output):
        new_nodes.append(helper.make_node("Identity", [renamed.get(out.name, out.name)],
                                          [result], name=f"{result}__cw_branch"))
    nodes = list(graph.node)
    nodes[index:index + 1] = new_nodes
    del graph.node[:]
    graph.node.extend(nodes)


def fold_static_branches(model: onnx.ModelProto) -> tuple[int, list[tuple[str, str]]]:
    """Inline, in place, every `If` whose condition is a constant once the shapes are fixed,
    nested ones too. Returns how many were folded and, for each `If` left, its name and why
    its condition is not a constant."""
    folded = 0
    while True:
        graph = model.graph
        ifs = [i for i, n in enumerate(graph.node) if n.op_type == "If" and n.domain in _DOMAINS]
        if not ifs:
            return folded, []
        evaluator = _Evaluator(graph, _inferred_shapes(model))
        left, progress = [], False
        for index in ifs:
            node = graph.node[index]
            try:
                condition = evaluator.known(node.input[0])
            except _Unknown as why:
                left.append((node.name or node.output[0], str(why)))
                continue
            branch = _attr(node, "then_branch" if bool(condition.reshape(-1)[0])
                           else "else_branch")
            _inline(graph, index, branch)
            folded += 1
            progress = True
            break  # node indices moved: evaluate again on the new graph
        if not progress:
            return folded, left
