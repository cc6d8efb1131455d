"""Blocked-channel (NCHWc) convolutions for CPU targets: layout choice, legalization and a
default schedule.

TVM's Relax pipeline leaves CPU convolutions as plain NCHW loops, about 40x slower than
onnxruntime, and MetaSchedule needs hundreds of trials per kernel to get close. Packing channels
in blocks of one SIMD vector (NCHW8c activations and OIHW8i8o weights for AVX2's 8 fp32 lanes,
NCHW16c and OIHW16i16o for AVX-512's 16, as oneDNN and onnxruntime's MLAS do) makes the fast
loop nest a fixed shape: per output row, a register tile of output pixels x one vector of
output channels or several (AVX-512: up to 12 pixels x 2 blocks; AVX2: 3 pixels x 4 blocks, as
MLAS's FMA3 kernel) accumulated over input channels and the filter window, each step a broadcast
input value times the tile's weight vectors. `schedule_conv` writes that nest for any fused
conv2d_NCHWc kernel, so every CNN gets it without tuning; tuning records still win where they
exist (`cw tune` tunes the NCHWc kernels themselves).

The weight relayout is ordinary weight-only math, lifted out of the graph with the rest
(frontend.import_model), so bundles store blocked weights and pay nothing per inference. The
block is chosen when the graph is imported, from the target's vector width (`widest_block`).
"""

from __future__ import annotations

from cw.compile.cpu_kernels import fuse_epilogue
from cw.compile.relax_rewrite import rewrite_calls
from cw.tvm_env import load_tvm

BLOCK = 8          # fp32 lanes of an AVX2 register: the narrowest channel block
WIDE_BLOCK = 16    # fp32 lanes of an AVX-512 register
# Output pixels per register tile, one accumulator vector each: 14 + one weight vector + one
# broadcast = AVX2's 16 registers.
MAX_REG_N = 14
# AVX-512's 32 registers hold a tile two output blocks (32 channels) tall: each broadcast input
# value then feeds two FMAs. Up to 12 pixels: 24 accumulators + 2 weight vectors + 1 broadcast.
# On a 2-core Xeon (2026-11-26, batch 1, vs one block x 14 pixels): resnet18 ×0.88 of the time,
# resnet50 ×0.91, inception_v3 ×0.97; 2 x 14 pixels spilled and ran ×1.3 slower.
PAIR_MAX_REG_N = 12
# AVX2's 16 registers: 4 output blocks (32 channels) x 3 pixels, as onnxruntime's MLAS FMA3
# kernel, or 2 x 4 where the channels hold no 4 blocks: each broadcast input value feeds 4 (2)
# FMAs, where one block x 14 pixels loaded one per FMA, and 3x3 convs' rows CSE'd across the
# window until they spilled (2 x 14 pixels had spilled too). On 2 Zen 3 cores (2026-12-02,
# kernels side by side): 3x3 convs of ResNet's stages x0.74-0.86 of their time, a 1x1 x0.6-0.7,
# SqueezeNet's 16-channel 3x3 x0.5; 2 x 6 pixels spilled (x1.1-2.3). 3 x 3 where the channels
# come in 3 blocks (24, 48: PP-OCR's 96 -> 24 at 160 x 160 x0.86). Rows of at most
# ONE_TILE_ROW pixels stay one block x the whole row: a tile of 3 pixels read a group's weights
# (4 x 147 KB in ResNet's last stage) once per tile, where the row read one block's once
# (ResNet-50's 512-channel 3x3 at 7 x 7 x1.09-1.16 slower in the model).
AVX2_TILES = ((4, 3), (3, 3), (2, 4))
ONE_TILE_ROW = 8


def _int(x) -> int | None:
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def widest_block(target) -> int:
    """The channel block for `target`'s vectors: 16 where it has AVX-512, else 8 (AVX2; also
    what plain x86-64 code and other CPUs get: LLVM splits a vector wider than the machine's)."""
    from tvm.target import codegen

    try:
        return WIDE_BLOCK if codegen.target_has_features("avx512f", target) else BLOCK
    except Exception:  # noqa: BLE001  (not an LLVM x86 target: no such feature to ask about)
        return BLOCK


