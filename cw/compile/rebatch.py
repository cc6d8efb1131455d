"""Turn a graph exported with a fixed batch of 1 into one with a symbolic batch — when sound.

Soundness is checked, not assumed: with the leading dimension of every input and output made
symbolic, onnxruntime must accept a batch of 3 and produce exactly what three batch-1 runs
produce. Graphs that bake the batch into shape constants (a Reshape to [1, -1], say) fail that
check and stay at batch 1, with the reason in one line.
"""

from __future__ import annotations

import copy

import numpy as np

from cw.compile.frontend import BATCH_VAR, OnnxModel

CHECK_BATCH = 3
TOLERANCE = 1e-5


def _symbolic_leading(value_infos) -> None:
    for vi in value_infos:
        dims = vi.type.tensor_type.shape.dim
        if len(dims) and dims[0].HasField("dim_value") and dims[0].dim_value == 1:
            dims[0].Clear()
            dims[0].dim_param = BATCH_VAR


def try_rebatch(onnx_model: OnnxModel) -> tuple[bool, str]:
    """Rebatch `onnx_model` in place if sound; returns (rebatched, one-line reason)."""
    import onnxruntime as ort

    if onnx_model.fixed_batch != 1:
        return False, "batch is not fixed at 1"
    for name, dtype, _ in onnx_model.inputs:
        if not np.issubdtype(np.dtype(dtype), np.floating):
            return False, f"input '{name}' is {dtype}: cannot check soundness with random data"
    candidate = copy.deepcopy(onnx_model.model)
    _symbolic_leading(candidate.graph.input)
    _symbolic_leading(candidate.graph.output)
    del candidate.graph.value_info[:]  # shapes recorded for batch 1 would be stale
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
        return False, f"onnxruntime rejects a batch of {CHECK_BATCH}: {first[:160]}"
    for k, y in enumerate(batched):
        expected = np.concatenate([s[k] for s in singles])
        if y.shape != expected.shape:
            return False, (f"output {k} has shape {list(y.shape)} for a batch of {CHECK_BATCH}, "
                           f"not {list(expected.shape)}")
        scale = float(np.max(np.abs(expected))) or 1.0
        if float(np.max(np.abs(y - expected))) > TOLERANCE * scale:
            return False, (f"output {k} for a batch of {CHECK_BATCH} differs from "
                           f"{CHECK_BATCH} batch-1 runs")
    onnx_model.model = candidate
    onnx_model.inputs = [(n, d, [BATCH_VAR, *dims[1:]]) for n, d, dims in onnx_model.inputs]
    onnx_model.fixed_batch = None
    return True, (f"rebatched: the graph's fixed batch of 1 is now symbolic (a batch of "
                  f"{CHECK_BATCH} equals {CHECK_BATCH} batch-1 runs in onnxruntime)")
