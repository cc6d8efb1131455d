"""The CPU default schedule for fused elementwise kernels (cw/compile/cpu_kernels.py): which
kernels it takes, that they become one parallel, vectorized pass, and that they compute what
numpy does."""

import numpy as np
import pytest

from cw.compile import cpu_kernels, cpu_rows, targets
from cw.compile.compiler import legalized
from cw.tvm_env import load_tvm


def _fused(shape_a, shape_b, extra=None):
    """densenet's pre-activation: relu(concat(a, b) BatchNorm-decomposed), fused by TVM into one
    kernel of six blocks; `extra(bb, y)` may add operators after it."""
    tvm = load_tvm()
    from tvm import relax

    channels = shape_a[1] + shape_b[1]
    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType(shape_a, "float32"))
    b = relax.Var("b", relax.TensorType(shape_b, "float32"))
    stats = [relax.Var(n, relax.TensorType((1, channels, 1, 1), "float32"))
             for n in ("mean", "std", "gamma", "beta")]
    with bb.function("main", [a, b, *stats]):
        with bb.dataflow():
            y = bb.emit(relax.op.concat([a, b], axis=1))
            y = bb.emit(relax.op.subtract(y, stats[0]))
            y = bb.emit(relax.op.divide(y, stats[1]))
            y = bb.emit(relax.op.multiply(y, stats[2]))
            y = bb.emit(relax.op.add(y, stats[3]))
            y = bb.emit(relax.op.nn.relu(y))
            if extra is not None:
                y = extra(bb, y)
            y = bb.emit_output(y)
        bb.emit_func_output(y)
    target = targets.tvm_target("cpu", targets.default_cpu_arch())
    with target:
        fused, _ = legalized(bb.get(), target)
    return tvm, target, fused


def _legalized_op(shapes, op):
    """(target, module): `op(*params)`, params float32 of `shapes`, legalized and fused for
    this machine's CPU."""
    load_tvm()
    from tvm import relax

    bb = relax.BlockBuilder()
    params = [relax.Var(f"p{i}", relax.TensorType(shape, "float32"))
              for i, shape in enumerate(shapes)]
    with bb.function("main", params):
        with bb.dataflow():
            y = bb.emit_output(bb.emit(op(*params)))
        bb.emit_func_output(y)
    target = targets.tvm_target("cpu", targets.default_cpu_arch())
    with target:
        fused, _ = legalized(bb.get(), target)
    return target, fused


def _kernels(mod):
    from tvm import tirx

    return {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)}


@pytest.mark.parametrize("shape_a,shape_b,parallel", [
    ((1, 64, 28, 28), (1, 32, 28, 28), True),   # one of densenet's, in NCHW
    ((2, 5, 3, 7), (2, 3, 3, 7), False),        # 420 values: one thread; rows of 7 vectorized
    ((1, 24, 1, 1000), (1, 8, 1, 1000), True),  # an innermost loop too long: split in vectors
])
def test_concat_batchnorm_relu_becomes_one_parallel_vectorized_pass(shape_a, shape_b, parallel):
    from tvm import relax, tirx

    tvm, target, fused = _fused(shape_a, shape_b)
    (name, func), = _kernels(fused).items()
    assert "concatenate" in name and len(func.script().split('T.sblock("')) - 1 == 7  # 6 + root
    sch = cpu_kernels.schedule_elementwise(func)
    assert sch is not None
    script = sch.mod["main"].script()
    assert script.count('T.sblock("') - script.count('T.sblock("root")') == 1  # one pass
    kinds = [sch.get(loop).kind for loop in sch.get_loops(
        sch.get_child_blocks(sch.get_sblock("root"))[0])]
    assert kinds[-1] == tirx.ForKind.VECTORIZED
    assert (tirx.ForKind.PARALLEL in kinds) == parallel
    scheduled, count = cpu_kernels.schedule_kernels(fused)
    assert count == 1
    ex = tvm.compile(scheduled, target=target)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape_a).astype(np.float32)
    b = rng.standard_normal(shape_b).astype(np.float32)
    channels = shape_a[1] + shape_b[1]
    mean, gamma, beta = (rng.standard_normal((1, channels, 1, 1)).astype(np.float32)
                         for _ in range(3))
    std = rng.uniform(0.5, 2, (1, channels, 1, 1)).astype(np.float32)
    y = vm["main"](*[tvm.runtime.tensor(v) for v in (a, b, mean, std, gamma, beta)]).numpy()
    expected = np.maximum((np.concatenate([a, b], axis=1) - mean) / std * gamma + beta, 0)
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)


