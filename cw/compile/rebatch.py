"""Turn a graph exported with a fixed batch of 1 into one with a symbolic batch — when sound.

Soundness is checked, not assumed: with the leading dimension of every input and output made
symbolic, onnxruntime must accept a batch of 3 and produce exactly what three batch-1 runs
produce. An export traced at batch 1 often bakes that 1 into a Reshape's constant shape (a
flatten to [1, 512] before the classifier) or a Resize's constant sizes. Such a Reshape's
leading 1 is first made 0 ("keep the input's dimension"), such a Resize given the same scales
(where exact, cw/compile/resize_scales.py), and the check decides whether that was right.
Graphs that still fail it stay at batch 1, with the reason in one line.
"""

from __future__ import annotations

import copy

import numpy as np
import onnx

from cw.compile import batch_values, onnx_shapes, pool_indices, resize_scales
from cw.compile.onnx_load import BATCH_VAR, OnnxModel

CHECK_BATCH = 3
TOLERANCE = 1e-5


def _symbolic_leading(value_infos) -> None:
    for vi in value_infos:
        dims = vi.type.tensor_type.shape.dim
        if len(dims) and dims[0].HasField("dim_value") and dims[0].dim_value == 1:
            dims[0].Clear()
            dims[0].dim_param = BATCH_VAR


def _reshapes_keeping_the_batch(graph: onnx.GraphProto) -> int:
    """Each Reshape of `graph` to a constant shape whose first entry is 1 gets a copy of that
    shape with 0 there, which keeps the input's leading dimension (allowzero unset); returns
    how many. A shape given by a Constant node or an initializer; one shared by several
    Reshapes is copied for each, so that no other reader sees the change."""
    constants = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output and len(node.attribute) == 1 and \
                node.attribute[0].name == "value":
            constants[node.output[0]] = node.attribute[0].t
    rewritten = 0
    for node in graph.node:
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or \
                len(node.input) < 2 or node.input[1] not in constants or \
                any(a.name == "allowzero" and a.i for a in node.attribute):
            continue
        shape = onnx.numpy_helper.to_array(constants[node.input[1]])
        if shape.ndim != 1 or not len(shape) or shape[0] != 1:
            continue
        kept = shape.copy()
        kept[0] = 0
        name = f"{node.input[1]}__cw_batch_kept_{rewritten}"
        graph.initializer.append(onnx.numpy_helper.from_array(kept, name))
        node.input[1] = name
        rewritten += 1
    return rewritten


def _resizes_by_scales(model: onnx.ModelProto, candidate: onnx.ModelProto) -> int:
    """`candidate`'s Resizes to constant sizes (their batch of 1 written in) by exact scales
    instead (cw/compile/resize_scales.py), with the ratios read from `model`'s shapes at
    batch 1."""
    if not any(n.op_type == "Resize" and len(n.input) > 3 and n.input[3]
               for n in candidate.graph.node):
        return 0
    try:
        dims = onnx_shapes.dims(onnx_shapes.infer(model))
    except Exception:  # (shapes onnx cannot infer: the Resizes stay, and the check decides)
        return 0
    return resize_scales.rewrite(candidate.graph, dims)


def try_rebatch(onnx_model: OnnxModel) -> tuple[bool, str]:
    """Rebatch `onnx_model` in place if sound; returns (rebatched, one-line reason)."""
    if onnx_model.fixed_batch != 1:
        return False, "batch is not fixed at 1"
    for name, dtype, _ in onnx_model.inputs:
        if not np.issubdtype(np.dtype(dtype), np.floating):
            return False, f"input '{name}' is {dtype}: cannot check soundness with random data"
    candidate = _symbolic_copy(onnx_model.model)
    kept = _reshapes_keeping_the_batch(candidate.graph)
    scaled = _resizes_by_scales(onnx_model.model, candidate)
    why = _unsound(onnx_model, candidate)
    if why and kept + scaled:  # those made it worse or did not help: judge the graph as it was
        candidate = _symbolic_copy(onnx_model.model)
        kept, scaled, why = 0, 0, _unsound(onnx_model, candidate)
    if why:
        return False, why
    onnx_model.model = candidate
    onnx_model.inputs = [(n, d, [BATCH_VAR, *dims[1:]]) for n, d, dims in onnx_model.inputs]
    onnx_model.fixed_batch = None
    note = (f"rebatched: the graph's fixed batch of 1 is now symbolic (a batch of "
            f"{CHECK_BATCH} equals {CHECK_BATCH} batch-1 runs in onnxruntime)")
    if kept:
        note += f"; the leading 1 of {kept} Reshape shape(s) made 0 (the input's batch)"
    if scaled:
        note += f"; {scaled} Resize(s) to sizes [1, ...] made Resizes by the same scales"
    return True, note


def _symbolic_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    candidate = copy.deepcopy(model)
    _symbolic_leading(candidate.graph.input)
    _symbolic_leading(candidate.graph.output)
    del candidate.graph.value_info[:]  # shapes recorded for batch 1 would be stale
    return candidate


