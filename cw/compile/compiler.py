"""ONNX -> bundle: import once, pack the weights into pages, compile one kernel library per batch
size, record the memory plan of each, and write everything atomically."""

from __future__ import annotations

import collections
import functools
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np

import cw
from cw.bundle import (SCHEMA_VERSION, TENSOR_ALIGNMENT, WEIGHTS_FILE, BatchKernel, BundleWriter,
                       FixedInput, Manifest, Source, Target, TensorSpec, WeightPage, Weights,
                       WeightTensor, model_name_from)
from cw.compile import (cpu_conv, cpu_kernels, cuda_conv, cutlass_build, cutlass_conv,
                        cutlass_plans, default_schedules, fast_math, fast_tvmscript, frontend,
                        normalize, onnx_load, onnx_shapes, paging, rebatch, relax_rewrite,
                        targets, tuning)
from cw.compile.config import (  # noqa: F401 (compile's constants, importable from here too)
    CONV_ALGOS, CUTLASS_MIN_SM, DEFAULT_BATCH_SIZES, DEFAULT_CONV_ALGO, DEFAULT_PAGE_SIZE,
    LARGE_KERNEL_LIBRARY_BYTES, MAX_AUTO_JOBS, PRECISIONS, CompileConfig)
from cw.compile.libcheck import (MAX_KERNEL_CONSTANT_BYTES, check_data_sections,
                                 check_device_binary)
from cw.compile.memory import memory_plan
from cw.errors import DeviceError, ModelError, UsageError
from cw.tvm_env import cuda_codegen_problem, load_tvm

Progress = Callable[[str, dict], None]


def _no_progress(event: str, info: dict) -> None:
    pass


def tvm_target(config: CompileConfig):
    return targets.tvm_target(config.target, config.resolved_arch)


def bind_batch(mod, onnx_model, batch: int):
    from tvm import relax

    if onnx_model.fixed_batch is None:
        mod = relax.transform.BindSymbolicVars({onnx_load.BATCH_VAR: batch})(mod)
        # TIR kernels emitted before this (the importer's emit_te, cw's Winograd transforms)
        # still have a symbolic batch in their buffers; FuseTIR rejects a fused kernel whose
        # buffers disagree with the now static Relax shapes ("Inconsistent buffers")
        return relax.transform.SpecializePrimFuncBasedOnCallSite()(mod)
    return mod


def choose_target(config: CompileConfig, onnx_model, imported, batch_sizes):
    """(arch, tuning sources, database). TVM's untuned CPU loops ran about 1.6x slower when LLVM
    could use AVX2 (measured on resnet18 and small_cnn, docs/benchmarks.md), while tuned
    schedules and cw's own (NCHWc convolutions, matrix products, elementwise passes, rows in
    vectors) need it; so without an explicit --arch a CPU bundle gets the host's x86-64 level
    where it has convolutions or matrix products cw schedules or where cw's schedules and
    records together take at least half its kernels, and plain x86-64 code otherwise."""
    arch = config.resolved_arch
    sources = tuning.sources_for(targets.target_key(config.target, arch), config.tune_dbs,
                                 config.use_committed_records)
    database = tuning.load_database(sources)
    if config.target != "cpu" or config.arch is not None or arch in (None, targets.GENERIC_CPU):
        return arch, sources, database
    if cpu_conv.count_blocked_convs(imported.mod):
        # convolutions cw blocked are ones it schedules: decided without legalizing every batch
        # size to count them (densenet121 at batch sizes 1 and 4: 8 of its 50 s)
        return arch, sources, database
    tuned_total = scheduled_total = total = 0
    target = targets.tvm_target(config.target, arch)
    for batch in batch_sizes:
        mod = bind_batch(imported.mod, onnx_model, batch)
        try:
            fused, _ = legalized(mod, target)
        except Exception:  # FuseTIR fails on some graphs; _lower then compiles unfused
            fused, _ = legalized(mod, target, fuse=False)
        with target:
            fused, tuned, n = tuning.apply_database(fused, database)
            fused, convs = cpu_conv.schedule_convs(fused)
            # cw's convolutions dominate a CNN's time and need AVX2 (mobilenet_v2 at batch 1:
            # 29 ms as x86-64-v3, 38 ms as plain x86-64 with 60 of its 138 kernels scheduled);
            # so do its matrix products a transformer's time (the tiny transformer: x86-64-v3
            # 1.6-1.9x faster). One batch size with either decides (the others not legalized)
            if convs or cpu_kernels.count_matmuls(fused):
                return arch, sources, database
            # cw's elementwise and row schedules are written for vectors of 8 and 16: as plain
            # x86-64 code a softmax over 12 x 128 rows of 128 took 0.63-0.95 ms, as AVX-512
            # 0.28-0.46
            scheduled_total += cpu_kernels.schedule_kernels(fused)[1]
        tuned_total, total = tuned_total + tuned, total + n
    if total and (tuned_total + scheduled_total) * 2 >= total:
        return arch, sources, database
    generic = tuning.sources_for(targets.target_key("cpu", targets.GENERIC_CPU), config.tune_dbs,
                                 config.use_committed_records)
    onnx_model.notes.append(f"CPU code for {targets.GENERIC_CPU}: cw's schedules and tuning "
                            f"records cover {tuned_total + scheduled_total} of {total} kernels "
                            "and none is a convolution or matrix product cw schedules; TVM's "
                            "untuned kernels run faster without AVX2 (tune "
                            f"with `cw tune`, or force --arch {arch})")
    return targets.GENERIC_CPU, generic, tuning.load_database(generic)


