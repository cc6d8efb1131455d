"""The compiled simulator (cw/replay/native/) against the Python one (simulate.py +
clockwork.py / baselines.py): the same workload must give byte-identical telemetry, for every
part of each policy a workload exercises (batching, rejections, loads and LRU unloads, TOO_LATE
re-planning, the answer guard, the learned margin, noise, closed loops, AIMD, batch timeouts)."""

import re
import shutil
import subprocess
import sys

import msgspec
import pytest

from cw.errors import UsageError
from cw.replay import arrivals, fastsim, workloads
from cw.replay.runner import ReplayConfig, replay, resolve_models
from cw.replay.simulate import SimConfig, Simulation
from cw.replay.traces import load_trace
from cw.serve.scheduler import SchedulerConfig, make_scheduler
from cw.serve.telemetry import TelemetryLog

NS = 1_000_000_000
MS = 1_000_000

compiled = pytest.mark.skipif(not fastsim.available(), reason="the compiled simulator was not "
                              "built (test_built_where_a_compiler_is fails if it should be)")


def test_built_where_a_compiler_is():
    """pip builds the extension when a C++ compiler is present (optional=True would otherwise
    hide a broken build behind the Python fallback)."""
    if not (shutil.which("g++") or shutil.which("c++")):
        pytest.skip("no C++ compiler here: the Python simulator serves")
    assert fastsim.available()


def _both(tmp_path, infos, durations, sim_config, slo_ns, scheduler_config=SchedulerConfig(),
          names=None, times_ns=None, loop=None, scheduler="clockwork"):
    """Run both simulators; return the two output directories' CSV bytes and the row counts."""
    out = {}
    for engine in ("python", "compiled"):
        log = TelemetryLog(tmp_path / engine)
        if engine == "python":
            sim = Simulation(make_scheduler(scheduler, scheduler_config), infos, durations,
                             sim_config, log)
            if loop is not None:
                sim.run_closed(loop, slo_ns)
            else:
                sim.run(times_ns, names, slo_ns)
        else:
            fastsim.run(scheduler_config, infos, durations, sim_config, slo_ns, log,
                        scheduler=scheduler, times_ns=times_ns, model_names=names, closed=loop)
        log.close()
        out[engine] = {f: (tmp_path / engine / f).read_bytes()
                       for f in ("requests.csv", "actions.csv")}
    return out


def _trace_workload(infos, seconds, rate):
    arr = arrivals.generate(load_trace("azure"), [m.model_id for m in infos], duration_s=seconds,
                            start_minute=0, rate_scale=None, target_rate=rate,
                            arrivals="poisson", mapping="contiguous", seed=0)
    return arr.times_ns, [arr.models[i] for i in arr.model_index]


def _column(csv_bytes, name):
    lines = csv_bytes.decode().splitlines()
    i = lines[0].split(",").index(name)
    return [line.split(",")[i] for line in lines[1:]]


@compiled
@pytest.mark.parametrize("case", ["6 GPUs", "tight SLO", "few pages + noise", "learned margin",
                                  "closed loop", "closed loop + think", "deep queues"])
