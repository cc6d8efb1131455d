"""Two operators TVM 0.27's importer lacks or cannot take on a symbolic batch, written as ones
it takes (cw/compile/decompose.py calls these):

- AffineGrid (opset 20, a spatial transformer's sampling grid): the importer's converter takes
  only a constant `size`, and an export computes it from the input's shape (`F.affine_grid(
  theta, x.size())`). The grid is a product of the constant base grid by each sample's theta.
- ReverseSequence (tf2onnx's bidirectional recurrences): each sample's first `lens[b]` steps
  reversed, as a GatherElements along the time axis by indices computed from `lens`.
"""

from __future__ import annotations

import numpy as np

from cw.compile.emit import Emitter, attr
from cw.errors import ModelError

OPS = ("AffineGrid", "ReverseSequence")


def rewrite_node(e: Emitter, node, shapes: dict, producers: dict, where: str) -> None:
    if node.op_type == "AffineGrid":
        _affine_grid(e, node, shapes, producers, where)
    else:
        _reverse_sequence(e, node, shapes, where)


def _entries(e: Emitter, name: str, shapes: dict, producers: dict) -> list | None:
    """A 1-D integer tensor's values where known (None for an entry computed when the model
    runs: the batch's): a constant, or a Concat of constants and computed parts."""
    value = e.constant(name)
    if value is not None:
        return [int(v) for v in value.reshape(-1)]
    node = producers.get(name)
    if node is None or node.op_type != "Concat":
        return None
    entries = []
    for part in node.input:
        value = e.constant(part)
        dims = shapes.get(part)
        if value is not None:
            entries += [int(v) for v in value.reshape(-1)]
        elif dims and len(dims) == 1 and isinstance(dims[0], int):
            entries += [None] * dims[0]
        else:
            return None
    return entries


def _base_coordinates(size: int, align_corners: bool) -> np.ndarray:
    """Normalized coordinates of `size` points along an axis, as AffineGrid places them."""
    if align_corners:
        return np.linspace(-1.0, 1.0, size) if size > 1 else np.zeros(1)
    return (2.0 * np.arange(size) + 1.0) / size - 1.0


def _affine_grid(e: Emitter, node, shapes, producers, where: str) -> None:
    size = _entries(e, node.input[1], shapes, producers)
    out_dims = shapes.get(node.output[0])
    spatial = size[2:] if size and len(size) in (4, 5) else None
    if (spatial is None or None in spatial) and out_dims and \
            all(isinstance(d, int) for d in out_dims[1:-1]):
        spatial = list(out_dims[1:-1])
    if not spatial or None in spatial:
        raise ModelError(f"{where}: its output's spatial size is not known before the model "
                         "runs", "export the size's spatial entries as constants")
    align = bool(attr(node, "align_corners", 0))
    # base rows (x, y[, z], 1) with the last spatial axis fastest, as the grid is laid out
    axes = [_base_coordinates(s, align) for s in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")
    base = np.stack([m.reshape(-1) for m in reversed(mesh)] + [np.ones(mesh[0].size)], axis=1)
    theta_t = e.op("Transpose", [node.input[0]], "theta_t", perm=[0, 2, 1])
    points = e.op("MatMul", [e.const(base.astype(np.float32), "base_grid"), theta_t], "points")
    e.op("Reshape", [points, e.const(np.array([0, *spatial, len(spatial)], np.int64),
                                     "grid_shape")], outputs=[node.output[0]])


def _reverse_sequence(e: Emitter, node, shapes, where: str) -> None:
    dims = shapes.get(node.input[0])
    batch_axis, time_axis = attr(node, "batch_axis", 1), attr(node, "time_axis", 0)
    if dims is None or not isinstance(dims[time_axis], int):
        raise ModelError(f"{where}: the length of its time axis is not known before the model "
                         "runs", "give the input its sequence length (--input-shape)")
    steps = dims[time_axis]
    rank = len(dims)
    # t along the time axis, lens along the batch axis: both [.., ..] in (batch, time) order
    # of the two leading axes
    t_shape, lens_axis = ([1, steps], 1) if batch_axis == 0 else ([steps, 1], 0)
    t = e.const(np.arange(steps, dtype=np.int64).reshape(t_shape), "steps")
    lens = e.op("Unsqueeze", [node.input[1], e.const(np.array([lens_axis], np.int64), "axis")],
                "lens")
    inside = e.op("Less", [t, lens], "inside")
    last = e.op("Sub", [lens, e.const(np.array(1, np.int64), "one")], "last")
    reversed_t = e.op("Sub", [last, t], "reversed")
    index = e.op("Where", [inside, reversed_t, t], "index")
    if rank > 2:
        index = e.op("Unsqueeze", [index, e.const(np.arange(2, rank, dtype=np.int64),
                                                  "trailing")], "index_nd")
    full = e.op("Expand", [index, e.op("Shape", [node.input[0]], "shape")], "index_full")
    e.op("GatherElements", [node.input[0], full], outputs=[node.output[0]], axis=time_axis)
