"""Find where a graph reads its batch size as a value.

`Shape(x)[0]` or `Size(x)` that ends in a Reshape, Expand or ConstantOfShape only sizes
tensors: that is what a symbolic batch is for. Multiplied into a sample's values (`x /
x.shape[0]`), used to pick a sample (`x[x.shape[0] - 1]`) or given out as an output, it makes
each request's answer depend on how many others share its batch, and cw pads a batch of 3 to
the compiled 4. Such graphs compile at batch size 1 only, as graphs that reduce along the
batch do (cw/compile/rebatch.py's batch_mixing).

The analysis is conservative the other way: it reports a node only where a value computed
from the batch size meets a tensor that carries the batch, so that shape arithmetic of any
form never keeps a model at batch 1.
"""

from __future__ import annotations

import onnx

from cw.compile import onnx_shapes
from cw.compile.onnx_load import BATCH_VAR

ALL = None  # every element of a tensor may hold the batch size

# inputs that only size or index the result's shape (op -> input positions): a batch-valued
# tensor there is the symbolic batch at work
_SHAPE_INPUTS = {"Reshape": {1}, "Expand": {1}, "ConstantOfShape": {0}, "Tile": {1},
                 "Slice": {1, 2, 3, 4}, "Resize": {1, 2, 3}, "Upsample": {1}, "Pad": {1, 3},
                 "Squeeze": {1}, "Unsqueeze": {1}, "Split": {1}, "CenterCropPad": {1},
                 "AffineGrid": {1}, "Col2Im": {1, 2}, "TopK": {1}, "OneHot": {1}, "Trilu": {1},
                 "CumSum": {1}, "DFT": {1, 2}, "STFT": {1, 3}, "MaxUnpool": {2},
                 "HannWindow": {0}, "HammingWindow": {0}, "BlackmanWindow": {0},
                 **{op: {1} for op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
                                       "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                                       "ReduceLogSumExp", "ReduceSumSquare")}}
# Range's values are start + i * delta: its length may be the batch, its values are not
_RANGE_LIMIT = 1
_KEEPS_POSITIONS = {"Cast", "Identity"}


def _constant_ints(name: str, constants: dict) -> list[int] | None:
    tensor = constants.get(name)
    if tensor is None:
        return None
    return [int(v) for v in onnx.numpy_helper.to_array(tensor).reshape(-1)]


def _shape_positions(node, dims) -> set[int] | None:
    """The elements of Shape(x) (start/end applied) that are the batch's size."""
    shape = dims.get(node.input[0])
    if shape is None:
        return set()  # (not known: reported by nothing, as the module promises)
    attrs = {a.name: a.i for a in node.attribute}
    rank = len(shape)
    start = attrs.get("start", 0)
    end = attrs.get("end", rank)
    start, end = (max(0, min(rank, v + rank if v < 0 else v)) for v in (start, end))
    return {k - start for k in range(start, end) if shape[k] == BATCH_VAR}


def _picked(positions: set[int], length: int | None, indices: list[int]) -> set[int] | None:
    """Gather's output positions that read one of `positions` (1-D data, constant indices)."""
    if length is None and any(i < 0 for i in indices):
        return ALL
    return {k for k, i in enumerate(indices) if (i + length if i < 0 else i) in positions}


def _sliced(positions: set[int], length: int | None, node, constants) -> set[int] | None:
    values = [_constant_ints(n, constants) if n else None for n in list(node.input[1:5])]
    if length is None or any(v is None or len(v) != 1 for v in values[:2]) or \
            (len(values) > 2 and values[2] is not None and values[2] != [0]) or \
            (len(values) > 3 and values[3] is not None and values[3] != [1]):
        return ALL
    start, end = values[0][0], values[1][0]
    start, end = (max(0, min(length, v + length if v < 0 else v)) for v in (start, end))
    return {k - start for k in range(start, end) if k in positions}


def batch_size_read(model: onnx.ModelProto) -> str:
    """The first node of `model` (batch symbolic) that combines its batch size, as a value,
    with a tensor carrying the batch, or an output holding that value: one line, "" if none."""
    graph = model.graph
    sources = [n for n in graph.node if n.op_type in ("Shape", "Size")]
    if not sources:
        return ""
    try:
        dims = onnx_shapes.dims(onnx_shapes.infer(model), model, symbols=True)
    except Exception:  # shapes onnx cannot infer: nothing to tell from
        return ""
    constants = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output and len(node.attribute) == 1 and \
                node.attribute[0].name == "value":
            constants[node.output[0]] = node.attribute[0].t
    valued: dict[str, set[int] | None] = {}  # tensor -> positions holding the batch size

    def carries_batch(name: str) -> bool:
        shape = dims.get(name)
        return bool(shape) and BATCH_VAR in shape

    def length(name: str) -> int | None:
        shape = dims.get(name)
        return shape[0] if shape and len(shape) == 1 and isinstance(shape[0], int) else None

    for node in graph.node:  # (a graph's nodes are in topological order)
        if node.op_type == "Shape":
            positions = _shape_positions(node, dims)
        elif node.op_type == "Size":
            positions = ALL if carries_batch(node.input[0]) else set()
        else:
            read = [(k, name) for k, name in enumerate(node.input) if name in valued
                    and k not in _SHAPE_INPUTS.get(node.op_type, ())
                    and not (node.op_type == "Range" and k == _RANGE_LIMIT)]
            if not read:
                continue
            others = [name for k, name in enumerate(node.input)
                      if name and name not in valued and k not in _SHAPE_INPUTS.get(
                          node.op_type, ())]
            if any(carries_batch(name) for name in others):
                return (f"{node.op_type} '{node.name or node.output[0]}' reads the batch "
                        "size as a value (from the input's shape): each answer would depend "
                        "on how many requests share its batch")
            (first, source), = read[:1]
            if valued[source] is ALL or first != 0:
                positions = valued[source] if node.op_type in _KEEPS_POSITIONS else ALL
            elif node.op_type == "Gather" and \
                    _constant_ints(node.input[1], constants) is not None:
                positions = _picked(valued[source], length(source),
                                    _constant_ints(node.input[1], constants))
            elif node.op_type == "Slice":
                positions = _sliced(valued[source], length(source), node, constants)
            elif node.op_type in _KEEPS_POSITIONS:
                positions = valued[source]
            else:
                positions = ALL
        if positions is ALL or positions:
            for name in node.output:
                valued[name] = positions
    for output in graph.output:
        if output.name in valued:
            return (f"output '{output.name}' holds the batch size as a value: each answer "
                    "would depend on how many requests share its batch")
    return ""
