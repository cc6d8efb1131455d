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
    return _counted((resizes, "Upsample/Resize node(s) of the old opset kept asymmetric, as "
                              "they were (onnx's version converter made them half_pixel)"),
                    (hardmaxes, "Hardmax node(s) of the old opset kept over the input flattened "
                                "at their axis, as they were (onnx's version converter did not)"))


def _counted(*counts: tuple[int, str]) -> list[str]:
    """A note per (count, what) whose count is not 0."""
    return [f"{count} {what}" for count, what in counts if count]


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


# operators that broadcast only where `broadcast=1` says so before opset 7, B's dimensions
# aligned with A's from `axis` on (default: A's last ones); from opset 7 numpy's rules hold
_LEGACY_BROADCAST = ("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater",
                     "Less")


def before_conversion(model: onnx.ModelProto, opset: int, path: str) -> list[str]:
    """Before conversion, in place: what the converter cannot lift, written in operators that
    mean the same at every opset. Returns the notes.

    - `broadcast=1` with an `axis` (opsets 1-6: a bias of shape [C] added to [N, C, H, W] at
      axis 1). The converter fails on a symbolic batch ("Dimension is a param"), and the graph
      then went to TVM at its own opset, whose Add aligns B with A's last axes: an error where
      the sizes differ, and where they agree (Mul by [6] at axis 2 of [N, 4, 6, 6]) a product
      along the wrong axis, silently. B gets the trailing axes of size 1 that align it.
    - BatchNormalization with `spatial=0` (opsets 1-8: statistics per activation, shaped like
      a sample), which TVM's importer refuses: a Mul and an Add by constants folded from them.
    """
    if opset >= 9:
        return []
    graph = model.graph
    ranks: dict[str, int] | None = None
    nodes, aligned, batchnorms = [], 0, 0
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.domain in _DOMAINS and opset < 7 and node.op_type in _LEGACY_BROADCAST \
                and attrs.get("broadcast") == 1:
            ranks = ranks if ranks is not None else _ranks(model)
            unsqueeze = _aligned(node, attrs, ranks, path)
            if unsqueeze is not None:
                nodes.append(unsqueeze)
                aligned += 1
            _drop(node, "broadcast", "axis")
        elif node.domain in _DOMAINS and node.op_type == "BatchNormalization" \
                and attrs.get("spatial", 1) == 0:
            nodes += _per_activation_batchnorm(node, attrs, graph, path)
            batchnorms += 1
            continue
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return _counted((aligned, f"broadcast(s) of opset {opset} along an axis given as trailing "
                              "axes of size 1 (numpy's rules, which later opsets use)"),
                    (batchnorms, "BatchNormalization node(s) with spatial=0 (statistics per "
                                 "activation) folded into a Mul and an Add"))


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    """Rank of every tensor whose shape the file gives or onnx's shape inference finds."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # an old file onnx cannot infer: what it states itself
        inferred = model
    graph = inferred.graph
    ranks = {t.name: len(t.dims) for t in graph.initializer}
    for v in list(graph.input) + list(graph.value_info) + list(graph.output):
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            ranks[v.name] = len(v.type.tensor_type.shape.dim)
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            ranks[node.output[0]] = len(node.attribute[0].t.dims)
    return ranks


def _aligned(node: onnx.NodeProto, attrs: dict, ranks: dict[str, int],
             path: str) -> onnx.NodeProto | None:
    """The Unsqueeze that gives B of a legacy broadcast its trailing axes (B's input renamed to
    its output), or None where B is aligned with A's last axes already."""
    a, b = node.input[0], node.input[1]
    where = f"{node.op_type} '{node.name or node.output[0]}' of {path}"
    if a not in ranks or b not in ranks:
        raise ModelError(f"{where} broadcasts at an axis (opset 6 or older), and the rank of "
                         f"'{a if a not in ranks else b}' is not known before the model runs",
                         "give the model's inputs their shapes, or convert it to opset 7 or "
                         "later with onnx.version_converter")
    rank_a, rank_b = ranks[a], ranks[b]
    axis = attrs.get("axis", rank_a - rank_b)
    axis = axis + rank_a if axis < 0 else axis
    trailing = rank_a - axis - rank_b
    if trailing < 0 or axis < 0:
        raise ModelError(f"{where} broadcasts a rank-{rank_b} input at axis {attrs.get('axis')} "
                         f"of a rank-{rank_a} one: it does not fit",
                         "check the model in onnxruntime 1.x or the tool that exported it")
    if trailing == 0:
        return None
    out = f"{b}__cw_at_axis{axis}_of_{node.output[0]}"
    node.input[1] = out
    # Unsqueeze with its axes as an attribute: the form of opsets below 13, which this is
    return helper.make_node("Unsqueeze", [b], [out], name=out,
                            axes=list(range(rank_b, rank_b + trailing)))


def _drop(node: onnx.NodeProto, *names: str) -> None:
    kept = [a for a in node.attribute if a.name not in names]
    del node.attribute[:]
    node.attribute.extend(kept)


def _per_activation_batchnorm(node: onnx.NodeProto, attrs: dict, graph: onnx.GraphProto,
                              path: str) -> list[onnx.NodeProto]:
    where = f"BatchNormalization '{node.name or node.output[0]}' of {path}"
    if any(name for name in node.output[1:]):
        raise ModelError(f"{where} has training outputs (running statistics)",
                         "export the model for inference (model.eval() before torch.onnx)")
    values = [_constant(graph, name) for name in node.input[1:5]]
    if any(v is None for v in values):
        raise ModelError(f"{where} normalizes per activation (spatial=0) by statistics computed "
                         "when the model runs", "export the model at opset 9 or later")
    scale, bias, mean, var = (v.astype(np.float64) for v in values)
    factor = scale / np.sqrt(var + float(attrs.get("epsilon", 1e-5)))
    shift = bias - mean * factor
    y = node.output[0]
    consts = [numpy_helper.from_array(v.astype(np.float32), f"{y}__cw_{what}")
              for v, what in ((factor, "factor"), (shift, "shift"))]
    scaled = f"{y}__cw_scaled"
    return [_constant_node(consts[0]), _constant_node(consts[1]),
            helper.make_node("Mul", [node.input[0], consts[0].name], [scaled], name=scaled),
            helper.make_node("Add", [scaled, consts[1].name], [y], name=node.name or y)]
