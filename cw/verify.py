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


def verify_tolerance(precision: str) -> float:
    """The max relative error `cw run --verify` accepts for a bundle of this precision."""
    return VERIFY_TOLERANCE if precision == "fp32" else REDUCED_PRECISION_TOLERANCE


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


def onnx_reference(onnx_path: str | Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Outputs of onnxruntime (CPU) for the same inputs. A graph with its batch fixed at 1 is run
    one sample at a time."""
    import onnxruntime as ort

    path = Path(onnx_path)
    if not path.is_file():
        raise UsageError(f"no such file: {path}", "give --verify the .onnx file the bundle came from")
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:
        raise ModelError(f"onnxruntime cannot load {path}: {str(e).splitlines()[0]}",
                         "give --verify a valid ONNX model") from None
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
