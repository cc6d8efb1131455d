"""`cw serve` (all-in-one), `cw serve controller`, `cw serve worker`, and `cw infer`."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import typer

from cw.cli.app import app, console, print_json
from cw.serve.controller import ControllerConfig
from cw.units import parse_duration_ns, parse_size

serve_app = typer.Typer(help="Serve models: a controller that schedules, workers that execute.",
                        invoke_without_command=True)
app.add_typer(serve_app, name="serve")
_C = ControllerConfig()
_VERBOSE_HELP = "More log lines: workers joining and leaving (standalone: debug messages too)."
_WORKERS_LISTEN_HELP = "Where workers connect (ZeroMQ address; tcp://*:PORT: every interface)."
_CLIENTS_LISTEN_HELP = "Where clients connect (cw infer, cw.client.Client, cw replay)."
_DEFAULT_SLO_HELP = "The SLO of a request that names none, e.g. 100ms."
_KEY_HELP = ("A key file (`cw serve keygen FILE`): connections encrypted, and only holders of "
             "the same key get through.")
_METRICS_PORT_HELP = ("Serve Prometheus metrics at http://HOST:PORT/metrics and a health check at "
                      "/healthz (0: any free port).")
_DEFAULT_SLO = f"{_C.default_slo_ns // 1_000_000}ms"


def _logging(verbose: bool, standalone: bool = False) -> None:
    """A controller or worker run on its own says when workers join and leave (INFO); `cw
    serve`, which starts them itself, says what it serves once they have (-v: each join)."""
    quiet, loud = (logging.INFO, logging.DEBUG) if standalone else (logging.WARNING, logging.INFO)
    logging.basicConfig(level=loud if verbose else quiet,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")


def _naming_flags(e, config):
    """A UsageError about an address the controller cannot listen on, naming its flag."""
    from cw.errors import UsageError

    for flag, address in (("--workers-listen", config.workers_listen),
                          ("--clients-listen", config.clients_listen)):
        if e.message.startswith(f"cannot listen on {address}:"):
            hint = (f"give {flag} another port, or stop what holds it: another cw serve, "
                    "perhaps" if "in use" in e.message
                    else f"give {flag} an address like tcp://*:7000 or tcp://127.0.0.1:7000")
            return UsageError(e.message, hint)
    return e


def _start_controller(config):
    """A ControllerThread, started; an address it cannot listen on names its flag."""
    from cw.errors import UsageError
    from cw.serve.launch import ControllerThread

    try:
        return ControllerThread(config).start()
    except UsageError as e:
        raise _naming_flags(e, config) from None


def _prepare_log_dir(log_dir: Path) -> None:
    """Made if missing; an earlier run's files there are kept aside, not overwritten."""
    from cw.errors import creating
    from cw.serve.launch import set_aside_earlier_run

    with creating(log_dir, "--log-dir"):
        log_dir.mkdir(parents=True, exist_ok=True)
        earlier = set_aside_earlier_run(log_dir)
    _say_set_aside(log_dir, earlier)


def _say_set_aside(log_dir, earlier) -> None:
    if earlier is not None:
        console().print(f"the earlier run's telemetry in {log_dir} is now in {earlier}/")


