"""The floor under bench/result_path.py: one-way latency of a 4 KB message between two
processes on this host, with no cw code in the way, over ZeroMQ (TCP and IPC) and a plain Unix
SEQPACKET socket. The gap between ZeroMQ and the Unix socket is what ZeroMQ's I/O threads cost.

    python bench/socket_floor.py [--n 1000] [--rounds 2]
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

GAP_S = 1e-3
PAYLOAD = bytes(4000)


def _send_stamped(send, n: int, ready) -> None:
    """One message every GAP_S, each stamped with the moment it is sent."""
    ready.wait()
    time.sleep(0.2)
    for _ in range(n):
        time.sleep(GAP_S)
        send(struct.pack("q", time.monotonic_ns()) + PAYLOAD)
    time.sleep(0.5)


def _zmq_sender(address: str, n: int, ready) -> None:
    s = zmq.Context().socket(zmq.DEALER)
    s.connect(address)
    _send_stamped(s.send, n, ready)


def zmq_one_way(address: str, n: int) -> np.ndarray:
    r = zmq.Context().socket(zmq.ROUTER)
    r.bind(address)
    ready = mp.Event()
    p = mp.Process(target=_zmq_sender, args=(r.getsockopt(zmq.LAST_ENDPOINT).decode(), n, ready))
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


def _unix_sender(fd: int, n: int, ready) -> None:
    _send_stamped(socket.socket(fileno=fd).sendall, n, ready)


def unix_one_way(n: int) -> np.ndarray:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ready = mp.Event()
    p = mp.Process(target=_unix_sender, args=(b.fileno(), n, ready))
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
    args = ap.parse_args()
    mp.set_start_method("fork")
    with tempfile.TemporaryDirectory() as tmp:
        ways = [("zmq tcp", lambda: zmq_one_way("tcp://127.0.0.1:*", args.n)),
                ("zmq ipc", lambda: zmq_one_way(f"ipc://{tmp}/floor.ipc", args.n)),
                ("unix seqpacket", lambda: unix_one_way(args.n))]
        for _ in range(args.rounds):
            for name, run in ways:
                d = run()
                print(f"{name:15s} p50 {np.percentile(d, 50) / 1e3:5.0f}  p90 "
                      f"{np.percentile(d, 90) / 1e3:5.0f}  p99 {np.percentile(d, 99) / 1e3:5.0f} µs",
                      flush=True)


if __name__ == "__main__":
    main()
