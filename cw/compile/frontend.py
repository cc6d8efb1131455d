"""ONNX front end: import a checked model (onnx_load.py, normalize.py) into TVM Relax with a
symbolic batch.

The result is batch-size independent: `main(inputs..., weights...)` where the weights are the
model's initializers after weight-only math (BatchNorm statistics, transposes) has been lifted
out and evaluated once here, so one weights blob serves every batch size.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
from dataclasses import dataclass

import numpy as np
import onnx

from cw.compile import fp16_sums, norms, onnx_shapes, relax_rewrite
from cw.compile.onnx_load import OnnxModel
from cw.errors import ModelError
from cw.tvm_env import load_tvm


@dataclass
class ImportedModel:
    """The Relax module with `main` taking (inputs..., weights...), and the weights' values."""
    mod: object  # tvm.IRModule
    num_inputs: int
    weight_names: list[str]
    weight_sources: list[str]
    weights: list[np.ndarray]


def import_model(onnx_model: OnnxModel, conv_block: int = 0,
                 fp16: bool = False, conv_algo: str = "direct",
                 page_size: int | None = None, tf32: bool = False,
                 target: str = "cpu") -> ImportedModel:
    """Import into Relax and evaluate the weight-only computation once, on the CPU.
    `conv_block`: convolutions in NCHWc layouts with channel blocks up to this wide (CPU
    targets, cw/compile/cpu_conv.py: 8 for AVX2, 16 for AVX-512); 0 leaves them in NCHW.
    `conv_algo`: winograd2 / winograd4 for 3x3 convolutions (cw/compile/winograd.py), those
    whose transformed filter fits in a weights page of `page_size` bytes; cutlass for NHWC
    convolutions that CUTLASS runs (cw/compile/cutlass_conv.py).
    `fp16`: convolutions and matrix products in fp16 with fp32 sums (TVM's ToMixedPrecision).
    `tf32`: the CUTLASS convolutions will multiply in TF32 (only the note says so here).
    `target`: "cpu" or "cuda", for the form of a float16 model's float32 sums
    (cw/compile/fp16_sums.py)."""
    tvm = load_tvm()
    from tvm import relax
    from tvm.relax.frontend import onnx as relax_onnx

    failure = None
    printed = io.StringIO()
    # The importer prints the operator it failed on: that goes into our one line. The stderr
    # filter stays on until the exception (whose frames hold TVM's half-built module) is gone.
    pads = contextlib.nullcontext()
    if conv_block:
        from cw.compile import cpu_layouts

        pads = cpu_layouts.pads_as_operators()
    with contextlib.redirect_stdout(printed), _native_stderr_filtered(), _checked_lightly(), \
            pads:
        try:
            # Unsanitized names, so that messages and the manifest use the ONNX initializer names.
            mod = relax_onnx.from_onnx(onnx_model.model, keep_params_in_input=True,
                                       opset=onnx_model.opset or None, sanitize_input_names=False)
        except Exception as e:  # the importer raises many types; one line is what users need
            failure = (str(e).strip().splitlines() or [type(e).__name__])[-1]
    if failure is not None:
        # TVM's checks print the whole operator (`ir.Op(span=None, ..., support_level=10)`,
        # 400 characters of argument docs) where its name says enough
        failure = re.sub(r'ir\.Op\(span=.*?name="([\w.]+)".*?support_level=\d+\)', r"\1", failure)
        where = next((line.split(", with inputs")[0].removeprefix("Error converting ")
                      for line in printed.getvalue().splitlines()
                      if line.startswith("Error converting operator")), None)
        if onnx_model.changed_dims:
            hint = (f"--input-shape changed the model's own sizes "
                    f"({'; '.join(onnx_model.changed_dims)}): keep those the model was made for")
        else:
            hint = ("check that the model runs in onnxruntime; cw compile --verbose shows the "
                    "steps")
        raise ModelError(f"TVM could not import {onnx_model.path.name}"
                         f"{f' ({where})' if where else ''}: {failure}", hint)
    mod, params = relax.frontend.detach_params(mod)
    raw_weights = params.get("main", [])
    func = mod["main"]
    num_inputs = int(func.attrs["num_input"])
    raw_names = [str(v) for v in func.params[num_inputs:]]
    onnx_names = [t.name for t in onnx_model.model.graph.initializer]
    if len(onnx_names) == len(raw_names):  # the importer keeps initializer order
        raw_names = onnx_names
    # TVM holds the weights now; the graph stays for its names (outputs, producer). Dropping
    # the ONNX copy here takes its size off the peak of evaluating and paging the weights.
    onnx_model.model = onnx_shapes.without_weights(onnx_model.model)
    mod = relax.transform.DecomposeOpsForInference()(mod)
    mod, _ = relax_rewrite.bounded_takes(mod)
    # before any layout conversion (NCHWc on the CPU, NHWC for CUTLASS), which a stack of
    # scalars crashes
    mod, _ = relax_rewrite.stacked_reductions_as_chains(mod)
    mod, _ = relax_rewrite.scalar_stacks_as_concats(mod)
    mod, _ = norms.group_norms_decomposed(mod)
    # before the layouts: on the CPU the products are then float32 ones, blocked as ever
    mod, summed = fp16_sums.float32_sums(mod, cpu=target == "cpu")
    if summed:
        onnx_model.notes.append(
            f"float16: {summed} operator{'s' * (summed != 1)} that add up terms "
            "(convolutions, matrix products, reductions, normalizations) summed in float32, "
            "rounded to float16 after each" +
            (" (on float32 operands: the CPU has no float16 arithmetic)"
             if target == "cpu" else ""))
    if target == "cpu":  # after fp16_sums, which made a float16 model's LayerNorm a float32 one
        mod, _ = norms.layer_norms_about_the_mean(mod)
    if conv_algo == "cutlass":
        mod = _cutlass_layouts(mod, onnx_model, tf32)
    elif conv_algo != "direct":
        from cw.compile import winograd
        # before lifting, so that the filter transform is lifted (the bundle stores U);
        # before the layout conversion, which leaves the convolutions it does not take as they are
        mod, rewritten, too_large = winograd.rewrite(mod, conv_algo, page_size)
        m = winograd.ALGOS[conv_algo]
        onnx_model.notes.append(
            f"{conv_algo}: {rewritten} 3x3 convolutions as Winograd F({m}x{m}, 3x3)"
            + (f"; {too_large} left direct, their transformed filters larger than a weights "
               "page (a larger --page-size takes them)" if too_large else ""))
    if conv_block:
        from cw.compile import conv3d, cpu_conv, cpu_layouts

        mod, convs_1d = cpu_conv.convs_1d_as_2d(mod)
        if convs_1d:
            onnx_model.notes.append(f"{convs_1d} 1-D convolution{'s' * (convs_1d != 1)} as 2-D "
                                    "ones one row high")
        mod, transposed_3d = conv3d.transposed_convs_3d_as_convs(mod)
        mod, convs_3d = conv3d.convs_3d_as_2d(mod)
        if convs_3d:
            onnx_model.notes.append(
                f"{convs_3d} 3-D convolution{'s' * (convs_3d != 1)} as 2-D ones, the depth taps "
                "stacked as channels" + (f" ({transposed_3d} of them transposed ones, as "
                                         "convolutions and a depth-to-space)"
                                         if transposed_3d else ""))
        # the rest are blocked around them: with cw's NCHW schedule for them, ShuffleNet v1
        # ran ×0.76-0.97 of its time all in NCHW, a ResNeXt stage ×0.38-0.47 (stop 81; when
        # they ran in TVM's loops, the layout changes around them had cost more)
        grouped = cpu_conv.count_grouped_convs(mod, conv_block)
        if grouped:
            onnx_model.notes.append(
                f"{grouped} grouped convolution{'s' * (grouped != 1)} in plain NCHW with cw's "
                "NCHW schedule (not blocked: their groups' channels), the rest blocked")
    # (a model without 2-D convolutions has nothing to block)
    if conv_block and cpu_conv.count_convs_2d(mod):
        import functools

        # before lifting, so that the weights' relayout is lifted with the rest
        plain = mod
        try:
            mod, _ = cpu_conv.clip_as_relax_ops(mod)
            mod, _ = cpu_layouts.clips_as_min_max(mod)
            mod, _ = cpu_layouts.positive_squeeze_axes(mod)
            mod, _ = cpu_layouts.channel_reductions_reshaped(mod)
            mod, _ = cpu_layouts.channel_broadcasts_widened(mod)
            mod, _ = cpu_layouts.prelus_as_relu_and_min(mod)
            mod, transposed = cpu_conv.transposed_convs_as_convs(mod)
            mod, padded = cpu_conv.pad_conv_channels(mod, conv_block)
            layout = functools.partial(cpu_conv.conv_layout, widest=conv_block)
            mod = relax.transform.ConvertLayout({}, layout_cb=layout)(mod)
            mod, _ = cpu_layouts.keep_blocked(mod)
            if transposed:
                onnx_model.notes.append(
                    f"{transposed} transposed convolution{'s' * (transposed != 1)} as "
                    "convolutions and a depth-to-space")
            if padded:
                onnx_model.notes.append(
                    f"{padded} convolution{'s' * (padded != 1)} with output channels in no "
                    "block of 8: computed blocked on filters padded with zeros, the extra "
                    "channels dropped")
        except Exception as e:  # TVM's layout inference fails on some operators after a conv
            mod = plain  # (padded filters would only cost time in plain NCHW)
            first = (str(e).strip().splitlines() or [type(e).__name__])[-1]
            onnx_model.notes.append("convolutions kept in NCHW, without cw's NCHWc schedule: "
                                    f"TVM's layout conversion failed ({first[:120]})")
    if conv_block and not fp16:
        from cw.compile import cpu_matmul

        # after the layout conversion (a product by a packed matrix is a kernel call it cannot
        # see through), before lifting (the packing is lifted)
        mod, ragged = cpu_matmul.ragged_products_padded(mod, conv_block)
        if ragged:
            onnx_model.notes.append(
                f"{ragged} batched matrix product{'s' * (ragged != 1)} (attention's) with rows "
                "no tile of 4-8 divides, or columns no vector does (a ViT's 197 tokens), in "
                "whole tiles of rows and on columns padded with zeros")
        mod, packed = cpu_matmul.pack_weights(mod, conv_block)
        if packed:
            onnx_model.notes.append(f"{packed} weight matri{'ces' if packed != 1 else 'x'} "
                                    "stored in column panels for the CPU's matrix products")
    if fp16:
        # before lifting: the weights' casts to fp16 are then lifted with the rest, so the
        # bundle stores fp16 weights (half the bytes to LOAD) instead of casting on every run
        mod = relax.transform.ToMixedPrecision(out_dtype="float32")(mod)
        # its reductions and normalizations that follow a float16 operand stay in float16
        mod, _ = fp16_sums.float32_sums(mod, cpu=target == "cpu")
    # BatchNorm statistics and weight transposes depend on the weights only: lift them into a
    # function run once below instead of on every inference.
    mod = relax.transform.LiftTransformParams()(mod)
    if "main_transform_params" not in [gv.name_hint for gv in mod.functions]:
        return ImportedModel(mod, num_inputs, raw_names, raw_names,
                             [_contiguous(_as_numpy(w)) for w in raw_weights])
    transform = mod["main_transform_params"]
    sources = _trace_sources(transform, raw_names)
    # Keep the TIR functions the importer emitted (emit_te): both functions may call them.
    helpers = {gv: f for gv, f in mod.functions.items()
               if gv.name_hint not in ("main", "main_transform_params")}
    try:
        executable = tvm.compile(tvm.IRModule({**helpers, mod.get_global_var(
            "main_transform_params"): transform}), target=tvm.target.Target("llvm"))
        vm = relax.VirtualMachine(executable, tvm.cpu())
        lifted = vm["main_transform_params"](list(raw_weights))
        # what `lifted` passes through it shares; the rest, a second copy, goes now
        params = raw_weights = None
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[-1]
        raise ModelError(f"TVM could not precompute the weights of {onnx_model.path.name}: "
                         f"{first[:200]}", "run with CW_DEBUG=1 for the full TVM error") from None
    if not all(hasattr(t, "numpy") for t in lifted):  # a shape made from a weight's values
        raise ModelError(f"{onnx_model.path.name} computes a shape from the values of a tensor "
                         "TVM's importer did not fold", "run with --verbose to see the steps; "
                         "export the model with constant shapes")
    weights = [_contiguous(_as_numpy(t)) for t in lifted]
    main = mod["main"]
    names = _unique([str(v) for v in main.params[num_inputs:]])
    mod = tvm.IRModule({**helpers, mod.get_global_var("main"): main})
    return ImportedModel(mod, num_inputs, names, sources, weights)


