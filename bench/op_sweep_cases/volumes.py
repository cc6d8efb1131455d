"""Video and volume models' 5-D blocks (stop 78): 3-D convolutions (I3D, R(2+1)D's factored
ones, a 3-D U-Net's transposed ones), 3-D pools, trilinear and nearest resizes of volumes,
normalizations over (D, H, W), a temporal mean."""
# ruff: noqa: E501 (one case per line reads best)

from .common import F, N, f32, group, i64, io, w
from .common import case_io as case

group("volumes")

X = [io("x", F, ["N", 3, 4, 8, 8])]  # (N, C, T, H, W)
C3 = [N("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1, 1, 1]), N("Relu", ["c"], ["r"])]  # r: [N, 8, 4, 8, 8]
C3_INITS = [w("k", 8, 3, 3, 3, 3)]


def out(*shape):
    return [io("y", F, ["N", *shape])]


case("Conv3d 3x3x3, ReLU, MaxPool3d", C3 + [N("MaxPool", ["r"], ["y"], kernel_shape=[1, 2, 2], strides=[1, 2, 2])], X, out(8, 4, 4, 4), C3_INITS)
case("R(2+1)D: a 1x3x3 spatial conv, then a 3x1x1 temporal one", [N("Conv", ["x", "ks"], ["s"], pads=[0, 1, 1, 0, 1, 1]), N("Relu", ["s"], ["sr"]), N("Conv", ["sr", "kt"], ["y"], pads=[1, 0, 0, 1, 0, 0])], X, out(8, 4, 8, 8), [w("ks", 6, 3, 1, 3, 3), w("kt", 8, 6, 3, 1, 1)])
case("Conv3d strided in time and space, AveragePool3d", C3 + [N("Conv", ["r", "k2"], ["c2"], strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1]), N("AveragePool", ["c2"], ["y"], kernel_shape=[2, 2, 2], strides=[2, 2, 2])], X, out(8, 1, 2, 2), C3_INITS + [w("k2", 8, 8, 3, 3, 3)])
case("3-D U-Net up: ConvTranspose3d by 2, skip concatenation", C3 + [N("MaxPool", ["r"], ["p"], kernel_shape=[2, 2, 2], strides=[2, 2, 2]), N("ConvTranspose", ["p", "kt"], ["u"], strides=[2, 2, 2]), N("Concat", ["u", "r"], ["cat"], axis=1), N("Conv", ["cat", "k2"], ["y"], pads=[1, 1, 1, 1, 1, 1])], X, out(4, 4, 8, 8), C3_INITS + [w("kt", 8, 8, 2, 2, 2), w("k2", 4, 16, 3, 3, 3)])
case("R(2+1)D's temporal conv on channels in no block (each tap padded to 8)", [N("Conv", ["x", "ks"], ["s"], pads=[0, 1, 1, 0, 1, 1]), N("Relu", ["s"], ["sr"]), N("Conv", ["sr", "kt"], ["y"], pads=[1, 0, 0, 1, 0, 0])], X, out(8, 4, 8, 8), [w("ks", 12, 3, 1, 3, 3), w("kt", 8, 12, 3, 1, 1)])
case("X3D's channel-wise 3x3x3 conv, strided in space", C3 + [N("Conv", ["r", "kd"], ["y"], pads=[1, 1, 1, 1, 1, 1], strides=[1, 2, 2], group=8)], X, out(8, 4, 4, 4), C3_INITS + [w("kd", 8, 1, 3, 3, 3)])
case("a causal temporal conv, dilated in time", C3 + [N("Conv", ["r", "k2"], ["y"], pads=[4, 1, 1, 0, 1, 1], dilations=[2, 1, 1])], X, out(8, 4, 8, 8), C3_INITS + [w("k2", 8, 8, 3, 3, 3)])
case("ConvTranspose3d with overlapping windows (k 4, stride 2, pads 1)", C3 + [N("ConvTranspose", ["r", "kt"], ["y"], strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1])], X, out(4, 8, 16, 16), C3_INITS + [w("kt", 8, 4, 4, 4, 4)])
case("trilinear resize of a volume by 2", C3 + [N("Resize", ["r", "", "sc"], ["y"], mode="linear")], X, out(8, 8, 16, 16), C3_INITS + [f32("sc", [1, 1, 2, 2, 2])])
case("nearest resize of frames only (H, W by 2, T kept)", C3 + [N("Resize", ["r", "", "sc"], ["y"], mode="nearest")], X, out(8, 4, 16, 16), C3_INITS + [f32("sc", [1, 1, 1, 2, 2])])
case("resize along time only (T by 2)", C3 + [N("Resize", ["r", "", "sc"], ["y"], mode="linear")], X, out(8, 8, 8, 8), C3_INITS + [f32("sc", [1, 1, 2, 1, 1])])
case("BatchNorm3d after a Conv3d", C3 + [N("BatchNormalization", ["r", "g", "b", "m", "v"], ["y"])], X, out(8, 4, 8, 8), C3_INITS + [w("g", 8), w("b", 8), w("m", 8), f32("v", [0.5 + i / 8 for i in range(8)])])
case("InstanceNorm3d", C3 + [N("InstanceNormalization", ["r", "g", "b"], ["y"])], X, out(8, 4, 8, 8), C3_INITS + [w("g", 8), w("b", 8)])
case("GroupNorm over (D, H, W), 2 groups", C3 + [N("GroupNormalization", ["r", "g", "b"], ["y"], num_groups=2)], X, out(8, 4, 8, 8), C3_INITS + [w("g", 8), w("b", 8)], 21)
case("temporal mean, then a 2-D head", C3 + [N("ReduceMean", ["r", "t"], ["m"], keepdims=0), N("Conv", ["m", "k2"], ["y"], pads=[1, 1, 1, 1])], X, out(4, 8, 8), C3_INITS + [i64("t", [2]), w("k2", 4, 8, 3, 3)], 18)
case("GlobalAveragePool 5-D, Flatten, Gemm (a video classifier's head)", C3 + [N("GlobalAveragePool", ["r"], ["g"]), N("Flatten", ["g"], ["f"]), N("Gemm", ["f", "fc", "fb"], ["y"], transB=1)], X, out(5), C3_INITS + [w("fc", 5, 8), w("fb", 5)])
case("frames folded into the batch axis for a 2-D conv, unfolded", [N("Transpose", ["x"], ["xt"], perm=[0, 2, 1, 3, 4]), N("Reshape", ["xt", "s4"], ["f"]), N("Conv", ["f", "k2"], ["c"], pads=[1, 1, 1, 1]), N("Reshape", ["c", "s5"], ["c5"]), N("Transpose", ["c5"], ["y"], perm=[0, 2, 1, 3, 4])],
     X, out(8, 4, 8, 8), [i64("s4", [-1, 3, 8, 8]), w("k2", 8, 3, 3, 3), i64("s5", [-1, 4, 8, 8, 8])])
