"""`cw profile`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from cw.cli.app import app, console, print_json, progress_bar
from cw.profile.profiler import MIN_ITERATIONS, ProfileConfig, profile_bundle
from cw.units import parse_batch_sizes, parse_duration_ns

_D = ProfileConfig()


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


@app.command("profile")
def profile_cmd(
    bundle: Path = typer.Argument(..., help="Bundle directory."),
    device: str = typer.Option(_D.device, "--device",
                               help="cuda:N or cpu (default: the bundle's, cuda:0 or cpu)."),
    iterations: int = typer.Option(_D.iterations, "--iterations",
                                   help="Measured runs per batch size (fewer where they would "
                                        "take longer than --max-time)."),
    max_time: str = typer.Option(f"{_D.max_time_s:g}s", "--max-time",
                                 help="Time for one batch size's runs: fewer iterations where "
                                      f"more would not fit, at least {MIN_ITERATIONS}; "
                                      "'none': no limit."),
    warmup: int = typer.Option(_D.warmup, "--warmup",
                               help="Unmeasured runs first (fewer where they take more than "
                                    "a tenth of --max-time)."),
    load_iterations: int = typer.Option(_D.load_iterations, "--load-iterations",
                                        help="Measured weight loads."),
    batch_sizes: str = typer.Option(None, "--batch-sizes", help="Subset of the compiled sizes."),
    concurrency: int = typer.Option(1, "--concurrency",
                                    help="Also run K EXECs at once (reported, not stored)."),
    back_to_back: bool = typer.Option(False, "--back-to-back",
                                      help="Also run as many EXECs back to back, each queued "
                                           "while the one before runs, as a busy worker runs "
                                           "them (reported, not stored)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    import_file: Path = typer.Option(None, "--import", metavar="FILE",
                                     help="Measure nothing: register FILE, a profile.json "
                                          "measured elsewhere, as the bundle's profile."),
    exec_graphs: bool = typer.Option(_D.exec_graphs, "--exec-graphs",
                                     help="Run EXEC as one CUDA graph, as a worker started "
                                          "with --exec-graphs does (CUDA; experimental)."),
    ungated: bool = typer.Option(False, "--ungated", hidden=True,
                                 help="Experiment: let the GPU start EXEC while the host is "
                                      "still launching its kernels (GPU; not stored)."),
):
    """Measure LOAD, INPUT, EXEC and OUTPUT times of a bundle and store them in profile.json.

    Examples:
      [bold]cw profile r50 --device cuda:0 --iterations 10000[/]
      [bold]cw profile mlp --device cpu --iterations 200 --concurrency 4[/]
      [bold]cw profile r50 --import model_zoo/profiles/nvidia-h200/resnet50.json[/]
    """
    if import_file is not None:
        _import(bundle, import_file, as_json, batch_sizes is not None or concurrency != 1
                or ungated or exec_graphs or back_to_back)
        return
    max_time_s = (None if max_time.strip().lower() == "none"
                  else parse_duration_ns(max_time, "--max-time") / 1e9)
    config = ProfileConfig(device=device, iterations=iterations, warmup=warmup,
                           load_iterations=load_iterations, max_time_s=max_time_s,
                           batch_sizes=parse_batch_sizes(batch_sizes) if batch_sizes else None,
                           concurrency=concurrency, gate_exec=not ungated,
                           exec_graphs=exec_graphs, back_to_back=back_to_back)
    progress = progress_bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), hidden=as_json)
    task = None
    # a bar only shows on a terminal: in a log, a line per phase says how far a long run got
    phase_lines = not as_json and not console().is_terminal

    def on_event(event: str, info: dict) -> None:
        nonlocal task
        if event == "phase":
            if task is not None:
                progress.remove_task(task)
            task = progress.add_task(info["text"], total=info["total"])
            if phase_lines:
                console().print(f"  {info['text']} ×{info['total']}")
        elif event == "advance" and task is not None:
            progress.advance(task)
        elif event == "total" and task is not None:
            progress.update(task, total=info["total"])
            if not as_json:
                console().print(f"  {info['text']}")

    with progress:
        profile, reported = profile_bundle(bundle, config, on_event)
    concurrent = reported.concurrency
    if as_json:
        import msgspec
        print_json({"profile": msgspec.to_builtins(profile),
                    "concurrency": [{"concurrency": c.concurrency, "batch_size": c.batch_size,
                                     "throughput_per_s": c.throughput_per_s,
                                     "latency": msgspec.to_builtins(c.latency)}
                                    for c in concurrent],
                    "back_to_back": [{"batch_size": r.batch_size,
                                      "exec": msgspec.to_builtins(r.exec),
                                      "exec_slowest": msgspec.to_builtins(r.exec_slowest),
                                      "busy": r.busy} for r in reported.back_to_back]})
        return
    out = console()
    counts = {b.batch_size: b.exec.n for b in profile.batches}
    iterations = (f"{profile.iterations} iterations"
                  if set(counts.values()) == {profile.iterations} else "iterations " +
                  ", ".join(f"{n} at batch {batch}" for batch, n in counts.items()))
    out.print(f"[bold]{profile.bundle}[/] on {profile.device.name} ({profile.runtime}), "
              f"{iterations}")
    ld = profile.load
    out.print(f"LOAD {ld.bytes / 1e6:.1f} MB in {ld.pages} pages: p50 {_ms(ld.stats.p50_ns)} ms, "
              f"p99 {_ms(ld.stats.p99_ns)} ms, {ld.bandwidth_gbps:.1f} GB/s")
    table = Table(title="milliseconds")
    for col in ("batch", "phase", "p50", "p99", "p99.99", "max", "p99.99/p50"):
        table.add_column(col, justify="right")
    for b in profile.batches:
        for phase in ("input", "exec", "exec_host", "output"):
            s = getattr(b, phase)
            table.add_row(str(b.batch_size), phase, _ms(s.p50_ns), _ms(s.p99_ns),
                          _ms(s.p9999_ns), _ms(s.max_ns), f"{s.tail_ratio:.3f}")
    out.print(table)
    for b in profile.batches:
        if b.exec_slowest:  # when the tail came says more of its cause than its size
            runs = ", ".join(f"{_ms(r.exec_ns)} (run {r.run + 1:,}, at {r.at_ns / 1e9:.2f} s)"
                             for r in sorted(b.exec_slowest, key=lambda r: -r.exec_ns)[:3])
            out.print(f"batch {b.batch_size}, slowest EXECs in ms: {runs}")
    for r in reported.back_to_back:
        e = r.exec
        out.print(f"back to back, batch {r.batch_size}: EXEC p50 {_ms(e.p50_ns)} ms, p99.99 "
                  f"{_ms(e.p9999_ns)} ms, p99.99/p50 {e.tail_ratio:.4f}, device busy "
                  f"{r.busy:.1%} (reported only, not stored)")
    for c in concurrent:
        out.print(f"concurrency {c.concurrency}, batch {c.batch_size}: {c.throughput_per_s:.1f} "
                  f"inferences/s, EXEC p50 {_ms(c.latency.p50_ns)} ms, p99.99 "
                  f"{_ms(c.latency.p9999_ns)} ms (reported only, not stored)")
    out.print(f"device memory {profile.device_memory_bytes / 2**20:.1f} MiB; wrote "
              f"{bundle / 'profile.json'}")


def _import(bundle: Path, import_file: Path, as_json: bool, measuring: bool) -> None:
    import msgspec

    from cw.errors import UsageError
    from cw.profile.store import import_profile

    if measuring:
        raise UsageError("--import measures nothing", "drop --batch-sizes, --concurrency and "
                         "--ungated, or drop --import")
    profile = import_profile(bundle, import_file)
    if as_json:
        print_json({"profile": msgspec.to_builtins(profile)})
        return
    sizes = ", ".join(str(b.batch_size) for b in profile.batches)
    console().print(f"registered {import_file} as {bundle / 'profile.json'}: "
                    f"{profile.device.name} ({profile.runtime}), batch sizes {sizes}")
