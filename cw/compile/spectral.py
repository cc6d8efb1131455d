"""DFT and STFT (audio front ends: PyTorch exports torch.stft as STFT), which TVM 0.27's
importer lacks, as products by constant matrices of cosines and sines: an STFT's window folded
into them and its frames one Gather of constant indices. Exact to fp32 rounding; a matrix
product costs O(n^2), where an FFT would cost O(n log n), which for the frame lengths of audio
models (256-1024) is small."""

from __future__ import annotations

import numpy as np

from cw.compile.emit import Emitter, attr
from cw.errors import ModelError

# a DFT matrix this large is more likely a whole-signal transform than a front end's frames
_MAX_DFT_MATRIX_BYTES = 64 << 20


def rewrite_node(e: Emitter, node, shapes: dict, where: str) -> None:
    if node.op_type == "DFT":
        _dft(e, node, shapes, where)
    else:
        _stft(e, node, shapes, where)


def dft_matrix(samples: int, parts: int, length: int, inverse: bool, onesided: bool,
                window: np.ndarray | None = None) -> np.ndarray:
    """[samples * parts, bins * 2]: a signal's samples (each real, or real and imaginary),
    times this, are its transform of `length` points (zero-padded or truncated to it), each
    bin's real and imaginary part, optionally weighted by `window` first."""
    bins = length // 2 + 1 if onesided else length
    n = np.arange(samples)[:, None]
    k = np.arange(bins)[None, :]
    theta = 2 * np.pi * ((n * k) % length) / length  # (the remainder keeps the angle exact)
    scale = 1.0 / length if inverse else 1.0
    cos = np.cos(theta) * scale
    sin = np.sin(theta) * scale * (1 if inverse else -1)  # e^{±iθ} = cos + i·sin
    cos[length:], sin[length:] = 0, 0  # samples past `length`: truncated away
    w = np.zeros((samples, parts, bins, 2))
    w[:, 0, :, 0], w[:, 0, :, 1] = cos, sin  # (a + ib)(cos + i·sin)
    if parts == 2:
        w[:, 1, :, 0], w[:, 1, :, 1] = -sin, cos
    if window is not None:
        w *= window.astype(np.float64).reshape(samples, 1, 1, 1)
    return w.reshape(samples * parts, bins * 2).astype(np.float32)


def _scalar(e: Emitter, node, i: int, where: str, what: str) -> int | None:
    if len(node.input) <= i or not node.input[i]:
        return None
    value = e.constant(node.input[i])
    if value is None:
        raise ModelError(f"{where}: its {what} is computed when the model runs",
                         f"export the model with a constant {what}")
    return int(value.reshape(-1)[0])


def _check_matrix(rows: int, cols: int, where: str) -> None:
    if rows * cols * 4 > _MAX_DFT_MATRIX_BYTES:
        raise ModelError(f"{where}: as a product by a {rows}x{cols} matrix it would take "
                         f"{rows * cols * 4 >> 20} MiB of weights",
                         "transform shorter frames (an STFT), or keep this step outside the "
                         "model")


def _dft(e: Emitter, node, shapes, where: str) -> None:
    dims = shapes.get(node.input[0])
    if not dims or not all(isinstance(d, int) for d in dims[1:]) or dims[-1] not in (1, 2):
        raise ModelError(f"{where}: its input's shape is not known, or its last axis is not "
                         "1 (real) or 2 (complex)", "fix the input shapes with --input-shape")
    rank = len(dims)
    axis = int(attr(node, "axis", 1)) if e.opset < 20 else \
        (_scalar(e, node, 2, where, "axis") if len(node.input) > 2 and node.input[2] else -2)
    axis = axis + rank if axis < 0 else axis
    if not 1 <= axis <= rank - 2:
        raise ModelError(f"{where} transforms axis {axis}, not a signal axis",
                         "transform an axis after the batch and before the last")
    inverse, onesided = bool(attr(node, "inverse", 0)), bool(attr(node, "onesided", 0))
    if onesided and (inverse or dims[-1] == 2):
        raise ModelError(f"{where} is onesided but inverse or complex",
                         "ONNX defines onesided for real forward transforms")
    samples, parts = dims[axis], dims[-1]
    length = _scalar(e, node, 1, where, "dft_length") or samples
    matrix = dft_matrix(samples, parts, length, inverse, onesided)
    _check_matrix(*matrix.shape, where)
    x = node.input[0]
    last = axis == rank - 2
    perm = [i for i in range(rank - 1) if i != axis] + [axis, rank - 1]
    if not last:
        x = e.op("Transpose", [x], perm=perm)
    keep = [0] * (rank - 2)  # Reshape's 0: the input's size there (the batch's too)
    flat = e.op("Reshape", [x, e.const(np.array(keep + [-1], np.int64), "shape")])
    product = e.op("MatMul", [flat, e.const(matrix, "dft")])
    bins = matrix.shape[1] // 2
    out = [node.output[0]] if last else None
    y = e.op("Reshape", [product, e.const(np.array(keep + [bins, 2], np.int64), "shape")],
             outputs=out)
    if not last:
        e.op("Transpose", [y], outputs=[node.output[0]], perm=list(np.argsort(perm)))


def _stft(e: Emitter, node, shapes, where: str) -> None:
    dims = shapes.get(node.input[0])
    if not dims or len(dims) != 3 or not all(isinstance(d, int) for d in dims[1:]) or \
            dims[2] not in (1, 2):
        raise ModelError(f"{where}: its signal's shape is not [batch, length, 1 or 2] with a "
                         "known length", "fix the input shapes with --input-shape")
    step = _scalar(e, node, 1, where, "frame_step")
    window = e.constant(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    window_input = node.input[2] if len(node.input) > 2 and node.input[2] else None
    length = _scalar(e, node, 3, where, "frame_length")
    if length is None:
        window_dims = shapes.get(window_input) if window_input else None
        if not window_dims or not isinstance(window_dims[0], int):
            raise ModelError(f"{where} has neither a frame_length nor a window of known length",
                             "export it with a constant frame_length")
        length = window_dims[0]
    onesided = bool(attr(node, "onesided", 1))
    samples, parts = dims[1], dims[2]
    if onesided and parts == 2:
        raise ModelError(f"{where} is onesided but its signal is complex",
                         "ONNX defines onesided for real signals")
    if step is None or step < 1 or length > samples:
        raise ModelError(f"{where}: frame_step {step} and frame_length {length} do not frame "
                         f"a signal of {samples} samples", "check the exported STFT")
    frames = 1 + (samples - length) // step
    starts = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    framed = e.op("Gather", [node.input[0], e.const(starts.astype(np.int64), "frames")], axis=1)
    if window_input and window is None:  # a window computed when the model runs
        framed = e.op("Mul", [framed, e.op("Reshape", [window_input, e.const(
            np.array([length, 1], np.int64), "shape")])])
    matrix = dft_matrix(length, parts, length, False, onesided, window)
    _check_matrix(*matrix.shape, where)
    flat = e.op("Reshape", [framed, e.const(np.array([0, 0, -1], np.int64), "shape")])
    product = e.op("MatMul", [flat, e.const(matrix, "dft")])
    e.op("Reshape", [product, e.const(np.array([0, 0, matrix.shape[1] // 2, 2], np.int64),
                                      "shape")], outputs=[node.output[0]])