def _tensor_specs(struct_info, batch_size: int, names: list[str],
                  index_limits: dict[str, int] | None = None,
                  source_batch_axes: dict[str, int] | None = None) -> list[TensorSpec]:
    import tvm
    from tvm import relax

    fields = list(struct_info.fields) if isinstance(struct_info, relax.TupleType) else [struct_info]
    specs = []
    for i, ty in enumerate(fields):
        dims = getattr(getattr(ty, "shape", None), "values", None)
        if dims is None or not all(isinstance(d, tvm.tirx.IntImm) for d in dims):
            raise ModelError(f"output {i}'s shape is not known before the model runs (it "
                             "depends on the input values); cw schedules only static DNNs",
                             "export the model so that its output sizes follow from the input "
                             "shapes")
        shape = [int(d) for d in dims]
        dtype = plain(ty.dtype)
        itemsize = _itemsize(dtype)
        sample = shape[1:]
        sample_bytes = itemsize
        for d in sample:
            sample_bytes *= d
        name = plain(names[i]) if i < len(names) else f"output{i}"
        if not shape or shape[0] != batch_size:
            raise ModelError(f"output {i} ('{name}') has " +
                             (f"shape {shape}" if shape else "no dimension (a scalar)") +
                             f" at batch size {batch_size}: it does not follow the batch (a "
                             "constant, or computed across the samples)",
                             "cw serves outputs batched along the first axis: export the model "
                             "without that output, or compute it outside")
        specs.append(TensorSpec(name, dtype, sample, sample_bytes,
                                (index_limits or {}).get(name, 0),
                                (source_batch_axes or {}).get(name, 0)))
    return specs


def _check_output_shapes(name: str, outs: list[TensorSpec],
                         inferred: list[list[int | None]] | None, actual) -> None:
    """Refuse a compile whose outputs are not the shape ONNX says they are: the sign of an
    operator TVM imported as another computation (it resized an NHWC image's W where the
    model resized H and W). An axis ONNX leaves unknown is not checked. ONNX's inference has
    bugs of its own (a Split into uneven parts): `actual()`, the sample shapes onnxruntime
    gives (empty where it cannot run the file), settles a difference."""
    shapes = None
    for i, (spec, dims) in enumerate(zip(outs, inferred or ())):
        if dims is None or len(dims) != len(spec.sample_shape) + 1:
            continue
        if any(d is not None and d != got for d, got in zip(dims[1:], spec.sample_shape)):
            shapes = actual() if shapes is None else shapes
            if shapes and i < len(shapes) and shapes[i] == list(spec.sample_shape):
                continue
            expected = ", ".join("?" if d is None else str(d) for d in dims[1:])
            raise ModelError(
                f"{name}: output '{spec.name}' comes out of TVM's import with sample shape "
                f"{list(spec.sample_shape)} where ONNX's shape inference gives [{expected}]: an "
                "operator was imported as another computation, and cw refuses to serve it",
                "please report it with the model (cw compile --verbose names the steps); "
                "the model's own export may avoid the operator's form")


