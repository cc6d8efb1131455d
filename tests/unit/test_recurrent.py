"""cw/compile/recurrent.py: LSTM, GRU and RNN layers unrolled into plain operators compute
what onnxruntime's own kernels compute, for every variant cw accepts; the others are refused
by name."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cw.compile import recurrent
from cw.errors import ModelError

T, B, I, H = 3, 2, 5, 4
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _model(cell="LSTM", direction="forward", bias=True, initial=True, peepholes=False,
           weights_as_nodes=False, outputs=("y", "y_h"), lengths=False, **attrs):
    rng = np.random.default_rng(0)
    d, g = (2 if direction == "bidirectional" else 1), GATES[cell]
    inits = {"W": rng.standard_normal((d, g * H, I)), "R": rng.standard_normal((d, g * H, H)),
             "B": rng.standard_normal((d, 2 * g * H)), "P": rng.standard_normal((d, 3 * H))}
    inits = {k: (v * 0.5).astype(np.float32) for k, v in inits.items()}
    states = ["h0", "c0"] if cell == "LSTM" else ["h0"]
    nodes, graph_inputs = [], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, B, I])]
    if initial:
        graph_inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [d, B, H])
                         for n in states]
    w = "W"
    if weights_as_nodes:  # weights and biases computed by the graph, not initializers
        nodes += [helper.make_node("Identity", ["W"], ["W_node"]),
                  helper.make_node("Identity", ["B"], ["B_node"])]
        w = "W_node"
    inputs = ["x", w, "R", ("B_node" if weights_as_nodes else "B") if bias else "",
              "lens" if lengths else ""]
    if lengths:
        graph_inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [B]))
    inputs += [s if initial else "" for s in states] + (["P"] if peepholes else [])
    nodes.append(helper.make_node(cell, inputs, list(outputs), name="cell", hidden_size=H,
                                  direction=direction, **attrs))
    shapes = {"y": [T, d, B, H], "y_h": [d, B, H], "y_c": [d, B, H]}
    graph = helper.make_graph(
        nodes, "recurrent", graph_inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outputs if o],
        [numpy_helper.from_array(v, k) for k, v in inits.items()
         if k != "P" or peepholes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model, feeds):
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feeds.items() if k in names})


@pytest.mark.parametrize("variant", [
    {},
    {"outputs": ("y", "y_h", "y_c")},
    {"direction": "reverse", "bias": False, "initial": False},
    {"direction": "bidirectional", "peepholes": True, "outputs": ("y", "y_h", "y_c")},
    {"direction": "bidirectional", "initial": False, "weights_as_nodes": True},
    {"outputs": ("", "y_h", "y_c")},
    {"activations": ["Sigmoid", "Relu", "Tanh"]},
    {"cell": "GRU"},
    {"cell": "GRU", "linear_before_reset": 1},
    {"cell": "GRU", "initial": False},
    {"cell": "GRU", "initial": False, "linear_before_reset": 1, "direction": "reverse"},
    {"cell": "GRU", "bias": False, "direction": "bidirectional"},
    {"cell": "GRU", "weights_as_nodes": True, "linear_before_reset": 1},
    {"cell": "RNN"},
    {"cell": "RNN", "initial": False, "direction": "bidirectional",
     "activations": ["Relu", "Tanh"]},
    # refused until stop 74: clip, input_forget, activations with alpha and beta (Keras's
    # hard-sigmoid LSTM), each of ONNX's activations, alpha and beta consumed in order by
    # those that take them, across directions
    {"clip": 0.6, "peepholes": True},
    {"cell": "GRU", "clip": 0.6, "linear_before_reset": 1},
    {"cell": "RNN", "clip": 0.6, "direction": "bidirectional"},
    {"input_forget": 1, "direction": "bidirectional"},
    {"activations": ["HardSigmoid", "Tanh", "Tanh"], "activation_alpha": [0.2],
     "activation_beta": [0.5]},
    {"direction": "bidirectional", "activations": [
        "HardSigmoid", "ScaledTanh", "Affine", "LeakyRelu", "Softsign", "ThresholdedRelu"],
     "activation_alpha": [0.3, 0.8, 1.5, 0.1, 0.4], "activation_beta": [0.4, 1.2, -0.2]},
    {"cell": "GRU", "activations": ["Elu", "Softplus"], "activation_alpha": [0.7]},
    {"cell": "RNN", "activations": ["LeakyRelu"]},
    # a length per sample (refused until stop 74): past it the state stays, the outputs are 0
    {"lengths": True, "outputs": ("y", "y_h", "y_c")},
    {"lengths": True, "direction": "bidirectional", "initial": False},
    {"cell": "GRU", "lengths": True, "direction": "reverse"},
    {"cell": "RNN", "lengths": True, "direction": "bidirectional"},
], ids=lambda v: "-".join(f"{k}={v}" for k, v in v.items()) or "lstm")
def test_unrolled_layer_equals_onnxruntimes(variant):
    model = _model(**variant)
    rng = np.random.default_rng(1)
    d = 2 if variant.get("direction") == "bidirectional" else 1
    feeds = {"x": rng.standard_normal((T, B, I)).astype(np.float32),
             "h0": rng.standard_normal((d, B, H)).astype(np.float32),
             "c0": rng.standard_normal((d, B, H)).astype(np.float32),
             "lens": np.array([T - 1, 1][:B], np.int32)}
    expected = _run(model, feeds)
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    cell = variant.get("cell", "LSTM")
    assert recurrent.rewrite(rewritten) == {cell: 1}
    assert not any(n.op_type == cell for n in rewritten.graph.node)
    onnx.checker.check_model(rewritten)
    got = _run(rewritten, feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cell", ["LSTM", "GRU", "RNN"])
def test_a_batch_first_layer_is_the_sequence_first_one_transposed(cell):
    """layout=1 ([batch, time, features] in, [batch, time, directions, hidden] and [batch,
    directions, hidden] out), which onnxruntime refuses: the same weights at layout=0 give
    onnxruntime's answer, transposed."""
    rng = np.random.default_rng(2)
    reference = _model(cell, direction="bidirectional", outputs=("y", "y_h"))
    feeds = {"x": rng.standard_normal((T, B, I)).astype(np.float32),
             "h0": rng.standard_normal((2, B, H)).astype(np.float32),
             "c0": rng.standard_normal((2, B, H)).astype(np.float32)}
    expected = _run(reference, feeds)
    batch_first = _model(cell, direction="bidirectional", outputs=("y", "y_h"), layout=1)
    for vi in [*batch_first.graph.input, *batch_first.graph.output]:
        dims = vi.type.tensor_type.shape.dim
        order = [1, 0, 2] if len(dims) == 3 else [2, 0, 1, 3]
        values = [dims[k].dim_value for k in order]
        for d, v in zip(dims, values):
            d.dim_value = v
    assert recurrent.rewrite(batch_first) == {cell: 1}
    got = _run(batch_first, {k: np.ascontiguousarray(v.transpose(1, 0, 2))
                             for k, v in feeds.items()})
    np.testing.assert_allclose(got[0], expected[0].transpose(2, 0, 1, 3), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], expected[1].transpose(1, 0, 2), rtol=1e-5, atol=1e-5)


def test_lengths_fixed_per_sample_and_an_unknown_activation_are_refused_by_name():
    model = _model("GRU")
    model.graph.node[-1].input[4] = "lens"
    model.graph.initializer.append(numpy_helper.from_array(np.array([T, 1], np.int32), "lens"))
    with pytest.raises(ModelError) as e:
        recurrent.rewrite(model)
    assert "GRU 'cell' has sequence_lens fixed for 2 samples" in str(e.value)
    with pytest.raises(ModelError) as e:
        recurrent.rewrite(_model("LSTM", activations=["Gelu", "Tanh", "Tanh"]))
    assert "LSTM 'cell' has activations ['Gelu', 'Tanh', 'Tanh']" in str(e.value)
    with pytest.raises(ModelError) as e:  # (one direction's set: onnxruntime refuses it too)
        recurrent.rewrite(_model("LSTM", direction="bidirectional",
                                 activations=["HardSigmoid", "Tanh", "Tanh"]))
    assert "LSTM 'cell' has 3 activations for 2 direction(s)" in str(e.value)
