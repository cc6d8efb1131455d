"""Resize forms TVM's importer gets wrong or lacks (cw/compile/resize_forms.py), and the old
opsets' resizes, Hardmax, broadcasts and per-activation BatchNormalization that onnx's version
converter changes the meaning of or cannot lift (cw/compile/old_opsets.py): each compiles, and
its bundle agrees with onnxruntime on the file as written (with numpy where onnxruntime has no
kernel of that opset), at batch 1 and 3."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cw.engine import run_bundle

F = TensorProto.FLOAT


def _save(path, nodes, x_shape, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, x_shape)],
                              [helper.make_tensor_value_info("y", F, None)], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7 if opset < 13 else 8
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    model.graph.output[0].CopyFrom(inferred.graph.output[0])
    onnx.save(model, path)


def _resize(opset=17, scales=None, sizes=None, **attrs):
    inputs = ["x", "", "s"] if scales is not None else ["x", "", "", "s"]
    value = np.array(scales, np.float32) if scales is not None else np.array(sizes, np.int64)
    if opset < 11:
        inputs = ["x", "s"]
    return [helper.make_node("Resize", inputs, ["y"], **attrs)], \
        [numpy_helper.from_array(value, "s")], opset


def _agrees(tmp_path, nodes, inits, opset, x_shape=("N", 4, 7, 9), note=None):
    from cw.compile.compiler import CompileConfig, compile_model

    src = tmp_path / "m.onnx"
    _save(src, nodes, list(x_shape), inits, opset)
    m = compile_model(src, tmp_path / "b", CompileConfig(batch_sizes=(1, 4)))
    if note:
        assert any(note in n for n in m.notes), m.notes
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, *x_shape[1:]))
        result = run_bundle(tmp_path / "b", [x.astype(np.float32)], "cpu", src)
        assert result.relative_error <= 1e-5, (batch, result.relative_error)


# TVM maps coordinates by out / in, ONNX by the scale given: 7 x 1.3 and 9 x 1.7 are not
# whole, and every mode was 0.2-1.7 off onnxruntime, silently
FORMS = {
    "linear by 1.3 x 1.7": _resize(scales=[1, 1, 1.3, 1.7], mode="linear"),
    "cubic by 0.6 x 1.7": _resize(scales=[1, 1, 0.6, 1.7], mode="cubic"),
    "nearest by 1.3 x 1.7": _resize(scales=[1, 1, 1.3, 1.7], mode="nearest"),
    "linear by 0.5 of odd sizes, asymmetric": _resize(
        scales=[1, 1, 0.5, 0.5], mode="linear", coordinate_transformation_mode="asymmetric"),
    "half_pixel_symmetric, not whole": _resize(
        19, scales=[1, 1, 1.3, 0.5], mode="linear",
        coordinate_transformation_mode="half_pixel_symmetric"),
    "half_pixel_symmetric, whole": _resize(
        19, scales=[1, 1, 2, 1], mode="cubic",
        coordinate_transformation_mode="half_pixel_symmetric"),
    "axes, scales": _resize(18, scales=[1.6], mode="nearest", axes=[-2]),
    "axes, sizes": _resize(18, sizes=[13], mode="linear", axes=[3]),
    "keep aspect ratio, not smaller": _resize(18, sizes=[14, 3], mode="nearest", axes=[2, 3],
                                              keep_aspect_ratio_policy="not_smaller"),
    "antialias by 0.6 x 0.45": _resize(18, scales=[1, 1, 0.6, 0.45], mode="linear",
                                       antialias=1),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_a_resize_form_agrees_with_onnxruntime(tmp_path, form):
    nodes, inits, opset = FORMS[form]
    _agrees(tmp_path, nodes, inits, opset, note="cw/compile/decompose.py")


# TVM's importer resizes the last axes by the last scales and ignores the others: an NHWC
# image by [1, 2, 2, 1] came out [N, H, 2W, C] until stop 78, silently
BEFORE_THE_LAST_TWO = {
    "NHWC by 2 x 2, linear": (_resize(scales=[1, 2, 2, 1], mode="linear"), ("N", 7, 9, 3)),
    "NHWC by 1.3 x 1.7, cubic": (_resize(scales=[1, 1.3, 1.7, 1], mode="cubic"),
                                 ("N", 7, 9, 3)),
    "NHWC to sizes under axes, nearest": (
        _resize(18, sizes=[14, 18], mode="nearest", axes=[1, 2]), ("N", 7, 9, 3)),
    "channels by 2, nearest": (_resize(scales=[1, 2, 1, 1], mode="nearest"), ("N", 4, 7, 9)),
    "[N, L, C] along L, linear": (_resize(scales=[1, 2, 1], mode="linear"), ("N", 7, 4)),
}


@pytest.mark.parametrize("form", list(BEFORE_THE_LAST_TWO))
def test_a_resize_of_axes_before_the_last_two_agrees_with_onnxruntime(tmp_path, form):
    (nodes, inits, opset), x_shape = BEFORE_THE_LAST_TWO[form]
    _agrees(tmp_path, nodes, inits, opset, x_shape, note="cw/compile/decompose.py")


def test_an_output_of_another_shape_than_onnx_infers_is_refused(tmp_path, cli, monkeypatch):
    """The net under such bugs: with the NHWC resize handed to TVM's importer as it was, the
    compile stops in one line instead of serving an image of the wrong shape."""
    from cw.compile import resize_forms

    monkeypatch.setattr(resize_forms, "candidate", lambda node, inits: False)
    (nodes, inits, opset), x_shape = BEFORE_THE_LAST_TWO["NHWC by 2 x 2, linear"]
    src = tmp_path / "m.onnx"
    _save(src, nodes, list(x_shape), inits, opset)
    r = cli("compile", src, "-o", tmp_path / "b")
    assert r.code != 0 and len(r.err.strip().splitlines()) == 1, r.err
    assert "output 'y' comes out of TVM's import with sample shape [7, 18, 3] where ONNX's " \
        "shape inference gives [14, 18, 3]" in r.err, r.err
    assert not (tmp_path / "b").exists()


def test_a_difference_onnxruntime_settles_for_tvm_is_not_refused(tmp_path):
    """ONNX's own inference errs on a Split into uneven parts (8 into 3: [3, 3, 2], which
    it sizes otherwise); onnxruntime agrees with TVM, so the compile goes on, and is right."""
    nodes = [helper.make_node("Split", ["x"], ["a", "b", "c"], axis=2, num_outputs=3),
             helper.make_node("Concat", ["c", "a"], ["y"], axis=2)]
    _agrees(tmp_path, nodes, [], 18, x_shape=("N", 6, 8))


def test_a_resize_by_whole_scales_stays_one_resize(tmp_path):
    """2x of 7 x 9 is whole: TVM's resize is right there, and no matrix is made."""
    from cw.compile.compiler import CompileConfig, compile_model

    nodes, inits, opset = _resize(scales=[1, 1, 2, 2], mode="linear")
    src = tmp_path / "m.onnx"
    _save(src, nodes, ["N", 4, 7, 9], inits, opset)
    m = compile_model(src, tmp_path / "b", CompileConfig(batch_sizes=(1,)))
    assert not any("decompose" in n for n in m.notes), m.notes


