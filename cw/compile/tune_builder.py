"""MetaSchedule's local builder with its worker processes kept from one round to the next.

TVM's LocalBuilder starts a new process pool for every call, to bound a memory leak of its
workers. A worker's start (importing TVM, unpickling the task) took ~6 s on the 2-core build
machine, and a build of one candidate 0.1 s: `cw tune` spent most of its time starting
processes, five times per kernel at the default 64 trials. Here one pool serves every call, and
each process is recycled after `uses_per_process` builds, which bounds the leak as well.
"""

from __future__ import annotations

import functools

USES_PER_PROCESS = 64


@functools.cache
def _builder_class():
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.builder import local_builder
    from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

    @derived_object
    class PooledBuilder(PyBuilder):
        def __init__(self, initializer, max_workers: int | None, timeout_s: float,
                     uses_per_process: int):
            super().__init__()
            self.pool = PopenPoolExecutor(max_workers=max_workers, timeout=timeout_s,
                                          initializer=initializer,
                                          maximum_process_uses=uses_per_process)
            self.timeout_s = timeout_s

        def build(self, build_inputs):
            work = [(None, None, b.mod, b.target, local_builder._serialize_params(b.params))
                    for b in build_inputs]
            results = []
            for r in self.pool.map_with_error_catching(
                    lambda args: local_builder._worker_func(*args), work):
                if r.status == StatusKind.COMPLETE:
                    results.append(BuilderResult(r.value, None))
                elif r.status == StatusKind.TIMEOUT:
                    results.append(BuilderResult(
                        None, f"LocalBuilder: Timeout, killed after {self.timeout_s} seconds"))
                else:
                    results.append(BuilderResult(
                        None, f"LocalBuilder: An exception occurred\n{r.value}"))
            return results

        def close(self):
            self.pool.shutdown(wait=True)

    return PooledBuilder


def pooled_builder(initializer, max_workers: int | None = None, timeout_s: float = 30.0,
                   uses_per_process: int = USES_PER_PROCESS):
    """A MetaSchedule Builder (TVM must be loaded; max_workers None: one per CPU, as TVM's);
    call its close() when tuning ends."""
    return _builder_class()(initializer, max_workers, timeout_s, uses_per_process)
