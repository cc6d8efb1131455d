"""ONNX `LSTM`, `GRU` and `RNN` unrolled into the operators TVM imports (MatMul, Add,
Sigmoid, Tanh, Mul).

TVM 0.27's Relax importer has no recurrent operators. With the sequence length fixed by the
input shapes, a recurrent layer is a fixed chain of products: one input projection for every
step at once, then per step a product by the recurrent weights and the gate arithmetic of the
ONNX definition (LSTM: gates i, o, f, c; C = f*C + i*g(c); H = o*h(C). GRU: gates z, r, h,
with `linear_before_reset` either way; H = (1 - z)*n + z*H. RNN: H = f(x + H*R)). Forward,
reverse and bidirectional layers, optional biases, initial states and LSTM peepholes, and
every activation ONNX names for them (those with alpha and beta too, consumed in order as
onnxruntime does: Keras's hard-sigmoid LSTMs), `clip` on the activations' inputs,
`input_forget`, the batch-first layout and `sequence_lens` (a length per sample: past it a
sample's state stays and its outputs are 0) are rewritten.
"""

from __future__ import annotations


import numpy as np
import onnx
from onnx import numpy_helper

from cw.compile import onnx_shapes
from cw.compile.emit import Emitter, attr as _attr
from cw.errors import ModelError

_DOMAINS = ("", "ai.onnx")


def is_rewritten(node: onnx.NodeProto) -> bool:
    return node.op_type in _CELLS and node.domain in _DOMAINS


class _Emitter(Emitter):
    def weight(self, source: str, direction: int, what: str, transpose: bool) -> str:
        """`source[direction]` (transposed), computed here when `source` is an initializer,
        else as graph nodes (which cw lifts as weight-only math)."""
        if source in self.inits:
            w = numpy_helper.to_array(self.inits[source])[direction]
            return self.const(np.ascontiguousarray(w.T if transpose else w), what)
        picked = self.op("Gather", [source, self.const(np.array(direction, np.int64), "d")],
                         what, axis=0)
        return self.op("Transpose", [picked], what, perm=[1, 0]) if transpose else picked


# cell -> (gates, default activations), per ONNX's definitions
_CELLS = {"LSTM": (4, ["Sigmoid", "Tanh", "Tanh"]), "GRU": (3, ["Sigmoid", "Tanh"]),
          "RNN": (1, ["Tanh"])}
# ONNX's recurrent activations (names case-insensitive) -> (operator, its alpha and beta
# defaults; None: takes none); Affine and ScaledTanh are no operators of their own
_ACTIVATIONS = {"relu": ("Relu", None, None), "tanh": ("Tanh", None, None),
                "sigmoid": ("Sigmoid", None, None), "softsign": ("Softsign", None, None),
                "softplus": ("Softplus", None, None), "leakyrelu": ("LeakyRelu", 0.01, None),
                "thresholdedrelu": ("ThresholdedRelu", 1.0, None), "elu": ("Elu", 1.0, None),
                "hardsigmoid": ("HardSigmoid", 0.2, 0.5), "affine": ("Affine", 1.0, 0.0),
                "scaledtanh": ("ScaledTanh", 1.0, 1.0)}


def _refusal(node, what: str) -> ModelError:
    return ModelError(f"{node.op_type} '{node.name or node.output[0]}' {what}: cw cannot "
                      "unroll it", "export it with ONNX's activations, and the lengths of its "
                      "samples (sequence_lens) as an input")


class _Activation:
    """One activation of a cell, with its alpha and beta where it takes them."""

    def __init__(self, name: str, alpha: float | None, beta: float | None, clip: float | None):
        self.name, self.alpha, self.beta, self.clip = name, alpha, beta, clip

    def __call__(self, e: Emitter, x: str, what: str, clipped: bool = True) -> str:
        # ONNX: "applied to the input of activations"; onnxruntime clips the gates' inputs,
        # not the LSTM cell state that h() reads
        if self.clip is not None and clipped:
            x = e.op("Clip", [x, e.const(np.float32(-self.clip), "lo"),
                              e.const(np.float32(self.clip), "hi")], "clip")
        if self.name == "Affine":
            return e.op("Add", [e.op("Mul", [x, e.const(np.float32(self.alpha), "a")]),
                                e.const(np.float32(self.beta), "b")], what)
        if self.name == "ScaledTanh":
            inner = e.op("Tanh", [e.op("Mul", [x, e.const(np.float32(self.beta), "b")])])
            return e.op("Mul", [inner, e.const(np.float32(self.alpha), "a")], what)
        params = {k: v for k, v in (("alpha", self.alpha), ("beta", self.beta)) if v is not None}
        return e.op(self.name, [x], what, **params)


