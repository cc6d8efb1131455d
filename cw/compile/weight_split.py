"""Weights larger than a page, split into blocks that each fit one.

A page is the unit of the worker's GPU weights cache, and every bundle a worker serves has
the same page size (16 MiB by default, as Clockwork's), so a tensor larger than a page cannot
be loaded. Transformers' vocabulary tables are: BERT-base's word embeddings are 94 MB, GPT-2's
154 MB. Rather than make the user raise the page size of every bundle served with them, the
two ways such a table is used are rewritten to use blocks of it:

- `Gather(table, ids)` on axis 0 (an embedding): one Gather per block of rows, of the ids
  shifted into the block and clipped to it, and a Where per block boundary choosing among
  them. Ids out of range are clamped to the first or last row, as cw's kernels clamp them.
- `MatMul(x, W)` by a 2-D matrix (a language model's head), or `Gemm(x, W, c)` (a classifier's
  with thousands of classes): one product per block of output columns, concatenated, each
  with its columns of the bias. Blocks are whole multiples of 64 columns, so that the CPU's
  column panels (cw/compile/cpu_matmul.py) pad none but the last.

A table used any other way, or one that would take more than MAX_BLOCKS blocks, is left as it
is, and the page check names it as before.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from cw.compile.emit import Emitter, attr
from cw.compile.onnx_shapes import tensor_bytes

_DOMAINS = ("", "ai.onnx")
_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                onnx.TensorProto.BFLOAT16}
_COLUMN_MULTIPLE = 64
# a chain of this many Wheres (a vocabulary of 128k x 4,096 floats in 16 MiB pages needs 125) is
# as far as the split goes; past it, a larger page is the better answer
MAX_BLOCKS = 128


def _blocks(length: int, per_block: int) -> list[tuple[int, int]]:
    return [(start, min(start + per_block, length)) for start in range(0, length, per_block)]


def _use(node: onnx.NodeProto, name: str, inits: dict) -> tuple[str, int] | None:
    """How `node` uses the tensor `name`, and along which of its axes blocks are taken:
    ("gather", 0) as the table of a Gather on axis 0, ("matmul", 1) as a MatMul's matrix,
    ("gemm", 0 or 1) as a Gemm's B (its output columns are B's rows where transB, else its
    columns; a bias C must be a constant or absent); else None."""
    if node.domain not in _DOMAINS or not node.input:
        return None
    rest = [i for k, i in enumerate(node.input) if k != (0 if node.op_type == "Gather" else 1)]
    if name in rest:
        return None
    if node.op_type == "Gather" and node.input[0] == name and attr(node, "axis", 0) == 0:
        return "gather", 0
    if node.op_type == "MatMul" and node.input[1] == name:
        return "matmul", 1
    if node.op_type == "Gemm" and node.input[1] == name and \
            (len(node.input) < 3 or not node.input[2] or node.input[2] in inits):
        return "gemm", 0 if attr(node, "transB", 0) else 1
    return None


def split(model: onnx.ModelProto, page_size: int, opset: int) -> list[str]:
    """Rewrite, in place, the uses of each float initializer of `model`'s top-level graph
    larger than `page_size` bytes, where all its uses are of one kind above; returns a note for
    each one split."""
    graph = model.graph
    large = [t for t in graph.initializer
             if t.data_type in _FLOAT_TYPES and tensor_bytes(t) > page_size]
    if not large or opset < 13:  # the rewrite's Clip on integers and Unsqueeze's axes input
        return []
    inits = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    notes = []
    for tensor in large:
        users = [n for n in graph.node if tensor.name in n.input]
        uses = {_use(n, tensor.name, inits) for n in users}
        if len(uses) != 1 or None in uses or tensor.name in outputs or \
                _in_subgraphs(graph, tensor.name):
            continue
        (use, axis), dims, nbytes = uses.pop(), list(tensor.dims), tensor_bytes(tensor)
        if use != "gather" and len(dims) != 2:
            continue
        per_block = page_size // (nbytes // dims[axis])
        if use != "gather":  # whole column panels
            per_block -= per_block % _COLUMN_MULTIPLE
        if per_block < 1:
            continue
        blocks = _blocks(dims[axis], per_block)
        if len(blocks) > MAX_BLOCKS:
            continue
        name = tensor.name  # (read before its initializer goes)
        emit = Emitter(name, inits, opset)
        parts = [f"{emit.prefix}__cw_block{k}" for k in range(len(blocks))]
        rewrite = {"gather": _gathered, "matmul": _multiplied, "gemm": _gemms}[use]
        by_output = {n.output[0]: rewrite(emit, n, parts, blocks, len(dims)) for n in users}
        nodes = []
        for node in graph.node:
            nodes += by_output.get(node.output[0], [node]) if tensor.name in node.input \
                else [node]
        del graph.node[:]
        graph.node.extend(nodes)
        graph.initializer.extend(emit.new_inits)  # (a Gemm's bias blocks)
        _stored_in_blocks(graph, tensor, parts, blocks, axis)
        biases = {n.input[2] for n in users if n.op_type == "Gemm" and len(n.input) > 2}
        _drop_unused(graph, biases - {""} - outputs)
        kind = {"gather": "rows, a Gather each", "matmul": "columns, a MatMul each",
                "gemm": f"{'rows' if axis == 0 else 'columns'}, a Gemm each"}[use]
        notes.append(f"weight {name} ({nbytes / 2**20:.1f} MiB) larger than a page: split into "
                     f"{len(blocks)} blocks of up to {per_block} {kind}")
    return notes


def _stored_in_blocks(graph: onnx.GraphProto, tensor: onnx.TensorProto, parts: list[str],
                      blocks: list[tuple[int, int]], axis: int) -> None:
    """`tensor`'s initializer replaced by its blocks. Each block is written into the graph
    directly, and the other initializers are left where they are: rebuilding the list, or
    adding whole TensorProtos, copies every weight again (a 2.6 GB model grew by 6.4 GB)."""
    values = numpy_helper.to_array(tensor)
    for name, (a, b) in zip(parts, blocks):
        block = graph.initializer.add()
        block.name, block.data_type = name, tensor.data_type
        part = values[:, a:b] if axis else values[a:b]
        block.dims.extend(part.shape)
        block.raw_data = np.ascontiguousarray(part).tobytes()
    del values
    index = next(k for k, t in enumerate(graph.initializer) if t.name == tensor.name)
    del graph.initializer[index]


def _drop_unused(graph: onnx.GraphProto, names: set[str]) -> None:
    """The initializers `names` that no node reads any more (a bias now in blocks)."""
    unused = {n for n in names if not any(n in node.input for node in graph.node)
              and not _in_subgraphs(graph, n)}
    for index in reversed([k for k, t in enumerate(graph.initializer) if t.name in unused]):
        del graph.initializer[index]


def _in_subgraphs(graph: onnx.GraphProto, name: str) -> bool:
    """Whether a branch or loop body of `graph` (at any depth) reads `name`."""
    def subgraphs(g: onnx.GraphProto):
        for node in g.node:
            for a in node.attribute:
                yield from ([a.g] if a.HasField("g") else [])
                yield from a.graphs

    def reads(g: onnx.GraphProto) -> bool:
        return any(name in n.input for n in g.node) or any(map(reads, subgraphs(g)))
    return any(map(reads, subgraphs(graph)))


def _gathered(emit: Emitter, node: onnx.NodeProto, parts: list[str],
              blocks: list[tuple[int, int]], rank: int) -> list[onnx.NodeProto]:
    start = len(emit.nodes)

    def index(value, what: str) -> str:
        # a Constant node, not an initializer: TVM folds it into the kernels, where an
        # initializer would be one more weight tensor in a page (632 for a 2.6 GB pair of tables)
        return emit.op("Constant", [], what,
                       value=numpy_helper.from_array(np.array(value, np.int64)))

    ids = emit.op("Cast", [node.input[1]], "ids", to=onnx.TensorProto.INT64)
    # negative ids count from the end, as ONNX says
    ids = emit.op("Where", [emit.op("Less", [ids, index(0, "zero")]),
                            emit.op("Add", [ids, index(blocks[-1][1], "rows")]), ids], "wrapped")
    picked = []
    for part, (a, b) in zip(parts, blocks):
        local = emit.op("Clip", [emit.op("Sub", [ids, index(a, "start")]), index(0, "first"),
                                 index(b - a - 1, "last")])
        picked.append(emit.op("Gather", [part, local], "rows", axis=0))
    result = picked[-1]
    for k in range(len(blocks) - 2, -1, -1):
        inside = emit.op("Less", [ids, index(blocks[k][1], "end")])
        if rank > 1:  # the choice of block broadcast over each row's own axes
            axes = list(range(-1, -rank, -1))
            inside = emit.op("Unsqueeze", [inside, index(axes, "axes")])
        result = emit.op("Where", [inside, picked[k], result],
                         outputs=[node.output[0]] if k == 0 else None)
    if len(blocks) == 1:
        emit.op("Identity", [result], outputs=[node.output[0]])
    return emit.nodes[start:]


def _multiplied(emit: Emitter, node: onnx.NodeProto, parts: list[str],
                blocks: list[tuple[int, int]], rank: int) -> list[onnx.NodeProto]:
    start = len(emit.nodes)
    products = [emit.op("MatMul", [node.input[0], part], "product") for part in parts]
    emit.op("Concat", products, outputs=[node.output[0]], axis=-1)
    return emit.nodes[start:]


def _gemms(emit: Emitter, node: onnx.NodeProto, parts: list[str],
           blocks: list[tuple[int, int]], rank: int) -> list[onnx.NodeProto]:
    """A Gemm per block of output columns, its bias's columns with it where the bias has
    them (a bias broadcast along the columns is shared)."""
    start = len(emit.nodes)
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    biases = [bias] * len(blocks)
    if bias is not None:
        c = numpy_helper.to_array(emit.inits[bias])
        if c.ndim and c.shape[-1] == blocks[-1][1] > 1:
            biases = [emit.const(c[..., a:b], "bias") for a, b in blocks]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    products = [emit.op("Gemm", [node.input[0], part] + ([b] if b else []), "product", **attrs)
                for part, b in zip(parts, biases)]
    emit.op("Concat", products, outputs=[node.output[0]], axis=1)
    return emit.nodes[start:]
