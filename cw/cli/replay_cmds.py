"""`cw replay` and `cw report`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
from rich import box
from rich.table import Table

from cw.cli.app import app, console, print_json, progress_bar
from cw.errors import CwError, UsageError
from cw.replay.runner import ReplayConfig, replay, with_preset
from cw.units import parse_duration_ns

_D = ReplayConfig()


@app.command("replay")
def replay_cmd(
    trace: str = typer.Option(_D.trace, "--trace",
                              help="azure (bundled sample), or azure:PATH (a trace file or a "
                                   "directory of daily files; a bare PATH works too)."),
    models: str = typer.Option(None, "--models",
                               help="Bundle directory, zoo names, or a number of instances "
                                    f"(default: {_D.models}, or one instance per function of "
                                    "a trace with fewer functions); with --controller, which "
                                    "of its models: a number, ids, bundle names or patterns "
                                    "('resnet50*'; default: all)."),
    copies: int = typer.Option(None, "--copies",
                               help=f"Instances of each model ({_D.copies}, or fewer where the "
                                    "trace has fewer functions than that makes)."),
    zoo_timings: str = typer.Option(_D.zoo_timings, "--zoo-timings",
                                    help="Zoo names, simulated: measured (the GPU machine's "
                                         "committed profiles where a model has one, else the "
                                         "paper's Table 1) or paper (Table 1 for all)."),
    workload: str = typer.Option(None, "--workload",
                                 help="trace (default), poisson, closed or fig6."),
    rate: float = typer.Option(None, "--rate", help="poisson: total r/s (200 per GPU)."),
    concurrency: int = typer.Option(None, "--concurrency",
                                    help=f"closed: clients per model ({_D.concurrency})."),
    think: str = typer.Option(None, "--think",
                              help="closed: how long a client waits after each answer before "
                                   "its next request (0: at once, the paper's Fig. 5)."),
    preset: str = typer.Option(None, "--preset",
                               help="The paper's experiments: fig5 or fig6 (options given "
                                    "explicitly win)."),
    duration: str = typer.Option(None, "--duration",
                                 help="Length of trace to replay (10m; the fig5 preset: 30s)."),
    start_minute: int = typer.Option(0, "--start-minute",
                                     help="Start this many minutes into the trace."),
    rate_scale: float = typer.Option(None, "--rate-scale", help="Multiply the trace's rate."),
    target_rate: float = typer.Option(None, "--target-rate",
                                      help="Scale to this mean rate (default 200 r/s per GPU)."),
    arrivals: str = typer.Option(_D.arrivals, "--arrivals", help="poisson, exact or gamma:CV."),
    mapping: str = typer.Option(_D.mapping, "--map", help="contiguous or stripe."),
    slo: str = typer.Option(None, "--slo",
                            help="Latency objective (100ms); several, comma-separated, replay "
                                 "the same workload at each (OUT/NAME-slo-X/ each)."),
    scheduler: str = typer.Option(_D.scheduler, "--scheduler",
                                  help="clockwork, clipper, batch-timeout or fifo, with "
                                       "settings if need be (clockwork:ahead=2ms, "
                                       "batch-timeout:delay=5ms:max-batch=8; docs/schedulers.md)"
                                       "; several, comma-separated, replay the same workload side "
                                       "by side (OUT/NAME/ each, OUT/compare.html)."),
    workers: int = typer.Option(None, "--workers", help=f"Workers ({_D.workers})."),
    simulate: bool = typer.Option(False, "--simulate", help="Virtual time, simulated workers."),
    controller: str = typer.Option(None, "--controller",
                                   help="Drive a running `cw serve` at this client address."),
    key: Path = typer.Option(None, "--key", envvar="CW_KEY",
                             help="With --controller: its key file, if it was started with "
                                  "--key."),
    runtime: str = typer.Option(None, "--runtime",
                                help="Local live workers: simulated (default), cpu or cuda (one "
                                     "worker per GPU index, --workers of them)."),
    shared_memory: bool = typer.Option(True, "--shared-memory/--no-shared-memory",
                                       help="Live: pass inputs through /dev/shm when the "
                                            "controller is on this host."),
    answer_lane: bool = typer.Option(False, "--answer-lane", envvar="CW_ANSWER_LANE",
                                     help="Live: answers come through a Unix datagram socket "
                                          "of the client's when the controller is on this "
                                          "host, past ZeroMQ's I/O threads (never with --key; "
                                          "off by default: on 2 cores more INFERs came late "
                                          "to the workers)."),
    noise: float = typer.Option(0.0, "--noise",
                                help="--simulate: relative std of simulated durations."),
    sim_engine: str = typer.Option(_D.sim_engine, "--sim-engine",
                                   help="--simulate: auto (the compiled simulator where "
                                        "it was built), compiled or python; both take the "
                                        "same decisions."),
    log_stalls: str = typer.Option(None, "--log-stalls",
                                   help="Live, local controller: log every stall of it and its "
                                        "workers longer than this (e.g. 1ms) to OUT/stalls.log."),
    exec_graphs: bool = typer.Option(False, "--exec-graphs",
                                     help="Live, --runtime cuda: run each EXEC as one CUDA "
                                          "graph (experimental)."),
    senders: int = typer.Option(None, "--senders", envvar="CW_SENDERS",
                                help="Live, closed loop: processes that drive the clients, "
                                     "each with a client of its own and whole models (1: this "
                                     "process). More keep one Python process from delaying "
                                     "answers at thousands a second, and send more requests: "
                                     "a closed loop resends each answer at once."),
    send_at_once: bool = typer.Option(False, "--send-at-once", envvar="CW_SEND_AT_ONCE",
                                      help="Live, closed loop: each burst of requests leaves "
                                           "at once, not within the client's next millisecond "
                                           "(costs a wake-up per burst)."),
    seed: int = typer.Option(0, "--seed", help="Seeds arrivals, mapping and noise: the same "
                                                "seed, the same requests."),
    out: Path = typer.Option(Path("replay-out"), "--out", help="Output directory."),
    force: bool = typer.Option(False, "--force", help="Replace --out."),
    as_json: bool = typer.Option(False, "--json", help="Print summary.json."),
):
    """Replay a production trace (or a synthetic workload) against serving policies and write
    telemetry and a report.

    Examples:
      [bold]cw replay --trace azure --simulate[/]
      [bold]cw replay --trace azure:~/azure2019 --simulate --workers 6 --copies 66 --duration 1h[/]
      [bold]cw replay --simulate --workload poisson --rate 1000 --models 80[/]
      [bold]cw replay --simulate --preset fig5 --slo 10ms,25ms,100ms[/]
      [bold]cw replay --simulate --preset fig6 --duration 1h[/]
      [bold]cw replay --trace azure --simulate --scheduler clockwork,clipper,batch-timeout[/]
      [bold]cw replay --simulate --preset fig5 --slo 10ms --scheduler clockwork,clockwork:ahead=2ms[/]
    """
    from cw.serve.scheduler import parse_schedulers

    schedulers = parse_schedulers(scheduler)
    slos_ns = ([parse_duration_ns(s, "--slo") for s in slo.split(",") if s.strip()]
               if slo else [])
    if slo and not slos_ns:
        raise UsageError("--slo is empty", "e.g. --slo 100ms, or --slo 25ms,100ms")
    several = len(schedulers) > 1 or len(slos_ns) > 1
    chosen = dict(models=models, copies=copies, zoo_timings=zoo_timings, workload=workload,
                  concurrency=concurrency,
                  think_ns=parse_duration_ns(think, "--think") if think
                  else None,
                  workers=workers, slo_ns=slos_ns[0] if slos_ns else None,
                  trace=trace, rate=rate,
                  duration_s=parse_duration_ns(duration, "--duration") / 1e9 if duration
                  else None,
                  start_minute=start_minute, rate_scale=rate_scale, target_rate=target_rate,
                  arrivals=arrivals, mapping=mapping, scheduler=schedulers[0].text, noise=noise,
                  sim_engine=sim_engine, seed=seed, simulate=simulate, controller=controller,
                  key_file=key if controller else None,
                  runtime=runtime, out=out,
                  force=force, shared_memory=shared_memory,
                  answer_lane=answer_lane or None,
                  log_stalls_ns=parse_duration_ns(log_stalls, "--log-stalls") if log_stalls
                  else None, exec_graphs=exec_graphs or None, senders=senders,
                  send_at_once=send_at_once or None)
    if preset is not None:
        config = with_preset(preset, **chosen)
    else:
        config = ReplayConfig(**{k: v for k, v in chosen.items() if v is not None})
    progress = progress_bar(TextColumn("{task.description}"), BarColumn(),
                            TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                            hidden=as_json)
    task = None
    # a bar only shows on a terminal: in a log, a line per tenth of the run says how far it got
    tenth_lines = not as_json and not console().is_terminal
    tenths_done = 0

    current = ""  # the policy running, when several run one after another
    runs = None   # a bar over the policies, when several run
    notes: set[str] = set()

    def on_event(event, info):
        nonlocal task, current, runs, tenths_done
        if event == "run_start":
            current = f"{info['run']}: "
            if runs is None:
                runs = progress.add_task(f"{info['total']} policies", total=info["total"])
        elif event == "start":
            mode = "simulated" if config.simulate else "live"
            text = f"{current}replaying {info['requests']} requests ({mode})"
            task = progress.add_task(text, total=info["duration_ns"])
            tenths_done = 0
            if tenth_lines:
                span = _seconds(info["duration_ns"])
                console().print(f"  {text}, {span} of virtual time" if config.simulate
                                else f"  {text} over {span}")
        elif event == "advance" and task is not None:
            progress.update(task, completed=info["virtual_ns"])
            total_ns = progress.tasks[task].total or 1
            tenths = min(10, info["virtual_ns"] * 10 // total_ns)
            if tenth_lines and tenths > tenths_done:
                tenths_done = tenths
                console().print(f"  {current}{tenths * 10}% ({_seconds(info['virtual_ns'])}, "
                                f"{info['requests']} requests)")
        elif event == "note" and not as_json and info["text"] not in notes:
            notes.add(info["text"])  # (once, where several policies replay the same trace)
            console().print(f"note: {info['text']}")
        elif event == "run_done":
            progress.advance(runs)
            if not as_json:
                console().print(f"  {info['run']}: done")

    with progress:
        if several:
            from cw.replay.compare import replay_side_by_side

            summaries = replay_side_by_side(config, schedulers, on_event,
                                            slos_ns=slos_ns if len(slos_ns) > 1 else None)
        else:
            summaries = [replay(config, on_event)]
    if several:
        if as_json:
            print_json(summaries)
            return _check_answered(summaries, out)
        from cw.replay.report import COMPARE_FILE, COMPARE_RUNS

        render_summaries(summaries)
        _warn_lost_workers(summaries, out)
        _warn_busy_client(summaries)
        names = ",".join(s["name"] for s in summaries)
        if len(names) <= 40:
            console().print(f"wrote {out}/{{{names}}}/ and {out}/{COMPARE_FILE}")
        else:  # a sweep: the table above names the runs, compare.json lists their directories
            console().print(f"wrote {len(summaries)} runs under {out}/ (listed in "
                            f"{COMPARE_RUNS}) and {out}/{COMPARE_FILE}")
        return _check_answered(summaries, out)
    (summary,) = summaries
    if as_json:
        print_json(summary)
        return _check_answered(summaries, out)
    render_summaries([summary])
    _warn_lost_workers(summaries, out)
    _warn_busy_client(summaries)
    lag = summary.get("send_lateness_ms")
    timing = (f" (arrivals sent late by p99 {lag['p99']} ms)" if lag
              else "" if summary.get("live") else f" (virtual/wall time ×{summary['speedup']})")
    console().print(f"wrote {out}/summary.json, requests.csv, actions.csv and report.html"
                    f"{timing}")
    _check_answered(summaries, out)


def _warn_lost_workers(summaries: list[dict], out: Path) -> None:
    for s in summaries:
        where = out if len(summaries) == 1 else out / s["name"]
        for how in s.get("workers_lost") or ():
            console().print(f"[yellow]warning:[/] {how} during the replay; the controller "
                            f"served on without it (its log is in {where}/)")


# a process whose Python threads took this much of a core over the run was about at the GIL's
# limit: it then takes answers in (and sends) late
CLIENT_BUSY_CORES = 0.85


def _warn_busy_client(summaries: list[dict]) -> None:
    for s in summaries:
        busiest = max((s.get("client_cpu") or {}).get("python") or [0])
        if busiest < CLIENT_BUSY_CORES:
            continue
        name = f" ({s['name']})" if len(summaries) > 1 else ""
        processes = len(s["client_cpu"]["python"])
        if s.get("workload", "").startswith("closed"):
            # (a closed loop resends each answer at once: more senders send more, and the
            # queue moves to the controller's intake, where it counts against the SLO)
            more = min(processes * 4, s.get("models") or processes * 4)
            hint = (f"--senders {more} spreads the closed loop over that many processes, which "
                    "then send more requests for the controller to take in")
        else:
            hint = ("an open loop is sent from one process: replay it at a lower rate, or "
                    "from several hosts")
        console().print(f"[yellow]warning:[/] the replay's client{name} kept {busiest:.2f} of a "
                        "core busy in Python, about all one process gets (its threads share one "
                        f"GIL): answers it took in late count late by its own clock; {hint}")


def _check_answered(summaries: list[dict], out: Path) -> None:
    """A running controller that stopped answering mid-run fails the command, after its
    output is written: a script must not take the run for a measurement of a working system."""
    for s in summaries:
        if s.get("no_answer"):
            first, last = s["no_answer_sent_s"]
            where = out if len(summaries) == 1 else out / s["name"]
            raise CwError(f"the controller at {s.get('controller')} did not answer "
                          f"{s['no_answer']:,} of {s['requests']:,} requests, sent from {first:g} "
                          f"to {last:g} s into the replay (status NO_ANSWER in "
                          f"{where}/requests.csv)",
                          "check that `cw serve` is still running there; a restart loses the "
                          "requests in flight. The output is kept")


def _seconds(ns: int) -> str:
    return f"{ns / 1e9:,.0f} s" if ns >= 10e9 else f"{ns / 1e9:.3g} s"


RUNS_AS_COLUMNS = 4  # more runs than this are listed as rows, fewer figures each
SWEEP_KEYS = [("SLO ms", "slo_ms"), ("goodput r/s", "goodput_rps"),
              ("in SLO", "slo_attainment"), ("rejected", "rejected"), ("late", "late"),
              ("p99 ms", ("latency_ms", "p99")), ("batch", "mean_batch_size")]


def _short(value) -> str:
    """Four significant digits for fractions and times: the sweep table is about comparing."""
    if value is None:
        return "n/a"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def render_summaries(summaries: list[dict]) -> None:
    from cw.replay.report import SUMMARY_KEYS, run_label, summary_value, timings_note

    title = "replay" + (" (SIMULATED)" if any(s.get("simulated") for s in summaries) else "")

    def cell(s, key):
        value = summary_value(s, key)
        return "n/a" if value is None else str(value)

    table = Table(title=title)
    if len(summaries) <= RUNS_AS_COLUMNS:
        table.add_column("")
        for s in summaries:
            table.add_column(run_label(s), justify="right", overflow="fold")
        for label, key in SUMMARY_KEYS:
            table.add_row(label, *[cell(s, key) for s in summaries])
    else:  # a sweep: a row per run, the figures that tell runs apart (all are in summary.json)
        table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        pairs = [(s.get("scheduler"), s.get("slo_ms")) for s in summaries]
        unique = len(set(pairs)) == len(pairs)  # the SLO column then tells them apart
        names = [s.get("scheduler", "?") if unique else run_label(s) for s in summaries]
        table.add_column("policy" if unique else "run", no_wrap=True,
                         min_width=max(map(len, names)))
        rows = [[_short(summary_value(s, key)) for _, key in SWEEP_KEYS] for s in summaries]
        for i, (label, _) in enumerate(SWEEP_KEYS):  # headers may wrap, figures may not
            table.add_column(label, justify="right", overflow="fold",
                             min_width=max(*(len(row[i]) for row in rows),
                                           *map(len, label.split())))
        for name, row in zip(names, rows):
            table.add_row(name, *row)
    console().print(table)
    # where simulated durations came from (the same models for every run of one command)
    for note in dict.fromkeys(timings_note(s.get("timings")) for s in summaries):
        if note:
            console().print(f"durations: {note}")


@app.command("report")
def report_cmd(
    runs: list[Path] = typer.Argument(..., help="Replay output directories (one of several "
                                                "runs side by side stands for its runs)."),
    output: Path = typer.Option(None, "-o", "--output",
                                help="HTML file (default: report.html in a run given alone, "
                                     "compare.html in a side-by-side output given alone, else "
                                     "compare.html in the current directory)."),
):
    """Re-render a replay's report, or put several runs side by side.

    Examples:
      [bold]cw report out-clockwork out-clipper -o compare.html[/]
      [bold]cw report cmp[/]   (the runs of `cw replay --scheduler a,b --out cmp`)
    """
    from cw.replay.report import COMPARE_FILE, Run, expand_runs, is_comparison, write_report

    if output is not None and output.suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"-o {output}: the report is an HTML page",
                         f"name a .html file, e.g. -o {output.with_suffix('.html')}")
    loaded = [Run(r) for r in expand_runs(runs)]
    if output is not None:
        target = output
    elif len(runs) == 1:
        target = runs[0] / (COMPARE_FILE if is_comparison(runs[0]) else "report.html")
    else:
        target = Path(COMPARE_FILE)
    write_report(loaded, target)
    render_summaries([r.summary for r in loaded])
    console().print(f"wrote {target}")


@app.command("schedulers")
def schedulers_cmd(as_json: bool = typer.Option(False, "--json", help="Print them as JSON.")):
    """List the serving policies and the settings each takes in a --scheduler spec.

    Example: [bold]cw replay --simulate --scheduler clockwork,clockwork:ahead=2ms,batch-timeout:delay=5ms[/]
    """
    from cw.serve.scheduler.spec import SCHEDULERS, SETTINGS

    if as_json:
        print_json({policy: {key: {"default": s.default, "meaning": s.help}
                             for key, s in SETTINGS[policy].items()} for policy in SCHEDULERS})
        return
    table = Table(title="policies (--scheduler POLICY[:KEY=VALUE]..., docs/schedulers.md)")
    for column in ("policy", "setting", "default", "meaning"):
        table.add_column(column, overflow="fold")
    for policy in SCHEDULERS:
        settings = SETTINGS[policy]
        if not settings:
            table.add_row(policy, "—", "", "no settings")
        for i, (key, s) in enumerate(settings.items()):
            table.add_row(policy if i == 0 else "", key, s.default, s.help)
    console().print(table)
