"""Controller throughput over the real ZeroMQ path with simulated worker processes.

    python bench/serve_throughput.py --models DIR [--workers 2] [--rate 2000] [--seconds 10]
        [--slo 100ms] [--ipc] [--no-shm | --all-shm] [--log-dir DIR] [--log-stalls 1ms]
        [--profile FILE]

`--unpacked`: one message a ZeroMQ frame, as clients sent before packed frames (2026-11-28).
`--ipc`: Unix sockets instead of TCP on loopback (with ResNet-50-sized inputs it saved ~8 % of
the controller's CPU). `--no-shm`: inputs through the socket even though client, controller and
workers share this host; `--all-shm`: through shared memory (cw/serve/shm.py) whatever their size.
By default the client chooses, as it does for users: shared memory for inputs of
`cw.client.SHM_MIN_BYTES` or more.

The same file drives older code (back to 2026-11-23, 715287e) for side-by-side runs: run it
with a Python whose path puts a worktree of that commit first (a `.pth` file).

The controller runs in this process, the workers in their own, and an open-loop client in
another (so that its pacing does not compete with the controller for the GIL). Prints offered
and answered rates, SLO attainment, late answers, how long the controller's loop iterations kept
it busy (`cw_controller_loop_busy_seconds`), the controller process's CPU time per request and
the client's send lateness.
"""

from __future__ import annotations

import argparse
import collections
import gc
import multiprocessing as mp
import os
import resource
import time
from pathlib import Path

import numpy as np

from cw.serve.controller import ControllerConfig
from cw.serve.launch import ControllerThread, WorkerProcesses, local_address
from cw.units import parse_duration_ns


def client_process(address: str, rate: float, seconds: float, slo_ms: float, results,
                   shared_memory: bool | None, profile: str | None = None,
                   unpacked: bool = False, answer_lane: bool = False) -> None:
    if profile:  # the sending thread only (the I/O thread's share shows as the process's CPU)
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
        try:
            client_process(address, rate, seconds, slo_ms, results, shared_memory,
                           unpacked=unpacked, answer_lane=answer_lane)
        finally:
            prof.disable()
            prof.dump_stats(profile)
        return
    from cw.client import Client
    from cw.serve.protocol import RequestStatus
    from cw.replay.live import wait_until

    import inspect

    # (older clients, which the bench also drives side by side, had no such choice)
    choice = {"shared_memory": shared_memory} \
        if "shared_memory" in inspect.signature(Client).parameters else {}
    if answer_lane:  # (older clients have no lane)
        choice["answer_lane"] = True
    with Client(address, timeout_s=30, **choice) as client:
        models = client.models()
        if unpacked:
            client._dealer.pack = False  # (and so the controller does not pack its answers)
        inputs = {m.model_id: np.zeros((1, *m.inputs[0].sample_shape), m.inputs[0].dtype)
                  for m in models}
        if hasattr(client, "inputs_via"):
            via = " and ".join(sorted({client.inputs_via(x.nbytes) for x in inputs.values()}))
        else:  # a client before 2026-11-28 (the bench drives older code side by side)
            via = "shared memory (unless older than 2026-11-23)" if shared_memory is not False \
                else "socket"
        via += "; answers through " + ("the client's lane" if getattr(
            client, "answers_on_lane", False) else "ZeroMQ")
        names = sorted(inputs)
        n = int(rate * seconds)
        cpu_start = time.process_time()
        start = time.monotonic_ns()
        futures, late, sent = [], [], []
        stamp = lambda f: setattr(f, "done_ns", time.monotonic_ns())  # noqa: E731
        for i in range(n):
            if i % 2000 == 0:
                gc.freeze()  # see cw.replay.live.send_open_loop
            target = start + int(i * 1e9 / rate)
            late.append(wait_until(target) - target)
            name = names[i % len(names)]
            sent.append(time.monotonic_ns())
            future = client.infer_response_async(name, inputs[name], slo_ms)
            future.add_done_callback(stamp)
            futures.append(future)
        sent_s = (time.monotonic_ns() - start) / 1e9
        ok = failed = in_slo = 0
        misses = []  # (seconds into the run, failed, client's latency ms, controller's ms)
        for f, t0 in zip(futures, sent):
            response = f.result(timeout=60)
            # as the client saw it: from its call to the answer's receipt
            met = f.done_ns - t0 <= slo_ms * 1e6
            if response.status == RequestStatus.OK:
                ok += 1
                in_slo += met
            else:
                failed += 1
            if response.status != RequestStatus.OK or not met:
                misses.append(((t0 - start) / 1e9, response.status != RequestStatus.OK,
                               (f.done_ns - t0) / 1e6,
                               getattr(response, "latency_ns", 0) / 1e6))
        results.put((n, ok, failed, (time.monotonic_ns() - start) / 1e9,
                     float(np.percentile(late, 99)) / 1e6, sent_s,
                     time.process_time() - cpu_start, in_slo, via, misses))


