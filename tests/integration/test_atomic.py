"""A failed or interrupted compile leaves no bundle and no temporary directory behind."""

import pytest

from cw.compile.compiler import CompileConfig, compile_model
from cw.errors import HostError
from tests.unit.test_host_errors import fill_a_disk


class Interrupt(Exception):
    pass


@pytest.mark.parametrize("when", ["batch_done", "stage"])
def test_interrupted_compile_leaves_nothing(zoo_onnx, tmp_path, when):
    def progress(event, info):
        if event == when and (event != "stage" or info["text"] == "writing bundle"):
            raise Interrupt

    with pytest.raises(Interrupt):
        compile_model(zoo_onnx("mlp"), tmp_path / "out", CompileConfig(batch_sizes=(1, 2)),
                      progress=progress)
    assert list(tmp_path.iterdir()) == []


def test_failed_force_recompile_keeps_the_old_bundle(zoo_onnx, tmp_path):
    out = tmp_path / "out"
    compile_model(zoo_onnx("mlp"), out, CompileConfig(batch_sizes=(1,)))
    before = (out / "manifest.json").read_bytes()

    def fail(event, info):
        if event == "batch_done":
            raise Interrupt

    with pytest.raises(Interrupt):
        compile_model(zoo_onnx("mlp"), out, CompileConfig(batch_sizes=(1, 2), force=True),
                      progress=fail)
    assert (out / "manifest.json").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_full_disk_while_writing_says_so_and_leaves_nothing(zoo_onnx, tmp_path):
    def full(event, info):
        if event == "stage" and info["text"] == "writing bundle":
            fill_a_disk()

    with pytest.raises(HostError) as e:
        compile_model(zoo_onnx("mlp"), tmp_path / "out", CompileConfig(batch_sizes=(1,)),
                      progress=full)
    assert e.value.message == f"no space left on device writing {tmp_path / 'out'}"
    assert list(tmp_path.iterdir()) == []


def test_a_replay_on_a_full_disk_says_so_and_leaves_nothing(tmp_path):
    from cw.replay.runner import ReplayConfig, replay

    def full(event, info):
        if event == "start":  # the simulation's, inside the output being written
            fill_a_disk()

    with pytest.raises(HostError) as e:
        replay(ReplayConfig(duration_s=2, target_rate=50, out=tmp_path / "run"), full)
    assert e.value.message == f"no space left on device writing {tmp_path / 'run'}"
    assert list(tmp_path.iterdir()) == []
