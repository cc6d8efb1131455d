"""`cw serve` as a library: a controller in this process and local worker processes serving one
folder of bundles.

    from cw.serve.local import LocalServeConfig, LocalServing
    with LocalServing(LocalServeConfig(models_dir="bundles", runtime="simulated")) as serving:
        Client(serving.clients_address).infer("mlp", x)

Everything that can be checked before a process starts is (`prepare`): the folder, bundle
names, the memory copies need, the bundles' targets against the runtime, the GPUs; a worker's
dying words would otherwise be the first a user hears of it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cw.errors import CwError, DeviceError, UsageError
from cw.serve.controller import ControllerConfig
from cw.serve.restarts import RestartConfig, RestartPlan, WorkerEvent

RUNTIMES = ("cpu", "simulated", "cuda")
DEMO_MODELS = ("mlp", "small_cnn")


@dataclass(frozen=True)
class LocalServeConfig:
    models_dir: Path | None = None  # None: the demo set, compiled for the CPU on first use
    workers: int = 1                # cuda: one per GPU, cuda:0 to cuda:N-1
    runtime: str = "cpu"            # cpu | simulated | cuda
    copies: int = 1                 # instances of each model per worker
    page_cache_bytes: int | None = None  # per device; None: the runtime's default
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    log_stalls_ns: int | None = None
    exec_graphs: bool = False       # cuda: EXEC as one CUDA graph (cw/serve/runtime/exec_graphs.py)
    join_timeout_s: float = 120.0
    # a worker that ends is started again (cw/serve/restarts.py says when, and when not)
    restarts: RestartConfig = field(default_factory=RestartConfig)

    def __post_init__(self):
        if self.runtime not in RUNTIMES:
            raise UsageError(f"unknown runtime '{self.runtime}'", "use cpu, simulated or cuda")
        if self.workers < 1 or self.copies < 1:
            raise UsageError(f"--workers {self.workers} and --copies {self.copies} must each "
                             "be ≥ 1")
        if self.page_cache_bytes is not None and self.page_cache_bytes <= 0:
            raise UsageError("--page-cache must be positive", "e.g. --page-cache 512MiB")
        if self.models_dir is None and self.runtime == "cuda":
            raise UsageError("the demo set is compiled for the CPU: --runtime cuda needs "
                             "--models", "give --models DIR of bundles compiled with "
                             "`cw compile --target cuda`")
        if self.exec_graphs and self.runtime != "cuda":
            raise UsageError("--exec-graphs is for --runtime cuda", "drop it, or serve on GPUs")


def demo_models_dir(say: Callable[[str], None] = lambda text: None) -> Path:
    """The default model set: tiny zoo models compiled for the CPU and profiled on first use
    (measured timings from the first request on, not the guesses an unprofiled model is
    planned on until it has run)."""
    import model_zoo
    from cw.bundle import MANIFEST, PROFILE_FILE
    from cw.compile.compiler import CompileConfig, compile_model
    from cw.profile.profiler import ProfileConfig, profile_bundle
    from cw.tvm_env import cache_dir

    root = cache_dir() / "demo-models"
    for name in DEMO_MODELS:
        if not (root / name / MANIFEST).is_file():
            say(f"compiling demo model {name} into {root} (first use only)")
            root.mkdir(parents=True, exist_ok=True)
            onnx_path = root / f"{name}.onnx.src"  # not a bundle: ignored by workers
            model_zoo.export(name, onnx_path)
            compile_model(onnx_path, root / name, CompileConfig(name=name, force=True))
        if not (root / name / PROFILE_FILE).is_file():  # (also a set compiled before profiles)
            say(f"profiling demo model {name} on this CPU (first use only)")
            try:  # a few seconds: the demo models take microseconds an EXEC
                profile_bundle(root / name, ProfileConfig(device="cpu", iterations=300,
                                                          load_iterations=20, max_time_s=2.0))
            except CwError as e:  # served all the same, on guessed timings (and tried again)
                say(f"warning: could not profile demo model {name}: {e.one_line()}")
    return root


def check_local_serving(models_dir: Path, runtime: str, workers: int, copies: int) -> list[str]:
    """What local workers would refuse, refused here: returns each worker's device."""
    from cw.bundle import read_manifest
    from cw.memory import check_instances
    from cw.serve.launch import local_devices
    from cw.serve.runtime.host import check_names, find_bundles

    bundles = find_bundles(models_dir)
    check_instances(len(bundles), copies, workers)
    check_names(bundles)
    if runtime in ("cpu", "cuda"):
        for path in bundles:
            kind = read_manifest(path).target.kind
            if kind != runtime:
                raise DeviceError(f"bundle {path} was compiled for {kind}, not {runtime}",
                                  f"use --runtime {kind} (or simulated), or recompile it with "
                                  f"--target {runtime}")
    return local_devices(runtime, workers)