def _onnxruntime_shapes(onnx_path, ins: list[TensorSpec], batch: int) -> list:
    """The sample shapes of the file's outputs in onnxruntime, on zeros of `ins`' shapes at
    `batch`; [] where it cannot run the file (inputs fixed at compile time, say)."""
    from cw.verify import onnx_reference

    try:
        outputs = onnx_reference(onnx_path, [np.zeros((batch, *s.sample_shape), s.dtype)
                                             for s in ins])
    except Exception:  # (whatever the reason, the difference stands)
        return []
    return [list(o.shape[1:]) for o in outputs]


def plain(value) -> str:
    """TVM hands out str subclasses that msgspec will not encode."""
    return "".join([str(value)])


def _itemsize(dtype: str) -> int:
    import numpy as np
    return np.dtype(dtype).itemsize


def _pipeline(target):
    if target.kind.name == "cuda":
        from tvm.relax.backend.cuda import pipeline
    else:
        from tvm.relax.backend.cpu_generic import pipeline
    return pipeline


def _pass_name(p) -> str:
    return getattr(getattr(p, "info", None), "name", "") or type(p).__name__


def legalized(mod, target, fuse: bool = True, conv_split: bool = True, cutlass: bool = False,
              tf32: bool = False, cutlass_plans=None):
    """The graph lowered to fused TIR kernels, before any default schedule: exactly the kernels
    `cw tune` extracts and a tuning database is matched against. `conv_split`: on CUDA, split
    the reduction of convolutions too small to fill the GPU (cuda_conv). `cutlass`: the NHWC
    convolutions the front end prepared become calls of CUTLASS kernels (cutlass_conv), which
    are not TIR kernels (the TF32 ones with `tf32`), with the tiles `cutlass_plans` measured.
    Returns (module, the remaining legalization passes)."""
    from tvm import transform

    from tvm import relax

    if cutlass:
        mod, _ = cutlass_conv.offload(mod, cuda_conv.sm_count(str(target.attrs.get("arch", ""))),
                                      tf32, cutlass_plans)
    pipeline = _pipeline(target)
    passes = pipeline.library_dispatch_passes(target) + pipeline.legalize_passes(target)
    names = [_pass_name(p) for p in passes]
    custom = {"relax.layout_transform": relax_rewrite.legalize_layout_transform}
    if target.kind.name == "llvm":
        custom |= {"relax.nn.conv2d": cpu_conv.legalize_conv2d, **fast_math.legalizers(),
                   "relax.layout_transform": functools.partial(
                       relax_rewrite.legalize_layout_transform, gather=True)}
    if target.kind.name == "cuda" and conv_split:
        sms = cuda_conv.sm_count(str(target.attrs.get("arch", "")))
        custom["relax.nn.conv2d"] = cuda_conv.legalizer(target, sms)
    if "LegalizeOps" in names:
        passes[names.index("LegalizeOps")] = relax.transform.LegalizeOps(custom)
    split = names.index("ApplyDefaultSchedule") if "ApplyDefaultSchedule" in names else len(passes)
    head, rest = passes[:split], passes[split:]
    if not fuse:
        head = [p for p in head if _pass_name(p) not in ("FuseOps", "FuseTIR")]
    with target:
        return transform.Sequential(head)(mod), default_schedules.replacing(rest)


def _lower(mod, target, fuse: bool = True, database=None, conv_split: bool = True,
           cutlass: bool = False, tf32: bool = False, cutlass_plans=None, notes=None):
    """The target's default pipeline with the tuning database applied before the default
    schedules, stopped after static memory planning so that the plan can be read, then finished.
    Returns (lowered module, memory plan, (kernels tuned, kernels given cw's convolution
    schedule, convolutions split, convolutions given to CUTLASS, of those with a measured
    tile), kernels). `fuse=False` drops operator fusion, the fallback where TVM's FuseTIR
    fails on a graph. `notes` gets a line per default schedule rule that failed on a kernel
    (default_schedules)."""
    from tvm import relax, transform

    pipeline = _pipeline(target)
    finalize = pipeline.finalize_passes(target)
    if _pass_name(finalize[0]) != "StaticPlanBlockMemory":
        raise RuntimeError("unexpected TVM pipeline: memory planning is not the first "
                           "finalization pass")
    # dlight's tensor-core rule (fp16 on CUDA) imports tvm.s_tir.tensor_intrin on first use:
    # 70-90 s of TVMScript parsing here without the fast stack (resnet18 fp16 at batch 1)
    with fast_tvmscript.fast_inspect_stack(), target:
        mod, rest = legalized(mod, target, fuse, conv_split, cutlass, tf32, cutlass_plans)
        split = cuda_conv.count_split(mod) if target.kind.name == "cuda" else 0
        offloaded = cutlass_conv.count_offloaded(mod)
        measured = cutlass_conv.count_measured(mod, cutlass_plans)
        mod, tuned, total = tuning.apply_database(mod, database)
        if target.kind.name == "llvm":
            mod, convs = cpu_conv.schedule_convs(mod)
            mod, _ = cpu_kernels.schedule_kernels(mod)
        else:
            convs = 0
        planned = transform.Sequential(rest + pipeline.dataflow_lower_passes(target)
                                       + [relax.transform.StaticPlanBlockMemory()])(mod)
        plan = memory_plan(planned["main"])
        lowered = transform.Sequential(finalize[1:])(planned)
    if notes is not None:  # once, not once per batch size (the kernels keep their names)
        notes += [n for n in default_schedules.notes(rest) if n not in notes]
    return lowered, plan, (tuned, convs, split, offloaded, measured), total


