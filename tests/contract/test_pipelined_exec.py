"""The worker's pipelined EXEC path (runtimes that launch asynchronously, like CUDA): EXECs are
launched ahead of their window behind the one running, so the worker must predict whether each
can still start by `latest_ns`, keep weights in place until every launched EXEC has ended, and
hand each EXEC's completion to the output copy in order. Real TVM-CPU kernels behind a launch
queue whose EXECs take at least 40 ms, so that the timing is not left to chance."""

import numpy as np
import pytest

from cw.engine import LocalModel
from cw.serve.protocol import Status
from tests.conftest import random_input
from tests.contract.harness import MS, FakeController, queued_cpu_runtimes

EXEC_MS = 40


@pytest.fixture
def ctl(cpu_bundle):
    c = FakeController([cpu_bundle("small_cnn")], runtimes=queued_cpu_runtimes(EXEC_MS * MS))
    (r,) = c.wait(c.load("small_cnn"))
    assert r.status == Status.OK
    yield c
    c.close()


def test_window_closing_before_the_exec_ahead_ends_is_too_late(ctl):
    x = random_input((1, 3, 32, 32))
    first = ctl.infer("small_cnn", [x], delay_ms=30, window_ms=100, expected_ms=EXEC_MS)
    # opens 5 ms after the first starts and closes before the first can end: never launched
    hopeless = ctl.infer("small_cnn", [x], delay_ms=35, window_ms=20, expected_ms=EXEC_MS)
    # closes after the first's predicted end: runs right behind it
    behind = ctl.infer("small_cnn", [x], delay_ms=35, window_ms=200, expected_ms=EXEC_MS)
    a, b, c = ctl.wait(first, hopeless, behind)
    assert a.status == Status.OK and c.status == Status.OK
    assert b.status == Status.TOO_LATE and not b.outputs
    assert c.timings[1].start_ns >= a.timings[1].end_ns
    assert c.timings[1].start_ns - a.timings[1].start_ns >= EXEC_MS * MS


def test_unload_waits_for_the_exec_in_flight(ctl, cpu_bundle, zoo_onnx):
    x = random_input((1, 3, 32, 32))
    infer = ctl.infer("small_cnn", [x], delay_ms=30, window_ms=100)
    unload = ctl.unload("small_cnn", delay_ms=45, window_ms=100)  # mid-EXEC
    r, u = ctl.wait(infer, unload)
    assert r.status == Status.OK and u.status == Status.OK
    assert u.timings[0].end_ns >= r.timings[1].end_ns  # the pages outlived the EXEC reading them
    expected = LocalModel(cpu_bundle("small_cnn")).run([x])[0]
    got = np.frombuffer(r.outputs[0], dtype=np.float32).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    (after,) = ctl.wait(ctl.infer("small_cnn", [x]))
    assert after.status == Status.NOT_LOADED


def test_launched_execs_complete_in_order_with_outputs(ctl, cpu_bundle):
    xs = [random_input((1, 3, 32, 32), seed=i) for i in range(4)]
    ids = [ctl.infer("small_cnn", [x], delay_ms=20, window_ms=1000) for x in xs]
    results = ctl.wait(*ids)
    assert all(r.status == Status.OK for r in results)
    spans = [(r.timings[1].start_ns, r.timings[1].end_ns) for r in results]
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # in order, one at a time
    local = LocalModel(cpu_bundle("small_cnn"))
    for r, x in zip(results, xs):
        expected = local.run([x])[0]
        got = np.frombuffer(r.outputs[0], dtype=np.float32).reshape(expected.shape)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