def _controller_config(workers_listen, clients_listen, scheduler, schedule_ahead, default_slo,
                       metrics_port, log_dir, log_stalls=None, key=None) -> ControllerConfig:
    from cw.errors import UsageError
    from cw.serve.scheduler import parse_scheduler
    from cw.serve.scheduler.spec import SETTINGS

    spec = parse_scheduler(scheduler)
    if schedule_ahead is not None and "ahead" in dict(spec.settings):
        raise UsageError(f"--schedule-ahead {schedule_ahead} and --scheduler {scheduler} both "
                         "set how far ahead to plan", "give one of them")
    if schedule_ahead is not None and "ahead" not in SETTINGS[spec.policy]:
        raise UsageError(f"--schedule-ahead applies to the clockwork scheduler; "
                         f"{spec.policy} does not plan ahead",
                         f"drop --schedule-ahead (`cw schedulers` lists what {spec.policy} "
                         "takes)")
    ahead_ns = (parse_duration_ns(schedule_ahead, "--schedule-ahead") if schedule_ahead
                else _C.schedule_ahead_ns)
    return ControllerConfig(workers_listen=workers_listen, clients_listen=clients_listen,
                            scheduler=scheduler, schedule_ahead_ns=ahead_ns,
                            default_slo_ns=parse_duration_ns(default_slo, "--default-slo"),
                            metrics_port=metrics_port, log_dir=log_dir,
                            log_stalls_ns=_stall_ns(log_stalls), key_file=key)


_SCHEDULER_HELP = ("clockwork, clipper, batch-timeout or fifo, with settings if need be: "
                   "batch-timeout:max-batch=8:delay=5ms (docs/schedulers.md).")
_LOG_STALLS_HELP = ("Log every stall of the serving loop longer than this, e.g. 1ms: a busy loop "
                    "iteration, a garbage collection, Python unable to run.")
_PAGE_CACHE_HELP = ("Weights cache per device, e.g. 512MiB (default: 2 GiB on a CPU, what is "
                    "free on a GPU, 21.5 GiB simulated); models beyond it are loaded and "
                    "unloaded as demand moves.")
_EXEC_GRAPHS_HELP = ("CUDA workers: run each EXEC as one CUDA graph, captured in the background "
                     "after each LOAD (one host call instead of one per kernel; experimental).")


def _stall_ns(text: str | None) -> int | None:
    return parse_duration_ns(text, "--log-stalls") if text else None


def parse_cpu_list(text: str) -> list[int]:
    """'0-3,6' -> [0, 1, 2, 3, 6], checked against the CPUs this process may use."""
    import os

    from cw.errors import UsageError

    cpus: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise UsageError(f"--cpus {text}: not a CPU list", "e.g. --cpus 0-3 or --cpus 0,2")
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus <= allowed:
        raise UsageError(f"--cpus {text}: CPUs {sorted(cpus - allowed) or '(none)'} are not "
                         "available to this process",
                         f"available: {','.join(map(str, sorted(allowed)))}")
    return sorted(cpus)