def test_a_kernel_no_vector_divides_runs_its_rows_in_parallel_each_a_loop():
    """A kernel whose size no vector of 8 divides, its rows longer than a vector (YOLOX's head:
    [3549, 85]), keeps its innermost loop apart under parallel rows: fused into one loop it
    did each outer axis's index arithmetic (divisions, nested selects) once an element."""
    from tvm import relax, tirx

    shape_a, shape_b = (1, 23, 9, 85), (1, 8, 9, 85)  # 31 x 9 x 85: odd
    tvm, target, fused = _fused(shape_a, shape_b)
    (name, func), = _kernels(fused).items()
    sch = cpu_kernels.schedule_elementwise(func)
    assert sch is not None
    loops = [sch.get(loop) for loop in sch.get_loops(
        sch.get_child_blocks(sch.get_sblock("root"))[0])]
    assert [int(loop.extent) for loop in loops] == [31 * 9, 85]
    assert [loop.kind for loop in loops] == [tirx.ForKind.PARALLEL, tirx.ForKind.SERIAL]
    scheduled, count = cpu_kernels.schedule_kernels(fused)
    assert count == 1
    vm = relax.VirtualMachine(tvm.compile(scheduled, target=target), tvm.cpu())
    rng = np.random.default_rng(1)
    a = rng.standard_normal(shape_a).astype(np.float32)
    b = rng.standard_normal(shape_b).astype(np.float32)
    mean, gamma, beta = (rng.standard_normal((1, 31, 1, 1)).astype(np.float32) for _ in range(3))
    std = rng.uniform(0.5, 2, (1, 31, 1, 1)).astype(np.float32)
    y = vm["main"](*[tvm.runtime.tensor(v) for v in (a, b, mean, std, gamma, beta)]).numpy()
    expected = np.maximum((np.concatenate([a, b], axis=1) - mean) / std * gamma + beta, 0)
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)


def test_reductions_and_scheduled_kernels_are_left_alone():
    from tvm import relax

    def pool(bb, y):
        return bb.emit(relax.op.mean(y, axis=[2, 3]))

    _, _, fused = _fused((1, 16, 8, 8), (1, 16, 8, 8), extra=pool)
    kernels = _kernels(fused)
    reductions = {n: f for n, f in kernels.items() if "mean" in n}
    assert reductions
    for func in reductions.values():
        assert cpu_kernels.schedule_elementwise(func) is None
    scheduled, count = cpu_kernels.schedule_kernels(fused)
    assert count == len(kernels) - len(reductions) >= 1
    # a second pass finds them all scheduled already (as a tuning record's would be)
    assert cpu_kernels.schedule_kernels(scheduled)[1] == 0


def _classifier(batch, k, n, transposed=False):
    """x @ W + b, W stored K x N (as the ONNX importer leaves a Gemm's weights once lifted), or
    N x K with `transposed`."""
    tvm = load_tvm()
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((batch, k), "float32"))
    w = relax.Var("w", relax.TensorType((n, k) if transposed else (k, n), "float32"))
    b = relax.Var("b", relax.TensorType((n,), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, relax.op.permute_dims(w) if transposed else w))
            y = bb.emit_output(bb.emit(relax.op.add(y, b)))
        bb.emit_func_output(y)
    target = targets.tvm_target("cpu", targets.default_cpu_arch())
    with target:
        fused, _ = legalized(bb.get(), target)
    return tvm, target, fused


