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


def late_cnn(batch: int | None = None):
    """The shape of a CNN's last stage (wide convs on a 7x7 map, a residual add): few output
    pixels, long reductions, so `cw compile --target cuda` splits both convs (split-K)."""
    g = GraphBuilder("late_cnn")
    x = g.relu(g.batchnorm(g.conv("input", "conv1", 64, 256, 3, 1, 1), "bn1", 256))
    y = g.batchnorm(g.conv(x, "conv2", 256, 256, 3, 1, 1), "bn2", 256)
    x = g.relu(g.add(y, x))
    x = g.flatten(g.global_avgpool(x))
    y = g.gemm(x, "fc", 256, 10)
    return g.finish("input", (64, 7, 7), y, (10,), batch)
