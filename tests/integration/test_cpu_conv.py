"""CPU convolutions in NCHWc layouts with cw's own schedule (cw/compile/cpu_conv.py): which
convs get it, that it computes the right thing for every shape it takes, and how it meets
tuning records."""

import numpy as np
import pytest

from cw.compile import cpu_conv, targets, tuning
from cw.compile.compiler import CompileConfig, compile_model, legalized
from cw.compile.tuner import TuneConfig, tune_model
from cw.engine import LocalModel
from cw.tvm_env import load_tvm
from cw.verify import max_relative_error, onnx_reference
from tests.conftest import random_input


def _conv_graph(n, c, h, w, oc, k, stride, pad, groups=1, residual=False, silu=False,
                concat=False):
    tvm = load_tvm()
    from tvm import relax

    bb = relax.BlockBuilder()
    out_h, out_w = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    x = relax.Var("x", relax.TensorType((n, c, h, w), "float32"))
    wt = relax.Var("w", relax.TensorType((oc, c // groups, k, k), "float32"))
    b = relax.Var("b", relax.TensorType((1, oc, 1, 1), "float32"))
    r = relax.Var("r", relax.TensorType((n, oc, out_h, out_w), "float32"))
    params = [x, wt, b] + ([r] if residual or concat else [])
    with bb.function("main", params):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, wt, strides=stride, padding=pad, groups=groups))
            if concat:  # DenseNet's: the conv a kernel of its own, with no epilogue
                y = bb.emit_output(relax.op.concat([y, r], axis=1))
            else:
                y = _epilogue(bb, y, b, r if residual else None, silu)
        bb.emit_func_output(y)
    return tvm, bb.get()


def _epilogue(bb, y, b, residual, silu):
    from tvm import relax

    y = bb.emit(relax.op.add(y, b))
    if residual is not None:
        y = bb.emit(relax.op.add(y, residual))
    if silu:  # YOLOX's activation: the epilogue reads the sum twice
        return bb.emit_output(relax.op.multiply(y, relax.op.sigmoid(y)))
    return bb.emit_output(relax.op.nn.relu(y))


def _reference(x, w, b, stride, pad, residual=None, silu=False):
    y = _reference_conv(x, w, stride, pad) + b
    if residual is not None:
        y += residual
    if silu:
        return (y / (1 + np.exp(-y))).astype(np.float32)
    return np.maximum(y, 0).astype(np.float32)


def _reference_conv(x, w, stride, pad):
    n, c, h, wd = x.shape
    oc, per_group, k, _ = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out_h, out_w = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
    y = np.zeros((n, oc, out_h, out_w), np.float64)
    for i in range(k):
        for j in range(k):
            patch = xp[:, :, i:i + stride * out_h:stride, j:j + stride * out_w:stride]
            if per_group == 1 and c == oc and c > 1:  # depthwise
                y += w[None, :, 0, i, j, None, None] * patch
            else:  # each group's outputs from its inputs (one group: all of them)
                groups, out_group = c // per_group, oc // (c // per_group)
                for g in range(groups):
                    y[:, g * out_group:(g + 1) * out_group] += np.einsum(
                        "oc,nchw->nohw", w[g * out_group:(g + 1) * out_group, :, i, j],
                        patch[:, g * per_group:(g + 1) * per_group])
    return y


@pytest.mark.parametrize("n,c,h,w,oc,k,stride,pad,residual,groups,widest,silu", [
    (1, 16, 14, 14, 16, 3, 1, 1, True, 1, 8, False),    # resnet's 3x3 with a residual add
    (2, 8, 13, 13, 24, 3, 2, 1, False, 1, 8, False),    # stride 2, odd width, batch 2
    (1, 3, 20, 20, 8, 7, 2, 3, False, 1, 8, False),     # an RGB stem: 3 input channels in one block
    (1, 32, 7, 7, 16, 1, 1, 0, True, 1, 8, False),      # 1x1, no padding
    (1, 8, 17, 17, 16, 3, 1, 1, True, 1, 8, False),  # a prime width: tiles of 9, one partial
    (1, 16, 15, 15, 16, 3, 1, 1, False, 16, 8, False),  # depthwise
    (2, 24, 17, 17, 24, 3, 2, 1, True, 24, 8, False),   # depthwise, stride 2, batch 2
    # AVX-512's 16-channel blocks (computed right on any host: LLVM splits wider vectors)
    (1, 16, 14, 14, 32, 3, 1, 1, True, 1, 16, False),   # 16i16o blocks
    (1, 3, 20, 20, 16, 7, 2, 3, False, 1, 16, False),   # the RGB stem: 3i16o
    (1, 8, 13, 13, 32, 3, 2, 1, False, 1, 16, False),   # 8 channels in, 16 out: 8i16o
    (1, 32, 7, 7, 24, 1, 1, 0, True, 1, 16, False),     # 16 in, 24 out in blocks of 8: 16i8o
    (2, 32, 15, 15, 32, 3, 1, 1, False, 32, 16, False),  # depthwise in 16s
    # tiles two 16-channel blocks tall where the blocks pair up: a partial last tile of a row
    # no tile of 7-12 divides (26), and three blocks (48 channels) that do not pair
    (2, 16, 26, 26, 64, 1, 1, 0, False, 1, 16, False),
    (1, 16, 17, 17, 48, 3, 1, 1, True, 1, 16, False),
    # channels in no block: 12 in (YOLOX after its Focus slicing) taken at once, with SiLU;
    # 9 out (before a DepthToSpace) on filters padded to 16, the extra channels dropped
    (1, 12, 16, 16, 16, 3, 1, 1, False, 1, 16, True),
    (2, 32, 14, 14, 9, 3, 1, 1, True, 1, 16, False),
    (1, 16, 10, 10, 4, 1, 1, 0, False, 1, 8, True),
    # AVX2's tiles of several 8-channel blocks (`AVX2_TILES`): 4 blocks x 3 pixels with a
    # partial last tile (17), 3 blocks at stride 2 (a row of 10) with SiLU at batch 2; the
    # first case above takes 2 x 4, the 1x1 at 7 x 7 one block x the row
    (1, 16, 17, 17, 32, 3, 1, 1, True, 1, 8, False),
    (2, 8, 20, 20, 24, 3, 2, 1, False, 1, 8, True),
    # grouped, not depthwise: plain NCHW in cw's NCHW schedule (`_plain_schedule`): ShuffleNet
    # v1's 1x1 in 4 groups of 68, a row of 28 in vectors of 14 (7 on AVX2) with a residual at
    # batch 2, ResNeXt's 3x3 in 32 groups (stride 2, an output row of 9, SiLU), and a row of
    # 112 whose accumulators do not fit the registers (a tile per vector, not per row)
    (1, 272, 14, 14, 272, 1, 1, 0, False, 4, 16, False),
    (2, 136, 28, 28, 136, 1, 1, 0, True, 4, 16, False),
    (1, 64, 17, 17, 64, 3, 2, 1, False, 32, 8, True),
    (1, 24, 112, 112, 24, 3, 1, 1, False, 2, 8, False),
    # grouped in blocks (`grouped_block`): RegNet's groups of 16 (stride 2, a residual; batch
    # 2 with SiLU), and groups of two blocks of 8 each
    (1, 32, 14, 14, 32, 3, 2, 1, True, 2, 16, False),
    (2, 48, 13, 13, 48, 3, 1, 1, False, 3, 16, True),
    (1, 48, 10, 10, 48, 3, 1, 1, False, 3, 8, False),
])
def test_default_schedule_computes_the_convolution(n, c, h, w, oc, k, stride, pad, residual,
                                                   groups, widest, silu):
    tvm, mod = _conv_graph(n, c, h, w, oc, k, stride, pad, groups=groups, residual=residual,
                           silu=silu)
    mod, padded = cpu_conv.pad_conv_channels(mod, widest)  # as the front end does
    assert padded == (oc % 8 != 0)
    vm, scheduled = _blocked_vm(tvm, mod, widest)
    assert scheduled == 1
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((oc, c // groups, k, k)).astype(np.float32)
    b = rng.standard_normal((1, oc, 1, 1)).astype(np.float32)
    out_h, out_w = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    r = rng.standard_normal((n, oc, out_h, out_w)).astype(np.float32)
    args = [x, wt, b] + ([r] if residual else [])
    y = vm["main"](*[tvm.runtime.tensor(a) for a in args]).numpy()
    expected = _reference(x, wt, b, stride, pad, r if residual else None, silu)
    assert np.allclose(y, expected, rtol=1e-4, atol=1e-4)


def _arch(widest: int) -> str:
    """The target 8-channel blocks come from (AVX2's), where this host runs AVX2; else the
    host's own (16-channel blocks: LLVM splits the vectors where the host has no AVX-512)."""
    host = targets.default_cpu_arch()
    return "x86-64-v3" if widest == 8 and host in ("x86-64-v3", "x86-64-v4") else host


def _legalized_blocked(mod, widest: int):
    """`mod` in blocked layouts of `widest` channels, legalized for `_arch(widest)`: (target,
    the fused module)."""
    import functools

    from tvm import relax

    layout = functools.partial(cpu_conv.conv_layout, widest=widest)
    mod = relax.transform.ConvertLayout({}, layout_cb=layout)(mod)
    target = targets.tvm_target("cpu", _arch(widest))
    with target:
        return target, legalized(mod, target)[0]


def _blocked_vm(tvm, mod, widest: int):
    """`mod` in blocked layouts, its convolutions in cw's schedules, compiled: (a VM of it,
    how many kernels got cw's schedule)."""
    from tvm import relax

    target, fused = _legalized_blocked(mod, widest)
    with target:
        fused, scheduled = cpu_conv.schedule_convs(fused)
    return relax.VirtualMachine(tvm.compile(fused, target=target), tvm.cpu()), scheduled


def _scheduled_conv(mod, widest: int):
    """The schedule cw gives `mod`'s one convolution kernel under `_arch(widest)`."""
    target, fused = _legalized_blocked(mod, widest)
    (func,) = [f for gv, f in fused.functions.items() if "conv2d" in gv.name_hint]
    with target:
        return cpu_conv.conv_schedule(func)


@pytest.mark.parametrize("oc,width,tile", [
    (64, 56, (4, 3)), (24, 20, (3, 3)), (16, 14, (2, 4)), (48, 28, (3, 3)),
    (8, 20, (1, 10)),   # one block: a row's tile of 7-14 pixels, as on AVX-512
    (64, 7, (1, 7)),    # a short row: one block x the whole row
])
def test_avx2_tiles_feed_each_input_value_to_several_output_blocks(oc, width, tile):
    """With AVX2's 16 registers, a tile of 4 (3, 2) output blocks x 3 (3, 4) pixels: each
    broadcast input value feeds that many FMAs, where one block x up to 14 pixels took a load
    per FMA, and 3x3s' input values CSE'd across the window until they spilled (ResNet-50
    x0.75 of its kernel time on 2 Zen 3 cores, SqueezeNet's 16-channel 3x3 x0.42)."""
    from tvm import tirx

    _, mod = _conv_graph(1, 16, width, width, oc, 3, 1, 1)
    sch = _scheduled_conv(mod, 8)
    loops = [sch.get(loop) for loop in sch.get_loops(sch.get_sblock("conv2d_NCHWc_update"))]
    blocks, pixels = tile
    inner = [int(loop.extent) for loop in loops[-3:]]
    assert inner[-1] == 8 and loops[-1].kind == tirx.ForKind.VECTORIZED
    if blocks > 1:
        assert inner[:2] == [blocks, pixels]
        assert loops[-3].kind == loops[-2].kind == tirx.ForKind.UNROLLED
    else:
        assert inner[1] == pixels and loops[-3].kind != tirx.ForKind.UNROLLED


def test_a_convolution_without_an_epilogue_sums_apart_from_its_output():
    """A conv whose output goes straight to memory (DenseNet's, into a concat) sums in a
    buffer of its own, copied out per tile: in the output itself the partial last tile's
    guarded stores kept the sums in memory (DenseNet's 3x3s x2.2 slower with AVX2's tiles)."""
    tvm, mod = _conv_graph(2, 16, 17, 17, 32, 3, 1, 1, concat=True)
    sch = _scheduled_conv(mod, 8)
    written = sch.get(sch.get_sblock("conv2d_NCHWc_update")).writes[0].source
    assert any(written.same_as(b) for b in sch.get(sch.get_sblock("root")).alloc_buffers)
    vm, scheduled = _blocked_vm(tvm, mod, 8)
    assert scheduled == 1
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 16, 17, 17)).astype(np.float32)
    wt = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    b = np.zeros((1, 32, 1, 1), np.float32)  # a parameter the graph does not read
    r = rng.standard_normal((2, 32, 17, 17)).astype(np.float32)
    y = vm["main"](*[tvm.runtime.tensor(a) for a in (x, wt, b, r)]).numpy()
    expected = np.concatenate([_reference_conv(x, wt, 1, 1), r], axis=1)
    assert np.allclose(y, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride", [1, 2])
def test_a_depthwise_conv_pads_the_rows_each_output_row_reads(stride):
    """A depthwise conv's padded input is made per output row, inside the conv's parallel loop
    (the rows the filter reads, its channel block's only), not by a pass over the whole input
    before: at 9 multiply-adds per value loaded, that pass's traffic was most of its time
    (EfficientNet's stride-2 one at 112 x 112 x 96 x0.52 of it this way)."""
    import functools

    from tvm import relax, tirx

    _, mod = _conv_graph(1, 32, 28, 28, 32, 3, stride, 1, groups=32)
    mod = relax.transform.ConvertLayout(
        {}, layout_cb=functools.partial(cpu_conv.conv_layout, widest=16))(mod)
    target = targets.tvm_target("cpu", targets.default_cpu_arch())
    with target:
        fused, _ = legalized(mod, target)
    (func,) = [f for gv, f in fused.functions.items() if "depthwise" in gv.name_hint]
    sch = cpu_conv.conv_schedule(func)
    pad, conv = sch.get_sblock("data_pad"), sch.get_sblock("depthwise_conv2d_NCHWc_update")
    rows = sch.get(sch.get_loops(conv)[0])
    assert rows.kind == tirx.ForKind.PARALLEL
    pad_loops = [sch.get(loop) for loop in sch.get_loops(pad)]
    assert pad_loops[0].same_as(rows)  # computed inside the conv's loop over output rows
    out_w = (28 + 2 - 3) // stride + 1
    # 3 padded rows, the columns the filter reads across them, a channel block
    assert [int(loop.extent) for loop in pad_loops[1:]] == [3, (out_w - 1) * stride + 3, 16]
    assert pad_loops[-1].kind == tirx.ForKind.VECTORIZED


PLAIN = ("NCHW", "OIHW")


@pytest.mark.parametrize("c,oc,groups,widest,blocked", [
    (64, 64, 1, 8, ("NCHW8c", "OIHW8i8o")), (3, 64, 1, 8, ("NCHW3c", "OIHW3i8o")),
    (12, 64, 1, 8, ("NCHW12c", "OIHW12i8o")),  # input channels in no block: all at once
    (64, 20, 1, 8, PLAIN),      # output channels in no block: padded first (pad_conv_channels)
    (32, 32, 32, 8, ("NCHW8c", "OIHW1i8o")),  # depthwise
    # grouped: blocked where one block divides every group's channels (each output block then
    # reads its group's input blocks only), else plain NCHW (cw's NCHW schedule)
    (32, 64, 2, 8, ("NCHW8c", "OIHW8i8o")),
    (48, 48, 3, 16, ("NCHW16c", "OIHW16i16o")),  # RegNet's groups of 16
    (240, 240, 10, 16, PLAIN),  # groups of 24: the tensors' block (16) does not divide them
    (240, 240, 10, 8, ("NCHW8c", "OIHW8i8o")),
    (272, 272, 4, 16, PLAIN),   # ShuffleNet's groups of 68
    (64, 64, 16, 16, PLAIN),    # ResNeXt's groups of 4
    (12, 12, 12, 8, PLAIN),     # depthwise, channels not a multiple of 8
    # AVX-512: blocks of 16 where the channels divide, of 8 where only 8 does
    (64, 64, 1, 16, ("NCHW16c", "OIHW16i16o")), (3, 64, 1, 16, ("NCHW3c", "OIHW3i16o")),
    (24, 64, 1, 16, ("NCHW8c", "OIHW8i16o")), (64, 24, 1, 16, ("NCHW16c", "OIHW16i8o")),
    (12, 64, 1, 16, ("NCHW12c", "OIHW12i16o")), (64, 20, 1, 16, PLAIN),
    (32, 32, 32, 16, ("NCHW16c", "OIHW1i16o")), (24, 24, 24, 16, ("NCHW8c", "OIHW1i8o")),
])
def test_which_convolutions_get_blocked(c, oc, groups, widest, blocked):
    from tvm import relax

    _, mod = _conv_graph(1, c, 8, 8, oc, 3, 1, 1, groups=groups)
    calls = []
    relax.analysis.post_order_visit(mod["main"], lambda e: calls.append(e) if isinstance(
        e, relax.Call) and getattr(e.op, "name", "") == "relax.nn.conv2d" else None)
    layouts = cpu_conv.conv_layout(calls[0], widest=widest)
    # a conv left in NCHW names it: without, TVM infers its layout from a blocked input's
    assert tuple(layouts["relax.nn.conv2d"][:2]) == blocked


@pytest.mark.parametrize("arch,widest", [("x86-64-v4", 16), ("sapphirerapids", 16),
                                         ("znver4", 16), ("x86-64-v3", 8), ("x86-64", 8),
                                         ("skylake", 8)])
def test_the_block_follows_the_targets_vectors(arch, widest):
    assert cpu_conv.widest_block(targets.tvm_target("cpu", arch)) == widest


def test_default_arch_is_the_best_level_the_cpu_has():
    v3 = targets.X86_LEVEL_FLAGS["x86-64-v3"]
    assert targets.default_cpu_arch(frozenset(targets.X86_LEVEL_FLAGS["x86-64-v4"])) == \
        "x86-64-v4"
    assert targets.default_cpu_arch(frozenset(v3 | {"avx512f"})) == "x86-64-v3"  # no BW/VL
    assert targets.default_cpu_arch(frozenset(v3)) == "x86-64-v3"
    assert targets.default_cpu_arch(frozenset()) == targets.GENERIC_CPU


def test_small_cnn_compiles_blocked_and_agrees_with_nchw_and_onnxruntime(zoo_onnx, tmp_path, cli):
    onnx_path = zoo_onnx("small_cnn")
    r = cli("compile", onnx_path, "-o", tmp_path / "c", "--batch-sizes", "1,3")
    assert r.code == 0, r.err
    assert "convs in cw's schedule" in r.out
    blocked = LocalModel(tmp_path / "c")
    assert all(k.kernels_conv_scheduled == 2 for k in blocked.manifest.kernels)
    plain_manifest = compile_model(onnx_path, tmp_path / "p",
                                   CompileConfig(batch_sizes=(3,), conv_layout="nchw"))
    # plain NCHW convolutions get cw's NCHW schedule (TVM's loops ran them on one thread)
    assert plain_manifest.kernels[0].kernels_conv_scheduled == 2
    plain = LocalModel(tmp_path / "p")
    x = random_input((3, 3, 32, 32), seed=5)
    ref = onnx_reference(onnx_path, [x])[0]
    assert max_relative_error(blocked.run([x])[0], ref) < 1e-5
    assert max_relative_error(plain.run([x])[0], ref) < 1e-5
    r = cli("compile", onnx_path, "-o", tmp_path / "bad", "--conv-layout", "nhwc")
    assert r.code != 0 and "convolution layout" in r.err


def test_blocked_convolutions_are_counted_before_legalizing(zoo_onnx):
    """`choose_target` keeps the host's x86-64 level for a model with convolutions cw blocked,
    counted on the imported graph (legalizing every batch size to count the kernels cw
    schedules took densenet121 8 of its 50 s); the count is the kernels' count."""
    from cw.compile.compiler import import_graph

    for layout, blocked in (("nchwc", 2), ("nchw", 0)):
        _, imported, _ = import_graph(zoo_onnx("small_cnn"),
                                      CompileConfig(batch_sizes=(1,), conv_layout=layout))
        assert cpu_conv.count_blocked_convs(imported.mod) == blocked


def _one_conv_onnx(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(random_input((16, 8, 3, 3), seed=1), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "one_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 10, 10])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              path)
    return path


@pytest.mark.slow
def test_tuning_starts_from_the_default_schedule_and_measures_it_again_if_that_failed(
        tmp_path, monkeypatch):
    """A record replaces cw's schedule at compile time, so `cw tune` measures that schedule
    first and stores it: the best record of a conv kernel is never worse than the default. On a
    loaded machine the default's one measurement once failed, and the search stored a sampled
    schedule in its place: the default is measured again before the search."""
    load_tvm()
    from tvm.s_tir import meta_schedule as ms

    from cw.compile import tuner

    class FailedOnce:
        def result(self):
            return ms.runner.RunnerResult(None, "injected: the runner timed out")

    class FirstRunFails:
        def __init__(self, runner):
            self.runner, self.runs = runner, 0

        def run(self, inputs):
            self.runs += 1
            return [FailedOnce()] if self.runs == 1 else self.runner.run(inputs)

    seeding, runs = tuner._seed_default_schedule, []

    def seed_with_a_failure_first(ms_, task, workload, database, builder, runner, rules):
        flaky = FirstRunFails(runner)
        added = seeding(ms_, task, workload, database, builder, flaky, rules)
        runs.append((task.task_name, flaky.runs, added))
        return added

    monkeypatch.setattr(tuner, "_seed_default_schedule", seed_with_a_failure_first)
    onnx_path = _one_conv_onnx(tmp_path / "one_conv.onnx")
    db = tmp_path / "db"
    report = tune_model(onnx_path, TuneConfig(db=str(db), batch_sizes=(1,), trials=1))
    assert report.default_unmeasured == 0
    (conv,) = [k for k in report.kernels if "conv2d_NCHWc" in k.name]
    assert conv.trials_now == 1 and conv.best_us > 0
    (conv_runs,) = [(n, ok) for name, n, ok in runs if "conv2d_NCHWc" in name]
    assert conv_runs == (2, True)  # failed, measured again, stored
    database = ms.database.JSONDatabase(str(db / tuning.WORKLOAD_FILE),
                                        str(db / tuning.RECORD_FILE), allow_missing=False)
    records = list(database.get_all_tuning_records())  # (one Python object per record)
    (record,) = [r for r in records if "conv2d_NCHWc" in str(r.workload.mod)]
    default = cpu_conv.conv_schedule(record.workload.mod["main"])
    assert str(record.trace) == str(default.trace)  # the default schedule, nothing sampled
    m = compile_model(onnx_path, tmp_path / "b", CompileConfig(tune_dbs=(str(db),)))
    assert m.kernels[0].kernels_tuned == m.kernels[0].kernels_total  # every kernel has a record
    x = random_input((1, 8, 10, 10), seed=2)
    out = LocalModel(tmp_path / "b").run([x])[0]
    assert max_relative_error(out, onnx_reference(onnx_path, [x])[0]) < 1e-5

    # failing every time: counted, and the search still fills the kernel's trials. The other
    # kernels' records are there already: the conv's search alone is what is asked
    # (each kernel's took 8-40 s on 2 cores).
    (tmp_path / "db2").mkdir()
    db2 = ms.database.JSONDatabase(str(tmp_path / "db2" / tuning.WORKLOAD_FILE),
                                   str(tmp_path / "db2" / tuning.RECORD_FILE),
                                   allow_missing=True)
    for r in records:
        if r is not record:
            db2.commit_tuning_record(ms.database.TuningRecord(
                r.trace, db2.commit_workload(r.workload.mod), r.run_secs, r.target,
                r.args_info))
    monkeypatch.setattr(tuner, "_seed_default_schedule",
                        lambda *a: seeding(*a[:5], FirstRunFails(a[5]), a[6], tries=1))
    report = tune_model(onnx_path, TuneConfig(db=str(tmp_path / "db2"), batch_sizes=(1,),
                                              trials=1))
    assert report.default_unmeasured == 1
    (conv,) = [k for k in report.kernels if "conv2d_NCHWc" in k.name]
    assert conv.trials_before == 0 and conv.trials_now == 1
    assert sum(k.trials_before for k in report.kernels) == len(report.kernels) - 1


def _conv_relu6_conv_onnx(path, computed_bound=False):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(random_input((16, 8, 3, 3), seed=1), "w1"),
             numpy_helper.from_array(random_input((16, 16, 3, 3), seed=2), "w2"),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1])]
    if computed_bound:  # an upper bound computed from the input
        nodes.append(helper.make_node("ReduceMax", ["x"], ["hi2"], keepdims=0))
    nodes += [helper.make_node("Clip", ["c1", "lo", "hi2" if computed_bound else "hi"], ["r"]),
              helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "relu6", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return path


def test_a_scaled_skip_connection_stays_in_the_scheduled_epilogue():
    """y = relu(conv2(a) + b + 0.5 * a) with a = relu(conv1(x)) (an int8 model's residual add,
    each side scaled): the product of the skip connection is an elementwise block of conv2's
    kernel that does not descend from its convolution; it is computed where the epilogue reads
    it. Before, the schedule could not place the epilogue and the kernel ran in TVM's generic
    loops (10 ms instead of 0.3 in mobilenetv2-12-int8)."""
    tvm = load_tvm()
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 16, 9, 9), "float32"))
    w1 = relax.Var("w1", relax.TensorType((16, 16, 1, 1), "float32"))
    w2 = relax.Var("w2", relax.TensorType((16, 16, 3, 3), "float32"))
    b = relax.Var("b", relax.TensorType((1, 16, 1, 1), "float32"))
    with bb.function("main", [x, w1, w2, b]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, w1)))
            y = bb.emit(relax.op.add(relax.op.nn.conv2d(a, w2, padding=1), b))
            skip = bb.emit(relax.op.multiply(a, relax.const(0.5, "float32")))
            y = bb.emit_output(relax.op.nn.relu(relax.op.add(y, skip)))
        bb.emit_func_output(y)
    vm, scheduled = _blocked_vm(tvm, bb.get(), 8)
    assert scheduled == 2
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(tuple(int(d) for d in v.ty.shape)).astype(np.float32)
            for v in (x, w1, w2, b)]
    out = vm["main"](*[tvm.runtime.tensor(v) for v in args]).numpy()
    xv, w1v, w2v, bv = args
    av = np.maximum(_reference(xv, w1v, np.zeros((1, 16, 1, 1), np.float32), 1, 0), 0)
    expected = _reference(av, w2v, bv, 1, 1, residual=0.5 * av, silu=False)
    assert np.allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_a_cast_to_integers_after_a_blocked_convolution_compiles(tmp_path):
    """ONNX's Cast of floats to uint8 imports as where(not(isfinite(x)), 0, x) first, and the
    layout conversion carries that bool tensor into the convolution's NCHW8c; TVM 0.27 then
    failed to legalize its layout transform back ("elements of type bool, but the
    transformation fills padding with float32": a quantized model whose output is a
    convolution's)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(random_input((16, 8, 3, 3), seed=2), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Cast", ["r"], ["y"], to=TensorProto.UINT8)], "cast_after_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, ["N", 16, 12, 12])], [w])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), src)
    m = compile_model(src, tmp_path / "b", CompileConfig(batch_sizes=(1, 4)))
    assert m.kernels[0].kernels_conv_scheduled == 1
    x = random_input((3, 8, 12, 12), seed=4) * 0.2
    out = LocalModel(tmp_path / "b").run([x])[0]
    assert out.dtype == np.uint8 and np.array_equal(out, onnx_reference(src, [x])[0])


@pytest.mark.parametrize("computed_bound", [False, True])
def test_relu6_between_convs_keeps_the_blocked_layout(tmp_path, computed_bound):
    onnx_path = _conv_relu6_conv_onnx(tmp_path / "m.onnx", computed_bound)
    m = compile_model(onnx_path, tmp_path / "b", CompileConfig(batch_sizes=(1,)))
    k = m.kernels[0]
    # a bound computed in the graph lands in the first conv's epilogue as a side input, which
    # is computed where the epilogue reads it (until 2026-11-30 that kernel kept TVM's loops)
    assert k.kernels_conv_scheduled == 2
    if not computed_bound:
        # relayout in, conv + ReLU6, conv, relayout out: no relayout between the convs (TVM's
        # own Clip kernels made it 7: two more relayouts, maximum and minimum)
        assert k.kernels_total == 4, k
    x = random_input((1, 8, 12, 12), seed=4) * 3
    out = LocalModel(tmp_path / "b").run([x])[0]
    assert max_relative_error(out, onnx_reference(onnx_path, [x])[0]) < 1e-5


def _conv_transpose_onnx(path, c, oc, k, stride, pad=0, groups=1, bias=True):
    """Conv (so that the transposed conv's input comes blocked) -> ConvTranspose -> ReLU."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(random_input((c, c, 3, 3), seed=1), "w0"),
             numpy_helper.from_array(random_input((c, oc // groups, k, k), seed=2), "w")]
    inputs = ["c0", "w"]
    if bias:
        inits.append(numpy_helper.from_array(random_input((oc,), seed=3), "b"))
        inputs.append("b")
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("ConvTranspose", inputs, ["t"], strides=[stride, stride],
                              pads=[pad] * 4, group=groups),
             helper.make_node("Relu", ["t"], ["y"])]
    graph = helper.make_graph(
        nodes, "upsample", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                          ["N", c, 10, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return path


@pytest.mark.parametrize("c,oc,k,stride,pad,groups,bias,rewritten", [
    (24, 24, 2, 2, 0, 1, True, True),     # PP-OCR DBNet's 2x upsampling
    (16, 5, 3, 3, 0, 1, False, True),     # output channels in no block, a 3x3 filter
    (16, 8, 4, 2, 1, 1, True, True),      # overlapping windows (GAN and U-Net decoders)
    (8, 8, 3, 2, 1, 1, True, True),       # a filter no multiple of the stride
    (8, 16, 5, 1, 2, 1, False, True),     # stride 1: a plain conv with its filter flipped
    (16, 16, 2, 2, 0, 2, True, False),    # grouped: TVM's own lowering of the transposed conv
])
def test_transposed_convolutions_agree_with_onnxruntime(tmp_path, c, oc, k, stride, pad, groups,
                                                        bias, rewritten):
    onnx_path = _conv_transpose_onnx(tmp_path / "m.onnx", c, oc, k, stride, pad, groups, bias)
    m = compile_model(onnx_path, tmp_path / "b", CompileConfig(batch_sizes=(1, 4)))
    notes = [n for n in m.notes if "transposed convolution" in n]
    assert notes == (["1 transposed convolution as convolutions and a depth-to-space"]
                     if rewritten else []), m.notes
    assert not any("kept in NCHW" in n for n in m.notes), m.notes
    model = LocalModel(tmp_path / "b")
    for batch in (1, 3):
        x = random_input((batch, c, 10, 12), seed=batch)
        out = model.run([x])[0]
        assert out.shape == (batch, oc, 9 * stride + k - 2 * pad, 11 * stride + k - 2 * pad)
        assert max_relative_error(out, onnx_reference(onnx_path, [x])[0]) < 1e-5


def _conv_1d_onnx(path, c, oc, k, stride, pads, dilation, groups):
    """conv1d -> relu -> conv1d over the whole width -> relu -> squeeze(axis -1): an audio
    encoder's end (Silero VAD's; TVM's layout conversion aborted on the negative axis)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    width = (20 + sum(pads) - dilation * (k - 1) - 1) // stride + 1
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((oc, c // groups, k)).astype(
                 np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((oc,)).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((8, oc, width)).astype(np.float32),
                                     "w2"),
             numpy_helper.from_array(np.array([-1], np.int64), "last")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[stride], pads=pads,
                              dilations=[dilation], group=groups),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Squeeze", ["r2", "last"], ["y"])]
    graph = helper.make_graph(nodes, "conv1d",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             ["N", c, 20])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return path


@pytest.mark.parametrize("c,oc,k,stride,pads,dilation,groups", [
    (16, 16, 3, 1, [1, 1], 1, 1),     # Silero VAD's encoder layer
    (1, 24, 8, 4, [0, 0], 1, 1),      # an STFT by convolution: one input channel, stride 4
    (8, 16, 3, 2, [2, 1], 2, 1),      # asymmetric padding, dilation
    (16, 16, 5, 1, [2, 2], 1, 16),    # depthwise
])
def test_1d_convolutions_run_as_blocked_2d_ones(tmp_path, c, oc, k, stride, pads, dilation,
                                                groups):
    onnx_path = _conv_1d_onnx(tmp_path / "m.onnx", c, oc, k, stride, pads, dilation, groups)
    m = compile_model(onnx_path, tmp_path / "b", CompileConfig(batch_sizes=(1, 4)))
    assert "2 1-D convolutions as 2-D ones one row high" in m.notes, m.notes
    assert not any("kept in NCHW" in n for n in m.notes), m.notes
    assert m.kernels[0].kernels_conv_scheduled == 2
    model = LocalModel(tmp_path / "b")
    for batch in (1, 3):
        x = random_input((batch, c, 20), seed=batch)
        out = model.run([x])[0]
        assert max_relative_error(out, onnx_reference(onnx_path, [x])[0]) < 1e-5
