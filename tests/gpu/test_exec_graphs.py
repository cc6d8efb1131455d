"""EXEC as one CUDA graph (`--exec-graphs`, cw/serve/runtime/exec_graphs.py) on a real GPU: the
graph computes bit for bit what TVM's VM does, at every placement of the weights, with
EXECs through graphs and through the VM in flight together, and allocates nothing while
serving."""

import json

import numpy as np
import pytest

from cw.bundle import open_bundle
from cw.serve.runtime.host import HostModel, HostWeights
from cw.verify import max_relative_error, onnx_reference
from tests.conftest import random_input
from tests.gpu import infer_once

pytestmark = pytest.mark.gpu

# small_cnn as compiled by default; late_cnn with CUTLASS convolutions, split-K at batch 1
# (the capture must take the semaphores' reset along); mlp, whose output is a plain GEMM
CASES = [("small_cnn", (1, 4), "fp32"), ("late_cnn", (1, 4), "cutlass"), ("mlp", (1, 2), "fp32")]


def _models(cuda_bundle, name, sizes, precision):
    bundle = open_bundle(cuda_bundle(name, sizes, precision))
    weights = HostWeights(bundle)
    return bundle, weights, [HostModel(f"{name}-{i}", bundle, weights) for i in range(2)]


def _input(model, batch, seed):
    spec = model.manifest.inputs[0]
    return random_input((batch, *spec.sample_shape), seed=seed)


@pytest.mark.parametrize("name,sizes,precision", CASES)
def test_graphs_compute_what_the_vm_does_at_every_placement(cuda_bundle, zoo_onnx, name, sizes,
                                                             precision):
    from cw.serve.runtime import cuda_api
    from cw.serve.runtime.tvm_cuda import TvmCudaRuntime

    bundle, weights, (a, b) = _models(cuda_bundle, name, sizes, precision)
    pages = weights.num_pages
    plain = TvmCudaRuntime(0, weights.page_size, pages)
    rt = TvmCudaRuntime(0, weights.page_size, 3 * pages, exec_graphs=True)
    try:
        for size in sizes:
            plain.prepare(a, size)
            rt.prepare(a, size)
        plain.load(a, plain.cache.allocate(pages))
        rt.load(a, rt.cache.allocate(pages))
        rt.load(b, rt.cache.allocate(pages))
        rt.settle()
        # one graph per batch size and placement (copies of a bundle share theirs)
        assert rt.describe()["exec_graphs"] == {"made": 2 * len(sizes), "failed": 0, "execs": 0}
        xs = {size: _input(a, size, seed=size) for size in sizes}
        want = {size: infer_once(plain, a, size, x) for size, x in xs.items()}
        for size, x in xs.items():
            for model in (a, b):
                assert np.array_equal(infer_once(rt, model, size, x), want[size]), (model, size)
        assert rt.graph_execs == 2 * len(sizes)  # every one of them ran as its graph
        x = xs[sizes[0]]
        assert max_relative_error(want[sizes[0]], onnx_reference(zoo_onnx(name), [x])[0]) < 1e-4

        # a moved elsewhere: a graph of its own there, the same outputs
        before = rt.slots_of(a.model_id)
        rt.cache.release(rt.unload(a))
        rt.cache.allocate(pages)  # occupy its old pages
        rt.load(a, rt.cache.allocate(pages))
        assert rt.slots_of(a.model_id) != before
        rt.settle()
        assert rt.describe()["exec_graphs"]["made"] == 3 * len(sizes)
        for size, x in xs.items():
            assert np.array_equal(infer_once(rt, a, size, x), want[size])

        cuda_api.use_device(0)
        free = cuda_api.free_bytes()
        for _ in range(20):
            for size, x in xs.items():
                infer_once(rt, a, size, x)
                infer_once(rt, b, size, x)
        assert cuda_api.free_bytes() == free  # nothing allocated on the inference path
    finally:
        rt.close()
        plain.close()


def test_graph_and_vm_execs_in_flight_together_each_answer_their_own(cuda_bundle):
    """A worker's pipelined launches, alternating between a model that runs as its graph and
    one that has none (it runs through the VM), back to back: each output is a block of TVM's
    pool that the EXEC after it may reuse, so each must be copied out before; each EXEC ends
    with its own right output."""
    from cw.serve.runtime.base import now_ns
    from cw.serve.runtime.tvm_cuda import TvmCudaRuntime

    bundle, weights, (a, b) = _models(cuda_bundle, "small_cnn", (1, 4), "fp32")
    pages = weights.num_pages
    rt = TvmCudaRuntime(0, weights.page_size, 2 * pages, exec_graphs=True)
    try:
        rt.prepare(a, 1)
        rt.load(a, rt.cache.allocate(pages))
        rt.load(b, rt.cache.allocate(pages))
        rt.settle()
        b_key = (id(bundle), 1, tuple(rt.slots_of(b.model_id)))
        del rt.graphs.graphs[b_key]  # as if b's capture had not come yet
        xs = [_input(a, 1, seed=100 + i) for i in range(8)]
        want = []
        for i, x in enumerate(xs):
            model = (a, b)[i % 2]
            want.append(infer_once(rt, model, 1, x))
        execs_before = rt.graph_execs
        slots, handles = [], []
        first = now_ns() + 20_000_000
        for i, x in enumerate(xs):
            model = (a, b)[i % 2]
            slot = rt.acquire_slot(model, 1)
            rt.copy_input(model, slot, [x])
            slots.append((model, slot))
            # back to back: each starts as the one before ends, while that one's output is
            # still being copied out
            handles.append(rt.launch(model, slot, first + i * 1_000))
        for handle in handles:
            rt.finish(handle)
        for (model, slot), expected in zip(slots, want):
            (y,), _ = rt.copy_output(model, slot)
            rt.release_slot(slot)
            assert np.array_equal(y, expected), model.model_id
        assert rt.graph_execs - execs_before == 4  # a's four, not b's
    finally:
        rt.close()


def test_profile_with_exec_graphs_measures_the_graph_and_launches_faster(cli, cuda_bundle):
    """`cw profile --exec-graphs`: EXEC measured as its graph, and the host's part of it (host
    time less device time: launching) shorter than through the VM's launches."""
    bundle = cuda_bundle("late_cnn", precision="cutlass")
    launch_ns = {}
    for flags in ((), ("--exec-graphs",)):
        r = cli("profile", bundle, "--device", "cuda:0", "--iterations", "300", *flags, "--json")
        assert r.code == 0, r.err
        profile = json.loads((bundle / "profile.json").read_text())
        graphs = any("CUDA graph" in note for note in profile["notes"])
        assert graphs == bool(flags), profile["notes"]
        assert all(b["exec"]["p50_ns"] > 0 for b in profile["batches"])
        launch_ns[flags] = [b["exec_host"]["p50_ns"] - b["exec"]["p50_ns"]
                            for b in profile["batches"]]
    assert all(g < v for g, v in zip(launch_ns[("--exec-graphs",)], launch_ns[()])), launch_ns
