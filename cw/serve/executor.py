"""A timed executor: one thread, a queue ordered by `earliest`, never runs late work.

`submit(earliest_ns, latest_ns, item)` (worker clock). The thread waits until the head's
earliest time, then calls `run(item)` if the time is still ≤ latest, else `too_late(item)`.
Items that can never start (latest already passed) are reported as soon as they reach the head.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from typing import Callable

from cw.serve.runtime.base import SPIN_NS, now_ns

log = logging.getLogger("cw.worker")


class Executor:
    def __init__(self, name: str, run: Callable, too_late: Callable, spin_ns: int = SPIN_NS):
        """`spin_ns`: how long before `earliest` to stop sleeping and spin. A simulated device
        passes 0: its start times need no sub-100 µs precision, and spinning would take CPU from
        the processes it shares a machine with."""
        self.name = name
        self.spin_ns = spin_ns
        self._run, self._too_late = run, too_late
        self._heap: list = []
        self._seq = itertools.count()  # FIFO among equal earliest times
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, earliest_ns: int, latest_ns: int, item) -> None:
        with self._cond:
            heapq.heappush(self._heap, (earliest_ns, next(self._seq), latest_ns, item))
            self._cond.notify()

    def __len__(self) -> int:
        return len(self._heap)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> list:
        """Stop the thread; returns the items never started, so each can still get a result."""
        with self._cond:
            self._stopped = True
            left = [entry[3] for entry in sorted(self._heap)]
            self._heap.clear()
            self._cond.notify()
        self._thread.join(timeout=5)
        return left

    def _next(self):
        with self._cond:
            while True:
                if self._stopped:
                    return None
                if not self._heap:
                    self._cond.wait()
                    continue
                earliest, _, latest, item = self._heap[0]
                wait = earliest - now_ns()
                if wait > self.spin_ns:
                    # then re-check: an earlier item may have come meanwhile
                    self._cond.wait((wait - self.spin_ns) / 1e9)
                    continue
                heapq.heappop(self._heap)
                break
        while now_ns() < earliest:
            pass
        return item, latest

    def _loop(self) -> None:
        while True:
            entry = self._next()
            if entry is None:
                return
            item, latest = entry
            try:
                if now_ns() > latest:
                    self._too_late(item)
                else:
                    self._run(item)
            except Exception:  # an executor must outlive any one action
                log.exception("%s: unexpected error", self.name)
