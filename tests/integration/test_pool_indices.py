"""MaxPool's indices and MaxUnpool (cw/compile/pool_indices.py): a SegNet-style decoder that
puts each maximum back where the encoder found it compiles at every batch size and agrees with
onnxruntime; indices read as values compile at batch size 1, where ONNX's numbering across the
batch is a request's own."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cw.compile.compiler import CompileConfig, compile_model
from cw.engine import run_bundle

F = TensorProto.FLOAT


def _c(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _weights(name, out_channels, in_channels, seed):
    rng = np.random.default_rng(seed)
    return _c(name, (0.5 * rng.standard_normal((out_channels, in_channels, 3, 3)))
              .astype(np.float32))


def _save(path, nodes, inits, x_shape, outputs):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, x_shape)],
                              outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


@pytest.mark.parametrize("pool,size,unpool_size", [
    # 2 x 2 windows, MaxUnpool's own output size
    ({"kernel_shape": [2, 2], "strides": [2, 2]}, 6, False),
    # overlapping 3 x 3 windows, padded, on an odd image: the size from output_shape
    ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 7, True),
])
def test_a_decoder_unpools_where_the_encoder_pooled(tmp_path, pool, size, unpool_size):
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p", "at"], **pool),
             helper.make_node("Conv", ["p", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxUnpool", ["c2", "at"] + (["r1_size"] if unpool_size else []),
                              ["u"], **pool),
             helper.make_node("Conv", ["u", "w3"], ["y"], pads=[1, 1, 1, 1])]
    if unpool_size:
        nodes.insert(2, helper.make_node("Shape", ["r1"], ["r1_size"]))
    src = tmp_path / "m.onnx"
    _save(src, nodes, [_weights("w1", 8, 3, 1), _weights("w2", 8, 8, 2),
                       _weights("w3", 2, 8, 3)],
          ["N", 3, size, size], [helper.make_tensor_value_info("y", F, None)])
    manifest = compile_model(src, tmp_path / "b", CompileConfig(batch_sizes=(1, 4)))
    assert list(manifest.batch_sizes) == [1, 4], manifest.notes
    assert any("1 MaxPool, 1 MaxUnpool written as operators" in n for n in manifest.notes), \
        manifest.notes
    rng = np.random.default_rng(7)
    for batch in (1, 3):
        x = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
        result = run_bundle(tmp_path / "b", [x], "cpu", src)
        assert result.outputs[0].shape == (batch, 2, size, size)
        # every unpooled position holds a maximum or zero: a misplaced one moves the output
        assert result.relative_error <= 1e-5, (batch, result.relative_error)


@pytest.mark.parametrize("pool", [
    {"kernel_shape": [2, 2], "strides": [2, 2], "storage_order": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 0], "dilations": [1, 2]},
])
def test_indices_given_out_compile_at_batch_size_1_and_equal_onnxs(cli, tmp_path, pool):
    src = tmp_path / "m.onnx"
    _save(src, [helper.make_node("Relu", ["x"], ["r"]),
                helper.make_node("MaxPool", ["r"], ["y", "at"], name="pool", **pool)],
          [], ["N", 3, 7, 8], [helper.make_tensor_value_info("y", F, None),
                               helper.make_tensor_value_info("at", TensorProto.INT64, None)])
    refused = cli("compile", src, "-o", tmp_path / "b4", "--batch-sizes", "1,4")
    lines = [line for line in refused.err.splitlines() if line.strip()]
    assert refused.code != 0 and len(lines) == 1, refused.err
    assert "MaxPool 'pool' numbers its maxima across the batch, in output 'at'" in lines[0]
    manifest = compile_model(src, tmp_path / "b", CompileConfig())
    assert list(manifest.batch_sizes) == [1]
    assert any("numbers its maxima across the batch" in n and "only batch size 1" in n
               for n in manifest.notes), manifest.notes
    # after a Relu, many windows tie at 0: ONNX keeps the first of them
    x = np.random.default_rng(2).standard_normal((1, 3, 7, 8)).astype(np.float32)
    result = run_bundle(tmp_path / "b", [x], "cpu", src)
    assert result.outputs[1].dtype == np.int64
    assert result.relative_error == 0, result.relative_error


def test_pytorchs_export_of_return_indices_compiles_at_every_batch_size(tmp_path):
    """`nn.MaxPool2d(return_indices=True)` as torch.onnx exports it: the indices less those of
    a 1 x 1 MaxPool, sliced to each channel's first, so each channel is numbered from 0 and a
    request's indices do not depend on its place in the batch."""
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "at"], kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
             helper.make_node("MaxPool", ["x"], ["every", "flat"], kernel_shape=[1, 1],
                              strides=[1, 1]),
             helper.make_node("Slice", ["flat", "zeros", "ones", "spatial"], ["first"]),
             helper.make_node("Sub", ["at", "first"], ["indices"])]
    src = tmp_path / "m.onnx"
    _save(src, nodes, [_c("zeros", np.array([0, 0], np.int64)),
                       _c("ones", np.array([1, 1], np.int64)),
                       _c("spatial", np.array([2, 3], np.int64))],
          ["N", 3, 8, 9], [helper.make_tensor_value_info("y", F, None),
                           helper.make_tensor_value_info("indices", TensorProto.INT64, None)])
    manifest = compile_model(src, tmp_path / "b", CompileConfig(batch_sizes=(1, 4)))
    assert list(manifest.batch_sizes) == [1, 4], manifest.notes
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 9)).astype(np.float32)
        result = run_bundle(tmp_path / "b", [x], "cpu", src)
        assert result.outputs[1].max() < 8 * 9
        assert result.relative_error == 0, (batch, result.relative_error)
