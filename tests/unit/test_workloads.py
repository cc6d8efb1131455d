"""Synthetic workloads: Poisson, closed loop, the paper's presets (statistical checks, seeded)."""

import numpy as np
import pytest

from cw.errors import UsageError
from cw.replay import workloads
from cw.replay.runner import ReplayConfig, resolve_models, with_preset
from cw.replay.simulate import SimConfig, Simulation
from cw.serve.scheduler import SchedulerConfig, make_scheduler

NS = 1_000_000_000


def test_poisson_rate_uniform_models_exponential_gaps():
    models = [f"m{i}" for i in range(10)]
    a = workloads.poisson(models, rate_rps=2000, duration_s=30, seed=3)
    expected = 2000 * 30
    assert abs(a.count - expected) < 5 * np.sqrt(expected)
    assert np.all(np.diff(a.times_ns) >= 0) and a.times_ns[-1] < 30 * NS
    counts = np.bincount(a.model_index, minlength=10)
    chi2 = ((counts - a.count / 10) ** 2 / (a.count / 10)).sum()
    assert chi2 < 40  # 9 degrees of freedom: p < 1e-5 above this
    gaps = np.diff(a.times_ns) / NS
    assert abs(gaps.mean() - 1 / 2000) < 0.02 / 2000 * 5
    assert abs(gaps.std() / gaps.mean() - 1) < 0.05  # exponential: CV = 1
    b = workloads.poisson(models, rate_rps=2000, duration_s=30, seed=3)
    assert np.array_equal(a.times_ns, b.times_ns)


def test_fig6_minor_steady_major_spread_over_active_models():
    models = [f"r{i}" for i in range(101)]
    a = workloads.fig6(models, duration_s=120, seed=1)
    t = a.times_ns / NS
    minor = a.model_index == 0
    assert abs(minor.sum() / 120 - 200) < 5 * np.sqrt(200 * 120) / 120
    major_t, major_m = t[~minor], a.model_index[~minor]
    second = major_t.astype(int)
    # in second k only models 1..k+1 (capped at 100) send
    assert np.all(major_m <= np.minimum(second + 1, 100)) and major_m.min() >= 1
    per_second = np.bincount(second, minlength=120)
    assert abs(per_second.mean() - 1000) < 20
    late = major_m[second >= 110]
    assert len(np.unique(late)) == 100  # all active by the end


def test_closed_loop_never_exceeds_its_clients():
    infos, durations = resolve_models("resnet50", 3)
    sim = Simulation(make_scheduler("clockwork", SchedulerConfig()), infos, durations,
                     SimConfig())
    loop = workloads.ClosedLoop([m.model_id for m in infos], concurrency=4,
                                duration_ns=2 * NS)
    rows = sim.run_closed(loop, slo_ns=100_000_000).requests
    assert len(rows) > 3 * 4 * 10
    for model in loop.models:
        mine = [r for r in rows if r.model == model]
        events = sorted([(r.arrival_ns, 1) for r in mine] + [(r.completion_ns, -1) for r in mine])
        in_flight = np.cumsum([e[1] for e in events])
        assert in_flight.max() <= 4
        # each client sends again a round trip after its answer, until the end
        assert max(r.arrival_ns for r in mine) < 2 * NS
    assert all(r.simulated for r in rows)


def test_presets_and_explicit_options():
    c = with_preset("fig5", slo_ns=25_000_000, duration_s=10.0)
    assert (c.models, c.copies, c.workload, c.concurrency, c.workers) == \
        ("resnet50", 15, "closed", 16, 1)
    assert c.slo_ns == 25_000_000
    assert with_preset("fig5", concurrency=4).concurrency == 4
    c6 = with_preset("fig6")
    assert c6.copies == 3601 and c6.workload == "fig6"
    with pytest.raises(UsageError, match="unknown --preset"):
        with_preset("fig9")
    with pytest.raises(UsageError, match="unknown --workload"):
        ReplayConfig(workload="bursty")


def test_models_as_a_count_cycles_through_the_zoo_set():
    infos, durations = resolve_models("20", copies=99)
    assert len(infos) == 20 == len(durations)
    assert len({m.model_id for m in infos}) == 20
    assert infos[0].model_id == "resnet18" and infos[8].model_id == "resnet18#1"
