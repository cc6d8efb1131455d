"""Shared fixtures: zoo models exported once per session, small CPU bundles compiled once, and an
in-process `cw` runner that records what the CLI prints."""

from __future__ import annotations

import io
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
def zoo_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("zoo")


@pytest.fixture(scope="session")
def zoo_onnx(zoo_dir):
    import model_zoo

    def export(name: str) -> Path:
        path = zoo_dir / f"{name}.onnx"
        if not path.exists():
            model_zoo.export(name, path)
        return path

    return export


@pytest.fixture(scope="session")
def cpu_bundle(zoo_onnx, tmp_path_factory):
    """`cpu_bundle(name, batch_sizes)` compiles a zoo model for the CPU once per session."""
    from cw.compile.compiler import CompileConfig, compile_model

    built: dict = {}
    root = tmp_path_factory.mktemp("bundles")

    def get(name: str, batch_sizes=(1, 4)) -> Path:
        key = (name, tuple(batch_sizes))
        if key not in built:
            out = root / f"{name}-{'_'.join(map(str, batch_sizes))}"
            compile_model(zoo_onnx(name), out, CompileConfig(batch_sizes=tuple(batch_sizes)))
            built[key] = out
        return built[key]

    return get


def random_input(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
