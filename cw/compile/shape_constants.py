"""The integer constants that shape arithmetic reads, written as Constant nodes.

cw imports every initializer into Relax as a parameter (the weights, paged later), a value TVM's
importer cannot look at. Shape arithmetic that onnxslim could not fold, because it reads the
batch (`Shape` -> `Gather` -> `Unsqueeze` -> `Concat` with the rest of a shape), then gave an
`Expand`, `Tile` or `ConstantOfShape` a shape known only when the model runs, and cw refused
the model: a ViT's class token expanded to the batch (`cls_token.expand(B, -1, -1)`), a
recurrent state of zeros (`torch.zeros(layers, B, hidden)`). As Constant nodes, the importer
follows the arithmetic as a shape expression, the batch a symbol in it.
"""

from __future__ import annotations

import onnx

# operators that compute on shapes (what follows a Shape node before a shape is used)
ARITHMETIC = {"Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Add", "Sub", "Mul",
              "Div", "Identity", "Reshape", "Max", "Min"}
MAX_ELEMENTS = 64  # a shape's entries, indices, axes: not a table


def inline(graph: onnx.GraphProto) -> int:
    """The small integer initializers read by shape arithmetic in `graph`, as Constant nodes
    at its start; returns how many."""
    derived = {o for n in graph.node if n.op_type == "Shape" for o in n.output}
    if not derived:
        return 0
    readers = []
    for node in graph.node:  # (topologically sorted: what a node reads is computed before it)
        if node.op_type in ARITHMETIC and node.domain in ("", "ai.onnx") and \
                any(v in derived for v in node.input):
            derived.update(node.output)
            readers.append(node)
    wanted = {v for node in readers for v in node.input}
    integer = (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
    chosen = [k for k, t in enumerate(graph.initializer)
              if t.name in wanted and t.data_type in integer and
              _elements(t) <= MAX_ELEMENTS]
    constants = []
    for k in chosen:
        tensor = graph.initializer[k]
        constants.append(onnx.helper.make_node("Constant", [], [tensor.name],
                                               name=f"{tensor.name}__cw_constant",
                                               value=tensor))
    for k in reversed(chosen):
        del graph.initializer[k]
    for position, node in enumerate(constants):
        graph.node.insert(position, node)
    return len(constants)


def _elements(tensor: onnx.TensorProto) -> int:
    count = 1
    for d in tensor.dims:
        count *= d
    return count
