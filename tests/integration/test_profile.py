"""`cw profile --device cpu` on a tiny bundle writes a well-formed profile.json."""

import json
import shutil

import numpy as np
import pytest

from cw.bundle import open_bundle

PHASES = ("input", "exec", "exec_host", "output")


@pytest.fixture
def bundle(cpu_bundle, tmp_path):
    path = tmp_path / "mlp"
    shutil.copytree(cpu_bundle("mlp"), path)
    return path


def _check_stats(s, n):
    assert s["n"] == n
    assert 0 < s["p50_ns"] <= s["p99_ns"] <= s["p999_ns"] <= s["p9999_ns"] <= s["max_ns"]
    assert s["mean_ns"] > 0 and s["std_ns"] >= 0


def test_cpu_profile_written_and_checksummed(cli, bundle):
    r = cli("profile", bundle, "--device", "cpu", "--iterations", "50", "--warmup", "5",
            "--load-iterations", "5")
    assert r.code == 0, r.err
    assert "p99.99/p50" in r.out
    # not a terminal: a line per phase instead of a bar
    assert "LOAD (weights → page cache) ×5" in r.out
    assert "batch 4: INPUT, EXEC, OUTPUT ×55" in r.out
    profile = json.loads((bundle / "profile.json").read_text())
    assert profile["schema_version"] == 1 and profile["bundle"] == "mlp"
    assert profile["runtime"] == "tvm-cpu" and profile["device"]["kind"] == "cpu"
    from cw.tvm_env import cpu_threads
    assert profile["device"]["threads"] == cpu_threads()
    assert profile["iterations"] == 50 and profile["warmup"] == 5
    for key in ("date_utc", "cw_version", "tvm_version"):
        assert profile[key]
    assert profile["device_memory_bytes"] >= open_bundle(bundle).manifest.weights.page_size
    _check_stats(profile["load"]["stats"], 5)
    assert profile["load"]["bytes"] == open_bundle(bundle).manifest.weights.total_bytes
    assert [b["batch_size"] for b in profile["batches"]] == [1, 4]
    for b in profile["batches"]:
        for phase in PHASES:
            _check_stats(b[phase], 50)
        # the slowest EXECs, in run order: the slowest of all is the stats' max, and the 8
        # slowest of 50 are all at least the median
        slowest = b["exec_slowest"]
        runs = [r["run"] for r in slowest]
        assert len(slowest) == 8 and runs == sorted(set(runs)) and 0 <= runs[0] and runs[-1] < 50
        assert max(r["exec_ns"] for r in slowest) == b["exec"]["max_ns"]
        assert min(r["exec_ns"] for r in slowest) >= b["exec"]["p50_ns"]
        at = [r["at_ns"] for r in slowest]
        assert at == sorted(at) and at[0] >= 0 and (runs[0] > 0) == (at[0] > 0)
    assert "batch 4, slowest EXECs in ms: " in r.out
    # the manifest now vouches for profile.json, and inspect shows it
    assert "profile.json" in open_bundle(bundle).manifest.files
    info = json.loads(cli("inspect", bundle, "--json").out)
    assert info["profile"]["bundle"] == "mlp"