def channel_block(channels: int, widest: int = BLOCK) -> int | None:
    """The block `channels` are packed in: the widest vector that divides them. A tensor's
    block depends only on its channel count, so a conv's output and the next conv's input
    (residual adds, concatenations of equal blocks) meet in the same layout."""
    for block in (WIDE_BLOCK, BLOCK):
        if block <= widest and channels % block == 0:
            return block
    return None


def conv_layout(call, widest: int = BLOCK) -> dict[str, list[str]]:
    """ConvertLayout callback (with `widest` bound: functools.partial): the NCHWc layout for
    one conv2d, or NCHW to leave it as is. 2-D convolutions in NCHW with static channel counts
    are blocked: plain ones (groups=1) with output channels in a `channel_block` (see
    `pad_conv_channels` for the rest) and input channels in one too, or all at once where none
    divides them; depthwise ones (one filter per channel) in their channels' block; grouped
    ones where one block divides every group (`grouped_block`)."""
    op = getattr(call.op, "name", "")
    if op == "relax.nn.conv2d_transpose":  # not blocked, so pinned (see `plain` below)
        attrs = call.attrs
        return {op: [attrs.data_layout, attrs.kernel_layout,
                     attrs.out_layout or attrs.data_layout]}
    if op != "relax.nn.conv2d":
        return {}
    attrs = call.attrs
    if attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW":
        return {}
    shape = getattr(call.args[1].ty, "shape", None)
    if shape is None or len(shape) != 4:
        return {}
    # A conv left out still names its layout: with none, TVM infers one from its input's,
    # which after a blocked conv is NCHWc, and fails on the 4-D kernel ("Layouts must have the
    # same size"), taking every conv of the model back to NCHW (a 9-channel conv before
    # DepthToSpace, a detector's 1-channel head)
    plain = {"relax.nn.conv2d": ["NCHW", "OIHW", "NCHW"]}
    out_c, in_c = _int(shape[0]), _int(shape[1])
    oc_bn = None if out_c is None else channel_block(out_c, widest)
    if in_c is None or oc_bn is None:
        return plain
    if attrs.groups != 1:
        if attrs.groups == out_c and in_c == 1:  # depthwise
            return {"relax.nn.conv2d": [f"NCHW{oc_bn}c", f"OIHW1i{oc_bn}o", f"NCHW{oc_bn}c"]}
        if grouped_block(in_c, out_c, attrs.groups, widest) == oc_bn:
            return {"relax.nn.conv2d": [f"NCHW{oc_bn}c", f"OIHW{oc_bn}i{oc_bn}o",
                                        f"NCHW{oc_bn}c"]}
        return plain
    # input channels in no block (an RGB image's 3, YOLOX's 12 after its Focus slicing) are
    # taken all at once: they only set the reduction's split, and plain NCHW ran ~40x slower
    ic_bn = channel_block(in_c, widest) or in_c
    return {"relax.nn.conv2d": [f"NCHW{ic_bn}c", f"OIHW{ic_bn}i{oc_bn}o", f"NCHW{oc_bn}c"]}


def legalize_conv2d(bb, call):
    """relax.nn.conv2d -> TIR: blocked layouts through topi's conv2d_NCHWc, the rest as TVM
    does it."""
    from tvm import topi
    from tvm.relax.transform.legalize_ops.nn import _nn_conv2d

    attrs = call.attrs
    if len(attrs.data_layout) == 4:
        return _nn_conv2d(bb, call)
    if attrs.groups != 1 and str(attrs.kernel_layout).startswith("OIHW1i"):  # depthwise
        return bb.call_te(_depthwise_nchwc, call.args[0], call.args[1], attrs.strides,
                          attrs.padding, attrs.dilation, attrs.out_dtype or call.args[0].ty.dtype,
                          primfunc_name_hint="depthwise_conv2d_NCHWc")
    if attrs.groups != 1:
        return bb.call_te(_grouped_nchwc, call.args[0], call.args[1], attrs.strides,
                          attrs.padding, attrs.dilation, int(attrs.groups),
                          attrs.out_dtype or call.args[0].ty.dtype,
                          primfunc_name_hint="conv2d_NCHWc")
    return bb.call_te(topi.nn.conv2d_NCHWc, call.args[0], call.args[1], attrs.strides,
                      attrs.padding, attrs.dilation, attrs.data_layout, attrs.out_layout,
                      attrs.out_dtype or call.args[0].ty.dtype,
                      primfunc_name_hint="conv2d_NCHWc")


