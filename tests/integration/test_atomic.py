"""A failed or interrupted compile leaves no bundle and no temporary directory behind."""

import pytest

from cw.compile.compiler import CompileConfig, compile_model


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
