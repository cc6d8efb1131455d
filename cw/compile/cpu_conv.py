"""Blocked-channel (NCHWc) convolutions for CPU targets: layout choice, legalization and a
default schedule.

TVM's Relax pipeline leaves CPU convolutions as plain NCHW loops, about 40x slower than
onnxruntime, and MetaSchedule needs hundreds of trials per kernel to get close. Packing channels
in blocks of one SIMD vector (NCHW8c activations, OIHW8i8o weights, as oneDNN and onnxruntime's
MLAS do) makes the fast loop nest a fixed shape: per output row, a register tile of `reg_n`
output pixels x 8 output channels accumulated over input channels and the filter window, each
step one weight vector times a broadcast input value. `schedule_conv` writes that nest for any
fused conv2d_NCHWc kernel, so every CNN gets it without tuning; tuning records still win where
they exist (`cw tune` tunes the NCHWc kernels themselves).

The weight relayout is ordinary weight-only math, lifted out of the graph with the rest
(frontend.import_model), so bundles store OIHW8i8o weights and pay nothing per inference.
"""

from __future__ import annotations

BLOCK = 8          # fp32 lanes of an AVX2 register: output-channel block and input block
MAX_REG_N = 14     # accumulators per tile: 14 + one weight vector + one broadcast = 16 ymm


def _int(x) -> int | None:
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def conv_layout(call) -> dict[str, list[str]]:
    """ConvertLayout callback: the NCHWc layout for one conv2d, or none to leave it as is.
    Only plain (groups=1) 2-D convolutions in NCHW with static channel counts are blocked:
    output channels by 8; input channels by 8, or all at once when fewer than 8 (a network's
    first conv on RGB input)."""
    attrs = call.attrs
    if attrs.groups != 1 or attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW":
        return {}
    shape = getattr(call.args[1].ty, "shape", None)
    if shape is None or len(shape) != 4:
        return {}
    out_c, in_c = _int(shape[0]), _int(shape[1])
    if out_c is None or in_c is None or out_c % BLOCK:
        return {}
    ic_bn = BLOCK if in_c % BLOCK == 0 else in_c if in_c < BLOCK else None
    if ic_bn is None:
        return {}
    return {"relax.nn.conv2d": [f"NCHW{ic_bn}c", f"OIHW{ic_bn}i{BLOCK}o", f"NCHW{BLOCK}c"]}
