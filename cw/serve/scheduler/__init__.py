"""Schedulers: pure policies. Events and `now_ns` in, decisions out; no sockets, threads or clocks.

`make_scheduler(spec, config)` builds one for the controller and the simulator from a spec such
as `clockwork` or `batch-timeout:delay=5ms` (spec.py).
"""

from __future__ import annotations

from cw.serve.scheduler.base import Scheduler, SchedulerConfig
from cw.serve.scheduler.spec import (SCHEDULERS, SchedulerSpec, make_scheduler, parse_scheduler,
                                     parse_schedulers)

__all__ = ["SCHEDULERS", "Scheduler", "SchedulerConfig", "SchedulerSpec", "make_scheduler",
           "parse_scheduler", "parse_schedulers"]