def print_misses(misses: list, slo_ms: float) -> None:
    """Where the requests out of SLO by the client's count came from: refused, or answered in
    time by the controller's count and late by the time they reached the client (the way back),
    or late at the controller; and in which seconds of the run."""
    if not misses:
        return
    refused = sum(m[1] for m in misses)
    way_back = sum(not m[1] and m[3] <= slo_ms for m in misses)
    seconds = collections.Counter(int(m[0]) for m in misses)
    print(f"out of SLO by the client's count: {len(misses)}: refused {refused}, late only on the "
          f"way back {way_back}, late at the controller {len(misses) - refused - way_back}; by "
          f"second of the run: {dict(sorted(seconds.items()))}")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def profile_thread(ctl: ControllerThread, out: str) -> None:
    """cProfile the controller's serving thread (a profiler sees only the thread that enables
    it), stats written to `out` when the loop ends."""
    import cProfile
    import threading

    serve = ctl.controller.serve_forever

    def profiled(stop, *args):
        prof = cProfile.Profile()
        prof.enable()
        try:
            serve(stop, *args)
        finally:
            prof.disable()
            prof.dump_stats(out)

    ctl.thread = threading.Thread(target=profiled, args=(ctl.stop_event,), name="controller",
                                  daemon=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--copies", type=int, default=1)
    ap.add_argument("--rate", type=float, default=2000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--slo", default="100ms")
    ap.add_argument("--scheduler", default=None, metavar="SPEC",
                    help="the controller's policy, as `cw serve --scheduler` takes it")
    ap.add_argument("--ipc", action="store_true", help="Unix sockets instead of TCP loopback")
    shm = ap.add_mutually_exclusive_group()
    shm.add_argument("--no-shm", action="store_true", help="inputs through the socket")
    shm.add_argument("--all-shm", action="store_true",
                     help="inputs through shared memory, however small")
    ap.add_argument("--log-dir", default=None,
                    help="the controller writes its telemetry CSVs here, as `cw serve "
                         "--log-dir` and live replays do")
    ap.add_argument("--log-stalls", default=None, metavar="DURATION",
                    help="the controller watches for stalls as `cw serve --log-stalls` does "
                         "(what the watch costs: run with and without)")
    ap.add_argument("--profile", default=None, metavar="FILE",
                    help="run the controller's thread under cProfile and write its stats here "
                         "(pstats; the figures above then include the profiler's cost)")
    ap.add_argument("--unpacked", action="store_true",
                    help="one message a frame, as before packed frames (protocol.pack)")
    ap.add_argument("--client-profile", default=None, metavar="FILE",
                    help="the same for the client's sending thread")
    ap.add_argument("--answer-lane", action="store_true",
                    help="answers through the client's lane (Client(answer_lane=True))")
    args = ap.parse_args()
    if args.ipc:
        listen = [f"ipc:///tmp/cw-bench-{os.getpid()}-{side}" for side in ("workers", "clients")]
    else:
        listen = ["tcp://127.0.0.1:*"] * 2
    stalls_ns = parse_duration_ns(args.log_stalls, "--log-stalls") if args.log_stalls else None
    shared_memory = False if args.no_shm else (True if args.all_shm else None)
    ctl = ControllerThread(ControllerConfig(workers_listen=listen[0], clients_listen=listen[1],
                                            log_dir=Path(args.log_dir) if args.log_dir else None,
                                            **({"scheduler": args.scheduler} if args.scheduler
                                               else {}),
                                            # (older code has no stall watch)
                                            **({"log_stalls_ns": stalls_ns} if stalls_ns
                                               else {})),
                           keep_telemetry=True)
    if args.profile:
        profile_thread(ctl, args.profile)
    ctl.start()
    procs = WorkerProcesses(local_address(ctl.workers_address), Path(args.models), args.workers,
                            "simulated", ["cpu"], args.copies)
    try:
        ctl.wait_for_workers(args.workers, 120)
        results = mp.get_context("spawn").Queue()
        client = mp.get_context("spawn").Process(
            target=client_process, args=(local_address(ctl.clients_address), args.rate,
                                         args.seconds, parse_duration_ns(args.slo) / 1e6,
                                         results, shared_memory, args.client_profile, args.unpacked,
                                         args.answer_lane))
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        workers_cpu0 = sum(process_cpu_s(w.pid) for w in procs.procs)
        client.start()
        n, ok, failed, elapsed, late_p99, sent_s, client_cpu, client_in_slo, via, misses = \
            results.get(timeout=args.seconds + 120)
        workers_cpu = sum(process_cpu_s(w.pid) for w in procs.procs) - workers_cpu0
        client.join()
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        time.sleep(0.3)
        rows = ctl.telemetry.requests
        good = sum(r.deadline_met for r in rows)
        cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
        statuses = collections.Counter(r.status for r in rows)
        messages = collections.Counter(r.status for r in ctl.telemetry.actions)
        print("request statuses:", dict(statuses), "action statuses:", dict(messages))
        delays = sorted(a.result_ns - a.end_ns for a in ctl.telemetry.actions
                        if a.kind == "infer" and a.status == "OK")
        if delays:
            print(f"EXEC end → result at the controller: p50 {delays[len(delays) // 2] / 1e6:.2f} "
                  f"ms, p99 {delays[int(0.99 * len(delays))] / 1e6:.2f} ms")
        lane = getattr(ctl.workers_ep, "lane", None)
        print(f"datagrams past ZeroMQ: results {lane.received if lane is not None else 0}, "
              f"answers {getattr(ctl.clients_ep, 'sent_on_peer_lanes', 0)}")
        busy = getattr(ctl.metrics, "loop_busy", None)  # (absent before 2026-11-24)
        if busy is not None:
            loops = sum(busy.counts)
            over = {b: loops - sum(busy.counts[:i + 1]) for i, b in enumerate(busy.bounds_ms)}
            print(f"controller loop: {loops} iterations, busy > 1 ms in {over[1]}, > 2 ms in "
                  f"{over[2]}, > 5 ms in {over[5]}; longest {busy.max_ns / 1e6:.2f} ms")
        intake = getattr(ctl.metrics, "intake", None)  # (absent before 2026-11-28)
        if intake is not None and sum(intake.counts):
            print(f"client send → taken in by the controller: {sum(intake.counts)} requests, "
                  f"> 1 ms {intake.over(1)}, > 5 ms {intake.over(5)}, > 50 ms {intake.over(50)}"
                  f"; longest {intake.max_ns / 1e6:.2f} ms")
        print_misses(misses, parse_duration_ns(args.slo) / 1e6)
        print(f"inputs through {via}: "
              f"offered {n / args.seconds:.0f} r/s for {args.seconds:g} s, {args.workers} "
              f"simulated workers: answered {ok + failed} of {n} ({ok} ok, {failed} failed) in "
              f"{elapsed:.2f} s; SLO attainment {good / max(1, len(rows)):.4f} (the client's "
              f"count: {client_in_slo / max(1, n):.4f}); late "
              f"{sum(r.completion_ns > r.deadline_ns for r in rows)} (OK "
              f"{sum(r.status == 'OK' and r.completion_ns > r.deadline_ns for r in rows)}); "
              f"telemetry {'to ' + args.log_dir if args.log_dir else 'in memory'}; controller CPU "
              f"{cpu / max(1, n) * 1e6:.0f} µs/request; client send lateness p99 "
              f"{late_p99:.2f} ms; sent at {n / sent_s:.0f} r/s; CPU per request: client "
              f"{client_cpu / max(1, n) * 1e6:.0f} µs, workers {workers_cpu / max(1, n) * 1e6:.0f} "
              f"µs")
    finally:
        procs.stop()
        ctl.close()


if __name__ == "__main__":
    main()