def _cutlass_layouts(mod, onnx_model: OnnxModel, tf32: bool):
    """Convolutions CUTLASS takes in NHWC / OHWI (cw/compile/cutlass_conv.py), before lifting,
    so that the filters' relayout is lifted with the rest."""
    from tvm import relax

    from cw.compile import cpu_layouts, cutlass_conv

    from cw.compile.cpu_conv import count_convs_2d

    if not count_convs_2d(mod):
        return mod  # (nothing to convert, and a conversion that fails would say so)
    try:
        padded, widened = cutlass_conv.pad_channels(mod)
        # (a negative squeeze axis aborts the conversion here as on the CPU: Silero VAD's)
        padded, _ = cpu_layouts.positive_squeeze_axes(padded)
        converted = relax.transform.ConvertLayout({}, layout_cb=cutlass_conv.conv_layout)(padded)
    except Exception as e:  # TVM's layout inference fails on some operators after a conv
        first = (str(e).strip().splitlines() or [type(e).__name__])[-1]
        onnx_model.notes.append("cutlass: no convolution given to CUTLASS: TVM's layout "
                                f"conversion to NHWC failed ({first[:120]})")
        return mod
    taken, left = cutlass_conv.count_layouts(converted)
    if not taken and not left:
        return mod  # no convolution at all: nothing to say
    left_note = (f"; {left} left to TVM (grouped, or output channels not a multiple of "
                 f"{cutlass_conv.ALIGNMENT})" if left else "")
    onnx_model.notes.append(
        f"cutlass: {taken} convolution{'s' if taken != 1 else ''} as CUTLASS implicit GEMMs "
        + ("(TF32 tensor-core products, NHWC)" if tf32 else
           "(3xTF32 tensor-core products, fp32 accuracy, NHWC)")
        + (f", {widened} of them with zero input channels added up to a multiple of "
           f"{cutlass_conv.ALIGNMENT}" if widened else "") + left_note)
    return converted


