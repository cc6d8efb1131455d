"""Activations kept in the blocked layout past Clip, Resize and Concat (cw/compile/cpu_layouts.py):
the layout changes TVM's conversion put around them are gone, and the model computes what
onnxruntime does."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cw.compile.compiler import CompileConfig, compile_model, import_graph
from cw.engine import LocalModel
from cw.tvm_env import load_tvm
from cw.verify import max_relative_error, onnx_reference
from tests.conftest import random_input


def _save(path, nodes, inits, x_shape, outputs=("y",)):
    """An opset-17 model of `nodes` with input x (float32, `x_shape`) saved at `path`."""
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs],
        inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return path


def _neck_onnx(path, resize_mode: str, clip_style: str, upsampled_out: bool = False):
    """Two branches of convolutions with HardSwish (x * clip(x + 3, 0, 6) / 6), one upsampled 2x
    by Resize, concatenated, then a convolution: a detector's neck (PP-OCR's DBNet, YOLOX).
    `upsampled_out`: the upsampled tensor is an output of the model too."""
    rng = np.random.default_rng(7)

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32),
                                       name)

    inits = [weight("w1", 16, 8, 3, 3), weight("w2", 16, 16, 3, 3), weight("w3", 8, 32, 1, 1),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             numpy_helper.from_array(np.array([], np.float32), "roi"),
             numpy_helper.from_array(np.float32(3), "three"),
             numpy_helper.from_array(np.float32(6), "six"),
             numpy_helper.from_array(np.float32(0), "zero")]
    if resize_mode == "nearest":
        resize_attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                        "nearest_mode": "floor"}
    else:
        resize_attrs = {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}

    def hard_swish(x, out):
        if clip_style == "hard_sigmoid":  # onnxruntime's export of HardSwish's gate
            gate = [helper.make_node("HardSigmoid", [x], [f"{out}_gate"], alpha=1 / 6, beta=0.5)]
        else:  # Clip with its bounds as inputs (opset 11 on)
            gate = [helper.make_node("Add", [x, "three"], [f"{out}_shifted"]),
                    helper.make_node("Clip", [f"{out}_shifted", "zero", "six"], [f"{out}_clip"]),
                    helper.make_node("Div", [f"{out}_clip", "six"], [f"{out}_gate"])]
        return gate + [helper.make_node("Mul", [x, f"{out}_gate"], [out])]

    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             *hard_swish("c1", "a1"),
             helper.make_node("Conv", ["a1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             *hard_swish("c2", "a2"),
             helper.make_node("Resize", ["a2", "roi", "scales"], ["up"], **resize_attrs),
             helper.make_node("Concat", ["a1", "up"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w3"], ["y"])]
    return _save(path, nodes, inits, ["N", 8, 12, 16], ["y"] + ["up"] * upsampled_out)


def _layout_changes(onnx_path) -> int:
    """Layout conversions in the imported graph (the CPU's, blocked where cw blocks)."""
    _, imported, _ = import_graph(onnx_path, CompileConfig(batch_sizes=(1,)))
    tvm = load_tvm()
    from tvm import relax

    op = tvm.ir.Op.get("relax.layout_transform")
    found = []

    @relax.expr_functor.visitor
    class Count(relax.PyExprVisitor):
        def visit_call_(self, call):
            if call.op.same_as(op):
                found.append(call)
            super().visit_call_(call)

    Count().visit_expr(imported.mod["main"])
    return len(found)


def _agrees_with_onnxruntime(onnx_path, bundle, sample_shape, out_shape) -> None:
    """Compiled at batch sizes 1 and 4, the model gives onnxruntime's output at 1 and 3."""
    compile_model(onnx_path, bundle, CompileConfig(batch_sizes=(1, 4)))
    model = LocalModel(bundle)
    for batch in (1, 3):
        x = random_input((batch, *sample_shape), seed=batch)
        out = model.run([x])[0]
        assert out.shape == (batch, *out_shape)
        assert max_relative_error(out, onnx_reference(onnx_path, [x])[0]) < 1e-5


@pytest.mark.parametrize("resize_mode,clip_style", [("nearest", "inputs"),
                                                    ("linear", "inputs"),
                                                    ("nearest", "hard_sigmoid")])
def test_a_neck_of_clips_resizes_and_concats_stays_blocked(tmp_path, resize_mode, clip_style):
    onnx_path = _neck_onnx(tmp_path / "m.onnx", resize_mode, clip_style)
    # into the blocked layout once and out once; TVM's conversion alone left 3 more around the
    # resize and the concatenation, and with HardSigmoid (a clip) 7 more: 2 around each clip
    assert _layout_changes(onnx_path) == 2
    _agrees_with_onnxruntime(onnx_path, tmp_path / "b", (8, 12, 16), (8, 12, 16))


def test_a_converted_tensor_read_twice_is_converted_once(tmp_path):
    """The upsampled tensor is an output as well as the concatenation's input: its conversion
    to NCHW stays for the output, and the concatenation reads that same conversion instead of
    making another."""
    onnx_path = _neck_onnx(tmp_path / "m.onnx", "nearest", "inputs", upsampled_out=True)
    # in; the first branch out for the concatenation; the resize's result out (for both its
    # readers); the concatenation in again; the result out (TVM's conversion alone: the
    # same, with the resize in NCHW)
    assert _layout_changes(onnx_path) == 5
    compile_model(onnx_path, tmp_path / "b", CompileConfig(batch_sizes=(2,)))
    x = random_input((2, 8, 12, 16), seed=5)
    outs = LocalModel(tmp_path / "b").run([x])
    for out, ref in zip(outs, onnx_reference(onnx_path, [x]), strict=True):
        assert max_relative_error(out, ref) < 1e-5


def _upsampling_onnx(path, channels: int):
    """Conv -> ConvTranspose (2x2, stride 2: DBNet's upsampling) + bias -> Relu -> Conv."""
    rng = np.random.default_rng(3)

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32),
                                       name)

    inits = [weight("w0", 16, 8, 3, 3), weight("wt", 16, channels, 2, 2),
             weight("bt", channels), weight("w1", 8, channels, 3, 3)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("ConvTranspose", ["c0", "wt", "bt"], ["t"], strides=[2, 2]),
             helper.make_node("Relu", ["t"], ["r"]),
             helper.make_node("Conv", ["r", "w1"], ["y"], pads=[1, 1, 1, 1])]
    return _save(path, nodes, inits, ["N", 8, 10, 12])


