"""Starting serving processes: library functions behind `cw serve`, used by tests too.

- `ControllerThread`: a controller bound to its two addresses, running in a thread.
- `ControllerProcess`: the same in a process of its own (for load generators on this machine).
- `run_worker`: a worker process's main (load bundles, warm up, connect, serve).
- `WorkerProcesses`: local worker subprocesses for the all-in-one `cw serve`.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from cw.errors import (BundleError, DeviceError, HostError, ModelError, UsageError,
                       creating)
from cw.serve import protocol as p
from cw.serve.collector import freeze_heap
from cw.serve.controller import Controller, ControllerConfig
from cw.serve.metrics import Metrics, loop_summary, serve_metrics
from cw.serve.scheduler import SchedulerConfig, make_scheduler
from cw.serve.telemetry import TelemetryLog
from cw.serve.keys import read_key
from cw.serve.transport import ZmqDealer, ZmqRouter

log = logging.getLogger("cw.serve")


class ControllerThread:
    """A controller serving in a background thread; `.workers_address` / `.clients_address` are
    the bound endpoints (useful with port 0 / `*`)."""

    def __init__(self, config: ControllerConfig, keep_telemetry: bool = False):
        key = read_key(config.key_file) if config.key_file is not None else None
        self.workers_ep = ZmqRouter(config.workers_listen, p.Codec(p.FromWorker),
                                    p.Codec(p.ToWorker), lane=True, key=key)
        try:
            self.clients_ep = ZmqRouter(config.clients_listen, p.Codec(p.FromClient),
                                        p.Codec(p.ToClient),
                                        max_message_bytes=config.max_request_bytes, key=key)
        except Exception:
            self.workers_ep.close()
            raise
        self.metrics = Metrics(config.scheduler)
        self.metrics_server = None
        if config.metrics_port is not None:
            try:
                self.metrics_server = serve_metrics(self.metrics, config.metrics_port,
                                                    metrics_host(config.clients_listen))
            except OSError as e:
                self.workers_ep.close()
                self.clients_ep.close()
                raise UsageError(f"cannot serve metrics on port {config.metrics_port}: "
                                 f"{e.strerror}", "choose another --metrics-port") from None
        # written a few rows per loop iteration (Controller.serve_forever)
        try:
            with creating(config.log_dir, "--log-dir"):
                self.telemetry = TelemetryLog(config.log_dir, keep=keep_telemetry,
                                              write_batch=None, hold_on_error=True)
        except BaseException:
            self.workers_ep.close()
            self.clients_ep.close()
            if self.metrics_server is not None:
                self.metrics_server.shutdown()
                self.metrics_server.server_close()
            raise
        # the spec's own settings (clockwork:ahead=2ms) win over the config's
        scheduler = make_scheduler(config.scheduler,
                                   SchedulerConfig(schedule_ahead_ns=config.schedule_ahead_ns))
        self.controller = Controller(config, self.workers_ep, self.clients_ep, scheduler,
                                     self.telemetry, self.metrics)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.controller.serve_forever,
                                       args=(self.stop_event,), name="controller", daemon=True)

    @property
    def workers_address(self) -> str:
        return self.workers_ep.address

    @property
    def clients_address(self) -> str:
        return self.clients_ep.address

    @property
    def metrics_port(self) -> int | None:
        """The bound metrics port (the one --metrics-port 0 got), or None."""
        return None if self.metrics_server is None else self.metrics_server.server_address[1]

    def start(self) -> "ControllerThread":
        freeze_heap()
        self.thread.start()
        return self

    def wait_for_workers(self, count: int, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.controller.workers) < count:
            if time.monotonic() > deadline:
                from cw.errors import WorkersMissing
                raise WorkersMissing(f"only {len(self.controller.workers)} of {count} workers "
                                     f"joined within {timeout_s:g} s",
                                     "see the workers' log output")
            time.sleep(0.02)

    def close(self) -> None:
        self.stop_event.set()
        if self.thread.is_alive():
            self.thread.join(timeout=10)
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
        if self.thread.is_alive():
            # ZeroMQ sockets are not thread-safe: closed under a loop still polling them, libzmq
            # aborts the process; left open, they go with it
            log.warning("the controller loop did not stop within 10 s; its sockets stay open")
            return
        for ep in (self.workers_ep, getattr(self, "clients_ep", None)):
            if ep is not None:
                ep.close()


class ControllerProcess:
    """A controller in a process of its own, for a caller that also generates load: in one
    process the controller thread and the sender share the GIL, and arrivals went out ~1.5 ms
    late at p99 at 5,000 r/s instead of < 1 ms. Same interface as ControllerThread, except
    telemetry: it goes to `config.log_dir` (required), complete once `close` returns; and
    `loop`, after `close`: the controller loop's busy times (`metrics.loop_summary`), and
    `telemetry_lost`: how many rows never reached the files, and why (a full disk), if any."""

    loop: dict | None = None
    telemetry_lost: tuple[int, str] | None = None
    # set by `close` when the process had ended before it was asked to stop, or would not
    # stop: how it ended (its telemetry then lacks what it had not written)
    failure: str | None = None

    def __init__(self, config: ControllerConfig, start_timeout_s: float = 60.0):
        import multiprocessing as mp

        if config.log_dir is None:
            raise UsageError("a controller process needs a log directory for its telemetry",
                             "set ControllerConfig.log_dir")
        context = mp.get_context("spawn")  # no fork of a process that may hold threads
        self._conn, child = context.Pipe()
        self.process = context.Process(target=_controller_process_main, args=(config, child),
                                       name="cw-controller", daemon=True)
        self.process.start()
        child.close()
        try:
            self.workers_address, self.clients_address = self._call(None, start_timeout_s)
        except BaseException:
            self.close()
            raise

    def _call(self, request, timeout_s: float):
        from cw.errors import CwError

        if request is not None:
            self._conn.send(request)
        if not self._conn.poll(timeout_s):
            raise CwError(f"the controller process did not answer within {timeout_s:g} s",
                          "run `cw serve controller` by hand to see why")
        try:
            kind, *value = self._conn.recv()
        except EOFError:
            self.process.join(timeout=5)
            raise CwError(f"the controller process {ended_how(self.process.exitcode)}",
                          "run `cw serve controller` by hand to see why") from None
        if kind == "error":
            import cw.errors

            name, message, hint = value
            cls = getattr(cw.errors, name, CwError)
            raise (cls if isinstance(cls, type) and issubclass(cls, CwError) else CwError)(
                message, hint)
        return value

    def wait_for_workers(self, count: int, timeout_s: float = 60.0) -> None:
        self._call(("wait", count, timeout_s), timeout_s + 10)

    def close(self) -> None:
        if self._conn.closed:
            return
        if not self.process.is_alive():
            self.process.join()
            self.failure = ended_how(self.process.exitcode)
        else:
            try:
                self.loop, self.telemetry_lost = self._call(("stop",), 30)
            except Exception as e:  # noqa: BLE001 (already gone or stuck: terminate below)
                self.failure = f"did not stop when asked ({e})"
            self.process.join(timeout=5)
            if self.process.is_alive():
                self.process.terminate()
                self.process.join()
                self.failure = self.failure or "did not stop when asked"
        self._conn.close()


def metrics_host(clients_listen: str) -> str:
    """The interface the metrics endpoint listens on: the clients' one (a `cw serve` on
    127.0.0.1 does not publish its model names and counts to the network)."""
    import socket

    if not clients_listen.startswith("tcp://"):
        return "127.0.0.1"
    host = clients_listen[len("tcp://"):].rpartition(":")[0].strip("[]")
    if host in ("::1", "localhost"):
        return "127.0.0.1"
    if host in ("*", "", "::", "0.0.0.0") or ":" in host:  # (the HTTP server speaks IPv4)
        return "0.0.0.0"
    try:
        return socket.gethostbyname(host)
    except OSError:  # an interface name ZeroMQ takes (eth0): every interface, as before
        return "0.0.0.0"


def ended_how(exit_code: int | None) -> str:
    """A process's exit code in words: a negative code is the signal that ended it."""
    if exit_code is None:
        return "is still running"
    if exit_code >= 0:
        return f"exited with code {exit_code}"
    try:
        name = signal.Signals(-exit_code).name
    except ValueError:
        name = f"signal {-exit_code}"
    # the kernel's out-of-memory killer sends SIGKILL: the likeliest sender when nobody did
    return f"was killed by {name}" + (" (the out-of-memory killer sends it; see `dmesg`)"
                                      if exit_code == -signal.SIGKILL else "")


