"""Operators TVM 0.27's ONNX importer lacks or mishandles, written as ones it takes.

- An operator the importer lacks whose inputs are all constants (HannWindow, MelWeightMatrix,
  anything onnxslim left unfolded): evaluated once, with onnx's reference implementation, into
  an initializer.
- Expand to a constant shape: the importer reads an initializer there as a shape known only
  when the model runs, and the weight lifting then hands back a shape instead of a tensor (a
  crash). As Tile, with the repeats known, it is a broadcast.
- ConvTranspose with `output_shape` (tf2onnx writes it): the importer ignores that attribute
  and gave the natural size (11 x 11 where the file says 10 x 10). Its padding is computed as
  ONNX says and written as `pads`.
- Resize in the forms the importer gets wrong or lacks (antialias, a scale that does not give
  whole sizes, opset 18's axes and aspect policies, half_pixel_symmetric):
  cw/compile/resize_forms.py.
- Celu, Swish and LpNormalization: a few elementwise nodes, and a reduction. Sinh and Cosh
  (the importer takes them; TVM's CPU code generator has no such intrinsic) from Exp.
- Three the importer takes and gets wrong: IsInf with detect_negative or detect_positive 0
  (ignored, silently: 1.0 off), Dropout's mask (all true at inference; onnxslim took it for
  the input, so it is rewritten before onnxslim runs), and a MaxPool padded SAME (a crash on
  a symbolic batch), given the pads ONNX derives.
- Compress by a constant condition along an axis other than the batch's: a Gather of the
  indices it keeps (refused before as an output whose size the values decide). A float
  raised to a constant integer exponent (the importer wants one type): the exponent as a float.
- Tile by repeats computed from the batch (the importer takes no shape expression there), where
  every axis it repeats has size 1: the Expand to those repeats.
- MaxPool's indices and MaxUnpool, numbered per sample: cw/compile/pool_indices.py.
- Attention and RotaryEmbedding (opset 23; cw/compile/attention.py).
- DFT and STFT (audio front ends): products by constant matrices (cw/compile/spectral.py).
- CenterCropPad (opset 18): a Slice and a Pad, centered as ONNX's reference centers them.
  Col2Im (opset 18, nn.Fold): a ConvTranspose by one-hot filters, one group per channel.
- AffineGrid (its size computed from the input's shape), ReverseSequence and DeformConv:
  cw/compile/index_forms.py.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from cw.compile import (attention, contrib, index_forms, onnx_shapes, pool_indices, resize_forms,
                        spectral)
from cw.compile.emit import Emitter, attr
from cw.errors import ModelError

_DOMAINS = ("", "ai.onnx")
_REWRITTEN = {"Celu", "Swish", "LpNormalization", "DFT", "STFT", "RotaryEmbedding", "Sinh",
              "Cosh", "CenterCropPad", "Col2Im", *index_forms.OPS}
_NEEDS_SHAPES = {"Expand", "DFT", "STFT", "Attention", "RotaryEmbedding", "ConvTranspose",
                 "Resize", "MaxPool", "MaxUnpool", "Pow", "Tile", "CenterCropPad", "Col2Im",
                 "MeanVarianceNormalization", *index_forms.OPS}
_INTEGERS = {onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32,
             onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16,
             onnx.TensorProto.UINT32, onnx.TensorProto.UINT64}
_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
           onnx.TensorProto.BFLOAT16}
_SAME = ("SAME_UPPER", "SAME_LOWER")
# operators the importer has, rewritten in the forms it gets wrong (the rest it lacks)
_TARGETED = {"Expand", "ConvTranspose", "Resize", "IsInf", "MaxPool", "MaxUnpool", "Compress",
             "Pow", "Tile", "MeanVarianceNormalization", "Einsum"}


def is_rewritten(node: onnx.NodeProto) -> bool:
    return node.op_type in _REWRITTEN and node.domain in _DOMAINS


def _shapes(model: onnx.ModelProto) -> tuple[dict[str, list], dict[str, int]]:
    """Each tensor's inferred dims (ints where known, the symbol (the batch's) where named)
    and element type."""
    try:
        inferred = onnx_shapes.infer(model)
    except Exception:  # the importer reports a model whose shapes do not infer
        return {}, {}
    types = {vi.name: vi.type.tensor_type.elem_type
             for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output)}
    types.update((t.name, t.data_type) for t in model.graph.initializer)
    return onnx_shapes.dims(inferred, model, symbols=True), types


def _where(node: onnx.NodeProto, path: str) -> str:
    return f"{node.op_type} '{node.name or node.output[0]}' of {path}"


def _fold(node: onnx.NodeProto, inits: dict, opset: int) -> list[onnx.TensorProto]:
    """`node`, all of whose inputs are constants, evaluated into initializers."""
    from onnx.reference import ReferenceEvaluator

    graph = helper.make_graph([node], "fold", [], [helper.make_value_info(o, onnx.TypeProto())
                                                  for o in node.output if o],
                              [inits[i] for i in node.input if i])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    values = ReferenceEvaluator(model).run(None, {})
    return [numpy_helper.from_array(np.asarray(v), o)
            for o, v in zip(node.output, values) if o]


def _expand(e: Emitter, node, shapes, where: str) -> bool:
    target = e.constant(node.input[1])
    dims = shapes.get(node.input[0])
    if target is None or dims is None:
        return False  # a shape from the input's Shape: the importer takes it as it is
    target = [int(t) for t in target.reshape(-1)]
    x = node.input[0]
    if len(target) > len(dims):  # leading axes added: only where nothing is symbolic
        if not all(isinstance(d, int) for d in dims):
            raise ModelError(f"{where} adds axes before the batch axis: cw cannot batch it",
                             "export the model with the Expand's shape taken from the input's "
                             "Shape")
        dims = [1] * (len(target) - len(dims)) + dims
        x = e.op("Reshape", [x, e.const(np.array(dims, np.int64), "shape")])
    target = [1] * (len(dims) - len(target)) + target
    repeats = []
    for d, t in zip(dims, target):
        if isinstance(d, int) and d in (t, 1) or t == 1:
            repeats.append(t if d == 1 else 1)
        else:  # the batch, or a size ONNX cannot broadcast: onnxruntime would refuse too
            raise ModelError(f"{where} expands an axis of size {d} to {t}: cw cannot batch it",
                             "export the model with a dynamic batch (the Expand's shape from "
                             "the input's Shape)")
    e.op("Tile", [x, e.const(np.array(repeats, np.int64), "repeats")], outputs=[node.output[0]])
    return True


def _conv_transpose(e: Emitter, node, shapes, where: str) -> None:
    """`node`'s output_shape as the pads that give it (ONNX's ConvTranspose: the total padding
    is stride * (in - 1) + output_padding + (kernel - 1) * dilation + 1 - out, the larger half
    at the end with SAME_UPPER, at the start otherwise)."""
    x_dims, w_dims = shapes.get(node.input[0]), shapes.get(node.input[1])
    if not x_dims or not w_dims or len(x_dims) != len(w_dims):
        raise ModelError(f"{where} has an output_shape, and the shape of its input is not "
                         "known", "export it with pads instead of output_shape")
    spatial = len(x_dims) - 2
    sizes_out = list(attr(node, "output_shape"))[-spatial:]
    kernel = list(attr(node, "kernel_shape", w_dims[2:]))
    strides = list(attr(node, "strides", [1] * spatial))
    dilations = list(attr(node, "dilations", [1] * spatial))
    extra = list(attr(node, "output_padding", [0] * spatial))
    upper = attr(node, "auto_pad", "NOTSET") == "SAME_UPPER"
    begin, end = [], []
    for i in range(spatial):
        if not isinstance(x_dims[2 + i], int):
            raise ModelError(f"{where} has an output_shape, and its input's spatial size is not "
                             "fixed", "fix it with --input-shape")
        total = strides[i] * (x_dims[2 + i] - 1) + extra[i] + (kernel[i] - 1) * dilations[i] + \
            1 - sizes_out[i]
        if total < 0:
            raise ModelError(f"{where}: its output_shape {sizes_out} is larger than the "
                             "convolution gives", "export it with output_padding instead")
        small = total // 2
        begin.append(small if upper else total - small)
        end.append(total - small if upper else small)
    kept = {a.name: helper.get_attribute_value(a) for a in node.attribute
            if a.name not in ("output_shape", "auto_pad", "pads")}
    e.op("ConvTranspose", list(node.input), outputs=[node.output[0]], pads=begin + end, **kept)


def _celu(e: Emitter, node) -> None:
    alpha = float(attr(node, "alpha", 1.0))
    x = node.input[0]
    scaled = e.op("Div", [x, e.const(np.float32(alpha), "alpha")])
    below = e.op("Mul", [e.op("Sub", [e.op("Exp", [scaled]), e.const(np.float32(1), "one")]),
                         e.const(np.float32(alpha), "alpha")])
    negative = e.op("Min", [below, e.const(np.float32(0), "zero")])
    e.op("Add", [e.op("Relu", [x]), negative], outputs=[node.output[0]])


def _swish(e: Emitter, node) -> None:
    """x·sigmoid(alpha·x) (opset 24; a SiLU where alpha is 1)."""
    x, alpha = node.input[0], float(attr(node, "alpha", 1.0))
    gate = x if alpha == 1.0 else e.op("Mul", [x, e.const(np.float32(alpha), "alpha")])
    e.op("Mul", [x, e.op("Sigmoid", [gate])], outputs=[node.output[0]])


def _lp_normalization(e: Emitter, node, where: str) -> None:
    p = int(attr(node, "p", 2))
    if p not in (1, 2):
        raise ModelError(f"{where} has p={p}; ONNX allows 1 or 2", "export it with p=1 or 2")
    x = node.input[0]
    norm = e.reduce("ReduceL2" if p == 2 else "ReduceL1", x, [int(attr(node, "axis", -1))])
    one, zero = e.const(np.float32(1), "one"), e.const(np.float32(0), "zero")
    # a row of zeros stays zeros, as onnxruntime gives it (not 0/0)
    safe = e.op("Where", [e.op("Equal", [norm, zero]), one, norm])
    e.op("Div", [x, safe], outputs=[node.output[0]])


def _mean_variance_normalization(e: Emitter, node, types: dict) -> None:
    """(x - E[x]) / (sqrt(var x) + 1e-9) with the variance about the mean. TVM's importer took
    E[x²] - E[x]², which cancels where the mean is large against the spread (4.5e-3 off at 100
    to 1, where onnxruntime is 8e-6), and dropped the 1e-9 (a constant input gave NaN). One over
    the batch's axis is left whole: the compile names it, at batch 1 only (rebatch.py)."""
    axes = [int(a) for a in attr(node, "axes", [0, 2, 3])]
    x = node.input[0]
    dtype = helper.tensor_dtype_to_np_dtype(types.get(x, onnx.TensorProto.FLOAT))
    deviation = e.op("Sub", [x, e.reduce("ReduceMean", x, axes)])
    variance = e.reduce("ReduceMean", e.op("Mul", [deviation, deviation]), axes)
    spread = e.op("Add", [e.op("Sqrt", [variance]), e.const(np.asarray(1e-9, dtype), "epsilon")])
    e.op("Div", [deviation, spread], outputs=[node.output[0]])