class LocalServing:
    """A controller (a thread of this process) and `config.workers` worker processes."""

    def __init__(self, config: LocalServeConfig, say: Callable[[str], None] = lambda text: None):
        self.config = config
        self._say = say  # progress a user should see: the demo set's first-use compile
        self.models_dir: Path | None = None
        self.devices: list[str] = []
        self.earlier_run: Path | None = None  # where an earlier run's telemetry was set aside
        self.controller = None  # a ControllerThread once started
        self.workers = None     # WorkerProcesses once started
        self._restarts: RestartPlan | None = None
        self._noted_ended: set[int] = set()
        self._ids_before: dict[int, int] = {}  # worker -> the last controller id at its restart

    def prepare(self) -> "LocalServing":
        """The checks, and the demo set's compile on first use; nothing starts."""
        from cw.errors import creating
        from cw.serve.launch import set_aside_earlier_run

        log_dir = self.config.controller.log_dir
        if log_dir:  # before the demo set's first-use compile: a bad path fails at once
            with creating(log_dir, "--log-dir"):
                Path(log_dir).mkdir(parents=True, exist_ok=True)
                self.earlier_run = set_aside_earlier_run(Path(log_dir))
        self.models_dir = Path(self.config.models_dir or demo_models_dir(self._say))
        self.devices = check_local_serving(self.models_dir, self.config.runtime,
                                           self.config.workers, self.config.copies)
        return self

    def start(self, stop: threading.Event | None = None) -> bool:
        """Start the controller and the workers and wait until every worker has joined.
        False: `stop` was set first (nothing is served then; `close` still has to run)."""
        from cw.serve.launch import ControllerThread, WorkerProcesses, local_address

        if self.models_dir is None:
            self.prepare()
        c = self.config
        self.controller = ControllerThread(c.controller).start()
        self.workers = WorkerProcesses(
            local_address(self.controller.workers_address), self.models_dir, c.workers,
            "simulated" if c.runtime == "simulated" else "tvm", self.devices, c.copies,
            page_cache=None if c.page_cache_bytes is None else str(c.page_cache_bytes),
            log_dir=c.controller.log_dir,
            log_stalls=f"{c.log_stalls_ns}ns" if c.log_stalls_ns is not None else None,
            key_file=c.controller.key_file, exec_graphs=c.exec_graphs)
        joined = self.workers.wait_until_joined(self.controller, timeout_s=c.join_timeout_s,
                                                stop=stop)
        self._restarts = RestartPlan(c.restarts, c.workers, time.monotonic())
        return joined

    def step(self, now_s: float) -> list[WorkerEvent]:
        """One look at the workers (`now_s`: time.monotonic()): those that ended since the
        last look, and whether they are started again; those started again now; those that
        joined the controller again."""
        from cw.serve.launch import ended_how

        if self._restarts is None:
            return []
        events, plan, procs = [], self._restarts, self.workers
        for i, proc in enumerate(procs.procs):
            if i not in self._noted_ended and proc.poll() is not None:
                self._noted_ended.add(i)
                # the controller hears of it now rather than after seconds of silence (its
                # successor, started a second later at the earliest, joins under a new id)
                ctl = self.controller.controller
                for wid, w in list(ctl.workers.items()):
                    if w.name == f"local-{i}":
                        ctl.worker_process_ended(wid, ended_how(proc.returncode))
                what = plan.ended(i, now_s, proc.returncode)
                where = (f" (its log: {procs.log_of(i)})" if self.config.controller.log_dir
                         else "")
                events.append(WorkerEvent(i, "ended", f"{procs.ended()[i]}{where}; "
                                          f"{self.serving_workers()} of {len(procs.procs)} "
                                          f"worker(s) running; {what}"))
        for i in plan.due(now_s):
            self._ids_before[i] = max(self.controller.controller.workers, default=0)
            procs.restart(i)
            self._noted_ended.discard(i)
            n = plan.started(i, now_s)
            events.append(WorkerEvent(i, "restarted", f"worker {i} started again (restart {n})"))
        waiting = plan.waiting()
        if waiting:
            joined = list(self.controller.controller.workers.items())  # (another thread's)
            for i in waiting:
                if any(w.name == f"local-{i}" and wid > self._ids_before.get(i, 0)
                       for wid, w in joined) and plan.joined(i):
                    events.append(WorkerEvent(i, "rejoined", f"worker {i} joined again"))
        return events

    def serving_workers(self) -> int:
        """Workers running now (joined or joining)."""
        return sum(proc.poll() is None for proc in self.workers.procs) if self.workers else 0

    def down(self) -> bool:
        """Every worker has ended and none will be started again."""
        return self._restarts is not None and \
            len(self._restarts.given_up()) == len(self.workers.procs)

    @property
    def clients_address(self) -> str:
        """Where clients connect (a local address even when listening on all interfaces)."""
        from cw.serve.launch import local_address
        return local_address(self.controller.clients_address)

    @property
    def workers_address(self) -> str:
        from cw.serve.launch import local_address
        return local_address(self.controller.workers_address)

    @property
    def metrics_port(self) -> int | None:
        return self.controller.metrics_port

    def served(self) -> dict:
        """The joined workers' models: {model id: ModelInfo}."""
        return self.controller.controller.scheduler.models()

    def ended(self) -> dict[int, str]:
        """Workers that have exited on their own so far: how each ended, in words."""
        return self.workers.ended() if self.workers is not None else {}

    def close(self) -> None:
        if self.controller is not None:
            # a worker stopped mid-registration has no id to say Leaving with: the controller
            # finds it gone once it answers, which here is expected, not a warning
            self.controller.controller.workers_stopping = True
        if self.workers is not None:
            self.workers.stop()
        if self.controller is not None:
            self.controller.close()

    def __enter__(self) -> "LocalServing":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()