# the exit codes that say why a worker stopped (cw/cli/app.py), passed on by `cw serve`
WORKER_EXIT_CODES = frozenset(e.exit_code for e in (UsageError, ModelError, BundleError,
                                                    DeviceError, HostError))

_RESTART_MARK = "--- started again"  # in a worker's log, where a run after a restart begins

STALLS_LOG = "stalls.log"  # a controller process's stall lines, in its log directory


def set_aside_earlier_run(log_dir: Path) -> Path | None:
    """A serving run writes requests.csv, actions.csv, stalls.log and worker-N.log afresh in
    its --log-dir: those of an earlier run there move to earlier-<their time>/ first, rather
    than being overwritten. Returns where they went (None: there were none)."""
    found = [log_dir / name for name in ("requests.csv", "actions.csv", STALLS_LOG)]
    found = [f for f in found if f.exists()] + sorted(log_dir.glob("worker-*.log"))
    if not found:
        return None
    when = time.strftime("%Y%m%d-%H%M%S", time.localtime(max(f.stat().st_mtime
                                                              for f in found)))
    dest, n = log_dir / f"earlier-{when}", 1
    while dest.exists():
        n += 1
        dest = log_dir / f"earlier-{when}-{n}"
    dest.mkdir()
    for f in found:
        os.replace(f, dest / f.name)
    return dest


