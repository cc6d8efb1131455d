"""`cw compile`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from cw.cli.app import app, console, print_json, progress_bar
from cw.compile.compiler import (DEFAULT_BATCH_SIZES, DEFAULT_CONV_ALGO, CompileConfig,
                                 MAX_AUTO_JOBS,
                                 compile_model)
from cw.units import format_bytes, parse_batch_sizes, parse_size

_DEFAULTS = CompileConfig()


@app.command("compile")
def compile_cmd(
    model: Path = typer.Argument(..., help="ONNX model file."),
    output: Path = typer.Option(..., "-o", "--output", help="Bundle directory to write."),
    target: str = typer.Option(_DEFAULTS.target, "--target", help="cpu or cuda."),
    arch: str = typer.Option(None, "--arch",
                             help="CUDA arch (default sm_90); for cpu an LLVM -mcpu (default: "
                                  "the host's x86-64 level; x86-64-v3 for bundles that "
                                  "AVX2-only machines can run)."),
    batch_sizes: str = typer.Option(",".join(map(str, DEFAULT_BATCH_SIZES)), "--batch-sizes",
                                    help="Comma-separated batch sizes within 1..16."),
    page_size: str = typer.Option("16MiB", "--page-size", help="Weights page size."),
    name: str = typer.Option(None, "--name", help="Model name (default: the file's stem)."),
    input_shape: list[str] = typer.Option(None, "--input-shape",
                                          help="NAME=DIMS, N for the batch (repeatable)."),
    input_value: list[str] = typer.Option(None, "--input-value",
                                          help="NAME=VALUE: an input fixed at compile time, "
                                               "e.g. an audio model's sr=16000 (repeatable)."),
    tune_db: list[Path] = typer.Option(None, "--tune-db",
                                       help="Tuning database from `cw tune`, or a directory "
                                            "with measured CUTLASS plans (cutlass.json) "
                                            "(repeatable); cw's committed records for the "
                                            "target apply after it."),
    untuned: bool = typer.Option(False, "--untuned",
                                 help="Ignore cw's committed tuning records (TVM defaults)."),
    conv_layout: str = typer.Option(_DEFAULTS.conv_layout, "--conv-layout",
                                    help="CPU convolutions: nchwc (blocked channels) or nchw "
                                         "(plain), each with cw's schedule for it."),
    precision: str = typer.Option(_DEFAULTS.precision, "--precision",
                                  help="fp32; tf32 (CUDA, sm_80+): convolutions on tensor "
                                       "cores with TF32 operands, fp32 sums (CUTLASS); or fp16: "
                                       "convolutions and matmuls with fp16 weights and inputs, "
                                       "fp32 sums (half the weight bytes; on sm_80+ slower than "
                                       "fp32, whose convolutions are CUTLASS's). Check either "
                                       "with `cw run --verify`."),
    conv_split: str = typer.Option(_DEFAULTS.conv_split, "--conv-split",
                                   help="CUDA convolutions too small to fill the GPU: auto "
                                        "(split their reduction across thread blocks) or off."),
    conv_algo: str = typer.Option(DEFAULT_CONV_ALGO, "--conv-algo",
                                  help="auto (cutlass for CUDA fp32/tf32 on sm_80+, else "
                                       "direct); direct: cw's own kernels; winograd2 / "
                                       "winograd4 for 3x3 stride-1 convs "
                                       "(Winograd F(2x2,3x3) / F(4x4,3x3): 2.25x / 4x fewer "
                                       "products; weights stored 1.8x / 4x larger; fp32); or "
                                       "cutlass (CUDA, sm_80+: CUTLASS implicit GEMMs on tensor "
                                       "cores, 3xTF32 for fp32 accuracy, NHWC)."),
    jobs: int = typer.Option(_DEFAULTS.jobs, "--jobs", "-j",
                             help="Batch sizes built at once (0: one per CPU, at most "
                                  f"{MAX_AUTO_JOBS}; 1: one at a time, the least memory)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing bundle."),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON."),
    verbose: bool = typer.Option(False, "-v", "--verbose",
                                 help="Report each step (graph normalization, stages)."),
):
    """Compile an ONNX model with TVM into a bundle: one kernel library per batch size, one
    paged weights blob, memory metadata and checksums.

    Examples:
      [bold]cw compile r50.onnx -o r50[/]
      [bold]cw compile r50.onnx -o r50-gpu --target cuda --arch sm_90 --batch-sizes 1,4,16[/]
      [bold]cw compile r50.onnx -o r50 --tune-db r50-tuning[/]
    """
    from cw.compile.onnx_load import parse_input_shapes, parse_input_values

    config = CompileConfig(target=target, arch=arch, batch_sizes=parse_batch_sizes(batch_sizes),
                           page_size=parse_size(page_size, "page size"), name=name, force=force,
                           input_shapes=parse_input_shapes(input_shape or []),
                           input_values=parse_input_values(input_value or []),
                           tune_dbs=tuple(str(p) for p in tune_db or ()),
                           use_committed_records=not untuned, conv_layout=conv_layout,
                           precision=precision, conv_split=conv_split, conv_algo=conv_algo,
                           jobs=jobs)
    out = console()
    progress = progress_bar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                            TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                            hidden=as_json)
    with progress:
        stage = progress.add_task("starting", total=None)
        batches = None

        def on_event(event: str, info: dict) -> None:
            nonlocal batches
            if event == "stage":
                progress.update(stage, description=info["text"], visible=True)
                if verbose and not as_json:
                    out.print(f"[dim]{info['text']}[/]")
            elif event == "note":
                if verbose and not as_json:
                    out.print(f"  {info['text']}")
            elif event == "batch_start":
                progress.update(stage, visible=False)
                if batches is None:
                    batches = progress.add_task("", total=info["total"])
                progress.update(batches, description=f"compiling batch size {info['batch_size']}")
            elif event == "batch_done":
                progress.advance(batches)
                k = info["kernel"]
                if not as_json:
                    out.print(f"  batch {k.batch_size:>2}: {k.compile_seconds:.1f} s, kernels "
                              f"{format_bytes(k.kernel_bytes)} ({k.kernels_tuned}/"
                              f"{k.kernels_total} tuned{_convs(k)}), workspace "
                              f"{format_bytes(k.workspace_bytes)}")

        manifest = compile_model(model, output, config, progress=on_event)
    if as_json:
        import msgspec
        print_json(msgspec.to_builtins(manifest))
        return
    render_summary(manifest, output)


def _convs(kernel) -> str:
    n, split = kernel.kernels_conv_scheduled, kernel.kernels_conv_split
    return ((f", {n} conv{'s' if n != 1 else ''} in cw's schedule" if n else "")
            + (f", {split} split-K conv{'s' if split != 1 else ''}" if split else ""))


def conv_cell(scheduled: int, split: int) -> str:
    """The convolutions cw treated itself, for a table: in cw's schedule (CPU), split-K (CUDA)."""
    parts = ([f"{scheduled} cw"] if scheduled else []) + ([f"{split} split-K"] if split else [])
    return ", ".join(parts) or "-"


