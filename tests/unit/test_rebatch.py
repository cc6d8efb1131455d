"""The rebatching check decides on facts: graphs built here with and without a baked-in batch."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cw.compile import frontend
from cw.compile.rebatch import try_rebatch


def _save(tmp_path, nodes, inits, out_shape):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)
    g = helper.make_graph(nodes, "g", [x], [y], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    return frontend.load_onnx(path)


def test_batch_independent_graph_is_rebatched(tmp_path):
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    model = _save(tmp_path, [helper.make_node("MatMul", ["x", "w"], ["y"])], [w], [1, 4, 3])
    assert model.fixed_batch == 1
    ok, why = try_rebatch(model)
    assert ok and "rebatched" in why
    assert model.fixed_batch is None and model.inputs[0][2][0] == frontend.BATCH_VAR
    dim = model.model.graph.input[0].type.tensor_type.shape.dim[0]
    assert dim.dim_param == frontend.BATCH_VAR


def test_reshape_to_a_fixed_batch_is_not_rebatched(tmp_path):
    shape = numpy_helper.from_array(np.array([1, 8], np.int64), "shape")
    model = _save(tmp_path, [helper.make_node("Reshape", ["x", "shape"], ["y"])], [shape], [1, 8])
    ok, why = try_rebatch(model)
    assert not ok and "batch of 3" in why
    assert model.fixed_batch == 1


def test_batch_mixing_graph_is_not_rebatched(tmp_path):
    # y = x - mean over the batch axis: fine for batch 1 (zeros), wrong for a real batch
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=1),
             helper.make_node("Sub", ["x", "m"], ["y"])]
    model = _save(tmp_path, nodes, [], [1, 4, 2])
    ok, why = try_rebatch(model)
    assert not ok and "differs from 3 batch-1 runs" in why
