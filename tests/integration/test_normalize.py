"""Graph rewrites cw makes before TVM's importer (cw/compile/normalize.py), on small graphs
written here: what each rewrites, what it leaves, and that the bundle still agrees with
onnxruntime on the original file."""

import onnx
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