def test_a_kept_aspect_ratio_cw_cannot_write_exactly_is_refused_in_one_line(tmp_path, cli):
    nodes, inits, opset = _resize(18, sizes=[10, 20], mode="linear", axes=[2, 3],
                                  keep_aspect_ratio_policy="not_larger")
    src = tmp_path / "m.onnx"
    _save(src, nodes, ["N", 4, 7, 9], inits, opset)
    r = cli("compile", src, "-o", tmp_path / "b")
    assert r.code != 0 and len(r.err.strip().splitlines()) == 1, r.err
    assert "in a form cw could not write exactly" in r.err, r.err


OLD = {
    # onnx's version converter made these half_pixel: a 2x linear upsample was 0.48 off
    "Upsample (opset 9), linear": (
        [helper.make_node("Upsample", ["x", "s"], ["y"], mode="linear")],
        [numpy_helper.from_array(np.array([1, 1, 1.5, 3], np.float32), "s")], 9),
    "Resize (opset 10), linear": _resize(10, scales=[1, 1, 2, 2], mode="linear"),
    "Upsample (opset 7), nearest": (
        [helper.make_node("Upsample", ["x"], ["y"], mode="nearest", scales=[1.0, 1.0, 1.3, 1.7])],
        [], 7),
    # onnxruntime rounds down where an axis grows and up where it shrinks: two Resizes
    "Resize (opset 10), nearest, one axis shrunk and one grown": _resize(
        10, scales=[1, 1, 0.7, 2.5], mode="nearest"),
}


@pytest.mark.parametrize("case", list(OLD))
def test_an_old_opset_resize_keeps_its_meaning(tmp_path, case):
    nodes, inits, opset = OLD[case]
    _agrees(tmp_path, nodes, inits, opset, note="of the old opset kept asymmetric")


@pytest.mark.parametrize("opset,axis", [(11, 1), (9, None), (12, 2)])
def test_an_old_opset_hardmax_keeps_its_meaning(tmp_path, opset, axis):
    """Below opset 13 Hardmax picks one entry of the input flattened at `axis` (default 1);
    the converter kept the node, which then picked along that axis alone: 1.0 off."""
    attrs = {} if axis is None else {"axis": axis}
    _agrees(tmp_path, [helper.make_node("Hardmax", ["x"], ["y"], **attrs)], [], opset,
            x_shape=("N", 4, 6, 6), note="Hardmax node(s) of the old opset")


def test_a_resize_of_the_batch_axis_is_refused_in_one_line(tmp_path, cli):
    nodes, inits, opset = _resize(scales=[2, 1, 1.3, 1], mode="nearest")
    src = tmp_path / "m.onnx"
    _save(src, nodes, ["N", 4, 7, 9], inits, opset)
    r = cli("compile", src, "-o", tmp_path / "b")
    assert r.code != 0 and len(r.err.strip().splitlines()) == 1, r.err
    assert "scales its batch axis by 2.0: cw cannot batch it" in r.err, r.err