def render_summary(manifest, path) -> None:
    w = manifest.weights
    out = console()
    out.print(f"[green]compiled[/] {manifest.name} for {manifest.target.kind}"
              f"{' ' + manifest.target.arch if manifest.target.arch else ''}"
              f"{' in ' + manifest.target.precision if manifest.target.precision != 'fp32' else ''}"
              f" → {path}")
    out.print(f"weights {format_bytes(w.total_bytes)} in {len(w.pages)} page(s) of "
              f"{format_bytes(w.page_size)}, {len(w.tensors)} tensors")
    if manifest.target.tuning:
        out.print(f"tuning records from {manifest.target.tuning}")
    for note in manifest.notes:
        out.print(f"[yellow]note:[/] {note}")
    table = Table()
    convs = any(_convs(k) for k in manifest.kernels)
    for col in ("batch", "kernels", "tuned") + (("convs",) if convs else ()) + (
            "workspace", "input", "output", "compile s"):
        table.add_column(col, justify="right")
    for k in manifest.kernels:
        table.add_row(str(k.batch_size), format_bytes(k.kernel_bytes),
                      f"{k.kernels_tuned}/{k.kernels_total}",
                      *((conv_cell(k.kernels_conv_scheduled, k.kernels_conv_split),)
                        if convs else ()),
                      format_bytes(k.workspace_bytes), format_bytes(k.input_bytes),
                      format_bytes(k.output_bytes), f"{k.compile_seconds:.1f}")
    out.print(table)
