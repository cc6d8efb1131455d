"""A real GPU worker, timed from outside: dispatch overhead, EXEC vs its profile, GPU busy time
with back-to-back INFERs, and what a concurrent LOAD does to EXEC.

    python bench/worker_gpu.py --models DIR --model NAME [--batch 1] [--n 300]

DIR holds CUDA bundles (NAME profiled with `cw profile --device cuda:0` first, so that its
profile.json is the reference). This process plays the controller (a ZeroMQ ROUTER on loopback);
the worker is `cw serve worker --device cuda:0 --copies 2`, its own process. Phases:
  spaced     INFERs whose windows open one by one, 1.5 EXEC apart: earliest → EXEC start (host),
             EXEC end → result received here, EXEC device time vs profile p50
  queue      N INFERs all open at once: GPU busy = sum of EXEC device times / first start → last end
  with LOAD  the queue again while the model's second copy is loaded and unloaded without pause

The worker runs with `--log-stalls 1ms` (`--log-stalls off` to leave it out: its watch thread
takes the GIL for a few µs each millisecond): the script ends with the worker's stall lines
(busy loop iterations, long collections, Python unable to run) and the slowest spaced dispatches
with their wall-clock times, so that an outlier can be matched with its cause.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from cw.serve import protocol as p
from cw.serve.clock import clock_domain
from cw.serve.launch import WorkerProcesses, local_address
from cw.serve.runtime.base import now_ns
from cw.serve.transport import ZmqRouter

MS = 1_000_000


class Controller:
    def __init__(self, models: Path, device: str, log_dir: Path, log_stalls: str | None):
        self.router = ZmqRouter("tcp://127.0.0.1:*", p.Codec(p.FromWorker), p.Codec(p.ToWorker),
                                lane=True)
        self.procs = WorkerProcesses(local_address(self.router.address), models, 1, "tvm",
                                     [device], copies=2, log_dir=log_dir, log_stalls=log_stalls)
        self.peer = self.registration = self.last_ping = None
        self.results: dict[int, tuple[p.Result, int]] = {}
        self.ids = 0
        deadline = time.monotonic() + 180
        while self.registration is None:
            if time.monotonic() > deadline:
                raise SystemExit("the worker did not register within 180 s")
            self.pump(50)
        # one host, one CLOCK_MONOTONIC: the worker pins its offset to 0, as under a controller
        self.same_clock = self.registration.clock_domain == clock_domain() != ""
        self.router.send(self.peer, p.Welcome(1, self.registration.worker_ns, now_ns(),
                                              self.same_clock,
                                              self.router.lane_address if self.same_clock else ""))
        for _ in range(20):  # let the worker's clock sync settle on a few pings
            self.pump(50)

    def pump(self, timeout_ms=5):
        for who, msg in self.router.poll(timeout_ms):
            if isinstance(msg, p.Register):
                self.peer, self.registration = who, msg
            elif isinstance(msg, p.Ping):
                self.router.send(who, p.Pong(msg.worker_sent_ns, now_ns()))
                self.last_ping = msg
            elif isinstance(msg, p.Result):
                self.results[msg.id] = (msg, now_ns())

    def send(self, cls, **fields) -> int:
        self.ids += 1
        self.router.send(self.peer, cls(id=self.ids, gpu=0, expected_ns=0, **fields))
        return self.ids

    def wait(self, ids, timeout_s=120):
        deadline = time.monotonic() + timeout_s
        while not all(i in self.results for i in ids):
            if time.monotonic() > deadline:
                raise SystemExit(f"{sum(i not in self.results for i in ids)} results missing")
            self.pump(5)
        return [self.results[i] for i in ids]

    def close(self):
        self.procs.stop()
        self.router.close()


def pct(values, q):
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True, type=Path)
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--device", default="cuda:0", help="cpu only to try the script itself")
    ap.add_argument("--log-stalls", default="1ms", help="the worker's stall threshold, or off")
    args = ap.parse_args()
    profile = json.loads((args.models / args.model / "profile.json").read_text())
    prof_exec = next(b for b in profile["batches"] if b["batch_size"] == args.batch)["exec"]
    log_dir = Path(tempfile.mkdtemp(prefix="cw-worker-gpu-"))
    c = Controller(args.models, args.device, log_dir,
                   None if args.log_stalls == "off" else args.log_stalls)
    try:
        model = next(m for m in c.registration.models if m.model_id == args.model)
        data = [np.zeros(args.batch * s.sample_bytes, np.uint8).tobytes() for s in model.inputs]
        t = now_ns()
        (load, _), = c.wait([c.send(p.Load, model=args.model, earliest_ns=t,
                                    latest_ns=t + 1000 * MS)])
        assert load.status == p.Status.OK, load.message

        def infer(earliest):
            return c.send(p.Infer, model=args.model, earliest_ns=earliest,
                          latest_ns=earliest + 10_000 * MS, batch_size=args.batch, n=args.batch,
                          inputs=[[d] for d in data])

        # spaced: each window opens when the GPU is idle; each INFER is sent 5 ms ahead of its
        # window, as the controller does (sending them all up front floods the worker with
        # input bytes and delays the first ones: 427 ms at p99 for inception_v3 on the H100)
        period = int(prof_exec["p50_ns"] * 1.5) + 2 * MS
        t0 = now_ns() + 50 * MS
        ids, earliest = [], [t0 + i * period for i in range(args.n)]
        wall_minus_mono = time.time_ns() - now_ns()  # to print outliers in wall-clock time
        for e in earliest:
            while now_ns() < e - 5 * MS:
                c.pump(0)
            ids.append(infer(e))
        spaced = c.wait(ids)
        starts = [r.timings[1].start_ns - e for (r, _), e in zip(spaced, earliest)]
        tails = [received - r.timings[1].end_ns for r, received in spaced]
        # the way back in legs: EXEC end → the completion thread has noticed it (output phase
        # starts) → outputs copied out (output phase ends) → the result encoded and handed to
        # its socket (sent_ns: it leaves the worker, issue 4's end point) → received here
        noticed = [r.timings[2].start_ns - r.timings[1].end_ns for r, _ in spaced]
        copied = [r.timings[2].end_ns - r.timings[2].start_ns for r, _ in spaced]
        encoded = [r.sent_ns - r.timings[2].end_ns for r, _ in spaced]
        wire = [received - r.sent_ns for r, received in spaced]
        leaving = [r.sent_ns - r.timings[1].end_ns for r, _ in spaced]
        device = [r.timings[1].device_ns for r, _ in spaced]

        def queue(n):
            # every window open at once, after the worker has received all the inputs
            t = now_ns() + max(100, 3 * n) * MS
            got = c.wait([infer(t) for _ in range(n)])
            execs = sorted((r.timings[1].start_ns, r.timings[1].end_ns, r.timings[1].device_ns)
                           for r, _ in got)
            busy = sum(e[2] for e in execs) / (execs[-1][1] - execs[0][0])
            return busy, [e[2] for e in execs], [r.status for r, _ in got]

        busy, q_device, q_status = queue(args.n)
        # the same queue while the second copy is loaded and unloaded back to back
        other = f"{args.model}#1"
        load_ids = []
        t = now_ns() + max(100, 3 * args.n) * MS
        exec_ids = [infer(t) for _ in range(args.n)]
        while not all(i in c.results for i in exec_ids):
            u = now_ns()
            load_ids.append(c.send(p.Load, model=other, earliest_ns=u, latest_ns=u + 1000 * MS))
            c.wait(load_ids[-1:])
            u = now_ns()
            c.wait([c.send(p.Unload, model=other, earliest_ns=u, latest_ns=u + 1000 * MS)])
        l_device = [c.results[i][0].timings[1].device_ns for i in exec_ids]
        loads_ok = sum(c.results[i][0].status == p.Status.OK for i in load_ids)

        ms = 1e6
        print(f"model {args.model} batch {args.batch}, {args.n} INFERs per phase; "
              f"profile EXEC p50 {prof_exec['p50_ns'] / ms:.3f} ms")
        print(f"spaced: earliest → EXEC start p50 {pct(starts, 50) / 1e3:.0f} µs, p99 "
              f"{pct(starts, 99) / 1e3:.0f} µs; EXEC end → result here p50 "
              f"{pct(tails, 50) / 1e3:.0f} µs, p99 {pct(tails, 99) / 1e3:.0f} µs; EXEC device p50 "
              f"{pct(device, 50) / ms:.3f} ms ({pct(device, 50) / prof_exec['p50_ns'] - 1:+.2%} "
              f"vs profile)")
        def p50_99(xs):
            return f"{pct(xs, 50) / 1e3:.0f} / {pct(xs, 99) / 1e3:.0f} µs"

        print(f"  EXEC end → result leaving the worker (issue 4's figure) p50 / p99 "
              f"{p50_99(leaving)}; in legs: noticed {p50_99(noticed)}, output copied "
              f"{p50_99(copied)}, encoded and handed to the socket {p50_99(encoded)}; then "
              f"to here {p50_99(wire)} ({c.router.lane.received} of all results by the lane, "
              "the rest by ZeroMQ)")
        ping = c.last_ping
        if ping is not None:
            print(f"  clock: offset in use {ping.offset_ns / 1e3:.0f} µs "
                  f"({'pinned: same host' if c.same_clock else 'estimated'}); the round-trip "
                  f"estimate {ping.estimate_ns / 1e3:+.0f} µs from an RTT of "
                  f"{ping.rtt_ns / 1e3:.0f} µs (its error, on one host, shifts the figures "
                  "above by as much)")
        print(f"queue: GPU busy {busy:.1%}; EXEC device p50 {pct(q_device, 50) / ms:.3f} p99 "
              f"{pct(q_device, 99) / ms:.3f} ms; statuses {sorted({s.name for s in q_status})}")
        print(f"queue with {loads_ok} LOADs of a second copy alongside: EXEC device p50 "
              f"{pct(l_device, 50) / ms:.3f} p99 {pct(l_device, 99) / ms:.3f} ms "
              f"(p99 {pct(l_device, 99) / pct(q_device, 99) - 1:+.2%} vs without)")
        slowest = sorted(zip(starts, earliest), reverse=True)[:5]
        print("slowest spaced dispatches (earliest → EXEC start): " + ", ".join(
            f"{d / 1e3:.0f} µs at {wall_clock(e + wall_minus_mono)}" for d, e in slowest))
    finally:
        c.close()
        stalls = [line for line in (log_dir / "worker-0.log").read_text(errors="replace")
                  .splitlines() if " stall: " in line]
        print(f"worker stalls over 1 ms: {len(stalls)}")
        for line in stalls[:20]:
            print("  " + line)
        shutil.rmtree(log_dir, ignore_errors=True)


def wall_clock(ns: int) -> str:
    """As the worker's log lines print their times (logging's asctime, local time)."""
    return time.strftime("%H:%M:%S", time.localtime(ns / 1e9)) + f",{ns // 1_000_000 % 1000:03d}"


if __name__ == "__main__":
    main()
