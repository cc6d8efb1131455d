"""Graph rewrites cw makes before TVM's importer (cw/compile/normalize.py), on small graphs
written here: what each rewrites, what it leaves, and that the bundle still agrees with
onnxruntime on the original file."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from cw.engine import run_bundle
from tests.conftest import random_input


def _save(path, graph):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


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
    _save(path, helper.make_graph(nodes, "powers", [x], [y], inits))


def _compiles_with(tmp_path, write, note: str):
    """The graph `write` writes (input x [N, 8]) compiles with `note` among the notes and
    agrees with onnxruntime on the file at batch 1 and 3."""
    from cw.compile.compiler import CompileConfig, compile_model

    src = tmp_path / "m.onnx"
    write(src)
    out = tmp_path / "bundle"
    m = compile_model(src, out, CompileConfig(batch_sizes=(1, 4)))
    assert note in m.notes, m.notes
    for batch in (1, 3):
        result = run_bundle(out, [random_input((batch, 8), seed=batch)], "cpu", src)
        assert result.relative_error <= 1e-6, (batch, result.relative_error)


def test_a_square_becomes_a_product_and_other_powers_stay(tmp_path):
    _compiles_with(tmp_path, _layer_norm_like, "normalize: 1 Pow(x, 2) as Mul(x, x)")


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
    _save(path, helper.make_graph(nodes, "branching", [x], [y], inits))


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
    _save(path, helper.make_graph(nodes, "sliced", [x], [y], inits))


def test_a_slice_over_the_whole_batch_axis_slices_only_the_others(tmp_path):
    _compiles_with(tmp_path, _whole_axis_slice,
                   "normalize: whole-axis entries dropped from 1 Slice node")


def _constant_forms(path):
    """x [N, 8] times a float, times a list of floats, reshaped by a list of ints and a row
    picked by an int: each a Constant in its opset-12 scalar or list form."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])
    nodes = [helper.make_node("Constant", [], ["k"], value_float=2.5),
             helper.make_node("Constant", [], ["ks"], value_floats=[float(v) for v in range(8)]),
             helper.make_node("Constant", [], ["sh"], value_ints=[0, 2, 4]),
             helper.make_node("Constant", [], ["row"], value_int=1),
             helper.make_node("Mul", ["x", "k"], ["a"]),
             helper.make_node("Mul", ["a", "ks"], ["b"]),
             helper.make_node("Reshape", ["b", "sh"], ["r"]),
             helper.make_node("Gather", ["r", "row"], ["g"], axis=1),
             helper.make_node("Concat", ["g", "g"], ["y"], axis=1)]
    _save(path, helper.make_graph(nodes, "constants", [x], [y]))


def test_constants_in_scalar_and_list_forms_are_tensors(tmp_path):
    """TVM's importer read value_float as float64 and refused the product ("Binary operators
    must have the same datatype") before stop 76."""
    _compiles_with(tmp_path, _constant_forms, "normalize: 4 Constant nodes given as "
                   "value_float(s) or value_int(s) written as tensors")