def _activations(node) -> list[_Activation]:
    """Every direction's activations. alpha and beta are consumed in order by the
    activations that take them, each falling back to its operator's default (onnxruntime's
    reading of ONNX's "consumed in the order of activation functions")."""
    defaults = _CELLS[node.op_type][1]
    given = [a.decode() if isinstance(a, bytes) else a for a in _attr(node, "activations", [])]
    if given and (len(given) % len(defaults) or
                  not all(a.lower() in _ACTIVATIONS for a in given)):
        raise _refusal(node, f"has activations {given}")
    alphas = list(_attr(node, "activation_alpha", []))
    betas = list(_attr(node, "activation_beta", []))
    clip = _attr(node, "clip")
    made = []
    for name in given or defaults * 2:
        op, alpha, beta = _ACTIVATIONS[name.lower()]
        if alpha is not None and alphas:
            alpha = alphas.pop(0)
        if beta is not None and betas:
            beta = betas.pop(0)
        made.append(_Activation(op, alpha, beta, clip))
    directions = 2 if _attr(node, "direction", "forward") == "bidirectional" else 1
    if given and len(made) != directions * len(defaults):  # (onnxruntime refuses it too)
        raise _refusal(node, f"has {len(made)} activations for {directions} direction(s)")
    return made


def _check(node, seq_len, inits: dict) -> None:
    _activations(node)
    lengths = numpy_helper.to_array(inits[node.input[4]]) \
        if len(node.input) > 4 and node.input[4] in inits else None
    if lengths is not None and lengths.size > 1 and not np.all(lengths == seq_len):
        raise _refusal(node, f"has sequence_lens fixed for {lengths.size} samples")
    if seq_len is None:
        raise ModelError(f"{node.op_type} '{node.name or node.output[0]}': its sequence length "
                         "is not fixed", "fix the input's time axis with --input-shape")


def _input(node, i: int) -> str:
    return node.input[i] if len(node.input) > i else ""


def _biases(e: _Emitter, b: str, d: int, gates: int, hidden: int, gru: bool):
    """(bias added to the input projection, bias added to the recurrent product or None).
    ONNX gives Wb and Rb; both go into the projection but for a GRU's candidate gate, whose
    Rb is added to the recurrent product (reset gates scale it)."""
    if not b:
        return None, None
    size = gates * hidden
    keep = np.ones(size, np.float32)
    if gru:
        keep[2 * hidden:] = 0
    if b in e.inits:
        both = numpy_helper.to_array(e.inits[b])[d]
        wb, rb = both[:size], both[size:]
        return (e.const(wb + rb * keep, "bias"),
                e.const(rb * (1 - keep), "rbias") if gru else None)
    wb, rb = e.split(e.weight(b, d, "b", False), [size] * 2, 0, "b")
    projected = e.op("Add", [wb, e.op("Mul", [rb, e.const(keep, "keep")], "rbk")], "bias")
    return projected, e.op("Mul", [rb, e.const(1 - keep, "rest")], "rbias") if gru else None


def _lstm_step(e, node, g, h, c, rt, peep, act, hidden):
    f_act, g_act, h_act = act
    if h is not None:
        g = e.op("Add", [g, e.op("MatMul", [h, rt], "hr")], "gates")
    i, o, f, cand = e.split(g, [hidden] * 4, -1, "gate")
    if peep and c is not None:
        i = e.op("Add", [i, e.op("Mul", [peep[0], c], "pic")], "ip")
        f = e.op("Add", [f, e.op("Mul", [peep[2], c], "pfc")], "fp")
    i = f_act(e, i, "i")
    # input_forget couples the gates: f = 1 - i
    f = e.op("Sub", [e.const(np.float32(1), "one"), i], "f") if _attr(node, "input_forget", 0) \
        else f_act(e, f, "f")
    new_c = e.op("Mul", [i, g_act(e, cand, "cand")], "ic")
    if c is not None:  # an absent initial state is zeros: f*C is 0 at the first step
        new_c = e.op("Add", [e.op("Mul", [f, c], "fc"), new_c], "cnew")
    if peep:
        o = e.op("Add", [o, e.op("Mul", [peep[1], new_c], "poc")], "op")
    return e.op("Mul", [f_act(e, o, "o"), h_act(e, new_c, "tc", clipped=False)], "h"), new_c


