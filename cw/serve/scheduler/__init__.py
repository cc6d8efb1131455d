"""Schedulers: pure policies. Events and `now_ns` in, decisions out; no sockets, threads or clocks.

`make_scheduler(name, config)` builds one by name for the controller and the simulator.
"""

from __future__ import annotations

from cw.serve.scheduler.base import Scheduler, SchedulerConfig


SCHEDULERS = ("clockwork", "clipper", "batch-timeout", "fifo")


def make_scheduler(name: str, config: SchedulerConfig | None = None) -> Scheduler:
    from cw.errors import UsageError
    from cw.serve.scheduler.baselines import (BatchTimeoutScheduler, ClipperScheduler,
                                              FifoScheduler)
    from cw.serve.scheduler.clockwork import ClockworkScheduler

    config = config or SchedulerConfig()
    table = {"clockwork": ClockworkScheduler, "clipper": ClipperScheduler,
             "batch-timeout": BatchTimeoutScheduler, "fifo": FifoScheduler}
    if name not in table:
        raise UsageError(f"unknown scheduler '{name}'", f"choose one of: {', '.join(SCHEDULERS)}")
    return table[name](config)
