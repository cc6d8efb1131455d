"""cw/compile/recurrent.py: an LSTM unrolled into plain operators computes what onnxruntime's
LSTM computes, for every variant it accepts; the others are refused by name."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cw.compile import recurrent
from cw.errors import ModelError

T, B, I, H = 3, 2, 5, 4


def _lstm_model(direction="forward", bias=True, initial=True, peepholes=False,
                weights_as_nodes=False, outputs=("y", "y_h", "y_c"), **attrs):
    rng = np.random.default_rng(0)
    d = 2 if direction == "bidirectional" else 1
    inits = {"W": rng.standard_normal((d, 4 * H, I)), "R": rng.standard_normal((d, 4 * H, H)),
             "B": rng.standard_normal((d, 8 * H)), "P": rng.standard_normal((d, 3 * H))}
    inits = {k: (v * 0.5).astype(np.float32) for k, v in inits.items()}
    nodes, graph_inputs = [], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, B, I])]
    if initial:
        graph_inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [d, B, H])
                         for n in ("h0", "c0")]
    w = "W"
    if weights_as_nodes:  # a weight computed by the graph, not an initializer
        nodes.append(helper.make_node("Identity", ["W"], ["W_node"]))
        w = "W_node"
    lstm_inputs = ["x", w, "R", "B" if bias else "", "", "h0" if initial else "",
                   "c0" if initial else ""] + (["P"] if peepholes else [])
    nodes.append(helper.make_node("LSTM", lstm_inputs, list(outputs), name="lstm",
                                  hidden_size=H, direction=direction, **attrs))
    shapes = {"y": [T, d, B, H], "y_h": [d, B, H], "y_c": [d, B, H]}
    graph = helper.make_graph(
        nodes, "lstm", graph_inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outputs if o],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model, feeds):
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {k: v for k, v in feeds.items()
                              if k in {i.name for i in session.get_inputs()}})


@pytest.mark.parametrize("variant", [
    {},
    {"direction": "reverse", "bias": False, "initial": False},
    {"direction": "bidirectional", "peepholes": True},
    {"direction": "bidirectional", "initial": False, "weights_as_nodes": True},
    {"outputs": ("", "y_h", "y_c")},
])
def test_unrolled_lstm_equals_onnxruntimes(variant):
    model = _lstm_model(**variant)
    rng = np.random.default_rng(1)
    d = 2 if variant.get("direction") == "bidirectional" else 1
    feeds = {"x": rng.standard_normal((T, B, I)).astype(np.float32),
             "h0": rng.standard_normal((d, B, H)).astype(np.float32),
             "c0": rng.standard_normal((d, B, H)).astype(np.float32)}
    expected = _run(model, feeds)
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert recurrent.rewrite(rewritten) == 1
    assert not any(n.op_type == "LSTM" for n in rewritten.graph.node)
    onnx.checker.check_model(rewritten)
    got = _run(rewritten, feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs,text", [
    ({"clip": 1.0}, "has clip=1.0"),
    ({"input_forget": 1}, "has input_forget=1"),
    ({"activations": ["Relu", "Tanh", "Tanh"]}, "has activations"),
])
def test_lstm_variants_cw_does_not_unroll_are_refused_by_name(attrs, text):
    model = _lstm_model(**attrs)
    with pytest.raises(ModelError) as e:
        recurrent.rewrite(model)
    assert "LSTM 'lstm'" in str(e.value) and text in str(e.value)
