"""`cw replay` as a library call: trace → arrivals → (simulated) serving → telemetry, summary and
report in an output directory written atomically."""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Callable

import msgspec

from cw.errors import CwError, UsageError, cannot_write, writing
from cw.memory import check_memory
from cw.replay import arrivals as arrivals_mod
from cw.replay import workloads
from cw.replay.columns import actions_of, requests_of
from cw.replay.report import Run, RunSeries, run_series, shared_axis, write_report
from cw.replay.summary import summarize
from cw.replay.traces import load_trace
from cw.serve.estimates import Estimates
from cw.serve.protocol import ModelInfo, TensorInfo
from cw.serve.scheduler import SchedulerConfig, make_scheduler, parse_scheduler
from cw.serve.telemetry import TelemetryLog

MS = 1_000_000
PAGE = 16 * 2**20
DEFAULT_ZOO_MODELS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
                      "resnet50_v2", "densenet121", "inception_v3")


DEFAULT_COPIES = 10  # instances of each model, where --copies is not given
LIVE_RUNTIMES = ("simulated", "cpu", "cuda")  # local workers of a live replay
# Zoo models simulated by name: "measured" takes the GPU machine's committed profiles where a
# model has one (model_zoo/profiles/), the paper's Table 1 elsewhere; "paper" takes Table 1 only.
ZOO_TIMINGS = ("measured", "paper")