@contextlib.contextmanager
def _checked_lightly():
    """TVM's importer runs onnx's checker first, for warnings only; the checker serializes the
    whole model (12 s for BERT-base). It checks the graph without its weights' bytes here."""
    checks = onnx.checker.check_model

    def check_model(model, *args, **kwargs):
        if isinstance(model, onnx.ModelProto):
            model = onnx_shapes.without_weights(model)
        return checks(model, *args, **kwargs)

    onnx.checker.check_model = check_model
    try:
        yield
    finally:
        onnx.checker.check_model = checks


@contextlib.contextmanager
def _native_stderr_filtered():
    """Pass on TVM's native stderr except its destructor's warning about what a failed import
    left half-built ("BlockBuilder destroyed with remaining blocks"): the error line says it.
    CW_DEBUG=1 leaves stderr alone (a crash inside the importer would lose the held text)."""
    if os.environ.get("CW_DEBUG"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().decode(errors="replace").splitlines(True)
                    if "BlockBuilder destroyed" not in line]
            sys.stderr.write("".join(kept))
            sys.stderr.flush()


def _as_numpy(tensor) -> np.ndarray:
    """A CPU tensor of TVM's as numpy, sharing its memory: .numpy() copies, which for a
    model's hundreds of MiB of weights takes seconds (fresh pages)."""
    try:
        return np.from_dlpack(tensor)
    except (TypeError, BufferError, RuntimeError):  # a dtype numpy's DLPack import lacks
        return tensor.numpy()


