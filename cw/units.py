"""Parsing of human units on the command line: sizes, durations and batch-size lists."""

from __future__ import annotations

import re

from cw.errors import UsageError

_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2,
               "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gib": 1024**3}
_TIME_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
                  "m": 60_000_000_000, "min": 60_000_000_000, "h": 3_600_000_000_000}

MAX_BATCH = 16


def parse_size(text: str, what: str = "size") -> int:
    """'16MiB' -> 16777216. Decimal (MB) and binary (MiB) units."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = m.group(2).lower() if m else None
    if not m or unit not in _SIZE_UNITS:
        raise UsageError(f"invalid {what} '{text}'", "write it like 16MiB, 512MB or 1GiB")
    value = int(float(m.group(1)) * _SIZE_UNITS[unit])
    if value <= 0:
        raise UsageError(f"{what} must be positive, got '{text}'")
    return value


def parse_duration_ns(text: str, what: str = "duration") -> int:
    """'5ms' -> 5_000_000. A bare number is milliseconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zµ]*)\s*", text)
    unit = (m.group(2) or "ms") if m else None
    if not m or unit not in _TIME_UNITS_NS:
        raise UsageError(f"invalid {what} '{text}'", "write it like 100ms, 250us, 2s or 10m")
    return int(float(m.group(1)) * _TIME_UNITS_NS[unit])


def format_duration_ns(ns: int) -> str:
    """3_600_000_000_000 -> '1 h': in the largest unit that keeps the figure at least 1."""
    for unit, scale in (("h", 3_600_000_000_000), ("min", 60_000_000_000),
                        ("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)):
        if abs(ns) >= scale:
            return f"{ns / scale:.4g} {unit}"
    return f"{ns} ns"


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    """'1,2,4,8,16' -> (1, 2, 4, 8, 16); sorted, unique, each within 1..16."""
    try:
        # an empty item ('1,,4') is more likely a lost number than a stray comma: refused
        sizes = sorted({int(part) for part in text.split(",")})
    except ValueError:
        empty = any(not part.strip() for part in text.split(","))
        raise UsageError(f"invalid batch sizes '{text}'" + (": an empty item" if empty else ""),
                         "give a comma-separated list like 1,2,4,8,16") from None
    if not sizes or sizes[0] < 1 or sizes[-1] > MAX_BATCH:
        raise UsageError(f"invalid batch sizes '{text}'",
                         f"each batch size must be within 1..{MAX_BATCH}")
    return tuple(sizes)


def format_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