class _Window:
    """A blocked conv's padded input (TE, "data_pad") and its window: output size, strides,
    dilations and the filter's reduction axes."""

    def __init__(self, data, kernel, strides, padding, dilation):
        from tvm import te, topi

        _, _, height, width, _ = data.shape
        kh_n, kw_n = kernel.shape[2], kernel.shape[3]
        self.sh, self.sw = (int(v) for v in strides)
        self.dh, self.dw = (int(v) for v in dilation)
        top, left, bottom, right = (int(v) for v in padding)
        self.out_h = (height + top + bottom - (kh_n - 1) * self.dh - 1) // self.sh + 1
        self.out_w = (width + left + right - (kw_n - 1) * self.dw - 1) // self.sw + 1
        self.padded = topi.nn.pad(data, [0, 0, top, left, 0], [0, 0, bottom, right, 0],
                                  name="data_pad")
        self.kh = te.reduce_axis((0, kh_n), name="kh")
        self.kw = te.reduce_axis((0, kw_n), name="kw")

    def at(self, n, chunk, h, w, lane):
        """The padded input the filter tap (kh, kw) reads for output (h, w)."""
        return self.padded[n, chunk, h * self.sh + self.kh * self.dh,
                           w * self.sw + self.kw * self.dw, lane]


def _depthwise_nchwc(data, kernel, strides, padding, dilation, out_dtype):
    """Depthwise conv, data N C/b H W b, kernel C/b 1 KH KW 1 b (topi declares this operator
    but has no x86 implementation since TVM dropped its TE schedules)."""
    from tvm import te

    win = _Window(data, kernel, strides, padding, dilation)
    return te.compute(
        (data.shape[0], data.shape[1], win.out_h, win.out_w, data.shape[4]),
        lambda n, c, h, w, b: te.sum(
            win.at(n, c, h, w, b).astype(out_dtype)
            * kernel[c, 0, win.kh, win.kw, 0, b].astype(out_dtype), axis=[win.kh, win.kw]),
        name="depthwise_conv2d_NCHWc")