@serve_app.callback()
def serve_all(
    ctx: typer.Context,
    models: Path = typer.Option(None, "--models", help="Directory of bundles (default: demo set)."),
    workers: int = typer.Option(1, "--workers",
                                help="Local workers to start (--runtime cuda: one per GPU, "
                                     "cuda:0 to cuda:N-1)."),
    runtime: str = typer.Option("cpu", "--runtime", help="cpu, simulated or cuda."),
    copies: int = typer.Option(1, "--copies", help="Instances of each model per worker."),
    page_cache: str = typer.Option(None, "--page-cache", help=_PAGE_CACHE_HELP),
    workers_listen: str = typer.Option("tcp://127.0.0.1:7000", "--workers-listen",
                                       help=_WORKERS_LISTEN_HELP),
    clients_listen: str = typer.Option("tcp://127.0.0.1:7001", "--clients-listen",
                                       help=_CLIENTS_LISTEN_HELP),
    scheduler: str = typer.Option(_C.scheduler, "--scheduler", help=_SCHEDULER_HELP),
    schedule_ahead: str = typer.Option(None, "--schedule-ahead",
                                       help="Plan each GPU this far ahead (5ms)."),
    default_slo: str = typer.Option(_DEFAULT_SLO, "--default-slo", help=_DEFAULT_SLO_HELP),
    metrics_port: int = typer.Option(None, "--metrics-port", help=_METRICS_PORT_HELP),
    log_dir: Path = typer.Option(None, "--log-dir", help="Telemetry CSVs and worker logs."),
    log_stalls: str = typer.Option(None, "--log-stalls", help=_LOG_STALLS_HELP),
    exec_graphs: bool = typer.Option(False, "--exec-graphs", help=_EXEC_GRAPHS_HELP),
    key: Path = typer.Option(None, "--key", envvar="CW_KEY", help=_KEY_HELP),
    restart: bool = typer.Option(True, "--restart/--no-restart",
                                 help="Start a worker that ends again: after 1 s, doubling to "
                                      "1 min while it keeps ending; not one that refused its "
                                      "bundles or flags, nor one that ended 3 times in a row "
                                      "before joining."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help=_VERBOSE_HELP),
):
    """Run a controller and local workers in one command; Ctrl-C stops everything.

    Examples:
      [bold]cw serve[/]                                   (demo models, one CPU worker)
      [bold]cw serve --models zoo-bundles --workers 4 --runtime simulated --copies 100[/]
    """
    if ctx.invoked_subcommand is not None:
        return
    from cw.errors import UsageError
    from cw.serve.launch import install_signal_stop
    from cw.serve.local import LocalServeConfig, LocalServing
    from cw.serve.protocol import describe_models
    from cw.serve.restarts import RestartConfig

    _logging(verbose)
    controller = _controller_config(workers_listen, clients_listen, scheduler, schedule_ahead,
                                    default_slo, metrics_port, log_dir, log_stalls, key)
    config = LocalServeConfig(models_dir=models, workers=workers, runtime=runtime, copies=copies,
                              page_cache_bytes=parse_size(page_cache, "--page-cache")
                              if page_cache else None,
                              controller=controller, log_stalls_ns=_stall_ns(log_stalls),
                              exec_graphs=exec_graphs, restarts=RestartConfig(enabled=restart))
    out = console()
    serving = LocalServing(config, say=out.print).prepare()
    _say_set_aside(log_dir, serving.earlier_run)
    stop = threading.Event()
    install_signal_stop(stop)  # before anything starts: Ctrl-C from here on stops cleanly
    try:
        try:
            if not serving.start(stop):
                return  # stopped while the workers were joining: nothing served, nothing to say
        except UsageError as e:
            raise _naming_flags(e, controller) from None
        served = serving.served()
        out.print(f"[green]serving[/] {describe_models(served)} with {controller.scheduler}")
        out.print(f"clients: {serving.clients_address}   workers: {serving.workers_address}"
                  + (f"   metrics: http://127.0.0.1:{serving.metrics_port}/metrics"
                     if serving.metrics_port is not None else ""))
        guessed = sorted({m.bundle for m in served.values() if m.estimates_from == "default"})
        if guessed and runtime != "simulated":  # (simulated durations are those guesses)
            out.print(f"note: no profile for {', '.join(guessed[:8])}"
                      f"{f' and {len(guessed) - 8} more' if len(guessed) > 8 else ''}: "
                      "planned on guessed timings until each has run; `cw profile` on a "
                      "bundle measures it (a slow model's first requests may time out)",
                      markup=False, highlight=False)
        out.print(f"try: cw infer {min(served)} --random "
                  f"--controller {serving.clients_address}   (Ctrl-C to stop)")
        while not stop.is_set():
            # a worker that dies is Clockwork's worker loss: the controller serves on with the
            # rest (each said once, with its last words) while it is started again; with none
            # left and none to start, there is nothing to serve with
            for event in serving.step(time.monotonic()):
                out.print(f"[yellow]warning:[/] {event.text}" if event.kind == "ended"
                          else event.text)
            if serving.down():
                serving.workers.check()  # the first one's reason, as the error
            stop.wait(0.5)
    finally:
        serving.close()
        if stop.is_set() and serving.controller is not None:
            # asked to (Ctrl-C, SIGTERM); an error says its own line instead
            served = serving.controller.metrics.served_text()
            out.print(f"stopped after {served}" if served else "stopped")


