"""The Clockwork scheduler (OSDI'20 §4.5, §5.3 and Appendix B), as a pure policy.

- Requests wait in one earliest-deadline-first queue per model.
- Each GPU is planned only `schedule_ahead` into the future. When a GPU's planned work ends
  before now + schedule_ahead, the most urgent model loaded there is given one INFER: the largest
  batch (padded to a compiled size) whose estimated EXEC still finishes before the most urgent
  deadline in it. Urgency = deadline − estimate, the paper's strategy priority.
- A batch's inputs travel with its INFER, so "now" above is when they could reach the worker:
  a batch is planned once the GPU frees less than schedule_ahead after its inputs, sent now,
  would arrive. Clockwork's own rule is the case of inputs that take no time. Planning a
  16-image resnet50 batch (9.6 MB, ~10 ms through a socket) only 5 ms ahead left the GPU idle
  ~5 ms before every such batch: half of it, in the Fig. 5 setup at SLO 500 ms.
- A request that can no longer meet its deadline anywhere is rejected at once; nothing is sent
  to a worker that the estimates say would finish late.
- Estimates are the rolling p99 of the last measurements per (worker, GPU, model, batch, kind),
  seeded from the workers' profiles.
- LOADs go to models with queued work and no copy on any GPU, most unmet demand first, at most
  `max_loads_in_flight` per GPU, evicting least-recently-used idle models (UNLOAD) for pages.
"""

from __future__ import annotations

import heapq
import itertools
from operator import attrgetter

import msgspec

from cw.serve.protocol import ModelInfo, RequestStatus, Status
from cw.serve.scheduler.base import (ActionResult, Decision, Estimator, Finish, Gpu, RecentMax,
                                     Request, RollingQuantile, Scheduler, SchedulerConfig,
                                     SendInfer, SendLoad, SendUnload, WorkerInfo)

COLD_DEMAND_TTL_NS = 1_000_000_000  # a turned-away request asks for a LOAD this long
# SchedulerConfig.adapt_slack: a worker's INFER slack is this many times the latest start of
# its last LATE_START_WINDOW INFERs (twice: room for a worker somewhat later than lately)
LATE_START_WINDOW = 100
SLACK_PER_LATENESS = 2


def _holds_any(gpu: Gpu, models) -> bool:
    loaded = gpu.loaded
    for m in models:
        if m in loaded:
            return True
    return False


_exec_free = attrgetter("exec_free_ns")


class _InFlight(msgspec.Struct, gc=False):
    """An action sent and not yet answered (built for every action: a struct's __init__ is C)."""
    kind: str
    gpu: tuple[int, int]
    model: str
    batch_size: int = 0
    requests: list[Request] | None = None
    pages: int = 0
    earliest_ns: int = 0  # (INFER) the start it was planned for


