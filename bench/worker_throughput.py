"""Actions per second through one simulated worker process over loopback ZeroMQ.

    python bench/worker_throughput.py --models DIR [--actions 50000] [--in-flight 256]
        [--batch 1] [--no-lane] [--runtime simulated|tvm]

This process plays a minimal controller (a ROUTER: it answers registration and pings) and keeps
`--in-flight` INFERs outstanding, each with an open window starting now; the worker
(`cw serve worker --runtime simulated`, its own process) runs them through its input, EXEC and
output executors. As a controller on the worker's host does, it opens a lane and names it in
its Welcome: the worker's INFER results come back past ZeroMQ (`--no-lane`: through ZeroMQ, as
from another host). Prints actions/s and the result statuses. Use a bundle whose profile makes
the simulated phases short (e.g. the demo mlp profiled on the CPU), so that the worker's own
overhead is what is measured. `--runtime tvm`: a TVM-CPU worker that runs the kernels (the
inputs are zeros), for what the worker's run path costs a small model.
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path

import numpy as np

from cw.serve import protocol as p
from cw.serve.launch import WorkerProcesses, local_address
from cw.serve.runtime.base import now_ns
from cw.serve.transport import ZmqRouter

MS = 1_000_000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--actions", type=int, default=50_000)
    ap.add_argument("--in-flight", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--no-lane", action="store_true", help="results through ZeroMQ only")
    ap.add_argument("--runtime", choices=("simulated", "tvm"), default="simulated")
    args = ap.parse_args()
    router = ZmqRouter("tcp://127.0.0.1:*", p.Codec(p.FromWorker), p.Codec(p.ToWorker),
                       lane=not args.no_lane)
    procs = WorkerProcesses(local_address(router.address), Path(args.models), 1, args.runtime,
                            ["cpu"])
    try:
        peer = registration = None
        deadline = time.monotonic() + 120
        while registration is None:
            if time.monotonic() > deadline:
                raise SystemExit("the worker did not register within 120 s")
            for who, msg in router.poll(50):
                if isinstance(msg, p.Register):
                    peer, registration = who, msg
        # (one host: the same clock; the lane where there is one)
        router.send(peer, p.Welcome(1, registration.worker_ns, now_ns(), True,
                                    router.lane_address))
        model = registration.models[0]
        unprofiled = model.estimates_from not in ("profile", "profile-partial")
        if args.runtime == "simulated" and unprofiled:
            # then each EXEC takes a made-up 1.5 ms and that, not the worker, is what is timed
            print(f"warning: {model.model_id} has no profile.json, so simulated EXECs take "
                  f"{model.exec_ns.get(args.batch, 0) / 1e6:.2f} ms ({model.estimates_from} "
                  f"timings); run `cw profile BUNDLE --device cpu` first", flush=True)
        inputs = [[np.zeros(args.batch * spec.sample_bytes, np.uint8).tobytes()]
                  for spec in model.inputs]
        t = now_ns()
        router.send(peer, p.Load(id=0, model=model.model_id, gpu=0, earliest_ns=t,
                                 latest_ns=t + 1000 * MS, expected_ns=0))
        loaded = None
        while loaded is None:
            for who, msg in router.poll(50):
                if isinstance(msg, p.Result):
                    loaded = msg.status
        if loaded != p.Status.OK:
            raise SystemExit(f"LOAD of {model.model_id} failed: {loaded.name}")
        statuses: collections.Counter = collections.Counter()
        sent = done = 0
        start = time.perf_counter()
        while done < args.actions:
            while sent < args.actions and sent - done < args.in_flight:
                sent += 1
                t = now_ns()
                router.send(peer, p.Infer(id=sent, model=model.model_id, gpu=0, earliest_ns=t,
                                          latest_ns=t + 1000 * MS, expected_ns=0,
                                          batch_size=args.batch, n=args.batch, inputs=inputs))
            for who, msg in router.poll(10):
                if isinstance(msg, p.Result):
                    done += 1
                    statuses[msg.status.name] += 1
                elif isinstance(msg, p.Ping):
                    router.send(who, p.Pong(msg.worker_sent_ns, now_ns()))
        elapsed = time.perf_counter() - start
        print(f"{args.actions} INFERs (batch {args.batch}, {args.in_flight} in flight) through "
              f"one {args.runtime} worker in {elapsed:.2f} s: "
              f"{args.actions / elapsed:,.0f} actions/s; "
              f"statuses {dict(statuses)}; results by the lane: "
              f"{router.lane.received if router.lane is not None else 0}")
    finally:
        procs.stop()
        router.close()


if __name__ == "__main__":
    main()
