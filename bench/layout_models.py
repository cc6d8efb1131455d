"""Small CNNs (64 channels at 56x56, three residual blocks) whose every block has one pattern
that cw's blocked CPU layout handled badly until stop 77: ConvNeXt's channels-first LayerNorm,
GroupNormalization, CBAM's spatial attention (each took the whole model off the layout), a
PReLU (a conversion out of the layout and back around each); until stop 78: a generator's
reflect pad before each 3x3 convolution (the same).

    python bench/layout_models.py DIR   # DIR/{layer_norm,...,reflect_pad}.onnx

Then compile each with two checkouts and time them side by side with bench/edge_speed.py
(docs/benchmarks.md, stop 77)."""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CHANNELS, SIDE = 64, 56
KINDS = ("layer_norm", "group_norm", "spatial_attention", "prelu", "reflect_pad")
node = helper.make_node


def _tensor(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _norm(kind, a, p, rng, inits):
    """The nodes from `a` (a convolution's output) to `{p}norm`."""
    c = CHANNELS
    if kind == "layer_norm":  # PyTorch's channels-first LayerNorm, as ConvNeXt writes it
        inits += [_tensor(p + "s", rng.uniform(0.5, 1.5, (c, 1, 1))),
                  _tensor(p + "o", rng.uniform(-0.1, 0.1, (c, 1, 1)))]
        return [node("ReduceMean", [a, "axis1"], [p + "mu"], keepdims=1),
                node("Sub", [a, p + "mu"], [p + "d"]), node("Mul", [p + "d", p + "d"], [p + "d2"]),
                node("ReduceMean", [p + "d2", "axis1"], [p + "v"], keepdims=1),
                node("Add", [p + "v", "eps"], [p + "ve"]), node("Sqrt", [p + "ve"], [p + "sd"]),
                node("Div", [p + "d", p + "sd"], [p + "nn"]),
                node("Mul", [p + "nn", p + "s"], [p + "ns"]),
                node("Add", [p + "ns", p + "o"], [p + "norm"])]
    if kind == "group_norm":
        inits += [_tensor(p + "s", rng.uniform(0.5, 1.5, c)),
                  _tensor(p + "o", rng.uniform(-0.1, 0.1, c))]
        return [node("GroupNormalization", [a, p + "s", p + "o"], [p + "norm"], num_groups=8)]
    if kind == "reflect_pad":  # the pad is before the convolution; here a ReLU
        return [node("Relu", [a], [p + "norm"])]
    if kind == "prelu":  # a face-recognition ResNet's
        inits.append(_tensor(p + "slope", rng.uniform(0.1, 0.3, (c, 1, 1))))
        return [node("PRelu", [a, p + "slope"], [p + "norm"])]
    inits.append(_tensor(p + "sa", rng.standard_normal((1, 2, 7, 7)) / 10))  # CBAM's
    return [node("ReduceMean", [a, "axis1"], [p + "avg"], keepdims=1),
            node("ReduceMax", [a, "axis1"], [p + "max"], keepdims=1),
            node("Concat", [p + "avg", p + "max"], [p + "am"], axis=1),
            node("Conv", [p + "am", p + "sa"], [p + "sc"], pads=[3, 3, 3, 3]),
            node("Sigmoid", [p + "sc"], [p + "g"]), node("Mul", [a, p + "g"], [p + "norm"])]


def build(kind: str, path: str, blocks: int = 3) -> None:
    rng = np.random.default_rng(0)
    c = CHANNELS

    def weight(name, *shape):
        return _tensor(name, rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:])))

    inits = [weight("stem", c, 3, 3, 3), _tensor("axis1", [1], np.int64), _tensor("eps", 1e-6),
             _tensor("pads", [0, 0, 1, 1, 0, 0, 1, 1], np.int64)]
    nodes = [node("Conv", ["x", "stem"], ["h0"], pads=[1, 1, 1, 1])]
    h = "h0"
    for b in range(blocks):
        p = f"b{b}_"
        inits += [weight(p + "c1", c, c, 3, 3), weight(p + "c2", 2 * c, c, 1, 1),
                  weight(p + "c3", c, 2 * c, 1, 1)]
        if kind == "reflect_pad":  # fast neural style's and CycleGAN's residual blocks
            nodes += [node("Pad", [h, "pads"], [p + "pad"], mode="reflect"),
                      node("Conv", [p + "pad", p + "c1"], [p + "a"])]
        else:
            nodes.append(node("Conv", [h, p + "c1"], [p + "a"], pads=[1, 1, 1, 1]))
        nodes += _norm(kind, p + "a", p, rng, inits)
        nodes += [node("Conv", [p + "norm", p + "c2"], [p + "e"]),
                  node("Relu", [p + "e"], [p + "r"]), node("Conv", [p + "r", p + "c3"], [p + "f"]),
                  node("Add", [h, p + "f"], [p + "out"])]
        h = p + "out"
    nodes.append(node("Identity", [h], ["y"]))
    graph = helper.make_graph(
        nodes, kind,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, SIDE, SIDE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", c, SIDE, SIDE])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python bench/layout_models.py DIR")
    for kind in KINDS:
        build(kind, f"{sys.argv[1]}/{kind}.onnx")
        print(f"{sys.argv[1]}/{kind}.onnx")
