"""ResNet v1 (He et al. 2015, stride in the first 1x1 of a bottleneck, as GluonCV's resnet*_v1
that Clockwork served) and ResNet v2 (pre-activation, He et al. 2016, as GluonCV's resnet*_v2)."""

from __future__ import annotations

from .builder import GraphBuilder

# Residual branches end in a small-gamma BatchNorm so that activations stay bounded through 50
# blocks of random weights (the "zero-init residual" trick, not quite zero so the branch counts).
_LAST_GAMMA = (0.05, 0.15)

LAYOUTS = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}


def _conv_bn(g: GraphBuilder, x, name, cin, cout, k, stride=1, pad=0, relu=True, gamma=(0.8, 1.2)):
    y = g.conv(x, f"{name}.conv", cin, cout, k, stride, pad)
    y = g.batchnorm(y, f"{name}.bn", cout, gamma_range=gamma)
    return g.relu(y) if relu else y


def _v1_block(g: GraphBuilder, x, name, kind, cin, width, stride):
    if kind == "basic":
        cout = width
        y = _conv_bn(g, x, f"{name}.a", cin, width, 3, stride, 1)
        y = _conv_bn(g, y, f"{name}.b", width, width, 3, 1, 1, relu=False, gamma=_LAST_GAMMA)
    else:
        cout = width * 4
        y = _conv_bn(g, x, f"{name}.a", cin, width, 1, stride, 0)
        y = _conv_bn(g, y, f"{name}.b", width, width, 3, 1, 1)
        y = _conv_bn(g, y, f"{name}.c", width, cout, 1, 1, 0, relu=False, gamma=_LAST_GAMMA)
    if stride != 1 or cin != cout:
        x = _conv_bn(g, x, f"{name}.down", cin, cout, 1, stride, 0, relu=False)
    return g.relu(g.add(y, x)), cout


def resnet_v1(depth: int, batch: int | None = None):
    kind, counts = LAYOUTS[depth]
    g = GraphBuilder(f"resnet{depth}")
    x = _conv_bn(g, "input", "stem", 3, 64, 7, 2, 3)
    x = g.maxpool(x, 3, 2, 1)
    cin = 64
    for stage, count in enumerate(counts):
        width = 64 * 2**stage
        for i in range(count):
            stride = 2 if (i == 0 and stage > 0) else 1
            x, cin = _v1_block(g, x, f"layer{stage + 1}.{i}", kind, cin, width, stride)
    x = g.flatten(g.global_avgpool(x))
    y = g.gemm(x, "fc", cin, 1000)
    return g.finish("input", (3, 224, 224), y, (1000,), batch)


def _bn_relu(g: GraphBuilder, x, name, c, gamma=(0.8, 1.2)):
    return g.relu(g.batchnorm(x, name, c, gamma_range=gamma))


def resnet50_v2(batch: int | None = None):
    """Pre-activation bottlenecks; GluonCV's variant also normalizes the input with a BatchNorm."""
    _, counts = LAYOUTS[50]
    g = GraphBuilder("resnet50_v2")
    x = g.batchnorm("input", "data_bn", 3)
    x = g.conv(x, "stem.conv", 3, 64, 7, 2, 3)
    x = _bn_relu(g, x, "stem.bn", 64)
    x = g.maxpool(x, 3, 2, 1)
    cin = 64
    for stage, count in enumerate(counts):
        width = 64 * 2**stage
        for i in range(count):
            stride = 2 if (i == 0 and stage > 0) else 1
            name = f"layer{stage + 1}.{i}"
            cout = width * 4
            pre = _bn_relu(g, x, f"{name}.bn1", cin)
            shortcut = x
            if stride != 1 or cin != cout:
                shortcut = g.conv(pre, f"{name}.down", cin, cout, 1, stride, 0)
            y = g.conv(pre, f"{name}.conv1", cin, width, 1, 1, 0)
            y = _bn_relu(g, y, f"{name}.bn2", width)
            y = g.conv(y, f"{name}.conv2", width, width, 3, stride, 1)
            y = _bn_relu(g, y, f"{name}.bn3", width, gamma=_LAST_GAMMA)
            y = g.conv(y, f"{name}.conv3", width, cout, 1, 1, 0)
            x = g.add(y, shortcut)
            cin = cout
    x = _bn_relu(g, x, "post.bn", cin)
    x = g.flatten(g.global_avgpool(x))
    y = g.gemm(x, "fc", cin, 1000)
    return g.finish("input", (3, 224, 224), y, (1000,), batch)