@serve_app.command("controller")
def serve_controller(
    workers_listen: str = typer.Option(_C.workers_listen, "--workers-listen",
                                       help=_WORKERS_LISTEN_HELP),
    clients_listen: str = typer.Option(_C.clients_listen, "--clients-listen",
                                       help=_CLIENTS_LISTEN_HELP),
    scheduler: str = typer.Option(_C.scheduler, "--scheduler", help=_SCHEDULER_HELP),
    schedule_ahead: str = typer.Option(None, "--schedule-ahead",
                                       help="Plan each GPU this far ahead (5ms)."),
    default_slo: str = typer.Option(_DEFAULT_SLO, "--default-slo", help=_DEFAULT_SLO_HELP),
    metrics_port: int = typer.Option(None, "--metrics-port", help=_METRICS_PORT_HELP),
    log_dir: Path = typer.Option(None, "--log-dir",
                                 help="Write requests.csv and actions.csv here."),
    log_stalls: str = typer.Option(None, "--log-stalls", help=_LOG_STALLS_HELP),
    key: Path = typer.Option(None, "--key", envvar="CW_KEY", help=_KEY_HELP),
    verbose: bool = typer.Option(False, "--verbose", "-v", help=_VERBOSE_HELP),
):
    """Run the controller alone; workers connect with `cw serve worker --controller ...`.

    Example: [bold]cw serve controller --workers-listen tcp://*:7000 --clients-listen tcp://*:7001[/]
    """
    from cw.serve.launch import install_signal_stop

    _logging(verbose, standalone=True)
    config = _controller_config(workers_listen, clients_listen, scheduler, schedule_ahead,
                                default_slo, metrics_port, log_dir, log_stalls, key)
    if log_dir:
        _prepare_log_dir(log_dir)
    ctl = _start_controller(config)
    console().print(f"controller ({config.scheduler}): workers at {ctl.workers_address}, "
                    f"clients at {ctl.clients_address}"
                    + (f", metrics at http://127.0.0.1:{ctl.metrics_port}/metrics"
                       if ctl.metrics_port is not None else "") + " (Ctrl-C to stop)")
    stop = threading.Event()
    install_signal_stop(stop)
    try:
        while not stop.is_set():
            stop.wait(0.5)
    finally:
        ctl.close()
    served = ctl.metrics.served_text()
    console().print(f"stopped after {served}" if served else "stopped")


@serve_app.command("keygen")
def serve_keygen(
    file: Path = typer.Argument(..., help="Where to write the key (a new file, mode 600)."),
):
    """Make a key that encrypts a controller's connections and admits only its holders.

    Give the same file to the controller, its workers and its clients (`--key FILE`, or the
    CW_KEY environment variable; `Client(address, key_file=FILE)` from Python).

    Example: [bold]cw serve keygen cluster.key && cw serve controller --key cluster.key[/]
    """
    from rich.markup import escape

    from cw.errors import OutputExistsError, UsageError
    from cw.serve.keys import write_key

    try:
        write_key(file)
    except FileExistsError:
        raise OutputExistsError(f"{file} exists", "keys are never overwritten: choose another "
                                "name, or remove the old key once nothing uses it") from None
    except OSError as e:
        raise UsageError(f"cannot write {file}: {e.strerror}",
                         "choose a folder you can write to") from None
    console().print(f"wrote {escape(str(file))}: give it to the controller, its workers and "
                    "its clients (--key)")


