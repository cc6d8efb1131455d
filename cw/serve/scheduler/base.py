"""The scheduler interface and the state every policy shares.

A scheduler is fed events — a worker joined or left, a request arrived, a result returned — each
with the current time, and `tick(now_ns)`; every call returns `Decision`s for the caller (the
controller's network layer, or the virtual-time simulator) to carry out. It never touches a
socket, a thread or a clock, so a test drives it with a fake clock advanced by hand.

Events only update state and answer what they can answer at once (a request that cannot meet its
deadline, the requests of a finished INFER); all planning happens in `tick`, which the caller runs
after a batch of events. The controller ticks once per loop iteration however many messages
arrived, so planning costs per tick, not per request.

Requests and actions are referred to by id; payloads (input and output bytes) stay with the
caller, which knows from `SendInfer.request_ids` which requests an action carries, in order.
"""

from __future__ import annotations

import collections
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import msgspec

from cw.serve.protocol import ModelInfo, RequestStatus, Status

MS = 1_000_000


@dataclass(frozen=True)
class SchedulerConfig:
    schedule_ahead_ns: int = 5 * MS     # keep each GPU busy only this far into the future
    infer_slack_ns: int = 3 * MS        # at most this between an INFER's earliest and latest
    load_slack_ns: int = 10 * MS
    max_loads_in_flight: int = 2        # per GPU
    estimate_window: int = 10           # rolling window of measurements per estimate
    network_latency_ns: int = 200_000   # one-way controller→worker allowance
    # ... plus this per byte of an INFER's inputs: a batch's inputs travel with it and are
    # copied into pinned memory before EXEC can start. Measured on the H100 machine: a batch of
    # 16 resnet50 images (9.6 MB) sent 4.5 ms ahead never made its 3 ms window (1,500 TOO_LATE
    # in 20 s); ~0.8 ns/byte end to end through Python and ZeroMQ on loopback.
    input_ns_per_byte: float = 1.0
    # ... and per byte of inputs a worker reads from shared memory on the clients' host
    # (cw/serve/shm.py): one copy into pinned memory, no socket. Not yet measured on the GPU
    # machine; a 600 KB copy takes 0.04-0.1 ns/byte on the build machine: this leaves room.
    shm_input_ns_per_byte: float = 0.25
    # Between an INFER's planned end and its deadline: the output copy, the result's way back
    # and the controller's answer. 1 ms proved too thin on a loaded 2-core machine (an answer
    # now and then left a few hundred µs after its deadline).
    completion_margin_ns: int = 2_000_000
    # A margin widened by slow answers falls back to completion_margin_ns once no INFER result
    # has come from that worker for this long: a margin wider than the SLO rejects every
    # request, so no result would ever come to narrow it again (seen live on a GPU: one 47 ms
    # stall at start shut a 10 ms-SLO run down for good)
    margin_expiry_ns: int = 2_000_000_000
    # An INFER whose result has not come back this long before a request's deadline: that
    # request is answered TIMED_OUT at once and its result, should it still come, is dropped, so
    # that a client always hears by its deadline (a late answer is of no use to it). It must
    # exceed the time between two ticks (the controller ticks at least every millisecond).
    # Clockwork only; the baselines answer late, as the systems they stand for do.
    answer_guard_ns: int = 1_000_000
    # Sweeps over every queue cost time per tick; a tick runs them at most this often. A new
    # request is checked on arrival, so these only bound how soon a waiting request that became
    # infeasible is answered, and how soon a hot model gets another copy.
    reject_sweep_ns: int = 1_000_000
    replication_check_ns: int = 10_000_000
    # 1: plan each answer to reach its client, not only to leave the controller, by the
    # deadline: the way back the client says it has lately seen (Request.unseen_ns) comes off
    # the deadline, at most half the SLO. Clockwork only. Off until measured on the GPU: on the
    # 2-core build machine it cut answers late by the client's count ×2.6-11 at no goodput
    # where the SLO leaves room, but halved goodput where it does not (resnet50's 4.8 ms EXEC
    # at 10 ms; docs/benchmarks.md, 2026-11-29). 2: the earlier deadline only where it can be
    # met, else the deadline itself (the way back taken off is the most of 100 answers, which
    # most do not need): on 2 cores, between the two.
    plan_way_back: int = 0
    # 1: a worker's INFER windows widen to twice the latest start it has lately needed (the most
    # of its last LATE_START_WINDOW INFERs: EXEC start, or refusal, less earliest_ns), never
    # below infer_slack_ns and never past deadline less estimate. A worker that keeps time
    # keeps the tight window; one that the machine holds up (a loaded host: 7-11 ms behind
    # on the 2-core build machine) stops refusing, as TOO_LATE, every INFER it is sent, each
    # refusal a round trip that brought the requests it carried nearer their deadlines
    # (docs/benchmarks.md, "INFER windows that widen").
    adapt_slack: int = 1

    def __post_init__(self):
        from cw.errors import UsageError

        if min(self.schedule_ahead_ns, self.infer_slack_ns, self.load_slack_ns,
               self.completion_margin_ns, self.margin_expiry_ns, self.input_ns_per_byte,
               self.shm_input_ns_per_byte, self.answer_guard_ns) < 0:
            raise UsageError("scheduler durations must be non-negative")
        if self.max_loads_in_flight < 1 or self.estimate_window < 1:
            raise UsageError("max loads in flight and estimate window must be ≥ 1")


