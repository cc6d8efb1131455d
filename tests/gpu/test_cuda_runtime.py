"""The TVM-CUDA runtime on a real GPU: profile fields, page placement, padding, accuracy against
onnxruntime, no device allocations after warm-up, refusals. Skipped without a CUDA GPU; on the
GPU machine (runtime-only TVM) the bundles come from $CW_TEST_CUDA_BUNDLES."""

import json

import numpy as np
import pytest

from cw.bundle import open_bundle
from cw.serve.runtime.host import HostModel, HostWeights
from cw.verify import max_relative_error, onnx_reference
from tests.conftest import edge_inputs, random_input, staged_reference
from tests.gpu import infer_once

pytestmark = pytest.mark.gpu


def _ordered(s):
    assert 0 < s["p50_ns"] <= s["p99_ns"] <= s["p9999_ns"] <= s["max_ns"]


def test_profile_on_gpu_writes_every_field(cli, cuda_bundle):
    bundle = cuda_bundle("small_cnn")
    r = cli("profile", bundle, "--device", "cuda:0", "--iterations", "300", "--warmup", "20",
            "--load-iterations", "20")
    assert r.code == 0, r.err
    p = json.loads((bundle / "profile.json").read_text())
    assert p["runtime"] == "tvm-cuda" and p["device"]["kind"] == "cuda"
    dev = p["device"]
    assert dev["name"] and dev["driver_version"] and dev["cuda_version"]
    load = p["load"]
    _ordered(load["stats"])
    assert load["reference_gbps"] > 0 and 0 < load["efficiency"]
    m = open_bundle(bundle).manifest
    assert p["device_memory_bytes"] >= len(m.weights.pages) * m.weights.page_size
    for b in p["batches"]:
        for phase in ("input", "exec", "exec_host", "output"):
            _ordered(b[phase])
            assert b[phase]["n"] == 300
        # the host sees an EXEC only after the device finished it
        assert b["exec_host"]["p50_ns"] >= b["exec"]["p50_ns"]
    assert "profile.json" in open_bundle(bundle).manifest.files


def test_profile_on_gpu_times_execs_on_the_models_own_weights(cuda_bundle, monkeypatch):
    """Until 2026-11-29 the profile's reference copy wrote a pinned buffer's bytes over the
    loaded weights, and every measured EXEC ran on them."""
    from tests.integration.test_profile import check_profiled_execs_compute_the_model

    check_profiled_execs_compute_the_model(cuda_bundle("small_cnn"), "cuda:0", monkeypatch,
                                           rtol=1e-4, atol=1e-5)


def test_concurrency_on_gpu_is_reported_not_stored(cli, cuda_bundle):
    bundle = cuda_bundle("small_cnn")
    r = cli("profile", bundle, "--device", "cuda:0", "--iterations", "100", "--warmup", "5",
            "--load-iterations", "2", "--batch-sizes", "1", "--concurrency", "2", "--json")
    assert r.code == 0, r.err
    (conc,) = json.loads(r.out)["concurrency"]
    assert conc["concurrency"] == 2 and conc["throughput_per_s"] > 0
    assert "concurrency" not in json.loads((bundle / "profile.json").read_text())


