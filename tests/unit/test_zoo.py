import hashlib

import numpy as np
import onnx
import pytest

import model_zoo
from cw.errors import UsageError
from model_zoo.builder import seeded_uniform

# Pinned so that a change of weights or graph on any machine or library version shows up here.
GOLDEN_SHA256 = {
    "mlp": "ae2a8ea4b293f847347c24e84098616c51d0c6218bc97fa5d4d81fef7debf8c9",
    "small_cnn": "9cad195a431d778943c991774a62af173f02f4582cc0ab7194a5d71aa3c1e4a0",
    "resnet18": "58f043b3a94fabfa7878b121df9655cf4cf4524a8d3fe30466a79b7b030fb55a",
}
REQUIRED = {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnet50_v2",
            "mobilenet_v2", "densenet121", "inception_v3", "mlp", "small_cnn"}


def test_zoo_has_the_required_models():
    assert REQUIRED <= set(model_zoo.MODELS)


@pytest.mark.parametrize("name", [n for n, e in model_zoo.MODELS.items() if e.published_mb])
def test_weight_bytes_within_one_percent_of_published(name):
    entry = model_zoo.get(name)
    model = model_zoo.build(name)
    learned_mb = model_zoo.learned_bytes(model) / 1e6
    assert abs(learned_mb / entry.published_mb - 1) <= 0.01, (learned_mb, entry.published_mb)
    # running statistics come on top, never instead
    assert model_zoo.weight_bytes(model) >= model_zoo.learned_bytes(model)


@pytest.mark.parametrize("name", sorted(GOLDEN_SHA256))
def test_export_is_byte_identical_and_pinned(name, tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    model_zoo.export(name, a)
    model_zoo.export(name, b)
    assert a.read_bytes() == b.read_bytes()
    assert hashlib.sha256(a.read_bytes()).hexdigest() == GOLDEN_SHA256[name]


def test_batch_dimension_symbolic_by_default_and_fixable():
    dyn = model_zoo.build("small_cnn")
    dim = dyn.graph.input[0].type.tensor_type.shape.dim[0]
    assert dim.dim_param == "N" and not dim.HasField("dim_value")
    fixed = model_zoo.build("small_cnn", batch=2)
    assert fixed.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2
    onnx.checker.check_model(fixed)


def test_unknown_name_lists_valid_ones():
    with pytest.raises(UsageError) as e:
        model_zoo.get("resnet9000")
    assert "resnet50" in e.value.hint and "mlp" in e.value.hint


def test_seeded_uniform_is_a_function_of_key_and_in_range():
    a = seeded_uniform("k", (1000,), -2.0, 3.0)
    assert np.array_equal(a, seeded_uniform("k", (1000,), -2.0, 3.0))
    assert not np.array_equal(a, seeded_uniform("k2", (1000,), -2.0, 3.0))
    assert a.dtype == np.float32 and a.min() >= -2.0 and a.max() < 3.0
    assert abs(float(a.mean()) - 0.5) < 0.2  # uniform on [-2, 3)


@pytest.mark.parametrize("name", ["mlp", "small_cnn", "mobilenet_v2"])
def test_zoo_models_run_in_onnxruntime_with_sane_outputs(name):
    import onnxruntime as ort

    entry = model_zoo.get(name)
    session = ort.InferenceSession(model_zoo.build(name).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((2, *entry.input_shape)).astype(np.float32)
    (y,) = session.run(None, {"input": x})
    assert y.shape[0] == 2 and np.isfinite(y).all()
    assert 1e-3 < float(np.abs(y).max()) < 1e3  # neither vanished nor exploded
    assert not np.allclose(y[0], y[1])  # depends on the input


def test_a_bert_takes_token_ids_and_its_answer_depends_on_them():
    import onnxruntime as ort

    entry = model_zoo.get("small_bert")
    assert entry.input_dtype == "int64" and entry.index_limit == 1000
    session = ort.InferenceSession(model_zoo.build("small_bert").SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    ids = np.random.default_rng(0).integers(0, entry.index_limit, (2, *entry.input_shape))
    (y,) = session.run(None, {"input_ids": ids})
    assert y.shape == (2, *entry.output_shape) and np.isfinite(y).all()
    assert not np.allclose(y[0], y[1])


def test_cw_zoo_list_names_every_model_with_its_input(cli):
    import json

    r = cli("zoo", "list", "--json")
    assert r.code == 0, r.err
    rows = {row["name"]: row for row in json.loads(r.out)}
    assert set(rows) == set(model_zoo.MODELS)
    assert rows["resnet50"]["input"] == [3, 224, 224]
    assert rows["inception_v3"]["input"] == [3, 299, 299]
    assert rows["bert_base"]["input"] == [128] and rows["bert_base"]["input_dtype"] == "int64"
    table = cli("zoo", "list")
    assert table.code == 0
    assert all(name in table.out for name in model_zoo.MODELS)
    assert "N×3×299×299" in table.out and "N×128 int64" in table.out


@pytest.mark.parametrize("batch", ["0", "-1", "two"])
def test_cw_zoo_export_refuses_a_batch_that_is_no_size(cli, tmp_path, batch):
    r = cli("zoo", "export", "mlp", "-o", tmp_path / "m.onnx", "--batch", batch)
    assert r.code == 2
    assert f"invalid --batch '{batch}'" in r.err and "'dynamic'" in r.err
    assert not (tmp_path / "m.onnx").exists()
