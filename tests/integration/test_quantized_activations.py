"""onnxruntime's quantized operators between the products (QLinearSigmoid, QLinearLeakyRelu,
QLinearMul, QLinearConcat, QLinearAveragePool, QLinearSoftmax; cw/compile/quantized_activations.py)
give its integers, in the rewritten graph and through a compiled CPU bundle. The graph is the
zoo's int8_activations (model_zoo/quantized.py); tests/gpu runs its CUDA bundle."""

import copy

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cw.compile import quantized
from model_zoo.quantized import QUANTIZED_TENSORS, int8_activations
from tests.integration.test_quantized import _session, _static_quantized, _with_outputs


def activation_input(batch: int, seed: int) -> np.ndarray:
    """A wide range: the sigmoid saturates at both ends, the quantizer clips."""
    return (np.random.default_rng(seed).standard_normal((batch, 8, 6, 6)) * 3).astype(
        np.float32)


@pytest.mark.parametrize("onnx_type", [TensorProto.UINT8, TensorProto.INT8],
                         ids=["uint8", "int8"])
def test_every_tensor_equals_onnxruntimes_integers(onnx_type):
    model = int8_activations(onnx_type=onnx_type)
    rewritten = copy.deepcopy(model)
    note = quantized.rewrite(rewritten, 13)
    assert "2 QLinearMul" in note and "2 QLinearSoftmax" in note, note
    assert not any(quantized.is_rewritten(n) for n in rewritten.graph.node)
    names = QUANTIZED_TENSORS
    ref = _session(_with_outputs(model, names, lambda n: onnx_type))
    ours = _session(_with_outputs(rewritten, names, lambda n: TensorProto.FLOAT))
    for seed in range(3):
        x = activation_input(4, seed)
        expected = dict(zip(names, ref.run(names, {"input": x})))
        got = dict(zip(names, ours.run(names, {"input": x})))
        for name in names:
            assert np.array_equal(got[name], expected[name].astype(np.float32)), (
                name, int((got[name] != expected[name]).sum()))
    # not trivially saturated: every tensor holds a spread of integers
    assert all(len(np.unique(expected[n])) > 10 for n in names), {
        n: len(np.unique(expected[n])) for n in names}
    # the tables' functions are computed elementwise (a lookup has no layout rule in TVM),
    # but for the leaky ReLU: its scales put 21 of its entries exactly at .5 (0.05 * 0.1 /
    # 0.03 = 1/6 a step), where any other float order could round the other way
    tables = {t.name for t in rewritten.graph.initializer}
    assert [n.name for n in rewritten.graph.node
            if n.op_type == "Gather" and n.input[0] in tables] == ["leaky"]


@pytest.mark.parametrize("changed,gathers", [(0, 0), (3, 0), (40, 1)],
                         ids=["the-formula", "three-entries-corrected", "a-lookup"])
