"""Summary statistics of measured durations (integer nanoseconds in, integer nanoseconds out)."""

from __future__ import annotations

import msgspec
import numpy as np


class Stats(msgspec.Struct, frozen=True):
    n: int
    mean_ns: int
    std_ns: int
    p50_ns: int
    p99_ns: int
    p999_ns: int
    p9999_ns: int
    max_ns: int

    @property
    def tail_ratio(self) -> float:
        """p99.99 / p50: 1.0 is perfectly predictable."""
        return self.p9999_ns / self.p50_ns if self.p50_ns else float("inf")


def summarize(samples_ns) -> Stats:
    a = np.asarray(samples_ns, dtype=np.int64)
    if a.size == 0:
        raise ValueError("no samples")
    # 'higher' picks a measured sample, never an interpolation between two
    q = np.percentile(a, [50, 99, 99.9, 99.99], method="higher")
    return Stats(int(a.size), int(round(a.mean())), int(round(a.std())), *(int(v) for v in q),
                 int(a.max()))
