"""3-D convolutions (video and volumetric models) as 2-D ones, so that they get the blocked CPU
schedule: TVM's conv3d has plain loops and no CPU schedule (a three-layer C3D-style network
ran ×76-81 of onnxruntime's time, stop 82).

The depth taps become input channels: for output slice d, the kd-th tap reads input slice
d * stride + kd * dilation of the depth-padded input, so stacking those KD slices along the
channels gives one 2-D convolution over KD * C channels, with the depth as part of the batch
([N * D_out, KD * C, H, W]). The filter [O, C/g, KD, KH, KW] is laid out to match
([O, KD * C/g, KH, KW], each group's channels in (tap, channel) order): weight-only math,
lifted with the rest, so the bundle stores it so. The same multiply-adds; the stacking is one
copy of the input KD times over, which the layout conversion into blocks fuses with.
"""

from __future__ import annotations

from cw.compile.relax_rewrite import rewrite_calls
from cw.tvm_env import load_tvm

PAD_TO = 8          # the narrowest channel block (cpu_conv.BLOCK)
MIN_PADDED = 32     # fewer stacked channels (a stem's 3 x 3) are blocked all at once, unpadded


def _ints(values) -> list[int] | None:
    try:
        return [int(v) for v in values]
    except (TypeError, ValueError):
        return None


def convs_3d_as_2d(mod):
    """`mod` with every NCDHW conv3d of static shape as a 2-D convolution over its depth taps
    stacked as channels; (module, convs rewritten)."""
    load_tvm()
    from tvm import relax

    def replacement(call, bb):
        if getattr(call.op, "name", "") != "relax.nn.conv3d":
            return None
        attrs = call.attrs
        if (attrs.data_layout != "NCDHW" or attrs.kernel_layout != "OIDHW"
                or (attrs.out_layout or "NCDHW") != "NCDHW"):
            return None
        data_shape = getattr(call.args[0].ty, "shape", None)
        filter_shape = _ints(getattr(call.args[1].ty, "shape", None) or [None])
        # the batch may be symbolic (one import for every batch size): it only rides along
        sizes = _ints(list(data_shape)[1:]) if data_shape is not None else None
        if sizes is None or filter_shape is None or len(sizes) != 4:
            return None
        n = data_shape[0]
        c, depth, h, w = sizes
        o, _, kd, kh, kw = filter_shape
        groups = int(attrs.groups)
        sd, sh, sw = _ints(attrs.strides)
        dd, dh, dw = _ints(attrs.dilation)
        front, top, left, back, bottom, right = _ints(attrs.padding)
        out_depth = (depth + front + back - dd * (kd - 1) - 1) // sd + 1
        out_h = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
        out_w = (w + left + right - dw * (kw - 1) - 1) // sw + 1
        if min(out_depth, out_h, out_w) < 1:
            return None
        # a tap's channels in no block of 8 (R(2+1)D's 45 and 230) put a tap's end inside a
        # vector: the gather that stacks them then worked out each lane's tap and channel
        # (R(2+1)D's first: 2.5-3 ns an element, 0.16-0.2 for aligned ones). Each tap's
        # channels padded with zeros up to a block of 8 (a stem's few channels excepted)
        per_tap = c // groups
        if groups == 1 and c % PAD_TO and kd > 1 and kd * c >= MIN_PADDED:
            per_tap += PAD_TO - c % PAD_TO
        stacked = bb.call_te(_depth_taps, call.args[0], out_depth, kd, sd, dd, front,
                             groups, per_tap, primfunc_name_hint="depth_taps")
        # TVM binds a symbolic batch only where a shape is the variable itself, not n * D
        channels = groups * kd * per_tap
        stacked = relax.op.reshape(stacked, [n * out_depth, channels, h, w])
        filters = relax.op.permute_dims(call.args[1], [0, 2, 1, 3, 4])  # [O, KD, C/g, KH, KW]
        if per_tap != c // groups:
            filters = relax.op.nn.pad(filters, [0, 0, 0, 0, 0, per_tap - c, 0, 0, 0, 0])
        filters = relax.op.reshape(filters, [o, kd * per_tap, kh, kw])
        conv = relax.op.nn.conv2d(stacked, filters, strides=[sh, sw],
                                  padding=[top, left, bottom, right], dilation=[dh, dw],
                                  groups=groups, data_layout="NCHW", kernel_layout="OIHW",
                                  out_layout="NCHW", out_dtype=attrs.out_dtype)
        conv = relax.op.reshape(conv, [n, out_depth, o, out_h, out_w])
        return relax.op.permute_dims(conv, [0, 2, 1, 3, 4])

    return rewrite_calls(mod, replacement, with_builder=True)


