"""cw: compile, profile and serve DNN models with predictable latency (Clockwork, rebuilt)."""

__version__ = "0.1.0"
