"""Read and check an ONNX file: its operators, its inputs (the batch dimension fixed as the
symbolic `cw_batch`, first on every input), the values fixed at compile time, and the weights
stored beside it. What TVM's importer then takes is in frontend.py; the rewrites in between in
normalize.py.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from cw.compile import external_data, quantized, recurrent
from cw.errors import ModelError, UsageError
from cw.tvm_env import load_tvm

BATCH_VAR = "cw_batch"
# If nodes are folded when the shapes decide their branch (cw/compile/control_flow.py)
LOOP_OPS = {"Loop", "Scan"}
# operators whose output size the input values decide
VALUE_SHAPED_OPS = {"NonZero", "NonMaxSuppression", "Unique", "Compress"}
_ONNX_DOMAINS = {"", "ai.onnx"}
_INTEGER_TYPES = {onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32,
                  onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16,
                  onnx.TensorProto.UINT32, onnx.TensorProto.UINT64}


@dataclass
class OnnxModel:
    path: Path
    model: onnx.ModelProto
    sha256: str
    opset: int
    inputs: list[tuple[str, str, list]]  # name, numpy dtype, dims (int, or str for symbolic)
    fixed_batch: int | None  # the batch size baked into the graph, None when symbolic
    notes: list[str] = field(default_factory=list)
    # "x dim 2: 64 → 65" for each fixed dimension --input-shape changed: the first suspect when
    # TVM's importer then fails
    changed_dims: list[str] = field(default_factory=list)
    # integer inputs that index a table (a Gather's indices: token ids): input -> rows, the
    # values in [-rows, rows) (index_limits)
    index_limits: dict[str, int] = field(default_factory=dict)
    # quantized operators rewritten as float32 arithmetic on integers (cw/compile/quantized.py):
    # graph rewrites that reassociate that arithmetic would no longer give the same integers
    quantized: bool = False
    # input or output name -> where the file has its batch axis, for those not first: the
    # bundle takes and gives them batch-first (a Transpose at the graph's edge)
    source_batch_axes: dict[str, int] = field(default_factory=dict)
    # inputs given a value at compile time (--input-value), now constants of the graph
    fixed_inputs: dict[str, np.ndarray] = field(default_factory=dict)
    # what combines a batch's samples in a form the graph rewrites then hide (MaxPool's indices
    # read as values): rebatch.batch_mixing sees the graph after them
    rewritten_mixing: str = ""


def parse_input_shapes(specs: list[str]) -> dict[str, list]:
    """`x=N,3,640,640` -> {"x": ["N", 3, 640, 640]}; `N` marks the batch dimension."""
    shapes: dict[str, list] = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            parsed = [d if d == "N" else int(d) for d in dims.split(",")]
            if any(isinstance(d, int) and d <= 0 for d in parsed):
                raise ValueError
        except ValueError:
            raise UsageError(f"invalid --input-shape '{spec}'",
                             "write NAME=DIMS with N for the batch, e.g. x=N,3,640,640") from None
        shapes[name] = parsed
    return shapes


def parse_input_values(specs: list[str]) -> dict[str, list]:
    """`sr=16000` -> {"sr": [16000]}; `scale=0.5,2` -> {"scale": [0.5, 2]}."""
    values: dict[str, list] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        try:
            if not sep or not name or not text:
                raise ValueError
            values[name] = [int(v) if v.lstrip("+-").isdigit() else float(v)
                            for v in text.split(",")]
        except ValueError:
            raise UsageError(f"invalid --input-value '{spec}'",
                             "write NAME=VALUE (or NAME=V1,V2,... for a vector), "
                             "e.g. sr=16000") from None
    return values


def _fix_input_values(path: Path, model: onnx.ModelProto, graph_inputs: list,
                      values: dict[str, list]) -> dict[str, np.ndarray]:
    """Inputs with a value given at compile time become initializers: a scalar setting such
    as an audio model's sample rate, which cw could not batch."""
    fixed = {}
    for value_info in graph_inputs:
        if value_info.name not in values:
            continue
        dims = _dims(value_info)
        elem = value_info.type.tensor_type.elem_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
        given = values[value_info.name]
        if any(isinstance(d, str) for d in dims) or int(np.prod(dims)) != len(given):
            raise UsageError(f"--input-value {value_info.name} gives {len(given)} value(s); "
                             f"input '{value_info.name}' of {path.name} has shape {dims}",
                             "give one value per element of an input of fixed shape")
        array = np.array(given, dtype=dtype).reshape([int(d) for d in dims])
        if not np.array_equal(array.reshape(-1).astype(np.float64), np.array(given, np.float64)):
            raise UsageError(f"--input-value {value_info.name}: {given} is not exact as "
                             f"{dtype.name}", f"give {dtype.name} values")
        fixed[value_info.name] = array
        model.graph.input.remove(value_info)
        model.graph.initializer.append(onnx.numpy_helper.from_array(array, value_info.name))
    return fixed