def _depth_taps(x, out_depth: int, taps: int, stride: int, dilation: int,
                front: int, groups: int, per_tap: int):
    """[N, D_out, groups * taps * per_tap, H, W] from x (NCDHW): each output slice's depth
    taps as channels, group by group, a tap's channels (C / groups) padded to `per_tap`; zero
    where a tap falls in the depth padding and in the padded channels."""
    from tvm import te, tirx

    n, c, depth, h, w = x.shape
    per_group = c // groups

    def element(sample, d, k, y, z):
        group, within = k // (taps * per_tap), k % (taps * per_tap)
        tap, index = within // per_tap, within % per_tap
        source = d * stride + tap * dilation - front
        inside = tirx.all(source >= 0, source < depth, index < per_group)
        source = tirx.max(tirx.min(source, depth - 1), 0)
        channel = group * per_group + tirx.min(index, per_group - 1)
        return tirx.if_then_else(inside, x[sample, channel, source, y, z],
                                 tirx.const(0, x.dtype))

    return te.compute((n, out_depth, groups * taps * per_tap, h, w), element,
                      name="depth_taps")


def transposed_convs_3d_as_convs(mod):
    """3-D transposed convolutions (groups 1, no dilation) as one conv3d and a depth-to-space,
    as cpu_conv.transposed_convs_as_convs does in 2-D (its docstring has the derivation):
    TVM's conv3d_transpose is plain loops (a 3-D U-Net's three 2x upsamplings took 1.33 of its
    1.45 s, stop 82). Run before convs_3d_as_2d, which then takes the conv3d. Returns (module,
    convs rewritten)."""
    load_tvm()
    from tvm import relax

    def replacement(call):
        if getattr(call.op, "name", "") != "relax.nn.conv3d_transpose":
            return None
        attrs = call.attrs
        data_shape = getattr(call.args[0].ty, "shape", None)
        shape = _ints(getattr(call.args[1].ty, "shape", None) or [None])
        sizes = _ints(list(data_shape)[2:]) if data_shape is not None else None
        if (attrs.data_layout != "NCDHW" or attrs.kernel_layout != "IODHW"
                or (attrs.out_layout or "NCDHW") != "NCDHW" or attrs.groups != 1
                or shape is None or len(shape) != 5 or sizes is None or len(sizes) != 3
                or any(int(v) != 1 for v in attrs.dilation)):
            return None
        in_c, out_c, *kernel = shape
        strides, pads = _ints(attrs.strides), _ints(attrs.padding)
        before, after = pads[:3], pads[3:]
        taps_per_phase = [-(-k // s) for k, s in zip(kernel, strides)]
        outs = [(x - 1) * s + k - b - a + p for x, s, k, b, a, p in zip(
            sizes, strides, kernel, before, after, _ints(attrs.output_padding))]
        rows = [x + r - 1 for x, r in zip(sizes, taps_per_phase)]  # per phase, each axis
        if any(b + o > q * s for b, o, q, s in zip(before, outs, rows, strides)):
            return None  # output padding past what the filter reaches (zeros plus bias)
        (rd, rh, rw), (sd, sh, sw) = taps_per_phase, strides
        taps = relax.op.nn.pad(call.args[1], [0, 0, 0, 0] + [
            v for r, s, k in zip(taps_per_phase, strides, kernel) for v in (0, r * s - k)])
        taps = relax.op.reshape(taps, [in_c, out_c, rd, sd, rh, sh, rw, sw])
        for axis in (2, 4, 6):
            taps = relax.op.flip(taps, axis)
        filters = relax.op.reshape(relax.op.permute_dims(taps, [3, 5, 7, 1, 0, 2, 4, 6]),
                                   [sd * sh * sw * out_c, in_c, rd, rh, rw])
        conv = relax.op.nn.conv3d(call.args[0], filters, strides=1,
                                  padding=[r - 1 for r in taps_per_phase] * 2, dilation=1,
                                  groups=1, data_layout="NCDHW", kernel_layout="OIDHW",
                                  out_layout="NCDHW", out_dtype=attrs.out_dtype)
        phases = relax.op.reshape(conv, [data_shape[0], sd, sh, sw, out_c, *rows])
        y = relax.op.reshape(relax.op.permute_dims(phases, [0, 4, 5, 1, 6, 2, 7, 3]),
                             [data_shape[0], out_c, *[q * s for q, s in zip(rows, strides)]])
        if any(b or o != q * s for b, o, q, s in zip(before, outs, rows, strides)):
            y = relax.op.strided_slice(y, axes=[2, 3, 4], begin=before,
                                       end=[b + o for b, o in zip(before, outs)])
        return y

    return rewrite_calls(mod, replacement)
