"""`cw demo`: the README's first command. Exports a zoo model, compiles it for this machine's
CPU, runs a batch through it and checks the result against onnxruntime, then replays a minute of
the bundled Azure Functions trace against the Clockwork scheduler (simulated workers, virtual
time) and writes its report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer

from cw.cli.app import app, console
from cw.cli.compile_cmd import compile_cmd
from cw.errors import CwError, UsageError
from cw.units import parse_batch_sizes


@app.command("demo")
def demo_cmd(
    model: str = typer.Option("resnet18", "--model", help="Zoo model to use."),
    workdir: Path = typer.Option(Path("demo"), "--dir", help="Where to write the files."),
    batch_sizes: str = typer.Option("1,4", "--batch-sizes", help="Batch sizes to compile."),
    batch: int = typer.Option(3, "--batch", help="Batch to run (padded to a compiled size)."),
):
    """Export a zoo model, compile it for the CPU, run it and verify it against onnxruntime;
    then a one-minute simulated replay of the bundled Azure trace, with its report.

    Example: [bold]cw demo[/]   ([bold]cw demo --model mlp[/] for a quick one)
    """
    import model_zoo
    from cw.bundle import open_bundle, synthetic_input
    from cw.engine import run_bundle
    from cw.errors import creating

    model_zoo.get(model)  # an unknown name fails here, before anything is written
    # before minutes of export and compilation, not after
    largest = max(parse_batch_sizes(batch_sizes))
    if not 1 <= batch <= largest:
        raise UsageError(f"--batch {batch} must be within 1..{largest} (the largest of "
                         f"--batch-sizes {batch_sizes})", "e.g. --batch 3 --batch-sizes 1,4")
    out = console()
    with creating(workdir, "--dir"):
        workdir.mkdir(parents=True, exist_ok=True)
    onnx_path = workdir / f"{model}.onnx"
    bundle = workdir / model
    out.rule(f"1/4 cw zoo export {model} -o {onnx_path}")
    size = model_zoo.export(model, onnx_path)
    out.print(f"wrote {onnx_path} ({size / 1e6:.1f} MB)")
    out.rule(f"2/4 cw compile {onnx_path} -o {bundle} --target cpu --batch-sizes {batch_sizes}")
    compile_cmd(model=onnx_path, output=bundle, target="cpu", arch=None, batch_sizes=batch_sizes,
                page_size="16MiB", name=model, input_shape=[], input_value=[], tune_db=[],
                untuned=False, conv_layout="nchwc", precision="fp32", conv_split="auto",
                conv_algo="direct", jobs=0, force=True, as_json=False, verbose=False)
    out.rule(f"3/4 cw run {bundle} --input x.npy --verify {onnx_path}")
    x = synthetic_input(open_bundle(bundle).manifest.inputs[0], batch, np.random.default_rng(0))
    np.save(workdir / "x.npy", x)
    result = run_bundle(bundle, [x], "cpu", onnx_path)
    out.print(f"batch {result.batch} (padded to {result.padded_to}) in "
              f"{result.seconds * 1e3:.1f} ms → output {list(result.outputs[0].shape)}; top "
              f"classes {np.argmax(result.outputs[0], axis=1).tolist()}")
    if not result.relative_error <= 1e-4:
        raise CwError(f"demo failed: relative error {result.relative_error:.3g} vs onnxruntime")
    out.print(f"[green]ok[/]: max relative error vs onnxruntime {result.relative_error:.2g}")
    replay_dir = workdir / "replay"
    out.rule(f"4/4 cw replay --trace azure --simulate --duration 1m --out {replay_dir}")
    from cw.cli.replay_cmds import render_summaries
    from cw.replay.runner import ReplayConfig, replay

    summary = replay(ReplayConfig(trace="azure", duration_s=60.0, simulate=True, out=replay_dir,
                                  force=True))
    render_summaries([summary])
    out.print(f"[green]ok[/]: {summary['requests']} requests replayed in virtual time "
              f"(×{summary['speedup']} faster than real time); open {replay_dir}/report.html")
    out.print("next: the same trace under several policies side by side, [bold]cw replay --trace "
              "azure --simulate --scheduler clockwork,clipper,batch-timeout --slo 25ms "
              "--target-rate 400 --duration 2m --out compare[/]")