def _float16_einsum(e: Emitter, node) -> None:
    """In float32, rounded to float16 once: the importer writes an Einsum as a kernel of its
    own, which sums in its output's type (1.0e-2 off over 2048 float16 terms) and which
    fp16_sums.py cannot reach."""
    single = [e.op("Cast", [x], "single", to=onnx.TensorProto.FLOAT) for x in node.input]
    summed = e.op("Einsum", single, equation=attr(node, "equation"))
    e.op("Cast", [summed], outputs=[node.output[0]], to=onnx.TensorProto.FLOAT16)


def _center_crop_pad(e: Emitter, node, shapes, where: str) -> None:
    """CenterCropPad (opset 18; the importer lacks it) as a Slice of the axes it crops and a Pad
    of those it pads, each centered as ONNX's reference centers them (the odd element at the
    end)."""
    dims, target = shapes.get(node.input[0]), e.constant(node.input[1])
    if dims is None or target is None:
        raise ModelError(f"{where} crops or pads to a shape not known before the model runs",
                         "give it a constant shape")
    rank = len(dims)
    axes = [a % rank for a in (attr(node, "axes") or range(rank))]
    starts, ends, cropped, pads = [], [], [], [0] * (2 * rank)
    for axis, size in zip(axes, (int(t) for t in target.reshape(-1))):
        have = dims[axis]
        if not isinstance(have, int):
            raise ModelError(f"{where} crops or pads its batch axis (to {size}): cw cannot "
                             "batch it", "give the node `axes` without the batch axis")
        if size < have:
            starts.append((have - size) // 2)
            ends.append(starts[-1] + size)
            cropped.append(axis)
        elif size > have:
            pads[axis] = (size - have) // 2
            pads[axis + rank] = size - have - pads[axis]
    x = node.input[0]
    if cropped:
        x = e.op("Slice", [x, *(e.const(np.array(v, np.int64), what) for v, what in (
            (starts, "starts"), (ends, "ends"), (cropped, "axes")))])
    if any(pads):
        x = e.op("Pad", [x, e.const(np.array(pads, np.int64), "pads")])
    e.op("Identity", [x], outputs=[node.output[0]])


def _col2im(e: Emitter, node, shapes, where: str) -> None:
    """Col2Im (opset 18, PyTorch's nn.Fold; the importer lacks it) as the ConvTranspose that
    sums the same blocks into the image: one group per channel, its kernel a one-hot filter per
    block position, so each column entry lands where Col2Im puts it."""
    dims = shapes.get(node.input[0])
    image, block = (e.constant(name) for name in node.input[1:3])
    if dims is None or image is None or block is None or len(dims) != 3 or \
            not all(isinstance(d, int) for d in dims[1:]):
        raise ModelError(f"{where}: its image or block shape, or its input's shape, is not "
                         "known before the model runs", "export them as constants")
    image, block = [int(v) for v in image.reshape(-1)], [int(v) for v in block.reshape(-1)]
    spatial = len(block)
    if spatial not in (1, 2) or len(image) != spatial:
        raise ModelError(f"{where} folds {len(image)} spatial axes: cw writes 1 or 2",
                         "fold the image in 2-D")
    strides = list(attr(node, "strides", [1] * spatial))
    dilations = list(attr(node, "dilations", [1] * spatial))
    pads = list(attr(node, "pads", [0] * 2 * spatial))
    per_channel = int(np.prod(block))
    counts, extra = [], []
    for i in range(spatial):
        span = image[i] + pads[i] + pads[spatial + i] - dilations[i] * (block[i] - 1) - 1
        counts.append(span // strides[i] + 1)
        extra.append(span % strides[i])  # image rows past the last block: output_padding
    if dims[1] % per_channel or dims[2] != int(np.prod(counts)):
        raise ModelError(f"{where}: its input [N, {dims[1]}, {dims[2]}] is not the columns of "
                         f"blocks {block} over image {image}", "check the export")
    channels = dims[1] // per_channel
    filters = np.zeros((channels * per_channel, 1, *block), np.float32)
    for k, position in enumerate(np.ndindex(*block)):
        filters[(slice(k, None, per_channel), 0, *position)] = 1
    grid = e.op("Reshape", [node.input[0], e.const(np.array([0, dims[1], *counts], np.int64),
                                                    "grid")])
    e.op("ConvTranspose", [grid, e.const(filters, "one_hot")], outputs=[node.output[0]],
         group=channels, strides=strides, dilations=dilations, pads=pads,
         output_padding=extra)


def _hyperbolic(e: Emitter, node) -> None:
    """sinh x = (e^x - e^-x) / 2, cosh x = (e^x + e^-x) / 2."""
    x = node.input[0]
    both = e.op("Sub" if node.op_type == "Sinh" else "Add",
                [e.op("Exp", [x]), e.op("Exp", [e.op("Neg", [x])])])
    e.op("Mul", [both, e.const(np.float32(0.5), "half")], outputs=[node.output[0]])


def _is_inf(e: Emitter, node) -> None:
    x = node.input[0]
    found = e.op("IsInf", [x])
    zero = e.const(np.float32(0), "zero")
    if not attr(node, "detect_negative", 1):
        found = e.op("And", [found, e.op("Greater", [x, zero])])
    if not attr(node, "detect_positive", 1):
        found = e.op("And", [found, e.op("Less", [x, zero])])
    e.op("Identity", [found], outputs=[node.output[0]])


def inference_dropouts(model: onnx.ModelProto) -> tuple[int, int]:
    """Before onnxslim, in place: each Dropout of inference (no training_mode, or a constant
    false) as its input passed through, and where its mask is read, a mask of all true.
    onnxslim takes every output of a Dropout for its input, the mask too (TVM's importer gave
    a mask of zeros), and leaves one with a ratio input, which TVM imports as a tuple that its
    layout conversion fails on (a CUDA model's convolutions then all left to TVM). Returns
    (Dropouts passed through, masks among them)."""
    graph, count, masks = model.graph, 0, 0
    inits = {t.name: t for t in graph.initializer}
    for k in reversed(range(len(graph.node))):
        node = graph.node[k]
        if node.op_type != "Dropout" or node.domain not in _DOMAINS:
            continue
        training = node.input[2] if len(node.input) > 2 else ""
        if training and (training not in inits or numpy_helper.to_array(inits[training]).any()):
            continue  # (training mode: random, which nothing here can serve)
        e = Emitter(node.name or node.output[0], {})
        e.op("Identity", [node.input[0]], outputs=[node.output[0]])
        if len(node.output) > 1 and node.output[1]:
            e.op("Expand", [e.const(np.array(True), "true"), e.op("Shape", [node.input[0]])],
                 outputs=[node.output[1]])
            masks += 1
        del graph.node[k]
        for j, made in enumerate(e.nodes):
            graph.node.insert(k + j, made)
        graph.initializer.extend(e.new_inits)
        count += 1
    return count, masks


def _tile_as_expand(e: Emitter, node, shapes: dict, producers: dict) -> bool:
    """A Tile by repeats computed from the batch (DETR's `query.repeat(1, B, 1)`, a token
    `.repeat(B, 1, 1)`), whose importer takes no shape expression there: where every axis it
    repeats has size 1, it is the Expand to those repeats (an Expand keeps an axis given 1)."""
    x_dims = shapes.get(node.input[0])
    concat = producers.get(node.input[1])
    if not x_dims or concat is None or concat.op_type != "Concat":
        return False
    repeats = []  # each entry's value where it is a constant, else None (computed)
    for part in concat.input:
        value = e.constant(part)
        if value is not None:
            repeats += [int(v) for v in value.reshape(-1)]
        elif shapes.get(part) == [1]:
            repeats.append(None)
        else:
            return False
    if len(repeats) != len(x_dims) or \
            any(d != 1 and r != 1 for d, r in zip(x_dims, repeats)):
        return False
    e.op("Expand", [node.input[0], node.input[1]], outputs=[node.output[0]])
    return True


def _pow_types(e: Emitter, node, types: dict) -> bool:
    """A Pow whose types the importer does not take (one float type for both; ONNX allows the
    exponent's to differ, and an integer base): a float base and an exponent of another type
    (a constant, converted; or a computed one, cast) was refused; an integer base crashed
    ("power only applies to float"). An integer one is raised in float64 and truncated back,
    as onnxruntime does (`static_cast<T>(std::pow(x, y))`): exact where the result is."""
    base, exponent = types.get(node.input[0]), types.get(node.input[1])
    if base in _FLOATS:
        if exponent in (base, None):
            return False
        value = e.constant(node.input[1])
        if value is not None:
            exponent_name = e.const(value.astype(helper.tensor_dtype_to_np_dtype(base)),
                                    "exponent")
        else:
            exponent_name = e.op("Cast", [node.input[1]], "exponent", to=base)
        e.op("Pow", [node.input[0], exponent_name], outputs=[node.output[0]])
        return True
    if base not in _INTEGERS:
        return False
    double = onnx.TensorProto.DOUBLE
    x = e.op("Cast", [node.input[0]], "base", to=double)
    y = node.input[1] if exponent == double else e.op("Cast", [node.input[1]], "exponent",
                                                       to=double)
    e.op("Cast", [e.op("Pow", [x, y])], outputs=[node.output[0]], to=base)
    return True


def _declared_types(graph) -> dict[str, int]:
    """Each tensor's element type where the graph says it (onnxslim's inference leaves them in
    value_info), without inferring anything."""
    types = {t.name: t.data_type for t in graph.initializer}
    for vi in (*graph.input, *graph.value_info, *graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    return types


def _compress(e: Emitter, node) -> None:
    """Along an axis, by a constant condition: a Gather of the chosen indices (the output size
    is then fixed; only a condition computed when the model runs makes it vary)."""
    chosen = np.flatnonzero(e.constant(node.input[1]).reshape(-1)).astype(np.int64)
    e.op("Gather", [node.input[0], e.const(chosen, "chosen")], outputs=[node.output[0]],
         axis=int(attr(node, "axis")))


def _same_padded_pool(e: Emitter, node, shapes, where: str) -> bool:
    """A pooling padded SAME_UPPER / SAME_LOWER with the pads ONNX derives for it."""
    dims = shapes.get(node.input[0])
    kernel = list(attr(node, "kernel_shape", []))
    if not dims or len(dims) != len(kernel) + 2 or \
            not all(isinstance(d, int) for d in dims[2:]):
        return False  # (the importer takes a fixed shape, or says why not)
    begin, end = pool_indices.pool_pads(node, dims[2:])
    kept = {a.name: helper.get_attribute_value(a) for a in node.attribute
            if a.name not in ("auto_pad", "pads")}
    e.op(node.op_type, list(node.input), outputs=list(node.output), pads=begin + end, **kept)
    return True


def _rewrite_one(e: Emitter, node, shapes: dict, types: dict, used: set, where: str,
                 producers: dict) -> bool:
    """Write `node` as other operators into `e`; False where it stays as it is."""
    if contrib.is_rewritten(node):
        contrib.rewrite_node(e, node, shapes, types, used, where)
    elif node.op_type == "Expand":
        return _expand(e, node, shapes, where)
    elif node.op_type == "ConvTranspose":
        _conv_transpose(e, node, shapes, where)
    elif node.op_type == "Resize":
        return resize_forms.rewrite_node(e, node, shapes, where)
    elif node.op_type == "Celu":
        _celu(e, node)
    elif node.op_type in ("Sinh", "Cosh"):
        _hyperbolic(e, node)
    elif node.op_type == "IsInf":
        _is_inf(e, node)
    elif node.op_type == "Compress":
        _compress(e, node)
    elif node.op_type == "Pow":
        return _pow_types(e, node, types)
    elif node.op_type == "Tile":
        return _tile_as_expand(e, node, shapes, producers)
    elif pool_indices.wanted(node):
        return pool_indices.rewrite_node(e, node, shapes, types, producers, where)
    elif node.op_type == "MaxPool":
        return _same_padded_pool(e, node, shapes, where)
    elif node.op_type == "Swish":
        _swish(e, node)
    elif node.op_type == "CenterCropPad":
        _center_crop_pad(e, node, shapes, where)
    elif node.op_type == "Col2Im":
        _col2im(e, node, shapes, where)
    elif node.op_type == "LpNormalization":
        _lp_normalization(e, node, where)
    elif node.op_type == "MeanVarianceNormalization":
        _mean_variance_normalization(e, node, types)
    elif node.op_type == "Einsum":
        _float16_einsum(e, node)
    elif node.op_type in index_forms.OPS:
        index_forms.rewrite_node(e, node, shapes, producers, where)
    elif node.op_type in ("DFT", "STFT"):
        spectral.rewrite_node(e, node, shapes, where)
    elif node.op_type == "Attention":
        attention.rewrite_node(e, node, shapes, types, used, where)
    else:
        attention.rotary_node(e, node, shapes, where)
    return True


def _wanted(n, inits: dict, opset: int, supported, declared: dict) -> bool:
    """Whether node `n` is one this module rewrites (or folds: an operator the importer lacks,
    on constants); `declared`: the element types the graph states."""
    if contrib.is_rewritten(n):
        return True
    if n.domain not in _DOMAINS:
        return False
    op = n.op_type
    return op in _REWRITTEN or op not in supported or attention.is_rewritten(n, opset) or \
        resize_forms.candidate(n, inits) or \
        op == "Expand" and n.input[1] in inits or \
        op == "ConvTranspose" and attr(n, "output_shape") is not None or \
        op == "IsInf" and not (attr(n, "detect_negative", 1) and attr(n, "detect_positive", 1)) \
        or op == "MaxPool" and attr(n, "auto_pad") in _SAME or pool_indices.wanted(n) or \
        op == "Compress" and n.input[1] in inits and attr(n, "axis", 0) != 0 or \
        op == "Pow" and (declared.get(n.input[0]) not in _FLOATS or
                         declared.get(n.input[1]) != declared.get(n.input[0])) or \
        op == "Tile" and n.input[1] not in inits or \
        op == "MeanVarianceNormalization" and 0 not in attr(n, "axes", [0, 2, 3]) or \
        op == "Einsum" and declared.get(n.input[0]) == onnx.TensorProto.FLOAT16


def _needs_shapes(node) -> bool:
    return node.op_type in _NEEDS_SHAPES or contrib.is_rewritten(node)


def rewrite(model: onnx.ModelProto, supported, path: str = "the model") -> dict[str, int]:
    """Rewrite, in place, the nodes of `model` (top-level, after onnxslim) that TVM's importer
    cannot take and this module can; `supported` is the importer's operator set. Returns how
    many of each operator were rewritten ("constant X" for folded ones)."""
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in _DOMAINS), 17)
    inits = {t.name: t for t in graph.initializer}
    declared = _declared_types(graph)
    todo = [n for n in graph.node if _wanted(n, inits, opset, supported, declared)]
    if not todo:
        return {}
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    original = list(graph.node)
    producers = {o: n for n in original for o in n.output}
    nodes, count, rewritten = [], {}, {id(n) for n in todo}
    shapes, types = {}, {}
    for k, node in enumerate(original):
        if id(node) not in rewritten:
            nodes.append(node)
            continue
        where = _where(node, path)
        if node.op_type not in _REWRITTEN and \
                node.op_type not in _TARGETED and \
                not attention.is_rewritten(node, opset) and not contrib.is_rewritten(node):
            if not all(i in inits for i in node.input if i) or node.op_type in ("If", "Loop",
                                                                                "Scan"):
                nodes.append(node)  # the operator check refuses it, by name
                continue
            try:
                folded = _fold(node, inits, opset)
            except Exception as e:
                first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
                raise ModelError(f"{where}: its inputs are constants, but evaluating it "
                                 f"failed ({first})", "fold it before exporting") from None
            graph.initializer.extend(folded)
            inits.update((t.name, t) for t in folded)
            key = f"constant {node.op_type}"
            count[key] = count.get(key, 0) + 1
            continue
        if _needs_shapes(node) and node.input[0] not in shapes:
            # inferred on the graph as rewritten so far: ONNX's shape inference does not know
            # onnxruntime's operators, so a shape after one is known once it is rewritten
            del graph.node[:]
            graph.node.extend(nodes + original[k:])
            shapes, types = _shapes(model)
        e = Emitter(node.name or node.output[0], inits, opset)
        if not _rewrite_one(e, node, shapes, types, used, where, producers):
            nodes.append(node)
            continue
        nodes.extend(e.nodes)
        graph.initializer.extend(e.new_inits)
        inits.update((t.name, t) for t in e.new_inits)
        key = f"{node.domain} {node.op_type}" if node.domain not in _DOMAINS else node.op_type
        count[key] = count.get(key, 0) + 1
    del graph.node[:]
    graph.node.extend(nodes)
    return count
