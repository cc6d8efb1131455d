"""MobileNetV2 (Sandler et al. 2018), width 1.0, 224x224, as torchvision's mobilenet_v2."""

from __future__ import annotations

from .builder import GraphBuilder

# (expansion t, output channels c, repeats n, first stride s) from the paper's Table 2
_SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
             (6, 160, 3, 2), (6, 320, 1, 1)]


def _conv_bn_relu6(g: GraphBuilder, x, name, cin, cout, k, stride=1, group=1, act=True, gamma=(0.8, 1.2)):
    y = g.conv(x, f"{name}.conv", cin, cout, k, stride, k // 2, group)
    y = g.batchnorm(y, f"{name}.bn", cout, gamma_range=gamma)
    return g.relu6(y) if act else y


def mobilenet_v2(batch: int | None = None):
    g = GraphBuilder("mobilenet_v2")
    x = _conv_bn_relu6(g, "input", "stem", 3, 32, 3, 2)
    cin = 32
    block = 0
    for t, c, n, s in _SETTINGS:
        for i in range(n):
            stride = s if i == 0 else 1
            name = f"block{block}"
            hidden = cin * t
            y = x
            if t != 1:
                y = _conv_bn_relu6(g, y, f"{name}.expand", cin, hidden, 1)
            y = _conv_bn_relu6(g, y, f"{name}.dw", hidden, hidden, 3, stride, group=hidden)
            residual = stride == 1 and cin == c
            y = _conv_bn_relu6(g, y, f"{name}.project", hidden, c, 1, act=False,
                               gamma=(0.05, 0.15) if residual else (0.8, 1.2))
            x = g.add(x, y) if residual else y
            cin = c
            block += 1
    x = _conv_bn_relu6(g, x, "head", cin, 1280, 1)
    x = g.flatten(g.global_avgpool(x))
    y = g.gemm(x, "classifier", 1280, 1000)
    return g.finish("input", (3, 224, 224), y, (1000,), batch)
