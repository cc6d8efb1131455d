"""Image generators' blocks as PyTorch exports them (stop 78): fast neural style and CycleGAN
(reflect pads, InstanceNorm, transposed convolutions, tanh scaled to pixels), pix2pix's U-Net
(LeakyReLU, skip concatenations, BatchNorm), ESRGAN (pixel shuffle, residual scaling) and
nearest upsampling with a convolution. On the CPU each runs in the blocked layout."""
# ruff: noqa: E501 (one case per line reads best)

import numpy as np
from onnx import TensorProto as T

from .common import F, N, f32, group, i64, io, w
from .common import case_io as case

group("generators")

X = [io("x", F, ["N", 3, 16, 16])]
REFLECT1 = i64("p1", [0, 0, 1, 1, 0, 0, 1, 1])
REFLECT4 = i64("p4", [0, 0, 4, 4, 0, 0, 4, 4])


def conv_in_relu(p, src, cin, cout, k=3, stride=1, pad="p1"):
    """Reflect pad, conv, InstanceNorm, ReLU (fast neural style's ConvLayer + norm)."""
    nodes = [N("Pad", [src, pad], [p + "pd"], mode="reflect"), N("Conv", [p + "pd", p + "w", p + "b"], [p + "c"], strides=[stride, stride]),
             N("InstanceNormalization", [p + "c", p + "s", p + "t"], [p + "n"]), N("Relu", [p + "n"], [p + "o"])]
    return nodes, [w(p + "w", cout, cin, k, k), w(p + "b", cout), w(p + "s", cout), w(p + "t", cout)]


def residual(p, src, c):
    a, ai = conv_in_relu(p + "a", src, c, c)
    b = [N("Pad", [p + "ao", "p1"], [p + "bpd"], mode="reflect"), N("Conv", [p + "bpd", p + "bw", p + "bb"], [p + "bc"]),
         N("InstanceNormalization", [p + "bc", p + "bs", p + "bt"], [p + "bn"]), N("Add", [src, p + "bn"], [p + "o"])]
    return a + b, ai + [w(p + "bw", c, c, 3, 3), w(p + "bb", c), w(p + "bs", c), w(p + "bt", c)]