def _controller_process_main(config: ControllerConfig, conn) -> None:
    from cw.errors import CwError

    if config.log_stalls_ns is not None:
        stalls = logging.getLogger("cw.stalls")
        handler = logging.FileHandler(config.log_dir / STALLS_LOG)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        stalls.addHandler(handler)
        stalls.setLevel(logging.WARNING)
        stalls.propagate = False  # not onto the replay's console

    try:
        ctl = ControllerThread(config).start()
    except CwError as e:
        conn.send(("error", type(e).__name__, e.message, e.hint))
        return
    conn.send(("ready", ctl.workers_address, ctl.clients_address))
    try:
        while True:
            try:
                request = conn.recv()
            except EOFError:
                return  # the parent is gone
            if request[0] == "stop":
                return
            try:
                ctl.wait_for_workers(*request[1:])
                conn.send(("ok",))
            except CwError as e:
                conn.send(("error", type(e).__name__, e.message, e.hint))
    finally:
        ctl.close()  # shuts the controller down: telemetry files complete
        try:
            telemetry = ctl.telemetry
            lost = (telemetry.lost_rows, telemetry.failure()) if telemetry.lost_rows else None
            conn.send(("closed", loop_summary(ctl.metrics.loop_busy, ctl.metrics.intake), lost))
        except OSError:
            pass