def _convs_joined(path, op, extra=()):
    """x [N, 8] seen as [N, 2, 2, 2] -> two convolutions joined by `op` of three inputs (or
    a Dropout with a ratio) -> a convolution -> y [N, 8]."""
    rng = np.random.default_rng(4)

    def weight(name, *shape):
        return helper.make_tensor(name, TensorProto.FLOAT, shape,
                                  (0.3 * rng.standard_normal(shape)).reshape(-1).tolist())

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])
    inits = [helper.make_tensor("sh", TensorProto.INT64, [4], [0, 2, 2, 2]),
             helper.make_tensor("back", TensorProto.INT64, [2], [0, 8]),
             weight("w1", 16, 2, 3, 3), weight("w2", 16, 2, 1, 1), weight("w3", 2, 16, 3, 3),
             weight("s", 16, 1, 1), *extra]
    joined = ([helper.make_node("Dropout", ["a", "ratio"], ["j"])] if op == "Dropout" else
              [helper.make_node(op, ["a", "b", "s"], ["j"])])
    nodes = [helper.make_node("Reshape", ["x", "sh"], ["x4"]),
             helper.make_node("Conv", ["x4", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x4", "w2"], ["b"]), *joined,
             helper.make_node("Conv", ["j", "w3"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c", "back"], ["y"])]
    _save(path, helper.make_graph(nodes, "joined", [x], [y], inits))


@pytest.mark.parametrize("op,note", [
    ("Max", ""), ("Min", ""), ("Mean", ""),
    ("Dropout", "1 Dropout(s) passed through, as at inference")])
def test_what_took_a_model_out_of_its_blocked_layout_is_rewritten(tmp_path, op, note):
    """A Max, Min or Mean of three (TVM: a stack, then a reduction; now a chain of binary
    operators, relax_rewrite.stacked_reductions_as_chains) and a Dropout with a ratio (TVM: a
    tuple) failed TVM's layout conversion, and every convolution of the model stayed in plain
    NCHW on the CPU (none went to CUTLASS on CUDA) until stop 76."""
    ratio = [helper.make_tensor("ratio", TensorProto.FLOAT, [], [0.3])] if op == "Dropout" \
        else []
    from cw.compile.compiler import CompileConfig, compile_model

    src = tmp_path / "m.onnx"
    _convs_joined(src, op, ratio)
    m = compile_model(src, tmp_path / "bundle", CompileConfig(batch_sizes=(1, 4)))
    assert any(note in n for n in m.notes), m.notes
    assert not any("kept in NCHW" in n for n in m.notes), m.notes
    for batch in (1, 3):
        result = run_bundle(tmp_path / "bundle", [random_input((batch, 8), seed=batch)], "cpu",
                            src)
        assert result.relative_error <= 1e-5, (batch, result.relative_error)


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
    src = _save(tmp_path / "loop.onnx", graph)
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
    src = _save(tmp_path / "scaled.onnx", graph)
    r = cli("compile", src, "-o", tmp_path / "b")
    assert r.code == 3 and "--input-value scale=VALUE" in r.err, r.err
    out = tmp_path / "fixed"
    r = cli("compile", src, "-o", out, "--input-value", "scale=0.5", "--batch-sizes", "1,4")
    assert r.code == 0, r.err
    x = random_input((3, 8), seed=3)
    result = run_bundle(out, [x], "cpu", src)
    assert result.relative_error == 0 and np.array_equal(result.outputs[0], x * 0.5)


def test_a_sequence_first_gru_compiles_batch_first(tmp_path):
    """A GRU as exported with ONNX's default layout, [time, batch, features] in and
    [time, directions, batch, hidden] out: unrolled (TVM has no GRU), its batch axes taken
    first at both ends, and the bundle agrees with onnxruntime's GRU at batch 1 and 3."""
    from onnx import numpy_helper

    from cw.compile.compiler import CompileConfig, compile_model

    rng = np.random.default_rng(0)
    t, i, h = 4, 6, 8
    inits = [numpy_helper.from_array((0.4 * rng.standard_normal(shape)).astype(np.float32),
                                     name)
             for name, shape in (("W", (2, 3 * h, i)), ("R", (2, 3 * h, h)),
                                 ("B", (2, 6 * h)))]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [t, "N", i])
    ys = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [t, 2, "N", h]),
          helper.make_tensor_value_info("y_h", TensorProto.FLOAT, [2, "N", h])]
    node = helper.make_node("GRU", ["x", "W", "R", "B"], ["y", "y_h"], hidden_size=h,
                            direction="bidirectional", linear_before_reset=1)
    graph = helper.make_graph([node], "gru", [x], ys, inits)
    src = _save(tmp_path / "gru.onnx", graph)
    out = tmp_path / "bundle"
    m = compile_model(src, out, CompileConfig(batch_sizes=(1, 4)))
    assert any("1 GRU unrolled" in n for n in m.notes), m.notes
    assert [(s.sample_shape, s.source_batch_axis) for s in m.inputs] == [([t, i], 1)]
    assert [(s.sample_shape, s.source_batch_axis) for s in m.outputs] == \
        [([t, 2, h], 2), ([2, h], 1)]
    for batch in (1, 3):
        result = run_bundle(out, [random_input((batch, t, i), seed=batch)], "cpu", src)
        assert result.outputs[0].shape == (batch, t, 2, h)
        assert result.relative_error <= 1e-5, (batch, result.relative_error)


def test_a_gru_given_each_samples_length_compiles(tmp_path):
    """sequence_lens as an input of the bundle (each request its own length, an int32 scalar
    per sample): past it a sample's state stays and its outputs are 0, as in onnxruntime."""
    from onnx import numpy_helper

    from cw.compile.compiler import CompileConfig, compile_model

    rng = np.random.default_rng(0)
    t, i, h = 5, 6, 8
    inits = [numpy_helper.from_array((0.4 * rng.standard_normal(shape)).astype(np.float32),
                                     name)
             for name, shape in (("W", (1, 3 * h, i)), ("R", (1, 3 * h, h)))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [t, "N", i]),
              helper.make_tensor_value_info("lens", TensorProto.INT32, ["N"])]
    ys = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [t, 1, "N", h]),
          helper.make_tensor_value_info("y_h", TensorProto.FLOAT, [1, "N", h])]
    node = helper.make_node("GRU", ["x", "W", "R", "", "lens"], ["y", "y_h"], hidden_size=h)
    src = _save(tmp_path / "gru.onnx", helper.make_graph([node], "gru", inputs, ys, inits))
    m = compile_model(src, tmp_path / "b", CompileConfig(batch_sizes=(1, 4)))
    assert [(s.name, s.sample_shape) for s in m.inputs] == [("x", [t, i]), ("lens", [])]
    lens = np.array([5, 2, 1], np.int32)
    result = run_bundle(tmp_path / "b", [random_input((3, t, i), seed=3), lens], "cpu", src)
    assert result.relative_error <= 1e-5, result.relative_error
    y = result.outputs[0]  # [batch, time, directions, hidden]
    assert np.all(y[1, 2:] == 0) and np.all(y[2, 1:] == 0) and np.all(y[0] != 0)