def test_exec_back_to_back_on_gpu_keeps_it_busy_and_is_reported_not_stored(cli, cuda_bundle):
    """--back-to-back on the GPU: each EXEC queued while the one before runs; the same kernels
    take about the device time they take isolated, and the GPU is busier in between (isolated,
    it waits for the host's sync, output copy and next launch)."""
    bundle = cuda_bundle("small_cnn")
    r = cli("profile", bundle, "--device", "cuda:0", "--iterations", "300", "--warmup", "10",
            "--load-iterations", "2", "--batch-sizes", "4", "--back-to-back", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    (isolated,) = out["profile"]["batches"]
    (b2b,) = out["back_to_back"]
    _ordered(b2b["exec"])
    assert b2b["exec"]["n"] == 300 and len(b2b["exec_slowest"]) == 8
    assert 0.5 < b2b["exec"]["p50_ns"] / isolated["exec"]["p50_ns"] < 2, (b2b, isolated)
    span_isolated = isolated["exec_host"]["p50_ns"] + isolated["output"]["p50_ns"]
    assert b2b["busy"] > isolated["exec"]["p50_ns"] / span_isolated, (b2b, isolated)
    assert "back_to_back" not in (bundle / "profile.json").read_text()


@pytest.mark.parametrize("gate_exec", [True, False])
def test_pages_anywhere_padding_and_no_allocation_after_warm_up(cuda_bundle, zoo_onnx, gate_exec):
    from cw.serve.runtime import cuda_api
    from cw.serve.runtime.tvm_cuda import TvmCudaRuntime

    bundle = open_bundle(cuda_bundle("small_cnn"))
    weights = HostWeights(bundle)
    a, b = HostModel("a", bundle, weights), HostModel("b", bundle, weights)
    pages = weights.num_pages
    rt = TvmCudaRuntime(0, weights.page_size, 3 * pages, gate_exec=gate_exec)
    for size in (1, 4):
        rt.prepare(a, size)
    x = random_input((3, 3, 32, 32), seed=7)
    ref = onnx_reference(zoo_onnx("small_cnn"), [x])[0]

    def infer(model):
        return infer_once(rt, model, 4, x)  # 3 samples padded to the compiled 4

    rt.load(a, rt.cache.allocate(pages))
    rt.load(b, rt.cache.allocate(pages))
    assert rt.slots_of(a.model_id) != rt.slots_of(b.model_id)
    for model in (a, b):
        assert max_relative_error(infer(model), ref) < 1e-4
    rt.cache.release(rt.unload(a))
    rt.cache.allocate(pages)  # occupy a's old pages so that a comes back elsewhere
    rt.load(a, rt.cache.allocate(pages))
    y = infer(a)
    assert max_relative_error(y, ref) < 1e-4 and y.shape == (3, 10)

    cuda_api.use_device(0)
    free = cuda_api.free_bytes()
    for _ in range(50):
        infer(a)
        infer(b)
    assert cuda_api.free_bytes() == free  # nothing allocated on the inference path
    rt.close()
    assert cuda_api.free_bytes() > free  # the page cache and IO buffers went back


def test_pipelined_launches_run_in_order_from_their_release(cuda_bundle, zoo_onnx):
    """What the worker does on a GPU: launch EXEC i+1 while EXEC i runs, each released at its
    own time; several are in flight at once and each ends with its own right output."""
    from cw.serve.runtime.base import now_ns
    from cw.serve.runtime.tvm_cuda import IO_SLOTS, TvmCudaRuntime

    bundle = open_bundle(cuda_bundle("small_cnn"))
    weights = HostWeights(bundle)
    model = HostModel("a", bundle, weights)
    rt = TvmCudaRuntime(0, weights.page_size, weights.num_pages)
    rt.prepare(model, 1)
    rt.load(model, rt.cache.allocate(weights.num_pages))
    xs = [random_input((1, 3, 32, 32), seed=i) for i in range(IO_SLOTS)]
    slots = [rt.acquire_slot(model, 1, deadline_ns=now_ns()) for _ in xs]
    assert rt.acquire_slot(model, 1, deadline_ns=now_ns() + 1_000_000) is None  # pool bounded
    for slot, x in zip(slots, xs):
        rt.copy_input(model, slot, [x])
    first_release = now_ns() + 20_000_000
    releases = [first_release + i * 2_000_000 for i in range(len(xs))]
    handles = [rt.launch(model, slot, t) for slot, t in zip(slots, releases)]
    timings = [rt.finish(h) for h in handles]
    for t, release in zip(timings, releases):
        assert t.start_ns >= release and t.device_ns > 0
    assert all(a.end_ns <= b.start_ns for a, b in zip(timings, timings[1:]))
    ref = onnx_reference(zoo_onnx("small_cnn"), [np.concatenate(xs)])[0]
    for i, slot in enumerate(slots):
        (y,), _ = rt.copy_output(model, slot)
        assert max_relative_error(y, ref[i:i + 1]) < 1e-4
        rt.release_slot(slot)
    rt.close()


def test_run_on_gpu_matches_onnxruntime(cuda_bundle, zoo_onnx):
    from cw.engine import run_bundle

    x = random_input((2, 3, 32, 32), seed=3)
    result = run_bundle(cuda_bundle("small_cnn"), [x], device="cuda:0",
                        verify_onnx=zoo_onnx("small_cnn"))
    assert result.relative_error < 1e-4 and result.outputs[0].shape == (2, 10)


def test_quantized_model_on_gpu_gives_onnxruntimes_integers(cuda_bundle, zoo_onnx):
    """mobilenetv2-12-int8 (QLinear operators as float32 arithmetic on their integers,
    cw/compile/quantized.py): CUTLASS's 3xTF32 products hold integers below 2^11 exactly and
    sum in fp32, and CUDA's nearbyintf rounds half to even, so the GPU gives onnxruntime's exact
    integers as the CPU does."""
    from cw.engine import LocalModel

    name, sizes = "edge:mobilenetv2-12-int8", (1, 4)
    inputs = edge_inputs((3, 224, 224))
    expected = staged_reference(name, sizes, zoo_onnx(name), inputs)
    model = LocalModel(cuda_bundle(name, sizes), "cuda:0")
    for x, ref in zip(inputs, expected):
        got = model.run(x)[0]
        assert np.array_equal(got, ref), (x[0].shape, float(np.abs(got - ref).max()))


def test_quantized_activations_on_gpu_give_onnxruntimes_integers(cuda_bundle, zoo_onnx):
    """The zoo's int8_activations (cw/compile/quantized_activations.py: onnxruntime's tables
    as their formula, the sigmoid through the GPU's expf, with the entries it could round
    otherwise set to the table's; QLinearMul's product scaled in float64, the pool's windows
    summed in order) on the GPU: the concat of the requantized sigmoid, the pool and x is
    onnxruntime's exactly. The softmaxes
    sum each row on the GPU in an order of its own and take exp and log in the GPU's float64:
    one step (1/256) at most, for few values."""
    from cw.engine import LocalModel

    model = LocalModel(cuda_bundle("int8_activations", (1, 4)), "cuda:0")
    for batch in (1, 3):
        x = (np.random.default_rng(batch).standard_normal((batch, 8, 6, 6)) * 3).astype(
            np.float32)
        soft_channels, soft_maps, concat = model.run([x])
        ref = onnx_reference(zoo_onnx("int8_activations"), [x])
        assert np.array_equal(concat, ref[2]), int((concat != ref[2]).sum())
        for got, expected in ((soft_channels, ref[0]), (soft_maps, ref[1])):
            off = np.abs(got - expected)
            assert off.max() <= 1 / 256 + 1e-7 and (off > 0).mean() < 0.01, (
                float(off.max()), float((off > 0).mean()))


@pytest.mark.parametrize("batch", [1, 3])
def test_split_k_convs_on_gpu_match_onnxruntime(cuda_bundle, zoo_onnx, batch):
    """Both convs of late_cnn are split across thread blocks (cw/compile/cuda_conv.py) at batch
    1 and 4: the parts and their fused sum compute what onnxruntime does."""
    from cw.engine import run_bundle

    bundle = cuda_bundle("late_cnn", precision="direct")  # cw's own kernels, not CUTLASS's
    assert all(k.kernels_conv_split == 2 for k in open_bundle(bundle).manifest.kernels)
    x = random_input((batch, 64, 7, 7), seed=5)
    result = run_bundle(bundle, [x], device="cuda:0", verify_onnx=zoo_onnx("late_cnn"))
    assert result.relative_error < 1e-4 and result.outputs[0].shape == (batch, 10)


@pytest.mark.parametrize("algo", ["winograd2", "winograd4"])
@pytest.mark.parametrize("batch", [1, 3])
def test_winograd_convs_on_gpu_match_onnxruntime(cuda_bundle, zoo_onnx, algo, batch):
    """small_cnn's two 3x3 convs as Winograd transforms and a batched GEMM
    (cw/compile/winograd.py) compute what onnxruntime does on the GPU too (small_cnn: its
    transformed weights are KBs, late_cnn's would take 19 MiB of a device call)."""
    from cw.engine import run_bundle

    bundle = cuda_bundle("small_cnn", precision=algo)
    assert any(f"{algo}: 2 3x3 convolutions" in n for n in open_bundle(bundle).manifest.notes)
    x = random_input((batch, 3, 32, 32), seed=6)
    result = run_bundle(bundle, [x], device="cuda:0", verify_onnx=zoo_onnx("small_cnn"))
    assert result.relative_error < 1e-4 and result.outputs[0].shape == (batch, 10)


@pytest.mark.parametrize("name,shape,taken", [("small_cnn", (3, 32, 32), 2),
                                              ("late_cnn", (64, 7, 7), 2)])
@pytest.mark.parametrize("batch", [1, 3])
def test_cutlass_convs_on_gpu_match_onnxruntime(cuda_bundle, zoo_onnx, name, shape, taken,
                                                batch):
    """Convolutions as CUTLASS 3xTF32 implicit GEMMs (cw/compile/cutlass_conv.py) compute what
    onnxruntime does in fp32: small_cnn's two (its first on 3 channels padded to 4), and
    late_cnn's two at 7x7, which run split-K 2 and 8 at batch 1 (serial split-K: the workspace's
    semaphores) and with another tile at batch 4 (3, padded). All four take their bias in the
    epilogue, small_cnn's and late_cnn's first their ReLU too, which split-K must apply in the
    last slice only; late_cnn's second takes the residual add and the ReLU after it (the
    with-broadcast kernel: the first slice adds the residual, the last the bias and ReLU).
    Twice, so that the split-K semaphores are seen to be reset between runs."""
    from cw.engine import run_bundle

    bundle = cuda_bundle(name, precision="cutlass")
    notes = open_bundle(bundle).manifest.notes
    assert any(f"cutlass: {taken} convolution" in n for n in notes), notes
    x = random_input((batch, *shape), seed=7)
    for _ in range(2):
        result = run_bundle(bundle, [x], device="cuda:0", verify_onnx=zoo_onnx(name))
        assert result.relative_error < 1e-4 and result.outputs[0].shape == (batch, 10)


def test_bundle_for_another_gpu_architecture_is_refused(cli, cuda_bundle, tmp_path):
    import shutil

    path = tmp_path / "other-arch"
    shutil.copytree(cuda_bundle("small_cnn"), path)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["target"]["arch"] = "sm_70"
    (path / "manifest.json").write_text(json.dumps(manifest))
    def files():
        return {f: f.read_bytes() for f in path.rglob("*") if f.is_file()}

    before = files()
    r = cli("profile", path, "--device", "cuda:0", "--iterations", "5")
    assert r.code != 0
    assert "compiled for sm_70" in r.err and "--arch" in r.err
    assert files() == before  # nothing written


def test_random_weights_do_not_leak_between_models(cuda_bundle, zoo_onnx):
    """Two different bundles resident at once each compute their own outputs."""
    from cw.serve.runtime.tvm_cuda import TvmCudaRuntime

    cnn = open_bundle(cuda_bundle("small_cnn"))
    mlp = open_bundle(cuda_bundle("mlp", (1, 2)))
    models = [HostModel(b.manifest.name, b, HostWeights(b)) for b in (cnn, mlp)]
    rt = TvmCudaRuntime(0, cnn.manifest.weights.page_size, 4)
    for model in models:
        rt.prepare(model, 1)
        rt.load(model, rt.cache.allocate(model.weights.num_pages))
    for model, name in zip(models, ("small_cnn", "mlp")):
        spec = model.manifest.inputs[0]
        x = random_input((1, *spec.sample_shape), seed=11)
        slot = rt.acquire_slot(model, 1)
        rt.copy_input(model, slot, [x])
        rt.execute(model, slot)
        (y,), _ = rt.copy_output(model, slot)
        rt.release_slot(slot)
        assert max_relative_error(y, onnx_reference(zoo_onnx(name), [x])[0]) < 1e-4
        assert np.isfinite(y).all()
    rt.close()


@pytest.mark.parametrize("precision", ["fp16", "tf32"])
def test_reduced_precision_bundle_on_gpu_is_accurate_and_predictable(cli, cuda_bundle, zoo_onnx,
                                                                      tmp_path, precision):
    """--precision fp16 / tf32 on the GPU: within 1e-2 of onnxruntime's fp32 (`cw run --verify`
    holds them to it), really computed in that precision (not fp32's outputs), and EXEC as
    steady as fp32's (p99.99/p50 ≤ 1.01, issue 7's bar, or no worse than fp32's on this tiny
    model whose kernels take microseconds). tf32: small_cnn's two convs on CUTLASS's TF32
    kernels."""
    bundles = {p: cuda_bundle("small_cnn", precision=p) for p in ("fp32", precision)}
    assert open_bundle(bundles[precision]).manifest.target.precision == precision
    x = random_input((3, 3, 32, 32), seed=11)
    np.save(tmp_path / "x.npy", x)
    outputs = {}
    for p, bundle in bundles.items():
        r = cli("run", bundle, "--input", tmp_path / "x.npy", "--device", "cuda", "-o",
                tmp_path / f"y-{p}.npy", "--verify", zoo_onnx("small_cnn"))
        assert r.code == 0, r.err
        outputs[p] = np.load(tmp_path / f"y-{p}.npy")
    ref = onnx_reference(zoo_onnx("small_cnn"), [x])[0]
    assert max_relative_error(outputs[precision], ref) < 1e-2
    assert not np.array_equal(outputs[precision], outputs["fp32"])
    spread = {}
    for p, bundle in bundles.items():
        r = cli("profile", bundle, "--device", "cuda:0", "--iterations", "2000", "--warmup",
                "50", "--load-iterations", "2", "--batch-sizes", "4")
        assert r.code == 0, r.err
        # an earlier test may have profiled the other batch size: profile.json keeps it
        (b,) = [b for b in json.loads((bundle / "profile.json").read_text())["batches"]
                if b["batch_size"] == 4]
        spread[p] = b["exec"]["p9999_ns"] / b["exec"]["p50_ns"]
    assert spread[precision] <= max(1.01, 1.02 * spread["fp32"]), spread


def test_exec_timer_on_gpu_times_gated_exec_no_slower_than_the_time_evaluator(cuda_bundle,
                                                                              zoo_onnx):
    """bench/kernels.py's "as served" column (cw.profile.exec_timer): the worker's gated EXEC on
    a CUTLASS bundle computes what onnxruntime does, and its device time is no longer than TVM's
    time evaluator's, which launches each kernel while the GPU runs the one before (the gate
    queues them all first; on small_cnn's microsecond kernels the host is the slower one)."""
    import statistics

    from cw.engine import LocalModel
    from cw.profile.exec_timer import ExecTimer

    bundle = cuda_bundle("small_cnn", precision="cutlass")
    x = random_input((3, 3, 32, 32), seed=12)
    ref = onnx_reference(zoo_onnx("small_cnn"), [x])[0]
    local = LocalModel(bundle, device="cuda:0")
    vm = local._vm(4)
    arg = local.tvm.runtime.tensor(np.concatenate([x, np.zeros_like(x[:1])]), device=local.device)
    evaluator = vm.time_evaluator("main", local.device, number=1, repeat=200, min_repeat_ms=0)
    with ExecTimer(bundle, "cuda:0") as timer:
        (y,) = timer.run([x])
        assert max_relative_error(y, ref) < 1e-4
        gated, ungated = [], []
        for _ in range(3):  # interleaved
            gated += timer.exec_ns([x], runs=200)
            ungated += [s * 1e9 for s in evaluator(arg, *local.weights).results]
    assert statistics.median(gated) <= 1.05 * statistics.median(ungated), \
        (statistics.median(gated), statistics.median(ungated))