def _batch_axis(dims: list, batch_names: set[str]) -> int:
    """Where an input's batch axis is: N (given by --input-shape, or a dimension the file
    names so: a sequence-first recurrent input [T, N, F]), a leading symbolic dimension, or
    else the one symbolic dimension named as another input's batch (a recurrent state
    [2, batch, 128])."""
    if dims and isinstance(dims[0], str):  # (--input-shape dims are ints and N only)
        return 0
    if "N" in dims:
        return dims.index("N")
    named = [i for i, d in enumerate(dims) if isinstance(d, str) and d in batch_names]
    return named[0] if len(named) == 1 else 0


def all_graphs(graph: onnx.GraphProto):
    """`graph` and, depth first, the graphs its nodes hold (an If's branches)."""
    yield graph
    for node in graph.node:
        for a in node.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                      a.graphs if a.type == onnx.AttributeProto.GRAPHS else []):
                yield from all_graphs(g)


def all_nodes(graph: onnx.GraphProto):
    for g in all_graphs(graph):
        yield from g.node


def _batch_first_inputs(model: onnx.ModelProto, axes: dict[str, int]) -> None:
    """Each input whose batch axis is `axes[name]` is taken batch-first and transposed back to
    the file's layout for the nodes that read it."""
    front = []
    for name, axis in axes.items():
        rank = len(next(i for i in model.graph.input if i.name == name)
                   .type.tensor_type.shape.dim)
        inner = f"{name}__cw_source_layout"
        for node in all_nodes(model.graph):  # an If's branches read it by name too
            node.input[:] = [inner if v == name else v for v in node.input]
        perm = [*range(1, axis + 1), 0, *range(axis + 1, rank)]
        front.append(onnx.helper.make_node("Transpose", [name], [inner], name=inner, perm=perm))
    nodes = front + list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def _dims(value_info: onnx.ValueInfoProto) -> list:
    dims = []
    for d in value_info.type.tensor_type.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or "?")
    return dims