def test_a_resize_by_matrices_compiles_for_cuda(tmp_path, cli):
    """The matrices are constants of an ONNX graph: a CUDA bundle takes them too (device
    binaries, no source). (Run on a GPU: not yet.)"""
    from cw.bundle import open_bundle
    from cw.compile.libcheck import device_binary_count
    from cw.tvm_env import cuda_codegen_problem

    problem = cuda_codegen_problem()
    if problem:
        pytest.skip(f"no CUDA compile here: {problem}")
    nodes, inits, opset = FORMS["linear by 1.3 x 1.7"]
    src = tmp_path / "m.onnx"
    _save(src, nodes, ["N", 4, 7, 9], inits, opset)
    r = cli("compile", src, "-o", tmp_path / "cuda", "--target", "cuda", "--batch-sizes", "1,4")
    assert r.code == 0, r.err
    for k in open_bundle(tmp_path / "cuda").manifest.kernels:
        binaries, has_source = device_binary_count(tmp_path / "cuda" / k.kernel_file)
        assert binaries >= 1 and not has_source


@pytest.mark.parametrize("op,b_shape,axis,aligned", [
    ("Add", (4,), 1, (4, 1, 1)),  # a Caffe2 export's bias: [C] at axis 1 of [N, C, H, W]
    # the last axis has B's size too: TVM multiplied along it, silently, until stop 75
    ("Mul", (6,), 2, (6, 1)),
    ("Sub", (6, 6), None, (6, 6)),  # no axis: aligned with A's last axes, as numpy does
])
def test_an_opset_6_broadcast_at_an_axis_keeps_its_meaning(tmp_path, op, b_shape, axis, aligned):
    """onnxruntime has no kernel of these opsets: numpy, with B given the axes of size 1."""
    from cw.compile.compiler import CompileConfig, compile_model
    from cw.engine import LocalModel

    b = np.random.default_rng(0).standard_normal(b_shape).astype(np.float32)
    attrs = {"broadcast": 1} | ({} if axis is None else {"axis": axis})
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "b"], ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", F, ["N", 4, 6, 6])],
        [helper.make_tensor_value_info("y", F, ["N", 4, 6, 6])],
        [numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)], ir_version=7)
    onnx.save(model, tmp_path / "m.onnx")
    m = compile_model(tmp_path / "m.onnx", tmp_path / "b", CompileConfig(batch_sizes=(1, 4)))
    assert any("broadcast(s) of opset 6 along an axis" in n for n in m.notes) == \
        (aligned != b_shape), m.notes
    x = np.random.default_rng(1).standard_normal((3, 4, 6, 6)).astype(np.float32)
    expected = {"Add": np.add, "Mul": np.multiply, "Sub": np.subtract}[op](x, b.reshape(aligned))
    np.testing.assert_allclose(LocalModel(tmp_path / "b").run([x])[0], expected, rtol=1e-6)


def test_an_opset_7_batchnorm_per_activation_agrees_with_onnxruntime(tmp_path):
    """spatial=0: statistics per activation, shaped like a sample; TVM's importer refused it
    (with 400 characters of its operator's description)."""
    rng = np.random.default_rng(2)
    stats = [numpy_helper.from_array(v.astype(np.float32), name) for name, v in (
        ("s", rng.standard_normal((4, 7, 9))), ("b", rng.standard_normal((4, 7, 9))),
        ("m", rng.standard_normal((4, 7, 9))), ("v", rng.uniform(0.2, 2, (4, 7, 9))))]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                            epsilon=1e-3, spatial=0)
    _agrees(tmp_path, [node], stats, 7, note="BatchNormalization node(s) with spatial=0")


@pytest.mark.parametrize("mode,ctm", [("linear", "half_pixel"), ("nearest", "asymmetric"),
                                      ("cubic", "align_corners")])
def test_a_resize_to_another_tensors_size_agrees_with_onnxruntime(tmp_path, mode, ctm):
    """F.interpolate(c, size=x.shape[2:]) with a symbolic batch: sizes computed from two
    Shapes, [N, C] of one tensor and [H, W] of another. 4 x 5 to 7 x 9 is a ratio no float32
    scale gives exactly, and TVM's importer failed on the sizes' batch entry ("'Var' object
    has no attribute 'value'") until stop 75."""
    def ints(name, values):
        return numpy_helper.from_array(np.array(values, np.int64), name)

    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Shape", ["x"], ["sx"]),
             helper.make_node("Slice", ["sx", "two", "four"], ["hw"]),
             helper.make_node("Shape", ["c"], ["sc"]),
             helper.make_node("Slice", ["sc", "zero", "two"], ["nc"]),
             helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["c", "", "", "sizes"], ["y"], mode=mode,
                              coordinate_transformation_mode=ctm)]
    k = numpy_helper.from_array(
        np.random.default_rng(3).standard_normal((4, 4, 3, 3)).astype(np.float32), "k")
    _agrees(tmp_path, nodes, [k, ints("zero", [0]), ints("two", [2]), ints("four", [4])], 13,
            note="given their spatial sizes, as constants")
