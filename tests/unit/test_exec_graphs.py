"""The bookkeeping of CUDA graph capture (cw/serve/runtime/exec_graphs.py), with a stand-in
for the capture itself: the graphs are real only on a GPU (tests/gpu/test_exec_graphs.py).
What is checked here is what no GPU is needed for: captures happen off the caller's thread,
once per key, a failed one turns its group off for good, and a full cache captures no more."""

import logging
import threading

import pytest

from cw.errors import UsageError
from cw.serve.runtime.exec_graphs import ExecGraph, GraphBuilder


def _builder(fail=(), max_graphs=100, gate=None):
    made, threads = [], set()

    def capture(item):
        if gate is not None:
            gate.wait(5)
        threads.add(threading.get_ident())
        if item in fail:
            raise RuntimeError(f"cannot capture {item}")
        made.append(item)
        return ExecGraph(handle=f"graph {item}", io=None, output_ptrs=[], nodes=3)

    return GraphBuilder(capture, max_graphs=max_graphs), made, threads


def test_each_key_is_captured_once_off_the_callers_thread():
    gate = threading.Event()
    builder, made, threads = _builder(gate=gate)
    try:
        assert builder.request(("r50", 1, (0, 1)), "a", "r50 at batch 1")
        # queued, not yet made: asked again, it is not queued twice; nothing is there yet
        assert not builder.request(("r50", 1, (0, 1)), "a", "r50 at batch 1")
        assert builder.get(("r50", 1, (0, 1))) is None
        assert builder.request(("r50", 4, (0, 1)), "b", "r50 at batch 4")
        gate.set()
        assert builder.settle(5)
        assert made == ["a", "b"] and threading.get_ident() not in threads
        assert builder.get(("r50", 1, (0, 1))).handle == "graph a"
        assert not builder.request(("r50", 1, (0, 1)), "a", "r50 at batch 1")  # made already
        assert builder.request(("r50", 1, (2, 3)), "c", "r50 at batch 1")  # another placement
        assert builder.settle(5) and made == ["a", "b", "c"]
    finally:
        graphs = builder.close()
    assert sorted(g.handle for g in graphs) == ["graph a", "graph b", "graph c"]
    assert builder.graphs == {} and not builder.request(("r50", 16, (0,)), "d", "late")


def test_a_failed_capture_turns_its_group_off_with_one_log_line(caplog):
    builder, made, _ = _builder(fail={"a"})
    try:
        with caplog.at_level(logging.WARNING, logger="cw.serve.runtime.exec_graphs"):
            builder.request(("cnn", 1, (0,)), "a", "cnn at batch 1")
            assert builder.settle(5)
            # the same bundle and batch size at another placement: not tried again
            assert not builder.request(("cnn", 1, (5,)), "a2", "cnn at batch 1")
            builder.request(("cnn", 4, (0,)), "b", "cnn at batch 4")  # another group: made
            assert builder.settle(5)
        assert made == ["b"] and builder.get(("cnn", 1, (0,))) is None
        assert builder.failed == {("cnn", 1): "cannot capture a"}
        lines = [r.getMessage() for r in caplog.records]
        assert lines == ["no CUDA graph for cnn at batch 1 (cannot capture a): its EXECs run "
                         "through TVM's VM"]
    finally:
        builder.close()


def test_a_full_cache_captures_no_more_and_says_so_once(caplog):
    builder, made, _ = _builder(max_graphs=2)
    try:
        with caplog.at_level(logging.WARNING, logger="cw.serve.runtime.exec_graphs"):
            for i in range(4):
                builder.request(("m", 1, (i,)), i, "m at batch 1")
            assert builder.settle(5)
        assert made == [0, 1] and len(builder.graphs) == 2
        assert len(caplog.records) == 1 and "2 CUDA graphs made" in caplog.records[0].getMessage()
    finally:
        builder.close()


def test_exec_graphs_is_refused_where_there_is_no_cuda_worker(tmp_path):
    from cw.profile.profiler import ProfileConfig, make_runtime
    from cw.replay.runner import ReplayConfig
    from cw.serve.local import LocalServeConfig
    from cw.serve.worker import WorkerConfig

    with pytest.raises(UsageError, match="--exec-graphs is for TVM workers on CUDA devices"):
        WorkerConfig(devices=("cpu",), exec_graphs=True)
    with pytest.raises(UsageError, match="--exec-graphs is for TVM workers on CUDA devices"):
        WorkerConfig(devices=("cuda:0",), runtime="simulated", exec_graphs=True)
    WorkerConfig(devices=("cuda:0",), exec_graphs=True)  # checked, not started: no GPU needed
    with pytest.raises(UsageError, match="--exec-graphs is for --runtime cuda"):
        LocalServeConfig(models_dir=tmp_path, runtime="cpu", exec_graphs=True)
    with pytest.raises(UsageError, match="--exec-graphs is for the CUDA workers"):
        ReplayConfig(simulate=True, exec_graphs=True)
    with pytest.raises(UsageError, match="--exec-graphs runs one EXEC at a time"):
        ProfileConfig(exec_graphs=True, concurrency=2)
    with pytest.raises(UsageError, match="--exec-graphs is for CUDA devices"):
        make_runtime("cpu", 2**20, 4, exec_graphs=True)


def test_cli_refuses_exec_graphs_on_a_cpu_worker_in_one_line(cli, tmp_path):
    r = cli("serve", "worker", "--models", tmp_path, "--device", "cpu", "--exec-graphs")
    assert r.code != 0
    assert "--exec-graphs is for TVM workers on CUDA devices" in r.err
    assert "Traceback" not in r.err
