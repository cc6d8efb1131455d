"""Graph normalization before TVM: what a compiler front end can remove from real-world ONNX.

TVM 0.27's importer rejects many exported models for reasons that are not about the network:
opset-9 idioms (Slice with attributes, Upsample), weights stored as Constant / ConstantOfShape
nodes, shape arithmetic (Shape → Gather → Concat → Reshape) that is constant once the input
shapes are fixed. Two well-kept tools do the work, each step recorded in the manifest's notes:

1. onnx's own version converter lifts models below opset 13 to opset 17 (TVM's importer is
   written against current operator versions).
2. onnxslim (pure Python, on PyPI) infers shapes, folds constant subgraphs — shape arithmetic,
   ConstantOfShape weights — into initializers, removes no-op and dead nodes, and keeps the graph
   in topological order (cw/compile/slimming.py runs it). onnxsim would do similar folding but
   ships native code per platform; onnxoptimizer does no constant folding.
3. What onnxslim cannot fold because it reads the batch: a Resize to sizes computed from Shape
   is given the same scales (cw/compile/resize_scales.py), and the integer constants of such
   shape arithmetic become Constant nodes the importer can read (cw/compile/shape_constants.py).
4. Tables larger than a weights page are used in blocks that fit one (cw/compile/weight_split.py).

Constant folding is what keeps weights out of kernel libraries: a weight computed by a node
becomes an initializer, which cw packs into the paged weights blob.
"""

from __future__ import annotations


import numpy as np
import onnx

from cw.compile import (old_opsets, onnx_shapes, resize_scales, shape_constants, slimming,
                        weight_split)
from cw.compile.onnx_load import (BATCH_VAR, OnnxModel, all_graphs, all_nodes,
                                  check_operators)
from cw.errors import ModelError
from cw.tvm_env import load_tvm

TARGET_OPSET = 17
MIN_OPSET = 13  # below this, convert


def _convert_version(onnx_model: OnnxModel, say) -> None:
    if onnx_model.opset >= MIN_OPSET:
        return
    from onnx import version_converter

    for note in old_opsets.before_conversion(onnx_model.model, onnx_model.opset,
                                             onnx_model.path.name):
        say(note)
    legacy = old_opsets.legacy_nodes(onnx_model.model, onnx_model.opset)
    try:
        converted = version_converter.convert_version(onnx_model.model, TARGET_OPSET)
    except Exception as e:  # the converter raises bare RuntimeErrors for unsupported adapters
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        say(f"opset {onnx_model.opset} kept: onnx's version converter failed ({first})")
        return
    say(f"converted from opset {onnx_model.opset} to {TARGET_OPSET} (onnx version converter)")
    for note in old_opsets.repair(converted, legacy, onnx_model.path.name):
        say(note)
    onnx_model.model = converted
    onnx_model.opset = TARGET_OPSET


def _sums_as_adds(onnx_model: OnnxModel, say) -> None:
    """ONNX `Sum` (old exports' residual adds) as a chain of `Add`s, which broadcast alike.
    TVM imports Sum as stack-then-sum, a 5-D tensor whose layout its NCHWc conversion cannot
    infer: every convolution of the model then stayed in plain NCHW on the CPU."""
    from onnx import helper

    graph = onnx_model.model.graph
    nodes, rewritten = [], 0
    for node in graph.node:
        if node.op_type != "Sum" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            nodes.append(node)
            continue
        rewritten += 1
        acc = node.input[0]
        for i, term in enumerate(node.input[1:], start=1):
            last = i == len(node.input) - 1
            out = node.output[0] if last else f"{node.output[0]}__cw_sum{i}"
            nodes.append(helper.make_node("Add", [acc, term], [out],
                                          name=f"{node.name or node.output[0]}__cw_add{i}"))
            acc = out
    if rewritten:
        del graph.node[:]
        graph.node.extend(nodes)
        say(f"{rewritten} Sum node{'s' * (rewritten != 1)} as Add")


# Constant's scalar and list forms, and the tensor type ONNX gives each
_CONSTANT_FORMS = {"value_float": np.float32, "value_floats": np.float32,
                   "value_int": np.int64, "value_ints": np.int64}


def _constant_tensors(onnx_model: OnnxModel, say) -> None:
    """Constant nodes given as `value_float(s)` or `value_int(s)` (opset 12), as the `value`
    tensor ONNX defines them to be. TVM's importer read a float as float64, so `x * k`
    failed its type check ("Binary operators must have the same datatype")."""
    written = 0
    for node in all_nodes(onnx_model.model.graph):
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or \
                len(node.attribute) != 1 or node.attribute[0].name not in _CONSTANT_FORMS:
            continue
        form = node.attribute[0]
        value = np.array(onnx.helper.get_attribute_value(form), _CONSTANT_FORMS[form.name])
        del node.attribute[:]
        node.attribute.append(onnx.helper.make_attribute(
            "value", onnx.numpy_helper.from_array(value, node.output[0])))
        written += 1
    if written:
        say(f"{written} Constant node{'s' * (written != 1)} given as value_float(s) or "
            "value_int(s) written as tensors")


