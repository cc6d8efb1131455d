"""Split-K convolutions for CUDA targets: enough thread blocks to fill the GPU at small batches.

TVM's default CUDA schedule for a convolution (dlight's `Matmul` rule, an implicit GEMM) gives
each thread block one tile of 32 output pixels x 64 output channels and walks the whole
reduction (input channels x filter window) in it. Late in a CNN at batch 1 that is a handful
of blocks on a GPU with 132 multiprocessors: resnet18's 512-channel 3x3 convs at 7x7 run as 16
blocks each looping over 4,608 products, about 12 % of an H100 (docs/tuning.md). cuDNN splits
such reductions across blocks; so does cw.

A plain NCHW convolution whose tiles would leave most of the GPU idle is legalized as two
kernels instead of one:

- `conv2d_nchw_split`: S partial convolutions, each over 1/S of the input channels, written to
  an (S, N, C, H, W) buffer. The split index is a batch axis to dlight's `Matmul` rule, so each
  part gets the same tiled schedule and S times as many blocks run at once.
- `conv2d_split_add`: the S parts summed, elementwise (no reduction axis), so that operator
  fusion puts the convolution's epilogue (bias, BatchNorm's scale and shift, residual add,
  ReLU) into the same kernel, as it would have been fused into the convolution.

The partial buffer is an ordinary Relax tensor: the static memory plan holds it, so no device
memory is allocated on the inference path. S doubles while the blocks still fit in one wave on
the target's multiprocessors and each part keeps at least `MIN_PART_PRODUCTS` products per
output, so convolutions that already fill the GPU (most of them at batch 16) are left alone.
The sums are the same fp32 products added in another order.
"""

from __future__ import annotations

from cw.compile.shapes import static_shape

MAX_SPLIT = 16
MIN_PART_PRODUCTS = 128   # per output of one part: 8 of the schedule's 16-wide reduction steps
# Multiprocessors per arch (the largest part of each: H100 SXM and H200 132, A100 108, L40S
# 142, B200 148); an order of magnitude is all the choice needs. Unknown archs: A100's.
SM_COUNT = {"sm_80": 108, "sm_86": 84, "sm_87": 16, "sm_89": 142, "sm_90": 132, "sm_100": 148}
DEFAULT_SM_COUNT = 108


def sm_count(arch: str | None) -> int:
    return SM_COUNT.get(arch or "", DEFAULT_SM_COUNT)


def matmul_tile(target) -> tuple[int, int]:
    """(output pixels, output channels) per thread block of dlight's Matmul schedule on this
    target, read from the rule itself so that the choice follows TVM's defaults."""
    from tvm.s_tir import dlight as dl

    c = dl.gpu.Matmul().get_configs(target)
    pixels = c.vthread_x * c.block_size_x * c.micro_size_x
    channels = c.vthread_y * c.block_size_y * c.micro_size_y
    return (channels, pixels) if c.inner_x else (pixels, channels)


def split_count(pixels: int, out_channels: int, in_channels: int, window: int,
                tile: tuple[int, int], sms: int) -> int:
    """Parts to split a convolution's reduction into (1: none). `pixels` counts outputs over the
    whole batch, `window` the filter's positions."""
    blocks = -(-pixels // tile[0]) * -(-out_channels // tile[1])
    parts = 1
    while (parts < MAX_SPLIT and blocks * parts * 2 <= sms and in_channels % (parts * 2) == 0
           and in_channels // (parts * 2) * window >= MIN_PART_PRODUCTS):
        parts *= 2
    return parts



def plan(call, tile: tuple[int, int], sms: int) -> int:
    """The parts for one relax.nn.conv2d call (1 where it is not a plain static NCHW conv)."""
    attrs = call.attrs
    if (attrs.groups != 1 or attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW"
            or attrs.out_layout not in ("", "NCHW")):
        return 1
    data, weight = static_shape(call.args[0].ty.shape), static_shape(call.args[1].ty.shape)
    out = static_shape(call.ty.shape)
    if data is None or weight is None or out is None:
        return 1
    batch, out_c, out_h, out_w = out
    return split_count(batch * out_h * out_w, out_c, weight[1], weight[2] * weight[3], tile, sms)


def legalizer(target, sms: int):
    """A LegalizeOps function for relax.nn.conv2d: split where `plan` says so, else TVM's."""
    from tvm.relax.transform.legalize_ops.nn import _nn_conv2d

    tile = matmul_tile(target)

    def legalize_conv2d(bb, call):
        parts = plan(call, tile, sms)
        if parts == 1:
            return _nn_conv2d(bb, call)
        attrs = call.attrs
        out_dtype = attrs.out_dtype or call.args[0].ty.dtype
        partial = bb.emit_te(conv2d_nchw_split, call.args[0], call.args[1], parts, attrs.strides,
                             attrs.padding, attrs.dilation, out_dtype,
                             primfunc_name_hint="conv2d_nchw_split")
        return bb.call_te(add_parts, partial, primfunc_name_hint="conv2d_split_add")

    return legalize_conv2d


def conv2d_nchw_split(data, kernel, parts: int, strides, padding, dilation, out_dtype):
    """(parts, N, O, OH, OW): part s convolves input channels [s*C/parts, (s+1)*C/parts)."""
    from tvm import te, topi

    _, in_c, height, width = data.shape
    out_c, _, kh_n, kw_n = kernel.shape
    sh, sw = (int(v) for v in strides)
    dh, dw = (int(v) for v in dilation)
    top, left, bottom, right = (int(v) for v in padding)
    out_h = (height + top + bottom - (kh_n - 1) * dh - 1) // sh + 1
    out_w = (width + left + right - (kw_n - 1) * dw - 1) // sw + 1
    padded = topi.nn.pad(data, [0, 0, top, left], [0, 0, bottom, right], name="pad_temp")
    per_part = in_c // parts
    rc = te.reduce_axis((0, per_part), name="rc")
    ry = te.reduce_axis((0, kh_n), name="ry")
    rx = te.reduce_axis((0, kw_n), name="rx")
    return te.compute(
        (parts, data.shape[0], out_c, out_h, out_w),
        lambda s, n, o, y, x: te.sum(
            padded[n, s * per_part + rc, y * sh + ry * dh, x * sw + rx * dw].astype(out_dtype)
            * kernel[o, s * per_part + rc, ry, rx].astype(out_dtype), axis=[rc, ry, rx]),
        name="conv2d_nchw_split")


def add_parts(partial):
    """The parts summed as one elementwise expression: an injective kernel, into which operator
    fusion folds the convolution's epilogue (a reduction would stay a kernel of its own)."""
    from tvm import te

    parts = int(partial.shape[0])

    def total(*index):
        acc = partial[(0, *index)]
        for s in range(1, parts):
            acc = acc + partial[(s, *index)]
        return acc

    return te.compute(partial.shape[1:], total, name="conv2d_split_add")


def count_split(mod) -> int:
    """Split convolutions in a legalized module (their partial kernels)."""
    return sum(1 for gv in mod.functions if "conv2d_nchw_split" in gv.name_hint)
