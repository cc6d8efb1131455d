"""A Resize given its output sizes, written as the same Resize given scales, where that is exact.

TVM's importer reads a Resize's sizes only as a constant, or as a shape expression whose every
entry is a number. An export with a symbolic batch computes them: the batch from `Shape`, the
rest constant (PyTorch's `F.interpolate(x, size=(h, w))`). The batch entry is then a variable
and the import fails ("'Var' object has no attribute 'value'"). An export fixed at batch 1
writes them as a constant [1, C, H, W], which a batch of 3 contradicts, so such a graph could not
be rebatched. Scales name no batch. ONNX resizes by sizes with the scale out / in, so where that
ratio is exact in float32 and floor(in * scale) gives `out` back, both forms compute the same
thing: 2x, 0.5x, and 1.5x of an even size are exact. Other ratios (4 to 7) are given their
spatial sizes as constants, opset 18's `axes` naming the axes they size, a form
cw/compile/resize_forms.py then writes exactly (`spatial_sizes`).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import onnx

from cw.compile.onnx_load import all_nodes

_ONNX_DOMAINS = ("", "ai.onnx")


def exact_scales(in_dims: list | None, out_dims: list | None) -> list[float] | None:
    """Scales for a Resize from `in_dims` to `out_dims` (batch and channels kept), or None
    where a spatial ratio is unknown or not exact in float32."""
    if not in_dims or not out_dims or len(in_dims) != len(out_dims) or len(in_dims) < 3:
        return None
    if isinstance(out_dims[1], int) and out_dims[1] != in_dims[1]:
        return None  # (a Resize across channels: not one scales of 1 could say)
    scales = [1.0, 1.0]
    for size_in, size_out in zip(in_dims[2:], out_dims[2:]):
        if not isinstance(size_in, int) or not isinstance(size_out, int) or \
                size_in <= 0 or size_out <= 0:
            return None
        scale = np.float32(size_out) / np.float32(size_in)
        if Fraction(float(scale)) != Fraction(size_out, size_in):
            return None
        scales.append(float(scale))
    return scales


def computed_sizes(graph: onnx.GraphProto) -> bool:
    """Whether a Resize of `graph` is given sizes that are not a constant."""
    constants = {t.name for t in graph.initializer}
    return any(n.op_type == "Resize" and len(n.input) > 3 and n.input[3] and
               n.input[3] not in constants for n in graph.node)


def rewrite(graph: onnx.GraphProto, dims: dict[str, list], computed_only: bool = False) -> int:
    """Each Resize of `graph` given sizes whose ratios `dims` (tensor -> dims, its input's
    and output's) show exact, given scales instead; returns how many. `computed_only`: only
    those whose sizes are not a constant. The nodes that only computed the sizes go."""
    constants = {t.name for t in graph.initializer}
    count = 0
    replaced = set()
    for node in graph.node:
        if node.op_type != "Resize" or node.domain not in _ONNX_DOMAINS or \
                len(node.input) < 4 or not node.input[3] or \
                (computed_only and node.input[3] in constants):
            continue
        # (opset 18's axes and aspect-ratio policies give sizes another meaning)
        if any(a.name == "axes" or (a.name == "keep_aspect_ratio_policy" and a.s != b"stretch")
               for a in node.attribute):
            continue
        scales = exact_scales(dims.get(node.input[0]), dims.get(node.output[0]))
        if scales is None:
            continue
        name = f"{node.output[0]}__cw_scales"
        graph.initializer.append(onnx.numpy_helper.from_array(np.array(scales, np.float32),
                                                              name))
        replaced.add(node.input[3])
        node.input[:] = [node.input[0], node.input[1], name]
        count += 1
    if replaced:
        _drop_unread(graph, replaced)
    return count


def spatial_sizes(graph: onnx.GraphProto, dims: dict[str, list]) -> int:
    """Each Resize still given computed sizes (after `rewrite`: a ratio not exact in float32,
    7 / 4) whose spatial sizes `dims` knows, given those as constant sizes of its spatial axes
    (opset 18's `axes`, which cw/compile/resize_forms.py then writes exactly); returns how many.
    The batch entry is what made the sizes computed, and a resize keeps it anyway."""
    constants = {t.name for t in graph.initializer}
    count = 0
    replaced = set()
    for node in graph.node:
        if node.op_type != "Resize" or node.domain not in _ONNX_DOMAINS or \
                len(node.input) < 4 or not node.input[3] or node.input[3] in constants or \
                any(a.name in ("axes", "keep_aspect_ratio_policy") for a in node.attribute):
            continue
        in_dims, out_dims = dims.get(node.input[0]), dims.get(node.output[0])
        if not in_dims or not out_dims or len(in_dims) != len(out_dims) or len(in_dims) < 3 \
                or not all(isinstance(d, int) for d in in_dims[1:] + out_dims[1:]) \
                or out_dims[1] != in_dims[1]:
            continue
        name = f"{node.output[0]}__cw_spatial_sizes"
        graph.initializer.append(onnx.numpy_helper.from_array(
            np.array(out_dims[2:], np.int64), name))
        replaced.add(node.input[3])
        node.input[:] = [node.input[0], node.input[1], "", name]
        node.attribute.append(onnx.helper.make_attribute("axes", list(range(2, len(in_dims)))))
        count += 1
    if replaced:
        _drop_unread(graph, replaced)
    return count


def _drop_unread(graph: onnx.GraphProto, names: set[str]) -> None:
    """The nodes and initializers that computed `names` (and nothing still read), back along
    the chain."""
    outputs = {o.name for o in graph.output}
    while names:
        read = {v for node in all_nodes(graph) for v in node.input} | outputs
        gone = {n for n in names if n not in read}
        producers = [k for k, node in enumerate(graph.node)
                     if node.output and all(o in gone or not o for o in node.output)
                     and any(o in gone for o in node.output)]
        names = {v for k in producers for v in graph.node[k].input if v}
        for k in reversed(producers):
            del graph.node[k]
        for k in reversed([k for k, t in enumerate(graph.initializer) if t.name in gone]):
            del graph.initializer[k]
