"""onnxruntime's quantized operators between the products (QLinearSigmoid, QLinearLeakyRelu,
QLinearMul, QLinearConcat, QLinearAveragePool, QLinearSoftmax; cw/compile/quantized_activations.py)
give its integers, in the rewritten graph and through a compiled CPU bundle."""

import copy

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cw.compile import quantized
from tests.integration.test_quantized import _session, _with_outputs

# every quantized tensor of the net, in order
TENSORS = ["xq", "sig", "leaky", "mul", "mul_c", "pool", "cat", "soft13", "soft11"]


def _activation_net(onnx_type: int) -> onnx.ModelProto:
    """x → Quantize → Sigmoid, LeakyRelu → their product → times a per-channel constant →
    3x3 average pool → concat of the pool and the sigmoid (each requantized) and x (as it is)
    → softmax over the channels (opset 13) and over each map (opset 11), both
    dequantized. Batch symbolic."""
    signed = onnx_type == TensorProto.INT8
    dtype, shift = (np.int8, -128) if signed else (np.uint8, 0)
    inits = {}

    def q(name, scale, zero):
        """The scale and zero point of tensor `name` (defined where first named)."""
        inits.setdefault(name + "_s", numpy_helper.from_array(np.float32(scale), name + "_s"))
        inits.setdefault(name + "_z", numpy_helper.from_array(np.array(zero + shift, dtype),
                                                              name + "_z"))
        return [name + "_s", name + "_z"]

    def node(op, inputs, output, **attrs):
        return helper.make_node(op, inputs, [output], domain="com.microsoft", **attrs)

    rng = np.random.default_rng(3)
    c = rng.integers(0, 256, (1, 8, 1, 1)) + shift
    inits["c"] = numpy_helper.from_array(c.astype(dtype), "c")
    nodes = [
        helper.make_node("QuantizeLinear", ["x", *q("xq", 0.05, 128)], ["xq"]),
        node("QLinearSigmoid", ["xq", *q("xq", 0.05, 128), *q("sig", 1 / 256, 0)], "sig"),
        node("QLinearLeakyRelu", ["xq", *q("xq", 0.05, 128), *q("leaky", 0.03, 100)], "leaky",
             alpha=0.1),
        node("QLinearMul", ["sig", *q("sig", 1 / 256, 0), "leaky", *q("leaky", 0.03, 100),
                            *q("mul", 0.0021, 90)], "mul"),
        node("QLinearMul", ["mul", *q("mul", 0.0021, 90), "c", *q("c", 0.013, 119),
                            *q("mul_c", 0.0025, 131)], "mul_c"),
        node("QLinearAveragePool", ["mul_c", *q("mul_c", 0.0025, 131), *q("pool", 0.0019, 127)],
             "pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0),
        # quantized as x: x goes in as it is, the pool and the sigmoid are requantized
        node("QLinearConcat", [*q("xq", 0.05, 128), "pool", *q("pool", 0.0019, 127),
                               "xq", *q("xq", 0.05, 128), "sig", *q("sig", 1 / 256, 0)], "cat",
             axis=1),
        node("QLinearSoftmax", ["cat", *q("xq", 0.05, 128), *q("soft13", 1 / 256, 0)],
             "soft13", axis=1, opset=13),
        node("QLinearSoftmax", ["cat", *q("xq", 0.05, 128), *q("soft11", 1 / 256, 0)],
             "soft11", axis=2, opset=11),
        helper.make_node("DequantizeLinear", ["soft13", *q("soft13", 1 / 256, 0)], ["y13"]),
        helper.make_node("DequantizeLinear", ["soft11", *q("soft11", 1 / 256, 0)], ["y11"]),
    ]
    shape = ["N", 8, 6, 6]
    graph = helper.make_graph(
        nodes, "activations", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y13", TensorProto.FLOAT, ["N", 24, 6, 6]),
         helper.make_tensor_value_info("y11", TensorProto.FLOAT, ["N", 24, 6, 6])],
        list(inits.values()))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                   helper.make_opsetid("com.microsoft", 1)])


def _x(batch: int, seed: int) -> np.ndarray:
    # a wide range: the sigmoid saturates at both ends, the quantizer clips
    return (np.random.default_rng(seed).standard_normal((batch, 8, 6, 6)) * 3).astype(
        np.float32)


@pytest.mark.parametrize("onnx_type", [TensorProto.UINT8, TensorProto.INT8],
                         ids=["uint8", "int8"])
def test_every_tensor_equals_onnxruntimes_integers(onnx_type):
    model = _activation_net(onnx_type)
    rewritten = copy.deepcopy(model)
    note = quantized.rewrite(rewritten, 13)
    assert "2 QLinearMul" in note and "2 QLinearSoftmax" in note, note
    assert not any(quantized.is_rewritten(n) for n in rewritten.graph.node)
    ref = _session(_with_outputs(model, TENSORS, lambda n: onnx_type))
    ours = _session(_with_outputs(rewritten, TENSORS, lambda n: TensorProto.FLOAT))
    for seed in range(3):
        x = _x(4, seed)
        expected = dict(zip(TENSORS, ref.run(TENSORS, {"x": x})))
        got = dict(zip(TENSORS, ours.run(TENSORS, {"x": x})))
        for name in TENSORS:
            assert np.array_equal(got[name], expected[name].astype(np.float32)), (
                name, int((got[name] != expected[name]).sum()))
    # not trivially saturated: every tensor holds a spread of integers
    assert all(len(np.unique(expected[n])) > 10 for n in TENSORS), {
        n: len(np.unique(expected[n])) for n in TENSORS}


def test_a_compiled_bundle_gives_onnxruntimes_integers(tmp_path):
    from cw.compile.compiler import CompileConfig, compile_model
    from cw.engine import LocalModel

    src = tmp_path / "activations.onnx"
    onnx.save(_activation_net(TensorProto.UINT8), src)
    # one batch size: batches 1 and 3 run padded to 4
    compile_model(src, tmp_path / "bundle", CompileConfig(batch_sizes=(4,)))
    bundle = LocalModel(tmp_path / "bundle", "cpu")
    reference = _session(onnx.load(src))
    for batch, seed in ((1, 5), (3, 6)):
        x = _x(batch, seed)
        for got, expected in zip(bundle.run([x]), reference.run(None, {"x": x})):
            assert np.array_equal(got, expected), int((got != expected).sum())


def test_interpolating_a_quantized_tensor_is_refused_in_one_line():
    model = _activation_net(TensorProto.UINT8)
    resize = helper.make_node("Resize", ["xq", "", "scales"], ["up"], mode="linear")
    model.graph.initializer.append(numpy_helper.from_array(
        np.array([1, 1, 2, 2], np.float32), "scales"))
    model.graph.node.insert(1, resize)
    with pytest.raises(Exception, match="interpolates .linear. a quantized tensor"):
        quantized.rewrite(model, 13)
