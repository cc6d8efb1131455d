"""Several serving policies side by side on one workload: `cw replay --scheduler a,b,c`.

Each policy, or variant of one (`clockwork:ahead=2ms`), replays the same arrivals (same trace,
options and seed) into OUT/<label>/, exactly as a `cw replay` with that one policy would, and
OUT/compare.html overlays them. Simulated
replays run in parallel processes, one per core (they share nothing and each is one busy Python
thread); live ones run one after another, since each needs the machine's cores and GPUs to itself.
OUT appears whole or not at all.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable

from cw.errors import UsageError
from cw.replay.report import (COMPARE_FILE, COMPARE_RUNS, RunSeries, run_label, run_name,
                              write_report)
from cw.replay.runner import ReplayConfig, atomic_output, replay
from cw.replay.traces import load_trace
from cw.serve.scheduler import SchedulerSpec, parse_schedulers



def replay_side_by_side(config: ReplayConfig, schedulers: list[str | SchedulerSpec],
                        progress: Callable[[str, dict], None] | None = None,
                        jobs: int | None = None, slos_ns: list[int] | None = None) -> list[dict]:
    """One replay per policy (or variant of one, `cw.serve.scheduler.parse_schedulers`) and, with
    `slos_ns`, per SLO, into `config.out`/<run_name>/ and `config.out`/compare.html; their
    summaries, SLO by SLO in the order given. `jobs`: simulated replays at once (default: one
    per core). `progress` gets "run_start" and "run_done" ({"run", "scheduler", "index",
    "total"}) events, and a sequential run's own replay events too."""
    progress = progress or (lambda event, info: None)
    schedulers = parse_schedulers(",".join(s if isinstance(s, str) else s.text
                                           for s in schedulers))
    if slos_ns is not None:
        if not slos_ns or any(slo <= 0 for slo in slos_ns):
            raise UsageError("each --slo must be positive", "e.g. --slo 25ms,100ms")
        if len(set(slos_ns)) < len(slos_ns):
            raise UsageError("--slo names one SLO twice", "name each once")
    if config.controller:
        raise UsageError("several runs (--scheduler a,b or --slo x,y) need controllers of their "
                         f"own; the running `cw serve` at {config.controller} has one",
                         "drop --controller (cw starts one per run), or run one policy and SLO "
                         "at a time")
    if config.workload == "trace":
        # here, not in each run: runs in processes of their own have no one to tell
        config, note = config.fitted_to(len(load_trace(config.trace).functions))
        if note:
            progress("note", {"text": note})
    with atomic_output(Path(config.out), config.force) as tmp:
        runs = [(s.text, slo) for slo in (slos_ns or [None]) for s in schedulers]
        configs = [config.changed(scheduler=policy, out=tmp / run_name(
                                      policy, None if slo is None else slo / 1e6),
                                  slo_ns=config.slo_ns if slo is None else slo, force=False)
                   for policy, slo in runs]
        jobs = max(1, min(jobs or os.cpu_count() or 1, len(configs)))
        if config.simulate and jobs > 1:
            results = _in_parallel(configs, jobs, progress)
        else:
            results = []
            for i, c in enumerate(configs):
                progress("run_start", _run_info(c, i, len(configs)))
                results.append(_replay_with_series(c, progress))
                progress("run_done", _run_info(c, i, len(configs)))
        write_report([series for _, series in results], tmp / COMPARE_FILE)
        # the runs' order, for `cw report OUT` to show them as this page did
        (tmp / COMPARE_RUNS).write_text(json.dumps({"runs": [c.out.name for c in configs]},
                                                   indent=2) + "\n")
    return [summary for summary, _ in results]


def _run_info(config: ReplayConfig, index: int, total: int) -> dict:
    label = run_label({"scheduler": config.scheduler, "name": config.out.name,
                       "slo_ms": config.slo_ns / 1e6})
    return {"run": label, "scheduler": config.scheduler, "index": index, "total": total}


def _replay_with_series(config: ReplayConfig, progress=None) -> tuple[dict, RunSeries]:
    """A replay's summary and its plots' series, taken from the rows in memory: reading an
    hour's telemetry back from CSV would take about a minute per run."""
    # each run's time buckets follow its own duration: the same for all, as the arrivals are
    taken: list[RunSeries] = []
    summary = replay(config, progress, on_series=taken.append)
    return summary, taken[0]


def _in_parallel(configs: list[ReplayConfig], jobs: int,
                 progress) -> list[tuple[dict, RunSeries]]:
    # spawn, not fork: the caller may run threads (a progress display), and a forked child
    # would inherit their locks mid-use
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = []
        for i, c in enumerate(configs):
            progress("run_start", _run_info(c, i, len(configs)))
            futures.append(pool.submit(_replay_with_series, c))
        results = []
        for i, (c, f) in enumerate(zip(configs, futures)):
            results.append(f.result())  # a run's error (a UsageError, say) is raised here
            progress("run_done", _run_info(c, i, len(configs)))
        return results
