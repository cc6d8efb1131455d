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
from tests.integration.test_quantized import _session, _with_outputs


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