@serve_app.command("worker")
def serve_worker(
    controller: str = typer.Option("tcp://127.0.0.1:7000", "--controller",
                                   help="The controller's workers' address."),
    models: Path = typer.Option(..., "--models", help="Directory of bundles."),
    device: str = typer.Option("cpu", "--device", help="cpu, or cuda:0,cuda:1,..."),
    runtime: str = typer.Option("tvm", "--runtime", help="tvm or simulated."),
    page_cache: str = typer.Option(None, "--page-cache", help=_PAGE_CACHE_HELP),
    copies: int = typer.Option(1, "--copies", help="Instances of each model."),
    name: str = typer.Option(None, "--name",
                             help="This worker's name in the controller's logs and metrics "
                                  "(default: host and process id)."),
    cpus: str = typer.Option(None, "--cpus", help="CPU runtime: run on these CPUs only, one "
                             "kernel thread per core, e.g. 0-3 or 0,2 (default: all)."),
    log_stalls: str = typer.Option(None, "--log-stalls", help=_LOG_STALLS_HELP),
    exec_graphs: bool = typer.Option(False, "--exec-graphs", help=_EXEC_GRAPHS_HELP),
    key: Path = typer.Option(None, "--key", envvar="CW_KEY", help=_KEY_HELP),
    verbose: bool = typer.Option(False, "--verbose", "-v", help=_VERBOSE_HELP),
    parent_pid: int = typer.Option(None, "--parent-pid", hidden=True,
                                   help="Stop when this process (cw serve, cw replay) is gone."),
):
    """Run a worker: load bundles, connect to the controller, execute its actions.

    Example: [bold]cw serve worker --controller tcp://10.0.0.1:7000 --models bundles --device cuda:0[/]
    """
    from cw.serve.launch import install_signal_stop, run_worker, stop_with_parent
    from cw.serve.worker import WorkerConfig

    _logging(verbose, standalone=True)
    if cpus:
        from cw.tvm_env import pin_to_cpus
        pin_to_cpus(parse_cpu_list(cpus))
    kw = {"name": name} if name else {}
    config = WorkerConfig(controller=controller, models_dir=models,
                          devices=tuple(d.strip() for d in device.split(",")), runtime=runtime,
                          page_cache_bytes=parse_size(page_cache, "page cache") if page_cache
                          else None, copies=copies, log_stalls_ns=_stall_ns(log_stalls),
                          exec_graphs=exec_graphs, key_file=key, **kw)
    stop = threading.Event()
    install_signal_stop(stop)
    if parent_pid is not None:
        stop_with_parent(parent_pid, stop)
    run_worker(config, stop)


