"""Tiny models for fast tests: they compile in seconds and run in microseconds on a CPU."""

from __future__ import annotations

from .builder import GraphBuilder


def mlp(batch: int | None = None):
    g = GraphBuilder("mlp")
    x = g.relu(g.gemm("input", "fc1", 64, 128))
    x = g.relu(g.gemm(x, "fc2", 128, 128))
    y = g.gemm(x, "fc3", 128, 10)
    return g.finish("input", (64,), y, (10,), batch)


def small_cnn(batch: int | None = None):
    g = GraphBuilder("small_cnn")
    x = g.relu(g.batchnorm(g.conv("input", "conv1", 3, 16, 3, 1, 1), "bn1", 16))
    x = g.maxpool(x, 2, 2)
    x = g.relu(g.batchnorm(g.conv(x, "conv2", 16, 32, 3, 1, 1), "bn2", 32))
    x = g.maxpool(x, 2, 2)
    x = g.flatten(g.global_avgpool(x))
    y = g.gemm(x, "fc", 32, 10)
    return g.finish("input", (3, 32, 32), y, (10,), batch)