def test_profile_subset_and_concurrency_not_stored(cli, bundle):
    r = cli("profile", bundle, "--device", "cpu", "--iterations", "20", "--warmup", "2",
            "--load-iterations", "2", "--batch-sizes", "4", "--concurrency", "2", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert [b["batch_size"] for b in out["profile"]["batches"]] == [4]
    (conc,) = out["concurrency"]
    assert conc["concurrency"] == 2 and conc["latency"]["n"] == 20
    assert conc["throughput_per_s"] > 0
    stored = json.loads((bundle / "profile.json").read_text())
    assert "concurrency" not in stored


def test_exec_back_to_back_is_reported_beside_the_profile_never_stored(cli, bundle):
    """--back-to-back: as many EXECs again, each launched while the one before runs (a busy
    worker's way); their statistics, slowest runs and busy share are printed, not stored."""
    r = cli("profile", bundle, "--device", "cpu", "--iterations", "60", "--warmup", "2",
            "--load-iterations", "2", "--back-to-back", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert [b["batch_size"] for b in out["back_to_back"]] == [1, 4]
    for b in out["back_to_back"]:
        _check_stats(b["exec"], 60)
        runs = [s["run"] for s in b["exec_slowest"]]
        assert len(runs) == 8 and runs == sorted(set(runs)) and runs[-1] < 60
        assert max(s["exec_ns"] for s in b["exec_slowest"]) == b["exec"]["max_ns"]
        assert 0 < b["busy"] <= 1
    assert "back_to_back" not in (bundle / "profile.json").read_text()
    r = cli("profile", bundle, "--device", "cpu", "--iterations", "60", "--load-iterations",
            "2", "--batch-sizes", "4", "--back-to-back")
    assert r.code == 0 and "back to back, batch 4: EXEC p50" in r.out, r.err


def test_a_long_profile_is_cut_to_fit_its_max_time_and_says_so(cli, bundle):
    """A big model on a CPU takes seconds an iteration: 1,000 of them per batch size took hours.
    --max-time bounds each batch size (here to far less than the iterations asked for)."""
    from cw.profile.profiler import MIN_ITERATIONS

    r = cli("profile", bundle, "--iterations", "400", "--warmup", "200", "--load-iterations",
            "2", "--max-time", "1ms")
    assert r.code == 0, r.err
    profile = json.loads((bundle / "profile.json").read_text())
    assert profile["iterations"] == 400
    for b in profile["batches"]:
        n = b["exec"]["n"]
        assert MIN_ITERATIONS <= n < 400 and all(b[phase]["n"] == n for phase in PHASES)
        note = f"batch {b['batch_size']}: {n} of 400 iterations"
        assert any(x.startswith(note) for x in profile["notes"]) and note in r.out
        # the warm-up runs stop once they have taken a tenth of --max-time
        (warm,) = [x for x in profile["notes"]
                   if x.startswith(f"batch {b['batch_size']}: ") and "warm-up runs" in x]
        assert 1 <= int(warm.split(": ")[1].split(" of ")[0]) < 200 and warm in r.out
    assert "--max-time 1 ms per batch size" in r.out
    # without a limit, exactly what was asked
    r = cli("profile", bundle, "--iterations", "60", "--warmup", "0", "--load-iterations",
            "2", "--max-time", "none", "--batch-sizes", "1")
    assert r.code == 0, r.err
    assert json.loads((bundle / "profile.json").read_text())["batches"][0]["exec"]["n"] == 60
    assert "of 60 iterations" not in r.out


@pytest.mark.parametrize("args,text", [
    (("--device", "cuda"), "compiled for cpu, not cuda"),
    (("--device", "cpu", "--batch-sizes", "2"), "not compiled"),
    (("--device", "tpu"), "unknown device"),
    (("--device", "cpu", "--iterations", "0"), "iterations"),
    (("--max-time", "0"), "--max-time must be positive"),
    (("--max-time", "soon"), "invalid --max-time 'soon'"),
])
def test_profile_bad_input_leaves_profile_untouched(cli, bundle, args, text):
    r = cli("profile", bundle, *args)
    assert r.code != 0 and text in r.err
    assert not (bundle / "profile.json").exists()
    open_bundle(bundle)  # still verifies


def test_profile_of_corrupted_bundle(cli, bundle):
    (bundle / "weights.bin").write_bytes(b"\0" * 10)
    r = cli("profile", bundle, "--device", "cpu")
    assert r.code == 4 and "checksum mismatch" in r.err
    assert not (bundle / "profile.json").exists()


def test_a_damaged_profile_is_measured_again_on_the_bundles_own_device(cli, bundle):
    """profile.json is a measurement: damaged, it is remade by `cw profile` (which the error
    says), not by compiling again; without --device a CPU bundle is measured on the CPU."""
    r = cli("profile", bundle, "--iterations", "5", "--warmup", "0", "--load-iterations", "1",
            "--batch-sizes", "1")
    assert r.code == 0, r.err
    before = json.loads((bundle / "profile.json").read_text())
    assert before["device"]["kind"] == "cpu"
    (bundle / "profile.json").write_text("{cut short")
    r = cli("inspect", bundle)
    assert r.code == 4 and f"checksum mismatch in profile.json (measure it again: cw profile " \
        f"{bundle}" in r.err, r.err
    r = cli("profile", bundle, "--iterations", "5", "--warmup", "0", "--load-iterations", "1",
            "--batch-sizes", "4")
    assert r.code == 0, r.err
    after = json.loads((bundle / "profile.json").read_text())
    # measured afresh: nothing merged from the damaged file
    assert [b["batch_size"] for b in after["batches"]] == [4]
    open_bundle(bundle)  # verifies again


def _profile_cpu(cli, bundle, *args):
    r = cli("profile", bundle, "--device", "cpu", "--iterations", "20", "--warmup", "2",
            "--load-iterations", "2", *args)
    assert r.code == 0, r.err
    return r


def test_a_partial_profile_is_used_and_later_runs_keep_its_sizes(cli, bundle):
    """`cw profile --batch-sizes 4` stores size 4 only; estimates then interpolate size 1 from
    it instead of dropping the whole profile, and measuring size 1 later keeps size 4."""
    from cw.bundle import open_bundle
    from cw.serve.estimates import bundle_estimates

    _profile_cpu(cli, bundle, "--batch-sizes", "4")
    est = bundle_estimates(open_bundle(bundle), "p50_ns")
    four = json.loads((bundle / "profile.json").read_text())["batches"][0]
    assert est.source == "profile-partial"
    assert est.exec_ns == {1: four["exec"]["p50_ns"], 4: four["exec"]["p50_ns"]}
    _profile_cpu(cli, bundle, "--batch-sizes", "1")
    stored = json.loads((bundle / "profile.json").read_text())
    assert [b["batch_size"] for b in stored["batches"]] == [1, 4]
    assert stored["batches"][1] == four  # kept as measured
    assert any("kept from the profile" in n for n in stored["notes"])
    est = bundle_estimates(open_bundle(bundle), "p50_ns")
    assert est.source == "profile"
    assert est.exec_ns[1] == stored["batches"][0]["exec"]["p50_ns"]


def test_a_profile_copied_in_by_hand_is_flagged_and_can_be_imported(cli, bundle, tmp_path,
                                                                     caplog):
    from cw.bundle import open_bundle
    from cw.serve.estimates import bundle_estimates

    _profile_cpu(cli, bundle)
    measured = tmp_path / "measured.json"
    shutil.copy(bundle / "profile.json", measured)
    # a fresh bundle (no profile) with the file copied in: not in the manifest, so ignored ...
    fresh = tmp_path / "fresh"
    shutil.copytree(bundle, fresh)
    shutil.copy(measured, fresh / "profile.json")
    manifest = json.loads((fresh / "manifest.json").read_text())
    del manifest["files"]["profile.json"]
    (fresh / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level("WARNING", logger="cw.profile"):
        est = bundle_estimates(open_bundle(fresh))
    assert est.source == "default"
    assert "is not in the bundle's manifest, so it is ignored" in caplog.text
    assert f"cw profile {fresh} --import" in caplog.text
    r = cli("inspect", fresh)
    assert r.code == 0 and "not in the manifest and is ignored" in r.out
    # ... until it is registered
    r = cli("profile", fresh, "--import", fresh / "profile.json")
    assert r.code == 0, r.err
    assert "profile.json" in open_bundle(fresh).manifest.files  # checksum recorded
    est = bundle_estimates(open_bundle(fresh), "p99_ns")
    batches = json.loads(measured.read_text())["batches"]
    assert est.source == "profile"
    assert est.exec_ns == {b["batch_size"]: b["exec"]["p99_ns"] for b in batches}
    assert "imported from profile.json" in json.loads((fresh / "profile.json").read_text())[
        "notes"][-1]


def test_import_refuses_a_profile_that_does_not_fit(cli, bundle, tmp_path):
    _profile_cpu(cli, bundle)
    good = json.loads((bundle / "profile.json").read_text())
    before = (bundle / "profile.json").read_bytes()
    cases = {
        "cuda.json": ({**good, "device": {**good["device"], "kind": "cuda"}},
                      "measured on a cuda device, but"),
        "sizes.json": ({**good, "batches": good["batches"] + [{**good["batches"][0],
                                                                "batch_size": 16}]},
                       "measures batch sizes [1, 4, 16]"),
        "pages.json": ({**good, "load": {**good["load"], "pages": 99}}, "loads 99 weight page"),
        "junk.json": ({"hello": 1}, "is not a cw profile"),
    }
    for name, (content, text) in cases.items():
        (tmp_path / name).write_text(json.dumps(content))
        r = cli("profile", bundle, "--import", tmp_path / name)
        assert r.code == 2 and text in r.err, (name, r.err)
        assert len(r.err.strip().splitlines()) == 1
    r = cli("profile", bundle, "--import", tmp_path / "missing.json")
    assert r.code == 2 and "no profile at" in r.err
    r = cli("profile", bundle, "--import", tmp_path / "junk.json", "--concurrency", "2")
    assert r.code == 2 and "--import measures nothing" in r.err
    assert (bundle / "profile.json").read_bytes() == before  # nothing half-written


def test_exec_timer_runs_what_cw_run_does_and_times_each_exec(bundle):
    """cw.profile.exec_timer (bench/kernels.py's EXEC as served): the serving runtime's
    outputs equal `cw run`'s, padded batches included, and each EXEC gets its own sample."""
    from cw.engine import LocalModel
    from cw.profile.exec_timer import ExecTimer
    from tests.conftest import random_input

    local = LocalModel(bundle)
    with ExecTimer(bundle, device="cpu") as timer:
        for batch in (1, 3):  # 3 runs padded to the compiled 4
            x = random_input((batch, *local.manifest.inputs[0].sample_shape), seed=batch)
            (y,) = timer.run([x])
            (want,) = local.run([x])
            assert y.shape == want.shape
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
            samples = timer.exec_ns([x], runs=7)
            assert len(samples) == 7 and all(s > 0 for s in samples)
        assert sorted(timer._slots) == [1, 4]
        with pytest.raises(ValueError, match="runs must be"):
            timer.exec_ns([x], runs=0)


def test_close_digest_reads_what_profile_and_replay_write(cli, bundle, tmp_path):
    """bench/close_digest.py on a results folder laid out as `close` leaves it: a real
    `cw profile --json --back-to-back` (CPU here) and a Fig. 5 summary; its tables and
    verdicts follow what they hold."""
    import importlib.util
    import io
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "close_digest", Path(__file__).parents[2] / "bench" / "close_digest.py")
    close_digest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(close_digest)

    results = tmp_path / "results"
    results.mkdir()
    (results / "device.txt").write_text("a CPU, for the test\n")
    r = cli("profile", bundle, "--device", "cpu", "--iterations", "60", "--load-iterations",
            "2", "--batch-sizes", "1", "--back-to-back", "--json")
    assert r.code == 0, r.err
    (results / "p9999-b2b-mlp-b1.json").write_text(r.out)
    for run, late_client in (("fig5/fig5-10ms", 3), ("fig5/fig5-25ms", 0),
                             ("fig5-wayback/fig5-10ms", 0)):
        (results / run).mkdir(parents=True)
        (results / run / "summary.json").write_text(json.dumps({
            "slo_ms": int(run[-4:-2]), "scheduler": "clockwork", "requests": 1000,
            "goodput_rps": 50.0, "late": 0, "client_cpu": {"python": [0.4], "zmq": [0.1]},
            "client_view": {"late": late_client, "late_that_left_in_time": late_client,
                            "late_when_taken_in": 1, "way_back_ms": {"p99": 1.5},
                            "late_answers": [{"sent_s": 2.0, "model": "m", "status": "OK",
                                              "left_ms": 9.0, "taken_in_ms": 10.5,
                                              "answered_ms": 10.6}][:late_client]},
            "clock_origin": "2026-11-29 21:36:10,000"}))
    # a stall of the replay's client 4 ms before that answer's receipt (21:36:12.0106), and one
    # far from it
    (results / "fig5/fig5-10ms/stalls.log").write_text(
        "2026-11-29 21:36:12,007 client stall: Python could not run for 5.00 ms\n"
        "2026-11-29 21:36:13,000 controller stall: a loop iteration was busy 1.2 ms\n")
    out = io.StringIO()
    assert close_digest.digest(results, out)["gpu_tests_passed"] is None  # (not run: no file)
    # pytest's own closing lines, as `pytest -q -rs` ends
    (results / "pytest-gpu.txt").write_text(
        "....s...F.\n=========================== short test summary info ============\n"
        "SKIPPED [1] tests/gpu/test_cuda_runtime.py:40: needs 2 GPUs\n"
        "FAILED tests/gpu/test_cuda_runtime.py::test_exec_back_to_back - assert 0.4 > 0.9\n"
        "1 failed, 8 passed, 1 skipped, 60 deselected in 17.94s\n")
    out = io.StringIO()
    verdicts = close_digest.digest(results, out)
    text = out.getvalue()
    assert verdicts["gpu_tests_passed"] is False
    assert "'failed': 1, 'passed': 8, 'skipped': 1" in text and "needs 2 GPUs" in text
    (results / "pytest-gpu.txt").write_text("........\n40 passed, 60 deselected in 17.94s\n")
    assert close_digest.digest(results, io.StringIO())["gpu_tests_passed"] is True
    (results / "pytest-gpu.txt").write_text(
        "sss\nSKIPPED [3] tests/gpu/test_exec_graphs.py:35: no CUDA GPU here\n"
        "3 skipped, 60 deselected in 0.21s\n")  # all skipped: the GPU was not seen
    assert close_digest.digest(results, io.StringIO())["gpu_tests_passed"] is False
    (results / "pytest-gpu.txt").write_text("....\n")  # cut short by the step's time limit
    assert close_digest.digest(results, io.StringIO())["gpu_tests_passed"] is None
    assert "device: a CPU, for the test" in text
    assert "| fig5/fig5-10ms | clockwork | 1,000 | 50.0 | 0 | 3 | 3 | 1 | 1.5 | 0.4 |" in text
    # the late answer beside the stall line near its receipt, not the far one
    assert ("  sent 2.000 s OK: left 9.0 ms, taken in 10.5 ms, answered 10.6 ms; client stall: "
            "Python could not run for 5.00 ms") in text
    assert "loop iteration was busy 1.2 ms" not in text
    # one late answer by the client's count at 10 ms: not none late (the way-back run apart)
    assert verdicts["issue5_none_late"] is False
    profile = json.loads(r.out)
    ratio = profile["profile"]["batches"][0]["exec"]["p9999_ns"] / \
        profile["profile"]["batches"][0]["exec"]["p50_ns"]
    assert verdicts["issue7_tails_within_bar"]["mlp (VM, isolated) b1"] == (ratio <= 1.01)
    assert "mlp (VM, back to back) b1" in verdicts["issue7_tails_within_bar"]
    assert "| mlp | VM, back to back | 1 | 60 |" in text


def check_profiled_execs_compute_the_model(bundle, device, monkeypatch, rtol=1e-5, atol=1e-6):
    """Profiles `bundle` on `device` (iterations 5, warmup 1, nothing written), recording every
    measured INPUT → EXEC → OUTPUT, and checks the first and the last against `cw run`'s
    outputs on the same device. Shared with tests/gpu."""
    from cw.engine import LocalModel
    from cw.profile import profiler

    seen = []  # (inputs, outputs) of every measured INPUT → EXEC → OUTPUT
    make_runtime = profiler.make_runtime

    def recording(*args, **kwargs):
        runtime = make_runtime(*args, **kwargs)
        copy_input, copy_output = runtime.copy_input, runtime.copy_output

        def recorded_input(model, slot, inputs):
            seen.append([[np.array(x) for x in inputs], None])
            return copy_input(model, slot, inputs)

        def recorded_output(model, slot):
            outs, timing = copy_output(model, slot)
            seen[-1][1] = [np.array(y) for y in outs]
            return outs, timing

        runtime.copy_input, runtime.copy_output = recorded_input, recorded_output
        return runtime

    monkeypatch.setattr(profiler, "make_runtime", recording)
    profiler.profile_bundle(bundle, profiler.ProfileConfig(
        device=device, iterations=5, warmup=1, load_iterations=3, write=False))
    sizes = open_bundle(bundle).manifest.batch_sizes
    assert len(seen) == len(sizes) * 6
    local = LocalModel(bundle, device=device)
    for inputs, outputs in (seen[0], seen[-1]):
        (want,) = local.run(inputs)
        np.testing.assert_allclose(outputs[0], want, rtol=rtol, atol=atol)


def test_every_measured_exec_computes_the_model_with_its_own_weights(bundle, monkeypatch):
    """The profile times the model as served: its EXECs' outputs equal `cw run`'s. (The plain
    copy that LOAD's bandwidth is compared with once came after the loads and wrote over the
    weights in the page cache; on the CPU the bytes it left read as denormal floats, and the
    measured EXECs were 2.5-4x slower than the model's own.)"""
    check_profiled_execs_compute_the_model(bundle, "cpu", monkeypatch)


def test_the_plain_copy_into_the_page_cache_is_refused_while_weights_are_loaded(bundle):
    """The reference copy LOAD is compared with writes over the page cache: once weights are
    there it raises instead of silently replacing them (the profiler's bug above, made
    impossible rather than only ordered away)."""
    from cw.serve.runtime.base import RuntimeFault
    from cw.serve.runtime.host import HostModel, HostWeights
    from cw.serve.runtime.tvm_cpu import TvmCpuRuntime

    b = open_bundle(bundle)
    model = HostModel(b.manifest.name, b, HostWeights(b))
    runtime = TvmCpuRuntime(b.manifest.weights.page_size, model.weights.num_pages)
    nbytes = b.manifest.weights.total_bytes
    assert runtime.copy_bandwidth_gbps(nbytes) > 0  # nothing loaded yet: measured
    slots = runtime.cache.allocate(model.weights.num_pages)
    runtime.load(model, slots)
    before = runtime.memory[:nbytes].copy()
    with pytest.raises(RuntimeFault, match="overwrite the loaded weights of mlp") as refused:
        runtime.copy_bandwidth_gbps(nbytes)
    assert "before the first LOAD" in refused.value.hint
    assert np.array_equal(runtime.memory[:nbytes], before)
    runtime.unload(model)
    assert runtime.copy_bandwidth_gbps(nbytes) > 0
