"""CUDA kernels compile to device binaries on a machine without a GPU (the stub-driver path)."""

import pytest

from cw.bundle import open_bundle
from cw.compile.libcheck import device_binary_count
from cw.tvm_env import cuda_codegen_problem


def test_cuda_bundle_holds_device_binaries_not_source(cli, zoo_onnx, tmp_path):
    problem = cuda_codegen_problem()
    if problem:
        pytest.skip(f"no CUDA compile here: {problem}")
    out = tmp_path / "mlp-cuda"
    r = cli("compile", zoo_onnx("mlp"), "-o", out, "--target", "cuda", "--batch-sizes", "1,2")
    assert r.code == 0, r.err
    m = open_bundle(out).manifest
    assert m.target.kind == "cuda" and m.target.arch == "sm_90"
    for k in m.kernels:
        binaries, has_source = device_binary_count(out / k.kernel_file)
        assert binaries >= 1 and not has_source


def test_an_arch_nvcc_cannot_compile_for_is_refused_before_the_compile(cli, zoo_onnx, tmp_path):
    from cw.tvm_env import nvcc_archs

    problem = cuda_codegen_problem()
    if problem:
        pytest.skip(f"no CUDA compile here: {problem}")
    known = nvcc_archs()
    assert known and "sm_90" in known
    out = tmp_path / "mlp-sm12"
    r = cli("compile", zoo_onnx("mlp"), "-o", out, "--target", "cuda", "--arch", "sm_12")
    assert r.code == 2 and "nvcc cannot compile for it" in r.err and "sm_90" in r.err, r.err
    assert not out.exists()
