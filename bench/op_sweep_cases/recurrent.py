"""LSTM, GRU and RNN forms: directions, layouts, clip, activations, states, sequence_lens (stop 74)."""
# ruff: noqa: E501 (one case per line reads best)

import numpy as np  # noqa: F401
from onnx import TensorProto as T  # noqa: F401

from .common import I64, F, N, c, group, io  # noqa: F401
from .common import case_io as case

group("recurrent")

rng = np.random.default_rng(0)
def W(name, *shape): return c(name, (0.4 * rng.standard_normal(shape)).astype(np.float32))
T_, I_, H = 5, 6, 4
def rec(op, gates, extra_inputs=(), extra_inits=(), dirs=1, layout=0, outs=("Y",), **attrs):
    nm = {"Y": "y", "Y_h": "yh", "Y_c": "yc"}
    inits = [W("W", dirs, gates * H, I_), W("R", dirs, gates * H, H), W("B", dirs, 2 * gates * H), *extra_inits]
    ins = ["x", "W", "R", "B", *extra_inputs]
    outputs_names = []
    for o in ("Y", "Y_h", "Y_c")[: (3 if op == "LSTM" else 2)]:
        outputs_names.append(nm[o] if o in outs else "")
    while outputs_names and outputs_names[-1] == "":
        outputs_names.pop()
    node = N(op, ins, outputs_names, hidden_size=H, layout=layout, **attrs)
    x = io("x", F, ["N", T_, I_] if layout == 1 else [T_, "N", I_])
    ov = []
    for o in outs:
        if o == "Y":
            ov.append(io("y", F, (["N", T_, dirs, H] if layout == 1 else [T_, dirs, "N", H])))
        else:
            ov.append(io(nm[o], F, (["N", dirs, H] if layout == 1 else [dirs, "N", H])))
    return [node], [x], ov, inits
for op, gates in (("LSTM", 4), ("GRU", 3), ("RNN", 1)):
    for direction, dirs in (("forward", 1), ("reverse", 1), ("bidirectional", 2)):
        for layout in (0, 1):
            nodes, ins, outs, inits = rec(op, gates, dirs=dirs, layout=layout, outs=("Y", "Y_h"), direction=direction)
            case(f"{op} {direction} layout{layout}", nodes, ins, outs, inits)
    nodes, ins, outs, inits = rec(op, gates, outs=("Y",), clip=0.5)
    case(f"{op} clip", nodes, ins, outs, inits)
acts = {"LSTM": ["HardSigmoid", "Tanh", "Relu"], "GRU": ["Sigmoid", "Relu"], "RNN": ["Relu"]}
for op, gates in (("LSTM", 4), ("GRU", 3), ("RNN", 1)):
    nodes, ins, outs, inits = rec(op, gates, outs=("Y",), activations=acts[op])
    case(f"{op} custom activations", nodes, ins, outs, inits)
    a = {"LSTM": dict(activations=["HardSigmoid", "Tanh", "Tanh"], activation_alpha=[0.3, 1.0, 1.0], activation_beta=[0.4, 0.0, 0.0]),
         "GRU": dict(activations=["HardSigmoid", "Tanh"], activation_alpha=[0.3], activation_beta=[0.4]),
         "RNN": dict(activations=["LeakyRelu"], activation_alpha=[0.2])}[op]
    nodes, ins, outs, inits = rec(op, gates, outs=("Y",), **a)
    case(f"{op} activation alpha beta", nodes, ins, outs, inits)
nodes, ins, outs, inits = rec("GRU", 3, outs=("Y",), linear_before_reset=0)
case("GRU linear_before_reset 0", nodes, ins, outs, inits)
nodes, ins, outs, inits = rec("LSTM", 4, outs=("Y", "Y_h", "Y_c"))
case("LSTM three outputs", nodes, ins, outs, inits)
nodes, ins, outs, inits = rec("LSTM", 4, extra_inputs=["", "", "", "P"], extra_inits=[W("P", 1, 3 * H)], outs=("Y",))
case("LSTM peepholes", nodes, ins, outs, inits)
nodes, ins, outs, inits = rec("LSTM", 4, outs=("Y",), input_forget=1)
case("LSTM input_forget", nodes, ins, outs, inits)
# initial states as inputs (batch-first with layout 1)
nodes, ins, outs, inits = rec("GRU", 3, extra_inputs=["", "h0"], outs=("Y",))
case("GRU initial state input", nodes, ins + [io("h0", F, [1, "N", H])], outs, inits)
nodes, ins, outs, inits = rec("LSTM", 4, extra_inputs=["", "h0", "c0"], outs=("Y_h",))
case("LSTM initial h c inputs", nodes, ins + [io("h0", F, [1, "N", H]), io("c0", F, [1, "N", H])], outs, inits)
nodes, ins, outs, inits = rec("LSTM", 4, extra_inputs=["", "h0c"], extra_inits=[W("h0c", 1, 1, H)], outs=("Y",), layout=0)
case("LSTM constant initial h batch 1", nodes, ins, [io("y", F, [T_, 1, "N", H])], inits) if False else None
nodes, ins, outs, inits = rec("GRU", 3, extra_inputs=["lens"], outs=("Y",))
case("GRU sequence_lens input", nodes, ins + [io("lens", T.INT32, ["N"])], outs, inits)