@dataclass(frozen=True)
class ReplayConfig:
    trace: str = "azure"
    # A directory of bundles, zoo names or a number of instances; with `controller`, which of
    # its models to drive (ids, names of bundles, patterns or a number). None: the default zoo
    # set (--simulate), every model the controller serves (`controller`).
    models: str | None = None
    copies: int | None = None                  # instances of each model (10); not `controller`
    zoo_timings: str = "measured"              # zoo names: measured | paper (ZOO_TIMINGS)
    duration_s: float = 600.0
    start_minute: int = 0
    rate_scale: float | None = None
    target_rate: float | None = None           # None and no rate_scale: 200 r/s per worker
    arrivals: str = "poisson"
    workload: str = "trace"                    # trace | poisson | closed | fig6
    rate: float | None = None                  # poisson: total r/s (default: 200 per GPU)
    concurrency: int = 16                      # closed: clients per model
    think_ns: int = 0                          # closed: a client's pause after each answer
    mapping: str = "contiguous"
    slo_ns: int = 100 * MS
    scheduler: str = "clockwork"               # a spec: clockwork, batch-timeout:delay=5ms, ...
    workers: int | None = None                 # 1; not with `controller`, which has its own
    gpus_per_worker: int = 1
    pages_per_gpu: int = 1376                  # 21.5 GiB in 16 MiB pages, Clockwork's V100
    noise: float = 0.0
    seed: int = 0
    simulate: bool = True
    sim_engine: str = "auto"                   # auto | compiled | python (cw/replay/fastsim.py)
    controller: str | None = None              # live replay against a running `cw serve`
    key_file: Path | None = None               # its key, if it was started with --key
    runtime: str | None = None                 # live local workers: simulated | cpu | cuda
    shared_memory: bool = True                 # live: inputs via /dev/shm where the host allows
    # live: answers via the client's lane (Client.answer_lane), on the controller's host; a
    # transport preference, as shared_memory, which a simulation has no use for. Off: on 2
    # cores it shortened the way back but more INFERs reached workers late (stop 50)
    answer_lane: bool = False
    log_stalls_ns: int | None = None           # live, own controller: stalls.log in out
    exec_graphs: bool = False                  # live, cuda workers: EXEC as one CUDA graph
    senders: int = 1                           # live, closed loop: sender processes
    # live, closed loop: each burst of requests leaves at once (Client.send_now), not within
    # the client's next millisecond. Off: on 2 cores its wake-ups' CPU made more answers late
    # (docs/benchmarks.md, stop 49); for an A/B where cores are plenty
    send_at_once: bool = False
    out: Path = Path("replay-out")
    force: bool = False
    # the fields __post_init__ filled with their defaults (not given): `fitted_to` may change them
    defaults_taken: frozenset[str] = field(default=frozenset(), init=False, repr=False,
                                           compare=False)

    def __post_init__(self):
        self._check_applies()
        # the defaults of what was not given (a frozen dataclass: set once, here); a running
        # controller's models, workers and runtime stay None: they are its own
        defaults = {} if self.controller else {"copies": DEFAULT_COPIES, "workers": 1,
                                                "runtime": "simulated", "models": DEFAULT_MODELS}
        taken = {name for name in defaults if getattr(self, name) is None}
        for name in taken:
            object.__setattr__(self, name, defaults[name])
        object.__setattr__(self, "defaults_taken", frozenset(taken))
        for flag, value in (("--copies", self.copies), ("--workers", self.workers),
                            ("GPUs per worker", self.gpus_per_worker)):
            if value is not None and value < 1:  # (None: a running controller's, unset)
                raise UsageError(f"{flag} {value} must be ≥ 1")
        if self.slo_ns <= 0:
            raise UsageError("--slo must be positive", "e.g. --slo 100ms")
        arrivals_mod.parse_arrivals(self.arrivals)
        if self.workload not in workloads.WORKLOADS:
            raise UsageError(f"unknown --workload '{self.workload}'",
                             f"use one of {', '.join(workloads.WORKLOADS)}")
        self._check_shaping()
        if self.concurrency < 1:
            raise UsageError(f"--concurrency {self.concurrency} must be ≥ 1")
        if self.think_ns < 0:
            raise UsageError("--think must not be negative", "e.g. --think 5ms")
        if self.rate is not None and not 0 < self.rate < math.inf:
            raise UsageError(f"--rate {self.rate:g} must be a positive number", "e.g. --rate 1000")
        if self.seed < 0:
            raise UsageError(f"--seed {self.seed} must be ≥ 0")
        if not 0 <= self.noise < 1:
            raise UsageError(f"--noise {self.noise:g} must be ≥ 0 and < 1",
                             "a relative standard deviation, e.g. --noise 0.02 for 2 %")
        if self.start_minute < 0:
            raise UsageError(f"--start-minute {self.start_minute} must be ≥ 0",
                             "minutes count from the trace's first, 0")
        for flag, value in (("--target-rate", self.target_rate),
                            ("--rate-scale", self.rate_scale)):
            if value is not None and not 0 < value < math.inf:
                raise UsageError(f"{flag} {value:g} must be a positive number")
        spec = parse_scheduler(self.scheduler)  # raises on an unknown policy or setting
        if self.log_stalls_ns is not None and (self.simulate or self.controller):
            raise UsageError("--log-stalls watches the controller and workers a live replay "
                             "starts", "drop --simulate and --controller, or --log-stalls")
        if self.exec_graphs and (self.simulate or self.controller or self.runtime != "cuda"):
            raise UsageError("--exec-graphs is for the CUDA workers a live replay starts",
                             "give --runtime cuda (without --simulate or --controller), or "
                             "drop --exec-graphs")
        if self.senders < 1:
            raise UsageError(f"--senders {self.senders} must be ≥ 1")
        if self.send_at_once and (self.simulate or self.workload != "closed"):
            raise UsageError("--send-at-once is for a live replay's closed-loop clients",
                             "drop --simulate, and use --workload closed (or --preset fig5), "
                             "or drop --send-at-once")
        if self.senders > 1 and (self.simulate or self.workload != "closed"):
            raise UsageError("--senders is for a live replay's closed-loop clients",
                             "drop --simulate, and use --workload closed (or --preset fig5), "
                             "or drop --senders")
        if self.zoo_timings not in ZOO_TIMINGS:
            raise UsageError(f"unknown --zoo-timings '{self.zoo_timings}'",
                             f"use one of {', '.join(ZOO_TIMINGS)}")
        if self.simulate:
            from cw.replay.fastsim import engine_for

            engine_for(spec.policy, self.sim_engine)  # raises on a choice that cannot run
        if self.runtime is not None and self.runtime not in LIVE_RUNTIMES:
            raise UsageError(f"unknown --runtime '{self.runtime}'",
                             f"use one of {', '.join(LIVE_RUNTIMES)}")

    def changed(self, **changes) -> ReplayConfig:
        """`dataclasses.replace`, where what was left to its default stays so (and may still be
        fitted to the trace)."""
        left = {name: None for name in self.defaults_taken if name not in changes}
        return replace(self, **left, **changes)

    def fitted_to(self, functions: int) -> tuple[ReplayConfig, str | None]:
        """This config for a trace of `functions` functions, and a note of what changed. Where
        --copies was not given and its default (10 of each model) would make more instances than
        the trace has functions (refused: instances beyond them would get no requests), fewer
        copies are taken: the default zoo set simulated becomes one instance per function, as
        `--models N` would make; other models get as many copies each as the functions allow.
        What the user gave stays."""
        if self.controller or self.workload != "trace" or "copies" not in self.defaults_taken:
            return self, None
        s = "s" * (functions != 1)
        if "models" in self.defaults_taken:
            if not self.simulate or functions >= len(DEFAULT_ZOO_MODELS) * DEFAULT_COPIES:
                return self, None
            return self.changed(models=str(functions)), (
                f"the trace has {functions:,} function{s}: simulating {functions:,} model "
                f"instance{s}, one per function, instead of the default "
                f"{len(DEFAULT_ZOO_MODELS) * DEFAULT_COPIES} (--models N or --copies to choose)")
        if self.models.strip().isdigit():
            return self, None  # a number of instances: copies do not apply
        path = Path(self.models)
        if path.is_dir():
            from cw.serve.runtime.host import find_bundles

            try:
                distinct = len(find_bundles(path))
            except CwError:
                return self, None  # (said where the models are read)
        else:
            distinct = len([n for n in self.models.split(",") if n.strip()])
        copies = max(1, functions // max(1, distinct))
        if copies >= DEFAULT_COPIES:
            return self, None
        return self.changed(copies=copies), (
            f"the trace has {functions:,} function{s}: {copies} cop{'ies' if copies > 1 else 'y'}"
            f" of each of the {distinct} model{'s' * (distinct != 1)} instead of "
            f"{DEFAULT_COPIES} (--copies to choose)")

    def _check_applies(self) -> None:
        """Settings that would be silently ignored are refused: what serves a replay is a
        running controller's (--controller), or simulated in virtual time (--simulate)."""
        if self.controller:
            for flag, value in (("--copies", self.copies), ("--workers", self.workers),
                                ("--runtime", self.runtime)):
                if value is not None:
                    raise UsageError(
                        f"{flag} does not apply with --controller: the `cw serve` at "
                        f"{self.controller} runs its own workers and models",
                        f"drop {flag} (give it to `cw serve` instead); --models picks which of "
                        "the controller's models to drive")
        if self.simulate and self.runtime not in (None, "simulated"):
            raise UsageError(f"--runtime {self.runtime} does not apply with --simulate: its "
                             "workers are simulated in virtual time",
                             "drop --runtime, or drop --simulate to replay live on local "
                             f"{self.runtime} workers")
        for flag, name in (("--noise", "noise"), ("--sim-engine", "sim_engine"),
                           ("--zoo-timings", "zoo_timings")):
            if self._given(name) and not self.simulate:
                raise UsageError(f"{flag} applies to --simulate only",
                                 f"drop {flag}, or add --simulate")
        if self._given("zoo_timings") and self.models and Path(self.models).is_dir():
            raise UsageError("--zoo-timings applies to zoo models; bundles run for their own "
                             "profiles", "drop --zoo-timings, or give --models zoo names")

    def _given(self, name: str) -> bool:
        """Whether field `name` was set to other than its default (a default set explicitly
        cannot be told apart, and changes nothing)."""
        return getattr(self, name) != _FIELD_DEFAULTS[name]

    def _check_shaping(self) -> None:
        """Settings of another workload than the one replayed are refused, not ignored."""
        shaping = [("--trace", "trace", ("trace",)),
                   ("--start-minute", "start_minute", ("trace",)),
                   ("--rate-scale", "rate_scale", ("trace",)),
                   ("--target-rate", "target_rate", ("trace", "poisson")),
                   ("--arrivals", "arrivals", ("trace",)),
                   ("--map", "mapping", ("trace",)),
                   ("--rate", "rate", ("poisson",)),
                   ("--concurrency", "concurrency", ("closed",)),
                   ("--think", "think_ns", ("closed",))]
        for flag, name, workloads_shaped in shaping:
            if self._given(name) and self.workload not in workloads_shaped:
                hint = ("a trace's rate is set with --target-rate R or --rate-scale X"
                        if flag == "--rate" and self.workload == "trace" else
                        f"drop it, or use --workload {' or '.join(workloads_shaped)}")
                raise UsageError(f"{flag} does not apply to the {self.workload} workload", hint)
        if self.rate is not None and self.target_rate is not None:
            raise UsageError("--rate and --target-rate both set the poisson workload's rate",
                             "give one of them")


_FIELD_DEFAULTS = {f.name: f.default for f in fields(ReplayConfig)}
FEWER_MODELS_HINT = ("pick at most that many of the controller's models with --models (a number, "
                     "ids, bundle names or patterns: --models 1000, --models 'resnet50*')")
# what --simulate serves when --models is not given
DEFAULT_MODELS = ",".join(DEFAULT_ZOO_MODELS)


def with_preset(name: str, **overrides) -> ReplayConfig:
    """A ReplayConfig for one of the paper's experiments; `overrides` (fields that are not None)
    win over the preset. Against a running controller the preset's workload applies to the
    controller's models, not to the models and workers it would have started."""
    settings = dict(workloads.preset(name).settings)
    if overrides.get("controller"):
        for key in ("models", "copies", "workers", "runtime"):
            settings.pop(key, None)
    settings.update({k: v for k, v in overrides.items() if v is not None})
    return ReplayConfig(**settings)


# Memory per simulated model instance, per closed-loop client (its request in flight and
# telemetry row) and per model on a GPU, measured with millions of each and rounded up: what
# refuses runs that cannot fit before they start.
BYTES_PER_MODEL = 4096
BYTES_PER_CLIENT = 256
BYTES_PER_GPU_MODEL = 1024  # the scheduler's estimates of one model on one GPU


def _zoo_model(name: str, copy: int, timings: str = "measured") -> tuple[ModelInfo, Estimates]:
    info, estimates = _zoo_template(name, timings)
    if copy:
        info = msgspec.structs.replace(info, model_id=f"{name}#{copy}")
    return info, estimates


@functools.lru_cache(maxsize=64)
def _zoo_template(name: str, timings: str) -> tuple[ModelInfo, Estimates]:
    """A zoo model's first instance; its copies share everything but the id (working their
    timings out once per copy made `--models 200000` take half a minute)."""
    import model_zoo

    from cw.serve.estimates import profile_estimates, zoo_profile

    entry = model_zoo.get(name)
    model_id = name
    import numpy as np

    sample = np.dtype(entry.input_dtype).itemsize * math.prod(entry.input_shape)
    inputs = [TensorInfo("input", entry.input_dtype, list(entry.input_shape), sample,
                         entry.index_limit)]
    outputs = [TensorInfo("output", "float32", list(entry.output_shape),
                          4 * math.prod(entry.output_shape))]
    profile = zoo_profile(name) if timings == "measured" else None
    if profile is not None:
        # as for a bundle with a profile: the simulated worker takes the p50, the scheduler
        # starts from the p99
        sizes = [b.batch_size for b in profile.batches]
        seed = profile_estimates(profile, sizes, "p99_ns", "zoo-profile")
        info = ModelInfo(model_id, name, profile.load.bytes, profile.load.pages, sizes, inputs,
                         outputs, seed.load_ns, seed.exec_ns, "profile")
        return info, profile_estimates(profile, sizes, "p50_ns", "zoo-profile")
    if entry.paper_exec_ms is None:
        raise UsageError(f"zoo model '{name}' has no published or measured timings to "
                         "simulate with",
                         "compile and profile it, then give --models a bundle directory")
    weights = int(entry.published_mb * 1e6)
    sizes = (1, 2, 4, 8, 16)
    exec_ns = {b: int(ms * MS) for b, ms in zip(sizes, entry.paper_exec_ms)}
    copy_ns = {b: max(1000, int(b * sample / 12.0)) for b in sizes}  # ~12 GB/s PCIe 3
    out_ns = {b: max(1000, int(b * 4000 / 12.0)) for b in sizes}
    info = ModelInfo(model_id, name, weights, math.ceil(weights / PAGE) + 1, list(sizes),
                     inputs, outputs, int(entry.paper_load_ms * MS), exec_ns, "paper")
    return info, Estimates(info.load_ns, exec_ns, copy_ns, out_ns, "paper")


def resolve_models(spec: str, copies: int, zoo_timings: str = "measured"
                   ) -> tuple[list[ModelInfo], dict[str, Estimates]]:
    """Model instances to serve: every bundle in a directory, or zoo names (simulated with the
    timings `zoo_timings` says: ZOO_TIMINGS), each `copies` times; or a number N: N instances
    cycling through the default zoo set (`copies` does not apply)."""
    infos, durations = [], {}
    if spec.strip().isdigit():
        count = int(spec)
        if count < 1:
            raise UsageError("--models 0: at least one model instance is needed")
        check_memory(count, BYTES_PER_MODEL, f"--models {count}",
                                  "model instances", "simulate fewer models")
        for k in range(count):
            info, est = _zoo_model(DEFAULT_ZOO_MODELS[k % len(DEFAULT_ZOO_MODELS)],
                                   k // len(DEFAULT_ZOO_MODELS), zoo_timings)
            infos.append(info)
            durations[info.model_id] = est
        return infos, durations
    path = Path(spec)
    if path.is_dir():
        from cw.serve.estimates import bundle_estimates
        from cw.serve.runtime.host import find_bundles, load_models
        from cw.serve.worker import model_infos

        models = load_models(find_bundles(path), copies, read_weights=False)
        estimates = {}  # per bundle: its copies share them
        for m, info in zip(models, model_infos(models)):
            est = estimates.get(id(m.bundle))
            if est is None:
                est = estimates[id(m.bundle)] = bundle_estimates(m.bundle, percentile="p50_ns")
            infos.append(info)
            durations[info.model_id] = est
        return infos, durations
    names = [n.strip() for n in spec.split(",") if n.strip()]
    check_memory(len(names) * copies, BYTES_PER_MODEL, f"--copies {copies:,} of {len(names)} "
                 "zoo model(s)", "model instances", "simulate fewer copies")
    for name in names:
        for k in range(copies):
            info, est = _zoo_model(name, k, zoo_timings)
            infos.append(info)
            durations[info.model_id] = est
    if not infos:
        raise UsageError("no models given", "--models DIR or --models resnet50,densenet121")
    return infos, durations


def check_output(out: Path, force: bool) -> None:
    if out.exists() and not force:
        raise UsageError(f"output {out} already exists", "pass --force or choose another --out")


@contextlib.contextmanager
def atomic_output(out: Path, force: bool):
    """A fresh directory beside `out` to write into; it becomes `out` (replacing it, with
    `force`) when the block ends, and is removed if the block fails: `out` is never
    half-written."""
    check_output(out, force)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as e:
        raise cannot_write(e, out.parent, "--out") from None
    try:
        with writing(out, "--out"):
            yield tmp
        os.chmod(tmp, 0o755)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def replay(config: ReplayConfig, progress: Callable[[str, dict], None] | None = None,
           on_series: Callable[[RunSeries], None] | None = None) -> dict:
    """Replays `config` into `config.out`; its summary. `on_series` gets the series its report
    plots: how side-by-side replays overlay runs without reading their CSVs back."""
    progress = progress or (lambda event, info: None)
    out = Path(config.out)
    check_output(out, config.force)  # before the work, not after it
    if config.simulate and config.controller:
        raise UsageError("--simulate runs in virtual time; it cannot drive a --controller",
                         "drop one of the two")
    trace = load_trace(config.trace) if config.workload == "trace" else None
    if trace is not None:
        config, note = config.fitted_to(len(trace.functions))
        if note:
            progress("note", {"text": note})

    def generate(model_ids: list[str], gpus: int | None = None):
        """Arrivals over `model_ids`; `gpus` serve them (a running controller's: the default
        rate follows them)."""
        gpus = gpus or (config.workers or 1) * config.gpus_per_worker
        target, rate_named = config.target_rate, None
        if target is None and config.rate_scale is None:
            target = 200.0 * gpus
            rate_named = f"the default rate, 200 r/s per GPU × {gpus} GPUs,"
        if config.workload == "poisson":
            return workloads.poisson(model_ids, config.rate or target, config.duration_s,
                                     config.seed, None if config.rate else rate_named)
        if config.workload == "closed":
            clients = config.concurrency * len(model_ids)
            check_memory(
                clients, BYTES_PER_CLIENT,
                f"--concurrency {config.concurrency} × {len(model_ids)} models", "clients",
                "lower --concurrency or use fewer models")
            return workloads.ClosedLoop(list(model_ids), config.concurrency,
                                        workloads.checked_duration_ns(config.duration_s),
                                        config.think_ns)
        if config.workload == "fig6":
            return workloads.fig6(model_ids, config.duration_s, config.seed)
        return arrivals_mod.generate(trace, model_ids, duration_s=config.duration_s,
                                     start_minute=config.start_minute,
                                     rate_scale=config.rate_scale, target_rate=target,
                                     arrivals=config.arrivals, mapping=config.mapping,
                                     seed=config.seed, rate_named=rate_named,
                                     fewer_models=FEWER_MODELS_HINT if config.controller
                                     else None)

    infos, durations = (resolve_models(config.models, config.copies, config.zoo_timings)
                        if config.simulate else ([], {}))
    if config.simulate:
        # the simulated scheduler keeps estimates for every model on every GPU
        gpus = config.workers * config.gpus_per_worker
        check_memory(gpus * len(infos), BYTES_PER_GPU_MODEL,
                                  f"{gpus} GPUs × {len(infos)} models", "GPU-model pairs",
                                  "simulate fewer --workers or models")
    arr = generate([m.model_id for m in infos]) if config.simulate else None
    with atomic_output(out, config.force) as tmp:
        wall = time.perf_counter()
        if config.simulate:
            requests, actions, engine = _simulate(config, infos, durations, arr, tmp, progress)
            runtime = "simulated"
            # where each instance's durations come from (summary and report say so)
            extra = {"models": len(infos), "sim_engine": engine,
                     "timings": dict(sorted(collections.Counter(
                         durations[m.model_id].source for m in infos).items()))}
        else:
            from cw.replay.live import run_live

            requests, actions, simulated, runtime, extra, arr = run_live(config, generate,
                                                                         progress, logs_to=tmp)
            if simulated:
                runtime = "simulated"
            telemetry = TelemetryLog(tmp, keep=False)
            for row in requests:
                telemetry.request(row)
            for row in actions:
                telemetry.action(row)
            telemetry.close()
        wall = time.perf_counter() - wall
        # one set of columns for the summary and the report (each built once, when needed)
        requests, actions = requests_of(requests), actions_of(actions)
        summary = summarize(
            requests, actions, duration_ns=arr.duration_ns, runtime=runtime,
            scheduler=config.scheduler, trace=_workload_label(config, trace, arr),
            seed=config.seed, slo_ns=config.slo_ns, actions_seen=config.controller is None,
            # a running controller's workers and GPUs come in `extra` (None: not known)
            extra={"name": out.name, "workers": config.workers,
                   "gpus": config.workers and config.workers * config.gpus_per_worker,
                   **extra,
                   "workload": config.workload,
                   "rate_scale": round(float(arr.rate_scale), 6), "arrivals": config.arrivals,
                   "map": config.mapping, "start_minute": config.start_minute,
                   "wall_s": round(wall, 3),
                   # virtual time over wall time: meaningful for a simulation only
                   "speedup": round(arr.duration_ns / 1e9 / wall, 1)
                   if wall and config.simulate else None})
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        series = run_series(Run(tmp, summary, requests, actions), *shared_axis([summary]))
        if on_series is not None:
            on_series(series)
        write_report([series], tmp / "report.html")
    return summary


def _simulate(config: ReplayConfig, infos, durations, arr, tmp: Path, progress):
    """One simulation, its telemetry written to `tmp`: (requests, actions, engine), the
    telemetry as rows (Python simulator) or columns (compiled: no row objects), and which
    simulator ran it."""
    from cw.replay import fastsim
    from cw.replay.simulate import SimConfig, Simulation

    spec = parse_scheduler(config.scheduler)
    scheduler_config = spec.config(SchedulerConfig())
    sim_config = SimConfig(config.workers, config.gpus_per_worker, config.pages_per_gpu,
                           noise=config.noise, seed=config.seed)
    progress("start", {"requests": arr.count, "duration_ns": arr.duration_ns})
    advance = lambda n, t: progress("advance", {"requests": n, "virtual_ns": t})  # noqa: E731
    closed = isinstance(arr, workloads.ClosedLoop)
    engine = fastsim.engine_for(spec.policy, config.sim_engine)
    if engine == "compiled":
        telemetry = TelemetryLog(tmp, keep=False)
        out = fastsim.run(scheduler_config, infos, durations, sim_config, config.slo_ns,
                          telemetry, scheduler=spec,
                          times_ns=None if closed else arr.times_ns,
                          model_names=None if closed else arr.models,
                          model_index=None if closed else arr.model_index,
                          closed=arr if closed else None, progress=advance)
        telemetry.close()
        return out.requests, out.actions, engine
    telemetry = TelemetryLog(tmp)
    sim = Simulation(make_scheduler(spec, scheduler_config), infos, durations,
                     sim_config, telemetry)
    if closed:
        sim.run_closed(arr, config.slo_ns, progress=advance)
    else:
        sim.run(arr.times_ns, [arr.models[i] for i in arr.model_index], config.slo_ns,
                progress=advance)
    telemetry.close()
    return telemetry.requests, telemetry.actions, engine


def _workload_label(config: ReplayConfig, trace, arr) -> str:
    if config.workload == "trace":
        return f"{config.trace} ({trace.name}, {len(trace.functions)} functions)"
    if config.workload == "closed":
        think = f", {arr.think_ns / 1e6:g} ms think time" if arr.think_ns else ""
        return f"closed loop ({arr.concurrency} clients × {len(arr.models)} models{think})"
    if config.workload == "poisson":
        return f"poisson ({arr.offered_rps:.0f} r/s over {len(arr.models)} models)"
    return f"fig6 (1 model at 200 r/s + 1,000 r/s over up to {len(arr.models) - 1} models)"
