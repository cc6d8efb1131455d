import pytest

from cw.errors import UsageError
from cw.units import format_bytes, parse_batch_sizes, parse_duration_ns, parse_size


def test_sizes():
    assert parse_size("16MiB") == 16 * 1024**2
    assert parse_size("512MB") == 512 * 10**6
    assert parse_size("1GiB") == 1024**3
    assert parse_size("4096") == 4096
    for bad in ("", "x", "16 parsecs", "0MiB"):
        with pytest.raises(UsageError):
            parse_size(bad)


def test_durations():
    assert parse_duration_ns("5ms") == 5_000_000
    assert parse_duration_ns("250us") == 250_000
    assert parse_duration_ns("2s") == 2_000_000_000
    assert parse_duration_ns("100") == 100_000_000
    with pytest.raises(UsageError):
        parse_duration_ns("soon")


def test_batch_sizes():
    assert parse_batch_sizes("16,1,4,4") == (1, 4, 16)
    for bad in ("", "0,1", "1,17", "a,b"):
        with pytest.raises(UsageError):
            parse_batch_sizes(bad)


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(16 * 1024**2) == "16.0 MiB"
