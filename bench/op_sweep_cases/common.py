"""Helpers the case files share: graphs of one operator (or a short export idiom) on an input
`x` with a symbolic batch `N`. `case` registers one with a single float input whose output
shape ONNX infers; `case_io` one with the inputs and outputs given."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64
X4 = ["N", 4, 6, 6]
X3 = ["N", 6, 8]


@dataclass
class Case:
    group: str
    nodes: list
    inputs: list  # ValueInfoProtos
    outputs: list | None  # None: one output "y", its shape inferred
    inits: list = field(default_factory=list)
    opset: int = 17
    scale: float = 1.0  # float inputs are standard normal times this


CASES: dict[str, Case] = {}
# graphs where onnxruntime, not cw, departs from ONNX: name -> why (reported as DIFFERS)
KNOWN: dict[str, str] = {}
_group = ["?"]


def group(name: str) -> None:
    """The group the following cases belong to (a case file's name)."""
    _group[0] = name


def vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def io(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def c(name, value, dtype=None):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def i64(name, value):
    return c(name, value, np.int64)


def f32(name, value):
    return c(name, value, np.float32)


def w(name, *shape, seed=0):
    rng = np.random.default_rng(seed + len(name))
    return f32(name, 0.5 * rng.standard_normal(shape))


def N(op, ins, outs=("y",), **attrs):  # noqa: N802 (reads as the node it makes)
    return helper.make_node(op, list(ins), list(outs), **attrs)


def _named(name: str) -> str:
    if name in CASES:  # (a second case of the same name would replace the first, unseen)
        raise ValueError(f"two sweep cases are named {name!r}")
    return name


def case(name, nodes, x_shape, inits=(), opset=17, ints=False, scale=1.0):
    CASES[_named(name)] = Case(_group[0], list(nodes), [vi("x", x_shape)], None, list(inits), opset,
                       scale)


def case_io(name, nodes, inputs, outputs, inits=(), opset=17):
    CASES[_named(name)] = Case(_group[0], list(nodes), list(inputs), list(outputs), list(inits), opset)


def known(name: str, why: str) -> None:
    KNOWN[name] = why
