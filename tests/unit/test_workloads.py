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
    assert c.slo_ns == 25_000_000 and c.duration_s == 10.0
    # fig5's rejected clients ask again every 200 µs: a short default, not the trace's 10 min
    assert with_preset("fig5", duration_s=None).duration_s == 30.0
    assert with_preset("fig5", concurrency=4).concurrency == 4
    c6 = with_preset("fig6")
    assert c6.copies == 3601 and c6.workload == "fig6" and c6.duration_s == 600.0
    with pytest.raises(UsageError, match="unknown --preset"):
        with_preset("fig9")
    with pytest.raises(UsageError, match="unknown --workload"):
        ReplayConfig(workload="bursty")


def test_models_as_a_count_cycles_through_the_zoo_set():
    infos, durations = resolve_models("20", copies=99)
    assert len(infos) == 20 == len(durations)
    assert len({m.model_id for m in infos}) == 20
    assert infos[0].model_id == "resnet18" and infos[8].model_id == "resnet18#1"


def test_zoo_models_simulate_with_committed_gpu_profiles_else_the_paper():
    import model_zoo
    from cw.serve.estimates import zoo_profile

    (r50, r34), durations = resolve_models("resnet50,resnet34", 1)
    profile = zoo_profile("resnet50")
    # the simulated worker runs the measured p50s; the scheduler starts from the p99s, as for a
    # bundle with its own profile.json
    sim = durations["resnet50"]
    assert sim.source == "zoo-profile"
    assert sim.exec_ns == {b.batch_size: b.exec.p50_ns for b in profile.batches}
    assert sim.load_ns == profile.load.stats.p50_ns
    assert sim.input_ns[16] == profile.batch(16).input.p50_ns
    assert r50.exec_ns == {b.batch_size: b.exec.p99_ns for b in profile.batches}
    assert r50.load_ns == profile.load.stats.p99_ns
    assert (r50.weights_bytes, r50.pages) == (profile.load.bytes, profile.load.pages)
    # nothing measured for resnet34: Clockwork's Table 1
    assert zoo_profile("resnet34") is None
    table1 = model_zoo.MODELS["resnet34"].paper_exec_ms
    assert durations["resnet34"].source == "paper" and r34.exec_ns[1] == int(table1[0] * 1e6)
    # --zoo-timings paper: Table 1 for every model
    (r50_paper,), durations = resolve_models("resnet50", 1, "paper")
    assert durations["resnet50"].source == "paper"
    assert r50_paper.exec_ns[1] == int(model_zoo.MODELS["resnet50"].paper_exec_ms[0] * 1e6)
    with pytest.raises(UsageError, match="--zoo-timings"):
        ReplayConfig(zoo_timings="v100")


def _committed_zoo_profiles():
    """(folder, model) for every committed zoo profile."""
    from importlib import resources

    from cw.serve.estimates import ZOO_PROFILE_DEVICES

    root = resources.files("model_zoo") / "profiles"
    assert {p.name for p in root.iterdir() if p.is_dir()} == set(ZOO_PROFILE_DEVICES)
    return [(device, p.name[:-5]) for device in ZOO_PROFILE_DEVICES
            for p in sorted((root / device).iterdir(), key=lambda p: p.name)
            if p.name.endswith(".json")]


def test_zoo_profiles_are_committed_for_the_measured_models():
    assert {"resnet18", "resnet50", "resnet152", "densenet121", "inception_v3",
            "mobilenet_v2"} <= {name for _, name in _committed_zoo_profiles()}


def test_a_zoo_model_simulates_with_its_newest_kernels_measured():
    from cw.serve.estimates import zoo_profile

    # resnet50 was measured again with the CUTLASS convolutions cw compiles by default since
    # 2026-11-27; resnet18 only with the untuned kernels of 2026-11-22
    assert zoo_profile("resnet50").device.name == "NVIDIA H200"
    assert zoo_profile("resnet18").device.name.startswith("NVIDIA H100")
    (r50,), durations = resolve_models("resnet50", 1)
    assert durations["resnet50"].exec_ns[1] < 1_100_000 < _profile_file(
        "nvidia-h100", "resnet50").batch(1).exec.p50_ns


def _profile_file(device: str, name: str):
    from importlib import resources

    import msgspec
    from cw.profile.schema import Profile

    path = resources.files("model_zoo") / "profiles" / device / f"{name}.json"
    return msgspec.json.decode(path.read_bytes(), type=Profile)


@pytest.mark.parametrize("device,name", _committed_zoo_profiles())
def test_committed_zoo_profile_is_whole(device, name):
    import model_zoo

    profile = _profile_file(device, name)
    assert profile.bundle == name and name in model_zoo.MODELS
    assert profile.device.kind == "cuda" and profile.runtime == "tvm-cuda"
    assert [b.batch_size for b in profile.batches] == [1, 2, 4, 8, 16]
    for b in profile.batches:
        assert 0 < b.exec.p50_ns <= b.exec.p99_ns and 0 < b.input.p50_ns
    assert profile.batch(16).exec.p50_ns > profile.batch(1).exec.p50_ns
    assert profile.load.bytes > 0 and profile.load.pages >= 1
