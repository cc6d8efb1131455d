"""Operators between convolutions (stop 76): on the CPU cw keeps activations in a blocked
channel layout (16 or 8 channels a block) through what it can and converts around the rest,
so every operator after a convolution to 24 channels (not a whole number of blocks) is a test
of that conversion: channel slices, broadcasts along each axis, shuffles, reductions,
normalizations, transposes to NHWC."""
# ruff: noqa: E501 (one case per line reads best)

import numpy as np  # noqa: F401
from onnx import TensorProto, helper  # noqa: F401

from .common import I64, F, N, c, case, case_io, f32, group, i64, io, w  # noqa: F401

group("layouts")

XC = ["N", 8, 10, 10]
CONV = [N("Conv", ["x", "cw"], ["a"], pads=[1, 1, 1, 1]), N("Relu", ["a"], ["r"])]  # r: [N, 24, 10, 10]
CONV_INITS = [w("cw", 24, 8, 3, 3)]
AFTER = [w("cw2", 16, 24, 3, 3)]


def conv_then(name, nodes, inits=(), opset=17, back=True, scale=1.0):
    """x -> conv to 24 channels -> ReLU -> `nodes` (reading r, ending in t) -> with `back`, a
    conv to 16 (t then has 24 channels) -> y; without, t is y."""
    nodes = list(nodes)
    if not back:  # t is the output
        nodes[-1] = N(nodes[-1].op_type, nodes[-1].input, ["y"], **{
            a.name: helper.get_attribute_value(a) for a in nodes[-1].attribute})
    tail = [N("Conv", ["t", "cw2"], ["y"], pads=[1, 1, 1, 1])] if back else []
    case(name, CONV + nodes + tail, XC, CONV_INITS + (AFTER if back else []) + list(inits), opset, scale=scale)


