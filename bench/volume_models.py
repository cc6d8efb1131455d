"""Video and volumetric CNNs with random weights, for timing cw's CPU bundles of 3-D
convolutions against onnxruntime (docs/benchmarks.md, stop 82): a C3D-style net, an
R(2+1)D-style one (1 x 3 x 3 then 3 x 1 x 1), an X3D-style one (channel-wise 3 x 3 x 3,
squeeze-excitation) on 8 frames of 112 x 112, and a 3-D U-Net (InstanceNorm, transposed
convolutions) on a 32 x 64 x 64 volume.

    python bench/volume_models.py DIR   # DIR/{c3d,r2plus1d,x3d,unet3d}.onnx

Then `cw compile DIR/M.onnx -o B --batch-sizes 1` with each checkout and
`python bench/edge_speed.py DIR/M.onnx=B_OLD,B_NEW --stat min`."""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(0)


class Graph:
    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, prefix):
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, value):
        name = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def op(self, kind, inputs, **attrs):
        out = self.name(kind.lower())
        self.nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def conv(self, x, cin, cout, kernel, strides=(1, 1, 1), groups=1, bias=False):
        fan = cin // groups * int(np.prod(kernel))
        inputs = [x, self.const(rng.normal(0, (2 / fan) ** 0.5, (cout, cin // groups, *kernel)))]
        if bias:
            inputs.append(self.const(rng.normal(0, 0.05, cout)))
        return self.op("Conv", inputs, kernel_shape=list(kernel), strides=list(strides),
                       pads=[k // 2 for k in kernel] * 2, group=groups)

    def bn(self, x, c):
        return self.op("BatchNormalization", [x] + [self.const(rng.uniform(lo, hi, c)) for lo, hi
                                                    in ((.5, 1.5), (-.1, .1), (-.1, .1),
                                                        (.5, 1.5))])

    def relu(self, x):
        return self.op("Relu", [x])

    def head(self, x, c, classes):
        x = self.op("Flatten", [self.op("GlobalAveragePool", [x])])
        return self.op("Gemm", [x, self.const(rng.normal(0, 0.05, (classes, c))),
                                self.const(np.zeros(classes))], transB=1)

    def save(self, path, x_shape, out):
        graph = helper.make_graph(
            self.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                            ["N", *x_shape])],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], self.inits)
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def c3d(path):
    g = Graph()
    x = g.relu(g.conv("x", 3, 32, (3, 3, 3), bias=True))
    x = g.op("MaxPool", [x], kernel_shape=[1, 2, 2], strides=[1, 2, 2])
    x = g.relu(g.conv(x, 32, 64, (3, 3, 3), bias=True))
    x = g.op("MaxPool", [x], kernel_shape=[2, 2, 2], strides=[2, 2, 2])
    x = g.relu(g.conv(x, 64, 64, (3, 3, 3), bias=True))
    g.save(path, [3, 8, 56, 56], g.head(x, 64, 10))


def r2plus1d(path):
    g = Graph()
    x = g.relu(g.bn(g.conv("x", 3, 45, (1, 7, 7), (1, 2, 2)), 45))
    x = g.relu(g.bn(g.conv(x, 45, 64, (3, 1, 1)), 64))
    c = 64
    for oc, s in [(64, 1), (128, 2), (256, 2)]:
        mid = 27 * c * oc // (9 * c + 3 * oc)
        h = g.relu(g.bn(g.conv(x, c, mid, (1, 3, 3), (1, s, s)), mid))
        h = g.bn(g.conv(h, mid, oc, (3, 1, 1), (s, 1, 1)), oc)
        skip = g.bn(g.conv(x, c, oc, (1, 1, 1), (s, s, s)), oc) if s != 1 or c != oc else x
        x, c = g.relu(g.op("Add", [h, skip])), oc
    g.save(path, [3, 8, 112, 112], g.head(x, c, 400))


def x3d(path):
    g = Graph()
    x = g.conv("x", 3, 24, (1, 3, 3), (1, 2, 2))
    x = g.relu(g.bn(g.conv(x, 24, 24, (5, 1, 1), groups=24), 24))
    c = 24
    for oc in (24, 48, 96):
        mid = int(oc * 2.25)
        h = g.relu(g.bn(g.conv(x, c, mid, (1, 1, 1)), mid))
        h = g.bn(g.conv(h, mid, mid, (3, 3, 3), (1, 2, 2), groups=mid), mid)
        p = g.relu(g.conv(g.op("GlobalAveragePool", [h]), mid, mid // 4, (1, 1, 1)))
        h = g.op("Mul", [h, g.op("Sigmoid", [g.conv(p, mid // 4, mid, (1, 1, 1))])])
        h = g.op("Mul", [h, g.op("Sigmoid", [h])])
        h = g.bn(g.conv(h, mid, oc, (1, 1, 1)), oc)
        skip = g.bn(g.conv(x, c, oc, (1, 1, 1), (1, 2, 2)), oc)
        x, c = g.relu(g.op("Add", [h, skip])), oc
    g.save(path, [3, 8, 112, 112], g.head(x, c, 400))


def unet3d(path):
    g = Graph()

    def block(x, cin, c):
        for ci in (cin, c):
            x = g.conv(x, ci, c, (3, 3, 3), bias=True)
            x = g.op("InstanceNormalization", [x, g.const(np.ones(c)), g.const(np.zeros(c))])
            x = g.op("LeakyRelu", [x], alpha=0.01)
        return x

    x, cin, skips = "x", 1, []
    for c in (16, 32, 64):
        skips.append(block(x, cin, c))
        x, cin = g.op("MaxPool", [skips[-1]], kernel_shape=[2, 2, 2], strides=[2, 2, 2]), c
    x, cin = block(x, cin, 128), 128
    for c, skip in zip((64, 32, 16), reversed(skips)):
        up = g.op("ConvTranspose", [x, g.const(rng.normal(0, 0.1, (cin, c, 2, 2, 2))),
                                    g.const(np.zeros(c))], kernel_shape=[2, 2, 2],
                  strides=[2, 2, 2])
        x, cin = block(g.op("Concat", [up, skip], axis=1), 2 * c, c), c
    g.save(path, [1, 32, 64, 64], g.conv(x, cin, 3, (1, 1, 1)))


if __name__ == "__main__":
    for build in (c3d, r2plus1d, x3d, unet3d):
        build(f"{sys.argv[1]}/{build.__name__}.onnx")
        print(f"{sys.argv[1]}/{build.__name__}.onnx")
