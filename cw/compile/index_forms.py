"""Operators that compute indices or sampling positions which TVM 0.27's importer lacks or
cannot take on a symbolic batch, written as ones it takes (cw/compile/decompose.py calls these):

- AffineGrid (opset 20, a spatial transformer's sampling grid): the importer's converter takes
  only a constant `size`, and an export computes it from the input's shape (`F.affine_grid(
  theta, x.size())`). The grid is a product of the constant base grid by each sample's theta.
- ReverseSequence (tf2onnx's bidirectional recurrences): each sample's first `lens[b]` steps
  reversed, as a GatherElements along the time axis by indices computed from `lens`.
- DeformConv (opset 19; deformable convolutions, DCNv1 and v2's mask): every kernel tap's
  bilinear samples taken by one GridSample (zeros outside, as DeformConv reads them), then
  a 1x1 convolution of the taps by the filters.
"""

from __future__ import annotations

import numpy as np

from cw.compile.emit import Emitter, attr
from cw.errors import ModelError

OPS = ("AffineGrid", "ReverseSequence", "DeformConv")


def rewrite_node(e: Emitter, node, shapes: dict, producers: dict, where: str) -> None:
    if node.op_type == "AffineGrid":
        _affine_grid(e, node, shapes, producers, where)
    elif node.op_type == "DeformConv":
        _deform_conv(e, node, shapes, where)
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


def _deform_conv(e: Emitter, node, shapes, where: str) -> None:
    x, w, offset = node.input[:3]
    bias = node.input[3] if len(node.input) > 3 and node.input[3] else ""
    mask = node.input[4] if len(node.input) > 4 and node.input[4] else ""
    dims, w_dims, out_dims = shapes.get(x), shapes.get(w), shapes.get(offset)
    if not dims or not w_dims or not out_dims or len(dims) != 4 or \
            not all(isinstance(d, int) for d in (*dims[1:], *w_dims, *out_dims[1:])):
        raise ModelError(f"{where}: cw writes 2-D deformable convolutions whose input, filter "
                         "and offset sizes are known before the model runs",
                         "give the model's inputs their shapes (--input-shape)")
    channels, height, width = dims[1:]
    out_channels, kernel_h, kernel_w = w_dims[0], w_dims[2], w_dims[3]
    out_h, out_w = out_dims[2:]
    taps = kernel_h * kernel_w
    groups, offset_groups = attr(node, "group", 1), attr(node, "offset_group", 1)
    stride_h, stride_w = attr(node, "strides", [1, 1])
    dilation_h, dilation_w = attr(node, "dilations", [1, 1])
    pad_top, pad_left = attr(node, "pads", [0, 0, 0, 0])[:2]
    # each tap's sampling position with no offset, as GridSample's normalized coordinates
    # (align_corners 0: pixel p at (2p + 1) / size - 1, which holds for a size of 1 too)
    tap_h, tap_w = np.meshgrid(np.arange(kernel_h) * dilation_h, np.arange(kernel_w) * dilation_w,
                               indexing="ij")
    rows = np.arange(out_h) * stride_h - pad_top
    cols = np.arange(out_w) * stride_w - pad_left
    at_h = tap_h.reshape(taps, 1, 1) + rows.reshape(1, out_h, 1) + np.zeros((1, 1, out_w))
    at_w = tap_w.reshape(taps, 1, 1) + cols.reshape(1, 1, out_w) + np.zeros((1, out_h, 1))
    base = np.stack([(2 * at_w + 1) / width - 1, (2 * at_h + 1) / height - 1], axis=1)
    per_pixel = np.array([2 / width, 2 / height]).reshape(1, 1, 1, 2, 1, 1)
    # offsets [N, G*K*2 (dh, dw), oH, oW] -> (dw, dh) per tap, in grid coordinates
    split = e.op("Reshape", [offset, e.const(np.array(
        [0, offset_groups, taps, 2, out_h, out_w], np.int64), "offset_shape")], "offsets")
    swapped = e.op("Gather", [split, e.const(np.array([1, 0], np.int64), "wh")], "offsets_wh",
                   axis=3)
    scaled = e.op("Mul", [swapped, e.const(per_pixel.astype(np.float32), "per_pixel")])
    at = e.op("Add", [scaled, e.const(base.reshape(1, 1, taps, 2, out_h, out_w)
                                      .astype(np.float32), "base")], "positions")
    grid = e.op("Reshape", [e.op("Transpose", [at], "grid_t", perm=[0, 1, 2, 4, 5, 3]),
                            e.const(np.array([-1, taps * out_h, out_w, 2], np.int64),
                                    "grid_shape")], "grid")
    per_group = e.op("Reshape", [x, e.const(np.array(
        [-1, channels // offset_groups, height, width], np.int64), "x_shape")], "x_groups")
    sampled = e.op("GridSample", [per_group, grid], "sampled",
                   mode="linear" if e.opset >= 20 else "bilinear", padding_mode="zeros",
                   align_corners=0)
    if mask:
        sampled = e.op("Reshape", [sampled, e.const(np.array(
            [-1, offset_groups, channels // offset_groups, taps, out_h, out_w], np.int64),
            "sampled_shape")], "sampled_groups")
        sampled = e.op("Mul", [sampled, e.op("Reshape", [mask, e.const(np.array(
            [0, offset_groups, 1, taps, out_h, out_w], np.int64), "mask_shape")], "mask")],
            "masked")
    columns = e.op("Reshape", [sampled, e.const(np.array(
        [-1, channels * taps, out_h, out_w], np.int64), "columns_shape")], "columns")
    filters_1x1 = [out_channels, w_dims[1] * taps, 1, 1]
    value = e.constant(w)
    filters = e.const(value.reshape(filters_1x1), "filters") if value is not None else \
        e.op("Reshape", [w, e.const(np.array(filters_1x1, np.int64), "filters_shape")])
    e.op("Conv", [columns, filters, *([bias] if bias else [])], outputs=[node.output[0]],
         kernel_shape=[1, 1], group=groups)