def _unsound(onnx_model: OnnxModel, candidate: onnx.ModelProto) -> str:
    """Why `candidate` (`onnx_model` with a symbolic batch) is not sound; "" when it is."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal((CHECK_BATCH, *dims[1:])).astype(dtype)
             for name, dtype, dims in onnx_model.inputs}
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4  # its refusal is reported in our one line
        session = ort.InferenceSession(candidate.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        batched = session.run(None, feeds)
        singles = [session.run(None, {k: v[i:i + 1] for k, v in feeds.items()})
                   for i in range(CHECK_BATCH)]
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return f"onnxruntime rejects a batch of {CHECK_BATCH}: {first[:160]}"
    for k, y in enumerate(batched):
        expected = np.concatenate([s[k] for s in singles])
        if y.shape != expected.shape:
            return (f"output {k} has shape {list(y.shape)} for a batch of {CHECK_BATCH}, "
                    f"not {list(expected.shape)}")
        scale = float(np.max(np.abs(expected))) or 1.0
        if float(np.max(np.abs(y - expected))) > TOLERANCE * scale:
            return (f"output {k} for a batch of {CHECK_BATCH} differs from "
                    f"{CHECK_BATCH} batch-1 runs")
    return ""


_REDUCTIONS = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
               "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}
# operators along one axis, and that axis's default
_ALONG_AXIS = {"Softmax": -1, "LogSoftmax": -1, "Hardmax": -1, "ArgMax": 0, "ArgMin": 0,
               "TopK": -1}


def _axes(node: onnx.NodeProto, constants: dict, rank: int) -> set[int] | None:
    """The axes `node` combines values along (0 .. rank-1), None where not known."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type in _ALONG_AXIS:
        axes = [attrs.get("axis", _ALONG_AXIS[node.op_type])]
    elif node.op_type == "CumSum":
        if len(node.input) < 2 or node.input[1] not in constants:
            return None
        axes = onnx.numpy_helper.to_array(constants[node.input[1]]).reshape(-1).tolist()
    elif node.op_type == "MeanVarianceNormalization":
        axes = attrs.get("axes", [0, 2, 3])
    else:  # a reduction: its axes as an attribute, or (opset 18; ReduceSum 13) an input
        axes = attrs.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            if node.input[1] not in constants:
                return None
            axes = onnx.numpy_helper.to_array(constants[node.input[1]]).reshape(-1).tolist()
        if not axes:
            return set() if attrs.get("noop_with_empty_axes") else set(range(rank))
    return {int(a) % rank for a in axes}


def batch_mixing(model: onnx.ModelProto, quantized: bool = False) -> str:
    """What in `model` (batch symbolic) combines the samples of a batch: a reduction, softmax,
    scan, selection or normalization along the batch axis, the batch size read as a value
    (cw/compile/batch_values.py), or MaxPool's indices, numbered across the batch, read as
    values (cw/compile/pool_indices.py). Served in batches, each request's answer would then depend
    on the others' (and on the padding); "" when nothing does.
    With `quantized`, a whole tensor's min or max is not counted: dynamic quantization's range,
    which ONNX and onnxruntime take over the batch too (quantized.py's note says so)."""
    return _along_the_batch(model, quantized) or batch_values.batch_size_read(model) or \
        pool_indices_across_the_batch(model)


def pool_indices_across_the_batch(model: onnx.ModelProto) -> str:
    """pool_indices.across_the_batch on `model`'s inferred shapes: normalize.slim asks before
    it rewrites MaxPool's indices (after, nothing tells)."""
    if not any(pool_indices.wanted(n) for n in model.graph.node):
        return ""
    try:
        dims = onnx_shapes.dims(onnx_shapes.infer(model), symbols=True)
    except Exception:  # shapes onnx cannot infer: nothing to tell from (TVM's import judges)
        return ""
    return pool_indices.across_the_batch(model, dims)


def _along_the_batch(model: onnx.ModelProto, quantized: bool) -> str:
    graph = model.graph
    kinds = _REDUCTIONS | set(_ALONG_AXIS) | {"CumSum", "MeanVarianceNormalization"}
    candidates = [n for n in graph.node if n.op_type in kinds and n.domain in ("", "ai.onnx")]
    if not candidates:
        return ""
    try:
        dims = onnx_shapes.dims(onnx_shapes.infer(model), symbols=True)
    except Exception:  # shapes onnx cannot infer: nothing to tell from (TVM's import judges)
        return ""
    constants = {t.name: t for t in graph.initializer}
    for node in candidates:
        shape = dims.get(node.input[0])
        if not shape or shape[0] != BATCH_VAR:
            continue
        axes = _axes(node, constants, len(shape))
        if axes is None or 0 not in axes:
            continue
        if quantized and node.op_type in ("ReduceMin", "ReduceMax") and \
                axes == set(range(len(shape))):
            continue
        return (f"{node.op_type} '{node.name or node.output[0]}' combines the samples of a "
                f"batch (along axes {sorted(axes)}, the batch's included)")
    return ""