def test_a_table_is_computed_exactly_whatever_the_formula_rounds(changed, gathers):
    """mapped(): onnxruntime's sigmoid table with `changed` entries moved by one step (as an
    approximation of its own could round them) still comes out exactly: a few corrected
    entries beside the formula, a lookup past the limit."""
    from cw.compile import quantized_activations as qa

    x_scale, x_zero, y_scale, y_zero = (np.float32(0.05), np.uint8(128), np.float32(1 / 256),
                                        np.uint8(0))
    table = qa.onnxruntime_table("QLinearSigmoid", {}, 0, {1: x_scale, 2: x_zero, 3: y_scale,
                                                           4: y_zero}, 5, TensorProto.UINT8,
                                 TensorProto.UINT8)
    moved = np.random.default_rng(changed).choice(np.arange(20, 236), changed, replace=False)
    table[moved] += np.where(table[moved] < 255, 1, -1).astype(np.float32)
    graph = helper.make_graph([], "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    r = quantized._Rewriter(model, 13)
    qa.mapped(r, "x", table, TensorProto.UINT8, TensorProto.UINT8, "y", qa._sigmoid, x_scale,
              x_zero, y_scale, y_zero)
    model.graph.node.extend(r.nodes)
    model.graph.initializer.extend(r.new_initializers)
    got = _session(model).run(None, {"x": np.arange(256, dtype=np.float32)})[0]
    np.testing.assert_array_equal(got, table)
    assert sum(n.op_type == "Gather" for n in r.nodes) == gathers
    assert sum(n.op_type == "Equal" for n in r.nodes) >= (changed if not gathers else 0)


def test_a_compiled_bundle_gives_onnxruntimes_integers(tmp_path, zoo_onnx):
    from cw.compile.compiler import CompileConfig, compile_model
    from cw.engine import LocalModel

    src = zoo_onnx("int8_activations")
    # one batch size: batches 1 and 3 run padded to 4
    compile_model(src, tmp_path / "bundle", CompileConfig(batch_sizes=(4,)))
    bundle = LocalModel(tmp_path / "bundle", "cpu")
    reference = _session(onnx.load(src))
    for batch, seed in ((1, 5), (3, 6)):
        x = activation_input(batch, seed)
        for got, expected in zip(bundle.run([x]), reference.run(None, {"input": x})):
            assert np.array_equal(got, expected), int((got != expected).sum())


def test_interpolating_a_quantized_tensor_is_refused_in_one_line():
    model = int8_activations()
    resize = helper.make_node("Resize", ["xq", "", "scales"], ["up"], mode="linear")
    model.graph.initializer.append(numpy_helper.from_array(
        np.array([1, 1, 2, 2], np.float32), "scales"))
    model.graph.node.insert(1, resize)
    with pytest.raises(Exception, match="interpolates .linear. a quantized tensor"):
        quantized.rewrite(model, 13)


def _conv_net(activation: str) -> onnx.ModelProto:
    """Three convolutions (3x3, 1x1, 3x3), each followed by a SiLU (x * sigmoid(x): YOLOX's
    pattern) or by a BatchNormalization and a ReLU (ultraface's, as exported: the
    normalizations not folded into the convolutions)."""
    rng = np.random.default_rng(0)
    inits, nodes, x, c = [], [], "input", 3

    def constant(name, value):
        inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    for i, (oc, k) in enumerate(((16, 3), (16, 1), (16, 3))):
        w = constant(f"w{i}", rng.standard_normal((oc, c, k, k)) / np.sqrt(c * k * k))
        b = constant(f"b{i}", rng.standard_normal(oc) * 0.1)
        nodes.append(helper.make_node("Conv", [x, w, b], [f"c{i}"], pads=[k // 2] * 4))
        if activation == "silu":
            nodes += [helper.make_node("Sigmoid", [f"c{i}"], [f"s{i}"]),
                      helper.make_node("Mul", [f"c{i}", f"s{i}"], [f"y{i}"])]
        else:
            stats = [constant(f"{n}{i}", v) for n, v in (
                ("gamma", rng.uniform(0.5, 2, oc)), ("beta", rng.standard_normal(oc) * 0.2),
                ("mean", rng.standard_normal(oc) * 0.3), ("var", rng.uniform(0.2, 3, oc)))]
            nodes += [helper.make_node("BatchNormalization", [f"c{i}", *stats], [f"n{i}"]),
                      helper.make_node("Relu", [f"n{i}"], [f"y{i}"])]
        x, c = f"y{i}", oc
    graph = helper.make_graph(
        nodes, f"{activation}_convs", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                     ["N", 3, 24, 24])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", 16, 24, 24])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("activation,operators", [
    ("silu", {"QLinearSigmoid": 3, "QLinearMul": 3}),
    ("batchnorm_relu", {"BatchNormalization": 3, "DequantizeLinear": 3}),
])
def test_int8_convolution_layers_compile_and_give_onnxruntimes_integers(tmp_path, activation,
                                                                         operators):
    """Through quantize_static (QOperator), as YOLOX and ultraface come out of it.
    - silu: QLinearConv, QLinearSigmoid, QLinearMul. The sigmoid's formula lands in the
      convolution's vectorized epilogue beside the roundings of the requantizations; with
      TVM's own rounding (which its vectorizer cannot vectorize) that kernel failed to build
      ("Let cannot bind the same var to two different values").
    - batchnorm_relu: the quantizer leaves each BatchNormalization in float between a
      DequantizeLinear and a QuantizeLinear; TVM's order of its arithmetic put values on the
      other side of a quantization step (ultraface: 0.0394 off)."""
    from cw.compile.compiler import CompileConfig, compile_model
    from cw.engine import LocalModel
    from cw.verify import onnx_reference

    onnx.save(_conv_net(activation), tmp_path / "float.onnx")
    src = _static_quantized(tmp_path / "float.onnx", tmp_path / "int8.onnx", (3, 24, 24),
                            "QOperator")
    ops = [n.op_type for n in onnx.load(src).graph.node]
    assert ops.count("QLinearConv") == 3 and all(
        ops.count(op) == n for op, n in operators.items()), ops
    compile_model(src, tmp_path / "bundle", CompileConfig(batch_sizes=(1,)))
    bundle = LocalModel(tmp_path / "bundle", "cpu")
    for seed in (1, 2, 3):
        x = (np.random.default_rng(seed).standard_normal((1, 3, 24, 24)) * 2).astype(np.float32)
        got, expected = bundle.run([x])[0], onnx_reference(src, [x])[0]
        assert np.array_equal(got, expected), (seed, int((got != expected).sum()))