def _llvm_verification_failed(e: Exception, target) -> bool:
    """Whether building for a CPU failed in LLVM's check of its own output: TVM 0.27's LLVM
    at its default level 3 vectorizes some small loop nests into code that fails it
    ("Instruction does not dominate all uses!": a Gemm of 8 by 10 at batch 4 for plain
    x86-64); level 2 builds them."""
    return target.kind.name == "llvm" and "LLVM module verification failed" in str(e)


def _llvm_opt_level(target, level: int):
    """`target` with LLVM's optimization level set (same CPU, same instructions)."""
    import tvm

    return tvm.target.Target({**target.export(), "opt-level": level})


def _failed_at(name: str, batch: int, e: Exception) -> ModelError:
    first = (str(e).strip().splitlines() or [type(e).__name__])[-1]
    return ModelError(f"TVM failed to compile {name} at batch size {batch}: {first}",
                      "run with CW_DEBUG=1 for the full TVM error")


def _check_kernel_constants(mod, name: str) -> None:
    attrs = dict(mod.attrs) if mod.attrs else {}
    for key, value in dict(attrs.get("const_name_to_constant", {})).items():
        nbytes = value.numpy().nbytes
        if nbytes > MAX_KERNEL_CONSTANT_BYTES:
            raise ModelError(f"a constant of {nbytes} bytes ('{key}') would be compiled into the "
                             f"kernel library of {name}",
                             "weights must be initializers so they go to the weights blob")


