"""What onnx's version converter gets wrong when it lifts a file below opset 13 to cw's opset,
repaired right after it. Each was found against onnxruntime, which runs the file at its own
opset (and is what `--verify` compares with):

- Upsample (opsets 7-9) and opset 10's Resize become a Resize with no coordinate mode, which
  from opset 11 means half_pixel. Theirs was asymmetric: a 2x linear upsample came out 0.48
  off, silently. Their nearest rounds down where an axis grows and up where it shrinks
  (onnxruntime's; checked against each of opset 11's nearest modes), so a node that grows one
  axis and shrinks another becomes two Resizes, which is exact because nearest is separable.
- Hardmax below opset 13 picks one entry of the input flattened to 2-D at `axis` (default 1);
  the converter keeps the node, which from opset 13 means along `axis` alone (default -1). It
  becomes Flatten, Hardmax along the last axis, and a Reshape back.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from cw.errors import ModelError

_DOMAINS = ("", "ai.onnx")


def legacy_nodes(model: onnx.ModelProto, opset: int) -> dict[str, tuple[str, dict]]:
    """Before conversion: the nodes whose meaning changes under it, by first output, with
    their operator and attributes."""
    found = {}
    for node in model.graph.node:
        if node.domain not in _DOMAINS:
            continue
        if node.op_type == "Upsample" or node.op_type == "Resize" and opset < 11 or \
                node.op_type == "Hardmax" and opset < 13:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            found[node.output[0]] = (node.op_type, attrs)
    return found


def _constant(graph: onnx.GraphProto, name: str) -> np.ndarray | None:
    """Tensor `name`'s value where an initializer or a Constant node gives it."""
    for t in graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    for node in graph.node:
        if node.op_type == "Constant" and node.output[0] == name and node.attribute and \
                node.attribute[0].name == "value":
            return numpy_helper.to_array(node.attribute[0].t)
    return None


def repair(model: onnx.ModelProto, legacy: dict[str, tuple[str, dict]], path: str) -> list[str]:
    """After conversion, in place: the nodes `legacy_nodes` found, given their old meaning.
    Returns the notes."""
    if not legacy:
        return []
    graph = model.graph
    nodes, resizes, hardmaxes = [], 0, 0
    for node in graph.node:
        old = legacy.get(node.output[0]) if node.output else None
        if old is None or node.op_type not in ("Resize", "Hardmax"):
            nodes.append(node)
        elif node.op_type == "Resize":
            nodes += _resize(node, old, graph, path)
            resizes += 1
        else:
            nodes += _hardmax(node, old[1].get("axis", 1))
            hardmaxes += 1
    del graph.node[:]
    graph.node.extend(nodes)
    notes = []
    if resizes:
        notes.append(f"{resizes} Upsample/Resize node(s) of the old opset kept asymmetric, "
                     "as they were (onnx's version converter made them half_pixel)")
    if hardmaxes:
        notes.append(f"{hardmaxes} Hardmax node(s) of the old opset kept over the input "
                     "flattened at their axis, as they were (onnx's version converter did not)")
    return notes


def _set(node: onnx.NodeProto, **attrs) -> None:
    kept = [a for a in node.attribute if a.name not in attrs]
    del node.attribute[:]
    node.attribute.extend(kept + [helper.make_attribute(k, v) for k, v in attrs.items()])


def _resize(node: onnx.NodeProto, old: tuple[str, dict], graph: onnx.GraphProto,
            path: str) -> list[onnx.NodeProto]:
    op_type, attrs = old
    _set(node, coordinate_transformation_mode="asymmetric")
    mode = attrs.get("mode", b"nearest")
    if (mode.decode() if isinstance(mode, bytes) else mode) != "nearest":
        return [node]
    scales = _constant(graph, node.input[2]) if len(node.input) > 2 else None
    if scales is None:
        if op_type == "Upsample":  # (an Upsample never shrinks: onnxruntime refuses scales < 1)
            _set(node, nearest_mode="floor")
            return [node]
        raise ModelError(f"Resize '{node.name or node.output[0]}' of {path} (opset 10, nearest) "
                         "has scales computed when it runs: whether it rounds up or down "
                         "depends on them", "export the model at opset 11 or later")
    scales = [float(s) for s in scales.reshape(-1)]
    if all(s >= 1 for s in scales) or all(s <= 1 for s in scales):
        _set(node, nearest_mode="floor" if any(s > 1 for s in scales) else "ceil")
        return [node]
    # grow first (rounding down), then shrink (rounding up)
    grown = f"{node.output[0]}__cw_grown"
    up = numpy_helper.from_array(np.array([max(s, 1.0) for s in scales], np.float32),
                                 f"{grown}_scales")
    down = numpy_helper.from_array(np.array([min(s, 1.0) for s in scales], np.float32),
                                   f"{node.output[0]}__cw_shrunk_scales")
    first = onnx.NodeProto()
    first.CopyFrom(node)
    first.name, first.output[0] = grown, grown
    first.input[2] = up.name
    _set(first, nearest_mode="floor")
    node.input[0], node.input[2] = grown, down.name
    _set(node, nearest_mode="ceil")
    return [_constant_node(up), first, _constant_node(down), node]


def _constant_node(t: onnx.TensorProto) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [t.name], name=t.name, value=t)


def _hardmax(node: onnx.NodeProto, axis: int) -> list[onnx.NodeProto]:
    x, y = node.input[0], node.output[0]
    flat, picked, shape = (f"{y}__cw_{what}" for what in ("flat", "picked", "shape"))
    return [helper.make_node("Flatten", [x], [flat], name=flat, axis=axis),
            helper.make_node("Hardmax", [flat], [picked], name=picked, axis=-1),
            helper.make_node("Shape", [x], [shape], name=shape),
            helper.make_node("Reshape", [picked, shape], [y], name=node.name or y)]
