"""The graphs of bench/op_sweep.py, one module per group."""

from . import (  # noqa: F401
               casts,
               forms,
               generators,
               heads,
               indexing,
               integers,
               io,
               layouts,
               old_opsets,
               pipelines,
               quantized,
               recurrent,
               reductions,
               resize,
               resize_pools,
               specials,
               transformers,
               unary,
               volumes,
)
from .common import CASES, KNOWN, Case  # noqa: F401