def _gru_step(e, node, g, h, rt, rbias, act, hidden):
    f_act, g_act = act
    xz, xr, xh = e.split(g, [hidden] * 3, -1, "gate")
    before_reset = _attr(node, "linear_before_reset", 0)
    if h is None:  # zeros: the recurrent products vanish, the candidate's bias stays
        z, r = f_act(e, xz, "z"), f_act(e, xr, "r")
        if rbias is not None:
            rbh = e.split(rbias, [hidden] * 3, -1, "rb")[2]
            xh = e.op("Add", [xh, e.op("Mul", [r, rbh], "rrb") if before_reset else rbh], "xh")
        n = g_act(e, xh, "n")
        return e.op("Sub", [n, e.op("Mul", [z, n], "zn")], "h")
    rt_zr, rt_h = e.split(rt, [2 * hidden, hidden], -1, "rt")
    hz, hr = e.split(e.op("MatMul", [h, rt_zr], "hzr"), [hidden] * 2, -1, "hg")
    z = f_act(e, e.op("Add", [xz, hz], "zs"), "z")
    r = f_act(e, e.op("Add", [xr, hr], "rs"), "r")
    rbh = e.split(rbias, [hidden] * 3, -1, "rb")[2] if rbias is not None else None
    if before_reset:
        hh = e.op("MatMul", [h, rt_h], "hh")
        if rbh:
            hh = e.op("Add", [hh, rbh], "hhb")
        inner = e.op("Mul", [r, hh], "rhh")
    else:
        inner = e.op("MatMul", [e.op("Mul", [r, h], "rh"), rt_h], "rhr")
        if rbh:
            inner = e.op("Add", [inner, rbh], "rhrb")
    n = g_act(e, e.op("Add", [xh, inner], "ns"), "n")
    # (1 - z) * n + z * h
    return e.op("Add", [n, e.op("Mul", [z, e.op("Sub", [h, n], "hn")], "zhn")], "h")


def _kept(e: _Emitter, new: str, last: str | None, inside: str, masked: str) -> str:
    """The state after a step: `new` inside the sample's length, else `last` (zeros where
    there is none yet: `masked`, new * inside)."""
    if last is None:
        return masked
    return e.op("Add", [last, e.op("Mul", [e.op("Sub", [new, last], "dn"), inside], "dm")],
                "kept")


