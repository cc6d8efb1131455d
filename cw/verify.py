"""Reference outputs from onnxruntime and the error measure `--verify` reports.

Relative error is max|y - ref| / max|ref| over each output (elementwise relative error is
meaningless near zero); the reported figure is the worst output's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cw.errors import ModelError, UsageError

VERIFY_TOLERANCE = 1e-3
# reduced precisions keep 10 bits of mantissa in their products (fp16 and TF32 alike): about
# three decimal digits, so an fp32 tolerance would fail bundles that are right
REDUCED_PRECISION_TOLERANCE = 1e-2


# a quantized model's float operators between Quantize/Dequantize pairs (its QDQ form) sum
# non-integers, in another order than onnxruntime's: a value near .5 then rounds the other way,
# one step (up to 2/255 of max|y| for 8 bits) in a layer, and such steps add up through the
# layers (mobilenet_v2 quantized by onnxruntime's tool: 1.4e-2). QLinear operators compute the
# very integers onnxruntime's exact kernels do (0).
QUANTIZED_TOLERANCE = 3e-2


def verify_tolerance(precision: str, quantized: bool = False) -> float:
    """The max relative error `cw run --verify` accepts for a bundle of this precision (of a
    quantized model: `is_quantized`)."""
    if quantized:
        return QUANTIZED_TOLERANCE
    return VERIFY_TOLERANCE if precision == "fp32" else REDUCED_PRECISION_TOLERANCE


def is_quantized(onnx_path: str | Path) -> bool:
    """Whether the model has quantized operators (cw/compile/quantized.py rewrites them)."""
    import onnx

    from cw.compile import quantized

    try:
        model = onnx.load(str(onnx_path), load_external_data=False)
    except Exception:  # onnx_reference says what is wrong with the file
        return False
    return any(quantized.is_rewritten(n) for n in model.graph.node)


def max_relative_error(y: np.ndarray, ref: np.ndarray) -> float:
    if y.shape != ref.shape:
        return float("inf")
    if not ref.size:
        return 0.0
    y, ref = y.astype(np.float64), ref.astype(np.float64)
    # NaN or ±inf where the reference has them too is agreement; anywhere else, disagreement
    # (a plain max over NaN differences would report "nan", which no tolerance can judge)
    same_special = (np.isnan(y) & np.isnan(ref)) | (np.isinf(ref) & (y == ref))
    special = ~np.isfinite(y) | ~np.isfinite(ref)
    if np.any(special & ~same_special):
        return float("inf")
    finite = ~special
    if not np.any(finite):
        return 0.0
    scale = float(np.max(np.abs(ref[finite])))
    diff = float(np.max(np.abs(y[finite] - ref[finite])))
    if scale == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / scale


def non_finite_hint(inputs: list[np.ndarray]) -> str | None:
    """Why outputs may disagree although the model is right: TVM lowers max and ReLU so that
    NaN becomes a number, where onnxruntime keeps it."""
    bad = sum(int(np.count_nonzero(~np.isfinite(x))) for x in inputs
              if np.issubdtype(x.dtype, np.floating))
    if not bad:
        return None
    return (f"the input holds {bad} NaN or infinite value(s), which the compiled kernels and "
            "onnxruntime need not treat alike (TVM's ReLU and max turn NaN into numbers); "
            "verify with finite inputs")


def _exact_integer_form(path: Path) -> bytes | None:
    """A quantized model as `exact_integer_model` makes it, serialized; None for any other."""
    import onnx

    from cw.compile import quantized

    try:
        model = onnx.load(str(path), load_external_data=False)
        if not any(quantized.is_rewritten(n) for n in model.graph.node):
            return None
        # the form is handed to onnxruntime as bytes, with no directory to find data files in
        onnx.load_external_data_for_model(model, str(Path(path).resolve().parent))
    except Exception:  # onnxruntime says what is wrong with the file
        return None
    model = exact_integer_model(model)
    return None if model is None else model.SerializeToString()


def exact_integer_model(model):
    """For a quantized model (Quantize/Dequantize or QLinear operators), a copy that onnxruntime
    computes exactly; None for any other model. onnxruntime's u8s8 kernels (uint8 activations,
    int8 weights) on x86 hosts without VNNI sum pairs of byte products into int16 and saturate:
    mobilenetv2-12-int8's first layer gave other integers in 4 % of its outputs, and its logits
    differed by 20 % of their range. Its u8u8 kernels widen to 16 bits first, so the int8
    weights of its products are given as uint8 (w + 128, zero point + 128: the same w - zero in
    every product). Run it with graph optimizations off: onnxruntime's fusions would turn
    Quantize/Dequantize pairs around float operators into its saturating kernels again."""
    import onnx
    from onnx import numpy_helper

    from cw.compile import quantized

    if not any(quantized.is_rewritten(n) for n in model.graph.node):
        return None
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {t.name: t for t in model.graph.initializer}
    shifted: dict[str, str] = {}  # int8 initializer -> its uint8 copy

    def uint8_copy(name: str) -> str:
        if name not in shifted:
            value = numpy_helper.to_array(inits[name]).astype(np.int16) + 128
            shifted[name] = f"{name}__as_uint8"
            model.graph.initializer.append(
                numpy_helper.from_array(value.astype(np.uint8), shifted[name]))
        return shifted[name]

    # operator -> positions of (its int8 weight, the weight's zero point)
    weight_inputs = {"QLinearConv": (3, 5), "QLinearMatMul": (3, 5), "QGemm": (3, 5),
                     "MatMulInteger": (1, 3), "ConvInteger": (1, 3)}
    for node in model.graph.node:
        if node.op_type not in weight_inputs:
            continue
        w_at, zero_at = weight_inputs[node.op_type]
        weight = inits.get(node.input[w_at])
        if weight is None or weight.data_type != onnx.TensorProto.INT8:
            continue
        if len(node.input) <= zero_at or not node.input[zero_at]:
            # an absent zero point is 0 of the weight's type
            name = f"{node.input[w_at]}__zero"
            if name not in inits:
                inits[name] = numpy_helper.from_array(np.zeros((), np.int8), name)
                model.graph.initializer.append(inits[name])
            while len(node.input) <= zero_at:
                node.input.append("")
            node.input[zero_at] = name
        zero = inits.get(node.input[zero_at])
        if zero is not None and zero.data_type == onnx.TensorProto.INT8:
            node.input[w_at] = uint8_copy(node.input[w_at])
            node.input[zero_at] = uint8_copy(node.input[zero_at])
    used = {v for n in model.graph.node for v in n.input}
    for name in shifted:  # the int8 originals no product reads any more
        if name not in used:
            model.graph.initializer.remove(inits[name])
    return model


def onnx_reference(onnx_path: str | Path, inputs: list[np.ndarray],
                   manifest=None) -> list[np.ndarray]:
    """Outputs of onnxruntime (CPU) for the same inputs. A graph with its batch fixed at 1 is run
    one sample at a time. With the bundle's `manifest`, inputs and outputs are moved to the
    file's batch axes and the inputs fixed at compile time are given their values."""
    import onnxruntime as ort

    path = Path(onnx_path)
    if not path.is_file():
        raise UsageError(f"no such file: {path}",
                         "give --verify the .onnx file the bundle came from")
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        source = _exact_integer_form(path)
        if source is not None:
            # its graph fusions turn Quantize/Dequantize pairs around float operators into
            # integer kernels of its own, which saturate as below: the file's own arithmetic
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(source or str(path), options,
                                       providers=["CPUExecutionProvider"])
    except Exception as e:
        raise ModelError(f"onnxruntime cannot load {path}: {str(e).splitlines()[0]}",
                         "give --verify a valid ONNX model") from None
    if manifest is not None and (manifest.fixed_inputs or _unread_inputs(session, manifest, path)
                                 or any(s.source_batch_axis
                                        for s in (*manifest.inputs, *manifest.outputs))):
        return _run_in_source_layout(session, inputs, manifest, path)
    meta = session.get_inputs()
    if len(meta) != len(inputs):
        raise UsageError(f"{path.name} takes {len(meta)} input(s), the bundle {len(inputs)}",
                         "give --verify the ONNX file the bundle was compiled from")
    lead = meta[0].shape[0] if meta[0].shape else None
    if isinstance(lead, int):
        parts = [session.run(None, {m.name: x[i:i + lead] for m, x in zip(meta, inputs)})
                 for i in range(0, inputs[0].shape[0], lead)]
        return [np.concatenate([p[k] for p in parts]) for k in range(len(parts[0]))]
    return session.run(None, {m.name: x for m, x in zip(meta, inputs)})


