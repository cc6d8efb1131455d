"""How long a result takes from the worker thread that produced it to the controller's loop,
over real ZeroMQ on loopback, by the way it leaves the worker. Issue 4's return-path figure
(EXEC end → result at the controller, p99 ≤ 200 µs) is mostly this leg on the GPU machine.

    python bench/result_path.py [--n 2000] [--gap-us 1000] [--rounds 3] [--out-bytes 4000]

A sender process plays the worker: its main thread sits in the transport's poll as
`Worker.step` does, while another thread (the completion thread's stand-in) produces a Result
every `--gap-us` and stamps it just before it is encoded. This process plays the controller: a
ROUTER whose loop stamps each result as it is taken in. Both read one CLOCK_MONOTONIC, so
received − stamped is the one-way time with no clock estimate in it. Ways, interleaved by round:

  handoff   the producing thread puts the frame in the socket's outbox and wakes the owner of
            the socket (the poll loop) through a pipe; the owner sends it (cw's worker today)
  owner     the poll loop itself produces and sends: no hand-over (a lower bound)
  own       the producing thread sends on a socket of its own, connected to the same ROUTER
  lane      the same, to the router's Unix datagram lane past ZeroMQ (cw's worker now, on the
            controller's host)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import threading
import time

import numpy as np

MS = 1_000_000


def _sender(address: str, lane: str, way: str, n: int, gap_ns: int, out_bytes: int,
            ready) -> None:
    from cw.serve import protocol as p
    from cw.serve.runtime.base import now_ns
    from cw.serve.transport import ZmqDealer

    codec_in, codec_out = p.Codec(p.ToWorker), p.Codec(p.FromWorker)
    main = ZmqDealer(address, codec_in, codec_out)
    output = memoryview(bytes(out_bytes))
    main.send(p.Ping(now_ns()))  # introduce the main socket
    stop = threading.Event()

    def result(i: int):
        stamp = now_ns()  # the moment the result exists, as after the output copy
        return p.Result(i, "infer", p.Status.OK, stamp, "",
                        [p.Timing(stamp, stamp, 0)], [output])

    def producer(send):
        # sleeps, as a completion thread waits: a spinning stand-in would hold the GIL and a
        # core that the hand-over and ZeroMQ's threads need (the stamp is taken on waking)
        next_ns = now_ns() + 50 * MS
        for i in range(n):
            time.sleep(max(0, next_ns - now_ns()) / 1e9)
            send(result(i))
            next_ns += gap_ns
        stop.set()

    ready.wait()
    if way == "owner":
        next_ns, i = now_ns() + 50 * MS, 0
        while i < n:
            main.poll(max(0, -(-(next_ns - now_ns()) // MS)))  # rounded up: no spinning
            if now_ns() >= next_ns:
                main.send(result(i))
                i += 1
                next_ns += gap_ns
        main.poll(0)
    else:
        if way == "own":
            own = ZmqDealer(address, codec_in, codec_out)
            own.send(p.Ping(now_ns()))
            own.poll(0)
            thread = threading.Thread(target=producer, args=(lambda m: (own.send(m),
                                                                       own.poll(0)),))
        elif way == "lane":
            sender = main.sender()
            if not sender.use_lane(lane):
                raise SystemExit("the router's lane cannot be reached")
            thread = threading.Thread(target=producer, args=(sender.send,))
        else:
            thread = threading.Thread(target=producer, args=(main.send,))
        thread.start()
        while not stop.is_set():
            main.poll(50)  # as Worker.step: a result put in the outbox wakes this
        thread.join()
        main.poll(0)
    time.sleep(0.2)
    main.close()


def run_way(way: str, n: int, gap_ns: int, out_bytes: int) -> np.ndarray:
    from cw.serve import protocol as p
    from cw.serve.runtime.base import now_ns
    from cw.serve.transport import ZmqRouter

    router = ZmqRouter("tcp://127.0.0.1:*", p.Codec(p.FromWorker), p.Codec(p.ToWorker),
                       lane=True)
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_sender, args=(router.address, router.lane_address, way, n,
                                             gap_ns, out_bytes, ready))
    proc.start()
    delays = []
    ready.set()
    deadline = time.monotonic() + 60 + n * gap_ns / 1e9
    while len(delays) < n and time.monotonic() < deadline:
        for _, msg in router.poll(5):
            now = now_ns()
            if isinstance(msg, p.Result):
                delays.append(now - msg.received_ns)
    proc.join(10)
    router.close()
    if len(delays) < n:
        raise SystemExit(f"{way}: {n - len(delays)} results missing")
    return np.array(delays)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--gap-us", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out-bytes", type=int, default=4000, help="resnet50's output: 4,000 B")
    ap.add_argument("--ways", default="handoff,owner,own,lane")
    args = ap.parse_args()
    ways = args.ways.split(",")
    got = {w: [] for w in ways}
    for r in range(args.rounds):
        for w in ways:
            d = run_way(w, args.n, args.gap_us * 1000, args.out_bytes)
            got[w].append(d)
            print(f"round {r + 1} {w:8s} p50 {np.percentile(d, 50) / 1e3:6.0f} µs  p99 "
                  f"{np.percentile(d, 99) / 1e3:6.0f} µs  max {d.max() / 1e3:6.0f} µs", flush=True)
    print(f"\nall rounds, {args.n} results each, one every {args.gap_us} µs, "
          f"{args.out_bytes} B of output:")
    print("| way | p50 µs | p90 µs | p99 µs | max µs |\n|---|---|---|---|---|")
    for w in ways:
        d = np.concatenate(got[w])
        print(f"| {w} | {np.percentile(d, 50) / 1e3:.0f} | {np.percentile(d, 90) / 1e3:.0f} | "
              f"{np.percentile(d, 99) / 1e3:.0f} | {d.max() / 1e3:.0f} |")


if __name__ == "__main__":
    main()
