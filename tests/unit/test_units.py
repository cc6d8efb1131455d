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
    assert parse_batch_sizes(" 1, 2") == (1, 2)
    for bad in ("", "0,1", "1,17", "a,b", "1,,4", "1,4,"):
        with pytest.raises(UsageError):
            parse_batch_sizes(bad)


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(16 * 1024**2) == "16.0 MiB"


def test_profile_iterations_fit_the_time_given():
    from cw.profile.profiler import MIN_ITERATIONS, ProfileConfig

    config = ProfileConfig(iterations=1000, max_time_s=2.0)
    assert config.planned_iterations(1_000_000) == 1000      # 1 ms each: all fit in 2 s
    assert config.planned_iterations(10_000_000) == 200      # 10 ms each: 200 fit
    assert config.planned_iterations(5_000_000_000) == MIN_ITERATIONS  # never fewer
    assert ProfileConfig(iterations=5, max_time_s=2.0).planned_iterations(10**9) == 5  # as asked
    assert ProfileConfig(max_time_s=None).planned_iterations(10**12) == 1000
    for bad in (0, -1.0):
        with pytest.raises(UsageError):
            ProfileConfig(max_time_s=bad)