class ClockworkScheduler(Scheduler):
    name = "clockwork"

    def __init__(self, config: SchedulerConfig):
        super().__init__(config)
        self.workers: dict[int, WorkerInfo] = {}
        self.gpus: dict[tuple[int, int], Gpu] = {}
        self.catalog: dict[str, ModelInfo] = {}
        self.holders: dict[str, set[int]] = {}  # model -> workers that have it on disk/host
        self.queues: dict[str, list] = {}       # model -> heap of (deadline, id, Request)
        self.cold: set[int] = set()
        self.inflight: dict[int, _InFlight] = {}
        self.last_exec: dict[tuple[int, int], int] = {}  # gpu -> last planned INFER id
        self.estimates = Estimator(config.estimate_window)
        self._ids = itertools.count(1)
        self._last_sweep_ns: int | None = None
        # Models whose requests were turned away because no GPU held them: they still get
        # loaded, or a model whose LOAD + EXEC exceeds the SLO would stay cold forever.
        self.cold_demand: dict[str, int] = {}
        self._last_replication_ns: int | None = None
        # model -> (padded, ns per sample through the socket, ns per sample from shared memory)
        self._facts: dict[str, tuple[list[int], float, float]] = {}
        # How long after its EXEC ends an INFER's result reaches us (output copy, the way back,
        # our own queue): the largest of the last 100 per worker. The time left between a
        # planned end and the deadline is at least this, so that a slow way back (a loaded
        # machine) turns into rejections, not late answers.
        self.answer_delays = RollingQuantile(1000, 0.99, 100)
        self.margin_ns: dict[int, int] = {}  # worker -> completion margin in use
        # How late each worker's INFERs lately started (or were refused) after earliest_ns,
        # and the INFER slack in use for it (SchedulerConfig.adapt_slack)
        self.late_starts = RecentMax(LATE_START_WINDOW)
        self.slack_ns: dict[int, int] = {}
        self._answer_seen_ns: dict[int, int] = {}  # worker -> when its last result came
        # (earliest deadline among its unanswered requests, INFER id) for every INFER sent:
        # the answer guard (SchedulerConfig.answer_guard_ns). Entries of INFERs that returned
        # are dropped when they reach the top.
        self._guards: list[tuple[int, int]] = []
        # The longest any catalogued model's largest batch takes to reach a worker, network
        # allowance included: GPUs busy beyond now + schedule_ahead + this need no look.
        self._lead_cap_ns = config.network_latency_ns

    # --- events --------------------------------------------------------------------------
    def worker_joined(self, now_ns: int, worker: WorkerInfo) -> list[Decision]:
        self.workers[worker.worker_id] = worker
        for g in worker.gpus:
            self.gpus[(worker.worker_id, g.index)] = Gpu(
                worker.worker_id, g.index, g.pages, g.pages, now_ns, now_ns,
                shares_memory=worker.shares_memory)
        for m in worker.models:
            if not self.holders.get(m.model_id):
                # the first holder's description, or a new one where every holder left (a
                # worker restarted with the bundle recompiled); the controller refuses a worker
                # whose description differs from a current holder's
                self.catalog[m.model_id] = m
                self._facts.pop(m.model_id, None)
            padded, per_sample, _ = self._model_facts(m.model_id)
            self._lead_cap_ns = max(self._lead_cap_ns, self.config.network_latency_ns
                                    + int((len(padded) - 1) * per_sample))
            self.holders.setdefault(m.model_id, set()).add(worker.worker_id)
            for g in worker.gpus:
                self.estimates.seed(("load", worker.worker_id, g.index, m.model_id), m.load_ns)
                for b, ns in m.exec_ns.items():
                    self.estimates.seed(("exec", worker.worker_id, g.index, m.model_id, int(b)),
                                        ns)
        return []

    def worker_left(self, now_ns: int, worker_id: int) -> list[Decision]:
        self.workers.pop(worker_id, None)
        for key in [k for k in self.gpus if k[0] == worker_id]:
            del self.gpus[key]
            self.last_exec.pop(key, None)
        # (one that comes back joins under a new id, and is estimated from its profiles again)
        self.estimates.forget_worker(worker_id)
        self.margin_ns.pop(worker_id, None)
        self._answer_seen_ns.pop(worker_id, None)
        self.answer_delays.forget(worker_id)
        self.late_starts.forget(worker_id)
        self.slack_ns.pop(worker_id, None)
        for holders in self.holders.values():
            holders.discard(worker_id)
        for action_id, f in list(self.inflight.items()):
            if f.gpu[0] == worker_id:
                del self.inflight[action_id]
                for r in f.requests or []:
                    self._enqueue(r)  # re-planned elsewhere, or rejected if it cannot be
        self._last_sweep_ns = None  # check every queue at the next tick
        return []

    def request_arrived(self, now_ns: int, request: Request) -> list[Decision]:
        model = request.model
        feasible = None
        if request.unseen_ns and self.config.plan_way_back:
            # from here on the request's deadline is the one its answer must leave by
            way_back = min(request.unseen_ns, (request.deadline_ns - request.arrival_ns) // 2)
            early = msgspec.structs.replace(request, deadline_ns=request.deadline_ns - way_back)
            feasible, resident = self._feasibility(now_ns, model, early.deadline_ns,
                                                   request.by_reference)
            # 2: only where the earlier deadline can be met; else the deadline itself, which
            # the way back usually leaves time for (what it comes off is the most of 100)
            if feasible or self.config.plan_way_back == 1:
                request = early
            else:
                feasible = None
        if feasible is None:
            feasible, resident = self._feasibility(now_ns, model, request.deadline_ns,
                                                   request.by_reference)
        if not feasible:
            if model in self.catalog and not resident:
                self.cold_demand[model] = now_ns
            return [Finish(request.request_id, RequestStatus.REJECTED,
                           "cannot meet its deadline")]
        if not resident:
            self.cold.add(request.request_id)
        queue = self.queues.get(model)
        if queue is None:
            self.queues[model] = [(request.deadline_ns, request.request_id, request)]
        else:
            heapq.heappush(queue, (request.deadline_ns, request.request_id, request))
        return []

    def result_returned(self, now_ns: int, result: ActionResult) -> list[Decision]:
        f = self.inflight.pop(result.action_id, None)
        if f is None:
            return []
        gpu = self.gpus.get(f.gpu)
        decisions: list[Decision] = []
        if f.kind == "infer":
            decisions += self._infer_returned(now_ns, result, f, gpu)
        elif f.kind == "load" and gpu is not None:
            gpu.loads_in_flight -= 1
            if result.status == Status.OK:
                self.estimates.observe(("load", *f.gpu, f.model), result.device_ns)
                gpu.loaded[f.model] = min(gpu.loaded.get(f.model, result.end_ns), result.end_ns)
            elif result.status != Status.ALREADY_LOADED:
                gpu.loaded.pop(f.model, None)
                gpu.free_pages += f.pages
        return decisions

    def _infer_returned(self, now_ns: int, result: ActionResult, f: _InFlight,
                        gpu: Gpu | None):
        decisions: list[Decision] = []
        if self.config.adapt_slack and result.status in (Status.OK, Status.TOO_LATE):
            self._saw_start(f.gpu[0], (result.start_ns or now_ns) - f.earliest_ns)
        if result.status == Status.OK:
            worker = f.gpu[0]
            self.answer_delays.observe(worker, max(0, now_ns - result.end_ns))
            self._answer_seen_ns[worker] = now_ns
            self.margin_ns[worker] = max(self.config.completion_margin_ns,
                                         self.answer_delays.value[worker])
            if gpu is not None:
                self.estimates.observe(("exec", *f.gpu, f.model, f.batch_size), result.device_ns)
                if self.last_exec.get(f.gpu) == result.action_id:
                    gpu.exec_free_ns = result.end_ns  # measured, not predicted, from here on
            for r in f.requests:
                decisions.append(Finish(r.request_id, RequestStatus.OK, action_id=result.action_id,
                                        cold_start=r.request_id in self.cold))
                self.cold.discard(r.request_id)
            return decisions
        if result.status == Status.NOT_LOADED and gpu is not None:
            gpu.loaded.pop(f.model, None)  # our view was wrong; the next tick may load it again
        if result.status in (Status.TOO_LATE, Status.NOT_LOADED, Status.SHUTTING_DOWN):
            for r in f.requests:
                self._enqueue(r)  # re-planned if still feasible, else rejected by the next tick
            self._last_sweep_ns = None
            return decisions
        for r in f.requests:
            status = RequestStatus.BAD_INPUT if result.status == Status.BAD_INPUT \
                else RequestStatus.ERROR
            decisions.append(Finish(r.request_id, status, f"worker: {result.status.name}"))
            self.cold.discard(r.request_id)
        return decisions

    def _saw_start(self, worker: int, late_ns: int) -> None:
        """An INFER of `worker` started (or was refused) `late_ns` after its earliest_ns."""
        self.late_starts.observe(worker, max(0, late_ns))
        self.slack_ns[worker] = max(self.config.infer_slack_ns,
                                    SLACK_PER_LATENESS * self.late_starts.value[worker])

    # --- planning ------------------------------------------------------------------------
    def tick(self, now_ns: int) -> list[Decision]:
        decisions: list[Decision] = []
        c = self.config
        if self._last_sweep_ns is None or now_ns - self._last_sweep_ns >= c.reject_sweep_ns:
            self._last_sweep_ns = now_ns
            self._expire_margins(now_ns)
            self._reject_infeasible(now_ns, decisions)
        decisions += self.urgent(now_ns)
        self._plan_infers(now_ns, decisions)
        replicate = (self._last_replication_ns is None
                     or now_ns - self._last_replication_ns >= c.replication_check_ns)
        if replicate:
            self._last_replication_ns = now_ns
        self._plan_loads(now_ns, decisions, replicate)
        return decisions

    def urgent(self, now_ns: int) -> list[Decision]:
        """Only the answer guard. Planning waits for the tick after the burst: planned after
        every few requests taken in, batches came out a third smaller where GPUs are always due
        (simulated microsecond EXECs), and the extra INFERs cost the 2-core build machine 1-7 %
        of its requests at 12,000 r/s (docs/benchmarks.md, "small inputs through the socket")."""
        decisions: list[Decision] = []
        if self._guards and self._guards[0][0] <= now_ns + self.config.answer_guard_ns:
            self._time_out_overdue(now_ns, decisions)
        return decisions

    def _time_out_overdue(self, now_ns: int, decisions: list[Decision]) -> None:
        """Answer TIMED_OUT the requests whose INFER has not returned answer_guard_ns before
        their deadline; the rest of such a batch keeps waiting for the result."""
        guards, inflight = self._guards, self.inflight
        limit = now_ns + self.config.answer_guard_ns
        while guards and guards[0][0] <= limit:
            _, action_id = heapq.heappop(guards)
            f = inflight.get(action_id)
            if f is None or not f.requests:
                continue  # returned (or lost with its worker) already
            waiting = []
            for r in f.requests:
                if r.deadline_ns <= limit:
                    decisions.append(Finish(r.request_id, RequestStatus.TIMED_OUT,
                                            "no result by its deadline; a late result is "
                                            "dropped"))
                    self.cold.discard(r.request_id)
                else:
                    waiting.append(r)
            f.requests = waiting
            if waiting:
                heapq.heappush(guards, (min(r.deadline_ns for r in waiting), action_id))

    def _expire_margins(self, now_ns: int) -> None:
        for worker, margin in list(self.margin_ns.items()):
            unseen_ns = now_ns - self._answer_seen_ns.get(worker, now_ns)
            if margin > self.config.completion_margin_ns and \
                    unseen_ns > self.config.margin_expiry_ns:
                del self.margin_ns[worker]
                self.answer_delays.forget(worker)

    def _enqueue(self, r: Request) -> None:
        heapq.heappush(self.queues.setdefault(r.model, []), (r.deadline_ns, r.request_id, r))

    def _exec_est(self, gpu: Gpu, model: str, batch: int) -> int:
        return self.estimates.get(("exec", gpu.worker_id, gpu.index, model, batch))

    def _earliest_start(self, now_ns: int, gpu: Gpu, model: str) -> int:
        return max(now_ns + self.config.network_latency_ns, gpu.exec_free_ns, gpu.loaded[model])

    def _could_finish(self, now_ns: int, model: str, request: Request) -> bool:
        return self._feasibility(now_ns, model, request.deadline_ns, request.by_reference)[0]

    def _feasibility(self, now_ns: int, model: str, deadline_ns: int,
                     by_reference: bool) -> tuple[bool, bool]:
        """(whether some GPU could still run a batch-1 of `model` by the deadline, whether some
        GPU holds it). Called for every arrival, so it stops at the first GPU that can, trying
        resident copies first."""
        info = self.catalog.get(model)
        if info is None:
            return False, False
        b = info.batch_sizes[0]
        margin, margins = self.config.completion_margin_ns, self.margin_ns
        reach = now_ns + self.config.network_latency_ns
        _, per_sample, per_sample_shared = self._facts.get(model) or self._model_facts(model)
        floor_socket = reach + int(per_sample)
        floor_shared = reach + int(per_sample_shared) if by_reference else floor_socket
        cold = []
        get = self.estimates.value.__getitem__
        for gpu in self.gpus.values():
            floor = floor_shared if gpu.shares_memory else floor_socket
            ready = gpu.loaded.get(model)
            if ready is None:
                cold.append(gpu)
            elif max(floor, gpu.exec_free_ns, ready) + \
                    get(("exec", gpu.worker_id, gpu.index, model, b)) <= \
                    deadline_ns - margins.get(gpu.worker_id, margin):
                return True, True
        resident = len(cold) < len(self.gpus)
        holders = self.holders.get(model, ())
        for gpu in cold:
            if gpu.worker_id not in holders or info.pages > gpu.pages:
                continue
            load = get(("load", gpu.worker_id, gpu.index, model))
            floor = floor_shared if gpu.shares_memory else floor_socket
            ready = max(floor, gpu.weights_free_ns) + load
            if max(ready, gpu.exec_free_ns) + get(("exec", gpu.worker_id, gpu.index, model, b)) \
                    <= deadline_ns - margins.get(gpu.worker_id, margin):
                return True, resident
        return False, resident

    def _reject_infeasible(self, now_ns: int, decisions: list[Decision]) -> None:
        for model in list(self.queues):
            queue = self.queues[model]
            while queue and not self._could_finish(now_ns, model, queue[0][2]):
                _, _, r = heapq.heappop(queue)
                self.cold.discard(r.request_id)
                decisions.append(Finish(r.request_id, RequestStatus.REJECTED,
                                        "cannot meet its deadline"))
            if not queue:
                del self.queues[model]  # only models with waiting requests stay

    def _model_facts(self, model: str) -> tuple[list[int], float, float]:
        """(padded, ns per sample, ns per sample from shared memory) of a catalogued model, built
        once: padded[n] is the smallest compiled batch size that holds n samples; a sample's
        inputs take the first time to reach a worker through the socket, the second to be read
        from shared memory on the worker's host."""
        info = self.catalog[model]
        sizes = info.batch_sizes
        padded = [next(s for s in sizes if s >= n) for n in range(sizes[-1] + 1)]
        nbytes = sum(t.sample_bytes for t in info.inputs)
        facts = self._facts[model] = (padded, nbytes * self.config.input_ns_per_byte,
                                      nbytes * self.config.shm_input_ns_per_byte)
        return facts

    def _best_batch(self, now_ns: int, gpu: Gpu, model: str, queue: list):
        """The largest feasible batch of the most urgent requests in `queue`, as
        (urgency, start, batch size, k requests, estimate, deadline), or None."""
        padded, per_sample, per_sample_shared = self._facts.get(model) or self._model_facts(model)
        largest = len(padded) - 1
        # the inputs must reach the worker first: more of them (a larger batch) start later,
        # and a batch is not planned while the GPU frees more than schedule_ahead after they
        # could arrive (the larger the batch, the sooner it is due)
        floor = max(gpu.exec_free_ns, gpu.loaded[model])
        reach = now_ns + self.config.network_latency_ns
        due = gpu.exec_free_ns - self.config.schedule_ahead_ns
        per_sample_ref = per_sample_shared if gpu.shares_memory else per_sample
        # EDF: the head is the most urgent
        deadline = queue[0][0] - self.margin_ns.get(gpu.worker_id,
                                                    self.config.completion_margin_ns)
        get = self.estimates.value.__getitem__
        if len(queue) == 1:  # the common case: one request, nothing to sort or add up
            r = queue[0][2]
            if r.n > largest:
                return None
            b = padded[r.n]
            arrive = reach + int(r.n * (per_sample_ref if r.by_reference else per_sample))
            if arrive <= due:
                return None
            est = get(("exec", gpu.worker_id, gpu.index, model, b))
            start = max(floor, arrive)
            return (deadline - est, start, b, 1, est, deadline) if start + est <= deadline \
                else None
        head = _heap_head(queue, largest)
        samples, input_ns, prefix, inputs_ns = 0, 0.0, [], []
        for _, _, r in head:
            if samples + r.n > largest:
                break
            samples += r.n
            input_ns += r.n * (per_sample_ref if r.by_reference else per_sample)
            prefix.append(samples)
            inputs_ns.append(input_ns)
        for k in range(len(prefix), 0, -1):
            arrive = reach + int(inputs_ns[k - 1])
            if arrive <= due:
                return None  # smaller batches arrive sooner: not due either
            b = padded[prefix[k - 1]]
            est = get(("exec", gpu.worker_id, gpu.index, model, b))
            start = max(floor, arrive)
            if start + est <= deadline:
                return deadline - est, start, b, k, est, deadline
        return None

    def _plan_infers(self, now_ns: int, decisions: list[Decision]) -> None:
        if not self.queues:
            return
        # the planning horizon, stretched by the longest time a batch's inputs may take
        horizon = now_ns + self.config.schedule_ahead_ns + self._lead_cap_ns
        queues = self.queues
        # Only GPUs inside the horizon and only models with waiting requests are looked at:
        # with thousands of resident models, a tick must not cost a pass over all of them.
        candidates = [g for g in self.gpus.values() if g.exec_free_ns < horizon]
        while candidates and queues:
            # One INFER per GPU per pass, earliest-free GPU first, so that work spreads.
            planned, touched = set(), set()
            for gpu in sorted(candidates, key=_exec_free):
                if not queues:
                    break  # all planned: the GPUs left would find nothing
                loaded = gpu.loaded
                best = None
                for m, queue in queues.items():
                    if m in loaded:
                        opt = self._best_batch(now_ns, gpu, m, queue)
                        if opt is not None and (best is None or opt[0] < best[0]):
                            best, model = opt, m
                if best is None:
                    continue
                _, start, b, k, est, deadline = best
                queue = queues[model]
                requests = [heapq.heappop(queue)[2] for _ in range(k)]
                if not queue:
                    del queues[model]  # only models with waiting requests stay
                touched.add(model)
                action_id = next(self._ids)
                latest = min(start + self.slack_ns.get(gpu.worker_id, self.config.infer_slack_ns),
                             deadline - est)
                decisions.append(SendInfer(action_id, gpu.worker_id, gpu.index, model, b,
                                           [r.request_id for r in requests], start, latest, est))
                self.inflight[action_id] = _InFlight("infer", gpu.key, model, b, requests,
                                                     earliest_ns=start)
                # EDF: the first request popped has the earliest deadline
                heapq.heappush(self._guards, (requests[0].deadline_ns, action_id))
                self.last_exec[gpu.key] = action_id
                gpu.exec_free_ns = start + est
                gpu.busy_ns += est
                gpu.last_used_ns[model] = now_ns
                planned.add(id(gpu))
            # The next pass needs only the GPUs that got work (they may take more) and those
            # holding a model whose queue head moved (a later head may now be feasible there):
            # any other GPU would find the same nothing again.
            if not planned or not queues:
                break
            touched.intersection_update(queues)
            candidates = [g for g in candidates if g.exec_free_ns < horizon and (
                id(g) in planned or (touched and _holds_any(g, touched)))]

    def _demand(self, now_ns: int, model: str) -> float:
        queue = self.queues.get(model)
        if not queue:
            return 0.0  # cold demand only: after the models with waiting requests
        exec_ns = min(self.catalog[model].exec_ns.values())
        return len(queue) * exec_ns / max(1, queue[0][0] - now_ns)

    def _backlogged(self, now_ns: int, model: str) -> bool:
        """The unmet demand that makes Clockwork load another copy: more queued work than the
        GPUs holding the model can do before the head's deadline, or every holder busy well
        beyond the planning horizon while some other GPU idles."""
        queue = self.queues[model]
        holders = [g for g in self.gpus.values() if model in g.loaded]
        if not holders:
            return True
        info = self.catalog[model]
        biggest = info.batch_sizes[-1]
        work = sum(len(queue) / biggest * self._exec_est(g, model, biggest)
                   for g in holders) / len(holders)
        capacity = sum(max(0, queue[0][0] - max(now_ns, g.exec_free_ns, g.loaded[model]))
                       for g in holders)
        if work > capacity:
            return True
        horizon = now_ns + self.config.schedule_ahead_ns
        if min(g.exec_free_ns for g in holders) <= horizon + self.config.schedule_ahead_ns:
            return False
        return any(g.exec_free_ns <= now_ns and model not in g.loaded
                   and g.worker_id in self.holders.get(model, ()) for g in self.gpus.values())

    def _plan_loads(self, now_ns: int, decisions: list[Decision], replicate: bool) -> None:
        if not self.queues and not self.cold_demand:
            return

        def resident(m: str) -> bool:
            return any(m in g.loaded for g in self.gpus.values())

        wanted = [m for m, q in self.queues.items() if q and (
            not resident(m) or (replicate and self._backlogged(now_ns, m)))]
        for m, t in list(self.cold_demand.items()):
            if resident(m) or now_ns - t > COLD_DEMAND_TTL_NS:
                del self.cold_demand[m]
            elif m not in self.queues:
                wanted.append(m)
        for model in sorted(wanted, key=lambda m: -self._demand(now_ns, m)):
            info = self.catalog[model]
            candidates = [g for g in self.gpus.values()
                          if model not in g.loaded
                          and g.worker_id in self.holders.get(model, ())
                          and g.loads_in_flight < self.config.max_loads_in_flight
                          and info.pages <= g.pages]
            for gpu in sorted(candidates, key=lambda g: (g.exec_free_ns, -g.free_pages)):
                victims = self._victims(gpu, info.pages - gpu.free_pages)
                if victims is None:
                    continue
                earliest = max(now_ns + self.config.network_latency_ns, gpu.weights_free_ns)
                for victim in victims:
                    action_id = next(self._ids)
                    decisions.append(SendUnload(action_id, gpu.worker_id, gpu.index, victim,
                                                earliest, earliest + self.config.load_slack_ns, 0))
                    self.inflight[action_id] = _InFlight("unload", gpu.key, victim)
                    del gpu.loaded[victim]
                    gpu.last_used_ns.pop(victim, None)
                    gpu.free_pages += self.catalog[victim].pages
                est = self.estimates.get(("load", gpu.worker_id, gpu.index, model))
                action_id = next(self._ids)
                decisions.append(SendLoad(action_id, gpu.worker_id, gpu.index, model, earliest,
                                          earliest + self.config.load_slack_ns, est))
                self.inflight[action_id] = _InFlight("load", gpu.key, model, pages=info.pages)
                gpu.loaded[model] = earliest + est  # predicted ready time until the result says
                gpu.weights_free_ns = earliest + est
                gpu.loads_in_flight += 1
                gpu.free_pages -= info.pages
                gpu.last_used_ns[model] = now_ns
                break

    def _victims(self, gpu: Gpu, pages_needed: int) -> list[str] | None:
        """Least-recently-used idle models whose pages cover `pages_needed`, or None."""
        if pages_needed <= 0:
            return []
        busy = {f.model for f in self.inflight.values() if f.gpu == gpu.key}
        idle = [m for m in gpu.loaded if m not in busy and not self.queues.get(m)]
        victims, freed = [], 0
        for m in sorted(idle, key=lambda m: gpu.last_used_ns.get(m, 0)):
            victims.append(m)
            freed += self.catalog[m].pages
            if freed >= pages_needed:
                return victims
        return None

    # --- views ---------------------------------------------------------------------------
    def models(self) -> dict[str, ModelInfo]:
        return {m: info for m, info in self.catalog.items() if self.holders.get(m)}

    def model_info(self, model: str) -> ModelInfo | None:
        return self.catalog.get(model) if self.holders.get(model) else None

    def queue_length(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def worker_windows(self, worker_id: int) -> tuple[int, int] | None:
        c = self.config
        return (self.slack_ns.get(worker_id, c.infer_slack_ns),
                self.margin_ns.get(worker_id, c.completion_margin_ns))

    def _wake_lead_ns(self, gpu: Gpu) -> int | None:
        """How long the inputs of the largest batch queued for `gpu` take to reach it (each
        request counted as one sample), or None if it holds no model with waiting requests."""
        lead, loaded = None, gpu.loaded
        for m, queue in self.queues.items():
            if m in loaded:
                padded, per_sample, per_sample_shared = self._facts.get(m) or self._model_facts(m)
                samples = min(len(queue), len(padded) - 1)
                t = int(samples * (per_sample_shared if gpu.shares_memory else per_sample))
                if lead is None or t > lead:
                    lead = t
        return None if lead is None else lead + self.config.network_latency_ns

    def next_wakeup_ns(self, now_ns: int) -> int | None:
        """When a tick could next do something no event will prompt: a GPU reaching the planning
        horizon while requests wait, or an INFER's answer guard coming due. For event-driven
        (virtual-time) callers."""
        guards = self._guards
        while guards and guards[0][1] not in self.inflight:
            heapq.heappop(guards)  # its INFER returned: nothing to guard
        guard = guards[0][0] - self.config.answer_guard_ns if guards else None
        if not self.queues:
            return None if guard is None else max(now_ns + 100_000, guard)
        ahead = self.config.schedule_ahead_ns
        # A GPU matters only if it holds a model with waiting requests; a model still loading
        # is woken by its LOAD's result. The earliest head deadline bounds how long an
        # infeasible request waits for its rejection.
        times = []
        for g in self.gpus.values():
            lead = self._wake_lead_ns(g)
            if lead is not None:
                times.append(g.exec_free_ns - ahead - lead + 1)  # the first ns it is due
        times += [q[0][0] - self.config.completion_margin_ns for q in self.queues.values() if q]
        if guard is not None:
            times.append(guard)
        return max(now_ns + 100_000, min(times)) if times else None


def _heap_head(heap: list, k: int) -> list:
    """The k smallest items of a heapq heap, in order, reading O(k log k) of it: under
    overload a model's queue holds thousands of requests, and heapq.nsmallest reads all of
    them on every planning pass (a closed loop of 80,000 clients took minutes)."""
    if len(heap) <= k:
        return sorted(heap)
    head, frontier, n = [], [(heap[0], 0)], len(heap)
    while len(head) < k:
        item, i = heapq.heappop(frontier)
        head.append(item)
        for child in (2 * i + 1, 2 * i + 2):  # heapq's layout
            if child < n:
                heapq.heappush(frontier, (heap[child], child))
    return head
