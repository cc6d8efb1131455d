"""The controller's network layer: turns messages into scheduler events and decisions into
messages. All choice lives in the scheduler; this layer validates, keeps payloads, answers
clients, and writes telemetry and metrics.

`step(now_ns)` handles what arrived and runs one scheduler tick; `serve_forever` owns the loop.
Every client request gets exactly one response.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cw.serve import collector
from cw.serve import protocol as p
from cw.serve.clock import clock_domain
from cw.serve.intake import request_id_of, request_problem
from cw.serve.metrics import Metrics
from cw.serve.protocol import RequestStatus
from cw.serve.shm import ShmError, ShmReader, ShmRef, remove_stale, shm_domain
from cw.serve.scheduler.base import (ACTION_KIND, ActionResult, Finish, GpuInfo, Request, Scheduler,
                                     SendInfer, SendLoad, WorkerInfo)
from cw.serve.loop_errors import LoopErrors
from cw.serve.telemetry import ActionRow, RequestRow, TelemetryLog
from cw.serve.transport import Malformed, MultiPoller
from cw.units import format_duration_ns

log = logging.getLogger("cw.controller")

MS = 1_000_000
STRAY_TELL_NS = 10_000_000_000
LEFT_PEERS_KEPT = 1024  # workers' peers remembered after they left (a few each)
STOPPED = "stopped"  # why a worker that said it was Leaving left


@dataclass(frozen=True)
class ControllerConfig:
    workers_listen: str = "tcp://*:7000"
    clients_listen: str = "tcp://*:7001"
    scheduler: str = "clockwork"         # a spec: clockwork, batch-timeout:delay=5ms, ...
    schedule_ahead_ns: int = 5 * MS      # ... unless the spec sets it (clockwork:ahead=2ms)
    default_slo_ns: int = 100 * MS
    max_slo_ns: int = 3_600_000 * MS     # an hour: beyond that the SLO is surely a unit mistake
    metrics_port: int | None = None
    log_dir: Path | None = None
    worker_timeout_ns: int = 3_000 * MS  # silent this long (it pings every 0.5 s): gone
    # Messages handled per socket per loop iteration. Each iteration stamps one time for what it
    # handles and then ticks; a flood handled in one go would be planned with a stale clock.
    max_messages_per_step: int = 64
    # Client messages handled between two looks at the workers' socket. A burst of requests
    # (~25 µs each: 64 took 1-3 ms on the H200) held results back that long, and answers due
    # then left late (fig5 at 10-25 ms, 2026-11-27); between chunks the loop takes the results
    # that came meanwhile and ticks the scheduler (its answer guard too) at a fresh instant.
    client_messages_per_chunk: int = 16
    # How often to let go of clients' shared-memory segments that are gone (a stat per mapped
    # segment), and to remove those of clients that died, whose memory stays taken until then
    # (a listing of /dev/shm, which other programs may fill: less often).
    shm_sweep_ns: int = 2_000 * MS
    shm_stale_check_ns: int = 30_000 * MS
    # Telemetry rows written to --log-dir per loop iteration (~3 µs each), more when a backlog
    # builds up. Writing 200 ms worth at once held the loop up 7 ms at 5,000 r/s: longer than
    # the answer guard and the completion margin, so answers due meanwhile left late.
    telemetry_rows_per_step: int = 64
    log_stalls_ns: int | None = None  # log every stall longer than this (cw/serve/stalls.py)
    # The largest message a client may send (ZeroMQ drops the connection of one that sends
    # more): without a bound one bad client's 10 GB message would take the controller's memory.
    # Clients are told it and check their requests against it.
    max_request_bytes: int = 1 << 30
    # a key file (`cw serve keygen`): connections encrypted, and only its holders get in
    key_file: Path | None = None

    def __post_init__(self):
        from cw.errors import UsageError

        if self.telemetry_rows_per_step < 1:
            raise UsageError("telemetry rows per step must be ≥ 1")
        if self.max_messages_per_step < 1 or self.client_messages_per_chunk < 1:
            raise UsageError("messages per step and client messages per chunk must be ≥ 1")
        if self.default_slo_ns <= 0 or self.default_slo_ns > self.max_slo_ns:
            raise UsageError("--default-slo must be positive and at most an hour")
        if self.schedule_ahead_ns < 0:
            raise UsageError("--schedule-ahead must not be negative")
        if self.max_request_bytes < 1 << 20:
            raise UsageError(f"max request size {self.max_request_bytes} bytes is under 1 MiB")
        from cw.serve.scheduler import parse_scheduler

        parse_scheduler(self.scheduler)  # an unknown policy or setting: before anything starts
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise UsageError(f"--metrics-port {self.metrics_port} is not a port",
                             "give one within 1..65535 (0: any free port)")


@dataclass
class _Pending:
    peer: bytes
    client_request_id: int
    model: str
    n: int
    inputs: list  # memoryview (a view into the received frame) or ShmRef
    arrival_ns: int
    deadline_ns: int
    slo_ns: int


@dataclass
class _Worker:
    worker_id: int
    peer: bytes
    name: str
    simulated: bool
    models: dict[str, p.ModelInfo]
    last_seen_ns: int
    shares_shm: bool = False  # sees the controller's /dev/shm: gets inputs as ShmRef
    same_clock: bool = False  # reads the controller's CLOCK_MONOTONIC: offset pinned to 0
    result_peers: tuple = ()  # its threads' own connections, which send results only
    incarnation: int = 0      # Register.incarnation
    gpus: int = 0


@dataclass
class _Action:
    decision: object
    sent_ns: int
    result: p.Result | None = None
    samples: dict[int, int] = field(default_factory=dict)  # INFER: request id -> samples


class Controller:
    def __init__(self, config: ControllerConfig, workers_endpoint, clients_endpoint,
                 scheduler: Scheduler, telemetry: TelemetryLog | None = None,
                 metrics: Metrics | None = None):
        self.config = config
        self.workers_ep = workers_endpoint
        self.clients_ep = clients_endpoint
        self._poller = MultiPoller([workers_endpoint, clients_endpoint])
        self.scheduler = scheduler
        self.telemetry = telemetry or TelemetryLog(config.log_dir, keep=False, write_batch=None,
                                                   hold_on_error=True)
        self.metrics = metrics or Metrics(config.scheduler)
        self.workers: dict[int, _Worker] = {}
        self.by_peer: dict[bytes, int] = {}
        self.pending: dict[int, _Pending] = {}
        self.actions: dict[int, _Action] = {}
        # results of actions this controller never sent (a worker's from before a restart):
        # counted, and told at most every STRAY_TELL_NS
        self._stray_results, self._stray_told_ns = 0, -STRAY_TELL_NS
        # the peers of workers that left, newest last: a result can still come from one after
        # its Leaving (results travel on connections of their own), for an action marked LOST
        self._left_peers: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self._started_ns: int | None = None  # for busy fractions
        self.shm_domain = shm_domain()
        # the loop's clock is time.monotonic_ns (serve_forever): workers reading the same one
        # are told so and use offset 0; a caller driving another clock sets this to ""
        self.clock_domain = clock_domain()
        self.shm = ShmReader()
        self._last_shm_sweep_ns: int | None = None
        self._last_stale_check_ns: int | None = None
        self._worker_ids = itertools.count(1)
        self._request_ids = itertools.count(1)
        # (worker id, how) of workers whose process is known to have ended, from another
        # thread (`worker_process_ended`); a deque's append and popleft are atomic
        self._ended_processes: collections.deque = collections.deque()
        # set (from any thread) by whoever stops this controller's workers on purpose, as `cw
        # serve` does on Ctrl-C: their leaving, however it shows, is then no warning
        self.workers_stopping = False
        self._worker_handlers = {p.Register: self._on_register, p.Ping: self._on_ping,
                                 p.Result: self._on_result, p.Leaving: self._on_leaving,
                                 Malformed: self._on_worker_malformed}
        self._client_handlers = {p.InferRequest: self._on_infer, p.ListModels: self._on_models,
                                 Malformed: self._on_client_malformed}

    # --- loop ----------------------------------------------------------------------------
    def wait(self, timeout_ms: int) -> tuple[list, list]:
        """Wait up to `timeout_ms` for messages on either socket; what arrived, per socket."""
        return self._poller.poll(timeout_ms, self.config.max_messages_per_step)

    def step(self, now_ns: int, received: tuple[list, list] | None = None) -> None:
        """One iteration at one instant: handle what arrived (`wait`'s result, else whatever is
        there now), check worker liveness, run one scheduler tick, write a few telemetry rows."""
        self.handle(now_ns, received if received is not None else self._poller.poll(0))
        self.send_now()
        self.tick(now_ns)
        self.send_now()
        self.write_telemetry()

    def send_now(self) -> None:
        """What this loop has queued for clients and workers leaves now. Sends wait in the
        endpoints' outboxes for the loop's next poll otherwise: an answer made early in an
        iteration waited for the rest of it (more requests, the tick, telemetry rows) while
        its latency said it had left."""
        self.clients_ep.flush()
        self.workers_ep.flush()

    def write_telemetry(self) -> None:
        """A few of the rows waiting for --log-dir: the configured number per iteration, and
        enough more that a backlog (a burst) drains within ~64 iterations."""
        telemetry = self.telemetry
        telemetry.write_some(max(self.config.telemetry_rows_per_step,
                                 telemetry.pending_rows() >> 6))

    def tick(self, now_ns: int) -> None:
        self._check_liveness(now_ns)
        self._apply(now_ns, self.scheduler.tick(now_ns))

    def handle(self, now_ns: int, received: tuple[list, list]) -> None:
        """Turn received messages into scheduler events and answers."""
        from_workers, from_clients = received
        for peer, msg in from_workers:
            handler = self._worker_handlers.get(type(msg))
            if handler is None:
                log.warning("unexpected %s from a worker", type(msg).__name__)
                continue
            handler(now_ns, peer, msg)
        for peer, msg in from_clients:
            handler = self._client_handlers.get(type(msg))
            if handler is None:  # a valid ToClient-side type sent by a client, say
                self._respond_error(peer, -1, RequestStatus.MALFORMED,
                                    f"unexpected message {type(msg).__name__}")
                continue
            handler(now_ns, peer, msg)

    def handle_received(self, received: tuple[list, list], clock) -> tuple[int, int]:
        """Handle one poll's messages: the workers' first, then the clients' a chunk at a time;
        between chunks, at a fresh instant from `clock`, whatever the workers sent meanwhile
        (their answers leave at once) and what the scheduler finds urgent (its answer guard);
        its planning waits for the loop's tick. Returns the worker and client messages
        handled."""
        from_workers, from_clients = received
        now = clock()  # after the wait: arrivals are stamped when handled
        if from_workers:
            self.handle(now, (from_workers, []))
            self.send_now()  # the answers, before the clients' requests
        workers = len(from_workers)
        chunk = self.config.client_messages_per_chunk
        for start in range(0, len(from_clients), chunk):
            if start:
                # taken, then stamped: a result must not be stamped before its worker sent it
                results = self._poller.take(0, self.config.max_messages_per_step)
                now = clock()
                if results:
                    workers += len(results)
                    self.handle(now, (results, []))
                self._apply(now, self.scheduler.urgent(now))
                self.send_now()
            self.handle(now, ([], from_clients[start:start + chunk]))
        if from_clients:
            self.send_now()  # (the tick that follows may take a while planning)
        return workers, len(from_clients)

    def serve_forever(self, stop: threading.Event, clock=time.monotonic_ns) -> None:
        last_gauges = 0
        busy = self.metrics.loop_busy
        watch = None
        if self.config.log_stalls_ns is not None:
            from cw.serve.stalls import StallWatch

            # the loop's polls tell when it could not run: no watch thread (its wake-ups cost)
            watch = StallWatch("controller", self.config.log_stalls_ns, thread=False).start()
        handled = (0, 0)
        errors = LoopErrors(log, "controller step")
        # with a watch, what this thread did with a slow iteration's time (~1.5 µs an iteration)
        meter = watch.loop_meter() if watch is not None else None
        mark = None
        while not stop.is_set():
            try:
                if meter is None:
                    received = self.wait(1)
                    began = clock()
                else:
                    polled, mark = clock(), meter.mark()
                    received = self.wait(1)
                    began = clock()
                    watch.woke(began - polled, MS, *meter.since(mark)[1:])
                    mark = meter.mark()
                handled = self.handle_received(received, clock)
                # a fresh instant for planning: what was just handled took time, and windows
                # planned from a stale clock would reach the workers already late
                now = clock()
                self.tick(now)
                self.send_now()  # before the telemetry rows
                self.write_telemetry()
            except Exception as e:  # log the unexpected and keep serving
                now = began = clock()
                errors.report(e, now)
            if now - last_gauges > 200 * MS:
                last_gauges = now
                try:
                    self.housekeeping(now)
                except Exception as e:
                    errors.report(e, now)
                errors.flush(now)
            took = clock() - began
            busy.observe(took)
            if watch is not None:
                watch.iteration(took, f"{handled[0]} worker and {handled[1]} client messages",
                                meter.since(mark) if mark is not None else None)
        errors.flush()
        if watch is not None:
            meter.close()
            watch.stop()
        self.shutdown(clock())

    def housekeeping(self, now_ns: int) -> None:
        """What the loop does a few times a second, off the per-message path: gauges, telemetry
        to disk, and now and then the clients' shared-memory segments that are gone."""
        self.telemetry.flush_files()  # the rows written so far reach the OS; the loop writes them
        self._update_gauges(now_ns)
        if not self.shm_domain:
            return
        if self._last_stale_check_ns is None or \
                now_ns - self._last_stale_check_ns >= self.config.shm_stale_check_ns:
            self._last_stale_check_ns = now_ns
            remove_stale()  # a client killed mid-run left its segments behind
            self._last_shm_sweep_ns = None  # let go of them now
        if self._last_shm_sweep_ns is None or \
                now_ns - self._last_shm_sweep_ns >= self.config.shm_sweep_ns:
            self._last_shm_sweep_ns = now_ns
            self.shm.sweep()

    def shutdown(self, now_ns: int) -> None:
        for rid in list(self.pending):
            self._finish(now_ns, Finish(rid, RequestStatus.SHUTTING_DOWN,
                                        "the controller is shutting down"))
        self.clients_ep.poll(0)  # flush responses
        self.telemetry.close()

    # --- workers -------------------------------------------------------------------------
    def _on_register(self, now_ns: int, peer: bytes, msg: p.Register) -> None:
        if msg.protocol_version != p.PROTOCOL_VERSION:
            log.error("worker %s speaks protocol %d, this controller %d", msg.name,
                      msg.protocol_version, p.PROTOCOL_VERSION)
            self.workers_ep.send(peer, p.Goodbye(
                f"protocol version {msg.protocol_version} is not {p.PROTOCOL_VERSION}",
                p.PROTOCOL_VERSION))
            return
        known = self.workers.get(self.by_peer.get(peer, -1))
        if known is not None and msg.incarnation and msg.incarnation == known.incarnation:
            # a repeat sent before our Welcome reached it: the worker lost nothing
            known.last_seen_ns = now_ns
            self._welcome(now_ns, known, msg.worker_ns)
            log.debug("worker %d (%s) registered again: welcomed again", known.worker_id,
                      known.name)
            return
        if known is not None:  # re-registration (it restarted, or lost its view): start over
            self._worker_left(now_ns, known.worker_id, "re-registered")
        conflict = self._conflict(msg)
        if conflict is not None:  # requests for that id would get either model
            log.error("worker %s refused: %s", msg.name, conflict)
            self.workers_ep.send(peer, p.Goodbye(conflict, p.PROTOCOL_VERSION, refused=True))
            return
        wid = next(self._worker_ids)
        worker = _Worker(wid, peer, msg.name, msg.simulated, {m.model_id: m for m in msg.models},
                         now_ns, bool(msg.shm_domain) and msg.shm_domain == self.shm_domain,
                         bool(msg.clock_domain) and msg.clock_domain == self.clock_domain,
                         tuple(msg.result_peers), msg.incarnation, len(msg.devices))
        info = WorkerInfo(wid, msg.name, [GpuInfo(d.index, d.pages, d.page_size)
                                          for d in msg.devices], list(msg.models), msg.simulated,
                          worker.shares_shm)
        self._welcome(now_ns, worker, msg.worker_ns)  # at once: it carries a clock sample
        # the scheduler before the tables: a worker counts as joined (wait_for_workers) once
        # its models can be served, and thousands of them take the scheduler a while
        with collector.kept():
            decisions = self.scheduler.worker_joined(now_ns, info)
        self.workers[wid] = worker
        self.by_peer[peer] = wid
        for alias in msg.result_peers:
            self.by_peer[alias] = wid
        log.info("worker %d (%s, %s) joined with %d devices and %d models", wid, msg.name,
                 msg.runtime, len(msg.devices), len(msg.models))
        self._apply(now_ns, decisions)

    def _conflict(self, msg: p.Register) -> str | None:
        """Why `msg`'s worker cannot join: a model id that a joined worker serves as another
        model (protocol.model_difference); None if there is none."""
        for other in self.workers.values():
            for m in msg.models:
                theirs = other.models.get(m.model_id)
                if theirs is not None:
                    why = p.model_difference(m, theirs)
                    if why is not None:
                        return (f"model '{m.model_id}' is not the '{m.model_id}' that worker "
                                f"{other.worker_id} ({other.name}) serves: {why}")
        return None

    def _welcome(self, now_ns: int, worker: _Worker, worker_ns: int) -> None:
        same = worker.same_clock
        self.workers_ep.send(worker.peer, p.Welcome(
            worker.worker_id, worker_ns, now_ns, same,
            self.workers_ep.lane_address if same else ""))

    def _on_ping(self, now_ns: int, peer: bytes, msg: p.Ping) -> None:
        wid = self.by_peer.get(peer)
        if wid is None:
            self.workers_ep.send(peer, p.Goodbye("unknown worker: register again",
                                                 p.PROTOCOL_VERSION))
            return
        self.workers[wid].last_seen_ns = now_ns
        self.metrics.worker_clock(self.workers[wid].name, msg.offset_ns, msg.estimate_ns,
                                  msg.rtt_ns)
        self.workers_ep.send(peer, p.Pong(msg.worker_sent_ns, now_ns))

    def _on_result(self, now_ns: int, peer: bytes, msg: p.Result) -> None:
        wid = self.by_peer.get(peer)
        if wid is not None:
            self.workers[wid].last_seen_ns = now_ns
        record = self.actions.get(msg.id)
        if wid is None and peer in self._left_peers:
            log.debug("result for action %d from worker %d, which has left (the action was "
                      "marked LOST then)", msg.id, self._left_peers[peer])
            return
        if record is None or wid is None:
            self._stray_results += 1
            if now_ns - self._stray_told_ns >= STRAY_TELL_NS:
                log.warning("%d result(s) for actions this controller did not send (the last: "
                            "%d), dropped: a worker's from before a restart?",
                            self._stray_results, msg.id)
                self._stray_results, self._stray_told_ns = 0, now_ns
            return
        record.result = msg
        main = msg.timings[1] if msg.kind == "infer" and len(msg.timings) > 1 else (
            msg.timings[0] if msg.timings and msg.kind != "infer" else None)
        if main is None and msg.status == p.Status.TOO_LATE:
            # when the worker refused it: how late it would have started, at least (the
            # scheduler widens a late worker's windows, SchedulerConfig.adapt_slack)
            refused = msg.sent_ns or now_ns
            result = ActionResult(msg.id, msg.status, refused, refused, 0)
        else:
            result = ActionResult(msg.id, msg.status, main.start_ns if main else 0,
                                  main.end_ns if main else 0, main.device_ns if main else 0)
        self._action_row(now_ns, record, p.STATUS_NAME[msg.status], main, msg.simulated)
        decisions = self.scheduler.result_returned(now_ns, result)
        self._apply(now_ns, decisions)
        del self.actions[msg.id]

    def _on_leaving(self, now_ns: int, peer: bytes, msg: p.Leaving) -> None:
        if peer in self.by_peer:
            self._worker_left(now_ns, self.by_peer[peer], STOPPED)

    def _on_worker_malformed(self, now_ns: int, peer: bytes, msg: Malformed) -> None:
        if peer in self.by_peer:
            log.warning("malformed message from a worker (%d bytes): %s", len(msg.raw),
                        msg.error)
            return
        # not a worker of this controller's: most likely a client given the workers' address,
        # which would otherwise wait out its timeout; cw's client reads this and says so
        clients = self.clients_ep.address
        if clients.startswith(("tcp://0.0.0.0:", "tcp://[::]:")):  # bound to every interface
            clients = f"port {clients.rsplit(':', 1)[1]} of this host"
        log.warning("malformed message on the workers' address (%d bytes): %s (a client "
                    "that should connect to %s?)", len(msg.raw), msg.error, clients)
        self.workers_ep.send(peer, p.Goodbye(
            f"this is a cw controller's workers' address; clients connect to {clients}",
            p.PROTOCOL_VERSION))

    def worker_process_ended(self, worker_id: int, how: str) -> None:
        """Whoever started worker `worker_id`'s process saw it end (`cw serve`'s own workers):
        it leaves at the next tick, not after `worker_timeout_ns` of silence. Any thread."""
        self._ended_processes.append((worker_id, how))

    def _check_liveness(self, now_ns: int) -> None:
        while self._ended_processes:
            wid, how = self._ended_processes.popleft()
            if wid in self.workers:
                self._worker_left(now_ns, wid, f"its process {how}")
        for peer in self.workers_ep.unreachable:
            if peer in self.by_peer:
                self._worker_left(now_ns, self.by_peer[peer], "unreachable")
        self.workers_ep.unreachable.clear()
        # clients that went away before their answers: nothing to do, and a long-running
        # controller must not keep a list of them
        self.clients_ep.unreachable.clear()
        for wid, w in list(self.workers.items()):
            if now_ns - w.last_seen_ns > self.config.worker_timeout_ns:
                self._worker_left(now_ns, wid, "silent")

    def _worker_left(self, now_ns: int, wid: int, why: str) -> None:
        w = self.workers.pop(wid)
        for peer in (w.peer, *w.result_peers):
            self.by_peer.pop(peer, None)
            self._left_peers[peer] = wid
            self._left_peers.move_to_end(peer)
        while len(self._left_peers) > LEFT_PEERS_KEPT:
            self._left_peers.popitem(last=False)
        if not any(other.name == w.name for other in self.workers.values()):
            self.metrics.worker_gone(w.name)
        # a worker that said it was leaving is no surprise
        log.log(logging.INFO if why == STOPPED or self.workers_stopping else logging.WARNING,
                "worker %d (%s) left: %s", wid, w.name, why)
        for action_id, record in list(self.actions.items()):
            if record.decision.worker_id == wid:
                self._action_row(now_ns, record, "LOST", None, w.simulated)
                del self.actions[action_id]
        self._apply(now_ns, self.scheduler.worker_left(now_ns, wid))

    # --- clients -------------------------------------------------------------------------
    def _on_infer(self, now_ns: int, peer: bytes, msg: p.InferRequest) -> None:
        problem = request_problem(msg, self.scheduler, self.config.max_slo_ns, self.shm)
        if problem:
            status, message = problem
            self.clients_ep.send(peer, p.InferResponse(msg.request_id, status, message))
            self.metrics.request(status.name, 0, False)
            return
        slo = msg.slo_ns or self.config.default_slo_ns
        arrival = now_ns
        if msg.sent_ns and self.clock_domain:
            # A client on our clock says when it sent: time spent queued before this loop took
            # the request in (a busy loop) is the client's time too, and counts against its SLO.
            arrival = min(now_ns, msg.sent_ns)
            waited = now_ns - arrival
            self.metrics.intake.observe(waited)
            if waited >= slo:
                self._respond_now(now_ns, peer, msg, arrival, slo, RequestStatus.REJECTED,
                                  f"waited {format_duration_ns(waited)} to be taken in, past "
                                  f"its {format_duration_ns(slo)} SLO (a busy controller or "
                                  "client host)")
                return
        rid = next(self._request_ids)
        self.pending[rid] = _Pending(peer, msg.request_id, msg.model, msg.n, list(msg.inputs),
                                     arrival, arrival + slo, slo)
        self._apply(now_ns, self.scheduler.request_arrived(
            now_ns, Request(rid, msg.model, msg.n, arrival, arrival + slo,
                            type(msg.inputs[0]) is ShmRef, max(msg.unseen_ns, 0))))

    def _respond_now(self, now_ns: int, peer: bytes, msg: p.InferRequest, arrival_ns: int,
                     slo_ns: int, status: RequestStatus, message: str) -> None:
        """Answer a valid request without asking the scheduler (counted and logged as any)."""
        rid = next(self._request_ids)
        self.pending[rid] = _Pending(peer, msg.request_id, msg.model, msg.n, [], arrival_ns,
                                     arrival_ns + slo_ns, slo_ns)
        self._finish(now_ns, Finish(rid, status, message))

    def _on_models(self, now_ns: int, peer: bytes, msg: p.ListModels) -> None:
        # a client on this host that opened a lane gets its answers there from now on
        lane = bool(msg.lane_address) and self.clients_ep.use_peer_lane(peer, msg.lane_address)
        if msg.only is None:
            infos = list(self.scheduler.models().values())
        else:
            infos = [info for name in msg.only
                     if (info := self.scheduler.model_info(name)) is not None]
        self.clients_ep.send(peer, p.ModelsResponse(
            msg.request_id, infos, self.shm_domain, self.config.scheduler, len(self.workers),
            sum(w.gpus for w in self.workers.values()), self.config.default_slo_ns,
            self.config.max_request_bytes, self.clock_domain,
            getattr(self.clients_ep, "takes_packed_frames", False), lane))

    def _on_client_malformed(self, now_ns: int, peer: bytes, msg: Malformed) -> None:
        # under the request's own id where one can be read: a client waiting on that request
        # then hears why at once, instead of waiting out its timeout
        self._respond_error(peer, request_id_of(msg.raw), RequestStatus.MALFORMED,
                            f"malformed request: {msg.error}")

    def _respond_error(self, peer, request_id, status, message) -> None:
        self.clients_ep.send(peer, p.ErrorResponse(request_id, status, message))

    # --- decisions -----------------------------------------------------------------------
    def _apply(self, now_ns: int, decisions) -> None:
        for d in decisions:
            if isinstance(d, Finish):
                self._finish(now_ns, d)
                continue
            w = self.workers.get(d.worker_id)
            if w is None:
                continue  # the scheduler will hear of the worker's loss and re-plan
            if isinstance(d, SendInfer):
                reqs = [self.pending[r] for r in d.request_ids]
                # each request's bytes as received (views into its frame): copied once, by the
                # encoder, instead of joined first; shared-memory references stay references
                # for a worker on the clients' host
                inputs = [[r.inputs[i] for r in reqs] for i in range(len(reqs[0].inputs))]
                if not w.shares_shm:
                    inputs = [[self._bytes_of(t) for t in chunks] for chunks in inputs]
                msg = p.Infer(id=d.action_id, model=d.model, gpu=d.gpu,
                              earliest_ns=d.earliest_ns, latest_ns=d.latest_ns,
                              expected_ns=d.expected_ns, batch_size=d.batch_size,
                              n=sum(r.n for r in reqs), inputs=inputs)
            else:
                cls = p.Load if isinstance(d, SendLoad) else p.Unload
                msg = cls(id=d.action_id, model=d.model, gpu=d.gpu, earliest_ns=d.earliest_ns,
                          latest_ns=d.latest_ns, expected_ns=d.expected_ns)
            record = _Action(d, now_ns)
            if isinstance(d, SendInfer):
                record.samples = {r: self.pending[r].n for r in d.request_ids}
            self.actions[d.action_id] = record
            self.workers_ep.send(w.peer, msg)

    def _bytes_of(self, tensor):
        if type(tensor) is not ShmRef:
            return tensor
        try:
            return self.shm.view(tensor)
        except ShmError:  # its client closed the segment since: nobody waits for this output
            return bytes(tensor.nbytes)

    def _finish(self, now_ns: int, f: Finish) -> None:
        req = self.pending.pop(f.request_id, None)
        if req is None:
            return
        outputs, batch, worker, gpu, simulated = [], 0, -1, -1, False
        record = self.actions.get(f.action_id) if f.action_id is not None else None
        if f.status == RequestStatus.OK and record is not None and record.result is not None:
            d: SendInfer = record.decision
            outputs = self._slice_outputs(record, f.request_id)
            batch, worker, gpu = d.batch_size, d.worker_id, d.gpu
            simulated = record.result.simulated
        latency = now_ns - req.arrival_ns
        self.clients_ep.send(req.peer, p.InferResponse(req.client_request_id, f.status, f.message,
                                                       outputs, latency, batch, simulated))
        met = f.status == RequestStatus.OK and now_ns <= req.deadline_ns
        status = p.REQUEST_STATUS_NAME[f.status]
        self.metrics.request(status, latency, met)
        self.telemetry.request(RequestRow(
            f.request_id, req.model, req.n, req.arrival_ns, req.deadline_ns, req.slo_ns, now_ns,
            latency, status, met, batch, worker, gpu,
            f.action_id if f.action_id is not None else -1, f.cold_start, simulated))

    @staticmethod
    def _slice_outputs(record: _Action, request_id: int) -> list[bytes]:
        """This request's share of each output: requests are laid out in the batch in order."""
        offset = 0
        for rid, n in record.samples.items():
            if rid == request_id:
                break
            offset += n
        n = record.samples[request_id]
        total = sum(record.samples.values())
        out = []
        for data in record.result.outputs:
            per = len(data) // total
            out.append(data[offset * per:(offset + n) * per])
        return out

    def _action_row(self, now_ns, record: _Action, status: str, main, simulated: bool) -> None:
        d = record.decision
        kind = ACTION_KIND[type(d)]
        start, end, measured = (main.start_ns, main.end_ns, main.device_ns) if main else (0, 0, 0)
        expected_end = d.earliest_ns + d.expected_ns
        self.metrics.action(kind, status)
        self.telemetry.action(ActionRow(
            d.action_id, kind, status, d.worker_id, d.gpu, d.model,
            getattr(d, "batch_size", 0), len(getattr(d, "request_ids", [])), record.sent_ns,
            d.earliest_ns, d.latest_ns, d.expected_ns, expected_end, start, end, measured,
            measured - d.expected_ns if main else 0, end - expected_end if main else 0,
            record.result.sent_ns if record.result is not None else 0, now_ns, simulated))

    def _update_gauges(self, now_ns: int) -> None:
        busy, models = {}, {}
        if self._started_ns is None:
            self._started_ns = now_ns
        elapsed = max(1, now_ns - self._started_ns)
        for (wid, idx), g in getattr(self.scheduler, "gpus", {}).items():
            busy[f"{wid}/{idx}"] = min(1.0, g.busy_ns / elapsed)
            models[f"{wid}/{idx}"] = len(g.loaded)
        windows = {w.name: found for wid, w in self.workers.items()
                   if (found := self.scheduler.worker_windows(wid)) is not None}
        self.metrics.gauges(self.scheduler.queue_length(), busy, models, now_ns / 1e9,
                            len(self.workers), windows)
        telemetry = self.telemetry
        self.metrics.telemetry(telemetry.held_bytes(), telemetry.lost_rows,
                               telemetry.write_error is not None)