@pytest.mark.parametrize("blocks,changes", [(3, 2), (0.5, 4)])
def test_a_transposed_convolutions_depth_to_space_stays_blocked(tmp_path, blocks, changes):
    """Its phases in whole blocks (3 of this host's: 24 channels with AVX2, 48 with AVX-512),
    the depth-to-space, bias and ReLU run on the blocked tensor: in and out only (TVM's
    conversion alone: 4). With half a block they stay in NCHW, between a conversion out and one
    back in."""
    from cw.compile import cpu_conv, targets

    block = cpu_conv.WIDE_BLOCK if targets.default_cpu_arch() == "x86-64-v4" else \
        cpu_conv.BLOCK
    channels = int(blocks * block)
    onnx_path = _upsampling_onnx(tmp_path / "m.onnx", channels)
    assert _layout_changes(onnx_path) == changes
    _agrees_with_onnxruntime(onnx_path, tmp_path / "b", (8, 10, 12), (8, 20, 24))


def _focus_onnx(path):
    """YOLOX's Focus: four strided slices of the image concatenated (12 channels), then a
    convolution."""
    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 12, 3, 3)) * 0.3)
                                     .astype(np.float32), "w")]
    nodes = []
    for i, (top, left) in enumerate([(0, 0), (1, 0), (0, 1), (1, 1)]):
        for name, value in ((f"s{i}", [top, left]), (f"e{i}", [1 << 30] * 2),
                            (f"a{i}", [2, 3]), (f"t{i}", [2, 2])):
            inits.append(numpy_helper.from_array(np.array(value, np.int64), name))
        nodes.append(helper.make_node("Slice", ["x", f"s{i}", f"e{i}", f"a{i}", f"t{i}"],
                                      [f"q{i}"]))
    nodes += [helper.make_node("Concat", [f"q{i}" for i in range(4)], ["f"], axis=1),
              helper.make_node("Conv", ["f", "w"], ["y"], pads=[1, 1, 1, 1])]
    return _save(path, nodes, inits, ["N", 3, 16, 20])


