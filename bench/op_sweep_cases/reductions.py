"""Reductions large enough for cw's row schedules (stop 79: cpu_kernels' partial sums in a
vector, a channel block or 16 positions along W as the vector): ArgMax/ArgMin over a
segmentation map's classes (ties, the last index), reductions over NCHW's channels, over a
row of 768 or 1000, over two axes at once; pools after convolutions (blocked on the CPU);
LayerNorm and InstanceNorm far from 0. Each is at least 2^17 iterations at batch 1, the size
from which the rows run in parallel."""
# ruff: noqa: E501 (one case per line reads best)

from .common import I64, F, N, f32, group, i64, io, w
from .common import case as _case
from .common import case_io

group("reductions")

SEG = ["N", 21, 64, 128]  # a segmentation map's logits, NCHW
MAPS = ["N", 32, 32, 128]
ROWS = ["N", 128, 768]
CONV = [N("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1]), N("Relu", ["c"], ["r"])]  # r: [N, 32, 64, 64]


def case(name, nodes, x_shape, inits=(), opset=13, scale=1.0):
    _case(name, nodes, x_shape, inits, opset, scale=scale)


def classes(name, nodes, inits=(), keepdims=True):
    """A class map (int64) from SEG."""
    shape = ["N", 1, 64, 128] if keepdims else ["N", 64, 128]
    case_io(name, nodes, [io("x", F, SEG)], [io("y", I64, shape)], inits, 13)


# ties: values rounded to halves, so that many positions hold two equal maxima
TIES = [N("Mul", ["x", "two"], ["x2"]), N("Floor", ["x2"], ["xt"])]
classes("ArgMax over classes, keepdims", [N("ArgMax", ["x"], axis=1, keepdims=1)])
classes("ArgMax over classes, no keepdims", [N("ArgMax", ["x"], axis=1, keepdims=0)], keepdims=False)
classes("ArgMax over classes with ties, first index", TIES + [N("ArgMax", ["xt"], axis=1, keepdims=1)], [f32("two", 2.0)])
classes("ArgMax over classes with ties, last index", TIES + [N("ArgMax", ["xt"], axis=1, keepdims=1, select_last_index=1)], [f32("two", 2.0)])
classes("ArgMin over classes with ties", TIES + [N("ArgMin", ["xt"], axis=1, keepdims=0)], [f32("two", 2.0)], keepdims=False)
case("ReduceMax over channels", [N("ReduceMax", ["x"], axes=[1], keepdims=1)], MAPS)
case("ReduceMean over channels (CBAM)", [N("ReduceMean", ["x"], axes=[1], keepdims=1)], MAPS)
case("ReduceSum over channels, no keepdims", [N("ReduceSum", ["x", "a1"], keepdims=0)], MAPS, [i64("a1", [1])])
case("Softmax over classes", [N("Softmax", ["x"], axis=1)], SEG)
case("LogSoftmax over a row of 768", [N("LogSoftmax", ["x"], axis=-1)], ROWS)
case("Softmax over a row of 1000 (not a multiple of 16)", [N("Softmax", ["x"], axis=-1)], ["N", 160, 1000])
case("ReduceL2 over a row", [N("ReduceL2", ["x"], axes=[-1], keepdims=1)], ROWS)
case("ReduceLogSumExp over a row", [N("ReduceLogSumExp", ["x"], axes=[-1], keepdims=0)], ROWS)
case("ReduceMean over H and W (no convolution: NCHW)", [N("ReduceMean", ["x"], axes=[2, 3], keepdims=1)], MAPS)
case("ReduceSumSquare over the last two axes", [N("ReduceSumSquare", ["x"], axes=[2, 3], keepdims=0)], MAPS)
case("LayerNormalization over the last two axes", [N("LayerNormalization", ["x", "s", "b"], axis=-2)], MAPS, [w("s", 32, 128), w("b", 32, 128)], 17)
case("LayerNormalization of 768-wide rows far from 0", [N("Add", ["x", "off"], ["xo"]), N("LayerNormalization", ["xo", "s", "b"], axis=-1)], ROWS, [f32("off", 300.0), w("s", 768), w("b", 768)], 17)
case("InstanceNormalization of 32 x 128 maps far from 0", [N("Add", ["x", "off"], ["xo"]), N("InstanceNormalization", ["xo", "s", "b"])], MAPS, [f32("off", 300.0), w("s", 32), w("b", 32)])
case("GlobalAveragePool after a conv (blocked)", CONV + [N("GlobalAveragePool", ["r"])], ["N", 8, 64, 64], [w("k", 32, 8, 3, 3)])
case("SPP: MaxPool 5/9/13 stride 1 after a conv, concatenated", CONV + [N("MaxPool", ["r"], ["p5"], kernel_shape=[5, 5], pads=[2, 2, 2, 2]), N("MaxPool", ["r"], ["p9"], kernel_shape=[9, 9], pads=[4, 4, 4, 4]), N("MaxPool", ["r"], ["p13"], kernel_shape=[13, 13], pads=[6, 6, 6, 6]), N("Concat", ["r", "p5", "p9", "p13"], axis=1)], ["N", 8, 64, 64], [w("k", 32, 8, 3, 3)])
case("AveragePool 3x3 stride 1, pads not counted, after a conv", CONV + [N("AveragePool", ["r"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0)], ["N", 8, 64, 64], [w("k", 32, 8, 3, 3)])
case("MaxPool 3x3 stride 2 after a conv (a ResNet stem)", CONV + [N("MaxPool", ["r"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])], ["N", 8, 128, 128], [w("k", 32, 8, 3, 3)])
case("ReduceMean over channels of a conv's output, kept for a broadcast", CONV + [N("ReduceMean", ["r"], ["m"], axes=[1], keepdims=1), N("Sigmoid", ["m"], ["s"]), N("Mul", ["r", "s"])], ["N", 8, 64, 64], [w("k", 32, 8, 3, 3)])
# stop 80: the elementwise steps around a reduction over a middle axis take the reductions'
# rows (cpu_rows._reduced_between), the contiguous axis in vectors
LN_C = [N("ReduceMean", ["x"], ["m"], axes=[1], keepdims=1), N("Sub", ["x", "m"], ["d"]), N("Mul", ["d", "d"], ["d2"]), N("ReduceMean", ["d2"], ["v"], axes=[1], keepdims=1), N("Add", ["v", "eps"], ["ve"]), N("Sqrt", ["ve"], ["sd"]), N("Div", ["d", "sd"])]
case("LogSoftmax over classes", [N("LogSoftmax", ["x"], axis=1)], SEG)
case("Softmax over classes, W of 100 (not a multiple of 16)", [N("Softmax", ["x"], axis=1)], ["N", 21, 96, 100])
case("Softmax over classes, W of 40 (a vector whole)", [N("Softmax", ["x"], axis=1)], ["N", 21, 160, 40])
case("Softmax over H (axis 2 of 4)", [N("Softmax", ["x"], axis=2)], MAPS)
case("Softmax over the middle of three axes", [N("Softmax", ["x"], axis=1)], ["N", 19, 8192])
case("LpNormalization over channels (SSD's L2Norm)", [N("LpNormalization", ["x"], axis=1, p=2)], ["N", 64, 38, 38])
case("x less its mean over channels", [N("ReduceMean", ["x"], ["m"], axes=[1], keepdims=1), N("Sub", ["x", "m"])], MAPS)
case("a channels-first LayerNorm by operators (no convolution: NCHW)", LN_C, MAPS, [f32("eps", 1e-6)])
