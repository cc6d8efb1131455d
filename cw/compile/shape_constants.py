"""The integer constants that shape arithmetic reads, written as Constant nodes.

cw imports every initializer into Relax as a parameter (the weights, paged later), a value TVM's
importer cannot look at. Shape arithmetic that onnxslim could not fold, because it reads the
batch (`Shape` -> `Gather` -> `Unsqueeze` -> `Concat` with the rest of a shape), then gave an
`Expand`, `Tile` or `ConstantOfShape` a shape known only when the model runs, and cw refused
the model: a ViT's class token expanded to the batch (`cls_token.expand(B, -1, -1)`), a
recurrent state of zeros (`torch.zeros(layers, B, hidden)`). As Constant nodes, the importer
follows the arithmetic as a shape expression, the batch a symbol in it. A few operators' inputs
the importer reads only as constants are written so too (READ_AS_CONSTANT).
"""

from __future__ import annotations

import onnx

# operators that compute on shapes (what follows a Shape node before a shape is used)
ARITHMETIC = {"Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Add", "Sub", "Mul",
              "Div", "Identity", "Reshape", "Max", "Min"}
MAX_ELEMENTS = 64  # a shape's entries, indices, axes: not a table


# inputs the importer reads only as a constant and never looks up among the parameters (a
# sequence's split sizes and positions: "Only constant split supported for SplitToSequence")
READ_AS_CONSTANT = {"SplitToSequence": (1,), "SequenceAt": (1,), "SequenceInsert": (2,),
                    "SequenceErase": (1,)}


def inline(graph: onnx.GraphProto) -> int:
    """The small integer initializers read by shape arithmetic in `graph`, or where the
    importer wants a constant (READ_AS_CONSTANT), as Constant nodes at its start; returns how
    many."""
    derived = {o for n in graph.node if n.op_type == "Shape" for o in n.output}
    read_as_constant = {node.input[k] for node in graph.node
                        if node.domain in ("", "ai.onnx")
                        for k in READ_AS_CONSTANT.get(node.op_type, ())
                        if k < len(node.input) and node.input[k]}
    if not derived and not read_as_constant:
        return 0
    readers = []
    for node in graph.node:  # (topologically sorted: what a node reads is computed before it)
        if node.op_type in ARITHMETIC and node.domain in ("", "ai.onnx") and \
                any(v in derived for v in node.input):
            derived.update(node.output)
            readers.append(node)
    wanted = {v for node in readers for v in node.input} | read_as_constant
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