def _squares_as_products(onnx_model: OnnxModel, say) -> None:
    """`Pow(x, 2)` (LayerNorm's variance in PyTorch exports) as `Mul(x, x)`: TVM lowers Pow to
    a call of powf per element, 28 us for LayerNorm's 2,048 values (a tiny transformer's
    LayerNorms took longer than its attention); a product is one vector instruction, and
    exact like powf's square. Runs after folding, which turns the exponent into an
    initializer."""
    from onnx import helper, numpy_helper

    graph = onnx_model.model.graph
    inits = {t.name: t for t in graph.initializer}
    rewritten = 0
    for i, node in enumerate(graph.node):
        if node.op_type != "Pow" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
            continue
        exponent = inits.get(node.input[1])
        if exponent is None:
            continue
        value = numpy_helper.to_array(exponent)
        if value.size != 1 or value.dtype.kind != "f" or float(value.reshape(-1)[0]) != 2.0:
            continue
        graph.node[i].CopyFrom(helper.make_node("Mul", [node.input[0]] * 2, list(node.output),
                                                name=node.name))
        rewritten += 1
    if not rewritten:
        return
    used = {v for n in graph.node for v in n.input} | {o.name for o in graph.output}
    unused = [t for t in graph.initializer if t.name not in used]
    for t in unused:
        graph.initializer.remove(t)
    say(f"{rewritten} Pow(x, 2) as Mul(x, x)")


def _static_branches(onnx_model: OnnxModel, say) -> None:
    """If nodes whose branch the fixed shapes decide, inlined (cw/compile/control_flow.py);
    one left is refused, with the reason its branch is not known before the model runs."""
    from cw.compile import control_flow

    if not any(n.op_type == "If" for n in onnx_model.model.graph.node):
        return
    folded, left = control_flow.fold_static_branches(onnx_model.model)
    if left:
        name, why = left[0]
        kind = "data-dependent execution time: " if why.startswith("it reads the values") \
            else ""
        raise ModelError(f"If '{name}' of {onnx_model.path.name}: {kind}its branch is not "
                         f"known before the model runs ({why}); cw schedules only static DNNs",
                         "fix the input shapes with --input-shape, or export the model "
                         "without data-dependent control flow")
    say(f"{folded} If node{'s' * (folded != 1)} folded: the input shapes decide "
        f"{'their branches' if folded != 1 else 'its branch'}")


def _unrolled_recurrences(onnx_model: OnnxModel, say) -> None:
    from cw.compile import recurrent

    unrolled = recurrent.rewrite(onnx_model.model)
    if unrolled:
        kinds = ", ".join(f"{n} {op}{'s' * (n != 1)}" for op, n in sorted(unrolled.items()))
        say(f"{kinds} unrolled over the fixed sequence length into products and gate "
            "arithmetic")


def _decomposed(onnx_model: OnnxModel, say) -> None:
    """Operators TVM's importer lacks or mishandles, as ones it takes
    (cw/compile/decompose.py)."""
    load_tvm()
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    from cw.compile import decompose, rebatch

    # before the rewrite numbers MaxPool's indices per sample, where a reader could tell
    onnx_model.rewritten_mixing = rebatch.pool_indices_across_the_batch(onnx_model.model)
    done = decompose.rewrite(onnx_model.model, _get_convert_map(), onnx_model.path.name)
    if done:
        say(", ".join(f"{n} {op}" for op, n in sorted(done.items())) + " written as operators "
            "TVM imports (cw/compile/decompose.py)")


def _sizes_as_scales(onnx_model: OnnxModel, say) -> None:
    """Resizes to computed sizes (an export with a symbolic batch takes the batch from Shape)
    given the same scales where exact: TVM's importer takes sizes only as numbers
    (cw/compile/resize_scales.py)."""
    if not resize_scales.computed_sizes(onnx_model.model.graph):
        return
    # (onnx's data propagation follows the Shape -> Slice -> Concat that computes the sizes)
    try:
        dims = onnx_shapes.dims(onnx_shapes.infer(onnx_model.model, data_prop=True))
    except Exception:  # (TVM's importer then says what it cannot take)
        return
    count = resize_scales.rewrite(onnx_model.model.graph, dims, computed_only=True)
    if count:
        say(f"{count} Resize node{'s' * (count != 1)} to computed sizes given the same "
            "scales")
    spatial = resize_scales.spatial_sizes(onnx_model.model.graph, dims)
    if spatial:
        say(f"{spatial} Resize node{'s' * (spatial != 1)} to computed sizes whose ratio no "
            "float32 scale gives exactly given their spatial sizes, as constants")
        _decomposed(onnx_model, say)  # (resize_forms writes those)


