"""profile.json: what `cw profile` measured (documented in docs/bundle.md)."""

from __future__ import annotations

import msgspec

from cw.profile.stats import Stats

PROFILE_SCHEMA_VERSION = 1


class DeviceInfo(msgspec.Struct, frozen=True):
    kind: str  # "cpu" | "cuda"
    name: str
    driver_version: str | None = None
    cuda_version: str | None = None
    sm_clock_mhz_before: int | None = None
    sm_clock_mhz_after: int | None = None
    threads: int | None = None  # CPU: kernel threads the measurement ran with


class LoadProfile(msgspec.Struct, frozen=True):
    bytes: int
    pages: int
    stats: Stats
    bandwidth_gbps: float  # bytes / p50
    # one plain pinned copy of the same bytes in the same run, and LOAD's share of it
    reference_gbps: float | None = None
    efficiency: float | None = None


class SlowRun(msgspec.Struct, frozen=True):
    run: int       # its place among the measured runs, from 0
    exec_ns: int
    at_ns: int     # when it began, from the first measured run's beginning


class BatchProfile(msgspec.Struct, frozen=True):
    batch_size: int
    input: Stats
    exec: Stats        # device time of EXEC (CUDA events on a GPU, host clock on a CPU)
    exec_host: Stats   # host time from issuing EXEC to seeing it complete
    output: Stats
    # the slowest EXECs (at most SLOWEST_KEPT), in the order they ran: p99.99 over 10,000 runs
    # is one of them, and when they came (at the start, evenly spread, in one burst) says more
    # of a tail's cause than its size does. Absent from profiles measured before 2026-11-28.
    exec_slowest: list[SlowRun] = msgspec.field(default_factory=list)


SLOWEST_KEPT = 8


class Profile(msgspec.Struct, frozen=True):
    schema_version: int
    bundle: str
    runtime: str
    device: DeviceInfo
    date_utc: str
    cw_version: str
    tvm_version: str
    iterations: int
    warmup: int
    device_memory_bytes: int
    load: LoadProfile
    batches: list[BatchProfile]
    notes: list[str] = []

    def batch(self, batch_size: int) -> BatchProfile | None:
        return next((b for b in self.batches if b.batch_size == batch_size), None)
