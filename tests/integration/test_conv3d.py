"""3-D convolutions (cw/compile/conv3d.py) run as 2-D ones over their depth taps stacked as
channels, with cw's schedule, and agree with onnxruntime in the forms video and volumetric
models use."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cw.compile.compiler import CompileConfig, compile_model
from cw.engine import LocalModel
from cw.verify import max_relative_error, onnx_reference
from tests.conftest import random_input

SIZE = (6, 9, 10)  # depth, height, width


def _conv(name, x, c, oc, kernel, seed, bias=True, **attrs):
    """A Conv node on `x` and its initializers."""
    groups = attrs.get("group", 1)
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(
        (rng.standard_normal((oc, c // groups, *kernel)) / np.sqrt(c * np.prod(kernel) / groups))
        .astype(np.float32), name + "_w")]
    inputs = [x, name + "_w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(oc).astype(np.float32),
                                             name + "_b"))
        inputs.append(name + "_b")
    return helper.make_node("Conv", inputs, [name], **attrs), inits


def _model(path, c, first, second, between="Relu"):
    """x -> conv `first` -> `between` -> conv `second` -> y; each a (out channels, kernel,
    attributes) triple."""
    oc1, k1, a1 = first
    oc2, k2, a2 = second
    conv1, w1 = _conv("c1", "x", c, oc1, k1, 1, kernel_shape=k1, **a1)
    conv2, w2 = _conv("y", "m", oc1, oc2, k2, 2, bias=False, kernel_shape=k2, **a2)
    mid = (helper.make_node("MaxPool", ["c1"], ["m"], kernel_shape=[1, 2, 2], strides=[1, 2, 2])
           if between == "MaxPool" else helper.make_node(between, ["c1"], ["m"]))
    graph = helper.make_graph(
        [conv1, mid, conv2], "video",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, *SIZE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], w1 + w2)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return path


def _agrees_with_onnxruntime(bundle, onnx_path, c):
    """The bundle (compiled at 1 and 4) against onnxruntime at batch 1 and 3 (padded to 4)."""
    model = LocalModel(bundle)
    for batch in (1, 3):
        x = random_input((batch, c, *SIZE), seed=batch)
        out, expected = model.run([x])[0], onnx_reference(onnx_path, [x])[0]
        assert out.shape == expected.shape
        assert max_relative_error(out, expected) < 1e-5, batch


PAD1 = {"pads": [1] * 6}


@pytest.mark.parametrize("c,first,second,between", [
    # C3D: 3 x 3 x 3 everywhere, a spatial max pool between
    (3, (16, [3, 3, 3], PAD1), (16, [3, 3, 3], {"pads": [1] * 6, "strides": [2, 2, 2]}),
     "MaxPool"),
    # R(2+1)D: a spatial 1 x 3 x 3, then a temporal 3 x 1 x 1 on channels in no block (each
    # tap's padded to one)
    (8, (12, [1, 3, 3], {"pads": [0, 1, 1, 0, 1, 1]}),
     (8, [3, 1, 1], {"pads": [1, 0, 0, 1, 0, 0]}), "Relu"),
    # a causal temporal convolution (padded in front only), dilated in depth; then strided
    # in depth alone, with output channels in no block
    (8, (16, [3, 3, 3], {"pads": [4, 1, 1, 0, 1, 1], "dilations": [2, 1, 1]}),
     (5, [2, 3, 3], {"pads": [0, 1, 1, 0, 1, 1], "strides": [2, 1, 1]}), "Sigmoid"),
    # X3D's channel-wise 3 x 3 x 3, and a grouped one
    (16, (16, [3, 3, 3], {"pads": [1] * 6, "group": 16}),
     (16, [3, 3, 3], {"pads": [1] * 6, "group": 2}), "Relu"),
])
def test_3d_convolutions_run_as_2d_ones_and_agree_with_onnxruntime(tmp_path, c, first, second,
                                                                   between):
    onnx_path = _model(tmp_path / "m.onnx", c, first, second, between)
    m = compile_model(onnx_path, tmp_path / "b", CompileConfig(batch_sizes=(1, 4)))
    assert "2 3-D convolutions as 2-D ones, the depth taps stacked as channels" in m.notes, \
        m.notes
    assert not any("kept in NCHW" in n for n in m.notes), m.notes
    # TVM's own conv3d is plain loops: every convolution in cw's schedule or none is
    assert m.kernels[0].kernels_conv_scheduled == 2, m.kernels[0]
    _agrees_with_onnxruntime(tmp_path / "b", onnx_path, c)


@pytest.mark.parametrize("kernel,attrs", [
    ([2, 2, 2], {"strides": [2, 2, 2]}),                            # a 3-D U-Net's upsampling
    ([4, 4, 4], {"strides": [2, 2, 2], "pads": [1] * 6}),           # overlapping windows (GANs)
    ([3, 3, 3], {"strides": [2, 2, 2], "pads": [1] * 6, "output_padding": [1, 1, 1]}),
    ([3, 1, 1], {"strides": [1, 1, 1], "pads": [1, 0, 0, 1, 0, 0]}),  # stride 1: a flipped conv
])
def test_3d_transposed_convolutions_agree_with_onnxruntime(tmp_path, kernel, attrs):
    c, oc = 16, 8
    conv, inits = _conv("c1", "x", c, c, [3, 3, 3], 1, kernel_shape=[3, 3, 3], pads=[1] * 6)
    rng = np.random.default_rng(3)
    inits += [numpy_helper.from_array(rng.standard_normal((c, oc, *kernel)).astype(np.float32),
                                      "t_w"),
              numpy_helper.from_array(rng.standard_normal(oc).astype(np.float32), "t_b")]
    nodes = [conv, helper.make_node("Relu", ["c1"], ["r"]),
             helper.make_node("ConvTranspose", ["r", "t_w", "t_b"], ["y"], kernel_shape=kernel,
                              **attrs)]
    graph = helper.make_graph(
        nodes, "upsample", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                          ["N", c, *SIZE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx_path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), onnx_path)
    m = compile_model(onnx_path, tmp_path / "b", CompileConfig(batch_sizes=(1, 4)))
    assert ("2 3-D convolutions as 2-D ones, the depth taps stacked as channels (1 of them "
            "transposed ones, as convolutions and a depth-to-space)") in m.notes, m.notes
    assert m.kernels[0].kernels_conv_scheduled == 2, m.kernels[0]
    _agrees_with_onnxruntime(tmp_path / "b", onnx_path, c)