def _contiguous(a: np.ndarray) -> np.ndarray:
    """C-contiguous, keeping 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    return a if a.flags.c_contiguous else a.copy(order="C")


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in names:
        count = seen.get(name, 0)
        seen[name] = count + 1
        out.append(name if count == 0 else f"{name}.{count}")
    return out


def _trace_sources(transform, raw_names: list[str]) -> list[str]:
    """For each output of the lifted weight transform, the original weights it derives from,
    so that messages and the manifest can name a transformed tensor."""
    from tvm import relax

    bindings = {}
    for block in transform.body.blocks:
        for binding in block.bindings:
            bindings[binding.var] = binding.value
    tuple_param = transform.params[0]
    result = transform.body.body
    if isinstance(result, relax.Var) and result.same_as(tuple_param):
        return list(raw_names)  # nothing was transformed
    if isinstance(result, relax.Var) and result in bindings:
        result = bindings[result]
    fields = list(result.fields) if isinstance(result, relax.Tuple) else [result]

    def sources_of(expr) -> set[int]:
        found: set[int] = set()
        stack = [expr]
        seen = set()
        while stack:
            e = stack.pop()
            if isinstance(e, relax.TupleGetItem) and e.tuple_value.same_as(tuple_param):
                found.add(int(e.index))
                continue
            for var in relax.analysis.free_vars(e) if not isinstance(e, relax.Var) else [e]:
                if var in seen or var.same_as(tuple_param):
                    continue
                seen.add(var)
                if var in bindings:
                    stack.append(bindings[var])
        return found

    names = []
    for f in fields:
        idx = sorted(sources_of(f))
        names.append("+".join(raw_names[i] for i in idx if i < len(raw_names)) or "(computed)")
    return names
