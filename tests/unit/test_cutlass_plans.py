"""Measured CUTLASS plans (cw/compile/cutlass_plans.py): what bench/cutlass_convs.py timed on a
GPU becomes the tile and split `cw compile` uses, with the guess kept where it was as good."""

import json

import pytest

from cw.compile import cutlass_conv, cutlass_plans, tuning
from cw.errors import UsageError


def _measured(times_3x, times_tf32=None, plan=(2, 4)):
    conv = {"model": "resnet18", "batch": 1, "x": [1, 28, 28, 128], "w": [128, 3, 3, 128],
            "y": [1, 28, 28, 128], "pad": [1, 1], "stride": [1, 1], "dilation": [1, 1],
            "plan": list(plan), "times": {"3xtf32": times_3x}}
    if times_tf32 is not None:
        conv["times"]["tf32"] = times_tf32
    return {"arch": "sm_90", "device": "NVIDIA H100 80GB HBM3", "date": "2026-11-26",
            "convs": [conv]}


KEY = cutlass_conv.conv_key([1, 28, 28, 128], [128, 3, 3, 128], [1, 1], [1, 1], [1, 1], False)
KEY_TF32 = KEY.replace("3xtf32", "tf32")


def test_the_fastest_tile_wins_only_by_a_margin():
    # 64x64 split 2 beats the guess (64x64 split 4) by 20%: taken; a refused split (None) and
    # a slower tile are ignored
    doc = cutlass_plans.ingest(_measured({"2/4": 0.050, "2/2": 0.040, "0/1": None, "1/1": 0.09}))
    (entry,) = doc["plans"]
    assert (entry["key"], entry["tile"], entry["split"]) == (KEY, 2, 2)
    assert entry["guess"] == [2, 4] and entry["guess_ms"] == 0.050
    # within the margin: the guess stays (noise does not move plans)
    doc = cutlass_plans.ingest(_measured({"2/4": 0.050, "2/2": 0.049}))
    assert (doc["plans"][0]["tile"], doc["plans"][0]["split"]) == (2, 4)
    # each math on its own
    doc = cutlass_plans.ingest(_measured({"2/4": 0.05}, {"2/4": 0.03, "1/1": 0.02}))
    by_key = {e["key"]: (e["tile"], e["split"]) for e in doc["plans"]}
    assert by_key == {KEY: (2, 4), KEY_TF32: (1, 1)}


def test_ingest_merges_and_load_prefers_the_users_plans(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "COMMITTED_DIR", tmp_path / "committed")
    committed = tmp_path / "committed" / "cuda-sm_90" / cutlass_plans.FILE
    first = cutlass_plans.ingest(_measured({"2/4": 0.05, "0/1": 0.01}, {"2/4": 0.05}))
    cutlass_plans.write(committed, first)
    # a later measurement of one math replaces that entry and keeps the other
    merged = cutlass_plans.ingest(_measured({"2/4": 0.05, "1/2": 0.01}), cutlass_plans.read(committed))
    assert {e["key"]: (e["tile"], e["split"]) for e in merged["plans"]} == \
        {KEY: (1, 2), KEY_TF32: (2, 4)}
    plans = cutlass_plans.load("cuda-sm_90")
    assert plans.lookup(KEY) == (0, 1) and plans.files == (committed.resolve(),)
    assert cutlass_plans.load("cuda-sm_90", use_committed=False).lookup(KEY) is None
    assert cutlass_plans.load("cuda-sm_80").files == ()  # another target: none
    user = tmp_path / "mine"
    cutlass_plans.write(user / cutlass_plans.FILE, merged)
    plans = cutlass_plans.load("cuda-sm_90", [user])
    assert plans.lookup(KEY) == (1, 2) and plans.lookup(KEY_TF32) == (2, 4)
    assert len(plans.files) == 2
    with pytest.raises(UsageError, match="measured for sm_90, not for this target"):
        cutlass_plans.load("cuda-sm_80", [user])


@pytest.mark.parametrize("text,match", [
    ("{", "not a readable CUTLASS plan file"),
    (json.dumps({"schema": 2, "plans": []}), "not a CUTLASS plan file of schema 1"),
    (json.dumps({"schema": 1, "plans": [{"key": "k", "tile": 3, "split": 1}]}),
     "plan 1 is malformed"),
    (json.dumps({"schema": 1, "plans": [{"key": "k", "tile": 0, "split": 32}]}),
     "plan 1 is malformed"),
])
def test_a_bad_plan_file_is_one_clear_error(tmp_path, text, match):
    path = tmp_path / cutlass_plans.FILE
    path.write_text(text)
    with pytest.raises(UsageError, match=match) as e:
        cutlass_plans.load("cuda-sm_90", [tmp_path])
    assert str(path) in str(e.value) and e.value.hint


def test_a_fast_tile_whose_output_was_off_is_never_taken():
    # 1/1 is fastest in both maths, but off by 3e-3 (past 3xTF32's 1e-4, within TF32's 1e-2);
    # 0/2 is the next fastest and accurate. A measurement without errors is taken as it was.
    measured = _measured({"2/4": 0.050, "1/1": 0.020, "0/2": 0.030},
                         {"2/4": 0.050, "1/1": 0.020, "0/2": 0.030})
    measured["convs"][0]["errors"] = {"3xtf32": {"2/4": 1e-6, "1/1": 3e-3, "0/2": 2e-6},
                                      "tf32": {"2/4": 4e-4, "1/1": 3e-3, "0/2": 4e-4}}
    by_key = {e["key"]: (e["tile"], e["split"]) for e in cutlass_plans.ingest(measured)["plans"]}
    assert by_key == {KEY: (0, 2), KEY_TF32: (1, 1)}
    del measured["convs"][0]["errors"]
    by_key = {e["key"]: (e["tile"], e["split"]) for e in cutlass_plans.ingest(measured)["plans"]}
    assert by_key[KEY] == (1, 1)