stem, stem_i = conv_in_relu("s", "x", 3, 16, k=9, pad="p4")
down, down_i = conv_in_relu("d", "so", 16, 32, stride=2)
res, res_i = residual("r", "do", 32)
up = [N("ConvTranspose", ["ro", "uw", "ub"], ["uc"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
      N("InstanceNormalization", ["uc", "us", "ut"], ["un"]), N("Relu", ["un"], ["uo"]),
      N("Pad", ["uo", "p4"], ["fpd"], mode="reflect"), N("Conv", ["fpd", "fw", "fb"], ["fc"]), N("Tanh", ["fc"], ["y"])]
up_i = [w("uw", 32, 16, 3, 3), w("ub", 16), w("us", 16), w("ut", 16), w("fw", 3, 16, 9, 9), w("fb", 3)]
case("fast neural style / CycleGAN: pad, conv, InstanceNorm, residual, transposed conv, tanh", stem + down + res + up, X, [io("y", F, ["N", 3, 16, 16])], [REFLECT1, REFLECT4] + stem_i + down_i + res_i + up_i)
case("tanh to uint8 pixels (x 127.5 + 127.5, clip, cast)", stem + [N("Conv", ["so", "kw"], ["kc"], pads=[1, 1, 1, 1]), N("Tanh", ["kc"], ["th"]), N("Mul", ["th", "h"], ["m"]), N("Add", ["m", "h"], ["a"]), N("Clip", ["a", "lo", "hi"], ["cl"]), N("Round", ["cl"], ["r"]), N("Cast", ["r"], ["y"], to=T.UINT8)],
     X, [io("y", T.UINT8, ["N", 3, 16, 16])], [REFLECT4] + stem_i + [w("kw", 3, 16, 3, 3), f32("h", 127.5), f32("lo", 0.0), f32("hi", 255.0)])
case("upsample nearest then conv (a resize-convolution decoder)", [N("Conv", ["x", "aw"], ["a"], pads=[1, 1, 1, 1]), N("Relu", ["a"], ["ar"]), N("Resize", ["ar", "", "sc"], ["u"], mode="nearest"), N("Pad", ["u", "p1"], ["up"], mode="reflect"), N("Conv", ["up", "bw"], ["y"])],
     X, [io("y", F, ["N", 8, 32, 32])], [REFLECT1, w("aw", 16, 3, 3, 3), f32("sc", [1, 1, 2, 2]), w("bw", 8, 16, 3, 3)])

# pix2pix's U-Net: down by strided convs with LeakyReLU and BatchNorm, up by transposed convs, skips concatenated
BN = lambda p, c: [w(p + "g", c), w(p + "be", c), w(p + "m", c), f32(p + "v", np.linspace(0.5, 1.5, c))]  # noqa: E731
unet = [N("Conv", ["x", "e1w"], ["e1"], strides=[2, 2], pads=[1, 1, 1, 1]), N("LeakyRelu", ["e1"], ["e1r"], alpha=0.2),
        N("Conv", ["e1r", "e2w"], ["e2"], strides=[2, 2], pads=[1, 1, 1, 1]), N("BatchNormalization", ["e2", "e2g", "e2be", "e2m", "e2v"], ["e2n"]), N("LeakyRelu", ["e2n"], ["e2r"], alpha=0.2),
        N("ConvTranspose", ["e2r", "d1w"], ["d1"], strides=[2, 2], pads=[1, 1, 1, 1]), N("BatchNormalization", ["d1", "d1g", "d1be", "d1m", "d1v"], ["d1n"]), N("Dropout", ["d1n"], ["d1d"]), N("Relu", ["d1d"], ["d1r"]),
        N("Concat", ["d1r", "e1r"], ["cat"], axis=1), N("ConvTranspose", ["cat", "d2w", "d2b"], ["d2"], strides=[2, 2], pads=[1, 1, 1, 1]), N("Tanh", ["d2"], ["y"])]
case("pix2pix U-Net: LeakyReLU, BatchNorm, transposed convs, skip concatenation", unet, X, [io("y", F, ["N", 3, 16, 16])],
     [w("e1w", 16, 3, 4, 4), w("e2w", 32, 16, 4, 4), w("d1w", 32, 16, 4, 4), w("d2w", 32, 3, 4, 4), w("d2b", 3)] + BN("e2", 32) + BN("d1", 16))

# ESRGAN: residual dense-ish block scaled by 0.2, pixel shuffle (DepthToSpace CRD) up by 2
esr = [N("Conv", ["x", "hw"], ["h"], pads=[1, 1, 1, 1]), N("Conv", ["h", "cw1"], ["c1"], pads=[1, 1, 1, 1]), N("LeakyRelu", ["c1"], ["c1r"], alpha=0.2),
       N("Concat", ["h", "c1r"], ["hc"], axis=1), N("Conv", ["hc", "cw2"], ["c2"], pads=[1, 1, 1, 1]), N("Mul", ["c2", "beta"], ["c2s"]), N("Add", ["h", "c2s"], ["hr"]),
       N("Conv", ["hr", "upw"], ["u"], pads=[1, 1, 1, 1]), N("DepthToSpace", ["u"], ["ps"], blocksize=2, mode="CRD"), N("LeakyRelu", ["ps"], ["psr"], alpha=0.2), N("Conv", ["psr", "ow"], ["y"], pads=[1, 1, 1, 1])]
case("ESRGAN: dense concat, residual x 0.2, pixel shuffle (CRD), LeakyReLU", esr, X, [io("y", F, ["N", 3, 32, 32])],
     [w("hw", 16, 3, 3, 3), w("cw1", 16, 16, 3, 3), w("cw2", 16, 32, 3, 3), f32("beta", 0.2), w("upw", 64, 16, 3, 3), w("ow", 3, 16, 3, 3)])
case("pixel shuffle DCR (TensorFlow's depth_to_space)", [N("Conv", ["x", "upw"], ["u"], pads=[1, 1, 1, 1]), N("DepthToSpace", ["u"], ["y"], blocksize=2, mode="DCR")], X, [io("y", F, ["N", 8, 32, 32])], [w("upw", 32, 3, 3, 3)])
case("SpaceToDepth then conv (a YOLOv2 reorg)", [N("Conv", ["x", "aw"], ["a"], pads=[1, 1, 1, 1]), N("SpaceToDepth", ["a"], ["s"], blocksize=2), N("Conv", ["s", "bw"], ["y"])], X, [io("y", F, ["N", 8, 8, 8])], [w("aw", 8, 3, 3, 3), w("bw", 8, 32, 1, 1)])
