"""Resize forms TVM 0.27's importer gets wrong or lacks, written as ones it takes.

The importer builds a resize from the output size alone: its coordinate mapping divides by
out / in. ONNX's divides by the scale the file gives, so wherever in * scale is not a whole
number (7 x 1.3, 9 x 0.5) the two differ: 0.2-1.7 off onnxruntime in every mode, silently.
It also ignores `antialias` (0.7 off) and refuses opset 18's `axes`, `keep_aspect_ratio_policy`
and opset 19's `half_pixel_symmetric` mode.

Where a plain Resize says the same thing it becomes one: `axes` spread to every axis (scale 1
elsewhere), half_pixel_symmetric as half_pixel where the output sizes are whole (its
adjustment is then 1), a kept aspect ratio as the one scale it comes to. Otherwise each
resized axis becomes a product by a constant matrix, the resize of each unit vector along
that axis as onnxruntime computes it here once: every mode resizes axis by axis, so this is
exact. Such a product costs in x out multiply-adds per row, where a resize costs a few: fine
for the small maps where these forms occur, and the only exact form TVM has.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import onnx
from onnx import helper, numpy_helper

from cw.compile.emit import Emitter, attr
from cw.errors import ModelError

_MATRIX_CHECK_ELEMENTS = 1 << 22  # a full check against onnxruntime up to this input size
_TVM_MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
              "tf_half_pixel_for_nn", "tf_crop_and_resize")


def candidate(node: onnx.NodeProto, inits: dict) -> bool:
    """Whether `node` (a Resize) may need rewriting; `rewrite_node` decides with shapes."""
    if node.op_type != "Resize":
        return False
    if attr(node, "antialias", 0) or attr(node, "axes") is not None or \
            attr(node, "keep_aspect_ratio_policy", "stretch") != "stretch" or \
            attr(node, "coordinate_transformation_mode", "half_pixel") not in _TVM_MODES:
        return True
    scales = len(node.input) > 2 and node.input[2] in inits and \
        (len(node.input) < 4 or not node.input[3])
    # (sizes: for a resize of other axes than the last ones, which the importer ignores)
    return scales or len(node.input) > 3 and node.input[3] in inits


def _what(node) -> str:
    if attr(node, "antialias", 0):
        return "resizes with antialias"
    return "resizes by a scale that does not give whole sizes"


def rewrite_node(e: Emitter, node, shapes: dict, where: str) -> bool:
    """`node` as a Resize TVM gets right, or as matrix products; False where it already is
    one."""
    dims = shapes.get(node.input[0])
    scales = e.constant(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    sizes = e.constant(node.input[3]) if len(node.input) > 3 and node.input[3] else None
    if scales is not None and not scales.size:
        scales = None
    antialias = attr(node, "antialias", 0)
    axes = attr(node, "axes")
    policy = attr(node, "keep_aspect_ratio_policy", "stretch")
    mode = attr(node, "coordinate_transformation_mode", "half_pixel")
    changed_form = axes is not None or policy != "stretch" or mode not in _TVM_MODES
    if not dims or not all(isinstance(d, int) for d in dims[2:]) or \
            scales is None and sizes is None or mode == "tf_crop_and_resize":
        if antialias or changed_form:
            raise ModelError(f"{where} {_what(node)}, and its sizes, scales or input shape are "
                             "not constants cw can read", "fix the input shape with "
                             "--input-shape, or resize before the model")
        return False  # (the importer takes it, or says why not)
    rank = len(dims)
    per_axis = _per_axis_scales(node, dims, [a % rank for a in axes or range(rank)], scales,
                                sizes)
    whole = all(Fraction(s) * dims[a] == out for a, (s, out) in per_axis.items())
    if any(a < 2 for a in per_axis):  # (the importer would resize the last axes instead)
        if not antialias and len(per_axis) <= rank - 2 and (whole or not changed_form):
            _moved_last(e, node, dims, per_axis, sizes is not None and not changed_form,
                        where)
        else:
            _by_matrices(e, node, dims, per_axis, where)
        return True
    kept = {k: v for k, v in _attributes(node).items()
            if k not in ("axes", "keep_aspect_ratio_policy")}
    if mode == "half_pixel_symmetric":  # its adjustment is 1 where the sizes are whole
        kept["coordinate_transformation_mode"] = "half_pixel"
    if not antialias and sizes is not None and axes is None and policy == "stretch":
        if not changed_form:
            return False  # the importer maps by out / in, as ONNX does for sizes
        e.op("Resize", list(node.input), outputs=[node.output[0]], **kept)
        return True
    if not antialias and whole:
        if not changed_form and sizes is None:
            return False  # a scale TVM takes as it is
        full = [1.0] * rank
        for a, (s, _) in per_axis.items():
            full[a] = s
        e.op("Resize", [node.input[0], node.input[1] if len(node.input) > 1 else "",
                        e.const(np.array(full, np.float32), "scales")],
             outputs=[node.output[0]], **kept)
        return True
    if not per_axis:
        e.op("Identity", [node.input[0]], outputs=[node.output[0]])
        return True
    _by_matrices(e, node, dims, per_axis, where)
    return True


def _moved_last(e: Emitter, node, dims: list, per_axis: dict, by_sizes: bool,
                where: str) -> None:
    """A resize of an axis before the last two (an NHWC image's H, scales [1, s, s, 1]): TVM's
    importer resizes the last axes by the last scales and ignores the others, so it gave an
    image of the wrong size, silently. It is written as a transpose that puts the resized
    axes last, the resize (by sizes where `by_sizes`, else by scales: whole ones where the
    form changed), and the transpose back."""
    rank = len(dims)
    perm = [a for a in range(rank) if a not in per_axis] + sorted(per_axis)
    moved = e.op("Transpose", [node.input[0]], perm=perm)
    if by_sizes:
        full = [dims[a] if isinstance(dims[a], int) else 1 for a in perm]
        for k, a in enumerate(perm):
            if a in per_axis:
                full[k] = per_axis[a][1]
        given = ["", e.const(np.array(full, np.int64), "sizes")]
    else:
        given = [e.const(np.array([per_axis.get(a, (1.0,))[0] for a in perm], np.float32),
                         "scales")]
    kept = {k: v for k, v in _attributes(node).items()  # (both said in `per_axis` now)
            if k not in ("axes", "keep_aspect_ratio_policy")}
    inner = helper.make_node("Resize", [moved, node.input[1] if len(node.input) > 1 else "",
                                        *given], [e.name("resized")], name=e.name("resize"),
                             **kept)
    shapes = {moved: [dims[a] for a in perm]}
    e.inits.update({t.name: t for t in e.new_inits})  # (the inner node's constants)
    if not rewrite_node(e, inner, shapes, where):
        e.nodes.append(inner)
    e.op("Transpose", [inner.output[0]], outputs=[node.output[0]],
         perm=[perm.index(a) for a in range(rank)])


def _attributes(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _per_axis_scales(node, dims, axes, scales, sizes) -> dict[int, tuple[float, int]]:
    """Each resized axis's scale and output size, as ONNX defines them (axes of scale 1 and
    of unchanged size left out; the batch's is taken as unchanged)."""
    pairs = {}
    if scales is not None:
        for a, s in zip(axes, (float(np.float32(s)) for s in scales.reshape(-1))):
            if s != 1.0 and not isinstance(dims[a], int):
                raise ModelError(f"Resize '{node.name or node.output[0]}' scales its batch axis "
                                 f"by {s}: cw cannot batch it", "resize only the other axes")
            if s != 1.0:
                pairs[a] = (s, int(np.floor(np.float32(dims[a]) * np.float32(s))))
        return pairs
    policy = attr(node, "keep_aspect_ratio_policy", "stretch")
    wanted = {a: int(out) for a, out in zip(axes, sizes.reshape(-1))
              if isinstance(dims[a], int)}
    if policy != "stretch":
        ratios = [np.float32(out) / np.float32(dims[a]) for a, out in wanted.items()]
        scale = min(ratios) if policy == "not_larger" else max(ratios)
        wanted = {a: int(np.floor(np.float32(dims[a]) * scale + np.float32(0.5)))
                  for a in wanted}
        return {a: (float(scale), out) for a, out in wanted.items()
                if (float(scale), out) != (1.0, dims[a])}
    return {a: (float(np.float32(out) / np.float32(dims[a])), out)
            for a, out in wanted.items() if out != dims[a]}


def _axis_matrix(e: Emitter, node, dims: list, axis: int, scale: float, size_out: int | None,
                 where: str) -> np.ndarray:
    """[in, out]: the resize along `axis` of each unit vector, by onnxruntime (resized to
    `size_out` where the node gives sizes, else by `scale`)."""
    import onnxruntime as ort

    rank = len(dims)
    basis_shape = [dims[axis]] + [1] * (rank - 1)
    basis_shape[axis] = dims[axis]
    basis = np.zeros(basis_shape, np.float32)
    for k in range(dims[axis]):
        basis[(k,) + (0,) * (axis - 1) + (k,) + (0,) * (rank - axis - 1)] = 1
    if size_out is None:
        target, given = np.ones(rank, np.float32), ["x", "", "scales"]
        target[axis] = scale
    else:
        target, given = np.array(basis_shape, np.int64), ["x", "", "", "scales"]
        target[axis] = size_out
    kept = {k: v for k, v in _attributes(node).items()
            if k not in ("axes", "keep_aspect_ratio_policy")}
    graph = helper.make_graph(
        [helper.make_node("Resize", given, ["y"], **kept)], "basis",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, basis_shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(target, "scales")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(e.opset, 19))])
    try:
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        out = session.run(None, {"x": basis})[0]
    except Exception as error:  # (onnxruntime refuses nearest with antialias, say)
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][-160:]
        raise ModelError(f"{where} {_what(node)}, and onnxruntime cannot compute it: {first}",
                         "export the model without that resize form") from None
    return out.reshape(dims[axis], out.shape[axis])


