"""Which of a running controller's models a replay drives (`cw replay --controller --models`)."""

import dataclasses
from pathlib import Path

import pytest

from cw.errors import UsageError
from cw.replay.live import pick_models
from cw.replay.runner import ReplayConfig, with_preset
from cw.serve.protocol import ModelInfo


def info(model_id: str) -> ModelInfo:
    return ModelInfo(model_id, model_id.partition("#")[0], 0, 0, [1], [], [], 0, {}, "default")


SERVED = [info(i) for i in ("resnet50#10", "mlp", "resnet50#2", "resnet50", "resnet50#1",
                            "small_cnn#1", "small_cnn")]


def ids(spec):
    return [m.model_id for m in pick_models(SERVED, spec)]


def test_all_in_order_of_bundle_then_copy():
    assert ids(None) == ["mlp", "resnet50", "resnet50#1", "resnet50#2", "resnet50#10",
                         "small_cnn", "small_cnn#1"]


def test_a_number_takes_the_first():
    assert ids("3") == ["mlp", "resnet50", "resnet50#1"]
    assert len(ids("7")) == 7
    for bad in ("0", "8"):
        with pytest.raises(UsageError, match=f"--models {bad}: the controller serves 7 models"):
            ids(bad)


def test_ids_bundles_and_patterns():
    assert ids("small_cnn#1") == ["small_cnn#1"]
    assert ids("resnet50") == ["resnet50", "resnet50#1", "resnet50#2", "resnet50#10"]
    assert ids("resnet50#1*, mlp") == ["mlp", "resnet50#1", "resnet50#10"]
    assert ids("*#2,small_cnn") == ["resnet50#2", "small_cnn", "small_cnn#1"]


def test_a_name_that_matches_nothing_says_what_is_served():
    with pytest.raises(UsageError, match="no model of the controller is or matches 'resnet5'"
                       ) as e:
        ids("mlp,resnet5")
    assert "mlp, resnet50" in e.value.hint
    with pytest.raises(UsageError, match="empty"):
        ids(" , ")


def test_what_a_running_controller_decides_is_refused_not_ignored():
    for field, flag in (("copies", "--copies"), ("workers", "--workers"),
                        ("runtime", "--runtime")):
        with pytest.raises(UsageError, match=f"{flag} does not apply with --controller"):
            ReplayConfig(controller="tcp://127.0.0.1:7001", simulate=False,
                         **{field: 2 if field != "runtime" else "cpu"})
    with pytest.raises(UsageError, match="--runtime cpu does not apply with --simulate"):
        ReplayConfig(simulate=True, runtime="cpu")
    with pytest.raises(UsageError, match="--noise applies to --simulate only"):
        ReplayConfig(simulate=False, noise=0.1)
    with pytest.raises(UsageError, match="--sim-engine applies to --simulate only"):
        ReplayConfig(simulate=False, sim_engine="python")
    with pytest.raises(UsageError, match="--zoo-timings applies to zoo models"):
        ReplayConfig(simulate=True, zoo_timings="paper", models=str(Path(__file__).parent))
    # unset, they take their defaults; against a controller the models are all of its own
    config = ReplayConfig(controller="tcp://127.0.0.1:7001", simulate=False)
    assert (config.models, config.copies, config.workers, config.runtime) == \
        (None, None, None, None)
    assert dataclasses.replace(config, seed=3).seed == 3  # a copy is not refused
    assert dataclasses.replace(ReplayConfig(), seed=3).copies == 10
    assert ReplayConfig().models.startswith("resnet18,")
    # a preset's models and workers are what it would start: a controller has its own
    fig5 = with_preset("fig5", controller="tcp://127.0.0.1:7001", simulate=False)
    assert fig5.models is None and fig5.workload == "closed" and fig5.concurrency == 16
