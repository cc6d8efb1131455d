"""What held a serving process up: `--log-stalls 1ms` on `cw serve`, `cw serve controller` and
`cw serve worker` reports every stall longer than that.

Three kinds, each a plain log line, so that a run on the GPU machine shows which one a latency
outlier coincides with:
- a loop iteration that kept the loop busy that long (the loop reports it, with what it handled);
- a garbage collection that long (`gc.callbacks`);
- the process unable to run Python that long: a watch thread that asks to wake every
  millisecond and notes how late it wakes. It is late when another thread holds the GIL (a long
  call into C that does not release it, a collection) or when the OS gives the process no core.
"""

from __future__ import annotations

import gc
import logging
import threading
import time

_TICK_S = 0.001
# Stall lines go to this logger (a process may send it to a file of its own: a live replay does)
log = logging.getLogger("cw.stalls")


class StallWatch:
    def __init__(self, name: str, threshold_ns: int, report=log.warning):
        """`report(message)` is called, from any thread, once per stall over `threshold_ns`."""
        self.name = name
        self.threshold_ns = threshold_ns
        self.report = report
        self.stalls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"{name}-stall-watch",
                                        daemon=True)
        self._gc_started_ns: int | None = None

    def start(self) -> "StallWatch":
        gc.callbacks.append(self._on_gc)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._thread.is_alive():
            self._thread.join(timeout=1)

    def iteration(self, busy_ns: int, detail: str) -> None:
        """The owning loop's report of one iteration (a cheap comparison when below)."""
        if busy_ns > self.threshold_ns:
            self._stall(f"a loop iteration was busy {busy_ns / 1e6:.2f} ms ({detail})")

    def _stall(self, what: str) -> None:
        self.stalls += 1
        self.report(f"{self.name} stall: {what}")

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started_ns = time.perf_counter_ns()
        elif self._gc_started_ns is not None:
            took = time.perf_counter_ns() - self._gc_started_ns
            self._gc_started_ns = None
            if took > self.threshold_ns:
                self._stall(f"garbage collection of generation {info['generation']} took "
                            f"{took / 1e6:.2f} ms")

    def _watch(self) -> None:
        clock = time.perf_counter_ns
        expected = clock() + int(_TICK_S * 1e9)
        while not self._stop.wait(_TICK_S):
            now = clock()
            late = now - expected
            if late > self.threshold_ns:
                self._stall(f"Python could not run for {late / 1e6:.2f} ms (another thread "
                            "held the GIL, or the process had no core)")
            expected = now + int(_TICK_S * 1e9)
