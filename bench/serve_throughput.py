"""Controller throughput over the real ZeroMQ path with simulated worker processes.

    python bench/serve_throughput.py --models DIR [--workers 2] [--rate 2000] [--seconds 10]
        [--slo 100ms]

An open-loop client sends requests at --rate; prints offered and answered rates, SLO
attainment, the controller process's CPU time per request, and the client's send lateness.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import numpy as np

from cw.client import Client, RequestFailed
from cw.serve.controller import ControllerConfig
from cw.serve.launch import ControllerThread, WorkerProcesses, local_address
from cw.units import parse_duration_ns


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--copies", type=int, default=1)
    ap.add_argument("--rate", type=float, default=2000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--slo", default="100ms")
    args = ap.parse_args()
    ctl = ControllerThread(ControllerConfig(workers_listen="tcp://127.0.0.1:*",
                                            clients_listen="tcp://127.0.0.1:*"),
                           keep_telemetry=True).start()
    procs = WorkerProcesses(local_address(ctl.workers_address), Path(args.models), args.workers,
                            "simulated", ["cpu"], args.copies)
    try:
        ctl.wait_for_workers(args.workers, 120)
        with Client(local_address(ctl.clients_address), timeout_s=30) as client:
            models = client.models()
            inputs = {m.model_id: np.zeros((1, *m.inputs[0].sample_shape), m.inputs[0].dtype)
                      for m in models}
            names = sorted(inputs)
            n = int(args.rate * args.seconds)
            slo_ms = parse_duration_ns(args.slo) / 1e6
            cpu0 = resource.getrusage(resource.RUSAGE_SELF)
            start = time.monotonic_ns()
            futures, late = [], []
            for i in range(n):
                target = start + int(i * 1e9 / args.rate)
                while (now := time.monotonic_ns()) < target:
                    if target - now > 2_000_000:
                        time.sleep((target - now - 1_000_000) / 1e9)
                late.append(now - target)
                futures.append(client.infer_async(names[i % len(names)],
                                                  inputs[names[i % len(names)]], slo_ms))
            ok = failed = 0
            for f in futures:
                try:
                    f.result(timeout=60)
                    ok += 1
                except RequestFailed:
                    failed += 1
            elapsed = (time.monotonic_ns() - start) / 1e9
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        time.sleep(0.3)
        rows = ctl.telemetry.requests
        good = sum(r.deadline_met for r in rows)
        cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
        print(f"offered {n / args.seconds:.0f} r/s for {args.seconds:g} s with {args.workers} "
              f"simulated workers: answered {ok + failed} ({ok} ok, {failed} failed) in "
              f"{elapsed:.2f} s; SLO attainment {good / max(1, len(rows)):.4f}; "
              f"late {sum(r.status == 'OK' and not r.deadline_met for r in rows)}; "
              f"client+controller CPU {cpu / max(1, n) * 1e6:.0f} µs/request; send lateness p99 "
              f"{np.percentile(late, 99) / 1e6:.2f} ms")
    finally:
        procs.stop()
        ctl.close()


if __name__ == "__main__":
    main()
