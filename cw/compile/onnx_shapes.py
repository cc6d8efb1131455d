"""Shape inference on a model without its weights' bytes.

onnx's shape inference serializes the whole model to C++ and parses the answer back, on every
call: 6 s for BERT-base's 416 MiB, of which the shapes need none. A weight is given as a typed
input instead (its dims are all inference reads); integer initializers and small ones stay,
because shape arithmetic reads their values (a Reshape's target, a Resize's scales).
"""

from __future__ import annotations

import onnx
from onnx import helper

_VALUED_TYPES = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}
_VALUED_ELEMENTS = 64  # any initializer up to this size stays: a scale, a bound, an epsilon


def _weight(tensor: onnx.TensorProto) -> bool:
    """Whether inference can do with `tensor`'s dims alone."""
    elements = 1
    for d in tensor.dims:
        elements *= d
    return tensor.data_type not in _VALUED_TYPES and elements > _VALUED_ELEMENTS


def tensor_bytes(tensor: onnx.TensorProto) -> int:
    """The size of an initializer's values, from its dims (reading raw_data would copy it)."""
    try:
        itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, ValueError):  # UNDEFINED, STRING
        itemsize = 1
    elements = 1
    for d in tensor.dims:
        elements *= d
    return elements * itemsize


def weights_bytes(model: onnx.ModelProto) -> int:
    """The size of the top-level initializers' values."""
    return sum(map(tensor_bytes, model.graph.initializer))


def without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose weights are typed graph inputs without data. Everything else
    (opsets, local functions, metadata, value_info, subgraphs) is copied."""
    light = onnx.ModelProto()
    for field, value in model.ListFields():
        if field.name != "graph":
            _copy_field(light, field, value)
    graph = model.graph
    for field, value in graph.ListFields():
        if field.name != "initializer":
            _copy_field(light.graph, field, value)
    listed = {i.name for i in graph.input}
    for tensor in graph.initializer:
        if not _weight(tensor):
            light.graph.initializer.append(tensor)
        elif tensor.name not in listed:  # IR < 4 lists initializers as inputs too
            light.graph.input.append(
                helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    return light


def annotate(model: onnx.ModelProto, inferred: onnx.ModelProto) -> onnx.ModelProto:
    """`model`, in place, with what inference gave `inferred` (without_weights(model), shapes
    inferred): its value_info, outputs and inputs, subgraphs, and the initializers onnxslim's
    symbolic inference adds (shape values it computed). Copying the weights into `inferred`
    instead would take seconds for a model of hundreds of MiB."""
    graph, light = model.graph, inferred.graph
    if len(light.node) != len(graph.node):
        raise ValueError("annotate: inference changed the graph's nodes")
    stood_in = {t.name for t in graph.initializer if _weight(t)} - {i.name for i in graph.input}
    for field, values in (("input", [i for i in light.input if i.name not in stood_in]),
                          ("output", light.output), ("value_info", light.value_info)):
        kept = list(values)
        graph.ClearField(field)
        getattr(graph, field).extend(kept)
    own = {t.name for t in graph.initializer}
    graph.initializer.extend(t for t in light.initializer if t.name not in own)
    for node, annotated in zip(graph.node, light.node):
        if any(a.HasField("g") or a.graphs for a in node.attribute):
            node.CopyFrom(annotated)
    return model


def infer(model: onnx.ModelProto, **options) -> onnx.ModelProto:
    """onnx.shape_inference.infer_shapes(model, **options) without copying the weights: the
    graph's inputs, value_info and outputs as that call gives them. The returned model has no
    weights; read shapes from it, do not serialize it."""
    return onnx.shape_inference.infer_shapes(without_weights(model), **options)


def dims(inferred: onnx.ModelProto, model: onnx.ModelProto | None = None,
         symbols: bool = False) -> dict[str, list]:
    """Each tensor's dims from an inferred model: ints where known; unknown dims are None, or
    their symbol (the batch's, say) with `symbols`. With `model`, its initializers' dims too."""
    shapes = {}
    for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        tensor = vi.type.tensor_type
        if tensor.HasField("shape"):
            shapes[vi.name] = [d.dim_value if d.HasField("dim_value")
                               else ((d.dim_param or None) if symbols else None)
                               for d in tensor.shape.dim]
    for t in (model.graph.initializer if model is not None else ()):
        shapes[t.name] = list(t.dims)
    return shapes


def output_dims(model: onnx.ModelProto) -> list[list[int | None]] | None:
    """Each graph output's dims as ONNX's shape inference gives them from the inputs (the
    shapes the file declares for its outputs set aside: an exporter's may be stale), None
    where unknown; None where inference fails."""
    probe = without_weights(model)
    for out in probe.graph.output:
        out.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, data_prop=True)
    except Exception:  # (TVM's import reports a model whose shapes do not infer)
        return None
    known = dims(inferred)
    return [known.get(out.name) for out in model.graph.output]


def _copy_field(target, field, value) -> None:
    repeated = getattr(field, "is_repeated", None)  # protobuf 7 dropped `label`
    if repeated is None:
        repeated = field.label == field.LABEL_REPEATED
    if repeated:
        getattr(target, field.name).extend(value)
    elif field.type == field.TYPE_MESSAGE:
        getattr(target, field.name).CopyFrom(value)
    else:
        setattr(target, field.name, value)
