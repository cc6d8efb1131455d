"""`cw compile --conv-algo winograd2|winograd4` (cw/compile/winograd.py): the rewritten graph
computes what onnxruntime computes (on the CPU: the rewrite is target-independent math), the
bundle stores the transformed filters, filters too large for a page stay direct, and on an
sm_90 target the transforms compile and stay fused with the convolution's epilogue."""

import numpy as np
import pytest

from cw.bundle import open_bundle
from cw.compile.compiler import CompileConfig, compile_model
from cw.engine import LocalModel
from cw.errors import UsageError
from cw.tvm_env import cuda_codegen_problem
from cw.verify import max_relative_error, onnx_reference


@pytest.mark.parametrize("algo,alpha", [("winograd2", 4), ("winograd4", 6)])
def test_winograd_bundles_match_onnxruntime(zoo_onnx, tmp_path, algo, alpha):
    src = zoo_onnx("late_cnn")  # two 3x3 convs at 7x7, one with a residual add
    m = compile_model(src, tmp_path / algo, CompileConfig(batch_sizes=(1, 4), conv_algo=algo))
    assert any(f"{algo}: 2 3x3 convolutions" in n for n in m.notes), m.notes
    assert not any("fusion failed" in n for n in m.notes), m.notes
    shapes = [tuple(t.shape) for t in m.weights.tensors]
    assert (alpha * alpha, 256, 64) in shapes and (alpha * alpha, 256, 256) in shapes
    x = np.random.default_rng(3).standard_normal((3, 64, 7, 7)).astype(np.float32)
    y = LocalModel(tmp_path / algo).run([x])[0]  # batch 3, padded to 4
    assert max_relative_error(y, onnx_reference(src, [x])[0]) < 1e-5


def test_filters_larger_than_a_page_stay_direct(zoo_onnx, tmp_path):
    src = zoo_onnx("late_cnn")
    # 36 x 256 x 256 x 4 bytes = 9 MiB: over a 4 MiB page; 36 x 256 x 64 x 4 = 2.25 MiB fits
    m = compile_model(src, tmp_path / "w4", CompileConfig(batch_sizes=(2,), conv_algo="winograd4",
                                                          page_size=4 << 20))
    assert any("1 3x3 convolutions as Winograd" in n and "1 left direct" in n for n in m.notes)
    x = np.random.default_rng(4).standard_normal((2, 64, 7, 7)).astype(np.float32)
    y = LocalModel(tmp_path / "w4").run([x])[0]
    assert max_relative_error(y, onnx_reference(src, [x])[0]) < 1e-5


def test_bad_combinations_are_refused_with_a_hint(cli, zoo_onnx, tmp_path):
    with pytest.raises(UsageError, match="fp32 only"):
        CompileConfig(conv_algo="winograd2", precision="fp16")
    r = cli("compile", zoo_onnx("small_cnn"), "-o", tmp_path / "x", "--conv-algo", "fft")
    assert r.code == 2 and "--conv-algo auto" in r.err and not (tmp_path / "x").exists()


def test_cuda_winograd_compiles_fused(zoo_onnx, tmp_path):
    problem = cuda_codegen_problem()
    if problem:
        pytest.skip(f"no CUDA compile here: {problem}")
    m = compile_model(zoo_onnx("late_cnn"), tmp_path / "cuda",
                      CompileConfig(target="cuda", batch_sizes=(1, 16), conv_algo="winograd2"))
    assert not any("fusion failed" in n for n in m.notes), m.notes
    direct = compile_model(zoo_onnx("late_cnn"), tmp_path / "direct",
                           CompileConfig(target="cuda", batch_sizes=(1, 16), conv_split="off",
                                         conv_algo="direct"))
    # per conv: input transform, batched GEMM, output transform fused with bias/add/ReLU, in
    # place of one fused conv kernel; the filter transform ran at compile time
    for k, d in zip(m.kernels, direct.kernels):
        assert k.kernels_total == d.kernels_total + 2 * 2, (k.kernels_total, d.kernels_total)
    assert open_bundle(tmp_path / "cuda").manifest.weights.total_bytes > \
        open_bundle(tmp_path / "direct").manifest.weights.total_bytes


def test_winograd_products_tune_and_their_records_apply(zoo_onnx, tmp_path):
    """The Winograd kernels worth tuning, the batched products, stage alone (`--kernels
    matmul`, as the GPU runbook's kits 7/8 do), and once measured and ingested `cw compile`
    applies their records to a Winograd bundle, which still computes what onnxruntime does."""
    from cw.compile.tuner import TuneConfig
    from cw.compile.tunekit import ingest_results, stage_kit
    from cw.profile.candidates import measure_kit

    src = zoo_onnx("small_cnn")
    db = tmp_path / "db"
    report = stage_kit(src, TuneConfig(db=str(db), batch_sizes=(1,), conv_algo="winograd2"),
                       tmp_path / "kit", candidates=3, kernels=("matmul",))
    assert report.staged and all("matmul" in t["name"] for t in report.staged)
    assert report.not_chosen > 0  # transforms, pooling, ...: left to the direct kits
    measure_kit(tmp_path / "kit", tmp_path / "results.jsonl")
    ingest_results(tmp_path / "kit", [tmp_path / "results.jsonl"], db)
    m = compile_model(src, tmp_path / "b", CompileConfig(batch_sizes=(1,), conv_algo="winograd2",
                                                         tune_dbs=(str(db),)))
    (kernel,) = m.kernels
    assert kernel.kernels_tuned == len(report.staged)
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    y = LocalModel(tmp_path / "b").run([x])[0]
    assert max_relative_error(y, onnx_reference(src, [x])[0]) < 1e-5
