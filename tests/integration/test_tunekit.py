"""Tuning kits: candidates compiled here (`cw tune-stage`), checked and timed where the device
is (`cw tune-measure`, TVM's runtime only), added to a database here (`cw tune-ingest`). The
whole round trip runs for real on this CPU with the tiny MLP; the CUDA side is staged for real
(CUDA code, no GPU needed) and measured on the GPU machine (bench/gpu_session.sh tune)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cw.compile import tuning
from cw.compile.compiler import CompileConfig, compile_model
from cw.compile.tuner import TuneConfig
from cw.compile.tunekit import ingest_results, stage_kit
from cw.engine import LocalModel
from cw.errors import UsageError
from cw.profile.candidates import (MeasureConfig, _max_relative_error, measure_kit, read_kit,
                                   read_results)
from cw.verify import max_relative_error, onnx_reference

CANDIDATES = 3


def _lines(path: Path) -> int:
    return sum(1 for line in open(path) if line.strip())


@pytest.fixture(scope="module")
def mlp_kit(zoo_onnx, tmp_path_factory):
    root = tmp_path_factory.mktemp("kit")
    report = stage_kit(zoo_onnx("mlp"), TuneConfig(db=str(root / "db"), batch_sizes=(1,)),
                       root / "kit", candidates=CANDIDATES)
    return root, report


def test_stage_compiles_a_reference_and_candidates_per_kernel(mlp_kit):
    root, report = mlp_kit
    kit = read_kit(root / "kit")
    assert kit["device"] == "cpu" and len(kit["tasks"]) == len(report.staged) == 3
    for task in kit["tasks"]:
        # the default schedule first: the reference every other answer is checked against
        assert task["reference"] == "c0"
        assert 2 <= len(task["candidates"]) <= CANDIDATES
        assert (root / "kit" / task["library"]).stat().st_size > 0
        assert all(a["dtype"] == "float32" and a["shape"] for a in task["args"])
    # staging writes no record: only measurements do
    assert not (root / "db" / tuning.RECORD_FILE).exists() or \
        _lines(root / "db" / tuning.RECORD_FILE) == 0


def test_round_trip_gives_records_cw_compile_applies(mlp_kit, zoo_onnx, tmp_path, cli):
    root, _ = mlp_kit
    results = tmp_path / "results.jsonl"
    r = cli("tune-measure", root / "kit", "--out", results, "--min-repeat-ms", "5")
    assert r.code == 0, r.err
    rows = read_results(results)
    kit = read_kit(root / "kit")
    assert len(rows) == sum(len(t["candidates"]) for t in kit["tasks"])
    for row in rows:
        assert "error" not in row, row
        assert len(row["run_secs"]) == 3 and min(row["run_secs"]) > 0
        if row["candidate"] != "c0":
            assert row["max_rel_err"] <= 1e-3  # checked against the reference's answer
    db = tmp_path / "db"
    r = cli("tune-ingest", root / "kit", results, "--db", db)
    assert r.code == 0, r.err
    assert f"added {len(rows)} records" in r.out and "speed-up" in r.out
    assert _lines(db / tuning.RECORD_FILE) == len(rows)
    # the report names where each kernel's fastest schedule came from
    report = ingest_results(root / "kit", [results], tmp_path / "db2")
    for task in kit["tasks"]:
        mine = [r for r in rows if r["task"] == task["id"]]
        fastest = min(mine, key=lambda r: sum(r["run_secs"]) / len(r["run_secs"]))
        saved = json.loads((root / "kit" / "records" / task["id"] /
                            "candidates.json").read_text())
        origin = next(o["origin"] for o in saved if o["name"] == fastest["candidate"])
        assert [k["best_origin"] for k in report.kernels if (k["name"], k["batch_size"])
                == (task["name"], task["batch_size"])] == [origin]
    r = cli("tune-ingest", root / "kit", results, "--db", db)  # again: nothing new
    assert r.code == 0 and "added 0 records" in r.out
    assert _lines(db / tuning.RECORD_FILE) == len(rows)

    onnx_path = zoo_onnx("mlp")
    m = compile_model(onnx_path, tmp_path / "b", CompileConfig(batch_sizes=(1,),
                                                              use_committed_records=False,
                                                              tune_dbs=(str(db),)))
    assert m.kernels[0].kernels_tuned == m.kernels[0].kernels_total == 3
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    got = LocalModel(tmp_path / "b").run([x])[0]
    assert max_relative_error(got, onnx_reference(onnx_path, [x])[0]) < 1e-5


def test_measure_resumes_where_a_budget_stopped_it(mlp_kit, tmp_path):
    root, _ = mlp_kit
    results = tmp_path / "r.jsonl"
    total = sum(len(t["candidates"]) for t in read_kit(root / "kit")["tasks"])
    first = measure_kit(root / "kit", results, MeasureConfig(time_budget_s=1e-9))
    assert first.measured == 0 and first.left == total
    second = measure_kit(root / "kit", results)
    assert second.measured == total and second.left == 0
    third = measure_kit(root / "kit", results)
    assert third.measured == 0 and third.already == total
    keys = [(r["task"], r["candidate"]) for r in read_results(results)]
    assert len(keys) == len(set(keys)) == total


def test_a_hung_candidate_costs_only_itself(mlp_kit, tmp_path):
    """Every candidate 'hangs' (the child cannot even start in a millisecond): each gets its
    own failed result, the child is killed and replaced each time, and nothing is ingested."""
    root, _ = mlp_kit
    results = tmp_path / "r.jsonl"
    report = measure_kit(root / "kit", results, MeasureConfig(candidate_timeout_s=0.001))
    rows = read_results(results)
    total = sum(len(t["candidates"]) for t in read_kit(root / "kit")["tasks"])
    assert report.failed == len(rows) == total
    assert all("timed out" in r["error"] for r in rows)
    assert ingest_results(root / "kit", [results], tmp_path / "db").committed == 0


def test_wrong_answers_never_become_records(mlp_kit, tmp_path):
    root, _ = mlp_kit
    kit_dir = tmp_path / "kit"
    import shutil
    shutil.copytree(root / "kit", kit_dir)
    kit = read_kit(kit_dir)
    bad = kit["tasks"][0]
    bad["tolerance"] = -1.0  # every answer but the reference's own is now "wrong"
    (kit_dir / "kit.json").write_text(json.dumps(kit))
    report = measure_kit(kit_dir, tmp_path / "r.jsonl")
    assert report.wrong == report.failed == len(bad["candidates"]) - 1
    ingested = ingest_results(kit_dir, [tmp_path / "r.jsonl"], tmp_path / "db")
    total = sum(len(t["candidates"]) for t in kit["tasks"])
    assert ingested.committed == total - report.wrong and ingested.wrong == report.wrong


def test_relative_error_sees_a_difference():
    a = [np.array([1.0, 2.0, 4.0], np.float32)]
    assert _max_relative_error(a, a) == 0.0
    assert _max_relative_error([a[0] + np.float32(0.04)], a) == pytest.approx(0.01, rel=1e-3)
    assert _max_relative_error([np.array([np.nan])], [np.array([np.nan])]) == 0.0


def test_a_second_round_learns_from_the_first(mlp_kit, zoo_onnx, tmp_path):
    """Once a kernel has records, its best one is the reference and new candidates avoid what
    was measured; kernels with their --trials records are left out."""
    root, _ = mlp_kit
    db = tmp_path / "db"
    measure_kit(root / "kit", tmp_path / "r1.jsonl")
    ingest_results(root / "kit", [tmp_path / "r1.jsonl"], db)
    again = stage_kit(zoo_onnx("mlp"), TuneConfig(db=str(db), batch_sizes=(1,)),
                      tmp_path / "kit2", candidates=CANDIDATES)
    kit2 = read_kit(tmp_path / "kit2")
    assert kit2["kit_id"] != read_kit(root / "kit")["kit_id"] and len(again.staged) == 3
    for task in kit2["tasks"]:
        origins = json.loads((tmp_path / "kit2" / "records" / task["id"] /
                              "candidates.json").read_text())
        assert origins[0]["origin"] == "reference"
        assert {o["origin"] for o in origins[1:]} <= {"sampled", "evolved"}
    done = stage_kit(zoo_onnx("mlp"), TuneConfig(db=str(db), batch_sizes=(1,), trials=2),
                     tmp_path / "kit3")
    assert done.complete == 3 and not done.staged


def test_kit_errors_are_one_clear_line(mlp_kit, zoo_onnx, tmp_path, cli):
    root, _ = mlp_kit
    r = cli("tune-measure", tmp_path, "--out", tmp_path / "r.jsonl")
    assert r.code == 2 and "not a tuning kit" in r.err and "cw tune-stage" in r.err
    r = cli("tune-measure", root / "kit", "--out", tmp_path / "r.jsonl", "--min-repeat-ms", "-1")
    assert r.code == 2 and "--min-repeat-ms not negative" in r.err
    r = cli("tune-measure", root / "kit", "--out", tmp_path / "r.jsonl", "--device", "cuda")
    assert r.code == 2 and "cpu kernels" in r.err and "--device cpu" in r.err
    (tmp_path / "other.jsonl").write_text('{"kit_id": "someone else", "task": "t0000"}\n')
    r = cli("tune-ingest", root / "kit", tmp_path / "other.jsonl", "--db", tmp_path / "db")
    assert r.code == 2 and "no results for kit" in r.err
    r = cli("tune-ingest", root / "kit", tmp_path / "missing.jsonl", "--db", tmp_path / "db")
    assert r.code == 2 and "no such results file" in r.err
    import shutil
    shutil.copytree(root / "kit", tmp_path / "bare", ignore=shutil.ignore_patterns("records"))
    measure_kit(tmp_path / "bare", tmp_path / "bare.jsonl")  # the device needs no records
    with pytest.raises(UsageError, match="records are missing"):
        ingest_results(tmp_path / "bare", [tmp_path / "bare.jsonl"], tmp_path / "db")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    with pytest.raises(UsageError, match="not a tuning kit"):
        stage_kit(zoo_onnx("mlp"), TuneConfig(db=str(tmp_path / "db2"), batch_sizes=(1,)),
                  tmp_path / "mine")
    with pytest.raises(UsageError, match="is for cpu"):
        stage_kit(zoo_onnx("mlp"), TuneConfig(db=str(tmp_path / "db2"), batch_sizes=(1,),
                                              precision="fp16"), root / "kit")
    r = cli("tune-stage", zoo_onnx("mlp"), "--kit", tmp_path / "k3", "--db", tmp_path / "db3",
            "--sources", "dlight-tile,guesses")
    assert r.code == 2 and "unknown candidate source(s): guesses" in r.err
    assert "--sources dlight-tile" in r.err and not (tmp_path / "k3").exists()


@pytest.mark.slow
def test_cuda_kit_stages_without_a_gpu(zoo_onnx, tmp_path):
    """CUDA candidates for the GPU machine, compiled here: MetaSchedule needs the target's
    hardware limits (a bare sm_90 target fails before its first candidate), and each library
    carries CUDA kernels that a runtime-only TVM can load."""
    from cw.tvm_env import cuda_codegen_problem

    if cuda_codegen_problem():
        pytest.skip(f"cannot compile CUDA here: {cuda_codegen_problem()}")
    report = stage_kit(zoo_onnx("small_cnn"), TuneConfig(db=str(tmp_path / "db"),
                                                         target="cuda", batch_sizes=(1,),
                                                         time_budget_s=600,
                                                         conv_algo="direct"),
                       tmp_path / "kit", candidates=3)
    kit = read_kit(tmp_path / "kit")
    assert kit["device"] == "cuda" and kit["target_key"] == "cuda-sm_90"
    assert report.staged and not report.failed
    conv = next(t for t in kit["tasks"] if "conv2d" in t["name"])
    assert conv["reference"] == "c0" and len(conv["candidates"]) == 3
    lib = (tmp_path / "kit" / conv["library"]).read_bytes()
    assert b"c2_kernel" in lib or b"c2" in lib

    def origins(task):
        return [o["origin"] for o in json.loads(
            (tmp_path / "kit" / "records" / task["id"] / "candidates.json").read_text())]

    # a convolution's first candidates are dlight's GEMM schedule with other tiles; a kernel
    # that schedule does not cover (pooling) gets samples of MetaSchedule's space
    assert origins(conv) == ["default", "dlight-tile", "dlight-tile"]
    pool = next(t for t in kit["tasks"] if "pool" in t["name"])
    assert origins(pool)[0] == "default" and set(origins(pool)[1:]) == {"sampled"}

    # a kit of tiles alone: only the kernels dlight's GEMM rule schedules, nothing sampled
    report = stage_kit(zoo_onnx("small_cnn"), TuneConfig(db=str(tmp_path / "db-tiles"),
                                                         target="cuda", batch_sizes=(1,),
                                                         time_budget_s=600,
                                                         conv_algo="direct"),
                       tmp_path / "tiles", candidates=2, sources=("dlight-tile",))
    assert report.uncovered >= 2 and not report.failed  # pooling: left out, not failed
    tiles = read_kit(tmp_path / "tiles")["tasks"]
    assert tiles and all("conv2d" in t["name"] for t in tiles)
    assert {t["name"] for t in tiles} == {t["name"] for t in kit["tasks"] if "conv2d" in t["name"]}
    for t in tiles:
        saved = json.loads((tmp_path / "tiles" / "records" / t["id"] / "candidates.json")
                           .read_text())
        assert [o["origin"] for o in saved] == ["default", "dlight-tile"]


def test_measure_needs_only_the_tvm_runtime(mlp_kit, tmp_path):
    """As on the GPU machine: a TVM tree without its compiler library (what
    ../shared/device/prepare.sh stages) imports runtime-only, and `cw tune-measure` still
    checks and times every candidate."""
    import os
    import shutil
    import subprocess
    import sys

    import tvm

    root, _ = mlp_kit
    shutil.copytree(Path(tvm.__file__).parent, tmp_path / "rt" / "tvm",
                    ignore=shutil.ignore_patterns("libtvm_compiler.so", "__pycache__", "3rdparty"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path / "rt"), str(Path(__file__).resolve().parents[2])])}
    probe = subprocess.run([sys.executable, "-c", "import cw.tvm_env as e; "
                            "print(e.runtime_only())"], env=env, capture_output=True, text=True)
    assert probe.stdout.strip() == "True", probe.stderr
    results = tmp_path / "r.jsonl"
    run = subprocess.run([sys.executable, "-m", "cw", "tune-measure", str(root / "kit"),
                          "--out", str(results)], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    rows = read_results(results)
    total = sum(len(t["candidates"]) for t in read_kit(root / "kit")["tasks"])
    assert len(rows) == total and not [r for r in rows if "error" in r]


def test_stage_only_the_kernels_named(mlp_kit, zoo_onnx, tmp_path):
    """--kernels: a kit of some kernels only (a Winograd bundle's products, say), the others
    counted as left out, not as staged or as cut by the time budget."""
    root, _ = mlp_kit
    names = sorted(t["name"] for t in read_kit(root / "kit")["tasks"])
    config = TuneConfig(db=str(tmp_path / "db"), batch_sizes=(1,))
    none = stage_kit(zoo_onnx("mlp"), config, tmp_path / "none", candidates=2,
                     kernels=("no such kernel",))
    assert not none.staged and none.not_chosen == 3 and none.not_started == 0
    some = stage_kit(zoo_onnx("mlp"), config, tmp_path / "some", candidates=2,
                     kernels=(names[-1],))
    assert [t["name"] for t in some.staged] == [n for n in names if names[-1] in n]
    assert some.not_chosen == 3 - len(some.staged)