def _by_matrices(e: Emitter, node, dims: list, per_axis: dict, where: str) -> None:
    rank = len(dims)
    if 0 in per_axis:
        raise ModelError(f"{where} {_what(node)} along its batch axis",
                         "resize only the other axes")
    by_sizes = len(node.input) > 3 and bool(node.input[3])
    matrices = {a: _axis_matrix(e, node, dims, a, s, out if by_sizes else None, where)
                for a, (s, out) in sorted(per_axis.items())}
    _check_matrices(e, node, dims, matrices, where)
    x = node.input[0]
    for axis, matrix in matrices.items():
        perm = list(range(rank))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        if axis != rank - 1:
            x = e.op("Transpose", [x], perm=perm)
        x = e.op("MatMul", [x, e.const(matrix, "resize")])
        if axis != rank - 1:
            x = e.op("Transpose", [x], perm=perm)
    e.op("Identity", [x], outputs=[node.output[0]])


def _apply(x: np.ndarray, matrices: dict) -> np.ndarray:
    for axis, matrix in matrices.items():
        x = np.moveaxis(np.moveaxis(x, axis, -1) @ matrix, -1, axis)
    return x


def _check_matrices(e: Emitter, node, dims: list, matrices: dict, where: str) -> None:
    """The products against the node itself, run by onnxruntime on one random sample: a form
    whose axes do not resize independently (none known) is refused, not served wrong."""
    import onnxruntime as ort

    shape = [1, *dims[1:]]
    if int(np.prod(shape)) > _MATRIX_CHECK_ELEMENTS:
        return
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    inputs = list(node.input)
    inits = [e.inits[name] for name in inputs[1:] if name]
    inputs[0] = "x"
    graph = helper.make_graph(
        [helper.make_node("Resize", inputs, ["y"], **_attributes(node))], "check",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(e.opset, 19))])
    try:
        want = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    except Exception:  # (a sample's Resize onnxruntime refuses: the axis runs said so first)
        return
    got = _apply(x.astype(np.float64), matrices)
    if got.shape != want.shape or \
            np.max(np.abs(got - want)) > 1e-5 * max(1.0, float(np.max(np.abs(want)))):
        raise ModelError(f"{where} {_what(node)}, in a form cw could not write exactly",
                         "export the model with a Resize by scales")
