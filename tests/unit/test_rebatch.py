"""The rebatching check decides on facts: graphs built here with and without a baked-in batch."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cw.compile import onnx_load
from cw.compile.rebatch import try_rebatch


def _save(tmp_path, nodes, inits, out_shape):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)
    g = helper.make_graph(nodes, "g", [x], [y], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    return onnx_load.load_onnx(path)


def test_batch_independent_graph_is_rebatched(tmp_path):
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    model = _save(tmp_path, [helper.make_node("MatMul", ["x", "w"], ["y"])], [w], [1, 4, 3])
    assert model.fixed_batch == 1
    ok, why = try_rebatch(model)
    assert ok and "rebatched" in why
    assert model.fixed_batch is None and model.inputs[0][2][0] == onnx_load.BATCH_VAR
    dim = model.model.graph.input[0].type.tensor_type.shape.dim[0]
    assert dim.dim_param == onnx_load.BATCH_VAR


def _reshaped_by(model) -> list:
    graph = model.model.graph
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    return [values[n.input[1]].tolist() for n in graph.node if n.op_type == "Reshape"]


def test_reshape_to_a_fixed_batch_keeps_the_batch(tmp_path):
    """A flatten traced at batch 1 (Reshape to the constant [1, 8]) keeps the input's batch
    instead (0), from an initializer or a Constant node; the check finds that sound."""
    shape = numpy_helper.from_array(np.array([1, 8], np.int64), "shape")
    model = _save(tmp_path, [helper.make_node("Reshape", ["x", "shape"], ["y"])], [shape], [1, 8])
    ok, why = try_rebatch(model)
    assert ok and "the leading 1 of 1 Reshape shape(s) made 0" in why, why
    assert model.fixed_batch is None and _reshaped_by(model) == [[0, 8]]
    constant = helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(
        np.array([1, 2, 4], np.int64)))
    model = _save(tmp_path, [constant, helper.make_node("Reshape", ["x", "s"], ["y"])], [],
                  [1, 2, 4])
    ok, why = try_rebatch(model)
    assert ok and "the leading 1 of 1" in why and _reshaped_by(model) == [[0, 2, 4]]


def test_resize_to_fixed_sizes_keeps_the_batch(tmp_path):
    """An upsampling traced at batch 1 (Resize to the constant sizes [1, 4, 4, 2]) becomes a
    Resize by the scales [1, 1, 2, 2], which name no batch: a batch of 3 is resized as three
    single runs."""
    sizes = numpy_helper.from_array(np.array([1, 4, 4, 2], np.int64), "sizes")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 2])
    graph = helper.make_graph([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"],
                                                mode="nearest")], "g", [x], [y], [sizes])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    model = onnx_load.load_onnx(tmp_path / "m.onnx")
    ok, why = try_rebatch(model)
    assert ok and "1 Resize(s) to sizes [1, ...] made Resizes by the same scales" in why, why
    (resize,) = model.model.graph.node
    values = {t.name: numpy_helper.to_array(t) for t in model.model.graph.initializer}
    assert len(resize.input) == 3 and values[resize.input[2]].tolist() == [1, 1, 2, 2]
    assert "sizes" not in values  # (read by nothing now)


def test_a_leading_1_that_is_not_the_batch_is_left_alone(tmp_path):
    """[1, 4, 2] -> [8] -> [1, 8]: the second Reshape's 1 is not the batch (the first one lost
    it), so 0 there does not help; the graph is judged as it was, and stays at batch 1."""
    flat = numpy_helper.from_array(np.array([8], np.int64), "flat")
    shape = numpy_helper.from_array(np.array([1, 8], np.int64), "shape")
    model = _save(tmp_path, [helper.make_node("Reshape", ["x", "flat"], ["v"]),
                             helper.make_node("Reshape", ["v", "shape"], ["y"])],
                  [flat, shape], [1, 8])
    ok, why = try_rebatch(model)
    assert not ok and "onnxruntime rejects a batch of 3" in why, why
    assert model.fixed_batch == 1 and _reshaped_by(model) == [[8], [1, 8]]


def test_reshape_to_a_fixed_batch_of_2_is_not_rebatched(tmp_path):
    shape = numpy_helper.from_array(np.array([2, 4], np.int64), "shape")
    model = _save(tmp_path, [helper.make_node("Reshape", ["x", "shape"], ["y"])], [shape], [2, 4])
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
