"""Baseline policies for side-by-side comparisons, behind the same interface.

They share the Clockwork scheduler's bookkeeping of workers, GPUs, estimates and model placement
(every model stays loaded while memory allows, else least-recently-used idle models are unloaded
on demand), but not its admission control or planning: like the systems they stand for, they
send the next batch to a GPU when it is idle, never reject early, and run requests even when they
will be late (the action's window is left open).

- `fifo`: one request at a time, oldest first, no batching.
- `batch-timeout` (Triton / TF-Serving dynamic batching): per-model FIFO queue; a batch goes
  out when `max_batch` requests wait or the oldest has waited `max_queue_delay`.
- `clipper` (Clipper, NSDI'17 §4.3): per-model queue with an AIMD batch size — add
  `aimd_step` after each batch whose processing time stays within the SLO, cut by 10% after one
  that exceeds it; no early rejection.
"""

from __future__ import annotations

import heapq

from cw.serve.protocol import RequestStatus, Status
from cw.serve.scheduler.base import (ActionResult, Decision, Finish, Gpu, Request,
                                     SchedulerConfig, SendInfer)
from cw.serve.scheduler.clockwork import ClockworkScheduler, _InFlight

OPEN_WINDOW_NS = 3_600 * 1_000_000_000  # baselines never let a worker refuse work as late
UNSERVABLE = "no worker has the model on a GPU large enough for it"


class _Baseline(ClockworkScheduler):
    def __init__(self, config: SchedulerConfig):
        super().__init__(config)
        self.arrivals: dict[int, int] = {}
        self.busy: dict[tuple[int, int], int] = {}  # gpu -> INFERs in flight

    def worker_windows(self, worker_id: int) -> None:
        return None  # a batch's window is left open, and no margin is planned

    def _servable(self, model: str) -> bool:
        """Some GPU of a worker that has the model could hold it. These policies never reject
        for lack of time, but a request no GPU can ever run would wait forever."""
        info, holders = self.catalog.get(model), self.holders.get(model)
        return info is not None and bool(holders) and any(
            g.worker_id in holders and info.pages <= g.pages for g in self.gpus.values())

    def request_arrived(self, now_ns: int, request: Request) -> list[Decision]:
        if not self._servable(request.model):
            return [Finish(request.request_id, RequestStatus.REJECTED, UNSERVABLE)]
        if not any(request.model in g.loaded for g in self.gpus.values()):
            self.cold.add(request.request_id)
        # FIFO per model: order by arrival, not deadline
        heapq.heappush(self.queues.setdefault(request.model, []),
                       (request.arrival_ns, request.request_id, request))
        return []

    def _enqueue(self, r: Request) -> None:
        heapq.heappush(self.queues.setdefault(r.model, []), (r.arrival_ns, r.request_id, r))

    def _reject_infeasible(self, now_ns: int, decisions: list[Decision]) -> None:
        for model in [m for m, q in self.queues.items() if not q]:
            del self.queues[model]
        for model in [m for m in self.queues if not self._servable(m)]:
            for _, _, r in self.queues.pop(model):  # the workers that could run it left
                decisions.append(Finish(r.request_id, RequestStatus.REJECTED, UNSERVABLE))

    def _batch_for(self, now_ns: int, model: str) -> int:
        raise NotImplementedError

    def _plan_infers(self, now_ns: int, decisions: list[Decision]) -> None:
        for gpu in self.gpus.values():
            if self.busy.get(gpu.key, 0):
                continue
            ready = [(q[0][0], m) for m, q in self.queues.items()
                     if q and m in gpu.loaded and self._batch_for(now_ns, m) > 0]
            if not ready:
                continue
            _, model = min(ready)
            self._send_batch(now_ns, gpu, model, self._batch_for(now_ns, model), decisions)

    def _send_batch(self, now_ns: int, gpu: Gpu, model: str, k: int,
                    decisions: list[Decision]) -> None:
        info = self.catalog[model]
        queue = self.queues[model]
        requests = [heapq.heappop(queue)[2] for _ in range(min(k, len(queue)))]
        if not queue:
            del self.queues[model]  # only models with waiting requests stay
        b = next(s for s in info.batch_sizes if s >= len(requests))
        est = self._exec_est(gpu, model, b)
        start = self._earliest_start(now_ns, gpu, model)
        action_id = next(self._ids)
        decisions.append(SendInfer(action_id, gpu.worker_id, gpu.index, model, b,
                                   [r.request_id for r in requests], start,
                                   start + OPEN_WINDOW_NS, est))
        self.inflight[action_id] = _InFlight("infer", gpu.key, model, b, requests)
        self.last_exec[gpu.key] = action_id
        self.busy[gpu.key] = self.busy.get(gpu.key, 0) + 1
        gpu.exec_free_ns = start + est
        gpu.busy_ns += est
        gpu.last_used_ns[model] = now_ns

    def result_returned(self, now_ns: int, result: ActionResult) -> list[Decision]:
        f = self.inflight.get(result.action_id)
        if f is not None and f.kind == "infer":
            self.busy[f.gpu] = max(0, self.busy.get(f.gpu, 0) - 1)
            if result.status == Status.OK:
                self._observe_batch(f, result)
        return super().result_returned(now_ns, result)

    def _observe_batch(self, f: _InFlight, result: ActionResult) -> None:
        pass

    def worker_left(self, now_ns: int, worker_id: int) -> list[Decision]:
        for key in [k for k in self.busy if k[0] == worker_id]:
            del self.busy[key]
        return super().worker_left(now_ns, worker_id)

    def next_wakeup_ns(self, now_ns: int) -> int | None:
        # GPUs free up and loads complete through results, which tick; this timer is a
        # fallback only.
        return now_ns + 10_000_000 if self.queues else None