def _batch_first_outputs(onnx_model: OnnxModel, say) -> None:
    """Outputs whose batch axis is not the first (a recurrent state [2, batch, 128]) are given
    batch-first, like every cw output: a Transpose at the graph's end."""
    from onnx import helper

    if onnx_model.fixed_batch is not None:
        return
    probe = onnx_shapes.without_weights(onnx_model.model)
    for out in probe.graph.output:  # what the exporter wrote there may name other symbols
        out.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(probe).graph.output
    except Exception:  # TVM's import reports a model whose shapes do not infer
        return
    graph = onnx_model.model.graph
    for out, shape in zip(graph.output, inferred):
        dims = [d.dim_param for d in shape.type.tensor_type.shape.dim]
        if BATCH_VAR not in dims or dims[0] == BATCH_VAR:
            continue
        axis, inner = dims.index(BATCH_VAR), f"{out.name}__cw_source_layout"
        for node in graph.node:
            node.output[:] = [inner if v == out.name else v for v in node.output]
            node.input[:] = [inner if v == out.name else v for v in node.input]
        perm = [axis, *(i for i in range(len(dims)) if i != axis)]
        graph.node.append(helper.make_node("Transpose", [inner], [out.name], name=out.name,
                                           perm=perm))
        for dim, value in zip(out.type.tensor_type.shape.dim,
                              [shape.type.tensor_type.shape.dim[i] for i in perm]):
            dim.CopyFrom(value)
        onnx_model.source_batch_axes[out.name] = axis
        say(f"output {out.name}: the file's batch axis {axis} given first")


def _whole_axis_slices(onnx_model: OnnxModel, say) -> None:
    """Slice entries that keep a whole axis (start 0, step 1, end at the int64 maximum) dropped.
    onnxslim merges slices into one over every axis; on the batch axis TVM's importer then
    gives the result the size min(2^63 - 1, batch), which its passes cannot specialize
    (Silero VAD's STFT failed to build)."""
    from onnx import helper, numpy_helper

    graph = onnx_model.model.graph
    inits = {t.name: t for t in graph.initializer}
    whole = 2**31 - 1  # exporters write INT32_MAX or INT64_MAX for "to the end"
    trimmed = 0
    for node in graph.node:
        if node.op_type != "Slice" or node.domain not in ("", "ai.onnx") or \
                not 3 <= len(node.input) <= 5:
            continue
        parts = [numpy_helper.to_array(inits[v]).reshape(-1).tolist() if v in inits else None
                 for v in node.input[1:]]
        if any(p is None for p in parts[:2]) or any(
                p is None and v for p, v in zip(parts[2:], node.input[3:])):
            continue
        starts, ends = parts[0], parts[1]
        axes = parts[2] if len(parts) > 2 and parts[2] is not None else list(range(len(starts)))
        steps = parts[3] if len(parts) > 3 and parts[3] is not None else [1] * len(starts)
        keep = [i for i in range(len(starts))
                if not (starts[i] == 0 and steps[i] == 1 and ends[i] >= whole)]
        if len(keep) == len(starts):
            continue
        trimmed += 1
        if not keep:
            node.CopyFrom(helper.make_node("Identity", [node.input[0]], list(node.output),
                                           name=node.name))
            continue
        names = []
        for what, values in (("starts", starts), ("ends", ends), ("axes", axes),
                             ("steps", steps)):
            name = f"{node.output[0]}__cw_{what}"
            graph.initializer.append(numpy_helper.from_array(
                np.array([values[i] for i in keep], np.int64), name))
            names.append(name)
        node.input[:] = [node.input[0], *names]
    if trimmed:
        used = {v for n in all_nodes(graph) for v in n.input}
        for t in [t for t in graph.initializer if t.name not in used]:
            graph.initializer.remove(t)
        say(f"whole-axis entries dropped from {trimmed} Slice node{'s' * (trimmed != 1)}")


def _c_unsafe(name: str) -> bool:
    """A name TVM's CUDA code generator would write into a kernel signature as it is and nvcc
    reject: with a '/' ("gpu_0/data_0", the ONNX Model Zoo's Caffe2 exports) or a leading digit
    ("474_quantized", onnxruntime's quantization tool)."""
    return "/" in name or name[:1].isdigit()


