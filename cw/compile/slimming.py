"""onnxslim's folding (normalization's step 2, cw/compile/normalize.py), run lighter than
onnxslim runs itself on large models: its shape inference and its check for convergence see the
graph without its weights' bytes, and the copies of the weights its rounds make are let go as
soon as the round is over (see _lighter_onnxslim).
"""

from __future__ import annotations

import collections
import contextlib
import gc
import io
import logging

import onnx

from cw.compile import onnx_shapes
from cw.compile.onnx_load import BATCH_VAR, OnnxModel
from cw.errors import ModelError

# onnxslim's fusions that fold a Mul after a convolution or matrix product into its weights
_PRODUCT_FOLDS = ("FusionConvMul", "FusionConvTransposeMul", "FusionGemmMul")


def _op_counts(model: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node)


def fold(onnx_model: OnnxModel, say) -> None:
    """onnxslim's folding, in place (`onnx_model.model` replaced); `say` gets a note of what it
    did, or why the graph was left as exported."""
    import onnxslim

    before = _op_counts(onnx_model.model)
    initializers = len(onnx_model.model.graph.initializer)
    # folding a requantization's multiplier into the weights would round each product instead
    # of the integer sum: other integers than onnxruntime's, wherever a value lies near .5
    skipped = list(_PRODUCT_FOLDS) if onnx_model.quantized else None
    # onnxslim logs and prints tables; a compiler's output is its own progress
    logging.getLogger("onnxslim").setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), _lighter_onnxslim():
            slimmed = onnxslim.slim(onnx_model.model, skip_fusion_patterns=skipped)
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        say(f"graph left as exported: onnxslim failed ({first})")
        return
    if slimmed is None or not slimmed.graph.node:
        say("graph left as exported: onnxslim returned no graph")
        return
    after = _op_counts(slimmed)
    removed = before - after
    folded = [op for op in ("Constant", "ConstantOfShape", "Shape", "Gather", "Unsqueeze",
                            "Concat", "Identity", "Dropout") if removed.get(op)]
    detail = ", ".join(f"{removed[op]} {op}" for op in folded)
    say(f"onnxslim: {sum(before.values())} → {sum(after.values())} nodes"
        + (f" (folded or removed {detail})" if detail else "")
        + f", {initializers} → {len(slimmed.graph.initializer)} initializers")
    _check_batch_kept(onnx_model, slimmed)
    onnx_model.model = slimmed
    # onnxslim's graphs are cycles that hold a round's copy of the weights until the
    # collector runs (a 2.6 GB model: 7.9 GB held into TVM's import, not 2.6)
    _collected(slimmed)


def _collected(model: onnx.ModelProto) -> None:
    """Garbage collected now if `model`'s weights are large enough for their copies to matter;
    a collection costs tens of ms, which small models' whole normalization does not take."""
    if onnx_shapes.weights_bytes(model) >= _COLLECTED_FROM_BYTES:
        gc.collect()


_COLLECTED_FROM_BYTES = 64 << 20


def _matchers_released() -> None:
    """onnxslim's fusion matchers are module-level objects that keep, as attributes named
    after their pattern's nodes, the last graph nodes they matched; through those a round's
    graph, and its copy of the weights, outlived the round and `slim` (onnxslim 0.1.98)."""
    from onnxslim.core.pattern.registry import DEFAULT_FUSION_PATTERNS

    for matchers in DEFAULT_FUSION_PATTERNS.values():
        for matcher in matchers if isinstance(matchers, list) else [matchers]:
            for name in getattr(matcher, "pattern_dict", {}):
                if name in vars(matcher):
                    delattr(matcher, name)


@contextlib.contextmanager
def _lighter_onnxslim():
    """onnxslim.slim with its two whole-model steps made light; `slim` looks both up on every
    call (in onnxslim.core and onnxslim.utils), which is where they are replaced.

    - Shape inference, after each round of folding, runs on the model without its weights'
      bytes. For most transformers (any LayerNormalization: onnxslim's symbolic inference fails
      there and falls back to onnx's) it copied the whole model twice a round: 40 of BERT-base's
      60 s of normalization.
    - The check for convergence after each round compares the graph without its weights'
      values (nodes, attributes, names, types and shapes), not graphsurgeon's import of the whole
      model, which compared every weight byte by byte through two copies (6 s on BERT-base) and
      held each round's model alive into the next. A 2.6 GB model peaked at 4x its size; now
      3x: the model given, the last round's and the new one. A
      round that changes a weight's values also changes the nodes (a fold or fusion removes
      them), so the rounds run are the same, or one more where onnx's inference gives a
      branch's outer names shapes, which graphsurgeon reads from the outer graph (Silero VAD);
      the graph comes out the same."""
    import onnxslim.core
    import onnxslim.utils

    slims_inference, slims_check_point = onnxslim.core.shape_infer, onnxslim.utils.check_point

    def shape_infer(model: onnx.ModelProto) -> onnx.ModelProto:
        return onnx_shapes.annotate(model, slims_inference(onnx_shapes.without_weights(model)))

    def check_point(model: onnx.ModelProto) -> tuple:
        # the last round's graphs (cycles, and the matchers' last matches) hold its copy of
        # the weights
        _matchers_released()
        _collected(model)
        light = onnx_shapes.without_weights(model)
        # as graphsurgeon reads them: one shape per name (onnx's inference may list a name
        # twice), order aside
        shapes = {v.name: v.SerializeToString(deterministic=True) for v in light.graph.value_info}
        del light.graph.value_info[:]
        return light.SerializeToString(deterministic=True), sorted(shapes.items())

    onnxslim.core.shape_infer, onnxslim.utils.check_point = shape_infer, check_point
    try:
        yield
    finally:
        onnxslim.core.shape_infer, onnxslim.utils.check_point = slims_inference, slims_check_point
        _matchers_released()


def _check_batch_kept(onnx_model: OnnxModel, slimmed: onnx.ModelProto) -> None:
    """onnxslim's shape inference pins a symbolic batch that the graph forces to one value
    (an Expand of the batch axis to 2, say): such a graph has no batch to vary."""
    before = {i.name: [d.dim_param for d in i.type.tensor_type.shape.dim]
              for i in onnx_model.model.graph.input}
    for i in slimmed.graph.input:
        dims = i.type.tensor_type.shape.dim
        axis = next((k for k, d in enumerate(before.get(i.name, [])) if d == BATCH_VAR), None)
        if axis is not None and axis < len(dims) and dims[axis].HasField("dim_value"):
            raise ModelError(f"{onnx_model.path.name}: the graph allows input '{i.name}' only "
                             f"a batch of {dims[axis].dim_value} (its shapes force it)",
                             "export the model with a dynamic batch")