def test_a_layout_conversion_fuses_with_the_slicing_before_it(tmp_path):
    """The conversion into the blocked layout is computed output element by output element,
    so TVM fuses it with the slices and the concatenation that make its input: one pass over
    the image instead of two (YOLOX: 0.86 + 1.08 ms became 0.46)."""
    from cw.compile.compiler import bind_batch, legalized, tvm_target

    onnx_path = _focus_onnx(tmp_path / "m.onnx")
    config = CompileConfig(batch_sizes=(1,))
    onnx_model, imported, _ = import_graph(onnx_path, config)
    target = tvm_target(config)
    mod, _ = legalized(bind_batch(imported.mod, onnx_model, 1), target)
    kernels = [gv.name_hint for gv in mod.functions if gv.name_hint != "main"]
    fused = [k for k in kernels if "concatenate" in k]
    assert len(fused) == 1 and "layout_transform" in fused[0], kernels
    _agrees_with_onnxruntime(onnx_path, tmp_path / "b", (3, 16, 20), (16, 8, 10))


def test_a_padded_layout_conversion_keeps_tvms_kernel():
    """A conversion that pads (12 channels into blocks of 8) is no bijection: TVM's own
    legalization, which fills the padding."""
    tvm = load_tvm()
    from tvm import relax

    from cw.compile.compiler import legalized, tvm_target

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 12, 2, 3), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.layout_transform(
                x, lambda n, c, h, w: (n, c // 8, h, w, c % 8), pad_value=0.0))
        bb.emit_func_output(y)
    target = tvm_target(CompileConfig())
    mod, _ = legalized(bb.get(), target)
    assert [gv.name_hint for gv in mod.functions if gv.name_hint != "main"] == \
        ["te_layout_transform_with_pad"]
    with target:
        executable = tvm.compile(mod, target=target)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    a = random_input((1, 12, 2, 3))
    out = vm["main"](tvm.runtime.tensor(a)).numpy()
    expected = np.zeros((1, 2, 2, 3, 8), np.float32)
    expected[0, 0] = a[0, :8].transpose(1, 2, 0)
    expected[0, 1, :, :, :4] = a[0, 8:].transpose(1, 2, 0)
    assert np.array_equal(out, expected)


def _one_channel_onnx(path, part: str):
    """A convolution to 24 channels, `part`, then a convolution: "group_norm" (a
    GroupNormalization of 3 groups), "layer_norm" (ConvNeXt's channels-first LayerNorm: a
    mean over the channels kept and subtracted), "spatial_attention" (CBAM's: the mean and
    max of the channels concatenated, a 7x7 convolution to one channel, multiplied back, then
    a scale shaped [1, 1, 1, 1])."""
    rng = np.random.default_rng(13)

    def tensor(name, value, dtype=np.float32):
        return numpy_helper.from_array(np.asarray(value, dtype), name)

    def weight(name, *shape):
        return tensor(name, rng.standard_normal(shape) * 0.3)

    node = helper.make_node
    inits = [weight("w1", 24, 8, 3, 3), weight("w2", 16, 24, 3, 3),
             tensor("channels", [1], np.int64)]
    if part == "group_norm":
        inits += [weight("gn_s", 24), weight("gn_b", 24)]
        nodes = [node("GroupNormalization", ["c", "gn_s", "gn_b"], ["t"], num_groups=3)]
    elif part == "layer_norm":
        inits += [weight("ln_s", 24, 1, 1), weight("ln_b", 24, 1, 1), tensor("eps", 1e-6)]
        nodes = [node("ReduceMean", ["c", "channels"], ["mu"], keepdims=1),
                 node("Sub", ["c", "mu"], ["d"]), node("Mul", ["d", "d"], ["d2"]),
                 node("ReduceMean", ["d2", "channels"], ["var"], keepdims=1),
                 node("Add", ["var", "eps"], ["ve"]), node("Sqrt", ["ve"], ["sd"]),
                 node("Div", ["d", "sd"], ["n"]), node("Mul", ["n", "ln_s"], ["ns"]),
                 node("Add", ["ns", "ln_b"], ["t"])]
    else:
        inits += [weight("w_sa", 1, 2, 7, 7), tensor("k", [[[[0.7]]]])]
        nodes = [node("ReduceMean", ["c", "channels"], ["avg"], keepdims=1),
                 node("ReduceMax", ["c", "channels"], ["max"], keepdims=1),
                 node("Concat", ["avg", "max"], ["am"], axis=1),
                 node("Conv", ["am", "w_sa"], ["sa"], pads=[3, 3, 3, 3]),
                 node("Sigmoid", ["sa"], ["gate"]), node("Mul", ["c", "gate"], ["att"]),
                 node("Mul", ["att", "k"], ["t"])]
    nodes = [node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]), *nodes,
             node("Conv", ["t", "w2"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16, 10, 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                                ir_version=10), path)
    return path


@pytest.mark.parametrize("part,changes", [("group_norm", 4), ("layer_norm", 4),
                                          ("spatial_attention", 5)])
def test_one_channel_against_many_keeps_the_model_blocked(tmp_path, part, changes):
    """Each of these stopped TVM's layout conversion, and the whole model ran in plain NCHW,
    ~10-100x slower, until stop 77: GroupNormalization (its gamma left per channel), a
    one-channel tensor against a blocked one ("Cannot broadcast from 5 to 4"), a
    concatenation of reductions kept over the channels ("Invalid layout axis"). The layout
    changes left: in and out, and the group norm's way out and back (its reshape to groups),
    the layer norm's two one-channel broadcasts (its per-channel scale and shift run blocked),
    the attention's two-channel input and one-channel output."""
    onnx_path = _one_channel_onnx(tmp_path / "m.onnx", part)
    assert _layout_changes(onnx_path) == changes
    m = compile_model(onnx_path, tmp_path / "b", CompileConfig(batch_sizes=(1, 4)))
    assert not any("kept in NCHW" in n for n in m.notes), m.notes
    model = LocalModel(tmp_path / "b")
    for batch in (1, 3):
        x = random_input((batch, 8, 10, 10), seed=batch)
        assert max_relative_error(model.run([x])[0], onnx_reference(onnx_path, [x])[0]) < 1e-5


def test_a_prelu_runs_on_the_blocked_tensor(tmp_path):
    """TVM's conversion does not carry `prelu`: each PReLU (one per block of a
    face-recognition ResNet) was a conversion out of the blocked layout and one back. As
    relu(x) + slope * min(x, 0) it runs blocked: in and out only, and exactly ONNX's PReLU."""
    rng = np.random.default_rng(17)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in (("w1", (24, 8, 3, 3)), ("slope", (24, 1, 1)), ("w2", (16, 24, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("PRelu", ["c", "slope"], ["p"]),
             helper.make_node("Conv", ["p", "w2"], ["y"], pads=[1, 1, 1, 1])]
    onnx_path = _save(tmp_path / "m.onnx", nodes, inits, ["N", 8, 10, 10])
    assert _layout_changes(onnx_path) == 2
    _agrees_with_onnxruntime(onnx_path, tmp_path / "b", (8, 10, 10), (16, 10, 10))


def test_selects_and_spatial_operands_run_on_the_blocked_tensor(tmp_path):
    """A leaky ReLU written as Where(c > 0, c, 0.1 c), a learned positional map (C, H, W) and a
    map of one channel ([H, W] broadcast over the channels) between two convolutions: each
    was a conversion out of the blocked layout and one back until stop 77. In and out only."""
    rng = np.random.default_rng(19)

    def tensor(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32),
                                       name)

    inits = [tensor("w1", 24, 8, 3, 3), tensor("pos", 24, 10, 10), tensor("hw", 10, 10),
             tensor("w2", 16, 24, 3, 3), numpy_helper.from_array(np.float32(0), "zero"),
             numpy_helper.from_array(np.float32(0.1), "slope")]
    node = helper.make_node
    nodes = [node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
             node("Greater", ["c", "zero"], ["up"]), node("Mul", ["c", "slope"], ["low"]),
             node("Where", ["up", "c", "low"], ["leaky"]), node("Add", ["leaky", "pos"], ["p"]),
             node("Mul", ["p", "hw"], ["m"]), node("Conv", ["m", "w2"], ["y"], pads=[1, 1, 1, 1])]
    onnx_path = _save(tmp_path / "m.onnx", nodes, inits, ["N", 8, 10, 10])
    assert _layout_changes(onnx_path) == 2
    _agrees_with_onnxruntime(onnx_path, tmp_path / "b", (8, 10, 10), (16, 10, 10))


def test_spatial_pads_run_on_the_blocked_tensor(tmp_path):
    """A generator's pads between convolutions (reflect, as style transfer and CycleGAN write
    them; edge; a constant that is not zero, which no convolution's own padding takes): the
    importer's pad kernels were a conversion out of the blocked layout and one back each until
    stop 78. Padded along H and W on the blocked tensor: in and out only. A pad of channels
    is no spatial pad: it stays converted, and right."""
    rng = np.random.default_rng(23)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in (("w1", (24, 8, 3, 3)), ("w2", (24, 24, 3, 3)), ("w3", (16, 24, 3, 3)),
                          ("w4", (16, 16, 3, 3)))]
    inits += [numpy_helper.from_array(np.array(p, np.int64), n) for n, p in (
        ("reflect", [0, 0, 1, 1, 0, 0, 1, 1]), ("edge", [0, 0, 2, 0, 0, 0, 1, 3]),
        ("shift", [0, 0, 0, 1, 0, 0, 2, 1]), ("channels", [0, 0, 0, 0, 0, 8, 0, 0]))]
    inits.append(numpy_helper.from_array(np.float32(0.5), "half"))
    node = helper.make_node
    nodes = [node("Conv", ["x", "w1"], ["c1"]), node("Relu", ["c1"], ["r1"]),
             node("Pad", ["r1", "reflect"], ["p1"], mode="reflect"),
             node("Conv", ["p1", "w2"], ["c2"]), node("Relu", ["c2"], ["r2"]),
             node("Pad", ["r2", "edge"], ["p2"], mode="edge"),
             node("Pad", ["p2", "shift", "half"], ["p3"]),
             node("Conv", ["p3", "w3"], ["c3"])]
    onnx_path = _save(tmp_path / "m.onnx", nodes + [node("Relu", ["c3"], ["y"])], inits,
                      ["N", 8, 12, 12])
    assert _layout_changes(onnx_path) == 2
    _agrees_with_onnxruntime(onnx_path, tmp_path / "b", (8, 12, 12), (16, 13, 13))

    nodes += [node("Pad", ["c3", "channels"], ["p4"]), node("Conv", ["p4", "w4"], ["y"])]
    inits[3] = numpy_helper.from_array((rng.standard_normal((16, 24, 3, 3)) * 0.3)
                                       .astype(np.float32), "w4")
    onnx_path = _save(tmp_path / "c.onnx", nodes, inits, ["N", 8, 12, 12])
    assert _layout_changes(onnx_path) == 4
    _agrees_with_onnxruntime(onnx_path, tmp_path / "c", (8, 12, 12), (16, 11, 11))