@pytest.mark.parametrize("batch,k,n", [(1, 64, 1000), (3, 40, 96), (4, 32, 24)])
def test_a_classifiers_matmul_reads_its_weights_row_by_row(batch, k, n):
    from tvm import relax, tirx

    tvm, target, fused = _classifier(batch, k, n)
    (func,) = [f for name, f in _kernels(fused).items() if "matmul" in name]
    sch = cpu_kernels.schedule_matmul(func)
    assert sch is not None
    loops = sch.get_loops(sch.get_sblock("matmul_update"))
    kinds = [sch.get(loop).kind for loop in loops]
    # chunks of N in parallel, then k, then the batch, then one chunk in vectors
    assert kinds == [tirx.ForKind.PARALLEL, tirx.ForKind.SERIAL, tirx.ForKind.SERIAL,
                     tirx.ForKind.VECTORIZED]
    assert int(sch.get(loops[1]).extent) == k and int(sch.get(loops[2]).extent) == batch
    assert batch < cpu_kernels.REGISTER_TILE_MIN_ROWS
    scheduled, count = cpu_kernels.schedule_kernels(fused)
    assert count == 1
    vm = relax.VirtualMachine(tvm.compile(scheduled, target=target), tvm.cpu())
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((batch, k), (k, n), (n,)))
    y = vm["main"](*[tvm.runtime.tensor(v) for v in (x, w, b)]).numpy()
    np.testing.assert_allclose(y, x @ w + b, rtol=1e-5, atol=1e-5)


