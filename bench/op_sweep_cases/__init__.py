"""The graphs of bench/op_sweep.py, one module per group."""

from . import casts, forms, io, old_opsets, recurrent, resize, resize_pools, specials, unary  # noqa: F401
from .common import CASES, KNOWN, Case  # noqa: F401
