"""ONNX files whose weights are stored beside them (cw/compile/external_data.py): compiled
from any working directory, the data covered by the source hash, and a missing or damaged
data file refused in one line."""

import hashlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import convert_model_to_external_data

from cw.engine import run_bundle
from tests.conftest import random_input
from tests.integration.test_bad_input import _nothing_written, _one_error_line


def _save_external(directory, name="m.onnx", data="m.onnx.data"):
    """y = Relu(x @ w + b) * c, w and b external (in `data`), c a Constant node's value stored
    externally too; x [N, 16]."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 24)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "b")
    c = numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "c_value")
    nodes = [helper.make_node("Constant", [], ["c"], value=c),
             helper.make_node("MatMul", ["x", "w"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Mul", ["r", "c"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 24])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    directory.mkdir(parents=True, exist_ok=True)
    convert_model_to_external_data(model, all_tensors_to_one_file=True, location=data,
                                   size_threshold=0, convert_attribute=True)
    onnx.save(model, directory / name)
    stored = onnx.load(directory / name, load_external_data=False)
    assert all(t.data_location == TensorProto.EXTERNAL for t in stored.graph.initializer)
    assert stored.graph.node[0].attribute[0].t.data_location == TensorProto.EXTERNAL
    return directory / name


def test_a_model_with_external_data_compiles_from_another_directory(tmp_path, monkeypatch):
    from cw.compile.compiler import CompileConfig, compile_model

    src = _save_external(tmp_path / "model")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the data file is not in the working directory
    m = compile_model(src, tmp_path / "bundle", CompileConfig(batch_sizes=(1, 4)))
    assert "weights read from m.onnx.data" in m.notes[0], m.notes
    expected = hashlib.sha256(src.read_bytes() + (src.parent / "m.onnx.data").read_bytes())
    assert m.source.sha256 == expected.hexdigest()
    for batch in (1, 3):
        result = run_bundle(tmp_path / "bundle", [random_input((batch, 16), seed=batch)], "cpu",
                            src)
        assert result.relative_error <= 1e-6, (batch, result.relative_error)


def test_a_missing_data_file_is_named(cli, tmp_path):
    src = _save_external(tmp_path)
    (tmp_path / "m.onnx.data").unlink()
    line = _one_error_line(cli("compile", src, "-o", tmp_path / "out"))
    assert "m.onnx.data" in line and "copy m.onnx.data next to m.onnx" in line
    _nothing_written(tmp_path)


def test_a_truncated_data_file_is_refused(cli, tmp_path):
    src = _save_external(tmp_path)
    data = tmp_path / "m.onnx.data"
    data.write_bytes(data.read_bytes()[:100])
    line = _one_error_line(cli("compile", src, "-o", tmp_path / "out"))
    assert "of m.onnx.data, which has 100" in line
    _nothing_written(tmp_path)


@pytest.mark.parametrize("location", ["../outside.data", "/etc/passwd"])
def test_data_outside_the_models_directory_is_refused(cli, tmp_path, location):
    src = _save_external(tmp_path / "model")
    model = onnx.load(src, load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    onnx.save(model, src)
    (tmp_path / "outside.data").write_bytes(bytes(4096))
    line = _one_error_line(cli("compile", src, "-o", tmp_path / "out"))
    assert "outside the model's directory" in line
    _nothing_written(tmp_path)
