"""Virtual-time simulation: the real scheduler code with simulated workers, no sockets and no
sleeping. Time jumps from event to event, so hours of trace take minutes.

The simulated worker follows the live worker's rules: per GPU one weights executor and one EXEC
executor, each starting an action at max(arrival, earliest, previous end); refusing it when that
is after latest (TOO_LATE); NO_PAGES when the cache is short; an INFER whose model is still being
loaded waits for the load inside its window. Durations come from each bundle's estimates (its
profile, else the paper's figures), with optional noise. Every row it produces says simulated.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field

from cw.serve.estimates import Estimates
from cw.serve.protocol import REQUEST_STATUS_NAME, STATUS_NAME, ModelInfo, RequestStatus, Status
from cw.serve.scheduler.base import (ACTION_KIND, ActionResult, Finish, GpuInfo, Request, Scheduler,
                                     SendInfer, SendLoad, SendUnload, WorkerInfo)
from cw.serve.telemetry import ActionRow, RequestRow, TelemetryLog

_ARRIVAL, _RESULT, _TICK = 0, 2, 3  # at one instant: arrivals, then results, then ticks


@dataclass
class _SimGpu:
    pages: int
    free_pages: int
    weights_free_ns: int = 0
    exec_free_ns: int = 0
    ready_ns: dict[str, int] = field(default_factory=dict)  # resident model -> usable from
    busy_ns: int = 0


@dataclass(frozen=True)
class SimConfig:
    workers: int = 1
    gpus_per_worker: int = 1
    pages_per_gpu: int = 1376            # 21.5 GiB of 16 MiB pages, as Clockwork on a V100
    network_ns: int = 100_000            # one way, controller ↔ worker
    noise: float = 0.0                   # relative std of simulated durations
    seed: int = 0


class Simulation:
    def __init__(self, scheduler: Scheduler, models: list[ModelInfo],
                 durations: dict[str, Estimates], config: SimConfig = SimConfig(),
                 telemetry: TelemetryLog | None = None):
        self.scheduler = scheduler
        self.models = {m.model_id: m for m in models}
        self.durations = durations
        self.config = config
        self.telemetry = telemetry or TelemetryLog()
        self.rng = random.Random(config.seed)
        self.gpus = {(w, g): _SimGpu(config.pages_per_gpu, config.pages_per_gpu)
                     for w in range(1, config.workers + 1) for g in range(config.gpus_per_worker)}
        self.events: list = []
        self._seq = itertools.count()
        self.requests: dict[int, Request] = {}
        self.actions: dict[int, int] = {}  # action id -> when it was sent
        self.now = 0
        self._next_tick: int | None = None
        self._closed = None  # a ClosedLoop while run_closed drives the simulation

    def _push(self, t: int, kind: int, payload) -> None:
        heapq.heappush(self.events, (t, kind, next(self._seq), payload))

    def _noisy(self, ns: int) -> int:
        if not self.config.noise:
            return ns
        return max(1, int(ns * (1 + self.rng.gauss(0, self.config.noise))))

    # --- driving -------------------------------------------------------------------------
    def run(self, arrival_times_ns, model_names, slo_ns: int, progress=None) -> TelemetryLog:
        for w in range(1, self.config.workers + 1):
            info = WorkerInfo(w, f"sim{w}", [GpuInfo(g, self.config.pages_per_gpu, 16 << 20)
                                             for g in range(self.config.gpus_per_worker)],
                              list(self.models.values()), simulated=True)
            self._apply(self.scheduler.worker_joined(0, info))
        self._apply(self.scheduler.tick(0))
        arrivals = zip(_as_ints(arrival_times_ns), model_names)
        rid = itertools.count(1)
        never = _NEVER
        pending_arrival = next(arrivals, None)
        next_arrival_ns = pending_arrival[0] if pending_arrival is not None else never
        processed = 0
        dirty = False  # scheduler events since its last tick
        events = self.events
        pop = heapq.heappop
        while pending_arrival is not None or events:
            # interleave arrivals lazily: millions of them need not sit in the heap at once
            if pending_arrival is not None and (not events or next_arrival_ns <= events[0][0]):
                self.now = next_arrival_ns
                self._arrive(next(rid), pending_arrival[1], slo_ns)
                dirty = True
                pending_arrival = next(arrivals, None)
                next_arrival_ns = pending_arrival[0] if pending_arrival is not None else never
                processed += 1
                if progress is not None and processed % 5000 == 0:
                    progress(processed, self.now)
            else:
                t, kind, _, payload = pop(events)
                self.now = t
                if kind == _RESULT:
                    self._result(*payload)
                elif kind == _ARRIVAL:  # a closed-loop client's next request
                    self._arrive(next(rid), payload, slo_ns)
                    processed += 1
                    if progress is not None and processed % 5000 == 0:
                        progress(processed, self.now)
                else:
                    self._next_tick = None
                dirty = True
            # One tick after every event of this instant, as the live controller ticks once per
            # loop iteration after handling what arrived.
            if dirty:
                nxt = events[0][0] if events else never
                if next_arrival_ns < nxt:
                    nxt = next_arrival_ns
                if nxt > self.now:
                    self._apply(self.scheduler.tick(self.now))
                    dirty = False
                    self._schedule_tick(nxt)
        if progress is not None:
            progress(processed, self.now)
        return self.telemetry

    def run_closed(self, loop, slo_ns: int, progress=None) -> TelemetryLog:
        """`loop.concurrency` clients per model, each sending its next request a round trip
        (plus think time) after its previous one is answered, until `loop.duration_ns`."""
        self._closed = loop
        for i, model in enumerate(loop.models):
            for c in range(loop.concurrency):
                # staggered by a microsecond: clients started together, not in one instant
                self._push((i * loop.concurrency + c) * 1_000, _ARRIVAL, model)
        return self.run([], [], slo_ns, progress)

    def _arrive(self, request_id: int, model: str, slo_ns: int) -> None:
        req = Request(request_id, model, 1, self.now, self.now + slo_ns)
        self.requests[request_id] = req
        self._apply(self.scheduler.request_arrived(self.now, req))

    def _schedule_tick(self, next_event_ns: int) -> None:
        """A tick at the scheduler's next wake-up, unless an event comes first: the tick after
        that event asks again (most wake-ups, e.g. the answer guard's, are moved or dropped by
        then, and a tick nobody needs any more costs as much as one that is needed)."""
        wake = self.scheduler.next_wakeup_ns(self.now)
        if wake is not None and wake < next_event_ns and (self._next_tick is None
                                                          or wake < self._next_tick):
            self._next_tick = wake
            self._push(wake, _TICK, None)

    def _apply(self, decisions) -> None:
        for d in decisions:
            if type(d) is Finish:
                self._finish(d)
            else:
                self.actions[d.action_id] = self.now
                # Every action takes the same time to reach its worker, so actions arrive in the
                # order they were sent, and only arrivals change a simulated worker's state:
                # handling one now, as of its arrival time, gives the result it would get then,
                # without an event of its own.
                self._deliver(d, self.now + self.config.network_ns)

    # --- the simulated worker ------------------------------------------------------------
    def _deliver(self, d, t: int) -> None:
        """The worker's side of action `d`, arriving at `t`."""
        gpu = self.gpus.get((d.worker_id, d.gpu))
        est = self.durations[d.model]
        if isinstance(d, SendUnload):
            start = max(t, d.earliest_ns)
            if d.model in gpu.ready_ns:
                del gpu.ready_ns[d.model]
                gpu.free_pages += self.models[d.model].pages
            return self._reply(d, t, Status.OK, start, start, 0)
        if isinstance(d, SendLoad):
            start = max(t, d.earliest_ns, gpu.weights_free_ns)
            if start > d.latest_ns:
                return self._reply(d, t, Status.TOO_LATE, start, start, 0)
            if d.model in gpu.ready_ns:
                return self._reply(d, t, Status.ALREADY_LOADED, start, start, 0)
            pages = self.models[d.model].pages
            if pages > gpu.free_pages:
                return self._reply(d, t, Status.NO_PAGES, start, start, 0)
            dur = self._noisy(est.load_ns)
            gpu.free_pages -= pages
            gpu.weights_free_ns = start + dur
            gpu.ready_ns[d.model] = start + dur
            return self._reply(d, t, Status.OK, start, start + dur, dur)
        start = max(t + est.input_ns[d.batch_size], d.earliest_ns, gpu.exec_free_ns)
        ready = gpu.ready_ns.get(d.model)
        if ready is None:
            return self._reply(d, t, Status.NOT_LOADED, start, start, 0)
        start = max(start, ready)  # the live worker waits for an in-flight LOAD too
        if start > d.latest_ns:
            return self._reply(d, t, Status.TOO_LATE, start, start, 0)
        dur = self._noisy(est.exec_ns[d.batch_size])
        gpu.exec_free_ns = start + dur
        gpu.busy_ns += dur
        self._reply(d, t, Status.OK, start, start + dur, dur, extra=est.output_ns[d.batch_size])

    def _reply(self, d, t, status, start, end, device_ns, extra=0) -> None:
        result = ActionResult(d.action_id, status, start, end, device_ns)
        sent = max(end, t) + extra  # the worker sends it once the output is copied out
        self._push(sent + self.config.network_ns, _RESULT, (d, result, sent))

    # --- the controller's side -----------------------------------------------------------
    def _result(self, d, result: ActionResult, result_sent_ns: int) -> None:
        sent = self.actions.pop(d.action_id)
        infer = type(d) is SendInfer
        ran = result.status == Status.OK
        expected_end = d.earliest_ns + d.expected_ns
        self.telemetry.action(ActionRow(
            d.action_id, ACTION_KIND[type(d)], STATUS_NAME[result.status], d.worker_id, d.gpu,
            d.model, d.batch_size if infer else 0, len(d.request_ids) if infer else 0, sent,
            d.earliest_ns, d.latest_ns, d.expected_ns, expected_end,
            result.start_ns if ran else 0, result.end_ns if ran else 0, result.device_ns,
            result.device_ns - d.expected_ns if ran else 0,
            result.end_ns - expected_end if ran else 0, result_sent_ns, self.now, True))
        self._current = d
        self._apply(self.scheduler.result_returned(self.now, result))

    def _finish(self, f: Finish) -> None:
        req = self.requests.pop(f.request_id, None)
        if req is None:
            return
        batch, worker, gpu = 0, -1, -1
        if f.status == RequestStatus.OK:
            d = self._current  # the INFER whose result is being applied
            batch, worker, gpu = d.batch_size, d.worker_id, d.gpu
        if self._closed is not None:
            nxt = self.now + 2 * self.config.network_ns + self._closed.think_ns
            if nxt < self._closed.duration_ns:
                self._push(nxt, _ARRIVAL, req.model)
        latency = self.now - req.arrival_ns
        met = f.status == RequestStatus.OK and self.now <= req.deadline_ns
        self.telemetry.request(RequestRow(
            req.request_id, req.model, req.n, req.arrival_ns, req.deadline_ns,
            req.deadline_ns - req.arrival_ns, self.now, latency, REQUEST_STATUS_NAME[f.status],
            met, batch, worker, gpu, f.action_id if f.action_id is not None else -1,
            f.cold_start, True))


_NEVER = 1 << 62  # later than any event


def _as_ints(times_ns):
    """Arrival times as Python ints, converted in chunks: a numpy array of millions is not
    copied into a list at once, and per-element numpy scalars are slow to compare."""
    if hasattr(times_ns, "tolist"):
        for i in range(0, len(times_ns), 65536):
            yield from times_ns[i:i + 65536].tolist()
    else:
        for t in times_ns:
            yield int(t)
