"""What ZeroMQ costs a message, one to a frame against several packed in one (protocol.pack).

    python bench/zmq_frames.py [--messages 100000] [--bytes 330] [--per-frame 10]

A DEALER sends to a ROUTER over loopback TCP in one process, which receives as it goes; the CPU
time of the process (both ends and ZeroMQ's I/O threads) is divided by the messages carried.
Rounds alternate one message a frame and `--per-frame` joined, so that both see the same
machine. 330 bytes is about a request for a small model with its input through the socket.
"""

from __future__ import annotations

import argparse
import time

import zmq


def run(router, dealer, messages: int, size: int, per_frame: int) -> tuple[float, float]:
    """CPU and wall µs a message."""
    frame = b"x" * (size * per_frame)
    frames = messages // per_frame
    cpu0, wall0 = time.process_time(), time.perf_counter()
    got = 0
    for i in range(frames):
        dealer.send(frame)
        if i % 50 == 49:  # take in what has come, as a receiver keeping up would
            while True:
                try:
                    router.recv_multipart(zmq.NOBLOCK, copy=False)
                    got += 1
                except zmq.Again:
                    break
    while got < frames:
        router.recv_multipart(copy=False)
        got += 1
    n = frames * per_frame
    return ((time.process_time() - cpu0) / n * 1e6, (time.perf_counter() - wall0) / n * 1e6)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--bytes", type=int, default=330)
    ap.add_argument("--per-frame", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    for _ in range(args.rounds):
        for k in (1, args.per_frame):
            cpu, wall = run(router, dealer, args.messages, args.bytes, k)
            print(f"{k:3d} a frame: {cpu:6.2f} µs CPU, {wall:6.2f} µs wall a message")
    dealer.close(linger=0)
    router.close(linger=0)
    ctx.term()


if __name__ == "__main__":
    main()
