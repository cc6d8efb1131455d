"""`cw tune`'s builder: one pool of worker processes for the whole run, each process recycled
after a number of builds, and a candidate that fails to build is a result, not an exception."""

from __future__ import annotations

from cw.compile import tune_builder
from cw.tvm_env import load_tvm


def _scale_kernel(tvm, factor):
    from tvm import te

    a = te.placeholder((32, 32), name="a")
    b = te.compute((32, 32), lambda i, j: a[i, j] * factor, name="b")
    return tvm.IRModule({"main": te.create_prim_func([a, b])})


def _kernel_reading_an_unbound_variable(tvm):
    from tvm import te

    a = te.placeholder((32,), name="a")
    free = tvm.tirx.Var("free", "int32")
    b = te.compute((32,), lambda i: a[i] * tvm.tirx.Cast("float32", free), name="b")
    return tvm.IRModule({"main": te.create_prim_func([a, b])})


def _starts_recorded_in(path):
    def record_start():  # a local function: cloudpickle sends it to the worker by value
        import os

        from cw.compile import fast_tvmscript

        fast_tvmscript.install()  # (the worker imports MetaSchedule's TVMScript: minutes without)
        with open(path, "a") as f:
            f.write(f"{os.getpid()}\n")
    return record_start


def test_worker_processes_outlive_a_build_call_until_their_uses_run_out(tmp_path):
    tvm = load_tvm()
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    starts = tmp_path / "starts"
    builder = tune_builder.pooled_builder(_starts_recorded_in(str(starts)), max_workers=1,
                                          uses_per_process=3)
    try:
        target = tvm.target.Target("llvm")
        for factor in range(1, 6):  # five calls, as five rounds of a search would be
            (result,) = builder.build([BuilderInput(_scale_kernel(tvm, float(factor)), target)])
            assert result.error_msg is None and result.artifact_path
    finally:
        builder.close()
    pids = starts.read_text().split()
    assert len(pids) == 2 and pids[0] != pids[1]  # builds 1-3 in one process, 4-5 in the next


def test_a_candidate_that_fails_to_build_is_an_error_result(tmp_path):
    tvm = load_tvm()
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    builder = tune_builder.pooled_builder(_starts_recorded_in(str(tmp_path / "starts")),
                                          max_workers=1)
    try:
        target = tvm.target.Target("llvm")
        results = builder.build([BuilderInput(_kernel_reading_an_unbound_variable(tvm), target),
                                 BuilderInput(_scale_kernel(tvm, 2.0), target)])
    finally:
        builder.close()
    assert results[0].artifact_path is None
    assert "exception" in results[0].error_msg and "free" in results[0].error_msg
    assert results[1].error_msg is None
