"""Graph rewrites cw makes before TVM's importer (cw/compile/normalize.py), on small graphs
written here: what each rewrites, what it leaves, and that the bundle still agrees with
onnxruntime on the original file."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from cw.engine import run_bundle
from tests.conftest import random_input


def _layer_norm_like(path):
    """x -> x^2 (LayerNorm's variance), x^3 and 2^x, summed: only the square is a product."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])
    inits = [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
             helper.make_tensor("three", TensorProto.FLOAT, [], [3.0])]
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]),
             helper.make_node("Pow", ["x", "three"], ["cube"]),
             helper.make_node("Pow", ["two", "x"], ["exp2"]),  # the base is the constant
             helper.make_node("Add", ["sq", "cube"], ["s"]),
             helper.make_node("Add", ["s", "exp2"], ["y"])]
    graph = helper.make_graph(nodes, "powers", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def test_a_square_becomes_a_product_and_other_powers_stay(tmp_path):
    from cw.compile.compiler import CompileConfig, compile_model

    src = tmp_path / "powers.onnx"
    _layer_norm_like(src)
    out = tmp_path / "bundle"
    m = compile_model(src, out, CompileConfig(batch_sizes=(1, 4)))
    assert "normalize: 1 Pow(x, 2) as Mul(x, x)" in m.notes, m.notes
    for batch in (1, 3):
        x = random_input((batch, 8), seed=batch)
        result = run_bundle(out, [x], "cpu", src)
        assert result.relative_error <= 1e-6, (batch, result.relative_error)


def _branching(path, condition: str):
    """y = Relu(x) if the condition holds else Neg(x), the condition on x's shape or values:
    "rank" (x has 2 axes: decided once the shapes are fixed; onnxslim leaves it, as it left
    Silero VAD's), "batch" (x.shape[0] == 1) or "values" (sum(x) > 0: only running the model
    decides)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])
    inits = [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
             helper.make_tensor("one", TensorProto.INT64, [1], [1]),
             helper.make_tensor("two", TensorProto.INT64, [], [2]),
             helper.make_tensor("axis", TensorProto.INT64, [1], [0])]
    if condition == "values":
        nodes = [helper.make_node("ReduceSum", ["x"], ["sum"], keepdims=0),
                 helper.make_node("Greater", ["sum", "zero"], ["cond"])]
    elif condition == "rank":
        nodes = [helper.make_node("Shape", ["x"], ["shape"]),
                 helper.make_node("Size", ["shape"], ["rank"]),
                 helper.make_node("Equal", ["rank", "two"], ["cond"])]
    else:
        nodes = [helper.make_node("Shape", ["x"], ["shape"]),
                 helper.make_node("Gather", ["shape", "axis"], ["dim"]),
                 helper.make_node("Equal", ["dim", "one"], ["cond"])]
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["out"])], "then", [], [out])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["out"])], "else", [], [out])
    nodes.append(helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then,
                                  else_branch=other))
    graph = helper.make_graph(nodes, "branching", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def test_an_if_the_shapes_decide_is_folded_into_its_branch(tmp_path):
    from cw.compile.compiler import CompileConfig, compile_model

    src = tmp_path / "rank.onnx"
    _branching(src, "rank")
    out = tmp_path / "bundle"
    m = compile_model(src, out, CompileConfig(batch_sizes=(1, 4)))
    assert "normalize: 1 If node folded: the input shapes decide its branch" in m.notes
    for batch in (1, 3):
        x = random_input((batch, 8), seed=batch)
        result = run_bundle(out, [x], "cpu", src)
        assert result.relative_error == 0, (batch, result.relative_error)
        assert (result.outputs[0] >= 0).all()  # the then branch: Relu


@pytest.mark.parametrize("condition,why", [
    ("values", "it reads the values of input 'x'"),
    ("batch", "it depends on the batch size"),
])
def test_an_if_only_running_decides_is_refused_in_one_line(cli, tmp_path, condition, why):
    src = tmp_path / f"{condition}.onnx"
    _branching(src, condition)
    r = cli("compile", src, "-o", tmp_path / "b")
    assert r.code == 3, r.err
    lines = [line for line in r.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "If 'branch' of" in lines[0] and why in lines[0], r.err
    assert "cw schedules only static DNNs" in lines[0]
    assert not (tmp_path / "b").exists()


def _whole_axis_slice(path):
    """x[:, 2:6] written as onnxslim merges slices: over both axes, the batch's to INT64_MAX."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    inits = [helper.make_tensor("starts", TensorProto.INT64, [2], [0, 2]),
             helper.make_tensor("ends", TensorProto.INT64, [2], [2**63 - 1, 6]),
             helper.make_tensor("axes", TensorProto.INT64, [2], [0, 1])]
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["s"]),
             helper.make_node("MatMul", ["s", "w"], ["y"])]
    inits.append(helper.make_tensor("w", TensorProto.FLOAT, [4, 4], [0.5] * 16))
    graph = helper.make_graph(nodes, "sliced", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def test_a_slice_over_the_whole_batch_axis_slices_only_the_others(tmp_path):
    from cw.compile.compiler import CompileConfig, compile_model

    src = tmp_path / "sliced.onnx"
    _whole_axis_slice(src)
    out = tmp_path / "bundle"
    m = compile_model(src, out, CompileConfig(batch_sizes=(1, 4)))
    assert "normalize: whole-axis entries dropped from 1 Slice node" in m.notes, m.notes
    for batch in (1, 3):
        result = run_bundle(out, [random_input((batch, 8), seed=batch)], "cpu", src)
        assert result.relative_error <= 1e-6, (batch, result.relative_error)


def test_a_loop_is_refused_in_one_line(cli, tmp_path):
    """A Loop runs its body as many times as a value says: no fixed shape decides that."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Relu", ["v_in"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, None)])
    inits = [helper.make_tensor("trips", TensorProto.INT64, [], [3]),
             helper.make_tensor("true", TensorProto.BOOL, [], [True])]
    graph = helper.make_graph([helper.make_node("Loop", ["trips", "true", "x"], ["y"],
                                                name="loop", body=body)],
                              "looping", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    src = tmp_path / "loop.onnx"
    onnx.save(model, src)
    r = cli("compile", src, "-o", tmp_path / "b")
    assert r.code == 3, r.err
    lines = [line for line in r.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Loop at node 'loop'" in lines[0], r.err
    assert "data-dependent execution time" in lines[0] and not (tmp_path / "b").exists()


@pytest.mark.parametrize("flag,text", [
    ("--input-value=x=1", "--input-value x gives 1 value(s); input 'x' of branching.onnx has "
                          "shape ['N', 8]"),
    ("--input-value=x", "invalid --input-value 'x'"),
    ("--input-value=y=1", "--input-value names no input of branching.onnx: y"),
])
def test_a_bad_input_value_is_refused_in_one_line(cli, tmp_path, flag, text):
    src = tmp_path / "branching.onnx"
    _branching(src, "rank")
    r = cli("compile", src, "-o", tmp_path / "b", flag)
    assert r.code == 2, r.err
    lines = [line for line in r.err.splitlines() if line.strip()]
    assert len(lines) == 1 and text in lines[0], r.err


def test_a_scalar_input_names_the_flag_that_fixes_it(cli, tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    scale = helper.make_tensor_value_info("scale", TensorProto.FLOAT, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "scale"], ["y"])], "scaled",
                              [x, scale], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    src = tmp_path / "scaled.onnx"
    onnx.save(model, src)
    r = cli("compile", src, "-o", tmp_path / "b")
    assert r.code == 3 and "--input-value scale=VALUE" in r.err, r.err
    out = tmp_path / "fixed"
    r = cli("compile", src, "-o", out, "--input-value", "scale=0.5", "--batch-sizes", "1,4")
    assert r.code == 0, r.err
    x = random_input((3, 8), seed=3)
    result = run_bundle(out, [x], "cpu", src)
    assert result.relative_error == 0 and np.array_equal(result.outputs[0], x * 0.5)