def _grouped_nchwc(data, kernel, strides, padding, dilation, groups, out_dtype):
    """A grouped conv in blocks (`grouped_block`): data N C/b H W b, kernel OC/b IC_g/b KH KW
    b b; output block o reads the input blocks of its group only. Its block is named as
    topi's conv2d_NCHWc, whose loops it has, so conv_schedule takes it."""
    from tvm import te

    block = data.shape[4]
    out_chunks, group_chunks = kernel.shape[0], kernel.shape[1]
    out_per_group = int(out_chunks) // groups
    win = _Window(data, kernel, strides, padding, dilation)
    ic = te.reduce_axis((0, group_chunks * block), name="ic")
    return te.compute(
        (data.shape[0], out_chunks, win.out_h, win.out_w, kernel.shape[5]),
        lambda n, oc, h, w, ob: te.sum(
            win.at(n, oc // out_per_group * group_chunks + ic // block, h, w,
                   ic % block).astype(out_dtype)
            * kernel[oc, ic // block, win.kh, win.kw, ic % block, ob].astype(out_dtype),
            axis=[ic, win.kh, win.kw]),
        name="conv2d_NCHWc")


def _reg_n(width: int, most: int = MAX_REG_N) -> int:
    """The register tile (output pixels of one row, at most `most`): the widest that divides
    the row, if one of at least 7 does; else the one wasting the fewest pixels in the last,
    partial tile (rows of prime width such as inception's 17, 73 or 149 would otherwise get
    tiles of 1)."""
    if width <= most:
        return width
    exact = [d for d in range(7, most + 1) if width % d == 0]
    if exact:
        return max(exact)
    return min(range(most, 4, -1), key=lambda d: -(-width // d) * d - width)


def conv_schedule(func):
    """The NCHWc direct-convolution schedule (an s_tir.Schedule, whose trace `cw tune` stores
    as a tuning record) for one fused kernel: conv2d_NCHWc with its padding and elementwise
    epilogue. None when `func` is not one."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    try:
        conv = sch.get_sblock("conv2d_NCHWc")
    except Exception:  # noqa: BLE001  (no such block: maybe a depthwise or plain NCHW conv)
        return _depthwise_schedule(sch) or _plain_schedule(sch)
    loops = sch.get_loops(conv)
    if len(loops) != 8:
        return None
    n, occ, oh, ow, ocb, ic, kh, kw = loops
    extents = [_int(sch.get(loop).extent) for loop in loops]
    if any(e is None for e in extents):
        return None  # symbolic shapes: leave to the generic lowering
    width, ic_total = extents[3], extents[5]
    # the kernel's buffer is OC//ocb, IC//icb, KH, KW, icb, ocb
    shapes = [r.source.shape for r in sch.get(conv).reads if len(r.source.shape) == 6]
    ic_bn = _int(shapes[0][4]) if len(shapes) == 1 else None
    if ic_bn is None or ic_total % ic_bn:
        return None
    group, pixels = _tile(extents[1], extents[4], width)
    if group > 1 and extents[4] == BLOCK and not sch.get_consumers(conv):
        # summed in a buffer of its own, copied out per tile (as an epilogue is): in the
        # output itself AVX2's tiles kept the sums of a row's last, partial tile in memory
        # (DenseNet's unfused 3x3s x2.2 slower)
        sch.cache_write(conv, 0, "global")
    owo, owi = sch.split(ow, [None, pixels])
    icc, icb = sch.split(ic, [None, ic_bn])
    if group == 1:
        sch.reorder(n, occ, oh, owo, icc, kh, kw, icb, owi, ocb)
        return _finish(sch, conv, n, occ, oh, owo, owi, ocb, icc)
    oco, oci = sch.split(occ, [None, group])
    sch.reorder(n, oco, oh, owo, icc, kh, kw, icb, oci, owi, ocb)
    sch.unroll(oci)
    return _finish(sch, conv, n, oco, oh, owo, owi, ocb, icc)


def _tile(out_blocks: int, block: int, width: int) -> tuple[int, int]:
    """(output channel blocks, pixels) of a conv's register tile: AVX2's several blocks where
    its output channels make whole groups of them and its rows are long enough; two of
    AVX-512's 16-channel blocks where they pair up; else one block x up to 14 pixels."""
    if block == BLOCK and width > ONE_TILE_ROW and target_block() == BLOCK:
        for group, pixels in AVX2_TILES:
            if out_blocks % group == 0:
                return group, pixels
    if block == WIDE_BLOCK and out_blocks % 2 == 0:
        return 2, _reg_n(width, PAIR_MAX_REG_N)
    return 1, _reg_n(width)


def target_block() -> int:
    """The channel block of the target cw compiles for (8 without one)."""
    from tvm.target import Target

    target = Target.current(allow_none=True)
    return widest_block(target) if target is not None else BLOCK


def _depthwise_schedule(sch):
    """Depthwise: the same register tile, accumulated over the filter window only, with one
    input vector (not a broadcast value) per step."""
    try:
        conv = sch.get_sblock("depthwise_conv2d_NCHWc")
    except Exception:  # noqa: BLE001  (not a conv kernel)
        return None
    loops = sch.get_loops(conv)
    if len(loops) != 7:
        return None
    n, c, oh, ow, cb, kh, kw = loops
    width = _int(sch.get(ow).extent)
    if width is None or any(_int(sch.get(loop).extent) is None for loop in loops):
        return None
    owo, owi = sch.split(ow, [None, _reg_n(width)])
    sch.reorder(n, c, oh, owo, kh, kw, owi, cb)
    return _finish(sch, conv, n, c, oh, owo, owi, cb, kh, pad_per_row=True)


def _lane(width: int, block: int) -> int | None:
    """Output pixels per vector of a plain NCHW row: the row where it fits one vector of
    `block` lanes, else the widest divisor that does (LLVM compiled a vector of 28 or 56
    lanes ~8x slower than two or four of 14, and one of 14 on AVX2, two registers of which
    one is partial, ~8x slower than two of 7); None where none of at least 3 divides (a prime
    width: TVM's own loops then). A row of 9 on AVX2 takes vectors of 3 (it had got TVM's
    loops, on one thread: ResNeXt's stride-2 3x3 at 17 x 17)."""
    if width <= block:
        return width
    return next((d for d in range(block, 2, -1) if width % d == 0), None)


def _plain_schedule(sch):
    """A plain NCHW convolution, grouped or not: a grouped one, which cw does not block
    (ShuffleNet v1's 1x1s, 4 groups of 28-136 channels, which no block divides;
    `count_grouped_convs`), or any in a model kept off the blocked layout (`--conv-layout
    nchw`, a layout conversion that failed). TVM's own loops ran them on one thread,
    one product at a time: 2.6-3.3 ms for a 272-channel 1x1 at 14 x 14, 0.06-0.12 ms in this
    nest. Per output row, a tile of up to 8 output channels of one group times the row in
    vectors along W, accumulated over the group's input channels and the filter window: each
    input vector loaded feeds every channel of the tile."""
    for name in ("group_conv2d_nchw", "conv2d_nchw"):
        try:
            conv = sch.get_sblock(name)
            break
        except Exception:  # noqa: BLE001  (not this form)
            continue
    else:
        return None
    loops = sch.get_loops(conv)
    if len(loops) != 7:
        return None
    n, ff, yy, xx, rc, ry, rx = loops
    extents = [_int(sch.get(loop).extent) for loop in loops]
    if any(e is None for e in extents):
        return None
    out_c, width, per_group_in = extents[1], extents[3], extents[4]
    # the input (its channels: groups x the reduction's) is the read that is not the filter
    shapes = [[_int(d) for d in r.source.shape] for r in sch.get(conv).reads]
    inputs = [shape for shape in shapes if len(shape) == 4 and
              shape[:2] != [out_c, per_group_in]]
    block = target_block()
    lane = _lane(width, block)
    if len(inputs) != 1 or inputs[0][1] is None or lane is None:
        return None
    groups = inputs[0][1] // per_group_in
    # output channels of one group per tile: they read the same input rows
    tile = next(t for t in (8, 4, 2, 1) if (out_c // groups) % t == 0)
    ffo, ffi = sch.split(ff, [None, tile])
    xo, xi = sch.split(xx, [None, lane])
    # the whole row per tile where its accumulators take at most 3/4 of the registers (24 of
    # AVX-512's 32, 12 of AVX2's 16)
    if tile * (width // lane) <= (24 if block == WIDE_BLOCK else 12):
        sch.reorder(n, ffo, yy, rc, ry, rx, ffi, xo, xi)
        sch.unroll(xo)
        last = yy
    else:
        sch.reorder(n, ffo, yy, xo, rc, ry, rx, ffi, xi)
        last = xo
    return _finish(sch, conv, n, ffo, yy, last, ffi, xi, rc)


def _finish(sch, conv, n, occ, oh, owo, owi, ocb, first_reduction, pad_per_row: bool = False):
    """Epilogue, threads, unrolling and vectors for a conv nest ordered
    n, occ, oh, owo, [reduction loops], owi, ocb (for plain NCHW: n, channel tiles, oh, the
    tile's loop, [reduction loops], the tile's channels, the vector along W). `pad_per_row`:
    the padded input rows an output row reads are made for it (a depthwise conv's: its
    channel block's only), not the whole padded input in a pass before. (A dense conv's rows
    would be made once per output-channel tile: ResNet-18 x0.99-1.04 of its time, in no
    stage better than noise.)"""
    # the epilogue runs per register tile: the accumulators go to memory once, as the output
    if not fuse_epilogue(sch, conv, owo):
        return None
    rows = sch.fuse(n, occ, oh)
    sch.parallel(rows)
    sch.unroll(owi)
    sch.vectorize(ocb)
    sch.decompose_reduction(conv, first_reduction)
    for producer in sch.get_producers(conv):
        if sch.get(producer).name_hint in ("data_pad", "pad_temp"):
            if pad_per_row:
                # the pass wrote and read the whole padded input once more: a depthwise conv
                # does 9 multiply-adds per value it loads, so that traffic was most of its
                # time (EfficientNet's stride-2 one at 112 x 112 x 96 x0.6 of it this way)
                sch.compute_at(producer, rows)
                sch.vectorize(sch.get_loops(producer)[-1])
                continue
            pad_loops = sch.get_loops(producer)
            sch.parallel(sch.fuse(*pad_loops[:3]))
            sch.vectorize(pad_loops[-1])
    return sch


def schedule_conv(func):
    """`func` with cw's convolution schedule applied, or None when it is not such a
    kernel (or one whose epilogue the schedule cannot place: TVM's generic lowering then)."""
    from tvm import s_tir

    try:
        sch = conv_schedule(func)
    except s_tir.ScheduleError:
        return None
    return None if sch is None else sch.mod["main"].with_attr("tirx.is_scheduled", True)


def schedule_convs(mod):
    """Give every unscheduled convolution kernel of `mod` (NCHWc, depthwise NCHWc, plain
    NCHW) cw's schedule for it. Returns (module, number of kernels scheduled)."""
    from tvm import tirx

    updates = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        if func.attrs and ("tirx.is_scheduled" in func.attrs or "tir.is_scheduled" in func.attrs):
            continue  # a tuning record's schedule
        scheduled = schedule_conv(func)
        if scheduled is not None:
            updates[gv] = scheduled
    for gv, func in updates.items():
        mod[gv] = func
    return mod, len(updates)


def count_convs_2d(mod) -> int:
    """2-D convolutions (plain or transposed) in `mod`'s main function: a model with none
    (an audio model's 1-D ones) has nothing to block."""
    from tvm import relax

    found = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(e) if (
        isinstance(e, relax.Call) and getattr(e.op, "name", "") in
        ("relax.nn.conv2d", "relax.nn.conv2d_transpose")) else None)
    return len(found)


def count_blocked_convs(mod) -> int:
    """Convolutions in `mod`'s main function in a blocked (NCHWc) layout: the ones
    `schedule_convs` schedules once legalized."""
    from tvm import relax

    found = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(e) if (
        isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.nn.conv2d" and
        len(str(e.attrs.data_layout)) > 4) else None)
    return len(found)


def grouped_block(group_in: int, out_c: int, groups: int, widest: int = BLOCK) -> int | None:
    """The channel block of a grouped conv (`group_in` input channels per group) that runs
    blocked: where one block, the block of its input's and its output's channel counts, divides
    every group's input and output channels, each output block reads its group's input blocks
    only (RegNet's groups of 16); else None (ShuffleNet's 68, ResNeXt's 4: plain NCHW)."""
    if out_c % groups:
        return None
    block = channel_block(out_c, widest)
    if block is None or channel_block(group_in * groups, widest) != block:
        return None
    return block if group_in % block == 0 and (out_c // groups) % block == 0 else None


def count_grouped_convs(mod, widest: int = BLOCK) -> int:
    """Convolutions in `mod`'s main function with groups that are neither 1 nor one per channel
    (depthwise) and no `grouped_block`: `conv_layout` leaves them in NCHW (and `_plain_schedule`
    takes them)."""
    from tvm import relax

    grouped = []

    def visit(e):
        if (isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.nn.conv2d"
                and e.attrs.groups != 1):
            shape = getattr(e.args[1].ty, "shape", None)
            if shape is None or len(shape) != 4 or None in (_int(shape[0]), _int(shape[1])):
                grouped.append(e)
                return
            out_c, group_in = _int(shape[0]), _int(shape[1])
            depthwise = group_in == 1 and out_c == e.attrs.groups
            if not depthwise and grouped_block(group_in, out_c, e.attrs.groups, widest) is None:
                grouped.append(e)

    relax.analysis.post_order_visit(mod["main"], visit)
    return len(grouped)


def pad_conv_channels(mod, widest: int = BLOCK):
    """Convolutions whose output channels no block divides (a 9-channel conv before
    DepthToSpace, a detector's 1- or 4-channel heads) run with their filters padded with zero
    filters to the next block, the extra channels sliced off after: TVM's plain NCHW conv runs
    tens of times slower than the blocked schedule, far more than the padded channels cost.
    The padding is weight-only math, lifted out with the rest (the bundle stores padded
    filters). Returns (module, convs padded)."""
    load_tvm()
    from tvm import relax

    def replacement(call):
        if getattr(call.op, "name", "") != "relax.nn.conv2d":
            return None
        attrs = call.attrs
        if (attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW" or attrs.groups != 1
                or attrs.out_layout != "NCHW"):
            return None
        shape = getattr(call.args[1].ty, "shape", None)
        if shape is None or len(shape) != 4:
            return None
        out_c, in_c = _int(shape[0]), _int(shape[1])
        if out_c is None or in_c is None or channel_block(out_c, widest) is not None:
            return None
        padded = -(-out_c // BLOCK) * BLOCK
        filters = relax.op.nn.pad(call.args[1], [0, padded - out_c] + [0, 0] * 3)
        conv = relax.op.nn.conv2d(call.args[0], filters, strides=attrs.strides,
                                  padding=attrs.padding, dilation=attrs.dilation, groups=1,
                                  data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW",
                                  out_dtype=attrs.out_dtype)
        return relax.op.strided_slice(conv, axes=[1], begin=[0], end=[out_c])

    return rewrite_calls(mod, replacement)


def convs_1d_as_2d(mod):
    """1-D convolutions as 2-D ones one row high, so that they get the blocked schedule: TVM's
    conv1d has plain loops and no CPU schedule (Silero VAD's STFT and first encoder layer took
    0.50 of its 0.84 ms). Returns (module, convs rewritten)."""
    load_tvm()
    from tvm import relax

    def replacement(call):
        if getattr(call.op, "name", "") != "relax.nn.conv1d":
            return None
        attrs = call.attrs
        if attrs.data_layout != "NCW" or attrs.kernel_layout != "OIW" or \
                (attrs.out_layout or "NCW") != "NCW":
            return None
        conv = relax.op.nn.conv2d(
            relax.op.expand_dims(call.args[0], 2), relax.op.expand_dims(call.args[1], 2),
            strides=[1, *attrs.strides], padding=[0, attrs.padding[0], 0, attrs.padding[1]],
            dilation=[1, *attrs.dilation], groups=attrs.groups, data_layout="NCHW",
            kernel_layout="OIHW", out_layout="NCHW", out_dtype=attrs.out_dtype)
        return relax.op.squeeze(conv, [2])

    return rewrite_calls(mod, replacement)


def transposed_convs_as_convs(mod):
    """Transposed convolutions (groups 1, no dilation) as one ordinary convolution and a
    depth-to-space rearrangement, so that they get the blocked schedule: TVM lowers
    conv2d_transpose to plain loops with no CPU schedule (PP-OCR DBNet's two 2x upsamplings
    took 355 of its 450 ms).

    With stride s and a filter of k = s * r taps (padded with zero taps up to a multiple of
    s), output pixel s * q + a sums x[q - j] * W[s * j + a] over j < r: for each phase a, an
    ordinary convolution of r taps (flipped) over the input padded by r - 1. All phases are one
    convolution with out_channels * s_h * s_w output channels; depth-to-space interleaves them
    and a slice takes the padding off. The same multiply-adds as the transposed convolution;
    when the filter is as large as the stride (DBNet, U-Nets) it is a 1x1 convolution and
    nothing is sliced. The filter's relayout is weight-only math, lifted with the rest.
    Returns (module, convs rewritten)."""
    load_tvm()
    from tvm import relax

    def replacement(call):
        if getattr(call.op, "name", "") != "relax.nn.conv2d_transpose":
            return None
        attrs = call.attrs
        shape = getattr(call.args[1].ty, "shape", None)
        data_shape = getattr(call.args[0].ty, "shape", None)
        if (attrs.data_layout != "NCHW" or attrs.kernel_layout != "IOHW"
                or (attrs.out_layout or "NCHW") != "NCHW" or attrs.groups != 1
                or shape is None or len(shape) != 4 or data_shape is None
                or len(data_shape) != 4 or any(_int(v) != 1 for v in attrs.dilation)):
            return None
        dims = [_int(d) for d in (*shape, *list(data_shape)[2:], *attrs.strides, *attrs.padding,
                                  *attrs.output_padding)]
        if None in dims:
            return None
        in_c, out_c, kh, kw, h, w, sh, sw, top, left, bottom, right, oph, opw = dims
        rh, rw = -(-kh // sh), -(-kw // sw)
        out_h = (h - 1) * sh + kh - top - bottom + oph
        out_w = (w - 1) * sw + kw - left - right + opw
        qh, qw = h + rh - 1, w + rw - 1  # rows and columns of each phase
        if top + out_h > qh * sh or left + out_w > qw * sw:
            return None  # output padding past what the filter reaches (zeros plus bias)
        taps = relax.op.nn.pad(call.args[1], [0, 0, 0, 0, 0, rh * sh - kh, 0, rw * sw - kw])
        taps = relax.op.reshape(taps, [in_c, out_c, rh, sh, rw, sw])  # tap s*j + a: (j, a)
        taps = relax.op.flip(relax.op.flip(taps, 2), 4)
        # output channels phase by phase, (a_h, a_w, o): ONNX's DepthToSpace (DCR), which
        # cpu_layouts.keep_blocked computes in the blocked layout where out_c fills blocks
        filters = relax.op.reshape(relax.op.permute_dims(taps, [3, 5, 1, 0, 2, 4]),
                                   [sh * sw * out_c, in_c, rh, rw])
        conv = relax.op.nn.conv2d(call.args[0], filters, strides=1,
                                  padding=[rh - 1, rw - 1, rh - 1, rw - 1], dilation=1,
                                  groups=1, data_layout="NCHW", kernel_layout="OIHW",
                                  out_layout="NCHW", out_dtype=attrs.out_dtype)
        n = data_shape[0]
        phases = relax.op.reshape(conv, [n, sh, sw, out_c, qh, qw])
        y = relax.op.reshape(relax.op.permute_dims(phases, [0, 3, 4, 1, 5, 2]),
                             [n, out_c, qh * sh, qw * sw])
        if (top, left, out_h, out_w) != (0, 0, qh * sh, qw * sw):
            y = relax.op.strided_slice(y, axes=[2, 3], begin=[top, left],
                                       end=[top + out_h, left + out_w])
        return y

    return rewrite_calls(mod, replacement)


def clip_as_relax_ops(mod):
    """TVM's ONNX importer emits Clip (ReLU6) as calls of TIR maximum/minimum kernels with a
    scalar bound, which layout conversion cannot see through: mobilenet_v2's activations went
    from the blocked layout to NCHW and back around each of its ReLU6s. Those calls become
    Relax's own maximum/minimum, which it can. Returns (module, calls rewritten)."""
    tvm = load_tvm()
    from tvm import relax, tirx

    call_tir = tvm.ir.Op.get("relax.call_tir")
    ops = {"maximum": (relax.op.maximum, "T.max("), "minimum": (relax.op.minimum, "T.min(")}

    def replacement(call):
        if call.op != call_tir or not isinstance(call.args[0], tvm.ir.GlobalVar):
            return None
        kind = call.args[0].name_hint.rstrip("0123456789_")
        if kind not in ops or not isinstance(call.args[1], relax.Tuple):
            return None
        args = list(call.args[1].fields)
        func = mod[call.args[0]]
        if (len(args) != 2 or getattr(args[1].ty, "ndim", None) != 0
                or not isinstance(func, tirx.PrimFunc)):
            return None
        script = func.script()
        blocks = script.count('T.sblock("') - script.count('T.sblock("root")')
        if blocks != 1 or ops[kind][1] not in script:
            return None
        return ops[kind][0](args[0], args[1])

    rewritten, count = rewrite_calls(mod, replacement)
    if not count:
        return mod, 0
    return relax.transform.DeadCodeElimination(["main"])(rewritten), count