def build_worker(config):
    """Load and verify bundles, allocate device memory, warm up; returns a Worker, unconnected."""
    from cw.serve.runtime.host import find_bundles, load_models
    from cw.serve.runtime.factory import make_runtimes
    from cw.serve.worker import Worker

    models = load_models(find_bundles(config.models_dir), config.copies,
                         read_weights=config.runtime != "simulated")
    runtimes = make_runtimes(config, models)
    key = read_key(config.key_file) if config.key_file is not None else None
    # (while the controller is away, pings and registrations are stale by the time it is back)
    dealer = ZmqDealer(config.controller, p.Codec(p.ToWorker), p.Codec(p.FromWorker), key=key,
                       hold_unsent=WORKER_HOLD_UNSENT)
    worker = Worker(config, dealer, models, runtimes)
    worker.warm_up()
    return worker


WORKER_HOLD_UNSENT = 16  # messages a worker keeps for a controller that is not there


def run_worker(config, stop: threading.Event | None = None) -> None:
    stop = stop or threading.Event()
    worker = build_worker(config)
    freeze_heap()
    log.info("worker %s: %d models on %s%s, connecting to %s", config.name, len(worker.models),
             ",".join(config.devices), ", EXEC as CUDA graphs" if config.exec_graphs else "",
             config.controller)
    try:
        worker.serve_forever(stop)
    finally:
        worker.transport.close()


def local_devices(runtime: str, workers: int) -> list[str]:
    """The device of each local worker (`cw serve`, a live `cw replay`): CUDA workers one GPU
    each, cuda:0 to cuda:N-1 (checked to be there: one line now, not a worker's dying words
    later); CPU and simulated workers share the host."""
    if runtime != "cuda":
        return ["cpu"] * workers
    from cw.serve.runtime.cuda_api import require_gpu

    for index in range(workers):
        require_gpu(index)
    return [f"cuda:{i}" for i in range(workers)]


