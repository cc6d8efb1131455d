"""Workers with thousands of models joining a controller: how long the cycle collector stalls
the controller, while they join and afterwards.

    python bench/join_gc.py [--copies 20000] [--workers 2] [--models DIR]

Starts a controller thread (this process) and simulated worker processes with `--copies` copies
of every bundle in DIR, waits until all have joined, idles 15 s (repeated registrations arrive
then), and times one full collection (`gc.collect()`): what a full collection triggered while
serving would cost. Collector time is measured with `gc.callbacks` in the controller's process.
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path

from cw.serve.controller import ControllerConfig
from cw.serve.launch import ControllerThread, WorkerProcesses, local_address


class CollectorClock:
    def __init__(self):
        self.total_ns = self.longest_ns = self._start_ns = 0
        self.full = 0
        gc.callbacks.append(self._on)

    def _on(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start_ns = time.perf_counter_ns()
            return
        took = time.perf_counter_ns() - self._start_ns
        self.total_ns += took
        self.longest_ns = max(self.longest_ns, took)
        self.full += info["generation"] == 2

    def take(self) -> str:
        text = (f"collector {self.total_ns / 1e9:.2f} s, longest {self.longest_ns / 1e6:.0f} ms, "
                f"{self.full} full collections")
        self.total_ns = self.longest_ns = self.full = 0
        return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=20000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--models", type=Path, default=Path.home() / ".cache/cw/demo-models")
    args = ap.parse_args()
    clock = CollectorClock()
    ctl = ControllerThread(ControllerConfig(workers_listen="tcp://127.0.0.1:*",
                                            clients_listen="tcp://127.0.0.1:*")).start()
    start = time.perf_counter()
    procs = WorkerProcesses(local_address(ctl.workers_address), args.models, args.workers,
                            "simulated", ["cpu"], args.copies)
    try:
        procs.wait_until_joined(ctl, timeout_s=600)
        models = len(ctl.controller.scheduler.models())
        print(f"{args.workers} workers × {models:,} models joined in "
              f"{time.perf_counter() - start:.1f} s; {clock.take()}")
        time.sleep(15)
        print(f"the next 15 s: {clock.take()}")
        took = time.perf_counter()
        gc.collect()
        print(f"one full collection now: {(time.perf_counter() - took) * 1e3:.0f} ms")
    finally:
        procs.stop()
        ctl.close()


if __name__ == "__main__":
    main()
