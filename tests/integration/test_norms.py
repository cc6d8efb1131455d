"""GroupNormalization (cw/compile/norms.py) and MeanVarianceNormalization (decompose.py) with
their variance about the mean."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cw.compile.compiler import CompileConfig, compile_model
from cw.engine import LocalModel


def _group_norm(path, shape, groups):
    channels = shape[1]
    inits = [numpy_helper.from_array(np.linspace(0.5, 2, channels, dtype=np.float32), "s"),
             numpy_helper.from_array(np.linspace(-1, 1, channels, dtype=np.float32), "b")]
    graph = helper.make_graph(
        [helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *shape[1:]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *shape[1:]])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                                ir_version=10), path)
    return inits


def _exact(x, groups, scale, bias):
    """GroupNormalization in float64."""
    n, c = x.shape[:2]
    g = x.astype(np.float64).reshape(n, groups, -1)
    y = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)
    per_channel = (1, c) + (1,) * (x.ndim - 2)
    return y.reshape(x.shape) * scale.reshape(per_channel) + bias.reshape(per_channel)


@pytest.mark.parametrize("shape", [(1, 32, 16, 32), (1, 32, 512)])
def test_a_group_norm_of_values_far_from_zero_does_not_cancel(tmp_path, shape):
    """TVM's kernel took E[x²] - E[x]²: groups with mean / spread 10 came out 5.2e-4 off,
    at 1000 NaN. About the mean, the error is what float32 sums allow (onnxruntime's 5.5e-5
    at 10). Both ranks go through the arithmetic (a 3-D GroupNorm too)."""
    scale, bias = (numpy_helper.to_array(t) for t in _group_norm(tmp_path / "m.onnx", shape, 8))
    compile_model(tmp_path / "m.onnx", tmp_path / "b", CompileConfig(batch_sizes=(1,)))
    model = LocalModel(tmp_path / "b")
    rng = np.random.default_rng(7)
    for offset, bound in ((10, 1e-4), (1000, 1e-1)):
        x = (rng.standard_normal(shape) + offset).astype(np.float32)
        y = model.run([x])[0]
        assert np.isfinite(y).all(), offset
        error = float(np.abs(y - _exact(x, 8, scale, bias)).max())
        assert error < bound, (offset, error)


def test_a_float16_mean_variance_normalization_compiles(tmp_path):
    """The rewrite about the mean gives its 1e-9 the input's type (a float32 one failed the
    float16 model's import)."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("MeanVarianceNormalization", ["r"], ["y"], axes=[2, 3])], "mvn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["N", 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["N", 4, 8, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                ir_version=8), tmp_path / "m.onnx")
    compile_model(tmp_path / "m.onnx", tmp_path / "b", CompileConfig(batch_sizes=(1,)))
    x = np.random.default_rng(8).standard_normal((1, 4, 8, 8)).astype(np.float16)
    y = LocalModel(tmp_path / "b").run([x])[0]
    r = np.maximum(x.astype(np.float64), 0)
    exact = (r - r.mean((2, 3), keepdims=True)) / (r.std((2, 3), keepdims=True) + 1e-9)
    assert y.dtype == np.float16
    assert float(np.abs(y - exact).max()) < 4e-3  # a few float16 ulps at values up to ~3


def _normalization(path, op, shape):
    """A LayerNormalization over the last axis or an InstanceNormalization (scale, bias)."""
    channels = shape[-1] if op == "LayerNormalization" else shape[1]
    inits = [numpy_helper.from_array(np.linspace(0.5, 2, channels, dtype=np.float32), "s"),
             numpy_helper.from_array(np.linspace(-1, 1, channels, dtype=np.float32), "b")]
    attrs = {"axis": -1} if op == "LayerNormalization" else {}
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "s", "b"], ["y"], **attrs)], "n",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *shape[1:]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *shape[1:]])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return [numpy_helper.to_array(t).astype(np.float64) for t in inits]


@pytest.mark.parametrize("op,shape,bound", [
    # the kernel's mean summed the row in float32: 2.4e-3 off, 3.3e-4 in lane sums
    # (cpu_rows.SUM_LANES); rows about their mean (norms.layer_norms_about_the_mean) 1.3e-6
    ("LayerNormalization", (1, 128, 768), 2e-5),
    # one running sum over H x W: 1.4e-3; in lane sums 1.7e-4 (onnxruntime 4.8e-4)
    ("InstanceNormalization", (1, 64, 32, 32), 4e-4),
])
def test_a_normalization_of_values_far_from_zero_rounds_little_on_the_cpu(
        tmp_path, op, shape, bound):
    """Rows with a mean 1000 times their spread, against float64."""
    scale, bias = _normalization(tmp_path / "m.onnx", op, shape)
    compile_model(tmp_path / "m.onnx", tmp_path / "b", CompileConfig(batch_sizes=(1,)))
    x = (np.random.default_rng(3).standard_normal(shape) + 1000).astype(np.float32)
    y = LocalModel(tmp_path / "b").run([x])[0]
    v = x.astype(np.float64)
    axes = (-1,) if op == "LayerNormalization" else tuple(range(2, len(shape)))
    per_channel = (-1,) if op == "LayerNormalization" else (1, -1) + (1,) * (len(shape) - 2)
    exact = (v - v.mean(axes, keepdims=True)) / np.sqrt(v.var(axes, keepdims=True) + 1e-5) \
        * scale.reshape(per_channel) + bias.reshape(per_channel)
    assert float(np.abs(y - exact).max()) < bound