class WorkerProcesses:
    """Local worker subprocesses (`python -m cw serve worker ...`), stopped together."""

    def __init__(self, controller: str, models_dir: Path, count: int, runtime: str,
                 devices: list[str], copies: int = 1, page_cache: str | None = None,
                 log_dir: Path | None = None, log_stalls: str | None = None,
                 key_file: Path | None = None, exec_graphs: bool = False):
        from cw.tvm_env import split_cores

        self.procs: list[subprocess.Popen] = []
        self._cmds: list[list[str]] = []
        self.log_dir = log_dir
        # Without a log directory the workers still write to files, in a temporary one, so that
        # a worker that dies at start can be quoted (`check`) rather than lost to /dev/null.
        self._scratch = None if log_dir else tempfile.TemporaryDirectory(prefix="cw-workers-")
        self._logs = log_dir or Path(self._scratch.name)
        # CPU workers on one machine get disjoint cores: each EXEC then runs on cores no other
        # worker's kernels compete for, which keeps its duration what the profile says.
        cores = split_cores(count) if runtime == "tvm" and set(devices) == {"cpu"} else None
        for i in range(count):
            device = devices[i % len(devices)]
            cmd = [sys.executable, "-m", "cw", "serve", "worker", "--controller", controller,
                   "--models", str(models_dir), "--device", device, "--runtime", runtime,
                   "--copies", str(copies), "--name", f"local-{i}",
                   "--parent-pid", str(os.getpid())]
            if cores:
                cmd += ["--cpus", ",".join(map(str, cores[i]))]
            if page_cache:
                cmd += ["--page-cache", page_cache]
            if log_stalls:
                cmd += ["--log-stalls", log_stalls]
            if key_file is not None:
                cmd += ["--key", str(key_file)]
            if exec_graphs:
                cmd += ["--exec-graphs"]
            self._cmds.append(cmd)
            self.procs.append(self._popen(i, "w"))

    def _popen(self, i: int, mode: str) -> subprocess.Popen:
        with open(self._logs / f"worker-{i}.log", mode) as out:
            if mode == "a":
                out.write(f"{_RESTART_MARK} {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n")
                out.flush()
            return subprocess.Popen(self._cmds[i], stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def restart(self, i: int) -> None:
        """Start worker `i`, which has ended, again; its log goes on in the same file."""
        if self.procs[i].poll() is None:
            raise RuntimeError(f"worker {i} is still running")
        self.procs[i] = self._popen(i, "a")

    def check(self) -> None:
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                from cw.errors import CwError
                error = CwError(self._ended(i),
                                f"see {self.log_dir / f'worker-{i}.log'}" if self.log_dir
                                else "run `cw serve worker` by hand to see its whole output")
                if proc.returncode in WORKER_EXIT_CODES:  # its reason's code: a device error, say
                    error.exit_code = proc.returncode
                raise error

    def ended(self) -> dict[int, str]:
        """The workers that have exited on their own so far: how each ended, in words."""
        return {i: self._ended(i) for i, proc in enumerate(self.procs)
                if proc.poll() is not None}

    def log_of(self, i: int) -> Path:
        return self._logs / f"worker-{i}.log"

    def _ended(self, i: int) -> str:
        code = self.procs[i].returncode
        # a worker that fails says why as its last words; one killed by a signal has none
        why = self._last_line(i) if code >= 0 else None
        return f"worker {i} {ended_how(code)}" + (f": {why}" if why else "")

    def _last_line(self, i: int) -> str | None:
        try:
            lines = (self._logs / f"worker-{i}.log").read_text(errors="replace").splitlines()
        except OSError:
            return None
        lines = [line for line in lines if line.strip()]
        # (a marker ends the log of the run before: that run's words are not this one's)
        return lines[-1].strip() if lines and not lines[-1].startswith(_RESTART_MARK) else None

    def wait_until_joined(self, controller, timeout_s: float = 120.0,
                          stop: threading.Event | None = None) -> bool:
        """Wait until every worker has joined `controller` (a ControllerThread or
        ControllerProcess); fail at once, with the worker's last words, if one exits first
        (a worker told to use a GPU this machine lacks, say). False: `stop` was set first
        (Ctrl-C while thousands of models were registering)."""
        from cw.errors import WorkersMissing

        deadline = time.monotonic() + timeout_s
        while stop is None or not stop.is_set():
            self.check()
            try:
                controller.wait_for_workers(len(self.procs),
                                            min(0.5, max(0.0, deadline - time.monotonic())))
                return True
            except WorkersMissing:
                if time.monotonic() >= deadline:
                    raise
        return False

    def stop(self, timeout_s: float = 10.0) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._scratch is not None:
            self._scratch.cleanup()


def stop_with_parent(parent_pid: int, stop: threading.Event, every_s: float = 0.5) -> None:
    """Set `stop` once the process that started this one is gone: a local worker of a `cw
    serve` or `cw replay` killed outright (SIGKILL, the OOM killer) would otherwise serve
    nobody forever. (Its parent's pid changes when it is re-parented.)"""
    def parent_gone() -> bool:
        if os.getppid() == parent_pid:
            return False
        log.warning("the process that started this worker (pid %d) is gone: stopping",
                    parent_pid)
        stop.set()
        return True

    def watch():
        while not stop.wait(every_s) and not parent_gone():
            pass

    if not parent_gone():
        threading.Thread(target=watch, name="cw-parent-watch", daemon=True).start()


def install_signal_stop(stop: threading.Event) -> None:
    """SIGTERM and SIGINT set `stop` (the loops then shut down cleanly)."""
    def handler(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def local_address(bound: str) -> str:
    """tcp://0.0.0.0:7000 → tcp://127.0.0.1:7000, for local processes to connect to."""
    return bound.replace("0.0.0.0", "127.0.0.1").replace("*", "127.0.0.1")


def with_log_dir(config: ControllerConfig, log_dir: Path | None) -> ControllerConfig:
    return replace(config, log_dir=log_dir) if log_dir else config


if os.environ.get("CW_LOG"):
    logging.basicConfig(level=os.environ["CW_LOG"].upper())
