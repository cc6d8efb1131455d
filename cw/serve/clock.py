"""Controller↔worker clock translation, estimated from ping/pong round trips (as NTP does).

The worker sends Ping(worker_sent_ns); the controller answers Pong(worker_sent_ns, controller_ns);
on receipt at worker_recv_ns, offset = controller_ns − (worker_sent_ns + worker_recv_ns) / 2 with
an error of at most RTT/2. The sample with the smallest RTT among the recent ones wins, since its
error bound is tightest.

On one host the estimate is not needed: CLOCK_MONOTONIC (`now_ns`) is one clock for every process
of a kernel outside a time namespace, so the offset is exactly 0. The estimate would instead be
off by half the difference of the two one-way delays, which on loopback through two Python
processes is the same order as the 200 µs dispatch budget. Processes compare `clock_domain()` at
registration and pin the offset to 0 when they match.
"""

from __future__ import annotations

import collections


def clock_domain() -> str:
    """Identifies the CLOCK_MONOTONIC this process reads: the kernel's boot and this process's
    time-namespace offsets (a container in its own time namespace reads a shifted clock).
    "" where that cannot be known (not Linux): never equal to anything."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        return ""
    try:
        with open("/proc/self/timens_offsets") as f:
            shift = ",".join(f.read().split())
    except FileNotFoundError:
        shift = "none"  # a kernel without time namespaces: no process can be shifted
    except OSError:
        return ""
    return f"{boot}/{shift}" if boot else ""


class ClockSync:
    def __init__(self, window: int = 16):
        self.samples: collections.deque = collections.deque(maxlen=window)  # (rtt, offset)
        self.offset_ns = 0
        self.estimate_ns = 0  # what the round trips say, kept for reporting when pinned
        self.rtt_ns: int | None = None
        self.pinned = False

    def set_same_clock(self, same: bool) -> None:
        """Both ends read the same clock: the offset is 0, whatever the round trips say. Set
        again at each registration (a restarted controller may be on another host)."""
        self.pinned = same
        self.offset_ns = 0 if same else self.estimate_ns

    def observe(self, worker_sent_ns: int, controller_ns: int, worker_recv_ns: int) -> None:
        rtt = worker_recv_ns - worker_sent_ns
        if rtt < 0:
            return
        offset = controller_ns - (worker_sent_ns + worker_recv_ns) // 2
        self.samples.append((rtt, offset))
        self.rtt_ns, self.estimate_ns = min(self.samples)
        if not self.pinned:
            self.offset_ns = self.estimate_ns

    @property
    def synced(self) -> bool:
        return self.pinned or self.rtt_ns is not None

    def to_local(self, controller_ns: int) -> int:
        return controller_ns - self.offset_ns

    def to_controller(self, local_ns: int) -> int:
        return local_ns + self.offset_ns