class FifoScheduler(_Baseline):
    name = "fifo"

    def _batch_for(self, now_ns: int, model: str) -> int:
        return 1


class BatchTimeoutScheduler(_Baseline):
    name = "batch-timeout"

    def __init__(self, config: SchedulerConfig, max_batch: int = 16,
                 max_queue_delay_ns: int = 2_000_000):
        super().__init__(config)
        self.max_batch = max_batch
        self.max_queue_delay_ns = max_queue_delay_ns

    def _batch_for(self, now_ns: int, model: str) -> int:
        queue = self.queues[model]
        limit = min(self.max_batch, self.catalog[model].batch_sizes[-1])
        if len(queue) >= limit or now_ns - queue[0][0] >= self.max_queue_delay_ns:
            return min(len(queue), limit)
        return 0

    def next_wakeup_ns(self, now_ns: int) -> int | None:
        if not self.queues:
            return None
        # A batch whose delay has passed waits only for a busy GPU, whose result will tick.
        due = [t for q in self.queues.values() if (t := q[0][0] + self.max_queue_delay_ns) > now_ns]
        return min(due) if due else now_ns + 10_000_000


class ClipperScheduler(_Baseline):
    name = "clipper"

    def __init__(self, config: SchedulerConfig, slo_ns: int = 100_000_000, aimd_step: int = 1,
                 backoff: float = 0.9):
        super().__init__(config)
        self.slo_ns = slo_ns
        self.aimd_step = aimd_step
        self.backoff = backoff
        self.max_batch: dict[str, float] = {}

    def request_arrived(self, now_ns: int, request: Request) -> list[Decision]:
        self.slo_ns = request.deadline_ns - request.arrival_ns  # the SLO the AIMD aims at
        return super().request_arrived(now_ns, request)

    def _batch_for(self, now_ns: int, model: str) -> int:
        limit = self.catalog[model].batch_sizes[-1]
        return max(1, min(int(self.max_batch.get(model, 1)), limit, len(self.queues[model])))

    def _observe_batch(self, f: _InFlight, result: ActionResult) -> None:
        current = self.max_batch.get(f.model, 1.0)
        limit = self.catalog[f.model].batch_sizes[-1]
        if result.device_ns > self.slo_ns:
            self.max_batch[f.model] = max(1.0, current * self.backoff)
        else:
            self.max_batch[f.model] = min(float(limit), current + self.aimd_step)
