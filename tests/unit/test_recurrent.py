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
           weights_as_nodes=False, outputs=("y", "y_h"), **attrs):
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
    inputs = ["x", w, "R", ("B_node" if weights_as_nodes else "B") if bias else "", ""]
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
], ids=lambda v: "-".join(f"{k}={v}" for k, v in v.items()) or "lstm")
def test_unrolled_layer_equals_onnxruntimes(variant):
    model = _model(**variant)
    rng = np.random.default_rng(1)
    d = 2 if variant.get("direction") == "bidirectional" else 1
    feeds = {"x": rng.standard_normal((T, B, I)).astype(np.float32),
             "h0": rng.standard_normal((d, B, H)).astype(np.float32),
             "c0": rng.standard_normal((d, B, H)).astype(np.float32)}
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


@pytest.mark.parametrize("cell,attrs,text", [
    ("LSTM", {"clip": 1.0}, "has clip=1.0"),
    ("LSTM", {"input_forget": 1}, "has input_forget=1"),
    ("LSTM", {"activations": ["LeakyRelu", "Tanh", "Tanh"]}, "has activations"),
    ("GRU", {"layout": 1}, "has layout=1"),
])
def test_variants_cw_does_not_unroll_are_refused_by_name(cell, attrs, text):
    model = _model(cell, **attrs)
    with pytest.raises(ModelError) as e:
        recurrent.rewrite(model)
    assert f"{cell} 'cell'" in str(e.value) and text in str(e.value)
