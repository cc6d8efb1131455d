"""DenseNet-121 (Huang et al. 2017): growth 32, blocks (6, 12, 24, 16), bottleneck 4x,
compression 0.5; as torchvision's and GluonCV's densenet121."""

from __future__ import annotations

from .builder import GraphBuilder

GROWTH = 32
BLOCKS = (6, 12, 24, 16)
BN_SIZE = 4
INIT_FEATURES = 64


def _bn_relu_conv(g: GraphBuilder, x, name, cin, cout, k, pad=0):
    y = g.relu(g.batchnorm(x, f"{name}.bn", cin))
    return g.conv(y, f"{name}.conv", cin, cout, k, 1, pad)


def densenet121(batch: int | None = None):
    g = GraphBuilder("densenet121")
    x = g.conv("input", "stem.conv", 3, INIT_FEATURES, 7, 2, 3)
    x = g.relu(g.batchnorm(x, "stem.bn", INIT_FEATURES))
    x = g.maxpool(x, 3, 2, 1)
    channels = INIT_FEATURES
    for b, layers in enumerate(BLOCKS):
        features = [x]
        for i in range(layers):
            name = f"block{b + 1}.layer{i + 1}"
            inp = features[0] if len(features) == 1 else g.concat(features)
            y = _bn_relu_conv(g, inp, f"{name}.1", channels + i * GROWTH, BN_SIZE * GROWTH, 1)
            y = _bn_relu_conv(g, y, f"{name}.2", BN_SIZE * GROWTH, GROWTH, 3, 1)
            features.append(y)
        x = g.concat(features)
        channels += layers * GROWTH
        if b != len(BLOCKS) - 1:
            x = _bn_relu_conv(g, x, f"transition{b + 1}", channels, channels // 2, 1)
            x = g.avgpool(x, 2, 2)
            channels //= 2
    x = g.relu(g.batchnorm(x, "final.bn", channels))
    x = g.flatten(g.global_avgpool(x))
    y = g.gemm(x, "classifier", channels, 1000)
    return g.finish("input", (3, 224, 224), y, (1000,), batch)
