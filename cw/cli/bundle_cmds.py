"""`cw inspect` and `cw run`: look at a bundle, run one inference with it."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from cw.cli.app import app, console, print_json
from cw.cli.compile_cmd import conv_cell
from cw.errors import CwError
from cw.units import format_bytes


@app.command("inspect")
def inspect_cmd(
    bundle: Path = typer.Argument(..., help="Bundle directory."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
):
    """Show what a bundle holds and verify the checksums of its files.

    Example: [bold]cw inspect r50[/]
    """
    from cw.bundle import describe

    info = describe(bundle)
    if as_json:
        print_json(info)
        return
    out = console()
    t = info["target"]
    arch = " " + t["arch"] if t["arch"] else ""
    out.print(f"[bold]{info['name']}[/] ({bundle}) — {t['kind']}{arch}"
              f" {t.get('precision', 'fp32')}, "
              f"TVM {info['tvm_version']}, cw {info['cw_version']}, "
              f"schema {info['schema_version']}")
    out.print(f"source {info['source']['file']} (opset {info['source']['opset']}, sha256 "
              f"{info['source']['sha256'][:12]}…)")
    for kind in ("inputs", "outputs"):
        for s in info[kind]:
            shape = ", ".join(map(str, s["sample_shape"]))
            out.print(f"{kind[:-1]} {s['name']}: {s['dtype']} [B, {shape}]")
    w = info["weights"]
    out.print(f"weights {format_bytes(w['total_bytes'])} in {len(w['pages'])} page(s) of "
              f"{format_bytes(w['page_size'])}, {len(w['tensors'])} tensors")
    if t.get("tuning"):
        out.print(f"tuning records from {t['tuning']}")
    for note in info.get("notes", []):
        out.print(f"[yellow]note:[/] {note}")
    table = Table()
    convs = [conv_cell(k.get("kernels_conv_scheduled", 0), k.get("kernels_conv_split", 0))
             for k in info["kernels"]]
    show_convs = any(c != "-" for c in convs)
    for col in ("batch", "workspace", "input", "output", "kernel size", "tuned") + (
            ("convs",) if show_convs else ()) + ("unplanned allocs",):
        table.add_column(col, justify="right")
    for k, conv in zip(info["kernels"], convs):
        table.add_row(str(k["batch_size"]), format_bytes(k["workspace_bytes"]),
                      format_bytes(k["input_bytes"]), format_bytes(k["output_bytes"]),
                      format_bytes(k["kernel_bytes"]),
                      f"{k.get('kernels_tuned', 0)}/{k.get('kernels_total', 0)}",
                      *((conv,) if show_convs else ()), str(len(k["unplanned"])))
    out.print(table)
    if "profile" in info:
        p = info["profile"]
        sizes = ", ".join(str(b["batch_size"]) for b in p.get("batches", []))
        out.print(f"profile: {p.get('device', {}).get('name')} ({p.get('runtime')}, "
                  f"{p.get('date_utc')}), batch sizes {sizes}")
    elif info.get("unregistered_profile"):
        path = info["unregistered_profile"]
        out.print(f"[yellow]profile: {path} is not in the manifest and is ignored[/] (register "
                  f"it: cw profile {bundle} --import {path})")
    else:
        out.print("profile: none (run `cw profile`)")
    out.print(f"[green]{len(info['files'])} files verified[/] (sha256)")


@app.command("run")
def run_cmd(
    bundle: Path = typer.Argument(..., help="Bundle directory."),
    input: Path = typer.Option(..., "--input", "-i", help=".npy (one input) or .npz (by name)."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N."),
    output: Path = typer.Option(None, "-o", "--output", help="Write the outputs (.npy/.npz)."),
    verify: Path = typer.Option(None, "--verify", help="Compare with onnxruntime on this ONNX."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
):
    """Run one inference locally, no server: pads the batch up to the next compiled batch size,
    runs, unpads. With --verify, exits non-zero when the max relative error exceeds 1e-3
    (1e-2 for tf32 and fp16 bundles, 3e-2 for quantized models).

    Example: [bold]cw run r50 --input x.npy -o y.npy --verify r50.onnx[/]
    """
    from cw.bundle import read_manifest
    from cw.engine import check_output_path, load_inputs, run_bundle, save_outputs
    from cw.verify import is_quantized, verify_tolerance

    manifest = read_manifest(bundle)
    if output is not None:
        check_output_path(output, manifest.outputs)
    inputs = load_inputs(input, manifest)
    result = run_bundle(bundle, inputs, device, verify)
    if output is not None:
        save_outputs(output, manifest.outputs, result.outputs)
    quantized = verify is not None and is_quantized(verify)
    tolerance = verify_tolerance(manifest.target.precision, quantized)
    failed = result.relative_error is not None and not result.relative_error <= tolerance
    if as_json:
        print_json(result.to_dict())
    else:
        out = console()
        shapes = ", ".join(str(list(y.shape)) for y in result.outputs)
        out.print(f"ran {manifest.name} on {device}: batch {result.batch} (padded to "
                  f"{result.padded_to}) in {result.seconds * 1e3:.1f} ms → {shapes}")
        if output is not None:
            out.print(f"wrote {output}")
        if result.relative_error is not None:
            style = "red" if failed else "green"
            precision = manifest.target.precision
            kind = " for a quantized model" if quantized else (
                "" if precision == "fp32" else " for " + precision)
            out.print(f"[{style}]max relative error vs onnxruntime: "
                      f"{result.relative_error:.3g}[/] (tolerance {tolerance:g}{kind})")
    if failed:
        from cw.verify import non_finite_hint

        raise CwError(f"verification failed: max relative error {result.relative_error:.3g} "
                      f"exceeds {tolerance:g}",
                      non_finite_hint(inputs) or "the compiled model disagrees with onnxruntime")