def test_compiled_telemetry_identical_to_python(tmp_path, case):
    infos, durations = resolve_models("resnet50,resnet18,resnet152,inception_v3", 5,
                                      "paper")
    slo, sim_config, loop, times, names = 100 * MS, SimConfig(6, 1), None, None, None
    scheduler_config = SchedulerConfig()
    if case == "6 GPUs":
        times, names = _trace_workload(infos, 6, 1000)
    elif case == "tight SLO":
        sim_config = SimConfig(1, 1)
        slo = 25 * MS
        times, names = _trace_workload(infos, 8, 400)
    elif case == "few pages + noise":
        # 30 pages per GPU hold ~2 resnet50s: every few requests evict (UNLOAD) and LOAD;
        # EXECs 30 % longer or shorter than planned trip the answer guard now and then
        sim_config = SimConfig(2, 1, pages_per_gpu=30, noise=0.3, seed=7)
        slo = 50 * MS
        times, names = _trace_workload(infos, 6, 600)
    elif case == "learned margin":
        # no fixed completion margin: the margin is the learned p99 of the answers' delays
        scheduler_config = SchedulerConfig(completion_margin_ns=0)
        sim_config = SimConfig(1, 1, noise=0.1, seed=2)
        slo = 25 * MS
        times, names = _trace_workload(infos, 6, 400)
    elif case == "deep queues":
        # hundreds of requests queued per model: batches are taken from a heap's head
        loop = workloads.ClosedLoop([m.model_id for m in infos[:4]], concurrency=300,
                                    duration_ns=NS // 5)
        sim_config = SimConfig(2, 1)
    else:
        loop = workloads.ClosedLoop([m.model_id for m in infos[:6]], concurrency=4,
                                    duration_ns=2 * NS,
                                    think_ns=3 * MS if case == "closed loop + think" else 0)
        sim_config = SimConfig(1, 1)
        slo = 25 * MS
    out = _both(tmp_path, infos, durations, sim_config, slo, scheduler_config, names=names,
                times_ns=times, loop=loop)
    for f in ("requests.csv", "actions.csv"):
        assert out["compiled"][f] == out["python"][f], f"{case}: {f} differs"
    requests, actions = out["python"]["requests.csv"], out["python"]["actions.csv"]
    statuses = set(_column(requests, "status"))
    kinds = {(k, s) for k, s in zip(_column(actions, "kind"), _column(actions, "status"))}
    assert len(requests.splitlines()) > 1000
    # each case exercises what it is there for (else an equality would prove little)
    if case == "tight SLO":
        assert "REJECTED" in statuses
    if case == "few pages + noise":
        assert ("unload", "OK") in kinds and ("load", "OK") in kinds
        assert len(set(_column(actions, "measured_ns"))) > 100  # noisy durations
        assert "TIMED_OUT" in statuses
        # EXECs that ran long made later ones start late: windows widened (adapt_slack)
        windows = [int(b) - int(a) for k, a, b in zip(_column(actions, "kind"),
                                                      _column(actions, "earliest_ns"),
                                                      _column(actions, "latest_ns"))
                   if k == "infer"]
        assert max(windows) > scheduler_config.infer_slack_ns
    if case in ("6 GPUs", "deep queues"):
        assert {b for b in _column(requests, "batch_size")} - {"0", "1"}  # batches formed
    if case == "deep queues":
        assert "16" in _column(requests, "batch_size") and "REJECTED" in statuses
    if case == "closed loop + think":
        # a client asks again 3 ms after its answer (and the way there and back) at the soonest
        for model in loop.models:
            rows = [(int(a), int(c)) for m, a, c in zip(_column(requests, "model"),
                                                        _column(requests, "arrival_ns"),
                                                        _column(requests, "completion_ns"))
                    if m == model]
            answers = sorted(c for _, c in rows)
            later_asks = sorted(a for a, _ in rows)[loop.concurrency:]
            assert later_asks and all(a - c >= loop.think_ns + 2 * sim_config.network_ns
                                      for a, c in zip(later_asks, answers)), model


@compiled
def test_compiled_quotes_model_names_as_the_csv_module(tmp_path):
    infos, durations = resolve_models("resnet18", 2, "paper")
    renamed = {"res,net": infos[0], 'say "hi"': infos[1]}
    infos = [msgspec.structs.replace(m, model_id=n) for n, m in renamed.items()]
    durations = {n: durations[m.model_id] for n, m in renamed.items()}
    times = [i * 2 * MS for i in range(500)]
    names = [infos[i % 2].model_id for i in range(500)]
    out = _both(tmp_path, infos, durations, SimConfig(1, 1), 100 * MS, names=names,
                times_ns=times)
    assert out["compiled"] == out["python"]
    assert b'"res,net"' in out["compiled"]["requests.csv"]
    assert b'"say ""hi"""' in out["compiled"]["actions.csv"]


@compiled
def test_replay_reports_the_engine_and_agrees(tmp_path):
    summaries = {}
    for engine in ("compiled", "python"):
        summaries[engine] = replay(ReplayConfig(duration_s=5, target_rate=500, workers=2,
                                                sim_engine=engine, out=tmp_path / engine))
        assert summaries[engine]["sim_engine"] == engine
    for key in ("requests", "completed_in_slo", "rejected", "late", "latency_ms",
                "mean_batch_size", "cold_starts", "model_attainment"):
        assert summaries["compiled"][key] == summaries["python"][key], key
    assert summaries["compiled"]["model_attainment"]["models"] > 10
    pages = {e: (tmp_path / e / "report.html").read_text() for e in summaries}
    assert pages["compiled"].count("<svg") == pages["python"].count("<svg")
    # the models that missed most: the same table, whether model names came as codes or rows
    table = {e: re.sub("<caption>.*?</caption>", "", p[p.index("<h2>Models that missed"):])
             for e, p in pages.items()}
    assert table["compiled"] == table["python"]


@compiled
@pytest.mark.parametrize("scheduler", ["fifo", "batch-timeout", "clipper"])
@pytest.mark.parametrize("case", ["overload", "few pages + noise", "closed loop", "ties",
                                  "too large"])
def test_compiled_baselines_identical_to_python(tmp_path, scheduler, case):
    infos, durations = resolve_models("resnet50,resnet18,resnet152,inception_v3", 5, "paper")
    loop = times = names = None
    if case == "overload":  # queues build up: batches, AIMD back-off, late answers
        sim_config, slo = SimConfig(1, 1), 25 * MS
        times, names = _trace_workload(infos, 4, 500)
    elif case == "too large":
        # 12 pages per GPU: resnet152 (16 pages) never fits; its requests are rejected, not
        # queued forever (the simulation would never end)
        sim_config, slo = SimConfig(2, 1, pages_per_gpu=12), 100 * MS
        times, names = _trace_workload(infos, 4, 300)
    elif case == "ties":
        # four models' requests at each instant, in reverse name order: which queue goes first
        # is decided by the model's name; a 10 ms SLO that big batches exceed (AIMD back-off)
        sim_config, slo = SimConfig(1, 1), 10 * MS
        order = sorted((m.model_id for m in infos[::5]), reverse=True)
        times = [(i // 4) * MS for i in range(2000)]
        names = [order[i % 4] for i in range(2000)]
    elif case == "few pages + noise":
        sim_config, slo = SimConfig(2, 1, pages_per_gpu=30, noise=0.3, seed=5), 50 * MS
        times, names = _trace_workload(infos, 4, 300)
    else:
        sim_config, slo = SimConfig(1, 1), 25 * MS
        loop = workloads.ClosedLoop([m.model_id for m in infos[:6]], concurrency=4,
                                    duration_ns=NS)
    out = _both(tmp_path, infos, durations, sim_config, slo, names=names, times_ns=times,
                loop=loop, scheduler=scheduler)
    for f in ("requests.csv", "actions.csv"):
        assert out["compiled"][f] == out["python"][f], f"{scheduler}, {case}: {f} differs"
    requests, actions = out["python"]["requests.csv"], out["python"]["actions.csv"]
    assert len(requests.splitlines()) > 300
    kinds = set(_column(actions, "kind"))
    if case == "overload":
        late = [c > d for c, d in zip(map(int, _column(requests, "completion_ns")),
                                       map(int, _column(requests, "deadline_ns")))]
        assert any(late)  # the baselines answer late rather than reject
        if scheduler != "fifo":
            assert set(_column(requests, "batch_size")) - {"0", "1"}
    if case == "few pages + noise":
        assert "unload" in kinds
    if case == "too large":
        statuses = _column(requests, "status")
        assert "REJECTED" in statuses and "OK" in statuses


@compiled
@pytest.mark.parametrize("spec", ["clockwork:ahead=1ms:slack=1ms:loads=1",
                                  "clockwork:margin=0ms:guard=500us:window=3",
                                  "batch-timeout:max-batch=4:delay=500us",
                                  "clipper:step=3:backoff=0.5"])
def test_compiled_takes_a_specs_settings(tmp_path, spec):
    """A policy's settings (`cw replay --scheduler batch-timeout:delay=500us`) reach the compiled
    simulator as they reach the Python one, and change what happens."""
    infos, durations = resolve_models("resnet50,resnet18,resnet152,inception_v3", 5, "paper")
    sim_config, slo = SimConfig(1, 1, pages_per_gpu=40), 25 * MS
    times, names = _trace_workload(infos, 3, 500)
    out = _both(tmp_path / "spec", infos, durations, sim_config, slo, names=names,
                times_ns=times, scheduler=spec)
    for f in ("requests.csv", "actions.csv"):
        assert out["compiled"][f] == out["python"][f], f"{spec}: {f} differs"
    plain = _both(tmp_path / "plain", infos, durations, sim_config, slo, names=names,
                  times_ns=times, scheduler=spec.split(":")[0])
    assert plain["compiled"]["actions.csv"] != out["compiled"]["actions.csv"]


def test_sim_engine_choices():
    for scheduler in ("clockwork", "clipper", "batch-timeout", "fifo"):
        assert fastsim.engine_for(scheduler, "python") == "python"
        expected = "compiled" if fastsim.available() else "python"
        assert fastsim.engine_for(scheduler, "auto") == expected
    assert fastsim.engine_for("a policy added later", "auto") == "python"
    with pytest.raises(UsageError, match="no policy"):
        fastsim.engine_for("a policy added later", "compiled")
    with pytest.raises(UsageError, match="unknown --sim-engine"):
        ReplayConfig(sim_engine="fast")


def test_cli_refuses_an_unknown_engine(tmp_path):
    r = subprocess.run([sys.executable, "-m", "cw", "replay", "--simulate", "--sim-engine",
                        "fast", "--duration", "5s", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "unknown --sim-engine 'fast'" in r.stderr + r.stdout
    assert not (tmp_path / "o").exists()


@compiled
def test_progress_and_errors_from_callbacks_propagate(tmp_path):
    infos, durations = resolve_models("resnet18", 2, "paper")
    times, names = _trace_workload(infos, 30, 1000)
    seen = []
    fastsim.run(SchedulerConfig(), infos, durations, SimConfig(2, 1), 100 * MS, TelemetryLog(),
                times_ns=times, model_names=names, progress=lambda n, t: seen.append((n, t)))
    assert [n for n, _ in seen[:-1]] == list(range(5000, len(names) + 1, 5000))
    assert seen[-1][0] == len(names) and all(a[1] <= b[1] for a, b in zip(seen, seen[1:]))

    def stop(n, t):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fastsim.run(SchedulerConfig(), infos, durations, SimConfig(2, 1), 100 * MS,
                    TelemetryLog(), times_ns=times, model_names=names, progress=stop)


@compiled
@pytest.mark.parametrize("seed", [0, 12345, -7, 2**40 + 3, 2**70 + 5])
def test_noise_matches_python_random_for_any_seed(tmp_path, seed):
    infos, durations = resolve_models("resnet18", 2, "paper")
    times = [i * 3 * MS for i in range(300)]
    names = [infos[i % 2].model_id for i in range(300)]
    out = _both(tmp_path, infos, durations, SimConfig(1, 1, noise=0.2, seed=seed), 100 * MS,
                names=names, times_ns=times)
    assert out["compiled"] == out["python"]
    assert len(set(_column(out["compiled"]["actions.csv"], "measured_ns"))) > 200


def test_without_the_extension_python_simulates(tmp_path, monkeypatch):
    """Where pip found no compiler: `auto` falls back to the Python simulator, `compiled` says
    how to get it."""
    monkeypatch.setattr(fastsim, "_fastsim", None)
    assert not fastsim.available()
    s = replay(ReplayConfig(duration_s=3, target_rate=300, out=tmp_path / "o"))
    assert s["sim_engine"] == "python" and s["requests"] > 500
    with pytest.raises(UsageError, match="not built") as e:
        ReplayConfig(sim_engine="compiled")
    assert "C++ compiler" in e.value.hint
