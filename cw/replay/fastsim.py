"""The compiled simulator: `Simulation` (simulate.py) with `ClockworkScheduler` (clockwork.py)
or one of the baselines (baselines.py), in C++ (native/), 10-20x faster. It takes the same
decisions in the same order, so its telemetry is byte-identical to the Python simulator's
(tests/integration/test_fastsim.py checks this on several workloads per policy); the Python code
stays the reference and the live controller's.

`cw replay --simulate` uses it for every policy where it was built (pip builds it when a C++
compiler is present; otherwise cw installs without it). `--sim-engine python` forces the Python
simulator, e.g. to check a change to either against the other.
"""

from __future__ import annotations

import csv
import io
from typing import NamedTuple

import numpy as np

from cw.errors import UsageError
from cw.replay.columns import Columns, split_table
from cw.serve.protocol import REQUEST_STATUS_NAME, STATUS_NAME, ModelInfo, RequestStatus, Status
from cw.serve.scheduler import SchedulerSpec, make_scheduler, parse_scheduler
from cw.serve.scheduler.base import SchedulerConfig
from cw.serve.telemetry import REQUEST_COLUMNS, ACTION_COLUMNS, ActionRow, RequestRow, TelemetryLog

try:
    from cw.replay import _fastsim
except ImportError:  # built without a C++ compiler: the Python simulator serves
    _fastsim = None

SIM_ENGINES = ("auto", "compiled", "python")
ACTION_KINDS = ("infer", "load", "unload")  # the codes the compiled simulator writes

# native/ hard-codes these protocol values: fail loudly, not silently, if they move.
_EXPECTED = {Status.OK: 0, Status.TOO_LATE: 2, Status.NOT_LOADED: 3, Status.NO_PAGES: 4,
             Status.ALREADY_LOADED: 5, Status.BAD_INPUT: 7, Status.SHUTTING_DOWN: 12,
             RequestStatus.OK: 0, RequestStatus.REJECTED: 1, RequestStatus.TIMED_OUT: 2,
             RequestStatus.BAD_INPUT: 4, RequestStatus.ERROR: 6}
if any(int(k) != v for k, v in _EXPECTED.items()):  # pragma: no cover - a protocol change
    raise ImportError("cw/replay/native: status codes differ from cw.serve.protocol")
if len(REQUEST_COLUMNS) != 16 or len(ACTION_COLUMNS) != 21:  # pragma: no cover
    raise ImportError("cw/replay/native: telemetry columns differ from cw.serve.telemetry")


def available() -> bool:
    return _fastsim is not None


# native/scheduler.hpp's P_* codes
POLICIES = {"clockwork": 0, "fifo": 1, "batch-timeout": 2, "clipper": 3}


def engine_for(scheduler: str, engine: str) -> str:
    """Which simulator runs `scheduler` (a policy, or a spec like `clockwork:ahead=2ms`):
    "compiled" or "python"."""
    scheduler = scheduler.split(":")[0]
    if engine not in SIM_ENGINES:
        raise UsageError(f"unknown --sim-engine '{engine}'", f"use one of {', '.join(SIM_ENGINES)}")
    if engine == "python":
        return "python"
    if scheduler not in POLICIES:
        if engine == "compiled":
            raise UsageError(f"the compiled simulator has no policy '{scheduler}'",
                             "drop --sim-engine or use --sim-engine auto")
        return "python"
    if _fastsim is None:
        if engine == "compiled":
            raise UsageError("the compiled simulator was not built with this installation",
                             "reinstall cw where a C++ compiler (g++) is present, or use "
                             "--sim-engine auto")
        return "python"
    return "compiled"


def run(scheduler_config: SchedulerConfig, models: list[ModelInfo], durations: dict,
        sim_config, slo_ns: int, telemetry: TelemetryLog, *,
        scheduler: str | SchedulerSpec = "clockwork",
        times_ns=None, model_names=None, model_index=None, closed=None,
        progress=None) -> Output:
    """One simulation, as `Simulation(make_scheduler(scheduler, scheduler_config), ...)
    .run(times_ns, model_names, slo_ns)` or (with `closed`, a workloads.ClosedLoop)
    `.run_closed(closed, slo_ns)`. Rows go to `telemetry` (its files, and its lists where it
    keeps rows); the return value has them as columns too. With `model_index`, request i is for
    `model_names[model_index[i]]` (no list of millions of names to build)."""
    if _fastsim is None:
        raise UsageError("the compiled simulator was not built", "use the Python simulator")
    spec = parse_scheduler(scheduler) if isinstance(scheduler, str) else scheduler
    engine_for(spec.policy, "compiled")
    policy = _policy(spec, scheduler_config)
    c, s = spec.config(scheduler_config), sim_config
    config = (c.schedule_ahead_ns, c.infer_slack_ns, c.load_slack_ns, c.max_loads_in_flight,
              c.estimate_window, c.network_latency_ns, float(c.input_ns_per_byte),
              c.completion_margin_ns, c.margin_expiry_ns, c.answer_guard_ns, c.reject_sweep_ns,
              c.replication_check_ns, s.workers, s.gpus_per_worker, s.pages_per_gpu,
              s.network_ns, float(s.noise), _seed_words(s.seed), slo_ns, c.adapt_slack)
    position = {m.model_id: i for i, m in enumerate(models)}
    names = [m.model_id for m in models]
    rank = {n: i for i, n in enumerate(sorted(names))}
    entries: dict[tuple, tuple] = {}  # copies of one model share their entry
    table = []
    for m in models:
        est = durations[m.model_id]
        key = (m.bundle, m.pages, m.load_ns, id(m.exec_ns), id(m.batch_sizes), id(m.inputs),
               id(est))
        entry = entries.get(key)
        if entry is None:
            entry = entries[key] = _model_entry(m, est)
        table.append((*entry, rank[m.model_id]))
    if closed is not None:
        times, index = b"", b""
        loop = (closed.concurrency, closed.think_ns, closed.duration_ns,
                [position[m] for m in closed.models])
    else:
        times = np.ascontiguousarray(times_ns, dtype=np.int64).tobytes()
        if model_index is None:
            index = np.fromiter(map(position.__getitem__, model_names), dtype=np.int32,
                                count=len(model_names))
        else:
            table_index = np.array([position[m] for m in model_names], dtype=np.int32)
            index = table_index[np.asarray(model_index)]
        index = np.ascontiguousarray(index, dtype=np.int32).tobytes()
        loop = None
    sink = _Sink(telemetry, names)
    fields = ([_csv_field(n) for n in names], [_csv_field(n) for n in sink.request_status],
              [_csv_field(n) for n in sink.action_status], [_csv_field(n) for n in ACTION_KINDS])
    end_ns = _fastsim.run(config, table, times, index, loop, progress, sink, fields, policy)
    return Output(end_ns, sink.columns("requests"), sink.columns("actions"))


