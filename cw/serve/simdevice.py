"""A simulated device without threads: the executors' rules as a discrete-event simulation that
the worker's own loop advances in real time.

A real device needs a thread per kind of work because each phase blocks on the hardware. A
simulated one only has to *say* when each phase would end, so the same rules — a queue per kind
of work ordered by `earliest`, start no earlier than `earliest`, refuse (TOO_LATE) what cannot
start by `latest`, one EXEC at a time, input copies up to `input_lead_ns` early, an INFER waiting
inside its window for its model's LOAD, UNLOAD waiting for a running EXEC — become events on one
heap. Phase times are the planned ones (start = when the stage and the window allow, end = start
+ the estimate with noise); each result leaves the worker once its end time has passed. This
removes the thread hand-offs that bounded a simulated worker at ~6,000 actions/s.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable

import numpy as np

from cw.serve.protocol import Load, Status
from cw.serve.runtime.base import PhaseTiming

NEVER = 2**62


class EventLoop:
    """Callbacks at given times (worker clock, ns), run by `advance(now)` in time order."""

    def __init__(self):
        self._heap: list = []
        self._seq = itertools.count()

    def at(self, t_ns: int, fn: Callable[[int], None]) -> None:
        heapq.heappush(self._heap, (t_ns, next(self._seq), fn))

    def next_ns(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def advance(self, now_ns: int) -> None:
        while self._heap and self._heap[0][0] <= now_ns:
            t, _, fn = heapq.heappop(self._heap)
            fn(t)

    def clear(self) -> None:
        self._heap.clear()


class Stage:
    """One kind of work on one device: a queue ordered by `earliest`, one item at a time."""

    def __init__(self, loop: EventLoop, start: Callable, too_late: Callable):
        self.loop = loop
        self._start, self._too_late = start, too_late
        self._heap: list = []
        self._seq = itertools.count()
        self.busy = False
        self.free_ns = 0
        self._wake_ns = NEVER  # when a start attempt is scheduled (one at a time)

    def submit(self, t_ns: int, earliest_ns: int, latest_ns: int, item) -> None:
        heapq.heappush(self._heap, (earliest_ns, next(self._seq), latest_ns, item))
        self._kick(t_ns)

    def items(self) -> list:
        return [entry[3] for entry in sorted(self._heap)]

    def clear(self) -> None:
        self._heap.clear()

    def _kick(self, t_ns: int) -> None:
        """Start what can start at `t_ns`; else make sure a wake-up is scheduled for it."""
        while not self.busy and self._heap:
            when = max(self._heap[0][0], self.free_ns, t_ns)
            if when > t_ns:
                if when < self._wake_ns:
                    self._wake_ns = when
                    self.loop.at(when, self._wake)
                return
            self._start_head(t_ns)

    def _wake(self, t_ns: int) -> None:
        if t_ns == self._wake_ns:  # else superseded by an earlier wake-up
            self._wake_ns = NEVER
            self._kick(t_ns)

    def _start_head(self, t_ns: int) -> None:
        _, _, latest, item = heapq.heappop(self._heap)
        if t_ns > latest:
            return self._too_late(item, t_ns)
        # None: finished at once; NEVER: busy until someone calls done(); else busy until end
        end = self._start(item, t_ns)
        if end is None:
            return
        self.busy = True
        if end != NEVER:
            self.loop.at(end, self.done)

    def done(self, t_ns: int) -> None:
        self.busy = False
        self.free_ns = t_ns
        self._kick(t_ns)


class SimulatedDevice:
    def __init__(self, index: int, runtime, worker):
        self.index = index
        self.runtime = runtime
        self.worker = worker
        self.loop = EventLoop()
        self.weights = Stage(self.loop, self._start_weights, self._weights_too_late)
        self.input = Stage(self.loop, self._start_input, self._infer_too_late)
        self.exec = Stage(self.loop, self._start_exec, self._infer_too_late)
        self.output_free_ns = 0  # OUTPUT copies: first come, first served, never late
        self.loading: dict[str, int | None] = {}  # model -> end of its LOAD (None: not started)
        self.exec_end_ns = 0
        self._in_flight: dict[int, object] = {}   # jobs between stages, by id(job)
        self._zeros: dict[tuple, bytes] = {}

    # --- entry points from the worker ---------------------------------------------------
    def submit_weights(self, now_ns: int, action, received_ns: int) -> None:
        to_local = self.worker.clock.to_local
        if isinstance(action, Load):
            self.loading.setdefault(action.model, None)
        self.weights.submit(now_ns, to_local(action.earliest_ns), to_local(action.latest_ns),
                            (action, received_ns))

    def submit_infer(self, now_ns: int, job) -> None:
        a = job.action
        to_local = self.worker.clock.to_local
        self._in_flight[id(job)] = job
        self.input.submit(now_ns, to_local(a.earliest_ns) - self.worker.config.input_lead_ns,
                          to_local(a.latest_ns), job)

    def next_ns(self) -> int | None:
        return self.loop.next_ns()

    def advance(self, now_ns: int) -> None:
        self.loop.advance(now_ns)

    def stop(self) -> list:
        """Everything not finished, to be answered SHUTTING_DOWN."""
        left = self.weights.items() + list(self._in_flight.values())
        for stage in (self.weights, self.input, self.exec):
            stage.clear()
        self._in_flight.clear()
        self.loop.clear()
        return left

    # --- weights ------------------------------------------------------------------------
    def _start_weights(self, item, t_ns: int):
        action, received = item
        rt, w = self.runtime, self.worker
        model = w.models[action.model]
        if not isinstance(action, Load):
            start = max(t_ns, self.exec_end_ns)  # a running EXEC keeps its weights to the end

            def unload(t: int) -> None:
                rt.cache.release(rt.unload(model))
                w._send(action, Status.OK, received, [PhaseTiming(t, t, 0)])

            self.loop.at(start, unload)
            return start
        if rt.is_loaded(model.model_id):
            self.loading.pop(action.model, None)
            w._send(action, Status.ALREADY_LOADED, received)
            return None
        slots = rt.cache.allocate(model.weights.num_pages)
        if slots is None:
            self.loading.pop(action.model, None)
            w._send(action, Status.NO_PAGES, received,
                    message=f"needs {model.weights.num_pages} pages, {rt.cache.free_pages} free")
            return None
        duration = rt.noisy(rt.estimates(model).load_ns)
        end = t_ns + duration
        self.loading[action.model] = end

        def finished(t: int) -> None:
            rt.mark_loaded(model, slots)
            self.loading.pop(action.model, None)
            w._send(action, Status.OK, received, [PhaseTiming(t_ns, t, duration)])

        self.loop.at(end, finished)
        return end

    def _weights_too_late(self, item, t_ns: int) -> None:
        action, received = item
        if isinstance(action, Load):
            self.loading.pop(action.model, None)
        self.worker._send(action, Status.TOO_LATE, received, message="could not start by latest_ns")

    # --- INFER: input, EXEC, output -----------------------------------------------------
    def _phase(self, job, t_ns: int, duration_ns: int) -> int:
        duration_ns = self.runtime.noisy(duration_ns)
        job.timings.append(PhaseTiming(t_ns, t_ns + duration_ns, duration_ns))
        return t_ns + duration_ns

    def _start_input(self, job, t_ns: int) -> int:
        a = job.action
        job.padded = job.model.manifest.kernel_for(a.batch_size).batch_size
        end = self._phase(job, t_ns, self.runtime.estimates(job.model).input_ns[job.padded])
        to_local = self.worker.clock.to_local
        # queued for EXEC now, startable once the copy has ended
        self.exec.submit(t_ns, max(to_local(a.earliest_ns), end), to_local(a.latest_ns), job)
        return end

    def _start_exec(self, job, t_ns: int):
        a, rt = job.action, self.runtime
        if not rt.is_loaded(job.model.model_id) and a.model in self.loading:
            # wait inside the window for the model's LOAD, as the threaded worker does
            load_end = self.loading[a.model]
            latest = self.worker.clock.to_local(a.latest_ns)
            if load_end is not None and load_end > latest:
                self._infer_too_late(job, t_ns)
                return None
            resume = load_end if load_end is not None else min(latest, t_ns + 1_000_000)

            def retry(t: int) -> None:
                if t > latest:
                    self._infer_too_late(job, t)
                    return self.exec.done(t)
                end = self._start_exec(job, t)
                if end is None:
                    self.exec.done(t)
                elif end != NEVER:
                    self.loop.at(end, self.exec.done)

            self.loop.at(resume, retry)
            return NEVER
        if not rt.is_loaded(job.model.model_id):
            self._finish(job, Status.NOT_LOADED,
                         f"model '{a.model}' is not loaded on device {a.gpu}")
            return None
        end = self._phase(job, t_ns, rt.estimates(job.model).exec_ns[job.padded])
        self.exec_end_ns = end
        out_start = max(end, self.output_free_ns)
        out_end = self.output_free_ns = self._phase(
            job, out_start, rt.estimates(job.model).output_ns[job.padded])
        self.loop.at(out_end, lambda t: self._finish(job, Status.OK, "", self._outputs(job)))
        return end

    def _outputs(self, job) -> list[bytes]:
        key = (id(job.model.bundle), job.action.n)
        if key not in self._zeros:
            self._zeros[key] = [np.zeros((job.action.n, *s.sample_shape), s.dtype).tobytes()
                                for s in job.model.manifest.outputs]
        return self._zeros[key]

    def _infer_too_late(self, job, t_ns: int) -> None:
        self._finish(job, Status.TOO_LATE, "could not start by latest_ns")

    def _finish(self, job, status: Status, message: str, outputs=()) -> None:
        self._in_flight.pop(id(job), None)
        w = self.worker
        w._send(job.action, status, job.received_ns, job.timings, message=message,
                outputs=outputs, via=w.devices[job.action.gpu].result_sender)

