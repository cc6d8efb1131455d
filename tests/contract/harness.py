"""Plays the controller against a real worker over a real transport, for contract tests."""

from __future__ import annotations

import itertools
import threading
import time

from cw.serve.protocol import (Codec, FromWorker, Infer, Load, Ping, Pong, Register, Result,
                               ToWorker, Unload, Welcome)
from cw.serve.runtime.base import now_ns
from cw.serve.transport import ZmqDealer, ZmqRouter
from cw.serve.worker import Worker, WorkerConfig, make_runtimes
from cw.serve.runtime.host import load_models

MS = 1_000_000


class FakeController:
    def __init__(self, bundles, runtime="tvm", page_cache_bytes=None, copies=1,
                 devices=("cpu",)):
        self.router = ZmqRouter("tcp://127.0.0.1:*", Codec(FromWorker), Codec(ToWorker))
        config = WorkerConfig(controller=self.router.address, runtime=runtime,
                              page_cache_bytes=page_cache_bytes, copies=copies, devices=devices)
        models = load_models(bundles, copies, read_weights=runtime != "simulated")
        self.worker = Worker(config, ZmqDealer(self.router.address, Codec(ToWorker),
                                               Codec(FromWorker)), models,
                             make_runtimes(config, models))
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

    def send(self, cls, model, *, delay_ms=0.0, window_ms=50.0, gpu=0, **fields):
        action_id = next(self._ids)
        earliest = now_ns() + int(delay_ms * MS)
        self.router.send(self.peer, cls(id=action_id, model=model, gpu=gpu, earliest_ns=earliest,
                                        latest_ns=earliest + int(window_ms * MS),
                                        expected_ns=0, **fields))
        return action_id

    def load(self, model, **kw):
        return self.send(Load, model, **kw)

    def unload(self, model, **kw):
        return self.send(Unload, model, **kw)

    def infer(self, model, inputs, batch_size=None, **kw):
        n = inputs[0].shape[0]
        return self.send(Infer, model, batch_size=batch_size or n, n=n,
                         inputs=[x.tobytes() for x in inputs], **kw)

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
