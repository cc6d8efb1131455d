"""The floor under bench/result_path.py: one-way latency of a 4 KB message between two
processes on this host, with no cw code in the way, over ZeroMQ (TCP and IPC) and a plain Unix
SEQPACKET socket. The gap between ZeroMQ and the Unix socket is what ZeroMQ's I/O threads cost.

    python bench/socket_floor.py [--n 1000] [--rounds 2] [--gaps-ms 1]

`--gaps-ms 1,50`: the messages that far apart, each gap in turn. A long gap leaves both
processes asleep between messages; each message then waits for its receiver to wake.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import struct
import tempfile
import time

import numpy as np
import zmq

PAYLOAD = bytes(4000)


def _send_stamped(send, n: int, ready, gap_s: float) -> None:
    """One message every `gap_s`, each stamped with the moment it is sent."""
    ready.wait()
    time.sleep(0.2)
    for _ in range(n):
        time.sleep(gap_s)
        send(struct.pack("q", time.monotonic_ns()) + PAYLOAD)
    time.sleep(0.5)


def _zmq_sender(address: str, n: int, ready, gap_s: float) -> None:
    s = zmq.Context().socket(zmq.DEALER)
    s.connect(address)
    _send_stamped(s.send, n, ready, gap_s)


def zmq_one_way(address: str, n: int, gap_s: float) -> np.ndarray:
    r = zmq.Context().socket(zmq.ROUTER)
    r.bind(address)
    ready = mp.Event()
    p = mp.Process(target=_zmq_sender, args=(r.getsockopt(zmq.LAST_ENDPOINT).decode(), n, ready,
                                              gap_s))
    p.start()
    ready.set()
    poller, delays = zmq.Poller(), []
    poller.register(r, zmq.POLLIN)
    while len(delays) < n:
        if poller.poll(5):
            while True:
                try:
                    r.recv(zmq.NOBLOCK)  # the peer's routing id
                except zmq.Again:
                    break
                m = r.recv()
                delays.append(time.monotonic_ns() - struct.unpack("q", m[:8])[0])
    p.join()
    r.close(linger=0)
    return np.array(delays)


def _unix_sender(fd: int, n: int, ready, gap_s: float) -> None:
    _send_stamped(socket.socket(fileno=fd).sendall, n, ready, gap_s)


def unix_one_way(n: int, gap_s: float) -> np.ndarray:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ready = mp.Event()
    p = mp.Process(target=_unix_sender, args=(b.fileno(), n, ready, gap_s))
    p.start()
    ready.set()
    delays = []
    while len(delays) < n:
        m = a.recv(8192)
        delays.append(time.monotonic_ns() - struct.unpack("q", m[:8])[0])
    p.join()
    return np.array(delays)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--gaps-ms", default="1", help="time between messages; several: each in turn")
    args = ap.parse_args()
    gaps = [float(g) for g in args.gaps_ms.split(",")]
    mp.set_start_method("fork")
    with tempfile.TemporaryDirectory() as tmp:
        ways = [("zmq tcp", lambda g: zmq_one_way("tcp://127.0.0.1:*", args.n, g)),
                ("zmq ipc", lambda g: zmq_one_way(f"ipc://{tmp}/floor.ipc", args.n, g)),
                ("unix seqpacket", lambda g: unix_one_way(args.n, g))]
        for _ in range(args.rounds):
            for gap_ms in gaps:
                for name, run in ways:
                    d = run(gap_ms / 1e3)
                    p50, p90, p99 = (np.percentile(d, q) / 1e3 for q in (50, 90, 99))
                    print(f"gap {gap_ms:g} ms  {name:15s} p50 {p50:5.0f}  p90 {p90:5.0f}  "
                          f"p99 {p99:5.0f} µs", flush=True)


if __name__ == "__main__":
    main()
