"""`cw tune`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from cw.cli.app import app, console, print_json, progress_bar
from cw.compile.compiler import DEFAULT_BATCH_SIZES
from cw.compile.tuner import TuneConfig, compact, tune_model
from cw.compile.tunekit import SOURCES
from cw.units import parse_batch_sizes, parse_duration_ns

_DEFAULTS = TuneConfig(db="-")


def _progress(disable: bool = False) -> Progress:
    return progress_bar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                        TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                        hidden=disable)


@app.command("tune")
def tune_cmd(
    model: Path = typer.Argument(..., help="ONNX model file."),
    db: Path = typer.Option(..., "--db", help="Tuning database directory (created or resumed)."),
    target: str = typer.Option(_DEFAULTS.target, "--target", help="cpu or cuda."),
    arch: str = typer.Option(None, "--arch", help="As for cw compile."),
    batch_sizes: str = typer.Option(",".join(map(str, DEFAULT_BATCH_SIZES)), "--batch-sizes",
                                    help="Batch sizes whose kernels to tune."),
    trials: int = typer.Option(_DEFAULTS.trials, "--trials",
                               help="Measured candidates per kernel."),
    time_budget: str = typer.Option(None, "--time-budget",
                                    help="Start no kernel after this long, e.g. 25m; run the "
                                         "same command again to continue."),
    num_cores: int = typer.Option(None, "--num-cores", help="CPU threads (default: all)."),
    input_shape: list[str] = typer.Option(None, "--input-shape",
                                          help="NAME=DIMS, N for the batch (repeatable)."),
    input_value: list[str] = typer.Option(None, "--input-value",
                                          help="NAME=VALUE: an input fixed at compile time, "
                                               "e.g. an audio model's sr=16000 (repeatable)."),
    precision: str = typer.Option(_DEFAULTS.precision, "--precision",
                                  help="Tune the kernels of `cw compile --precision` fp32, "
                                       "tf32 or fp16."),
    conv_split: str = typer.Option(_DEFAULTS.conv_split, "--conv-split",
                                   help="Tune the kernels of `cw compile --conv-split` auto or "
                                        "off (CUDA)."),
    conv_algo: str = typer.Option(_DEFAULTS.conv_algo, "--conv-algo",
                                  help="Tune the kernels of `cw compile --conv-algo` auto, direct, "
                                       "winograd2, winograd4 or cutlass (its convolutions are "
                                       "CUTLASS's: the rest is tuned)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
):
    """Search schedules for a model's kernels with TVM MetaSchedule, measuring each candidate on
    this machine's CPU or GPU. Resumable: kernels with their trials done are skipped, and every
    measurement is kept as it is made. `cw compile --tune-db DIR` applies the result.

    Examples:
      [bold]cw tune r18.onnx --db r18-tuning --batch-sizes 1 --trials 64[/]
      [bold]cw tune r50.onnx --db r50-h100 --target cuda --time-budget 25m[/]
      [bold]cw tune r50.onnx --db r50-h100 --target cuda --precision fp16[/]
    """
    from cw.compile.onnx_load import parse_input_shapes, parse_input_values

    budget_s = parse_duration_ns(time_budget, "time budget") / 1e9 if time_budget else None
    config = TuneConfig(db=str(db), target=target, arch=arch,
                        batch_sizes=parse_batch_sizes(batch_sizes), trials=trials,
                        time_budget_s=budget_s, num_cores=num_cores,
                        input_shapes=parse_input_shapes(input_shape or []),
                        input_values=parse_input_values(input_value or []),
                        precision=precision, conv_split=conv_split, conv_algo=conv_algo)
    out = console()
    progress = _progress(disable=as_json)
    with progress:
        bar = progress.add_task("starting", total=None)

        def on_event(event: str, info: dict) -> None:
            if event == "stage":
                progress.update(bar, description=info["text"])
            elif event == "tasks":
                progress.update(bar, total=info["total"], completed=0,
                                description="tuning kernels")
            elif event == "kernel_start":
                progress.update(bar, description=f"{info['name']} (batch {info['batch_size']}"
                                                 f", {info['trials']} trials)")
            elif event == "kernel_done":
                progress.advance(bar)
                r = info["result"]
                if not as_json and not info["skipped"]:
                    best = f"{r.best_us:,.1f} µs" if r.best_us is not None else "no valid run"
                    out.print(f"  {r.name} (batch {r.batch_size}): {r.trials_now} trials, "
                              f"best {best}")

        report = tune_model(model, config, progress=on_event)
    if as_json:
        import dataclasses
        print_json({**dataclasses.asdict(report), "short": report.short})
        return
    table = Table(title=f"tuning database {report.db} ({report.target_key})")
    for col in ("kernel", "batch", "calls", "trials", "best µs", "GFLOP/s"):
        table.add_column(col, justify="right" if col != "kernel" else "left")
    for k in report.kernels:
        table.add_row(k.name, str(k.batch_size), str(k.weight),
                      f"{k.trials_now}" + (f" (+{k.trials_now - k.trials_before})"
                                           if k.trials_now > k.trials_before else ""),
                      f"{k.best_us:,.1f}" if k.best_us is not None else "-",
                      f"{k.gflops_per_s:,.0f}" if k.gflops_per_s else "-")
    out.print(table)
    for batch in sorted({k.batch_size for k in report.kernels}):
        ks = [k for k in report.kernels if k.batch_size == batch]
        known = [k for k in ks if k.best_us is not None]
        total_us = sum(k.weight * k.best_us for k in known)
        total = f"{total_us / 1e3:,.2f} ms" if total_us >= 1e3 else f"{total_us:,.1f} µs"
        out.print(f"batch {batch}: kernels add up to {total} per inference"
                  + (f" ({len(ks) - len(known)} kernel(s) without a measurement)"
                     if len(known) < len(ks) else ""))
    if report.short:
        out.print(f"{report.short} kernel(s) have fewer than {report.trials_goal} valid "
                  "candidates: their design space is exhausted or candidates failed (see "
                  f"{report.db}/logs)")
    if report.default_unmeasured:
        out.print(f"[yellow]the default schedule of {report.default_unmeasured} kernel(s) could "
                  "not be built or measured[/] (tried twice): their records may be slower "
                  "than no tuning; tune them into a new --db on a machine that is not busy")
    if report.not_started:
        out.print(f"[yellow]the time budget left {report.not_started} kernel(s) untuned:[/] run "
                  "the same command again to continue")
    else:
        out.print(f"[green]done[/] in {report.seconds:.0f} s; apply with "
                  f"[bold]cw compile {model} -o BUNDLE --tune-db {report.db}"
                  + (f" --precision {precision}" if precision != "fp32" else "")
                  + (f" --conv-split {conv_split}" if conv_split != "auto" else "") + "[/]")


@app.command("tune-compact")
def tune_compact_cmd(
    db: Path = typer.Argument(..., help="Tuning database from cw tune."),
    output: Path = typer.Option(..., "-o", "--output",
                                help="Database to merge into (created if absent)."),
):
    """Merge the best record of every kernel into another database, one record per kernel (how
    cw's committed records under cw/tuning/<target>/ are made).

    Example: [bold]cw tune-compact r18-tuning -o cw/tuning/cpu-x86-64-v3[/]
    """
    n = compact(db, output)
    console().print(f"[green]wrote[/] {n} records to {output}")


@app.command("tune-stage")
def tune_stage_cmd(
    model: Path = typer.Argument(..., help="ONNX model file."),
    kit: Path = typer.Option(..., "--kit", help="Tuning kit directory (created, or added to)."),
    db: Path = typer.Option(..., "--db", help="Tuning database the kit's results will go to: "
                                              "kernels with --trials records are left out, "
                                              "and later rounds learn from the records."),
    target: str = typer.Option(_DEFAULTS.target, "--target", help="cpu or cuda."),
    arch: str = typer.Option(None, "--arch", help="As for cw compile."),
    batch_sizes: str = typer.Option(",".join(map(str, DEFAULT_BATCH_SIZES)), "--batch-sizes",
                                    help="Batch sizes whose kernels to stage."),
    candidates: int = typer.Option(32, "--candidates", help="Candidates per kernel."),
    trials: int = typer.Option(_DEFAULTS.trials, "--trials",
                               help="Records per kernel after which it is done."),
    time_budget: str = typer.Option(None, "--time-budget",
                                    help="Start no kernel after this long, e.g. 60m."),
    input_shape: list[str] = typer.Option(None, "--input-shape",
                                          help="NAME=DIMS, N for the batch (repeatable)."),
    input_value: list[str] = typer.Option(None, "--input-value",
                                          help="NAME=VALUE: an input fixed at compile time, "
                                               "e.g. an audio model's sr=16000 (repeatable)."),
    precision: str = typer.Option(_DEFAULTS.precision, "--precision",
                                  help="fp32, tf32 or fp16."),
    conv_split: str = typer.Option(_DEFAULTS.conv_split, "--conv-split", help="auto or off."),
    conv_algo: str = typer.Option(_DEFAULTS.conv_algo, "--conv-algo",
                                  help="auto, direct, winograd2, winograd4 or cutlass."),
    seed: int = typer.Option(0, "--seed", help="Seed of the candidates' random draws."),
    kernels: str = typer.Option(None, "--kernels",
                                help="Stage only kernels whose names contain one of these "
                                     "comma-separated strings, e.g. matmul."),
    sources: str = typer.Option(",".join(SOURCES), "--sources",
                                help="Kinds of new candidates: dlight-tile (dlight's GEMM "
                                     "schedule with other tiles), sampled (MetaSchedule's space "
                                     "at random), evolved (its search, from 16 records on)."),
):
    """Compile schedule candidates for a model's kernels into a tuning kit, to be timed where
    the device is (`cw tune-measure`, which needs only TVM's runtime) and brought back with
    `cw tune-ingest`. Several models may go into one kit.

    Example:
      [bold]cw tune-stage r50.onnx --kit kit --db r50-h100 --target cuda --batch-sizes 1,16[/]
    """
    from cw.compile.onnx_load import parse_input_shapes, parse_input_values
    from cw.compile.tunekit import stage_kit

    budget_s = parse_duration_ns(time_budget, "time budget") / 1e9 if time_budget else None
    config = TuneConfig(db=str(db), target=target, arch=arch,
                        batch_sizes=parse_batch_sizes(batch_sizes), trials=trials,
                        time_budget_s=budget_s, input_shapes=parse_input_shapes(input_shape or []),
                        input_values=parse_input_values(input_value or []),
                        precision=precision, conv_split=conv_split, conv_algo=conv_algo,
                        seed=seed)
    out = console()
    progress = _progress()
    with progress:
        bar = progress.add_task("starting", total=None)

        def on_event(event: str, info: dict) -> None:
            if event == "stage":
                progress.update(bar, description=info["text"])
            elif event == "tasks":
                progress.update(bar, total=info["total"], completed=0, description="staging")
            elif event == "kernel_start":
                progress.update(bar, description=f"{info['name']} (batch {info['batch_size']})")
            elif event == "kernel_done":
                progress.advance(bar)

        report = stage_kit(model, config, kit, candidates=candidates, progress=on_event,
                           sources=tuple(x.strip() for x in sources.split(",") if x.strip()),
                           kernels=tuple(x.strip() for x in (kernels or "").split(",")
                                         if x.strip()))
    n = sum(len(t["candidates"]) for t in report.staged)
    out.print(f"[green]staged[/] {n} candidates of {len(report.staged)} kernel(s) in {kit} "
              f"({report.seconds:.0f} s); {report.complete} kernel(s) already have {trials} "
              f"records, {report.in_kit} were in the kit")
    if report.not_chosen:
        out.print(f"{report.not_chosen} kernel(s) left out by --kernels {kernels}")
    if report.uncovered:
        out.print(f"{report.uncovered} kernel(s) left out: none of --sources {sources} has a "
                  "candidate for them")
    for line in report.failed:
        out.print(f"[yellow]left out, TVM failed on[/] {line}")
    if report.not_started:
        out.print(f"[yellow]the time budget left {report.not_started} kernel(s) out:[/] run "
                  "the same command again to add them")
    out.print(f"next, where the device is: [bold]cw tune-measure {kit} --device "
              f"{target} --out results.jsonl[/]")


@app.command("tune-measure")
def tune_measure_cmd(
    kit: Path = typer.Argument(..., help="Tuning kit from cw tune-stage."),
    out_file: Path = typer.Option(..., "--out", help="Results file (JSON lines; resumed)."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N."),
    time_budget: str = typer.Option(None, "--time-budget",
                                    help="Start no candidate after this long, e.g. 8m."),
    repeat: int = typer.Option(3, "--repeat", help="Timed repetitions per candidate."),
    min_repeat_ms: int = typer.Option(20, "--min-repeat-ms",
                                      help="Each repetition runs the kernel at least this long "
                                           "(fewer: faster, noisier)."),
):
    """Check and time every candidate of a tuning kit on this machine's device. Needs only
    TVM's runtime. Resumable: candidates already in --out are skipped.

    Example: [bold]cw tune-measure kit --device cuda --out results.jsonl --time-budget 8m[/]
    """
    from cw.profile.candidates import MeasureConfig, measure_kit

    budget_s = parse_duration_ns(time_budget, "time budget") / 1e9 if time_budget else None
    config = MeasureConfig(device=device, repeat=repeat, min_repeat_ms=min_repeat_ms,
                           time_budget_s=budget_s)
    out = console()
    progress = _progress()
    with progress:
        bar = progress.add_task("measuring candidates", total=None)

        def on_event(event: str, info: dict) -> None:
            if event == "candidates":
                progress.update(bar, total=info["total"], completed=info["done"])
            elif event == "result":
                progress.advance(bar)
                if info.get("wrong"):
                    out.print(f"[red]{info['task']}/{info['candidate']}: {info['error']}[/]")

        report = measure_kit(kit, out_file, config, progress=on_event)
    out.print(f"measured {report.measured}, failed {report.failed} (wrong answers: "
              f"{report.wrong}), {report.already} measured before, in {report.seconds:.0f} s")
    if report.left:
        out.print(f"[yellow]the time budget left {report.left} candidate(s):[/] run the same "
                  "command again to continue")
    else:
        out.print(f"next, where the compiler is: [bold]cw tune-ingest {kit} {out_file} "
                  "--db DB[/]")


@app.command("tune-ingest")
def tune_ingest_cmd(
    kit: Path = typer.Argument(..., help="Tuning kit from cw tune-stage."),
    results: list[Path] = typer.Argument(..., help="Results files from cw tune-measure."),
    db: Path = typer.Option(..., "--db", help="Tuning database to add the records to."),
):
    """Add a kit's measured candidates to a tuning database as records (what `cw tune` would
    have written), and show what each kernel gained over its default schedule.

    Example: [bold]cw tune-ingest kit results.jsonl --db r50-h100[/]
    """
    from cw.compile.tunekit import ingest_results

    report = ingest_results(kit, results, db)
    out = console()
    table = Table(title=f"kernels measured ({db})")
    # "before": the default schedule, or the best record before this kit (re-measured with it)
    # "from": where the fastest schedule came from (default, reference, dlight-tile: dlight's
    # GEMM with another tile, sampled: MetaSchedule's space at random, evolved: its search)
    for col in ("kernel", "batch", "calls", "before µs", "best µs", "speed-up", "from"):
        table.add_column(col, justify="left" if col in ("kernel", "from") else "right")
    for k in sorted(report.kernels, key=lambda k: (k["batch_size"], k["name"])):
        base, best = k["default_us"], k["best_us"]
        table.add_row(k["name"], str(k["batch_size"]), str(k["calls"]),
                      f"{base:,.1f}" if base else "-", f"{best:,.1f}",
                      f"×{base / best:.2f}" if base else "-", k["best_origin"])
    out.print(table)
    out.print(f"[green]added[/] {report.committed} records to {db}; {report.failed} candidates "
              f"failed ({report.wrong} wrong answers), {report.already} were added before")
