"""Controller↔worker clock translation, estimated from ping/pong round trips (as NTP does).

The worker sends Ping(worker_sent_ns); the controller answers Pong(worker_sent_ns, controller_ns);
on receipt at worker_recv_ns, offset = controller_ns − (worker_sent_ns + worker_recv_ns) / 2 with
an error of at most RTT/2. The sample with the smallest RTT among the recent ones wins, since its
error bound is tightest.
"""

from __future__ import annotations

import collections


class ClockSync:
    def __init__(self, window: int = 16):
        self.samples: collections.deque = collections.deque(maxlen=window)  # (rtt, offset)
        self.offset_ns = 0
        self.rtt_ns: int | None = None

    def observe(self, worker_sent_ns: int, controller_ns: int, worker_recv_ns: int) -> None:
        rtt = worker_recv_ns - worker_sent_ns
        if rtt < 0:
            return
        offset = controller_ns - (worker_sent_ns + worker_recv_ns) // 2
        self.samples.append((rtt, offset))
        self.rtt_ns, self.offset_ns = min(self.samples)

    @property
    def synced(self) -> bool:
        return self.rtt_ns is not None

    def to_local(self, controller_ns: int) -> int:
        return controller_ns - self.offset_ns

    def to_controller(self, local_ns: int) -> int:
        return local_ns + self.offset_ns
