"""Runs refused up front when they cannot fit in this machine's memory: a typo like
`--target-rate 1e12` or `--copies 10000000` would otherwise end in a MemoryError, the
simulator's abort or the kernel's OOM killer, after a long wait."""

from __future__ import annotations

import os

from cw.errors import UsageError
from cw.units import format_bytes


def available_memory_bytes() -> int | None:
    """What the kernel says can be allocated without swapping (None: it does not say)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def check_memory(count: float, bytes_each: int, asked: str, what: str, hint: str) -> None:
    """Refuse, before anything is drawn or started, `count` `what` of `bytes_each` that do not
    fit in the memory available now; `asked` names the flags that asked for them."""
    need = count * bytes_each
    free = available_memory_bytes()
    if free is not None and need > free:
        raise UsageError(f"{asked} means about {count:.3g} {what}, which need about "
                         f"{format_bytes(int(need))} of memory; this machine has "
                         f"{format_bytes(free)} free", hint)


# One model instance (`--copies`) in a worker and in the controller's tables together: about
# 4 KiB in the controller and under 1 KiB in a simulated worker (measured with 60,000 copies),
# doubled for the peak while a registration is decoded.
BYTES_PER_INSTANCE = 8192


def check_instances(bundles: int, copies: int, workers: int = 1) -> None:
    """Refuse `copies` of `bundles` bundles on `workers` local workers that cannot fit."""
    on = f" on {workers} workers" if workers > 1 else ""
    check_memory(bundles * copies * workers, BYTES_PER_INSTANCE,
                 f"--copies {copies:,} of {bundles} bundle(s){on}", "model instances",
                 "lower --copies")