def source_feeds(manifest, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The ONNX file's inputs, by name, for the bundle's `inputs`: each batch axis where the
    file has it, and the inputs fixed at compile time with their values."""
    feeds = {spec.name: np.moveaxis(x, 0, spec.source_batch_axis)
             for spec, x in zip(manifest.inputs, inputs)}
    feeds.update({f.name: np.array(f.values, dtype=f.dtype).reshape(f.shape)
                  for f in manifest.fixed_inputs})
    return feeds


def _unread_inputs(session, manifest, path: Path) -> list:
    """The file's inputs the bundle has not that its graph never reads (onnxslim drops them):
    given zeros, as any value would do. (Others make the inputs disagree, as they should.)"""
    import onnx

    from cw.compile.onnx_load import all_nodes

    known = {spec.name for spec in manifest.inputs} | {f.name for f in manifest.fixed_inputs}
    missing = [m for m in session.get_inputs() if m.name not in known]
    if not missing:
        return []
    graph = onnx.load(str(path), load_external_data=False).graph
    read = {v for node in all_nodes(graph) for v in node.input} | {o.name for o in graph.output}
    return [m for m in missing if m.name not in read]


def _zeros_for(meta, batch: int) -> np.ndarray:
    dtype = {"tensor(float)": np.float32, "tensor(double)": np.float64,
             "tensor(float16)": np.float16, "tensor(int64)": np.int64,
             "tensor(int32)": np.int32, "tensor(bool)": np.bool_}.get(meta.type, np.float32)
    shape = [d if isinstance(d, int) else batch for d in meta.shape]
    return np.zeros(shape, dtype)


def _run_in_source_layout(session, inputs: list[np.ndarray], manifest,
                          path: Path) -> list[np.ndarray]:
    feeds = source_feeds(manifest, inputs)
    for meta in _unread_inputs(session, manifest, path):
        feeds[meta.name] = _zeros_for(meta, inputs[0].shape[0] if inputs else 1)
    expected = {m.name for m in session.get_inputs()}
    if set(feeds) != expected:
        raise UsageError(f"the ONNX file takes inputs {sorted(expected)}, the bundle and its "
                         f"fixed inputs {sorted(feeds)}",
                         "give --verify the ONNX file the bundle was compiled from")
    outputs = session.run(None, feeds)
    return [np.moveaxis(y, spec.source_batch_axis, 0)
            for spec, y in zip(manifest.outputs, outputs)]