def _seed_words(seed: int) -> list[int]:
    """random.Random(seed)'s key: abs(seed) in 32-bit words, least significant first."""
    n, words = abs(int(seed)), []
    while True:
        words.append(n & 0xFFFFFFFF)
        n >>= 32
        if not n:
            return words


def _csv_field(text: str) -> bytes:
    """`text` as the csv module writes it in a row (quoted only where it must be)."""
    buf = io.StringIO()
    csv.writer(buf).writerow([text, ""])
    return buf.getvalue()[:-len(",\r\n")].encode()


def _policy(spec: SchedulerSpec, config: SchedulerConfig) -> tuple:
    """native/scheduler.hpp's Policy: the code, and the baselines' parameters as make_scheduler
    sets them."""
    s, code = make_scheduler(spec, config), POLICIES[spec.policy]
    if spec.policy == "batch-timeout":
        return code, s.max_batch, s.max_queue_delay_ns, 0, 0, 0.0
    if spec.policy == "clipper":
        return code, 0, 0, s.slo_ns, s.aimd_step, float(s.backoff)
    return code, 0, 0, 0, 0, 0.0


def _model_entry(m: ModelInfo, est) -> tuple:
    largest = m.batch_sizes[-1]

    def by_size(d):
        return [int(d.get(b, 0)) for b in range(largest + 1)]

    exec_items = [v for b, ns in m.exec_ns.items() for v in (int(b), int(ns))]
    return (m.pages, list(m.batch_sizes), m.load_ns, exec_items,
            sum(t.sample_bytes for t in m.inputs), est.load_ns, by_size(est.exec_ns),
            by_size(est.input_ns), by_size(est.output_ns))


class Output(NamedTuple):
    end_ns: int          # virtual time the simulation ended at
    requests: Columns    # the telemetry, column by column (cw/replay/columns.py)
    actions: Columns


class _Sink:
    """Takes the core's chunks: the CSV text it formatted goes to the files as it is, the int64
    rows are kept as narrow columns for the summary and report, and become telemetry row objects
    only where the log keeps rows (`TelemetryLog(keep=True)`: millions of objects in a long
    run)."""

    def __init__(self, telemetry: TelemetryLog, names: list[str]):
        self.telemetry = telemetry
        self.names = names
        self.request_status = _by_code(REQUEST_STATUS_NAME)
        self.action_status = _by_code(STATUS_NAME)
        self.chunks: dict[str, list[dict]] = {"requests": [], "actions": []}

    def columns(self, kind: str) -> Columns:
        chunks = self.chunks[kind]
        count = sum(len(c["model"]) for c in chunks)
        if kind == "requests":
            return Columns(RequestRow, count, chunks=chunks,
                           codes={"model": self.names, "status": self.request_status})
        return Columns(ActionRow, count, chunks=chunks,
                       codes={"model": self.names, "status": self.action_status,
                              "kind": list(ACTION_KINDS)})

    def __call__(self, kind: str, data: bytes, text: bytes) -> None:
        text = text.decode()
        width = len(REQUEST_COLUMNS if kind == "requests" else ACTION_COLUMNS)
        self.chunks[kind].append(split_table(np.frombuffer(data, dtype=np.int64)
                                             .reshape(-1, width),
                                             RequestRow if kind == "requests" else ActionRow))
        if not self.telemetry.keep:
            self.telemetry.extend(kind, [], text)
            return
        if kind == "requests":
            cols = _columns(data, len(REQUEST_COLUMNS))
            names, status = self.names, self.request_status
            cols[1] = [names[i] for i in cols[1]]
            cols[8] = [status[i] for i in cols[8]]
            for j in (9, 14, 15):
                cols[j] = [bool(v) for v in cols[j]]
            self.telemetry.extend("requests", list(map(RequestRow, *cols)), text)
        else:
            cols = _columns(data, len(ACTION_COLUMNS))
            names, status = self.names, self.action_status
            cols[1] = [ACTION_KINDS[i] for i in cols[1]]
            cols[2] = [status[i] for i in cols[2]]
            cols[5] = [names[i] for i in cols[5]]
            cols[-1] = [bool(v) for v in cols[-1]]  # simulated
            self.telemetry.extend("actions", list(map(ActionRow, *cols)), text)


def _by_code(names: dict) -> list[str]:
    table = [""] * (max(int(s) for s in names) + 1)
    for status, name in names.items():
        table[int(status)] = name
    return table


def _columns(data: bytes, width: int) -> list[list[int]]:
    rows = np.frombuffer(data, dtype=np.int64).reshape(-1, width)
    return [rows[:, j].tolist() for j in range(width)]