@pytest.mark.parametrize("name", ["small_bert", "int8_activations", "edge:yolox_nano_416"])
def test_onnxslim_folds_alike_made_lighter(zoo_onnx, name, monkeypatch):
    """onnxslim's shape inference and its check for convergence run on the model without its
    weights' bytes: small_bert takes the path where onnxslim's symbolic inference fails
    (LayerNormalization) and falls back to onnx's, int8_activations the one where it succeeds
    and adds initializers. The graph after normalization is byte for byte what onnxslim's own
    steps give, after as many rounds."""
    import contextlib
    import hashlib

    from cw.compile import normalize, onnx_load, onnx_shapes, slimming

    import onnxslim.core

    annotated = []  # onnx_shapes.annotate: only the weightless onnxslim inference calls it
    annotate = onnx_shapes.annotate
    monkeypatch.setattr(onnx_shapes, "annotate",
                        lambda model, inferred: annotated.append(1) or annotate(model, inferred))
    rounds = []  # onnxslim's rounds of folding, until the graph stops changing
    optimize = onnxslim.core.optimize
    monkeypatch.setattr(onnxslim.core, "optimize",
                        lambda *args, **kwargs: rounds.append(1) or optimize(*args, **kwargs))

    def normalized(lighter: bool):
        if not lighter:
            monkeypatch.setattr(slimming, "_lighter_onnxslim", contextlib.nullcontext)
        rounds.clear()
        m = onnx_load.load_onnx(zoo_onnx(name))
        normalize.convert_version(m, lambda event, info: None)
        normalize.dequantize(m, lambda event, info: None)
        normalize.slim(m, lambda event, info: None)
        data = m.model.SerializeToString(deterministic=True)
        return hashlib.sha256(data).hexdigest(), m.notes, len(rounds)

    ours = normalized(True)
    assert len(annotated) >= 2  # onnxslim infers after each of its (at least two) rounds
    assert ours == normalized(False)


def test_onnxslim_keeps_no_graph_once_done(zoo_onnx):
    """onnxslim's fusion matchers are module-level and kept their last matches (graph nodes,
    and through them a copy of the weights) after `slim`: normalization releases them."""
    from onnxslim.core.pattern.registry import DEFAULT_FUSION_PATTERNS

    from cw.compile import normalize, onnx_load

    m = onnx_load.load_onnx(zoo_onnx("small_bert"))
    normalize.slim(m, lambda event, info: None)
    matchers = [x for ms in DEFAULT_FUSION_PATTERNS.values() for x in ms]
    assert len(matchers) > 10
    held = [(type(x).__name__, name) for x in matchers for name in x.pattern_dict
            if name in vars(x)]
    assert held == []
