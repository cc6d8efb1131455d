"""The batch size read as a value (cw/compile/batch_values.py; the batch symbolic, as cw loads
it): the forms exporters write for shape arithmetic pass; the forms that make an answer depend
on its batch are named."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cw.compile.batch_values import batch_size_read
from cw.compile.onnx_load import BATCH_VAR


def _i64(name, value):
    return numpy_helper.from_array(np.asarray(value, np.int64), name)


def _model(nodes, inits=(), x_shape=(BATCH_VAR, 4, 6), y_shape=None, y_type=TensorProto.FLOAT):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", y_type, y_shape)], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


N = helper.make_node
BATCH = [N("Shape", ["x"], ["sh"]), N("Gather", ["sh", "zero"], ["b"])]  # x.shape[0]
BATCH_INITS = [_i64("zero", 0)]

SHAPE_ONLY = {
    # x.view(x.size(0), -1)
    "flatten to the batch": (BATCH + [N("Unsqueeze", ["b", "ax"], ["b1"]),
                                      N("Concat", ["b1", "minus1"], ["shape"], axis=0),
                                      N("Reshape", ["x", "shape"], ["y"])],
                             BATCH_INITS + [_i64("ax", [0]), _i64("minus1", [-1])]),
    # a ViT's class token expanded to the batch, then concatenated with x
    "a token expanded to the batch": (
        BATCH + [N("Unsqueeze", ["b", "ax"], ["b1"]), N("Concat", ["b1", "rest"], ["shape"],
                                                        axis=0),
                 N("Expand", ["tok", "shape"], ["t"]), N("Concat", ["t", "x"], ["y"], axis=1)],
        BATCH_INITS + [_i64("ax", [0]), _i64("rest", [1, 6]),
                       numpy_helper.from_array(np.ones((1, 1, 6), np.float32), "tok")]),
    # CLIP's pooling, x[torch.arange(B), idx]: per-row indices, whatever the batch
    "a row per sample by arange": (
        BATCH + [N("Range", ["z", "b", "one"], ["rows"]),
                 N("ArgMax", ["x"], ["col"], axis=1, keepdims=0),
                 N("Gather", ["col", "zero"], ["c0"], axis=1),
                 N("Mul", ["rows", "four"], ["base"]), N("Add", ["base", "c0"], ["flat"]),
                 N("Reshape", ["x", "rows_by_6"], ["xr"]), N("Gather", ["xr", "flat"], ["y"])],
        BATCH_INITS + [_i64("z", 0), _i64("one", 1), _i64("four", 4), _i64("rows_by_6",
                                                                            [-1, 6])]),
    # attention's scale from the head size, Shape(q)[-1]
    "the last axis's size as a value": (
        [N("Shape", ["x"], ["sh"]), N("Gather", ["sh", "last"], ["d"]),
         N("Cast", ["d"], ["df"], to=TensorProto.FLOAT), N("Sqrt", ["df"], ["s"]),
         N("Div", ["x", "s"], ["y"])], [_i64("last", -1)]),
    "a sample shape as a value (Shape's start)": (
        [N("Shape", ["x"], ["sh"], start=1), N("ReduceProd", ["sh"], ["p"], keepdims=0),
         N("Cast", ["p"], ["pf"], to=TensorProto.FLOAT), N("Div", ["x", "pf"], ["y"])], ()),
    "zeros of x's shape": ([N("Shape", ["x"], ["sh"]),
                            N("ConstantOfShape", ["sh"], ["z"]), N("Add", ["x", "z"], ["y"])],
                           ()),
    # torch's expand(-1, ...) : Where(Equal(shape, -1), 1, shape)
    "expand's -1 resolved by Where": (
        [N("Shape", ["x"], ["sh"]), N("Equal", ["sh", "m1"], ["eq"]),
         N("Where", ["eq", "ones", "sh"], ["shape"]), N("Expand", ["x", "shape"], ["y"])],
        [_i64("m1", [-1, -1, -1]), _i64("ones", [1, 1, 1])]),
}

READS_THE_BATCH = {
    "x / x.shape[0]": (BATCH + [N("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
                                N("Div", ["x", "bf"], ["y"])], BATCH_INITS, "Div"),
    "x * x.numel()": ([N("Size", ["x"], ["s"]), N("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
                       N("Mul", ["x", "sf"], ["y"])], (), "Mul"),
    "the last sample, x[x.shape[0] - 1]": (
        BATCH + [N("Sub", ["b", "one"], ["last"]), N("Gather", ["x", "last"], ["g"]),
                 N("Add", ["x", "g"], ["y"])], BATCH_INITS + [_i64("one", 1)], "Gather"),
    "the batch size by a whole shape vector's entry 0, sliced": (
        [N("Shape", ["x"], ["sh"]), N("Slice", ["sh", "s0", "s1"], ["b"]),
         N("Cast", ["b"], ["bf"], to=TensorProto.FLOAT), N("Mul", ["x", "bf"], ["y"])],
        [_i64("s0", [0]), _i64("s1", [1])], "Mul"),
}


@pytest.mark.parametrize("name", SHAPE_ONLY)
def test_shape_arithmetic_is_not_reported(name):
    nodes, inits = SHAPE_ONLY[name]
    model = _model(nodes, inits)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)  # a valid graph
    assert batch_size_read(model) == ""


@pytest.mark.parametrize("name", READS_THE_BATCH)
def test_the_batch_size_as_a_value_is_named(name):
    nodes, inits, op = READS_THE_BATCH[name]
    model = _model(nodes, inits)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)  # a valid graph
    found = batch_size_read(model)
    assert found.startswith(f"{op} ") and "reads the batch size as a value" in found, found


def test_an_output_holding_the_batch_size_is_named():
    model = _model([N("Shape", ["x"], ["y"])], y_shape=[3], y_type=TensorProto.INT64)
    assert batch_size_read(model).startswith("output 'y' holds the batch size")
    # a fixed batch: nothing symbolic to read
    assert batch_size_read(_model([N("Shape", ["x"], ["y"])], x_shape=(1, 4, 6), y_shape=[3],
                                  y_type=TensorProto.INT64)) == ""


def test_a_size_input_of_an_operator_is_shape_arithmetic():
    """AffineGrid's size from x.size() (before cw's rewrite of it) is the batch at work."""
    theta = helper.make_tensor_value_info("theta", TensorProto.FLOAT, [BATCH_VAR, 2, 3])
    graph = helper.make_graph(
        [N("Shape", ["theta"], ["b"], end=1), N("Concat", ["b", "rest"], ["size"], axis=0),
         N("AffineGrid", ["theta", "size"], ["y"])], "g", [theta],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [_i64("rest", [3, 5, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    assert batch_size_read(model) == ""
