"""The unexpected errors of a serving loop, logged without flooding the log: a loop that fails
the same way on every iteration (a thousand times a second) would otherwise bury the first
traceback, and every other line, under identical ones."""

from __future__ import annotations

import logging
import threading
from collections import Counter

REPEAT_REPORT_NS = 10_000_000_000


class LoopErrors:
    """Logs the traceback of each new kind of failure (what failed, the error's type and where
    it was raised) once; repeats are counted and summed up, one line per kind, at most every
    `report_every_ns` and when the loop stops. Threads may share one (a worker's executors)."""

    def __init__(self, logger: logging.Logger, what: str,
                 report_every_ns: int = REPEAT_REPORT_NS):
        self.log = logger
        self.what = what  # "controller step", say
        self.report_every_ns = report_every_ns
        self.seen: set[tuple] = set()
        self.repeats: Counter = Counter()  # what -> failures not logged yet
        self._last_report_ns: int | None = None
        self._lock = threading.Lock()

    def report(self, error: BaseException, now_ns: int, what: str | None = None,
               detail: str = "") -> None:
        """Call from an `except` block (the traceback logged is the one being handled).
        `detail` (the model, say) goes into the first line of a kind only."""
        what = what or self.what
        tb = error.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        key = (what, type(error), tb and tb.tb_frame.f_code.co_filename, tb and tb.tb_lineno)
        with self._lock:
            new = key not in self.seen
            if new:
                self.seen.add(key)
                if self._last_report_ns is None:
                    self._last_report_ns = now_ns
            else:
                self.repeats[what] += 1
        if new:
            self.log.exception("%s failed%s", what, f" ({detail})" if detail else "")
        else:
            self.flush(now_ns)

    def flush(self, now_ns: int | None = None) -> None:
        """Log the repeats counted so far: every `report_every_ns`, or now without `now_ns`."""
        with self._lock:
            if not self.repeats or (now_ns is not None and self._last_report_ns is not None
                                    and now_ns - self._last_report_ns < self.report_every_ns):
                return
            repeats, self.repeats = self.repeats, Counter()
            if now_ns is not None:
                self._last_report_ns = now_ns
        for what, n in sorted(repeats.items()):
            self.log.error("%s failed %d more times the same way (traceback above)", what, n)