def _linear(lead, k, n, packed=False):
    """A transformer's linear layer: relu(x @ W + b) with x [*lead, K], one W K x N; with
    `packed`, W in panels (cw/compile/cpu_matmul.py, for AVX2's 8 lanes)."""
    tvm = load_tvm()
    from tvm import relax

    from cw.compile import cpu_matmul

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((*lead, k), "float32"))
    w = relax.Var("w", relax.TensorType((k, n), "float32"))
    b = relax.Var("b", relax.TensorType((n,), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            y = bb.emit(relax.op.add(relax.op.matmul(x, w), b))
            y = bb.emit_output(bb.emit(relax.op.nn.relu(y)))
        bb.emit_func_output(y)
    mod = bb.get()
    if packed:
        mod, count = cpu_matmul.pack_weights(mod, lanes=8)
        assert count == 1
    target = targets.tvm_target("cpu", targets.default_cpu_arch())
    with target:
        fused, _ = legalized(mod, target)
    return tvm, target, fused


def _loop_kinds_and_extents(sch, block: str):
    loops = sch.get_loops(sch.get_sblock(block))
    return [sch.get(loop).kind for loop in loops], [int(sch.get(loop).extent) for loop in loops]


def _assert_computes_the_linear_layer(tvm, target, scheduled, lead, k, n, seed):
    from tvm import relax

    vm = relax.VirtualMachine(tvm.compile(scheduled, target=target), tvm.cpu())
    rng = np.random.default_rng(seed)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((*lead, k), (k, n), (n,)))
    y = vm["main"](*[tvm.runtime.tensor(v) for v in (x, w, b)]).numpy()
    np.testing.assert_allclose(y, np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("lead,k,n,tile,chunk", [
    ((1, 16), 128, 128, 4, 16),  # the tiny transformer's: 16 tokens
    ((2, 96), 64, 48, 4, 16),    # 192 rows
    # tiles within the last row dimension; N one vector wide (no two divide it): up to 8 rows,
    # so that 6 sums, not 4, are in flight
    ((3, 36), 40, 24, 6, 8),
    ((3, 37), 40, 24, None, 8),  # 37 rows: no exact tile, sums in memory as for a classifier
    ((100,), 16, 32, 4, 16),
    ((2, 40), 256, 32, 8, 16),   # K of 256: 8 rows a tile
    ((16,), 32, 24, 8, 8),       # a classifier at batch 16
])
def test_a_linear_layers_sums_stay_in_registers(lead, k, n, tile, chunk):
    from tvm import tirx

    tvm, target, fused = _linear(lead, k, n)
    (func,) = [f for name, f in _kernels(fused).items() if "matmul" in name]
    sch = cpu_kernels.schedule_matmul(func)
    assert sch is not None
    kinds, extents = _loop_kinds_and_extents(sch, "matmul_update")
    rows = int(np.prod(lead))
    # (chunks of N x tiles of rows) in parallel, then k, then a tile's rows unrolled, then a
    # chunk in vectors (AVX2's 8 lanes: the test schedules outside a target); the sums in a
    # local buffer (registers) written out once per tile
    if tile is None:
        assert kinds == [tirx.ForKind.PARALLEL, tirx.ForKind.SERIAL, tirx.ForKind.SERIAL,
                         tirx.ForKind.VECTORIZED]
        assert extents[1:3] == [k, rows] and '"local"' not in sch.mod["main"].script()
    else:
        assert kinds == [tirx.ForKind.PARALLEL, tirx.ForKind.SERIAL, tirx.ForKind.UNROLLED,
                         tirx.ForKind.VECTORIZED]
        assert extents == [(n // chunk) * (rows // tile), k, tile, chunk]
        assert '"local"' in sch.mod["main"].script()
    scheduled, count = cpu_kernels.schedule_kernels(fused)
    assert count == 1
    _assert_computes_the_linear_layer(tvm, target, scheduled, lead, k, n, seed=2)


@pytest.mark.parametrize("a_shape,b_shape,scaled", [
    ((4, 8, 16), (4, 16, 32), False),           # one product per sample
    ((1, 2, 96, 64), (1, 2, 64, 96), True),     # attention's scores: per sample and head, / sqrt(d)
])
def test_attentions_batched_products_run_in_parallel_per_product(a_shape, b_shape, scaled):
    tvm = load_tvm()
    from tvm import relax, tirx

    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType(a_shape, "float32"))
    b = relax.Var("b", relax.TensorType(b_shape, "float32"))
    with bb.function("main", [a, b]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(a, b))
            if scaled:
                y = bb.emit(relax.op.divide(y, relax.const(8.0, "float32")))
            y = bb.emit_output(y)
        bb.emit_func_output(y)
    target = targets.tvm_target("cpu", targets.default_cpu_arch())
    with target:
        fused, _ = legalized(bb.get(), target)
    (func,) = _kernels(fused).values()
    sch = cpu_kernels.schedule_matmul(func)
    assert sch is not None
    loops = sch.get_loops(sch.get_sblock("matmul_update"))
    kinds = [sch.get(loop).kind for loop in loops]
    assert kinds[0] == tirx.ForKind.PARALLEL and kinds[-1] == tirx.ForKind.VECTORIZED
    products = int(np.prod(a_shape[:-2]))
    assert int(sch.get(loops[0]).extent) % products == 0  # every product in the parallel loop
    scheduled, count = cpu_kernels.schedule_kernels(fused)
    assert count == 1
    vm = relax.VirtualMachine(tvm.compile(scheduled, target=target), tvm.cpu())
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(a_shape).astype(np.float32), \
        rng.standard_normal(b_shape).astype(np.float32)
    y = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w)).numpy()
    np.testing.assert_allclose(y, (x @ w) / (8.0 if scaled else 1.0), rtol=1e-5, atol=1e-4)


def test_a_product_with_w_read_across_its_rows_is_left_to_tvm():
    """W read as W[j, k] (K contiguous): vectors along N would gather; left to TVM."""
    load_tvm()
    from tvm import tirx
    from tvm.script import tirx as T

    @T.prim_func(private=True, s_tir=True)
    def nt(x: T.Buffer((4, 16), "float32"), w: T.Buffer((32, 16), "float32"),
           y: T.Buffer((4, 32), "float32")):
        for i, j, k in T.grid(4, 32, 16):
            with T.sblock("matmul"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    y[vi, vj] = T.float32(0)
                y[vi, vj] = y[vi, vj] + x[vi, vk] * w[vj, vk]

    assert isinstance(nt, tirx.PrimFunc)
    assert cpu_kernels.schedule_matmul(nt) is None


@pytest.mark.parametrize("lead,k,n,width,tile", [
    ((2, 64), 96, 48, 16, 4),   # panels of two vectors (AVX2's 8 lanes)
    ((24,), 40, 24, 8, 4),      # N in no panel of two vectors: one
    ((3,), 64, 32, 16, None),   # a classifier at batch 3: rows too few to tile
    ((2, 16), 768, 32, 16, 4),  # K in blocks of 256 (BERT's 768 and 3072)
])
def test_a_packed_weight_matrix_is_read_one_panel_at_a_time(lead, k, n, width, tile):
    """W [K, N] as panels [N / b, K, b] (cw/compile/cpu_matmul.py): the product is scheduled
    as the row-major one is, each tile's columns one panel (4 rows: the test schedules outside
    a target, so for AVX2), K in blocks where it is long, and computes x @ W."""
    from tvm import tirx

    from cw.compile import cpu_matmul

    tvm, target, fused = _linear(lead, k, n, packed=True)
    (func,) = [f for name, f in _kernels(fused).items() if "matmul" in name]
    shapes = [tuple(int(d) for d in param.shape) for param in func.params]
    assert (n // width, k, width) in shapes  # the panels
    sch = cpu_kernels.schedule_matmul(func)
    assert sch is not None
    kinds, extents = _loop_kinds_and_extents(sch, cpu_matmul.PACKED_BLOCK + "_update")
    rows = int(np.prod(lead))
    if tile is None:
        assert kinds == [tirx.ForKind.PARALLEL, tirx.ForKind.SERIAL, tirx.ForKind.SERIAL,
                         tirx.ForKind.VECTORIZED]
        assert extents == [n // width, k, rows, width]
    elif k > cpu_kernels.K_BLOCK:
        # panels (and leading row dimensions) in parallel, then K's blocks, the tiles of rows
        # (within the last row dimension), a block's k, a tile's rows, a vector
        assert kinds == [tirx.ForKind.PARALLEL] + [tirx.ForKind.SERIAL] * 3 + \
            [tirx.ForKind.UNROLLED, tirx.ForKind.VECTORIZED]
        assert extents == [rows // lead[-1] * (n // width), k // cpu_kernels.K_BLOCK,
                           lead[-1] // tile, cpu_kernels.K_BLOCK, tile, width]
    else:
        assert kinds == [tirx.ForKind.PARALLEL, tirx.ForKind.SERIAL, tirx.ForKind.UNROLLED,
                         tirx.ForKind.VECTORIZED]
        assert extents == [(n // width) * (rows // tile), k, tile, width]
    scheduled, _ = cpu_kernels.schedule_kernels(fused)
    _assert_computes_the_linear_layer(tvm, target, scheduled, lead, k, n, seed=4)


def test_bundles_store_weight_matrices_in_panels(tmp_path):
    """End to end: an ONNX MatMul's initializer lands in the bundle packed (lifted, not
    repacked per inference), and the bundle agrees with onnxruntime at batch 1 and 3; a matrix
    whose N no panel divides is padded with zero columns up to whole panels (N = 100: 112),
    and one that padding would make much larger (N = 10) is kept as it is."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from cw.compile.compiler import CompileConfig, compile_model
    from cw.engine import LocalModel
    from cw.verify import max_relative_error, onnx_reference

    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
             for name, shape in (("w1", (64, 48)), ("w2", (48, 10)), ("w3", (48, 100)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"]),
             helper.make_node("MatMul", ["r", "w3"], ["z"])]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 12, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 12, 10]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 12, 100])], inits)
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    m = compile_model(path, tmp_path / "b", CompileConfig(batch_sizes=(1, 4)))
    shapes = sorted(tuple(t.shape) for t in m.weights.tensors)
    assert "2 weight matrices stored in column panels for the CPU's matrix products" in m.notes
    # panels of 16 columns: two AVX2 vectors, or one AVX-512 vector (two do not divide 48, and
    # padding 100 columns to 128 would add more than an eighth)
    assert shapes == sorted([(3, 64, 16), (48, 10), (7, 48, 16)]), shapes
    model = LocalModel(tmp_path / "b")
    for batch in (1, 3):
        x = rng.standard_normal((batch, 12, 64)).astype(np.float32)
        outs, refs = model.run([x]), onnx_reference(path, [x])
        assert [o.shape for o in outs] == [(batch, 12, 10), (batch, 12, 100)]
        assert max(max_relative_error(o, r) for o, r in zip(outs, refs)) < 1e-5


@pytest.mark.parametrize("op,shape,rows", [
    ("softmax", (12, 128, 128), 12 * 128),   # BERT-base's attention scores
    ("layer_norm", (1, 128, 768), 128),
    # a global average pool over NCHW8c (PP-OCR's SE): a row per channel block, its 8 channels
    # summed in a vector (were 12 x 8 rows, each a strided walk)
    ("mean", (1, 12, 160, 160, 8), 12),
    ("max_pool", (1, 16, 13, 13, 8), 16),    # padded: rows stop at the channel blocks
    # a segmentation map's classes (NCHW): rows of 16 along W, the 16 in a vector (were
    # 128 x 128 rows, each a strided walk over the 21 classes)
    ("argmax", (1, 21, 128, 128), 128 * 8),
    # its softmax: the elementwise steps too (were one loop nest each, on one thread)
    ("softmax_channels", (1, 21, 128, 128), 128 * 8),
    ("softmax", (4, 100), None),             # 400 values: one thread
    # an audio encoder's InstanceNorm over 3,199 frames, which no vector divides: both sums
    # over the row (its mean's, its variance's) padded to whole vectors (were one running sum)
    ("deviation", (1, 64, 3199), 64),
    # a layer norm over 1,000: its mean's sum padded; its variance's terms, (x - mean)^2
    # computed in the sum, are not (a padded term would add mean^2: the row is far from 0)
    ("layer_norm_odd", (1, 64, 1000), 64),
    ("mean", (1, 160, 7, 7, 8), None),       # MobileNetV2's global average pool at batch 1
    # a maximum over a new axis of length 1 (quantized_activations' fusion barrier): the last
    # step has one leading loop fewer than the one before it (an IndexError until stop 66);
    # 17,680 iterations: one thread
    ("unit_max", (1, 4420, 2), None),
])
def test_other_kernels_run_row_by_row_over_the_cores(op, shape, rows):
    """Kernels no other schedule takes keep TVM's loops, every step computed at the rows of
    the last (the leading loops all steps share), rows in parallel; and still compute what
    numpy does."""
    from tvm import relax, tirx

    tvm = load_tvm()
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    params = [x]
    if op.startswith("layer_norm"):
        gamma = relax.Var("g", relax.TensorType(shape[-1:], "float32"))
        beta = relax.Var("b", relax.TensorType(shape[-1:], "float32"))
        params += [gamma, beta]
    with bb.function("main", params):
        with bb.dataflow():
            if op.startswith("softmax"):
                y = relax.op.nn.softmax(x, axis=1 if op == "softmax_channels" else -1)
            elif op.startswith("layer_norm"):
                y = relax.op.nn.layer_norm(x, gamma, beta, axes=[-1])
            elif op == "deviation":  # an InstanceNorm's, as wav2vec's fused it
                y = relax.op.sqrt(bb.emit(relax.op.add(bb.emit(relax.op.variance(
                    x, axis=[-1], keepdims=True)), relax.const(1e-5, "float32"))))
            elif op == "mean":
                y = relax.op.mean(x, axis=[2, 3], keepdims=True)
            elif op == "argmax":
                y = relax.op.argmax(x, axis=1, keepdims=True)
            elif op == "unit_max":
                y = relax.op.max(bb.emit(relax.op.expand_dims(x, -1)), axis=[-1])
            else:
                y = relax.op.nn.max_pool2d(x, pool_size=5, strides=1, padding=2,
                                           layout="NCHW8c")
            y = bb.emit_output(bb.emit(y))
        bb.emit_func_output(y)
    target = targets.tvm_target("cpu", targets.default_cpu_arch())
    with target:
        fused, _ = legalized(bb.get(), target)
    (func,) = _kernels(fused).values()
    sch = cpu_rows.schedule_rows(func)
    assert (sch is not None) == (rows is not None)
    scheduled, count = cpu_kernels.schedule_kernels(fused)
    assert count == (rows is not None)
    if rows is not None:
        steps = sch.get_child_blocks(sch.get_sblock("root"))
        outers = [sch.get(sch.get_loops(step)[0]) for step in steps]
        assert len(steps) >= 2 and all(o.same_as(outers[0]) for o in outers)  # one loop nest
        assert outers[0].kind == tirx.ForKind.PARALLEL and int(outers[0].extent) == rows
        # sums along a row in a vector of partial sums; each step's loop along it vectorized
        partial = [s for s in steps if sch.get(s).name_hint.endswith("_rf_update")]
        assert len(partial) == {"softmax": 2, "layer_norm": 2, "deviation": 2,
                                "layer_norm_odd": 1}.get(op, 0)
        # a pool's or an NCHWc mean's window walked with the channel block in a vector
        windows = [s for s in steps
                   if sch.get(s).name_hint in ("pool_max_update", "x_red_update",
                                               "x_red_temp_update", "T_softmax_maxelem_update",
                                               "T_softmax_expsum_update")]
        assert len(windows) == {"mean": 1, "max_pool": 1, "argmax": 1,
                                "softmax_channels": 2}.get(op, 0), \
            [sch.get(s).name_hint for s in steps]
        for step in partial + windows + [steps[-1]] * (op in ("softmax", "layer_norm",
                                                              "argmax", "softmax_channels")):
            assert sch.get(sch.get_loops(step)[-1]).kind == tirx.ForKind.VECTORIZED
    rng = np.random.default_rng(6)
    values = [rng.standard_normal(shape).astype(np.float32)]
    if op.startswith("layer_norm"):
        values += [rng.standard_normal(shape[-1:]).astype(np.float32) for _ in range(2)]
    if op in ("deviation", "layer_norm_odd"):  # far from 0: a padded (x - mean)^2 adds mean^2
        values[0] += 3
    vm = relax.VirtualMachine(tvm.compile(scheduled, target=target), tvm.cpu())
    y = vm["main"](*[tvm.runtime.tensor(v) for v in values]).numpy()
    v = values[0].astype(np.float64)
    if op.startswith("softmax"):
        axis = 1 if op == "softmax_channels" else -1
        e = np.exp(v - v.max(axis=axis, keepdims=True))
        ref = e / e.sum(axis=axis, keepdims=True)
    elif op == "deviation":
        ref = np.sqrt(v.var(-1, keepdims=True) + 1e-5)
    elif op.startswith("layer_norm"):
        ref = (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-5) \
            * values[1] + values[2]
    elif op == "mean":
        ref = v.mean(axis=(2, 3), keepdims=True)
    elif op == "unit_max":
        ref = v
    elif op == "argmax":
        ref = v.argmax(axis=1)[:, None]
    else:
        padded = np.pad(v, ((0, 0), (0, 0), (2, 2), (2, 2), (0, 0)), constant_values=-np.inf)
        ref = np.max([padded[:, :, i:i + 13, j:j + 13] for i in range(5) for j in range(5)],
                     axis=0)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


def test_a_cast_to_bfloat16_rounds_where_it_is_inlined(tmp_path):
    """float32 → bfloat16 → float32 rounds to bfloat16's nearest (ONNX's Cast; onnxruntime's
    too) in one kernel of both casts and in a matrix product's epilogue. TVM's CPU lowering
    rounds bfloat16 only where a kernel stores it: fused, the casts gave x back whole (1.7e-3
    off) until stop 75 (fast_math._bfloat16_cast)."""
    import ml_dtypes
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from cw.compile.compiler import CompileConfig, compile_model
    from cw.engine import LocalModel

    rng = np.random.default_rng(6)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    bf16, f32 = TensorProto.BFLOAT16, TensorProto.FLOAT
    nodes = [helper.make_node("Cast", ["x"], ["xh"], to=bf16),
             helper.make_node("Cast", ["xh"], ["y"], to=f32),
             helper.make_node("MatMul", ["x", "w"], ["p"]),
             helper.make_node("Cast", ["p"], ["ph"], to=bf16),
             helper.make_node("Cast", ["ph"], ["z"], to=f32)]
    graph = helper.make_graph(
        nodes, "bf16", [helper.make_tensor_value_info("x", f32, ["N", 16, 64])],
        [helper.make_tensor_value_info("y", f32, ["N", 16, 64]),
         helper.make_tensor_value_info("z", f32, ["N", 16, 32])],
        [numpy_helper.from_array(w, "w")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    compile_model(path, tmp_path / "b", CompileConfig(batch_sizes=(4,)))
    x = (3 * rng.standard_normal((4, 16, 64))).astype(np.float32)
    # ties (to even, both ways), the largest finite float32 (to inf), subnormals, NaN, ±inf, -0
    special = np.array([0x3F808000, 0x3F818000, 0x7F7FFFFF, 0x00018000, 0x80008001, 0x7FC00001,
                        0x7F800000, 0xFF800000, 0x80000000], np.uint32).view(np.float32)
    x[0, 0, :special.size] = special
    y, z = LocalModel(tmp_path / "b").run([x])

    def rounded(v):
        return v.astype(ml_dtypes.bfloat16).astype(np.float32)

    np.testing.assert_array_equal(y, rounded(x))  # NaN where NaN
    assert np.signbit(y[0, 0, 8]) and not np.array_equal(y, x)
    np.testing.assert_array_equal(z, rounded(z))  # every value a bfloat16
    np.testing.assert_allclose(z[1:], rounded(x[1:] @ w), rtol=1e-2, atol=1e-2)


def test_rows_without_vectors_where_the_vector_schedule_fails(monkeypatch):
    """A TIR error in the vector schedule (rfactor raised TVM's InternalError on a first
    version's loops, not a ScheduleError) leaves the kernel its rows without vectors, not the
    compile failed."""
    from tvm import relax, tirx

    target, fused = _legalized_op([(12, 128, 128)], lambda x: relax.op.nn.softmax(x, axis=-1))
    (func,) = _kernels(fused).values()

    def broken(sch, block):
        raise RuntimeError("InternalError: Check failed: block_realize == old_block_realize_")

    monkeypatch.setattr(cpu_rows, "_lane_sums", broken)
    sch = cpu_rows.schedule_rows(func)
    steps = sch.get_child_blocks(sch.get_sblock("root"))
    assert sch.get(sch.get_loops(steps[0])[0]).kind == tirx.ForKind.PARALLEL
    assert not any(sch.get(s).name_hint.endswith("_rf_update") for s in steps)