def _unroll(node, e: _Emitter, seq_len: int, hidden: int) -> None:
    directions = {"forward": [0], "reverse": [1], "bidirectional": [0, 1]}
    cell = node.op_type
    gates, defaults = _CELLS[cell]
    activations = _activations(node)
    direction = _attr(node, "direction", "forward")
    x, w, r, b = node.input[0], node.input[1], node.input[2], _input(node, 3)
    h0, c0, p = _input(node, 5), _input(node, 6), _input(node, 7)
    if cell != "LSTM":
        c0 = p = ""
    batch_first = _attr(node, "layout", 0) == 1  # X [B, T, I], states [B, D, H]
    if batch_first:
        x = e.op("Transpose", [x], "x", perm=[1, 0, 2])
        h0 = e.op("Transpose", [h0], "h0", perm=[1, 0, 2]) if h0 else ""
        c0 = e.op("Transpose", [c0], "c0", perm=[1, 0, 2]) if c0 else ""
    lengths = _input(node, 4)
    if lengths in e.inits and np.all(numpy_helper.to_array(e.inits[lengths]) == seq_len):
        lengths = ""  # every sample its whole length
    if lengths:  # [B] -> [B, 1] floats: a step's rows inside their sample's length
        lengths = e.op("Unsqueeze", [e.op("Cast", [lengths], "len", to=onnx.TensorProto.FLOAT),
                                     e.const(np.array([1], np.int64), "axis1")], "lengths")
    ys, hs, cs = [], [], []
    for d, reverse in enumerate(directions[direction]):
        act = activations[d * len(defaults):(d + 1) * len(defaults)]
        xw = e.op("MatMul", [x, e.weight(w, d, "wt", True)], "xw")  # [T, B, gates * H]
        bias, rbias = _biases(e, b, d, gates, hidden, cell == "GRU")
        if bias:
            xw = e.op("Add", [xw, bias], "xwb")
        rt = e.weight(r, d, "rt", True)
        peep = e.split(e.weight(p, d, "p", False), [hidden] * 3, 0, "p") if p else None
        h = e.op("Gather", [h0, e.const(np.array(d, np.int64), "d")], "h", axis=0) if h0 else None
        c = e.op("Gather", [c0, e.const(np.array(d, np.int64), "d")], "c", axis=0) if c0 else None
        steps = range(seq_len - 1, -1, -1) if reverse else range(seq_len)
        outputs = {}
        for t in steps:
            g = e.op("Gather", [xw, e.const(np.array(t, np.int64), "t")], "g", axis=0)
            last_h, last_c = h, c
            if cell == "LSTM":
                h, c = _lstm_step(e, node, g, h, c, rt, peep, act, hidden)
            elif cell == "GRU":
                h = _gru_step(e, node, g, h, rt, rbias, act, hidden)
            else:
                if h is not None:
                    g = e.op("Add", [g, e.op("MatMul", [h, rt], "hr")], "gates")
                h = act[0](e, g, "h")
            outputs[t] = h
            if lengths:  # past its length a sample's state stays and its output is 0
                inside = e.op("Cast", [e.op("Less", [e.const(np.float32(t), "t"), lengths])],
                              "inside", to=onnx.TensorProto.FLOAT)
                outputs[t] = e.op("Mul", [h, inside], "ym")
                h = _kept(e, h, last_h, inside, outputs[t])
                if cell == "LSTM":
                    c = _kept(e, c, last_c, inside, e.op("Mul", [c, inside], "cm"))
        axis0 = e.const(np.array([0], np.int64), "axis0")
        ys.append(e.op("Concat", [e.op("Unsqueeze", [outputs[t], axis0], "yt")
                                  for t in range(seq_len)], "y", axis=0))  # [T, B, H]
        hs.append(e.op("Unsqueeze", [h, axis0], "hn"))
        if cell == "LSTM":
            cs.append(e.op("Unsqueeze", [c, axis0], "cn"))
    axis1 = e.const(np.array([1], np.int64), "axis1")
    wanted = list(node.output) + [""] * (3 - len(node.output))
    if wanted[0]:  # [T, D, B, H], or [B, T, D, H]
        y = e.op("Concat", [e.op("Unsqueeze", [y, axis1], "yd") for y in ys], "y", axis=1,
                 outputs=None if batch_first else [wanted[0]])
        if batch_first:
            e.op("Transpose", [y], outputs=[wanted[0]], perm=[2, 0, 1, 3])
    for out, parts in ((wanted[1], hs), (wanted[2], cs)):
        if out:  # [D, B, H], or [B, D, H]
            last = e.op("Concat", parts, "last", axis=0, outputs=None if batch_first else [out])
            if batch_first:
                e.op("Transpose", [last], outputs=[out], perm=[1, 0, 2])


def rewrite(model: onnx.ModelProto) -> dict[str, int]:
    """Unroll every LSTM, GRU and RNN of `model` in place; returns how many of each. Needs
    the sequence length and the hidden size from the shapes (fixed by then)."""
    graph = model.graph
    if not any(is_rewritten(n) for n in graph.node):
        return {}
    dims = onnx_shapes.dims(onnx_shapes.infer(model))
    inits = {t.name: t for t in graph.initializer}
    nodes, count = [], {}
    for node in graph.node:
        if not is_rewritten(node):
            nodes.append(node)
            continue
        x, r = node.input[0], node.input[2]
        x_dims = list(inits[x].dims) if x in inits else dims.get(x)
        seq_len = x_dims[1 if _attr(node, "layout", 0) == 1 else 0] if x_dims else None
        _check(node, seq_len, inits)
        hidden = _attr(node, "hidden_size")
        if hidden is None:  # optional: R is [directions, gates * H, H]
            r_dims = list(inits[r].dims) if r in inits else dims.get(r)
            hidden = r_dims[2] if r_dims and r_dims[2] else None
        if hidden is None:
            raise _refusal(node, "has no hidden_size and its R has no known shape")
        e = _Emitter(node.name or node.output[0], inits)
        _unroll(node, e, seq_len, int(hidden))
        nodes.extend(e.nodes)
        graph.initializer.extend(e.new_inits)
        count[node.op_type] = count.get(node.op_type, 0) + 1
    del graph.node[:]
    graph.node.extend(nodes)
    return count
