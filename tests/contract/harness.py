"""Plays the controller against a real worker over a real transport, for contract tests."""

from __future__ import annotations

import itertools
import queue
import threading
import time

from cw.serve.protocol import (Codec, FromWorker, Infer, Load, Ping, Pong, Register, Result,
                               ToWorker, Unload, Welcome)
from cw.serve.runtime.base import PhaseTiming, now_ns, wait_until_ns
from cw.serve.runtime.host import load_models
from cw.serve.runtime.tvm_cpu import TvmCpuRuntime
from cw.serve.transport import ZmqDealer, ZmqRouter
from cw.serve.runtime.factory import make_runtimes
from cw.serve.worker import Worker, WorkerConfig

MS = 1_000_000


class QueuedCpuRuntime(TvmCpuRuntime):
    """TVM on the CPU behind a launch queue, the way a CUDA stream works: `launch` returns at
    once and one thread runs the launched EXECs in order, each not before its release time and
    taking at least `min_exec_ns`. It takes the worker's pipelined path (launch ahead of the
    window, completion thread, TOO_LATE predicted behind launched EXECs, UNLOAD waiting for
    EXECs in flight) with real kernels on machines without a GPU."""

    name = "tvm-cpu-queued"
    launch_lead_ns = 3 * MS

    def __init__(self, page_size: int, num_pages: int, min_exec_ns: int = 0):
        super().__init__(page_size, num_pages)
        self.min_exec_ns = min_exec_ns
        self._launched: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run_launched, daemon=True).start()

    def launch(self, model, slot, release_at_ns=0):
        handle = {"done": threading.Event()}
        self._launched.put((model, slot, release_at_ns, handle))
        return handle

    def finish(self, handle) -> PhaseTiming:
        handle["done"].wait()
        if "error" in handle:
            raise handle["error"]
        return handle["timing"]

    def _run_launched(self) -> None:
        while True:
            model, slot, release_at_ns, handle = self._launched.get()
            wait_until_ns(release_at_ns)
            try:
                start = self.execute(model, slot).start_ns
                wait_until_ns(start + self.min_exec_ns)
                end = now_ns()
                handle["timing"] = PhaseTiming(start, end, end - start)
            except Exception as e:
                handle["error"] = e
            handle["done"].set()


def queued_cpu_runtimes(min_exec_ns: int = 0):
    """A `runtimes` argument for FakeController: one QueuedCpuRuntime."""
    def make(config, models):
        page_size = models[0].weights.page_size
        cache = config.page_cache_bytes or 2**30
        return [QueuedCpuRuntime(page_size, cache // page_size, min_exec_ns)]
    return make


class FakeController:
    def __init__(self, bundles, runtime="tvm", page_cache_bytes=None, copies=1,
                 devices=("cpu",), runtimes=make_runtimes, exec_graphs=False):
        self.router = ZmqRouter("tcp://127.0.0.1:*", Codec(FromWorker), Codec(ToWorker))
        config = WorkerConfig(controller=self.router.address, runtime=runtime,
                              page_cache_bytes=page_cache_bytes, copies=copies, devices=devices,
                              exec_graphs=exec_graphs)
        models = load_models(bundles, copies, read_weights=runtime != "simulated")
        self.worker = Worker(config, ZmqDealer(self.router.address, Codec(ToWorker),
                                               Codec(FromWorker)), models,
                             runtimes(config, models))
        self.worker.warm_up()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.worker.serve_forever, args=(self.stop,),
                                       daemon=True)
        self.thread.start()
        self.peer = None
        self.registration: Register | None = None
        self.results: dict[int, list[Result]] = {}
        self.other: list = []
        self._ids = itertools.count(1)
        deadline = time.monotonic() + 10
        while self.registration is None and time.monotonic() < deadline:
            self.pump(50)
        assert self.registration is not None, "worker did not register"
        self.router.send(self.peer, Welcome(1, self.registration.worker_ns, now_ns()))
        self.pump(20)

    def pump(self, timeout_ms=10) -> None:
        for peer, msg in self.router.poll(timeout_ms):
            if isinstance(msg, Register):
                self.peer, self.registration = peer, msg
            elif isinstance(msg, Ping):
                self.router.send(peer, Pong(msg.worker_sent_ns, now_ns()))
            elif isinstance(msg, Result):
                self.results.setdefault(msg.id, []).append(msg)
            else:
                self.other.append(msg)

    def send(self, cls, model, *, delay_ms=0.0, window_ms=200.0, expected_ms=0.0, gpu=0,
             **fields):
        action_id = next(self._ids)
        earliest = now_ns() + int(delay_ms * MS)
        self.router.send(self.peer, cls(id=action_id, model=model, gpu=gpu, earliest_ns=earliest,
                                        latest_ns=earliest + int(window_ms * MS),
                                        expected_ns=int(expected_ms * MS), **fields))
        return action_id

    def load(self, model, **kw):
        return self.send(Load, model, **kw)

    def unload(self, model, **kw):
        return self.send(Unload, model, **kw)

    def infer(self, model, inputs, batch_size=None, **kw):
        n = inputs[0].shape[0]
        return self.send(Infer, model, batch_size=batch_size or n, n=n,
                         inputs=[[x.tobytes()] for x in inputs], **kw)

    def wait(self, *ids, timeout=20.0) -> list[Result]:
        deadline = time.monotonic() + timeout
        while not all(i in self.results for i in ids) and time.monotonic() < deadline:
            self.pump(20)
        missing = [i for i in ids if i not in self.results]
        assert not missing, f"no result for actions {missing}"
        for i in ids:
            assert len(self.results[i]) == 1, f"action {i} got {len(self.results[i])} results"
        return [self.results[i][0] for i in ids]

    def close(self):
        self.pump(50)
        duplicated = {i: len(r) for i, r in self.results.items() if len(r) != 1}
        assert not duplicated, f"actions with more than one result: {duplicated}"
        self.stop.set()
        self.thread.join(timeout=10)
        self.router.close()
        self.worker.transport.close()
