"""When `cw serve` starts a local worker again after it ended: a pure policy, times in and
decisions out (the caller owns the processes and the clock).

A worker that dies is Clockwork's worker loss: the controller serves on with the rest. An
all-in-one `cw serve` left running for days should not stay short of a worker after one crash
(the OOM killer, a device fault a fresh process clears), so it starts it again after a delay
that doubles while the worker keeps dying, and stops trying where that cannot help: a worker
that refused its bundles or its flags (it would refuse them again), or one that ended several
times in a row without ever joining the controller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from cw.errors import BundleError, ModelError, UsageError

# exit codes of a worker that refused what it was given: starting it again cannot help
REFUSAL_EXIT_CODES = frozenset(e.exit_code for e in (UsageError, ModelError, BundleError))


@dataclass(frozen=True)
class RestartConfig:
    enabled: bool = True
    first_delay_s: float = 1.0
    max_delay_s: float = 60.0
    # a worker that served this long before it ended starts over at the first delay
    steady_s: float = 60.0
    # ended this many times in a row without joining the controller: not started again
    max_failed_starts: int = 3

    def __post_init__(self):
        if not 0 < self.first_delay_s <= self.max_delay_s:
            raise UsageError("restart delays must be positive, the first no longer than the "
                             f"longest ({self.first_delay_s:g} s, {self.max_delay_s:g} s)")
        if self.max_failed_starts < 1:
            raise UsageError("max_failed_starts must be ≥ 1")


class WorkerEvent(NamedTuple):
    index: int
    kind: str   # "ended" | "restarted" | "rejoined"
    text: str   # for a user, one line


@dataclass
class _State:
    started_s: float
    joined: bool = False
    restart_at_s: float | None = None  # when it is to start again; None: running, or never
    delay_s: float = 0.0
    failed_starts: int = 0   # ended without joining, in a row
    restarts: int = 0
    given_up: bool = False


class RestartPlan:
    """Per local worker: whether and when to start it again. Told what happened (`ended`,
    `started`, `joined`), asked what is due (`due`); it never looks at a clock or a process."""

    def __init__(self, config: RestartConfig, workers: int, now_s: float):
        self.config = config
        # the first start waited for every worker to join
        self._states = [_State(now_s, joined=True) for _ in range(workers)]

    def ended(self, index: int, now_s: float, exit_code: int) -> str:
        """Worker `index` ended with `exit_code` (negative: by that signal). Returns what
        happens next, in words."""
        s, c = self._states[index], self.config
        s.failed_starts = 0 if s.joined else s.failed_starts + 1
        if not c.enabled:
            s.given_up = True
            return "not restarted (--no-restart)"
        if exit_code in REFUSAL_EXIT_CODES:
            s.given_up = True
            return "not restarted: it would refuse the same again"
        if s.failed_starts >= c.max_failed_starts:
            s.given_up = True
            return (f"not restarted: it ended {s.failed_starts} times in a row without "
                    "joining the controller")
        steady = s.joined and now_s - s.started_s >= c.steady_s
        s.delay_s = c.first_delay_s if steady or s.delay_s == 0 else min(
            2 * s.delay_s, c.max_delay_s)
        s.restart_at_s = now_s + s.delay_s
        return f"restarting it in {s.delay_s:g} s"

    def due(self, now_s: float) -> list[int]:
        """Workers to start again now."""
        return [i for i, s in enumerate(self._states)
                if s.restart_at_s is not None and now_s >= s.restart_at_s]

    def started(self, index: int, now_s: float) -> int:
        """It was started again; returns how many times it has been."""
        s = self._states[index]
        s.started_s, s.joined, s.restart_at_s = now_s, False, None
        s.restarts += 1
        return s.restarts

    def joined(self, index: int) -> bool:
        """It joined the controller; True the first time since it was started again."""
        s = self._states[index]
        first = not s.joined
        s.joined = True
        return first

    def waiting(self) -> list[int]:
        """Workers started again and not joined yet."""
        return [i for i, s in enumerate(self._states)
                if not s.joined and s.restart_at_s is None and not s.given_up]

    def given_up(self) -> list[int]:
        return [i for i, s in enumerate(self._states) if s.given_up]
