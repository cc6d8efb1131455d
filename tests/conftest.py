"""Shared fixtures: zoo models exported once per session, small CPU bundles compiled once, and an
in-process `cw` runner that records what the CLI prints."""

from __future__ import annotations

import io
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

SHARED = Path(__file__).resolve().parents[2] / "shared"


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def cli():
    """Run `cw ARGS...` in this process; returns exit code and captured stdout/stderr text."""
    from cw.cli.app import Consoles, run_cli

    def run(*args: str) -> CliResult:
        out, err = io.StringIO(), io.StringIO()
        saved = Consoles.out, Consoles.err
        Consoles.out = Console(file=out, width=200, highlight=False, color_system=None)
        Consoles.err = Console(file=err, width=400, highlight=False, color_system=None)
        try:
            code = run_cli([str(a) for a in args])
        finally:
            Consoles.out, Consoles.err = saved
        return CliResult(code, out.getvalue(), err.getvalue())

    return run


@pytest.fixture(scope="session")
def summary_keys_documented() -> set[str]:
    """The summary.json keys docs/telemetry.md describes (its "summary.json" table)."""
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "telemetry.md").read_text()
    section = text.split("## summary.json", 1)[1].split("\n## ", 1)[0]
    keys = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            keys |= set(re.findall(r"`([a-z_0-9]+)`", line.split("|")[1]))
    return keys


@pytest.fixture(scope="session")
def zoo_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("zoo")


@pytest.fixture(scope="session")
def zoo_onnx(zoo_dir):
    """`zoo_onnx(name)`: a zoo model's ONNX file, exported once; `edge:NAME` names a file of
    ../shared/models-edge."""
    import model_zoo

    def export(name: str) -> Path:
        if name.startswith(EDGE_PREFIX):
            return SHARED / "models-edge" / f"{name.removeprefix(EDGE_PREFIX)}.onnx"
        path = zoo_dir / f"{name}.onnx"
        if not path.exists():
            model_zoo.export(name, path)
        return path

    return export


EDGE_PREFIX = "edge:"


def bundle_dirname(name: str, batch_sizes, precision: str = "fp32") -> str:
    """As bench/gpu_stage.py --tests names the bundles it stages. `precision` also takes a
    convolution algorithm (winograd2, cutlass, direct: fp32 with `--conv-algo ...`; plain fp32
    is the default, CUTLASS's convolutions on sm_80+)."""
    return f"{name.replace(':', '-')}-{'_'.join(map(str, batch_sizes))}" + (
        "" if precision == "fp32" else f"-{precision}")


def edge_inputs(sample_shape, batches=(1, 3)) -> list:
    """The inputs (one list of arrays per batch) of a GPU test on a ../shared/models-edge file,
    and of the reference bench/gpu_stage.py --tests stages for it."""
    return [[random_input((b, *sample_shape), seed=b)] for b in batches]


def staged_reference(name: str, batch_sizes, onnx_path: Path, inputs) -> list:
    """onnxruntime's outputs for `inputs` (each a list of arrays): from the file
    bench/gpu_stage.py --tests wrote beside the staged bundle (the GPU machine has no
    ../shared), else computed from `onnx_path`; skips the test when neither is there."""
    from cw.verify import onnx_reference

    staged = os.environ.get("CW_TEST_CUDA_BUNDLES")
    path = Path(staged or ".") / f"{bundle_dirname(name, batch_sizes)}.reference.npz"
    if staged and path.is_file():
        with np.load(path) as saved:
            return [saved[str(i)] for i in range(len(inputs))]
    if not onnx_path.is_file():
        pytest.skip(f"neither {path} nor {onnx_path} is here")
    return [onnx_reference(onnx_path, x)[0] for x in inputs]


def compile_variant(precision: str) -> dict:
    """CompileConfig fields for a bundle_dirname `precision`."""
    if precision.startswith("winograd") or precision in ("cutlass", "direct"):
        return {"precision": "fp32", "conv_algo": precision}
    return {"precision": precision}


@pytest.fixture(scope="session")
def cpu_bundle(zoo_onnx, tmp_path_factory):
    """`cpu_bundle(name, batch_sizes)` compiles a zoo model for the CPU once per session."""
    from cw.compile.compiler import CompileConfig, compile_model

    built: dict = {}
    root = tmp_path_factory.mktemp("bundles")

    def get(name: str, batch_sizes=(1, 4), precision="fp32") -> Path:
        key = (name, tuple(batch_sizes), precision)
        if key not in built:
            out = root / bundle_dirname(name, batch_sizes, precision)
            compile_model(zoo_onnx(name), out, CompileConfig(batch_sizes=tuple(batch_sizes),
                                                             **compile_variant(precision)))
            built[key] = out
        return built[key]

    return get


def has_cuda() -> bool:
    from cw.tvm_env import load_tvm

    try:
        return bool(load_tvm().cuda(0).exist)
    except Exception:
        return False


def pytest_sessionstart(session):
    # tvm imported by a test before cw.tvm_env.load_tvm() prepares its CUDA backend would leave
    # the CUDA compile tests of the whole session skipped, depending on which test ran first
    from cw.tvm_env import load_tvm

    load_tvm()


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items and not has_cuda():
        skip = pytest.mark.skip(reason="no CUDA GPU here (run on the GPU machine)")
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cuda_bundle(zoo_onnx, tmp_path_factory):
    """`cuda_bundle(name, batch_sizes)`: a CUDA bundle of a zoo model, compiled here when this
    TVM can compile, else copied from $CW_TEST_CUDA_BUNDLES (a GPU machine with a runtime-only
    TVM; `python bench/gpu_stage.py` builds that directory on a build machine)."""
    from cw.compile.compiler import CompileConfig, compile_model
    from cw.tvm_env import cuda_codegen_problem

    built: dict = {}
    root = tmp_path_factory.mktemp("cuda-bundles")

    def get(name: str, batch_sizes=(1, 4), precision="fp32") -> Path:
        key = (name, tuple(batch_sizes), precision)
        if key in built:
            return built[key]
        dirname = bundle_dirname(name, batch_sizes, precision)
        out = root / dirname
        staged = os.environ.get("CW_TEST_CUDA_BUNDLES")
        if staged and (Path(staged) / dirname).is_dir():
            shutil.copytree(Path(staged) / dirname, out)  # tests write profile.json into it
        elif cuda_codegen_problem() is None:
            compile_model(zoo_onnx(name), out, CompileConfig(target="cuda",
                                                             batch_sizes=tuple(batch_sizes),
                                                             **compile_variant(precision)))
        else:
            pytest.fail(f"no CUDA bundle {dirname}: this TVM cannot compile CUDA "
                        f"({cuda_codegen_problem()}) and $CW_TEST_CUDA_BUNDLES does not hold it")
        built[key] = out
        return out

    return get


def random_input(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