# --- events ----------------------------------------------------------------------------------

class GpuInfo(msgspec.Struct, frozen=True):
    index: int
    pages: int
    page_size: int


class WorkerInfo(msgspec.Struct, frozen=True):
    worker_id: int
    name: str
    gpus: list[GpuInfo]
    models: list[ModelInfo]
    simulated: bool = False
    shares_memory: bool = False  # reads inputs from the clients' shared memory (same host)


class Request(msgspec.Struct, frozen=True, gc=False):
    request_id: int
    model: str
    n: int
    arrival_ns: int
    deadline_ns: int
    by_reference: bool = False  # inputs in shared memory: a worker that shares it reads them
    unseen_ns: int = 0  # the way back its client has lately seen (InferRequest.unseen_ns, ≥ 0)


class ActionResult(msgspec.Struct, frozen=True, gc=False):
    """What the scheduler needs of a worker's Result (times on the controller's clock)."""
    action_id: int
    status: Status
    start_ns: int = 0     # EXEC start for INFER, copy start for LOAD
    end_ns: int = 0
    device_ns: int = 0    # measured duration of the main phase


# --- decisions -------------------------------------------------------------------------------

class _WeightsDecision(msgspec.Struct, frozen=True, gc=False):
    action_id: int
    worker_id: int
    gpu: int
    model: str
    earliest_ns: int
    latest_ns: int
    expected_ns: int


class SendLoad(_WeightsDecision, frozen=True, gc=False):
    pass


class SendUnload(_WeightsDecision, frozen=True, gc=False):
    pass


class SendInfer(msgspec.Struct, frozen=True, gc=False):
    action_id: int
    worker_id: int
    gpu: int
    model: str
    batch_size: int
    request_ids: list[int]  # in batch order
    earliest_ns: int
    latest_ns: int
    expected_ns: int


class Finish(msgspec.Struct, frozen=True, gc=False):
    """Answer a request. OK means: take its output from the result of `action_id`."""
    request_id: int
    status: RequestStatus
    message: str = ""
    action_id: int | None = None
    cold_start: bool = False


Decision = SendLoad | SendUnload | SendInfer | Finish
ACTION_KIND = {SendInfer: "infer", SendLoad: "load", SendUnload: "unload"}  # telemetry's kind


# --- shared state ----------------------------------------------------------------------------

class Estimator:
    """Rolling p99 of the last `window` measurements per key, seeded from profiles. Keys are
    (kind, worker_id, ...): a worker's are forgotten when it leaves."""

    def __init__(self, window: int):
        self.window = window
        self._samples: dict[tuple, collections.deque] = {}
        # The current estimate per key, recomputed on each observation; read-only for callers
        # (hot paths index it directly instead of calling get).
        self.value: dict[tuple, int] = {}
        # A worker that comes back joins under a new id: without this, a controller that runs
        # for weeks beside a restarting worker would keep every id's thousands of keys.
        self._keys_of: dict[int, list[tuple]] = {}

    def seed(self, key: tuple, value_ns: int) -> None:
        if key not in self._samples:
            if key not in self.value:
                self._keys_of.setdefault(key[1], []).append(key)
            self.value[key] = value_ns

    def observe(self, key: tuple, value_ns: int) -> None:
        samples = self._samples.get(key)
        if samples is None:
            if key not in self.value:
                self._keys_of.setdefault(key[1], []).append(key)
            samples = self._samples[key] = collections.deque(maxlen=self.window)
        samples.append(value_ns)
        n = len(samples)
        rank = min(n - 1, int(0.99 * n))
        # With up to 100 samples the p99 is the largest: no need to sort on every result.
        self.value[key] = max(samples) if rank == n - 1 else sorted(samples)[rank]

    def get(self, key: tuple) -> int:
        return self.value[key]

    def forget_worker(self, worker_id: int) -> None:
        for key in self._keys_of.pop(worker_id, ()):
            self.value.pop(key, None)
            self._samples.pop(key, None)

    def __len__(self) -> int:
        return len(self.value)