def import_graph(onnx_path, config: CompileConfig, progress: Progress = _no_progress):
    """ONNX file -> normalized graph imported into Relax, and the batch sizes it can be compiled
    for. Shared by `cw compile` and `cw tune` so that both see the very same kernels."""
    load_tvm()
    progress("stage", {"text": "reading ONNX"})
    onnx_model = onnx_load.load_onnx(onnx_path, config.input_shapes, config.input_values)
    progress("stage", {"text": "normalizing the graph"})
    normalize.convert_version(onnx_model, progress)
    normalize.dequantize(onnx_model, progress)
    if onnx_model.quantized and config.precision == "fp16":
        # fp16 holds the integers but not the requantization's multipliers: other integers
        raise UsageError(f"--precision fp16 on {Path(onnx_path).name}, a quantized model: its "
                         "integers would not be onnxruntime's",
                         "compile it with --precision fp32 or tf32 (its integers are exact in "
                         "both)")
    batch_sizes = tuple(config.batch_sizes)
    why = ""
    if onnx_model.fixed_batch == 1 and max(batch_sizes) > 1:
        progress("stage", {"text": "checking whether the batch can be made symbolic"})
        rebatched, why = rebatch.try_rebatch(onnx_model)
        if rebatched:
            onnx_model.notes.append(why)
    if onnx_model.fixed_batch is not None:
        fixed = onnx_model.fixed_batch
        if set(batch_sizes) - {fixed}:
            reason = f" ({why})" if why else ""
            if config.batch_sizes != DEFAULT_BATCH_SIZES:
                raise UsageError(f"{Path(onnx_path).name} has its batch fixed at {fixed} and "
                                 f"cannot be rebatched{reason}; cannot compile batch sizes "
                                 f"{','.join(map(str, batch_sizes))}",
                                 f"use --batch-sizes {fixed} or export the model with a "
                                 "symbolic batch dimension")
        onnx_model.notes.append(f"batch fixed at {fixed} in the graph: only batch size "
                                f"{fixed} compiled" + (f"; {why}" if why else ""))
        batch_sizes = (fixed,)
    progress("stage", {"text": "folding constants and shapes (onnxslim)"})
    normalize.slim(onnx_model, progress)
    mixing = (rebatch.batch_mixing(onnx_model.model, onnx_model.quantized)
              or onnx_model.rewritten_mixing) if max(batch_sizes) > 1 else ""
    if mixing:
        if config.batch_sizes != DEFAULT_BATCH_SIZES:
            raise UsageError(f"{Path(onnx_path).name}: {mixing}; cannot compile batch sizes "
                             f"{','.join(map(str, batch_sizes))}",
                             "use --batch-sizes 1 (cw batches independent requests)")
        onnx_model.notes.append(f"{mixing}: only batch size 1 compiled")
        batch_sizes = (1,)
    # by position: normalization may have renamed an input, the manifest keeps its own name
    limits = onnx_load.index_limits(onnx_model.model)
    onnx_model.index_limits = {name: limits[graph_input.name] for (name, _, _), graph_input
                               in zip(onnx_model.inputs, onnx_model.model.graph.input)
                               if graph_input.name in limits}
    # after the limits, which are the whole tables' rows
    normalize.split_weights(onnx_model, config.page_size, progress)
    conv_block = 0
    if config.target == "cpu" and config.conv_layout == "nchwc":
        conv_block = cpu_conv.widest_block(targets.tvm_target("cpu", config.resolved_arch))
    progress("stage", {"text": "importing into TVM Relax"})
    imported = frontend.import_model(onnx_model, conv_block=conv_block,
                                     fp16=config.precision == "fp16", conv_algo=config.conv_algo,
                                     page_size=config.page_size,
                                     tf32=config.precision == "tf32", target=config.target)
    if config.conv_algo != "direct" and config.target == "cpu":
        onnx_model.notes.append(f"{config.conv_algo} on the CPU: Winograd's kernels get TVM's "
                                "default loops, far slower than cw's NCHWc convolutions (it is "
                                "meant for CUDA)")
    if config.precision == "tf32":
        onnx_model.notes.append("precision tf32: the convolutions CUTLASS takes multiply "
                                "operands rounded to TF32 (10-bit mantissa) on tensor cores "
                                "and sum in fp32; everything else computes in fp32")
    if config.precision == "fp16":
        onnx_model.notes.append("precision fp16: convolutions and matrix products take fp16 "
                                "inputs and weights and sum in fp32; inputs and outputs stay "
                                "fp32" + ("; slow on the CPU, which has no fp16 arithmetic"
                                          if config.target == "cpu" else ""))
    return onnx_model, imported, batch_sizes


def _write_weights(writer: BundleWriter, imported, page_size: int) -> Weights:
    """Pack the weights into pages, write them as the bundle's weights file, and describe
    where each tensor lies."""
    sizes = [w.nbytes for w in imported.weights]
    layout = paging.pack(imported.weight_sources, sizes, page_size)
    pages, offset = [], 0
    with open(writer.path(WEIGHTS_FILE), "wb") as f:
        for page in range(layout.num_pages):
            data = paging.page_bytes(layout, imported.weights, page)
            # every page starts aligned in the file too, so host views are aligned
            padding = -len(data) % TENSOR_ALIGNMENT
            f.write(data)
            f.write(b"\0" * padding)
            pages.append(WeightPage(page, offset, len(data)))
            offset += len(data) + padding
    tensors = [WeightTensor(plain(n), w.dtype.name, [int(d) for d in w.shape], w.nbytes,
                            p.page, p.offset, "" if src == n else plain(src))
               for n, src, w, p in zip(imported.weight_names, imported.weight_sources,
                                       imported.weights, layout.placements)]
    return Weights(WEIGHTS_FILE, sum(sizes), page_size, pages, tensors)


