"""The unexpected errors of a serving loop, logged without flooding the log: a loop that fails
the same way on every iteration (a thousand times a second) would otherwise bury the first
traceback, and every other line, under identical ones."""

from __future__ import annotations

import logging

REPEAT_REPORT_NS = 10_000_000_000


class LoopErrors:
    """Logs the traceback of each new kind of error (its type and where it was raised) once;
    repeats are counted and summed up in one line at most every `report_every_ns`, and when
    the loop stops."""

    def __init__(self, logger: logging.Logger, what: str,
                 report_every_ns: int = REPEAT_REPORT_NS):
        self.log = logger
        self.what = what  # "controller step", say
        self.report_every_ns = report_every_ns
        self.seen: set[tuple] = set()
        self.repeats = 0
        self._last_report_ns: int | None = None

    def report(self, error: BaseException, now_ns: int) -> None:
        """Call from the loop's `except` block (the traceback is the one being handled)."""
        tb = error.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        key = (type(error), tb and tb.tb_frame.f_code.co_filename, tb and tb.tb_lineno)
        if key not in self.seen:
            self.seen.add(key)
            self.log.exception("%s failed", self.what)
            if self._last_report_ns is None:
                self._last_report_ns = now_ns
            return
        self.repeats += 1
        self.flush(now_ns)

    def flush(self, now_ns: int | None = None) -> None:
        """Log the repeats counted so far: every `report_every_ns`, or now without `now_ns`."""
        if not self.repeats:
            return
        if now_ns is not None and self._last_report_ns is not None and \
                now_ns - self._last_report_ns < self.report_every_ns:
            return
        self.log.error("%s failed %d more times the same way (traceback above)", self.what,
                       self.repeats)
        self.repeats = 0
        if now_ns is not None:
            self._last_report_ns = now_ns
