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


class BatchProfile(msgspec.Struct, frozen=True):
    batch_size: int
    input: Stats
    exec: Stats        # device time of EXEC (CUDA events on a GPU, host clock on a CPU)
    exec_host: Stats   # host time from issuing EXEC to seeing it complete
    output: Stats


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
