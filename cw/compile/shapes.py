"""Shapes of Relax values as Python ints."""

from __future__ import annotations


def static_shape(shape) -> list[int] | None:
    """The dimensions as ints, or None when one is symbolic (a batch not bound yet)."""
    try:
        return [int(d) for d in shape]
    except (TypeError, ValueError):
        return None
