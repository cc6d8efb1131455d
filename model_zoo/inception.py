"""Inception v3 (Szegedy et al. 2016), 299x299, without the auxiliary classifier (an inference
graph), as torchvision's and GluonCV's inceptionv3."""

from __future__ import annotations

from .builder import GraphBuilder


class _Inception:
    def __init__(self, g: GraphBuilder):
        self.g = g

    def conv(self, x, name, cin, cout, k, stride=1, pad=0):
        g = self.g
        y = g.conv(x, f"{name}.conv", cin, cout, k, stride, pad)
        return g.relu(g.batchnorm(y, f"{name}.bn", cout, eps=1e-3))

    def avg_branch(self, x, name, cin, cout):
        y = self.g.avgpool(x, 3, 1, 1, count_include_pad=1)
        return self.conv(y, name, cin, cout, 1)

    def block_a(self, x, n, cin, pool_features):
        b1 = self.conv(x, f"{n}.b1x1", cin, 64, 1)
        b5 = self.conv(x, f"{n}.b5x5_1", cin, 48, 1)
        b5 = self.conv(b5, f"{n}.b5x5_2", 48, 64, 5, 1, 2)
        b3 = self.conv(x, f"{n}.b3x3dbl_1", cin, 64, 1)
        b3 = self.conv(b3, f"{n}.b3x3dbl_2", 64, 96, 3, 1, 1)
        b3 = self.conv(b3, f"{n}.b3x3dbl_3", 96, 96, 3, 1, 1)
        bp = self.avg_branch(x, f"{n}.pool", cin, pool_features)
        return self.g.concat([b1, b5, b3, bp]), 64 + 64 + 96 + pool_features

    def block_b(self, x, n, cin):
        b3 = self.conv(x, f"{n}.b3x3", cin, 384, 3, 2)
        bd = self.conv(x, f"{n}.b3x3dbl_1", cin, 64, 1)
        bd = self.conv(bd, f"{n}.b3x3dbl_2", 64, 96, 3, 1, 1)
        bd = self.conv(bd, f"{n}.b3x3dbl_3", 96, 96, 3, 2)
        bp = self.g.maxpool(x, 3, 2)
        return self.g.concat([b3, bd, bp]), 384 + 96 + cin

    def block_c(self, x, n, cin, c7):
        b1 = self.conv(x, f"{n}.b1x1", cin, 192, 1)
        b7 = self.conv(x, f"{n}.b7x7_1", cin, c7, 1)
        b7 = self.conv(b7, f"{n}.b7x7_2", c7, c7, (1, 7), 1, (0, 3))
        b7 = self.conv(b7, f"{n}.b7x7_3", c7, 192, (7, 1), 1, (3, 0))
        bd = self.conv(x, f"{n}.b7x7dbl_1", cin, c7, 1)
        bd = self.conv(bd, f"{n}.b7x7dbl_2", c7, c7, (7, 1), 1, (3, 0))
        bd = self.conv(bd, f"{n}.b7x7dbl_3", c7, c7, (1, 7), 1, (0, 3))
        bd = self.conv(bd, f"{n}.b7x7dbl_4", c7, c7, (7, 1), 1, (3, 0))
        bd = self.conv(bd, f"{n}.b7x7dbl_5", c7, 192, (1, 7), 1, (0, 3))
        bp = self.avg_branch(x, f"{n}.pool", cin, 192)
        return self.g.concat([b1, b7, bd, bp]), 768

    def block_d(self, x, n, cin):
        b3 = self.conv(x, f"{n}.b3x3_1", cin, 192, 1)
        b3 = self.conv(b3, f"{n}.b3x3_2", 192, 320, 3, 2)
        b7 = self.conv(x, f"{n}.b7x7x3_1", cin, 192, 1)
        b7 = self.conv(b7, f"{n}.b7x7x3_2", 192, 192, (1, 7), 1, (0, 3))
        b7 = self.conv(b7, f"{n}.b7x7x3_3", 192, 192, (7, 1), 1, (3, 0))
        b7 = self.conv(b7, f"{n}.b7x7x3_4", 192, 192, 3, 2)
        bp = self.g.maxpool(x, 3, 2)
        return self.g.concat([b3, b7, bp]), 320 + 192 + cin

    def block_e(self, x, n, cin):
        g = self.g
        b1 = self.conv(x, f"{n}.b1x1", cin, 320, 1)
        b3 = self.conv(x, f"{n}.b3x3_1", cin, 384, 1)
        b3 = g.concat([self.conv(b3, f"{n}.b3x3_2a", 384, 384, (1, 3), 1, (0, 1)),
                       self.conv(b3, f"{n}.b3x3_2b", 384, 384, (3, 1), 1, (1, 0))])
        bd = self.conv(x, f"{n}.b3x3dbl_1", cin, 448, 1)
        bd = self.conv(bd, f"{n}.b3x3dbl_2", 448, 384, 3, 1, 1)
        bd = g.concat([self.conv(bd, f"{n}.b3x3dbl_3a", 384, 384, (1, 3), 1, (0, 1)),
                       self.conv(bd, f"{n}.b3x3dbl_3b", 384, 384, (3, 1), 1, (1, 0))])
        bp = self.avg_branch(x, f"{n}.pool", cin, 192)
        return g.concat([b1, b3, bd, bp]), 2048


def inception_v3(batch: int | None = None):
    g = GraphBuilder("inception_v3")
    m = _Inception(g)
    x = m.conv("input", "Conv2d_1a_3x3", 3, 32, 3, 2)
    x = m.conv(x, "Conv2d_2a_3x3", 32, 32, 3)
    x = m.conv(x, "Conv2d_2b_3x3", 32, 64, 3, 1, 1)
    x = g.maxpool(x, 3, 2)
    x = m.conv(x, "Conv2d_3b_1x1", 64, 80, 1)
    x = m.conv(x, "Conv2d_4a_3x3", 80, 192, 3)
    x = g.maxpool(x, 3, 2)
    c = 192
    x, c = m.block_a(x, "Mixed_5b", c, 32)
    x, c = m.block_a(x, "Mixed_5c", c, 64)
    x, c = m.block_a(x, "Mixed_5d", c, 64)
    x, c = m.block_b(x, "Mixed_6a", c)
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        x, c = m.block_c(x, name, c, c7)
    x, c = m.block_d(x, "Mixed_7a", c)
    x, c = m.block_e(x, "Mixed_7b", c)
    x, c = m.block_e(x, "Mixed_7c", c)
    x = g.flatten(g.global_avgpool(x))
    y = g.gemm(x, "fc", c, 1000)
    return g.finish("input", (3, 299, 299), y, (1000,), batch)
