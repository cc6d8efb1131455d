"""Matrix products whose rows no tile divides (a ViT's 197 tokens, a prime) or whose columns no
vector does (attention's 197 x 197 scores) are computed on padded operands in cw's schedule,
the padding dropped after (cw/compile/cpu_matmul.py), and agree with onnxruntime."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cw.compile import cpu_kernels, cpu_matmul, targets
from cw.compile.compiler import (CompileConfig, bind_batch, compile_model, import_graph,
                                 legalized)
from cw.engine import LocalModel
from cw.tvm_env import load_tvm
from cw.verify import max_relative_error, onnx_reference
from tests.integration.test_cpu_kernels import (_assert_computes_the_linear_layer, _kernels,
                                                _legalized_op, _linear, _loop_kinds_and_extents)

TOKENS, DIM, HEADS = 197, 32, 2


def test_a_prime_number_of_rows_is_computed_in_whole_tiles():
    """A linear layer over 2 x 197 rows: each sample's 197 rows computed as 200 (whole tiles of
    4: the test schedules outside a target, so for AVX2), the last row's values in the extra
    three, which are dropped; was one row at a time."""
    from tvm import tirx

    tvm, target, fused = _linear((2, TOKENS), 64, 32, packed=True)
    (func,) = [f for name, f in _kernels(fused).items() if "matmul" in name]
    sch = cpu_kernels.schedule_matmul(func)
    kinds, extents = _loop_kinds_and_extents(sch, cpu_matmul.PACKED_BLOCK + "_update")
    assert kinds == [tirx.ForKind.PARALLEL, tirx.ForKind.SERIAL, tirx.ForKind.UNROLLED,
                     tirx.ForKind.VECTORIZED]
    assert extents == [(32 // 16) * (2 * 200 // 4), 64, 4, 16]
    scheduled, _ = cpu_kernels.schedule_kernels(fused)
    _assert_computes_the_linear_layer(tvm, target, scheduled, (2, TOKENS), 64, 32, seed=5)


def _attention(path):
    """x [N, 197, 32] -> one self-attention layer of 2 heads (q, k, v, the output projection)."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def linear(name, x):
        w = const(name + "_w", (rng.standard_normal((DIM, DIM)) / DIM ** 0.5)
                  .astype(np.float32))
        nodes.append(helper.make_node("MatMul", [x, w], [name]))
        return name

    heads = const("heads", np.array([0, TOKENS, HEADS, DIM // HEADS], np.int64))
    split = []
    for name in ("q", "k", "v"):
        nodes += [helper.make_node("Reshape", [linear(name, "x"), heads], [name + "_h"]),
                  helper.make_node("Transpose", [name + "_h"], [name + "_t"],
                                   perm=[0, 2, 3, 1] if name == "k" else [0, 2, 1, 3])]
        split.append(name + "_t")
    q, k, v = split
    nodes += [helper.make_node("MatMul", [q, k], ["s"]),
              helper.make_node("Mul", ["s", const("scale", np.float32((DIM // HEADS) ** -0.5))],
                               ["s2"]),
              helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", v], ["a"]),
              helper.make_node("Transpose", ["a"], ["a_t"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["a_t", const("flat", np.array([0, TOKENS, DIM],
                                                                         np.int64))], ["a_f"])]
    out = linear("y", "a_f")
    graph = helper.make_graph(
        nodes, "vit_attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", TOKENS, DIM])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    return path


def test_a_vits_attention_over_197_tokens_runs_every_product_in_cws_schedule(tmp_path):
    path = _attention(tmp_path / "m.onnx")
    config = CompileConfig(batch_sizes=(1, 4))
    onnx_model, imported = import_graph(path, config)[:2]
    target = targets.tvm_target("cpu", config.resolved_arch)
    fused, _ = legalized(bind_batch(imported.mod, onnx_model, 1), target)
    products = {name: f for name, f in _kernels(fused).items() if "matmul" in name}
    # the four linear layers (two kernels: one with the scale fused) and the two products of
    # attention: the scores' 197 columns were no vector's multiple (TVM's own loops)
    with target:
        unscheduled = [name for name, f in products.items()
                       if cpu_kernels.schedule_matmul(f) is None]
    assert len(products) >= 3 and not unscheduled, (sorted(products), unscheduled)
    # the 197 rows of the products by a batched W in whole tiles without a padded copy: the
    # softmax's kernel wrote one, and its rows then no longer lined up (TVM's loops)
    assert not [name for name in _kernels(fused) if "softmax" in name and "pad" in name]
    manifest = compile_model(path, tmp_path / "b", config)
    assert any(n.startswith("2 batched matrix products (attention's)") for n in manifest.notes), \
        manifest.notes
    model = LocalModel(tmp_path / "b")
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, TOKENS, DIM)).astype(np.float32)
        out = model.run([x])[0]
        assert out.shape == (batch, TOKENS, DIM)
        assert max_relative_error(out, onnx_reference(path, [x])[0]) < 1e-5


@pytest.mark.parametrize("n,lanes,columns", [
    (197, 16, 224),  # a ViT's keys: two vectors, 1/13 more than one (208)
    (200, 16, 224),
    (77, 16, 80),    # CLIP's tokens: two vectors (96) would add a fifth
    (80, 16, 80),
    (197, 8, 208),   # AVX2
    (24, 16, 24),    # whole half-vectors: padding would add a third
    (10, 16, 10),    # too few to pad
])
def test_a_batched_ws_columns_are_padded_to_whole_vectors(n, lanes, columns):
    assert cpu_matmul.batched_columns(n, lanes) == columns


@pytest.mark.parametrize("n,tile", [(48, 4), (40, 8)])
def test_a_product_one_vector_wide_runs_in_tiles_of_8_rows(n, tile):
    """Attention's scores [2, 96, 64] x [2, 64, n] (AVX2's 8 lanes: the test schedules outside
    a target): two vectors of columns (48 = 3 x 16) in tiles of 4 rows, one vector (40) in
    tiles of 8, so that as many sums are in flight (4 left the FMAs waiting)."""
    tvm = load_tvm()
    from tvm import relax

    target, fused = _legalized_op([(1, 2, 96, 64), (1, 2, 64, n)], relax.op.matmul)
    (func,) = _kernels(fused).values()
    sch = cpu_kernels.schedule_matmul(func)
    _, extents = _loop_kinds_and_extents(sch, "matmul_update")
    assert extents[-2:] == [tile, 16 if n % 16 == 0 else 8]
    scheduled, _ = cpu_kernels.schedule_kernels(fused)
    vm = relax.VirtualMachine(tvm.compile(scheduled, target=target), tvm.cpu())
    rng = np.random.default_rng(n)
    x = rng.standard_normal((1, 2, 96, 64)).astype(np.float32)
    w = rng.standard_normal((1, 2, 64, n)).astype(np.float32)
    y = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w)).numpy()
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-4)
