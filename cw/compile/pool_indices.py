"""MaxPool's indices and MaxUnpool (SegNet, ENet: a decoder puts each maximum back where the
encoder's pooling found it), written as operators TVM 0.27's importer takes
(cw/compile/decompose.py calls these). The importer lacks the indices output (its import
fails: "Expected 2 but Got 1 in MaxPool"), and its MaxUnpool reads the batch as a number,
which a symbolic batch is not.

ONNX numbers an index across the whole batch: (n·C + c)·H·W + h·W + w (w·H + h with
storage_order 1). The rewrite numbers each sample from 0 and MaxUnpool scatters each sample
into its own rows, which is the same where the unpooled sample has the pooled input's size
(its usual form: the decoder's mirror of the encoder). Indices read by anything else, or into
an output of another size, would give a request an answer that depends on where it sits in its
batch: `across_the_batch` names them, and the compiler then compiles batch size 1 only (where
the two numberings agree).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import onnx

from cw.compile.emit import Emitter, attr
from cw.compile.onnx_load import BATCH_VAR
from cw.errors import ModelError

_FLOATS = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.DOUBLE: np.float64,
           onnx.TensorProto.FLOAT16: np.float16}


def wanted(node) -> bool:
    """A MaxPool whose indices the graph reads, or a MaxUnpool."""
    if node.op_type == "MaxPool":
        return len(node.output) > 1 and bool(node.output[1])
    return node.op_type == "MaxUnpool"


def rewrite_node(e: Emitter, node, shapes: dict, types: dict, producers: dict,
                 where: str) -> bool:
    if node.op_type == "MaxPool":
        return _max_pool(e, node, shapes, types, where)
    _max_unpool(e, node, shapes, types, producers, where)
    return True


def _numpy_type(elem_type) -> type | None:
    """The numpy type of a float tensor (None for others, and bfloat16, which numpy lacks)."""
    return _FLOATS.get(elem_type)


def _known(dims, where: str, what: str) -> list[int]:
    if not dims or not all(isinstance(d, int) for d in dims[1:]):
        raise ModelError(f"{where}: the sizes of its {what} are not known before the model "
                         "runs", "give the model's inputs their shapes (--input-shape)")
    return list(dims)


def pool_pads(node, spatial: list[int]) -> tuple[list[int], list[int]]:
    """A pooling's padding at the start and the end of each spatial axis: its `pads`, or the
    ones ONNX derives for SAME_UPPER / SAME_LOWER (the total (ceil(in / stride) - 1) * stride
    + (kernel - 1) * dilation + 1 - in, its larger half at the end for SAME_UPPER)."""
    kernel = list(attr(node, "kernel_shape", []))
    auto_pad = attr(node, "auto_pad", "NOTSET")
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        pads = list(attr(node, "pads", [0] * 2 * len(kernel)))
        return ([0] * len(kernel), [0] * len(kernel)) if auto_pad == "VALID" else \
            (pads[:len(kernel)], pads[len(kernel):])
    strides = list(attr(node, "strides", [1] * len(kernel)))
    dilations = list(attr(node, "dilations", [1] * len(kernel)))
    begin, end = [], []
    for size, k, stride, dilation in zip(spatial, kernel, strides, dilations):
        total = max((-(-size // stride) - 1) * stride + (k - 1) * dilation + 1 - size, 0)
        small = total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else total - small)
        end.append(total - small if auto_pad == "SAME_UPPER" else small)
    return begin, end


def _max_pool(e: Emitter, node, shapes: dict, types: dict, where: str) -> bool:
    dtype = _numpy_type(types.get(node.input[0]))
    if dtype is None:
        return False  # (int8 pooling: the importer says what it lacks)
    dims = _known(shapes.get(node.input[0]), where, "input")
    out = _known(shapes.get(node.output[0]), where, "output")
    spatial, pooled = dims[2:], out[2:]
    kernel = list(attr(node, "kernel_shape"))
    strides = list(attr(node, "strides", [1] * len(kernel)))
    dilations = list(attr(node, "dilations", [1] * len(kernel)))
    begin, end = pool_pads(node, spatial)
    kept = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute
            if a.name not in ("auto_pad", "pads", "storage_order")}
    e.op("MaxPool", [node.input[0]], outputs=[node.output[0]], pads=begin + end, **kept)
    # the index of tap t of window o: c·P + Σ (o·stride - pad)·step + Σ t·dilation·step, the
    # steps of the flattened spatial axes (row major; column major with storage_order 1)
    per_channel = math.prod(spatial)
    order = range(len(spatial)) if attr(node, "storage_order", 0) else \
        reversed(range(len(spatial)))
    step, flat = 1, [0] * len(spatial)
    for axis in order:
        flat[axis], step = step, step * spatial[axis]
    grids = np.meshgrid(*(np.arange(p) for p in pooled), indexing="ij")
    window_at = sum((g * s - b) * f for g, s, b, f in zip(grids, strides, begin, flat))
    # which tap holds the window's maximum: the first, in the order ONNX scans a window (the
    # last axis fastest), that equals it. A chain of selections over the taps, elementwise
    # (one fused kernel), where a stack of the taps and an ArgMax took two and a copy
    reach = [(p - 1) * s + (k - 1) * d + 1 for p, s, k, d in zip(pooled, strides, kernel,
                                                                 dilations)]
    after = [max(r - b - n, 0) for r, b, n in zip(reach, begin, spatial)]
    x = node.input[0]
    if any(begin) or any(after):
        lowest = e.const(np.array(-np.inf, dtype), "lowest")
        x = e.op("Pad", [x, e.const(np.array([0, 0, *begin, 0, 0, *after], np.int64), "pads"),
                         lowest], "padded")
    axes = e.const(np.arange(2, len(dims), dtype=np.int64), "axes")
    steps = e.const(np.array(strides, np.int64), "steps")
    taps = list(itertools.product(*(range(k) for k in kernel)))
    offsets = ""
    for tap in reversed(taps):
        tap_at = e.const(np.array(sum(t * d * f for t, d, f in zip(tap, dilations, flat)),
                                  np.int64), "tap_at")
        if not offsets and len(taps) > 1:  # the last tap: where no earlier one holds it
            offsets = tap_at
            continue
        starts = [t * d for t, d in zip(tap, dilations)]
        ends = [s + (p - 1) * stride + 1 for s, p, stride in zip(starts, pooled, strides)]
        window = e.op("Slice", [x, e.const(np.array(starts, np.int64), "starts"),
                                e.const(np.array(ends, np.int64), "ends"), axes, steps], "tap")
        offsets = e.op("Where", [e.op("Equal", [window, node.output[0]], "is_max"), tap_at,
                                 offsets or tap_at], "offset")
    # in parts that broadcast (a channel's and a window's): one [C, *pooled] table would be as
    # large as a feature map
    channel_at = np.arange(dims[1]).reshape(-1, *[1] * len(pooled)) * per_channel
    if isinstance(dims[0], int) and dims[0] > 1:  # a batch fixed in the graph: ONNX's numbers
        channel_at = channel_at + np.arange(dims[0]).reshape(-1, 1, *[1] * len(pooled)) * \
            dims[1] * per_channel
    in_channel = e.op("Add", [offsets, e.const(window_at.astype(np.int64), "window_at")],
                      "in_channel")
    e.op("Add", [in_channel, e.const(channel_at.astype(np.int64), "channel_at")],
         outputs=[node.output[1]])
    return True


def _max_unpool(e: Emitter, node, shapes: dict, types: dict, producers: dict,
                where: str) -> None:
    dims = _known(shapes.get(node.input[0]), where, "input")
    out = _unpooled(node, shapes, producers, e) or _default_size(node, dims)
    if len(out) != len(dims) or not all(isinstance(d, int) for d in out[1:]):
        raise ModelError(f"{where}: the size of its output is not known before the model runs",
                         "give the model's inputs their shapes (--input-shape)")
    pool = producers.get(node.input[1])
    if pool is not None and _tiles(pool, node, shapes.get(pool.input[0]), out):
        _tiled_unpool(e, node, dims, out, types)
        return
    per_sample = math.prod(out[1:])
    rows = e.const(np.array([0, -1], np.int64), "rows")
    values = e.op("Reshape", [node.input[0], rows], "values")
    # numbered across the batch (a batch fixed in the graph) or per sample: the same row
    at = e.op("Mod", [e.op("Reshape", [node.input[1], rows], "indices"),
                      e.const(np.array(per_sample, np.int64), "per_sample")], "at")
    batch = e.op("Slice", [e.op("Shape", [node.input[0]], "shape"),
                           e.const(np.array([0], np.int64), "zero"),
                           e.const(np.array([1], np.int64), "one")], "batch")
    dtype = _numpy_type(types.get(node.input[0], onnx.TensorProto.FLOAT)) or np.float32
    zeros = e.op("Expand", [e.const(np.zeros((1, per_sample), dtype), "zeros"),
                            e.op("Concat", [batch, e.const(np.array([per_sample], np.int64),
                                                           "width")], "size", axis=0)],
                   "empty")
    scattered = e.op("ScatterElements", [zeros, at, values], "scattered", axis=1)
    e.op("Reshape", [scattered, e.const(np.array([-1, *out[1:]], np.int64), "out_shape")],
         outputs=[node.output[0]])


def _tiles(pool, unpool, pooled_dims, out: list) -> bool:
    """Whether `unpool` undoes MaxPool `pool` whose windows tile its input (kernel = stride,
    no padding or dilation, numbered row major) into an output of the pooled input's size:
    then each output position has one window, and each index points into its own."""
    if pool.op_type != "MaxPool" or not pooled_dims or list(pooled_dims[1:]) != list(out[1:]):
        return False
    kernel = list(attr(pool, "kernel_shape"))
    plain = {"strides": kernel, "dilations": [1] * len(kernel), "pads": [0] * 2 * len(kernel)}
    return list(attr(unpool, "kernel_shape")) == kernel and \
        list(attr(unpool, "strides", [1] * len(kernel))) == kernel and \
        list(attr(unpool, "pads", plain["pads"])) == plain["pads"] and \
        all(list(attr(pool, name, value)) == value for name, value in plain.items()) and \
        attr(pool, "auto_pad", "NOTSET") in ("NOTSET", "VALID") and \
        not attr(pool, "storage_order", 0) and not attr(pool, "ceil_mode", 0)


def _tiled_unpool(e: Emitter, node, dims: list, out: list, types: dict) -> None:
    """Each output position takes its window's value where the window's index names it, else
    0: elementwise on the windows repeated over their positions (one fused kernel, where a
    scatter takes a serial loop and a zeroed copy)."""
    kernel = list(attr(node, "kernel_shape"))
    pooled, channels = dims[2:], dims[1]
    covered = [p * k for p, k in zip(pooled, kernel)]
    spread = [0, channels, *itertools.chain.from_iterable((p, 1) for p in pooled)]
    repeat = [1, 1, *itertools.chain.from_iterable((1, k) for k in kernel)]
    after = [o - c for o, c in zip(out[2:], covered)]

    def repeated(x: str, fill: np.ndarray, what: str) -> str:
        x = e.op("Reshape", [x, e.const(np.array(spread, np.int64), "spread")], what)
        # (a Tile: the importer takes an Expand's constant shape for one known at run time)
        x = e.op("Tile", [x, e.const(np.array(repeat, np.int64), "repeat")], what)
        x = e.op("Reshape", [x, e.const(np.array([0, channels, *covered], np.int64),
                                        "covered")], what)
        if any(after):  # rows and columns no window covers (an odd size pooled by 2)
            x = e.op("Pad", [x, e.const(np.array([0] * len(dims) + [0, 0, *after], np.int64),
                                        "pads"), e.const(fill, "fill")], what)
        return x

    dtype = _numpy_type(types.get(node.input[0], onnx.TensorProto.FLOAT)) or np.float32
    values = repeated(node.input[0], np.array(0, dtype), "values")
    indices = repeated(node.input[1], np.array(-1, np.int64), "indices")
    spatial = out[2:]
    position = np.arange(math.prod(spatial)).reshape(spatial)
    channel_at = np.arange(channels).reshape(-1, *[1] * len(spatial)) * math.prod(spatial)
    if isinstance(dims[0], int) and dims[0] > 1:  # a batch fixed in the graph: ONNX's numbers
        channel_at = channel_at + np.arange(dims[0]).reshape(-1, 1, *[1] * len(spatial)) * \
            channels * math.prod(spatial)
    named = e.op("Equal", [e.op("Sub", [indices, e.const(position.astype(np.int64),
                                                         "position")], "in_channel"),
                           e.const(channel_at.astype(np.int64), "channel_at")], "named")
    e.op("Where", [named, values, e.const(np.array(0, dtype), "zero")],
         outputs=[node.output[0]])


def _default_size(node, dims: list) -> list:
    """MaxUnpool's output size without `output_shape`: (in - 1)·stride + kernel - pads."""
    kernel = list(attr(node, "kernel_shape"))
    strides = list(attr(node, "strides", [1] * len(kernel)))
    pads = list(attr(node, "pads", [0] * 2 * len(kernel)))
    return [*dims[:2], *((d - 1) * s + k - pads[i] - pads[i + len(kernel)]
                         for i, (d, s, k) in enumerate(zip(dims[2:], strides, kernel)))]