def load_onnx(path: str | Path, input_shapes: dict[str, list] | None = None,
              input_values: dict[str, list] | None = None) -> OnnxModel:
    """Read and check an ONNX file, fix the batch dimension as the symbolic `cw_batch`, first
    on every input, and the inputs given values as constants."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"no such file: {path}", "give the path of an .onnx model")
    data = path.read_bytes()
    try:
        model = onnx.load_model_from_string(data)
        if not model.graph.node:
            raise ValueError("no graph")
    except Exception:  # protobuf raises several unrelated types for garbage input
        raise ModelError(f"{path} is not an ONNX model", "export the model to ONNX first") from None

    digest = hashlib.sha256(data)
    stored_beside = external_data.inline(path, model, digest)
    opset = next((o.version for o in model.opset_import if o.domain in _ONNX_DOMAINS), 0)
    check_operators(path, model)

    init_names = {t.name for t in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in init_names]
    if len(graph_inputs) != len(model.graph.input):
        # Old IR versions list every initializer as a graph input too; TVM's importer would then
        # take each weight twice (as an input and as a parameter).
        dropped = len(model.graph.input) - len(graph_inputs)
        del model.graph.input[:]
        model.graph.input.extend(graph_inputs)
        # IR 4 is the first in which initializers need not be inputs; tools that check (onnx's
        # version converter, onnxruntime) would otherwise call the weights undefined
        model.ir_version = max(model.ir_version, 4)
        normalization_notes = [f"removed {dropped} initializers listed as graph inputs"]
    else:
        normalization_notes = []
    if stored_beside:
        normalization_notes.append(f"weights read from {', '.join(stored_beside)} (external "
                                   "data; the source sha256 covers these files too)")
    input_shapes = dict(input_shapes or {})
    input_values = dict(input_values or {})
    for flag, given in (("--input-shape", input_shapes), ("--input-value", input_values)):
        unknown = set(given) - {i.name for i in graph_inputs}
        if unknown:
            raise UsageError(f"{flag} names no input of {path.name}: "
                             f"{', '.join(sorted(unknown))}",
                             f"its inputs are: {', '.join(i.name for i in graph_inputs)}")
    fixed_inputs = _fix_input_values(path, model, graph_inputs, input_values)
    graph_inputs = [i for i in graph_inputs if i.name not in fixed_inputs]
    inputs, fixed_batches, notes = [], set(), list(normalization_notes)
    notes += [f"input {name} fixed to {value.tolist()} by --input-value"
              for name, value in fixed_inputs.items()]
    changed_dims, batch_axes = [], {}
    batch_names = {dims[0] for dims in map(_dims, graph_inputs)
                   if dims and isinstance(dims[0], str)}
    for value_info in graph_inputs:
        dims = _dims(value_info)
        if value_info.name in input_shapes:
            given = input_shapes[value_info.name]
            if len(given) != len(dims):
                raise UsageError(f"--input-shape {value_info.name} has {len(given)} dimensions, "
                                 f"the model's input has {len(dims)}", f"model: {dims}")
            changed_dims += [f"{value_info.name} dim {i}: {old} → {new}"
                             for i, (old, new) in enumerate(zip(dims, given))
                             if i > 0 and isinstance(old, int) and old != new]
            dims = given
            notes.append(f"input {value_info.name} shape fixed to {given} by --input-shape")
        if not dims:
            raise ModelError(f"input '{value_info.name}' of {path.name} is a scalar: cw batches "
                             "requests along an axis", f"fix its value at compile time with "
                             f"--input-value {value_info.name}=VALUE, or give it a batch axis")
        axis = _batch_axis(dims, batch_names)
        if axis:
            batch_axes[value_info.name] = axis
            source = ["N" if d == BATCH_VAR else d for d in dims]
            dims = [BATCH_VAR if dims[axis] == "N" else dims[axis], *dims[:axis],
                    *dims[axis + 1:]]
            notes.append(f"input {value_info.name}: the file's batch axis {axis} taken first "
                         f"(the bundle takes {['N', *dims[1:]]}, the file {source})")
        lead, rest = dims[0], dims[1:]
        dynamic = [f"dim {i + 1} ('{d}')" for i, d in enumerate(rest) if isinstance(d, str)]
        if dynamic:
            example = ",".join(["N"] + [str(d) if isinstance(d, int) else "SIZE" for d in rest])
            raise ModelError(f"input '{value_info.name}' of {path.name} has dynamic non-batch "
                             f"dimensions: {', '.join(dynamic)}",
                             f"fix them with --input-shape {value_info.name}={example}")
        if isinstance(lead, int):
            fixed_batches.add(lead)
        elem = value_info.type.tensor_type.elem_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)).name
        batch = BATCH_VAR if isinstance(lead, str) else lead
        inputs.append((value_info.name, dtype, [batch, *rest]))
    symbolic = any(isinstance(dims[0], str) for _, _, dims in inputs)
    if len(fixed_batches) > 1 or (fixed_batches and symbolic):
        raise ModelError(f"inputs of {path.name} disagree on the batch dimension",
                         "export the model with one symbolic batch dimension on every input")
    fixed_batch = next(iter(fixed_batches)) if fixed_batches else None
    _set_input_dims(model, graph_inputs, inputs)
    _batch_first_inputs(model, batch_axes)
    return OnnxModel(path, model, digest.hexdigest(), opset, inputs, fixed_batch,
                     notes, changed_dims, source_batch_axes=batch_axes,
                     fixed_inputs=fixed_inputs)


def _set_input_dims(model: onnx.ModelProto, graph_inputs, inputs) -> None:
    for value_info, (_, _, dims) in zip(graph_inputs, inputs):
        shape = value_info.type.tensor_type.shape
        for dim, value in zip(shape.dim, dims):
            if isinstance(value, str):
                dim.Clear()
                dim.dim_param = value
            else:
                dim.Clear()
                dim.dim_value = value


def _varying(graph: onnx.GraphProto) -> set[str]:
    """The tensors of `graph` that depend on its inputs (the rest are constants to fold)."""
    varying = {i.name for i in graph.input} - {t.name for t in graph.initializer}
    for node in graph.node:
        # a branch may read any outer tensor: an If counts as reading its inputs only
        if any(i in varying for i in node.input) or node.op_type in LOOP_OPS:
            varying.update(node.output)
    return varying


def check_operators(path: Path, model: onnx.ModelProto, final: bool = False) -> None:
    """Refuse, by name, an operator TVM's importer lacks and cw does not rewrite. Before
    normalization (`final` False) an operator on constants only is let through (onnxslim or
    cw/compile/decompose.py folds it); after it, an operator whose output size depends on the
    input values is refused too."""
    load_tvm()
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    from cw.compile import contrib, decompose

    supported = _get_convert_map()
    varying = _varying(model.graph)
    for node in model.graph.node:
        where = f"node '{node.name or '(unnamed)'}' of {path.name}"
        if node.op_type in LOOP_OPS:
            raise ModelError(f"{node.op_type} at {where}: data-dependent execution time; "
                             "cw schedules only static DNNs",
                             "export the model without control flow")
        if node.op_type == "If" or quantized.is_rewritten(node) or \
                recurrent.is_rewritten(node) or decompose.is_rewritten(node) or \
                contrib.is_rewritten(node):
            continue
        constant = not any(i in varying for i in node.input)
        if final and node.op_type == "Compress" and node.domain in _ONNX_DOMAINS and \
                not constant and node.input[1] not in varying:
            raise ModelError(f"Compress at {where} selects along the batch axis, or from its "
                             "input flattened (no axis): cw cannot batch it",
                             "give the Compress an axis other than the batch's")
        if final and node.op_type in VALUE_SHAPED_OPS and node.domain in _ONNX_DOMAINS and \
                not constant:
            raise ModelError(f"{node.op_type} at {where}: the size of its output depends on "
                             "the input values; cw schedules only static DNNs",
                             "keep this step (e.g. a detector's NonMaxSuppression) outside "
                             "the model")
        if node.domain not in _ONNX_DOMAINS or node.op_type not in supported:
            if constant and node.domain in _ONNX_DOMAINS and not final:
                continue
            domain = node.domain or "ai.onnx"
            raise ModelError(f"operator {node.op_type} (domain {domain}) at {where} is not "
                             "supported by TVM's ONNX importer",
                             "export the model with standard ONNX operators")


def index_limits(model: onnx.ModelProto) -> dict[str, int]:
    """Integer graph inputs that a Gather uses as indices into a weight (an embedding's token
    ids), each with the rows of the smallest such table: valid values are in [-rows, rows),
    negative ones counting from the end as ONNX says. Read after folding (onnxslim), when
    tables are initializers."""
    tables = {t.name: list(t.dims) for t in model.graph.initializer}
    integer = {i.name for i in model.graph.input
               if i.type.tensor_type.elem_type in _INTEGER_TYPES}
    limits: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type != "Gather" or node.domain not in _ONNX_DOMAINS or len(node.input) < 2:
            continue
        data, indices = node.input[0], node.input[1]
        if indices not in integer or data not in tables:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        dims = tables[data]
        if not -len(dims) <= axis < len(dims):
            continue
        rows = int(dims[axis])
        limits[indices] = min(rows, limits.get(indices, rows))
    return limits