def _c_safe_names(onnx_model: OnnxModel, say) -> None:
    """Tensor names nvcc would reject (_c_unsafe) renamed. The manifest keeps the inputs' and
    outputs' own names (read before this step); weights are bound by position."""

    graph = onnx_model.model.graph
    kept = {o.name for o in graph.output}  # (outputs keep theirs: nothing passes them in)
    nodes = list(all_nodes(graph))  # an If's branches read the outer graph's names
    names = {v for n in nodes for v in (*n.input, *n.output)}
    names |= {i.name for i in graph.input} | {t.name for t in graph.initializer}
    taken = set(names)
    renamed = {}
    for name in sorted(names - kept):
        # only these: TVM makes other names (PyTorch's "layer1.0.weight") identifiers itself,
        # and those stay as users know them in messages and the manifest
        if not _c_unsafe(name):
            continue
        new = ("t" if name[:1].isdigit() else "") + name.replace("/", "_")
        while new in taken:
            new += "_"
        taken.add(new)
        renamed[name] = new
    if not renamed:
        return
    for n in nodes:
        n.input[:] = [renamed.get(v, v) for v in n.input]
        n.output[:] = [renamed.get(v, v) for v in n.output]
    for g in all_graphs(graph):
        for seq in (g.input, g.initializer, g.value_info, g.output if g is not graph else ()):
            for item in seq:
                item.name = renamed.get(item.name, item.name)
    say(f"{len(renamed)} tensor name(s) with a '/' or a leading digit renamed for TVM's CUDA "
        "code (e.g. "
        f"{next(iter(renamed))} → {next(iter(renamed.values()))})")


def _reporter(onnx_model: OnnxModel, progress):
    def say(text: str) -> None:
        onnx_model.notes.append(f"normalize: {text}")
        progress("note", {"text": text})
    return say


def split_weights(onnx_model: OnnxModel, page_size: int,
                  progress=lambda event, info: None) -> None:
    """Step 3, in place: tables larger than a weights page used in blocks that each fit one
    (cw/compile/weight_split.py)."""
    say = _reporter(onnx_model, progress)
    for note in weight_split.split(onnx_model.model, page_size, onnx_model.opset):
        say(note)


def convert_version(onnx_model: OnnxModel, progress=lambda event, info: None) -> None:
    """Step 1, in place: lift an old opset to a current one."""
    _convert_version(onnx_model, _reporter(onnx_model, progress))


def dequantize(onnx_model: OnnxModel, progress=lambda event, info: None) -> None:
    """Step 1b, in place, after the opset is lifted: quantized operators as float32 arithmetic
    on their integers (cw/compile/quantized.py)."""
    from cw.compile import quantized

    note = quantized.rewrite(onnx_model.model, onnx_model.opset)
    if note:
        onnx_model.quantized = True
        _reporter(onnx_model, progress)(note)


def slim(onnx_model: OnnxModel, progress=lambda event, info: None) -> None:
    """Step 2, in place, once the batch dimension is settled (folding shapes of a graph still
    fixed at batch 1 would bake that 1 into constants and defeat rebatching)."""
    say = _reporter(onnx_model, progress)
    _c_safe_names(onnx_model, say)
    _constant_tensors(onnx_model, say)
    _sums_as_adds(onnx_model, say)
    from cw.compile import decompose

    dropouts, masks = decompose.inference_dropouts(onnx_model.model)
    if dropouts:
        say(f"{dropouts} Dropout(s) passed through, as at inference"
            + (f"; {masks} Dropout mask(s) made all true" if masks else ""))
    slimming.fold(onnx_model, say)
    if any(n.op_type == "If" for n in onnx_model.model.graph.node):
        _static_branches(onnx_model, say)
        slimming.fold(onnx_model, say)  # the branches' shape tests and identities, folded
    _unrolled_recurrences(onnx_model, say)
    _decomposed(onnx_model, say)
    _sizes_as_scales(onnx_model, say)
    inlined = shape_constants.inline(onnx_model.model.graph)
    if inlined:
        say(f"{inlined} integer constant{'s' * (inlined != 1)} of shape arithmetic (on the "
            "batch) or of sequence splits and positions as Constant nodes, for TVM's importer "
            "to follow")
    _batch_first_outputs(onnx_model, say)
    _whole_axis_slices(onnx_model, say)
    _squares_as_products(onnx_model, say)
    _c_safe_names(onnx_model, say)  # names the rewrites above made from the graph's own
    # nodes that were inside branches were not checked when the file was read
    check_operators(onnx_model.path, onnx_model.model, final=True)
