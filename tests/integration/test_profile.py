"""`cw profile --device cpu` on a tiny bundle writes a well-formed profile.json."""

import json
import shutil

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


@pytest.mark.parametrize("args,text", [
    (("--device", "cuda"), "compiled for cpu, not cuda"),
    (("--device", "cpu", "--batch-sizes", "2"), "not compiled"),
    (("--device", "tpu"), "unknown device"),
    (("--device", "cpu", "--iterations", "0"), "iterations"),
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
