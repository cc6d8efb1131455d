"""Arrival generation, checked statistically against the trace's per-minute counts."""

import numpy as np
import pytest

from cw.errors import UsageError
from cw.replay.arrivals import generate, map_functions
from cw.replay.traces import Trace, TraceError


def trace_with(counts):
    counts = np.asarray(counts, dtype=np.int64)
    return Trace("synthetic-test", "azure2019", [f"f{i}" for i in range(len(counts))],
                 counts=counts)


def per_minute(arr, minutes):
    return np.bincount((arr.times_ns // 60_000_000_000).astype(int), minlength=minutes)


def test_exact_gives_exactly_the_scaled_counts_per_minute():
    t = trace_with([[6, 0, 12, 30], [3, 3, 3, 3]])
    arr = generate(t, ["a", "b"], duration_s=240, arrivals="exact", rate_scale=10, seed=1)
    assert list(per_minute(arr, 4)) == [90, 30, 150, 330]
    assert np.all(np.diff(arr.times_ns) >= 0)


def test_poisson_counts_and_exponential_gaps():
    t = trace_with([[600] * 10])  # 10 r/s
    arr = generate(t, ["m"], duration_s=600, arrivals="poisson", seed=3)
    n = arr.count
    assert abs(n - 6000) < 4 * np.sqrt(6000)  # Poisson: sd = sqrt(mean)
    gaps = np.diff(arr.times_ns) / 1e9
    assert abs(gaps.mean() - 0.1) < 0.01
    assert abs(gaps.std() / gaps.mean() - 1) < 0.08  # exponential: CV = 1
    # memorylessness, roughly: P(gap > 0.2) ≈ e^-2
    assert abs((gaps > 0.2).mean() - np.exp(-2)) < 0.03


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_gamma_coefficient_of_variation(cv):
    t = trace_with([[1200] * 10])  # 20 r/s
    arr = generate(t, ["m"], duration_s=600, arrivals=f"gamma:{cv}", seed=5)
    gaps = np.diff(arr.times_ns) / 1e9
    measured = gaps.std() / gaps.mean()
    assert abs(measured - cv) < 0.15 * cv
    assert abs(arr.count - 12000) < 0.1 * 12000


def test_seeded_and_reproducible():
    t = trace_with([[5, 50, 7], [1, 2, 3]])
    a = generate(t, ["x", "y"], duration_s=180, seed=9)
    b = generate(t, ["x", "y"], duration_s=180, seed=9)
    c = generate(t, ["x", "y"], duration_s=180, seed=10)
    assert np.array_equal(a.times_ns, b.times_ns) and np.array_equal(a.model_index, b.model_index)
    assert not np.array_equal(a.times_ns, c.times_ns)


def test_target_rate_and_window():
    t = trace_with([[60] * 5, [120] * 5])
    arr = generate(t, ["m"], duration_s=120, start_minute=2, target_rate=30, arrivals="exact")
    assert arr.count == 3600 and abs(arr.offered_rps - 30) < 1e-9
    with pytest.raises(TraceError, match="has 5"):
        generate(t, ["m"], duration_s=600, start_minute=0)
    with pytest.raises(UsageError):
        generate(t, ["m"], duration_s=60, rate_scale=2, target_rate=3)


def test_functions_sorted_by_volume_and_mapped():
    order = [2, 0, 1, 3]
    assert map_functions(order, ["a", "b"], "contiguous") == [0, 0, 1, 1]
    assert map_functions(order, ["a", "b"], "stripe") == [0, 1, 0, 1]
    with pytest.raises(UsageError, match="3 models but only 2 functions"):
        map_functions([0, 1], ["a", "b", "c"], "contiguous")
    # the busiest function goes to the first model
    t = trace_with([[1, 1], [100, 100], [10, 10]])
    arr = generate(t, ["hot", "mid", "cold"], duration_s=120, arrivals="exact")
    counts = np.bincount(arr.model_index, minlength=3)
    assert list(counts) == [200, 20, 2]