class RecentMax:
    """The largest of the last `window` values per key, exactly: a larger value takes over at
    once, and only the largest leaving the window makes it look at the rest."""

    def __init__(self, window: int):
        self.window = window
        self._values: dict = {}
        self.value: dict = {}  # key -> the largest; read-only for callers

    def forget(self, key) -> None:
        self._values.pop(key, None)
        self.value.pop(key, None)

    def observe(self, key, value: int) -> None:
        ring = self._values.get(key)
        if ring is None:
            ring = self._values[key] = collections.deque(maxlen=self.window)
        gone = ring[0] if len(ring) == self.window else None
        ring.append(value)
        top = self.value.get(key)
        if top is None or value >= top:
            self.value[key] = value
        elif gone == top:
            self.value[key] = max(ring)


class RollingQuantile:
    """The q-quantile of the last `window` values per key, re-sorted every `every` values
    (between, the value stands): a cheap, steady tail estimate of a noisy quantity."""

    def __init__(self, window: int, q: float, every: int):
        self.window, self.q, self.every = window, q, every
        self._values: dict = {}
        self._counts: dict = {}
        self.value: dict = {}  # key -> current estimate; read-only for callers

    def forget(self, key) -> None:
        for d in (self._values, self._counts, self.value):
            d.pop(key, None)

    def observe(self, key, value: int) -> None:
        window = self._values.get(key)
        if window is None:
            window = self._values[key] = collections.deque(maxlen=self.window)
        window.append(value)
        count = self._counts.get(key, 0) + 1
        self._counts[key] = count
        if count % self.every == 0 or count <= self.every:
            ordered = sorted(window) if count > self.every else None
            if ordered is None:  # first values: the largest so far, until a window sorts
                self.value[key] = max(value, self.value.get(key, value))
            else:
                self.value[key] = ordered[min(len(ordered) - 1, int(self.q * len(ordered)))]


@dataclass
class Gpu:
    worker_id: int
    index: int
    pages: int
    free_pages: int
    exec_free_ns: int = 0           # predicted time the GPU finishes its last planned EXEC
    weights_free_ns: int = 0        # predicted time the copy engine finishes its last LOAD
    loaded: dict[str, int] = field(default_factory=dict)   # model -> ready at (predicted) ns
    loads_in_flight: int = 0
    last_used_ns: dict[str, int] = field(default_factory=dict)
    busy_ns: int = 0                # planned EXEC time, for utilisation metrics
    shares_memory: bool = False     # its worker reads by-reference inputs from shared memory
    key: tuple[int, int] = field(init=False)  # (worker_id, index): built once, read per INFER

    def __post_init__(self):
        self.key = (self.worker_id, self.index)


class Scheduler(ABC):
    """Events in, decisions out."""

    name = "abstract"

    def __init__(self, config: SchedulerConfig):
        self.config = config

    @abstractmethod
    def worker_joined(self, now_ns: int, worker: WorkerInfo) -> list[Decision]: ...

    @abstractmethod
    def worker_left(self, now_ns: int, worker_id: int) -> list[Decision]: ...

    @abstractmethod
    def request_arrived(self, now_ns: int, request: Request) -> list[Decision]: ...

    @abstractmethod
    def result_returned(self, now_ns: int, result: ActionResult) -> list[Decision]: ...

    @abstractmethod
    def tick(self, now_ns: int) -> list[Decision]: ...

    def urgent(self, now_ns: int) -> list[Decision]:
        """What cannot wait for the next `tick`: a caller working through a burst of requests
        asks this between parts of it. By default the whole tick."""
        return self.tick(now_ns)

    def models(self) -> dict[str, ModelInfo]:
        """Servable models (present on some worker)."""
        return {}

    def model_info(self, model: str) -> ModelInfo | None:
        """One servable model (asked for every request: override with a lookup)."""
        return self.models().get(model)

    def queue_length(self) -> int:
        return 0

    def worker_windows(self, worker_id: int) -> tuple[int, int] | None:
        """The INFER slack and the completion margin the policy now plans a worker's INFERs
        with (both adapt to the worker), or None where it plans no such windows."""
        return None

    def next_wakeup_ns(self, now_ns: int) -> int | None:
        """The next time `tick` should run without an event (virtual-time callers)."""
        return now_ns + 1_000_000 if self.queue_length() else None