@app.command("infer")
def infer_cmd(
    model: str = typer.Argument(None, help="Model to run."),
    input: Path = typer.Option(None, "--input", "-i",
                               help=".npy with a batch axis (one input) or .npz (by name)."),
    random: bool = typer.Option(False, "--random", help="Use a random input of the right shape."),
    slo: str = typer.Option(None, "--slo", help="Latency objective, e.g. 100ms."),
    controller: str = typer.Option("tcp://127.0.0.1:7001", "--controller",
                                   help="The controller's clients' address."),
    output: Path = typer.Option(None, "-o", "--output",
                                help="Write the outputs (.npy; .npz for several)."),
    list_models: bool = typer.Option(False, "--list", help="List servable models."),
    key: Path = typer.Option(None, "--key", envvar="CW_KEY",
                             help="The controller's key file, if it was started with --key."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
):
    """Send one request to a running `cw serve` and print (or save) the answer.

    Examples:
      [bold]cw infer mlp --random[/]
      [bold]cw infer resnet50 --input x.npy --slo 50ms -o y.npy --controller tcp://host:7001[/]
    """
    import numpy as np

    from cw.bundle import check_model_inputs, synthetic_input
    from cw.client import Client, RequestFailed
    from cw.engine import arrange_inputs, check_output_path, read_arrays, save_outputs
    from cw.errors import UsageError
    from cw.serve import protocol as p
    from cw.serve.protocol import RequestStatus, describe_models

    # Local mistakes first: no need to wait on a controller to hear of a missing file.
    if input is not None and random:
        raise UsageError("--input and --random both give the input", "give one of them")
    data = read_arrays(input) if input is not None else None
    slo_ms = parse_duration_ns(slo, "--slo") / 1e6 if slo else None
    if slo_ms is not None and slo_ms <= 0:
        raise UsageError(f"--slo {slo} must be positive", "omit it for the controller's default")
    with Client(controller, timeout_s=10, key_file=key) as client:
        # one model's description, not thousands (a controller may serve 40,000 copies)
        listing = list_models or model is None
        models = {m.model_id: m for m in client.models(None if listing else [model])}
        if listing:
            def tensors(specs):
                return [{"name": t.name, "dtype": t.dtype, "sample_shape": t.sample_shape}
                        for t in specs]

            if as_json:
                print_json([{"model": m.model_id, "batch_sizes": m.batch_sizes,
                             "inputs": tensors(m.inputs), "outputs": tensors(m.outputs)}
                            for m in models.values()])
            elif not models:
                console().print(f"no models: no worker serves the controller at {controller} "
                                "yet")
            else:
                for m in models.values():
                    console().print(f"{m.model_id}  batch sizes {m.batch_sizes}  "
                                    f"{p.tensors_text(m.inputs)} → {p.tensors_text(m.outputs)}",
                                    markup=False, highlight=False)
            return
        if model not in models:
            models = {m.model_id: m for m in client.models()}  # to say what there is instead
            if not models:
                raise UsageError(f"no model '{model}' at {controller}: no worker serves it yet",
                                 "start workers (`cw serve worker --controller ...`), or wait "
                                 "for them to join")
            raise UsageError(f"no model '{model}' at {controller}",
                             f"servable: {describe_models(models)}" + (
                                 "; `cw infer --list` names every one" if len(models) > 12
                                 else ""))
        info = models[model]
        label = f"model '{model}'"
        if output is not None:
            check_output_path(output, info.outputs)
        if random:
            rng = np.random.default_rng(0)
            xs = [synthetic_input(spec, 1, rng) for spec in info.inputs]
        elif data is None:
            raise UsageError("no input", "give --input X.npy (X.npz for several inputs) or "
                             "--random")
        else:
            xs = arrange_inputs(data, label, info.inputs, input.name)
        # here, as cw run does, not as the controller's BAD_INPUT after a round trip
        n = check_model_inputs(label, info.inputs, info.batch_sizes, xs)
        start = time.perf_counter()
        response = client.infer_response(model, xs, slo_ms)
        if response.status != RequestStatus.OK:
            failed = RequestFailed(response.status, response.message)
            if response.status == RequestStatus.TIMED_OUT and info.estimates_from == "default":
                failed.hint = (f"'{model}' has no profile: the controller plans it on guessed "
                               "timings until it has run once; retry, and profile its bundle "
                               "(`cw profile BUNDLE`) so that its first requests are planned "
                               "on measured ones")
            raise failed
        y = client._decode(model, response, n)
        # taken before the client closes: closing (its I/O thread, its sockets) took ~20 ms,
        # which the round trip printed below once included
        elapsed = (time.perf_counter() - start) * 1e3
    ys = [y] if isinstance(y, np.ndarray) else y
    if output is not None:
        save_outputs(output, info.outputs, ys)
    if as_json:
        print_json({"model": model, "status": response.status.name,
                    "latency_ms": response.latency_ns / 1e6, "batch_size": response.batch_size,
                    "simulated": response.simulated,
                    "output_shape": list(ys[0].shape),
                    "outputs": [{"name": spec.name, "shape": list(a.shape)}
                                for spec, a in zip(info.outputs, ys)]})
        return
    out = console()
    note = " [yellow](simulated worker: outputs are zeros)[/]" if response.simulated else ""
    out.print(f"{model}: ok in {response.latency_ns / 1e6:.2f} ms at the controller, "
              f"{elapsed:.2f} ms round trip, batch size {response.batch_size}{note}")
    if output is not None:
        out.print(f"wrote {output}")
    else:
        for spec, a in zip(info.outputs, ys):
            out.print((f"{spec.name}: " if len(ys) > 1 else "")
                      + np.array2string(a, precision=4, threshold=20))