conv_then("broadcast per channel [24, 1, 1]", [N("Mul", ["r", "s"], ["t"])], [w("s", 24, 1, 1)])
conv_then("broadcast per channel [1, 24, 1, 1] add", [N("Add", ["r", "s"], ["t"])], [w("s", 1, 24, 1, 1)])
conv_then("broadcast along W [10]", [N("Mul", ["r", "s"], ["t"])], [w("s", 10)])
conv_then("broadcast along H [10, 1]", [N("Sub", ["r", "s"], ["t"])], [w("s", 10, 1)])
conv_then("broadcast a whole sample [24, 10, 10]", [N("Div", ["r", "s"], ["t0"]), N("Tanh", ["t0"], ["t"])], [c("s", np.linspace(0.5, 2, 2400).reshape(24, 10, 10), np.float32)])
conv_then("PRelu per channel after a conv", [N("PRelu", ["a", "s"], ["t"])], [w("s", 24, 1, 1)])
conv_then("channels 4:20 sliced", [N("Slice", ["r", "s0", "s1", "ax"], ["t"])], [i64("s0", [4]), i64("s1", [20]), i64("ax", [1])], back=False)
conv_then("every other channel", [N("Slice", ["r", "s0", "s1", "ax", "st"], ["t"])], [i64("s0", [1]), i64("s1", [24]), i64("ax", [1]), i64("st", [2])], back=False)
conv_then("rows 2:8 sliced, then convolved", [N("Slice", ["r", "s0", "s1", "ax"], ["t"])], [i64("s0", [2]), i64("s1", [8]), i64("ax", [2])])
conv_then("split 4 / 20 channels, convolved, concatenated", [N("Split", ["r", "sp"], ["p", "q"], axis=1), N("Conv", ["p", "pw"], ["pc"], pads=[1, 1, 1, 1]), N("Conv", ["q", "qw"], ["qc"]), N("Concat", ["pc", "qc"], ["t"], axis=1)], [i64("sp", [4, 20]), w("pw", 12, 4, 3, 3), w("qw", 12, 20, 1, 1)])
conv_then("concat with the input (8 channels)", [N("Concat", ["r", "x"], ["t0"], axis=1), N("Conv", ["t0", "cw3"], ["t"], pads=[1, 1, 1, 1])], [w("cw3", 24, 32, 3, 3)])
conv_then("softmax over channels", [N("Softmax", ["r"], ["t"], axis=1)], (), 13)
conv_then("mean over channels", [N("ReduceMean", ["r"], ["m"], axes=[1], keepdims=1), N("Sub", ["r", "m"], ["t"])], (), 13)
conv_then("squeeze-excite", [N("GlobalAveragePool", ["r"], ["g"]), N("Conv", ["g", "sw"], ["g1"]), N("Sigmoid", ["g1"], ["g2"]), N("Mul", ["r", "g2"], ["t"])], [w("sw", 24, 24, 1, 1)])
conv_then("channel shuffle 2 x 12", [N("Reshape", ["r", "s1"], ["u"]), N("Transpose", ["u"], ["v"], perm=[0, 2, 1, 3, 4]), N("Reshape", ["v", "s2"], ["t"])], [i64("s1", [0, 2, 12, 10, 10]), i64("s2", [0, 24, 10, 10])])
conv_then("to NHWC, out", [N("Transpose", ["r"], ["t"], perm=[0, 2, 3, 1])], back=False)
conv_then("to NHWC, a linear layer, back", [N("Transpose", ["r"], ["h"], perm=[0, 2, 3, 1]), N("LayerNormalization", ["h", "ls", "lb"], ["hn"], axis=-1), N("MatMul", ["hn", "lw"], ["hl"]), N("Transpose", ["hl"], ["t"], perm=[0, 3, 1, 2])], [w("ls", 24), w("lb", 24), w("lw", 24, 24)])
conv_then("gather channels 0, 5, 23", [N("Gather", ["r", "ix"], ["t"], axis=1)], [i64("ix", [0, 5, 23])], back=False)
conv_then("pad channels 2 / 6", [N("Pad", ["r", "pd"], ["t0"]), N("Conv", ["t0", "cw3"], ["t"], pads=[1, 1, 1, 1])], [i64("pd", [0, 2, 0, 0, 0, 6, 0, 0]), w("cw3", 24, 32, 3, 3)])
conv_then("pad reflect spatially", [N("Pad", ["r", "pd"], ["t"], mode="reflect")], [i64("pd", [0, 0, 1, 2, 0, 0, 2, 1])])
conv_then("depth to space 2 (DCR)", [N("DepthToSpace", ["r"], ["t"], blocksize=2)], back=False)
conv_then("depth to space 2 (CRD)", [N("DepthToSpace", ["r"], ["t"], blocksize=2, mode="CRD")], back=False)
conv_then("space to depth 2", [N("SpaceToDepth", ["r"], ["t"], blocksize=2)], back=False)
conv_then("resize nearest 2x, convolved", [N("Resize", ["r", "", "sc"], ["t"], mode="nearest")], [f32("sc", [1, 1, 2, 2])])
conv_then("instance norm", [N("InstanceNormalization", ["r", "is", "ib"], ["t"])], [w("is", 24), w("ib", 24)])
conv_then("group norm 3 groups (opset 21)", [N("GroupNormalization", ["r", "gs", "gb"], ["t"], num_groups=3)], [w("gs", 24), w("gb", 24)], 21)
conv_then("batch norm", [N("BatchNormalization", ["a", "bs", "bb", "bm", "bv"], ["t"])], [w("bs", 24), w("bb", 24), w("bm", 24), f32("bv", np.linspace(0.5, 2, 24))])
conv_then("max pool 3 stride 2 ceil", [N("MaxPool", ["r"], ["t"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)])
conv_then("average pool, padding not counted", [N("AveragePool", ["r"], ["t"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
conv_then("depthwise 3x3", [N("Conv", ["r", "dw"], ["t"], pads=[1, 1, 1, 1], group=24)], [w("dw", 24, 1, 3, 3)])
conv_then("grouped, 8 channels a group", [N("Conv", ["r", "gw"], ["t"], pads=[1, 1, 1, 1], group=3)], [w("gw", 24, 8, 3, 3)])
# grouped convolutions whose groups whole blocks divide run blocked (stop 83): RegNet's groups of 16, strided; two blocks a group
case("grouped, 16 channels a group (RegNet's), strided", [N("Conv", ["x", "g0"], ["a"], pads=[1, 1, 1, 1]), N("Relu", ["a"], ["r"]), N("Conv", ["r", "gw16"], ["t"], pads=[1, 1, 1, 1], strides=[2, 2], group=3), N("Relu", ["t"], ["u"]), N("Conv", ["u", "g1"], ["y"])], XC, [w("g0", 48, 8, 3, 3), w("gw16", 48, 16, 3, 3), w("g1", 16, 48, 1, 1)])
case("grouped, 32 channels a group", [N("Conv", ["x", "g0"], ["a"], pads=[1, 1, 1, 1]), N("Relu", ["a"], ["r"]), N("Conv", ["r", "gw32"], ["t"], pads=[1, 1, 1, 1], group=2), N("Add", ["t", "r"], ["y"])], XC, [w("g0", 64, 8, 3, 3), w("gw32", 64, 32, 3, 3)])
conv_then("transposed convolution", [N("ConvTranspose", ["r", "tw"], ["t"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])], [w("tw", 24, 24, 3, 3)])
conv_then("two branches added", [N("Conv", ["x", "bw"], ["b"], pads=[1, 1, 1, 1]), N("Add", ["r", "b"], ["t"])], [w("bw", 24, 8, 3, 3)])
conv_then("leaky where", [N("Greater", ["a", "z"], ["g"]), N("Mul", ["a", "k"], ["s"]), N("Where", ["g", "a", "s"], ["t"])], [f32("z", 0.0), f32("k", 0.1)])
conv_then("argmax over channels", [N("ArgMax", ["r"], ["am"], axis=1, keepdims=1), N("Cast", ["am"], ["t"], to=F)], back=False)
conv_then("global pool, flatten, gemm", [N("GlobalAveragePool", ["r"], ["g"]), N("Flatten", ["g"], ["f"]), N("Gemm", ["f", "gw", "gb"], ["t"], transB=1)], [w("gw", 5, 24), w("gb", 5)], back=False)
conv_then("flatten everything, matmul", [N("Flatten", ["r"], ["f"]), N("MatMul", ["f", "fw"], ["t"])], [w("fw", 2400, 7)], back=False)
conv_then("tile channels twice", [N("Tile", ["r", "rep"], ["t0"]), N("Conv", ["t0", "cw3"], ["t"], pads=[1, 1, 1, 1])], [i64("rep", [1, 2, 1, 1]), w("cw3", 24, 48, 3, 3)])
conv_then("LRN after a conv", [N("LRN", ["r"], ["t"], size=5, alpha=1e-3, beta=0.75, bias=1.0)])
conv_then("clip and hard swish", [N("Clip", ["a", "lo", "hi"], ["cl"]), N("HardSwish", ["cl"], ["t"])], [f32("lo", -3.0), f32("hi", 3.0)], 14)
conv_then("conv 1x1 strided", [N("Conv", ["r", "pw"], ["t"], strides=[2, 2])], [w("pw", 24, 24, 1, 1)])
conv_then("conv 5x3 dilated, padded unevenly", [N("Conv", ["r", "kw"], ["t"], dilations=[2, 1], pads=[3, 1, 5, 1])], [w("kw", 24, 24, 5, 3)])
conv_then("squeeze the channel of a 1-channel conv", [N("Conv", ["r", "ow"], ["o"]), N("Squeeze", ["o", "ax"], ["t"])], [w("ow", 1, 24, 1, 1), i64("ax", [1])], 13, back=False)
case("1-D convolutions, 20 channels", [N("Conv", ["x", "k1"], ["a"], pads=[1, 1]), N("Relu", ["a"], ["r"]), N("Mul", ["r", "s"], ["m"]), N("Conv", ["m", "k2"], ["y"], pads=[2, 2], dilations=[2])], ["N", 6, 30], [w("k1", 20, 6, 3), w("s", 20, 1), w("k2", 12, 20, 3)])
case("3-D convolutions", [N("Conv", ["x", "k1"], ["a"], pads=[1, 1, 1, 1, 1, 1]), N("Relu", ["a"], ["r"]), N("MaxPool", ["r"], ["p"], kernel_shape=[2, 2, 2], strides=[2, 2, 2]), N("Conv", ["p", "k2"], ["y"])], ["N", 3, 6, 8, 8], [w("k1", 20, 3, 3, 3, 3), w("k2", 8, 20, 1, 1, 1)])
A2 = [io("x", F, XC), io("z", F, ["N", 24, 10, 10])]
case_io("a second input multiplies the conv's output", CONV + [N("Mul", ["r", "z"], ["t"]), N("Conv", ["t", "cw2"], ["y"], pads=[1, 1, 1, 1])], A2, [io("y", F, ["N", 16, 10, 10])], CONV_INITS + AFTER)
case_io("the conv's output is an output too", CONV + [N("Conv", ["r", "cw2"], ["y"], pads=[1, 1, 1, 1])], [io("x", F, XC)], [io("y", F, ["N", 16, 10, 10]), io("r", F, ["N", 24, 10, 10])], CONV_INITS + AFTER)
conv_then("dropout with a ratio (inference)", [N("Dropout", ["r", "ratio"], ["t"])], [f32("ratio", 0.3)], 13)
conv_then("max of three", [N("Conv", ["x", "bw"], ["b"], pads=[1, 1, 1, 1]), N("Max", ["r", "b", "s"], ["t"])], [w("bw", 24, 8, 3, 3), w("s", 24, 1, 1)], 13)
conv_then("mean of three", [N("Conv", ["x", "bw"], ["b"], pads=[1, 1, 1, 1]), N("Mean", ["r", "b", "s"], ["t"])], [w("bw", 24, 8, 3, 3), w("s", 24, 1, 1)], 13)
conv_then("min of three", [N("Conv", ["x", "bw"], ["b"], pads=[1, 1, 1, 1]), N("Min", ["r", "b", "s"], ["t"])], [w("bw", 24, 8, 3, 3), w("s", 24, 1, 1)], 13)
conv_then("sum of three", [N("Conv", ["x", "bw"], ["b"], pads=[1, 1, 1, 1]), N("Sum", ["r", "b", "s"], ["t"])], [w("bw", 24, 8, 3, 3), w("s", 24, 1, 1)], 13)
# (stop 77) one channel against many: TVM's conversion failed on the pair ("Cannot broadcast from 5 to 4")
conv_then("LayerNorm over channels (ConvNeXt channels-first)", [N("ReduceMean", ["r"], ["m"], axes=[1], keepdims=1), N("Sub", ["r", "m"], ["d"]), N("Mul", ["d", "d"], ["d2"]), N("ReduceMean", ["d2"], ["v"], axes=[1], keepdims=1), N("Add", ["v", "eps"], ["ve"]), N("Sqrt", ["ve"], ["sd"]), N("Div", ["d", "sd"], ["n"]), N("Mul", ["n", "ls"], ["nl"]), N("Add", ["nl", "lb"], ["t"])], [f32("eps", 1e-6), w("ls", 24, 1, 1), w("lb", 24, 1, 1)], 13)
conv_then("CBAM spatial attention", [N("ReduceMean", ["r"], ["m"], axes=[1], keepdims=1), N("ReduceMax", ["r"], ["mx"], axes=[1], keepdims=1), N("Concat", ["m", "mx"], ["mm"], axis=1), N("Conv", ["mm", "sw"], ["sc"], pads=[3, 3, 3, 3]), N("Sigmoid", ["sc"], ["sg"]), N("Mul", ["r", "sg"], ["t"])], [w("sw", 1, 2, 7, 7)], 13)
conv_then("scaled by a [1, 1, 1, 1] constant", [N("Mul", ["r", "k"], ["t"])], [f32("k", np.full((1, 1, 1, 1), 0.7))])
conv_then("per-sample scale [N, 1, 1, 1]", [N("ReduceMean", ["r"], ["m"], axes=[1, 2, 3], keepdims=1), N("Add", ["m", "one"], ["m1"]), N("Div", ["r", "m1"], ["t"])], [f32("one", 1.0)], 13)
conv_then("softmax over channels by hand", [N("ReduceMax", ["a"], ["mx"], axes=[1], keepdims=1), N("Sub", ["a", "mx"], ["d"]), N("Exp", ["d"], ["e"]), N("ReduceSum", ["e"], ["s"], axes=[1], keepdims=1), N("Div", ["e", "s"], ["t"])], (), 11)
conv_then("a 1-channel mask multiplies", [N("Conv", ["r", "ow"], ["o"]), N("Sigmoid", ["o"], ["og"]), N("Mul", ["og", "r"], ["t"])], [w("ow", 1, 24, 1, 1)])
conv_then("a [1, 1, 10, 10] map added", [N("Add", ["r", "k"], ["t"])], [w("k", 1, 1, 10, 10)])
conv_then("L2 norm over channels", [N("ReduceL2", ["r"], ["l2"], axes=[1], keepdims=1), N("Add", ["l2", "eps"], ["le"]), N("Div", ["r", "le"], ["t"])], [f32("eps", 1e-6)], 13)
conv_then("group norm 1 group (opset 21)", [N("GroupNormalization", ["r", "gs", "gb"], ["t"], num_groups=1, epsilon=1e-3)], [w("gs", 24), w("gb", 24)], 21)
conv_then("group norm 24 groups (opset 21)", [N("GroupNormalization", ["r", "gs", "gb"], ["t"], num_groups=24)], [w("gs", 24), w("gb", 24)], 21)
conv_then("group norm 2 groups (opset 18, per group)", [N("GroupNormalization", ["r", "gs", "gb"], ["t"], num_groups=2)], [w("gs", 2), w("gb", 2)], 18)
conv_then("argmax over channels, kept, weighs the channels", [N("ArgMax", ["r"], ["am"], axis=1, keepdims=1), N("Cast", ["am"], ["amf"], to=F), N("Mul", ["r", "amf"], ["t"])])
conv_then("pad zeros spatially (tf2onnx before a strided conv)", [N("Pad", ["r", "pd"], ["t0"]), N("Conv", ["t0", "cw3"], ["t"], strides=[2, 2])], [i64("pd", [0, 0, 1, 1, 0, 0, 1, 1]), w("cw3", 24, 24, 3, 3)])
conv_then("pad edge spatially", [N("Pad", ["r", "pd"], ["t"], mode="edge")], [i64("pd", [0, 0, 2, 0, 0, 0, 1, 3])])