def across_the_batch(model: onnx.ModelProto, dims: dict) -> str:
    """Where `model` (batch symbolic) reads MaxPool's indices as values numbered across the
    batch: one line, "" if nowhere. Indices stay numbered so through a Cast, an Identity or a
    Slice of other axes; a MaxUnpool into samples of the pooled input's size places them in
    the sample's own rows, and the difference of two numberings of one size is the sample's
    own (PyTorch's export of `return_indices`: the indices less those of a 1 x 1 MaxPool,
    sliced to each channel's first, which numbers each channel from 0)."""
    graph = model.graph
    producers = {o: n for n in graph.node for o in n.output}
    constants = {t.name: t for t in graph.initializer}
    numbered: dict[str, tuple[int, str]] = {}  # tensor -> (per-sample size, its MaxPool)
    for node in graph.node:
        name = node.name or node.output[0]
        if node.op_type == "MaxUnpool" and node.input[1] not in numbered and \
                (dims.get(node.input[0]) or [None])[0] == BATCH_VAR:
            return (f"MaxUnpool '{name}' places its values by indices numbered across the "
                    "batch")
        if node.op_type == "MaxPool" and wanted(node):
            pooled = dims.get(node.input[0]) or [None]
            if pooled[0] == BATCH_VAR and all(isinstance(d, int) for d in pooled[1:]):
                numbered[node.output[1]] = (math.prod(pooled[1:]), name)
            elif pooled[0] == BATCH_VAR:  # (sizes not known: the rewrite says so)
                return ""
        read = [(k, numbered[i]) for k, i in enumerate(node.input) if i in numbered]
        if not read:
            continue
        per_sample, pool = read[0][1]
        if node.op_type in ("Identity", "Cast") or \
                node.op_type == "Slice" and _slices_other_axes(node, constants, dims):
            numbered[node.output[0]] = (per_sample, pool)
        elif node.op_type == "Sub" and len(read) == 2 and read[1][1][0] == per_sample:
            pass  # the sample's own numbers
        elif not (node.op_type == "MaxUnpool" and [k for k, _ in read] == [1] and
                  math.prod(_unpooled(node, dims, producers)[1:] or [0]) == per_sample):
            return (f"MaxPool '{pool}' numbers its maxima across the batch, and "
                    f"{node.op_type} '{name}' reads those numbers")
    for output in graph.output:
        if output.name in numbered:
            return (f"MaxPool '{numbered[output.name][1]}' numbers its maxima across the "
                    f"batch, in output '{output.name}'")
    return ""


def _slices_other_axes(node, constants: dict, dims: dict) -> bool:
    axes = constants.get(node.input[3]) if len(node.input) > 3 and node.input[3] else None
    rank = len(dims.get(node.input[0]) or [])
    if axes is None or not rank:
        return False  # (all axes from the first, the batch's included)
    return all(int(a) % rank for a in onnx.numpy_helper.to_array(axes).reshape(-1))


def _unpooled(node, dims: dict, producers: dict, e: Emitter | None = None) -> list:
    """A MaxUnpool's output size where known before the model runs ([] where not): its
    `output_shape` (a constant, or the Shape of a tensor whose size is known), else inferred
    (ONNX's inference gives the size without `output_shape`, whatever that says)."""
    given = node.input[2] if len(node.input) > 2 else ""
    if given:
        value = e.constant(given) if e is not None else None
        if value is not None:
            return [int(v) for v in value.reshape(-1)]
        source = producers.get(given)
        if source is not None and source.op_type == "Shape" and len(source.attribute) == 0:
            return list(dims.get(source.input[0]) or [])
        return []
    out = dims.get(node.output[0])
    return list(out) if out and all(isinstance(d, int) for d in out[1:]) else []
