"""Models that take token ids (the zoo's small_bert): int64 inputs that index an embedding.
cw compiles them and agrees with onnxruntime, negative ids included; an id outside the
vocabulary is refused in one line by `cw run`, `cw infer` and the controller, which goes on
serving; and the kernels clamp such an id rather than read outside the table (it once killed
`cw run` with a segmentation fault)."""

import subprocess
import sys

import numpy as np

from cw.bundle import open_bundle
from cw.client import Client
from cw.engine import LocalModel, run_bundle
from cw.serve import protocol as p
from cw.serve.protocol import RequestStatus
from tests.integration.test_serving import WorkerThread, start

VOCABULARY = 1000  # small_bert's (model_zoo)


def _ids(shape, seed, low=0, high=VOCABULARY):
    return np.random.default_rng(seed).integers(low, high, shape).astype(np.int64)


def test_token_ids_compile_with_their_range_and_agree_with_onnxruntime(cpu_bundle, zoo_onnx):
    bundle = cpu_bundle("small_bert")
    (spec,) = open_bundle(bundle).manifest.inputs
    assert (spec.name, spec.dtype, spec.sample_shape) == ("input_ids", "int64", [32])
    assert spec.index_limit == VOCABULARY
    for batch in (1, 3):  # ONNX counts a negative id from the end of the table
        result = run_bundle(bundle, [_ids((batch, 32), batch, -VOCABULARY)], "cpu",
                            zoo_onnx("small_bert"))
        assert result.relative_error <= 1e-4, (batch, result.relative_error)


def test_an_id_outside_the_vocabulary_is_refused_in_one_line(cpu_bundle, cli, tmp_path):
    bundle = cpu_bundle("small_bert")
    for bad, where in ((VOCABULARY, [1, 7]), (-VOCABULARY - 1, [1, 7]), (10**12, [1, 7])):
        x = _ids((2, 32), 0)
        x[1, 7] = bad
        np.save(tmp_path / "x.npy", x)
        r = cli("run", bundle, "--input", tmp_path / "x.npy")
        assert r.code == 2, r.err
        assert r.err.startswith(f"error: input 'input_ids' holds {bad} at {where}: it indexes "
                                f"a table of {VOCABULARY} rows (values -1000..999)"), r.err
        assert len(r.err.strip().splitlines()) == 1


def test_the_kernels_clamp_an_id_outside_the_table(cpu_bundle):
    """Past every check (the VM called directly): no read outside the table. In a process of
    its own: before the clamp, id 10^12 was a segmentation fault."""
    code = f"""
import numpy as np
from cw.engine import LocalModel
m = LocalModel({str(cpu_bundle("small_bert"))!r})
x = np.zeros((1, 32), np.int64)
x[0, 5] = 10**12
y = m._vm(1)["main"](m.tvm.runtime.tensor(x), *m.weights).numpy()
assert np.isfinite(y).all(), y
print("clamped")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "clamped" in r.stdout, (r.returncode, r.stderr[-2000:])


def test_a_controller_refuses_ids_outside_the_vocabulary_and_keeps_serving(cpu_bundle, cli,
                                                                          tmp_path):
    import shutil

    models = tmp_path / "models"
    shutil.copytree(cpu_bundle("small_bert"), models / "small_bert")
    ctl = start(tmp_path)
    w = WorkerThread(ctl.workers_address, models, "tvm", "cpu0")
    try:
        ctl.wait_for_workers(1)
        good = _ids((2, 32), 5)
        bad = good.copy()
        bad[0, 3] = VOCABULARY
        with Client(ctl.clients_address) as client:
            (info,) = client.models(["small_bert"])
            assert info.inputs[0].index_limit == VOCABULARY
            # a client that checks nothing (another language's): the controller refuses it
            r = client._send(lambda rid: p.InferRequest(rid, "small_bert", [bad.tobytes()], 2,
                                                        0)).result(timeout=30)
            assert r.status == RequestStatus.BAD_INPUT
            assert r.message == ("input 'input_ids' holds 1000 at [0, 3]: it indexes a table of "
                                 "1000 rows (values -1000..999)")
            y = client.infer("small_bert", good, slo_ms=5000)
            assert np.array_equal(y, LocalModel(models / "small_bert").run([good])[0])
        # cw infer --random makes up ids within the vocabulary
        r = cli("infer", "small_bert", "--random", "--controller", ctl.clients_address,
                "--slo", "5s")
        assert r.code == 0, r.err
    finally:
        w.close()
        ctl.close()


def test_profiling_feeds_ids_within_the_vocabulary(cpu_bundle, cli, tmp_path):
    import shutil

    bundle = tmp_path / "small_bert"
    shutil.copytree(cpu_bundle("small_bert"), bundle)
    r = cli("profile", bundle, "--device", "cpu", "--iterations", "10", "--warmup", "2",
            "--load-iterations", "2")
    assert r.code == 0, r.err
    import json

    profile = json.loads((bundle / "profile.json").read_text())
    assert {b["batch_size"] for b in profile["batches"]} == {1, 4}