def _lower_batch(mod, target, name: str, batch: int, notes: list[str], **options):
    """`_lower` one batch size's module, unfused where TVM's fusion fails (with a note); a
    failure names the model and the batch size."""
    try:
        try:
            lowered = _lower(mod, target, notes=notes, **options)
        except Exception as e:
            # TVM 0.27's FuseTIR rejects some graphs ("Inconsistent buffers ... mapped to the
            # same relax var": MobileNetV2 on CUDA until bind_batch specialized its kernels);
            # unfused kernels are correct.
            lowered = _lower(mod, target, fuse=False, notes=notes, **options)
            notes.append(f"batch {batch}: operator fusion failed in TVM ("
                         f"{(str(e).strip().splitlines() or ['?'])[-1][:120]}); "
                         "compiled without fusion")
        _check_kernel_constants(lowered[0], name)
    except ModelError:
        raise
    except Exception as e:
        raise _failed_at(name, batch, e) from e
    return lowered


def compile_model(onnx_path: str | os.PathLike, out: str | os.PathLike,
                  config: CompileConfig = CompileConfig(),
                  progress: Progress = _no_progress) -> Manifest:
    """Compile an ONNX model into a bundle directory at `out`; returns its manifest. Batch
    sizes are lowered one at a time on the calling thread, and their kernel libraries built on
    up to `config.build_jobs()` threads; `progress` is called on the calling thread only, each
    batch size's events in batch order."""
    if config.target == "cuda":
        problem = cuda_codegen_problem()
        if problem:
            raise DeviceError(f"cannot compile CUDA kernels on this machine: {problem}",
                              "use --target cpu, or install the CUDA 13 toolkit")
        targets.check_cuda_arch(config.resolved_arch)  # before minutes of importing
    tvm = load_tvm()
    from tvm import relax

    writer = BundleWriter(out, force=config.force)  # fails early if out exists
    with writer:
        onnx_model, imported, batch_sizes = import_graph(onnx_path, config, progress)
        name = config.name or model_name_from(Path(onnx_path).stem)

        progress("stage", {"text": "packing weights into pages"})
        weights = _write_weights(writer, imported, config.page_size)

        progress("stage", {"text": "looking up tuning records"})
        arch, sources, database = choose_target(config, onnx_model, imported, batch_sizes)
        target = targets.tvm_target(config.target, arch)
        input_names = [n for n, _, _ in onnx_model.inputs]
        output_names = [o.name for o in onnx_model.model.graph.output]
        kernels, inputs_spec, outputs_spec = [], None, None
        inferred_outputs = onnx_shapes.output_dims(onnx_model.model)
        split_convs = config.conv_split == "auto"
        tf32 = config.precision == "tf32"
        # a model without a convolution CUTLASS takes gets no CUTLASS library linked in
        cutlass = config.conv_algo == "cutlass" and \
            cutlass_conv.count_layouts(imported.mod)[0] > 0
        plans, calls = None, [0, 0]  # CUTLASS calls over the batch sizes, of them measured
        if cutlass:
            plans = cutlass_plans.load(targets.target_key(config.target, arch), config.tune_dbs,
                                       config.use_committed_records)
            progress("stage", {"text": "compiling the CUTLASS convolutions (nvcc, cached)"})
            cutlass_inputs = cutlass_build.link_inputs(cutlass_build.build_object(arch, tf32))

        def build(batch, lowered, plan, scheduled, total, ins, outs, lower_s) -> BatchKernel:
            """One batch size's kernel library, on a thread of the pool below: TVM's codegen,
            LLVM and nvcc run outside the GIL, so builds overlap one another and the next
            batch size's lowering (×1.8 on 2 cores)."""
            start = time.perf_counter()
            try:
                with target:  # nvcc/NVRTC read the arch from the current target (per thread)
                    executable = tvm.compile(lowered, target=target, relax_pipeline=None)
            except Exception as e:
                if not _llvm_verification_failed(e, target):
                    raise _failed_at(name, batch, e) from e
                try:
                    executable = tvm.compile(lowered, target=_llvm_opt_level(target, 2),
                                             relax_pipeline=None)
                except Exception as again:
                    raise _failed_at(name, batch, e) from again
                onnx_model.notes.append(
                    f"batch {batch}: LLVM's level-3 optimization gave invalid code (TVM 0.27's "
                    "LLVM); built at level 2, the same instructions")
            kernel_file = f"kernels/batch{batch}.so"
            # a new list each time: export_library appends its own files to `addons`
            executable.export_library(str(writer.path(kernel_file)),
                                      addons=list(cutlass_inputs) if cutlass else None)
            if config.target == "cuda":
                check_device_binary(writer.path(kernel_file), name, kernels=total > 0)
                data_bytes = 0
            else:
                data_bytes = check_data_sections(writer.path(kernel_file), name, batch)
            return BatchKernel(
                batch_size=batch, kernel_file=kernel_file,
                kernel_bytes=writer.path(kernel_file).stat().st_size,
                workspace_bytes=plan.workspace_bytes,
                input_bytes=sum(s.sample_bytes for s in ins) * batch,
                output_bytes=sum(s.sample_bytes for s in outs) * batch,
                storage_blocks=plan.storage_blocks, unplanned=plan.unplanned,
                compile_seconds=round(lower_s + time.perf_counter() - start, 3),
                data_bytes=data_bytes,
                kernels_tuned=scheduled[0], kernels_conv_scheduled=scheduled[1],
                kernels_conv_split=scheduled[2], kernels_total=total)

        def built(job) -> None:
            nonlocal calls, inputs_spec, outputs_spec
            future, scheduled, ins, outs = job
            kernel = future.result()
            batch = kernel.batch_size
            if config.target == "cuda" and kernel.kernel_bytes > LARGE_KERNEL_LIBRARY_BYTES:
                # Weights computed in the graph (ConstantOfShape, Constant nodes) get folded
                # into the kernels, where the relax-level constant check does not see them.
                onnx_model.notes.append(
                    f"batch {batch}: kernel library is {kernel.kernel_bytes / 2**20:.1f} MiB; "
                    "weights computed inside the graph were probably compiled into it")
            kernels.append(kernel)
            calls = [calls[0] + scheduled[3], calls[1] + scheduled[4]]
            inputs_spec, outputs_spec = ins, outs
            progress("batch_done", {"kernel": kernel})

        jobs = config.build_jobs()
        building: collections.deque = collections.deque()  # in batch order
        pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="cw-compile")
        try:
            for batch in batch_sizes:
                # at most `jobs` lowered modules held at once: their memory adds up
                while len(building) >= jobs:
                    built(building.popleft())
                progress("batch_start", {"batch_size": batch, "total": len(batch_sizes)})
                start = time.perf_counter()
                mod = bind_batch(imported.mod, onnx_model, batch)
                func = mod["main"]
                ins = _tensor_specs(
                    relax.TupleType([p.ty for p in func.params[:imported.num_inputs]]), batch,
                    input_names, onnx_model.index_limits, onnx_model.source_batch_axes)
                outs = _tensor_specs(func.ret_ty, batch, output_names,
                                     source_batch_axes=onnx_model.source_batch_axes)
                _check_output_shapes(name, outs, inferred_outputs,
                                     functools.partial(_onnxruntime_shapes, onnx_path, ins, batch))
                lowered, plan, scheduled, total = _lower_batch(
                    mod, target, name, batch, onnx_model.notes, database=database,
                    conv_split=split_convs, cutlass=cutlass, tf32=tf32, cutlass_plans=plans)
                building.append((pool.submit(build, batch, lowered, plan, scheduled, total, ins,
                                             outs, time.perf_counter() - start),
                                 scheduled, ins, outs))
            while building:
                built(building.popleft())
        finally:
            # builds under way finish before the bundle's folder is kept or removed
            pool.shutdown(wait=True, cancel_futures=True)

        if cutlass and calls[0]:
            onnx_model.notes.append(
                f"cutlass: {calls[1]} of {calls[0]} convolution calls (over the batch sizes) "
                f"take the tile and split measured in {plans.describe()}" if plans.files else
                "cutlass: tiles and splits guessed from the GPU's SM count (no measured plans "
                f"for {targets.target_key(config.target, arch)}: bench/cutlass_convs.py)")
        progress("stage", {"text": "writing bundle"})
        manifest = Manifest(
            schema_version=SCHEMA_VERSION, name=name,
            source=Source(Path(onnx_path).name, onnx_model.sha256, onnx_model.opset,
                          onnx_model.model.producer_name),
            cw_version=cw.__version__, tvm_version=plain(tvm.__version__),
            target=Target(config.target, arch, plain(target),
                          tuning=sources.describe() if database is not None else "",
                          precision=config.precision),
            inputs=inputs_spec, outputs=outputs_spec, batch_sizes=list(batch_sizes),
            kernels=kernels, weights=weights, files=writer.checksums(),
            notes=onnx_model.notes,
            fixed_inputs=[FixedInput(n, v.dtype.name, list(v.shape), v.reshape(-1).tolist())
                          for n, v in onnx_model.fixed_inputs.items()])
        writer.commit(manifest)
    return manifest


