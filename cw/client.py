"""Client API for a running `cw serve`.

    from cw.client import Client
    with Client("tcp://127.0.0.1:7001") as c:
        y = c.infer("resnet50", x, slo_ms=100)            # blocking; x has a batch axis
        futures = [c.infer_async("resnet50", x) for x in xs]  # many in flight
        y = await c.ainfer("resnet50", x)                 # asyncio

A background thread owns the ZeroMQ socket; calls from any thread are safe.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from concurrent.futures import Future

import numpy as np

from cw.errors import CwError
from cw.serve import protocol as p
from cw.serve.protocol import RequestStatus
from cw.serve.transport import Malformed, ZmqDealer


class RequestFailed(CwError):
    """The controller answered with something other than OK."""

    exit_code = 6

    def __init__(self, status: RequestStatus, message: str):
        super().__init__(f"request {status.name.lower()}: {message}" if message
                         else f"request {status.name.lower()}",
                         _HINTS.get(status))
        self.status = status


_HINTS = {
    RequestStatus.REJECTED: "the system could not meet the SLO; retry, or ask for a longer --slo",
    RequestStatus.UNKNOWN_MODEL: "list the servable models with `cw infer --list`",
    RequestStatus.BAD_INPUT: "check the input's shape and dtype against the model",
    RequestStatus.BAD_SLO: "give an SLO like 100ms",
}



def _buffer(a) -> memoryview:
    """The array's bytes without a copy (the message encoder copies them once, right away)."""
    return memoryview(np.ascontiguousarray(a)).cast("B")

class Client:
    def __init__(self, address: str = "tcp://127.0.0.1:7001", timeout_s: float = 30.0):
        self.address = address
        self.timeout_s = timeout_s
        self._dealer = ZmqDealer(address, p.Codec(p.ToClient), p.Codec(p.FromClient))
        self._ids = itertools.count(1)
        self._futures: dict[int, Future] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._models: dict[str, p.ModelInfo] = {}
        self._thread = threading.Thread(target=self._loop, name="cw-client", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            for msg in self._dealer.poll(20):
                if isinstance(msg, Malformed):
                    continue
                entry = self._futures.pop(msg.request_id, None)
                if entry is None:
                    continue
                future, decode = entry
                if future.done():  # cancelled by close()
                    continue
                if decode is None:
                    future.set_result(msg)
                    continue
                try:
                    result = decode(msg)
                except Exception as e:  # RequestFailed, or outputs that do not fit the model
                    future.set_exception(e)
                else:
                    future.set_result(result)
        self._dealer.close()

    def _send(self, make, decode=None) -> Future:
        """Send `make(request id)`; the future gets the response, or `decode(response)`, set by
        the I/O thread. (A dict's get/set/pop are atomic: no lock on this per-request path.)"""
        rid = next(self._ids)
        future: Future = Future()
        self._futures[rid] = (future, decode)
        self._dealer.send(make(rid))
        return future

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        with self._lock:
            for f, _ in list(self._futures.values()):
                f.cancel()
            self._futures.clear()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- API -----------------------------------------------------------------------------
    def models(self) -> list[p.ModelInfo]:
        response = self._wait(self._send(lambda rid: p.ListModels(rid)))
        self._models = {m.model_id: m for m in response.models}
        return response.models

    def infer_async(self, model: str, x, slo_ms: float | None = None) -> Future:
        """A future of the output array(s). `x` is an array with a batch axis (or a list of
        arrays for a model with several inputs)."""
        inputs = [x] if isinstance(x, np.ndarray) else list(x)
        n = inputs[0].shape[0]
        slo_ns = 0 if slo_ms is None else int(slo_ms * 1_000_000)
        if model not in self._models:
            self.models()  # output shapes and dtypes, fetched once (not from the I/O thread)
        payload = [_buffer(a) for a in inputs]
        return self._send(lambda rid: p.InferRequest(rid, model, payload, n, slo_ns),
                          lambda msg: self._decode(model, msg, n))

    def infer(self, model: str, x, slo_ms: float | None = None):
        return self._wait(self.infer_async(model, x, slo_ms))

    async def ainfer(self, model: str, x, slo_ms: float | None = None):
        return await asyncio.wrap_future(self.infer_async(model, x, slo_ms))

    def infer_response(self, model: str, x, slo_ms: float | None = None) -> p.InferResponse:
        """The raw response (status, latency, batch size) without raising on failure."""
        return self._wait(self.infer_response_async(model, x, slo_ms))

    def infer_response_async(self, model: str, x, slo_ms: float | None = None) -> Future:
        """A future of the raw response, never of an exception: for load generators, which
        count statuses and need not turn outputs into arrays."""
        inputs = [x] if isinstance(x, np.ndarray) else list(x)
        slo_ns = 0 if slo_ms is None else int(slo_ms * 1_000_000)
        payload = [_buffer(a) for a in inputs]
        return self._send(lambda rid: p.InferRequest(rid, model, payload, inputs[0].shape[0],
                                                     slo_ns))

    # --- helpers -------------------------------------------------------------------------
    def _wait(self, future: Future):
        try:
            return future.result(timeout=self.timeout_s)
        except TimeoutError:
            raise CwError(f"no answer from the controller at {self.address} within "
                          f"{self.timeout_s:g} s", "is `cw serve` running there?") from None

    def _decode(self, model: str, msg, n: int):
        if isinstance(msg, p.ErrorResponse) or msg.status != RequestStatus.OK:
            raise RequestFailed(msg.status, msg.message)
        info = self._models[model]
        outs = [np.frombuffer(data, dtype=s.dtype).reshape(n, *s.sample_shape)
                for data, s in zip(msg.outputs, info.outputs)]
        return outs[0] if len(outs) == 1 else outs
