"""Shape inference without the weights' bytes (cw/compile/onnx_shapes.py): the same shapes
as onnx's own inference, and the model given back whole."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cw.compile import onnx_shapes


def _model(ir_4_inputs: bool = False) -> onnx.ModelProto:
    """x [N, 64] @ w [64, 128] + b, reshaped by an integer initializer to [N, 16, 8], scaled by
    a small float one; a local function adds one."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.random((64, 128), dtype=np.float32), "w"),
             numpy_helper.from_array(rng.random(128, dtype=np.float32), "b"),
             numpy_helper.from_array(np.array([0, 16, 8], dtype=np.int64), "shape"),
             numpy_helper.from_array(np.array([0.5], dtype=np.float32), "scale")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16, 8])
    one = helper.make_function("local", "PlusOne", ["a"], ["o"], [
        helper.make_node("Constant", [], ["c"], value_float=1.0),
        helper.make_node("Add", ["a", "c"], ["o"])], [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["h"]),
             helper.make_node("Reshape", ["h", "shape"], ["r"]),
             helper.make_node("Mul", ["r", "scale"], ["s"]),
             helper.make_node("PlusOne", ["s"], ["y"], domain="local")]
    inputs = [x] + ([helper.make_tensor_value_info("w", TensorProto.FLOAT, [64, 128])]
                    if ir_4_inputs else [])
    graph = helper.make_graph(nodes, "g", inputs, [y], inits)
    model = helper.make_model(graph, functions=[one], producer_name="test", opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    model.ir_version = 8
    return model


def test_the_light_model_has_no_weight_bytes_but_keeps_what_shapes_read():
    model = _model()
    light = onnx_shapes.without_weights(model)
    assert {t.name for t in light.graph.initializer} == {"shape", "scale"}
    assert [i.name for i in light.graph.input] == ["x", "w", "b"]
    assert light.ByteSize() < model.ByteSize() / 10
    assert light.producer_name == "test" and [f.name for f in light.functions] == ["PlusOne"]
    assert len(model.graph.initializer) == 4  # the model itself is left alone


@pytest.mark.parametrize("ir_4_inputs", [False, True])
def test_inferred_dims_equal_onnxs_own(ir_4_inputs):
    model = _model(ir_4_inputs)
    ours = onnx_shapes.dims(onnx_shapes.infer(model), model, symbols=True)
    theirs = onnx_shapes.dims(onnx.shape_inference.infer_shapes(model), model, symbols=True)
    assert ours == theirs
    assert ours["r"] == ["N", 16, 8] and ours["y"] == ["N", 16, 8] and ours["w"] == [64, 128]
    assert onnx_shapes.dims(onnx_shapes.infer(model))["r"] == [None, 16, 8]


def test_annotate_gives_the_model_its_shapes_and_keeps_its_weights_and_inputs():
    model = _model(ir_4_inputs=True)
    inferred = onnx.shape_inference.infer_shapes(onnx_shapes.without_weights(model))
    inferred.graph.initializer.append(  # what onnxslim's symbolic inference adds
        numpy_helper.from_array(np.array([3], dtype=np.int64), "computed"))
    weights = [t.SerializeToString() for t in model.graph.initializer]
    annotated = onnx_shapes.annotate(model, inferred)
    assert annotated is model
    assert [t.SerializeToString() for t in model.graph.initializer][:4] == weights
    assert [t.name for t in model.graph.initializer] == ["w", "b", "shape", "scale", "computed"]
    assert [i.name for i in model.graph.input] == ["x", "w"]  # b's stand-in is gone
    assert {v.name for v in model.graph.value_info} >= {"xw", "h", "r", "s"}
    assert model.graph.value_info[-1].type.tensor_type.shape.dim[1].dim_value == 16
    onnx.checker.check_model(model, full_check=True)


def test_annotate_refuses_an_inference_that_changed_the_nodes():
    model = _model()
    inferred = onnx_shapes.without_weights(model)
    del inferred.graph.node[-1]
    with pytest.raises(ValueError, match="nodes"):
        onnx_shapes.annotate(model, inferred)


def test_tvms_checker_call_sees_the_model_without_its_weights_and_still_checks():
    from cw.compile.frontend import _checked_lightly

    original = onnx.checker.check_model
    broken = _model()
    broken.graph.node[0].input[0] = "nowhere"
    with _checked_lightly():
        assert onnx.checker.check_model is not original
        onnx.checker.check_model(_model())
        with pytest.raises(onnx.checker.ValidationError, match="nowhere"):
            onnx.checker.check_model(broken, full_check=True)
    assert onnx.checker.check_model is original


def test_weights_bytes_counts_every_initializer_from_its_dims():
    model = _model()
    # w 64x128 and b 128 float32, shape 3 int64, scale 1 float32
    assert onnx_shapes.weights_bytes(model) == (64 * 128 + 128) * 4 + 3 * 8 + 4
    model.graph.initializer.append(numpy_helper.from_array(np.zeros((2, 5), np.float16), "h"))
    assert onnx_shapes.weights_bytes(model) == (64 * 128 + 128) * 4 + 3 * 8 + 4 + 2 * 5 * 2
