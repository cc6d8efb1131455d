"""Tables larger than a weights page, used in blocks that each fit one
(cw/compile/weight_split.py): the same outputs as the whole table, in onnxruntime and compiled."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from cw.compile import weight_split
from cw.compile.paging import MIB

ROWS, WIDTH, COLUMNS = 5000, 64, 5000  # 1.28 MB each: two blocks in a page of 1 MiB


def _model(tied: bool = False) -> onnx.ModelProto:
    """h = table[ids] (ids [N, 7], any of [-ROWS, ROWS)); y = h @ head [WIDTH, COLUMNS]; g, a
    second Gather of the same table by the int32 ids2 [N]; s, h summed per sample."""
    rng = np.random.default_rng(0)
    table = numpy_helper.from_array(rng.standard_normal((ROWS, WIDTH), np.float32), "table")
    head = numpy_helper.from_array(rng.standard_normal((WIDTH, COLUMNS), np.float32), "head")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["h"], axis=0),
             helper.make_node("MatMul", ["h", "table" if tied else "head"], ["y"]),
             helper.make_node("Gather", ["table", "ids2"], ["g"]),
             helper.make_node("ReduceSum", ["h", "axes"], ["s"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "tables",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 7]),
         helper.make_tensor_value_info("ids2", TensorProto.INT32, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("g", TensorProto.FLOAT, ["N", WIDTH]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, ["N"])],
        [table, numpy_helper.from_array(np.array([1, 2], np.int64), "axes")]
        + ([] if tied else [head]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _ids() -> dict[str, np.ndarray]:
    """Each block's first and last rows, negative ids, and random ones."""
    rng = np.random.default_rng(1)
    ids = rng.integers(-ROWS, ROWS, (3, 7))
    ids[0] = [0, 4095, 4096, 4999, -1, -904, -905]
    return {"ids": ids.astype(np.int64), "ids2": np.array([4096, -5000, 17], np.int32)}


def _run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def test_blocks_give_the_whole_tables_outputs():
    model = _model()
    expected = _run(model, _ids())
    notes = weight_split.split(model, MIB, 17)
    assert len(notes) == 2, notes
    assert "table (1.2 MiB) larger than a page: split into 2 blocks of up to 4096 rows" in notes[0]
    assert "head (1.2 MiB) larger than a page: split into 2 blocks of up to 4096 columns" \
        in notes[1]
    sizes = {t.name: len(t.raw_data) for t in model.graph.initializer}
    assert "table" not in sizes and "head" not in sizes
    assert max(sizes.values()) <= MIB
    assert sum(sizes.values()) >= 2 * ROWS * WIDTH * 4
    (y, g, s), (y2, g2, s2) = expected, _run(model, _ids())
    assert np.array_equal(g, g2) and np.array_equal(s, s2)  # rows copied as they are
    # (a product's sums in the same order, unless onnxruntime picks another kernel for the
    # narrower matrix)
    np.testing.assert_allclose(y2, y, rtol=1e-6, atol=1e-6)


def test_ids_out_of_range_are_clamped_to_the_first_or_last_row():
    model = _model()
    weight_split.split(model, MIB, 17)
    table = numpy_helper.to_array(_model().graph.initializer[0])
    ids = np.array([[ROWS, ROWS + 999, -ROWS - 1, -3 * ROWS, 1, 2, 3]], np.int64)
    _, g, _ = _run(model, {"ids": ids, "ids2": np.array([ROWS + 5], np.int32)})
    assert np.array_equal(g[0], table[ROWS - 1])
    h = _run(model, {"ids": ids, "ids2": np.array([0], np.int32)})[2]
    assert np.allclose(h, [table[[ROWS - 1, ROWS - 1, 0, 0, 1, 2, 3]].sum()], rtol=1e-5)


def test_gemm_blocks_give_the_whole_products_outputs():
    """Gemm by B [COLUMNS, WIDTH] with transB and a bias per column, and by B [WIDTH, COLUMNS]
    with a bias broadcast along the columns."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.standard_normal(shape, np.float32), name)
             for name, shape in (("bt", (COLUMNS, WIDTH)), ("c", (COLUMNS,)),
                                 ("b", (WIDTH, COLUMNS)), ("c1", (3, 1)))]
    nodes = [helper.make_node("Gemm", ["x", "bt", "c"], ["y"], transB=1, alpha=0.5),
             helper.make_node("Gemm", ["x", "b", "c1"], ["z"], beta=2.0)]
    graph = helper.make_graph(
        nodes, "gemms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, WIDTH])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [3, COLUMNS]) for o in "yz"],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((3, WIDTH), np.float32)}
    expected = _run(model, feeds)
    notes = weight_split.split(model, MIB, 17)
    assert ["4096 rows, a Gemm each" in notes[0], "4096 columns, a Gemm each" in notes[1]] == \
        [True, True], notes
    for e, g in zip(expected, _run(model, feeds)):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)
    # the per-column bias went into blocks with its matrix; the broadcast one is shared
    names = [t.name for t in model.graph.initializer]
    assert "c" not in names and "c1" in names, names


def test_a_table_past_the_most_blocks_stays_whole(monkeypatch):
    monkeypatch.setattr(weight_split, "MAX_BLOCKS", 1)
    model = _model()
    assert weight_split.split(model, MIB, 17) == []
    assert [t.name for t in model.graph.initializer] == ["table", "axes", "head"]


def test_a_table_used_two_ways_stays_whole():
    """A tied table (an embedding that is also the head's matrix) would be stored twice."""
    model = _model(tied=True)
    before = model.SerializeToString()
    assert weight_split.split(model, MIB, 17) == []
    assert model.SerializeToString() == before


def test_a_compiled_model_with_split_tables_agrees_with_onnxruntime(tmp_path):
    from cw.compile.compiler import CompileConfig, compile_model
    from cw.engine import run_bundle

    src = tmp_path / "tables.onnx"
    onnx.save(_model(), src)
    manifest = compile_model(src, tmp_path / "bundle",
                             CompileConfig(batch_sizes=(1, 4), page_size=MIB))
    assert any("split into 2 blocks of up to 4096 rows" in n for n in manifest.notes)
    assert manifest.weights.page_size == MIB
    feeds = _ids()
    result = run_bundle(tmp_path / "bundle", [feeds["ids"], feeds["ids2"]], "cpu", src)
    assert result.relative_error <= 1e-5, result.relative_error


def test_the_blocks_pass_the_layout_conversion_for_cutlass(tmp_path):
    """CUDA bundles convert layouts to NHWC for CUTLASS over the whole graph; ONNX Max/Min on
    the ids (imported as stacks) made that conversion fail, and so turned CUTLASS off for every
    convolution of a model with a split table."""
    from cw.compile import frontend, onnx_load

    src = tmp_path / "tables.onnx"
    onnx.save(_model(), src)
    model = onnx_load.load_onnx(src)
    assert weight_split.split(model.model, MIB, 17)
    frontend.import_model(model, conv_algo="cutlass")
    assert not [n for n in model.notes if "layout conversion" in n], model.notes


def test_a_table_a_branch_reads_stays_whole():
    model = _model()
    branch = helper.make_graph([helper.make_node("Identity", ["table"], ["t"])], "b", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    model.graph.node.append(helper.make_node("If", ["cond"], ["chosen"], then_branch=branch,
                                             else_branch=branch))
    assert all("table" not in note for note in weight_split.split(model, MIB, 17))
    assert "table" in [t.name for t in model.graph.initializer]
