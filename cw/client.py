"""Client API for a running `cw serve`.

    from cw.client import Client
    with Client("tcp://127.0.0.1:7001") as c:
        y = c.infer("resnet50", x, slo_ms=100)            # blocking; x has a batch axis
        futures = [c.infer_async("resnet50", x) for x in xs]  # many in flight
        y = await c.ainfer("resnet50", x)                 # asyncio

A background thread owns the ZeroMQ socket; calls from any thread are safe. On the controller's
host, inputs of `SHM_MIN_BYTES` or more go through shared memory (cw/serve/shm.py) instead of
the socket, unless `shared_memory=False`.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future

import msgspec
import numpy as np

from cw.bundle import check_model_inputs
from cw.errors import CwError, UsageError
from cw.serve import protocol as p
from cw.serve.protocol import RequestStatus
from cw.serve.clock import clock_domain
from cw.serve.shm import ShmArena, remove_stale, shm_domain
from cw.serve.keys import read_key
from cw.serve.transport import Malformed, ZmqDealer, tcp_unreachable
from cw.units import format_bytes

log = logging.getLogger("cw.client")
SWEEP_S = 0.2  # how often the I/O thread looks for requests whose time to wait is up
SEND_BATCH_MS = 1  # with requests in flight, how long a request may wait for the I/O thread
# answers whose unseen latency (their receipt less the controller's latency_ns) makes up the
# figure requests carry: the most of the last 100, as the controller's completion margin takes
# the p99 of its last 100 answer delays; worked out again every 16 answers
UNSEEN_WINDOW = 100
UNSEEN_EVERY = 16
# Smaller inputs go through the socket even where shared memory is there: a slot costs a fixed
# ~6 µs to take and give back, while a few KiB more through a socket cost ~3 µs a hop (two hops
# to a worker). A 256-byte input through shared memory cost a client 57-61 µs a request against
# 53-54 through the socket, at 10,000 r/s (docs/benchmarks.md, "small inputs through the
# socket").
SHM_MIN_BYTES = 4096
_WORKER_MESSAGES = p.Codec(p.ToWorker)  # what a controller's workers' address sends


class RequestFailed(CwError):
    """The controller answered with something other than OK."""

    exit_code = 7  # 6 is the host refusing (HostError); a script tells the two apart

    def __init__(self, status: RequestStatus, message: str):
        hint = _HINTS.get(status)
        if status == RequestStatus.UNKNOWN_MODEL and "no worker serves" in message:
            # a controller just started or restarted: its workers join within seconds
            hint = "retry once its workers have joined (`cw infer --list` shows what is served)"
        super().__init__(f"request {status.name.lower()}: {message}" if message
                         else f"request {status.name.lower()}", hint)
        self.status = status
        self.reason = message  # the controller's own words

    def __reduce__(self):
        # whole across a process boundary (a process pool's worker, cw replay's senders)
        return self.__class__, (self.status, self.reason)


class NoAnswer(CwError):
    """No answer came within the request's SLO plus the client's `timeout_s`: the controller
    went away, or never was at the address. (A live controller answers every request by its
    deadline.)"""


_HINTS = {
    RequestStatus.REJECTED: "the system could not meet the SLO; retry, or ask for a longer --slo",
    RequestStatus.UNKNOWN_MODEL: "list the servable models with `cw infer --list`",
    RequestStatus.BAD_INPUT: "check the input's shape and dtype against the model",
    RequestStatus.BAD_SLO: "give an SLO like 100ms",
    RequestStatus.TIMED_OUT: "its worker ran slower than its profile said, or left; retry",
}



def _buffer(a) -> memoryview:
    """The array's bytes without a copy (the message encoder copies them once, right away)."""
    return memoryview(np.ascontiguousarray(a)).cast("B")


class SharedInputs:
    """Inputs sent in many requests but copied once (`Client.share`): each request refers to
    the same shared-memory slots instead of a copy of its own. Copying a 600 KB image per
    request took half the CPU of an open-loop load generator (docs/benchmarks.md, stop 51).
    Where the controller does not share this host's memory they go as bytes, copied once too.
    What was shared is what is sent: changing the arrays afterwards changes nothing.
    `release()` gives the slots back once the requests sent with them are answered."""

    def __init__(self, client: "Client", arrays: list, payload: list, slots: list | None):
        self.client = client
        self.arrays = arrays  # the caller's, for checks against a model's inputs
        self.n = arrays[0].shape[0]  # samples in each request
        self.payload = payload  # what each request carries: ShmRefs, or the bytes
        self._slots = slots     # the shared-memory slots to give back (None: bytes)
        self._lock = threading.Lock()
        self._in_flight = 0
        self.released = False

    def sent(self) -> None:
        with self._lock:
            if self.released:
                raise UsageError("these shared inputs were released",
                                 "share the inputs again (Client.share)")
            self._in_flight += 1

    def answered(self) -> None:
        """One request sent with them is over (the client's I/O thread)."""
        with self._lock:
            self._in_flight -= 1
            self._give_back_if_done()

    def release(self) -> None:
        """No more requests with these; their slots are free once those in flight are over."""
        with self._lock:
            self.released = True
            self._give_back_if_done()

    def _give_back_if_done(self) -> None:
        if self.released and self._in_flight == 0 and self._slots is not None:
            self.client._arena.free(self._slots)
            self._slots = None


class Client:
    """`shared_memory`: None (default) sends inputs of `SHM_MIN_BYTES` or more through shared
    memory when the controller shares this host's /dev/shm, and through the socket otherwise;
    True insists, whatever their size (an error if it cannot); False always uses the socket."""

    def __init__(self, address: str = "tcp://127.0.0.1:7001", timeout_s: float = 30.0,
                 shared_memory: bool | None = None, key_file: str | os.PathLike | None = None,
                 answer_lane: bool = False):
        """`timeout_s`: how long to wait for an answer, past a request's SLO (the controller
        answers every request by its deadline); a controller that cannot be reached at all is
        told within about a second. `key_file`: the controller's key (`cw serve keygen`), for
        one started with `--key`. `answer_lane`: on the controller's host, answers come
        through a Unix datagram socket of this client's, past ZeroMQ's I/O threads (never with
        a key: it is not encrypted). Off by default: on a 2-core machine it shortened the way
        back but made the controller's INFERs reach workers late more often
        (docs/benchmarks.md, stop 50)."""
        key = read_key(key_file) if key_file is not None else None
        self.address = address
        self.timeout_s = timeout_s
        self.shared_memory = shared_memory
        self._arena: ShmArena | None = None  # set where the controller shares /dev/shm
        self._arena_full = False  # /dev/shm ran out of room: the socket from then on
        self._hello_done = False
        self._dealer = ZmqDealer(address, p.Codec(p.ToClient), p.Codec(p.FromClient), key=key)
        self._ids = itertools.count(1)
        # request id -> (future, decode, shared-memory slots, monotonic time to give up at)
        self._futures: dict[int, tuple] = {}
        self._swept_s = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._models: dict[str, p.ModelInfo] = {}
        # the controller's policy, e.g. "batch-timeout:delay=5ms" (known after models())
        self.scheduler: str | None = None
        # workers joined and their GPUs when models() last asked (None: an older controller)
        self.workers: int | None = None
        self.gpus: int | None = None
        self._default_slo_ns = 0  # the controller's, for requests that name none
        self._max_request_bytes = 0  # the largest request it takes (0: not said)
        # it reads our CLOCK_MONOTONIC: requests say when they were made (InferRequest.sent_ns)
        self._same_clock = False
        # the latency the controller does not see (InferRequest.unseen_ns): each answer's,
        # lately, kept by the I/O thread, and the most of them, which requests carry
        self._unseen_s: collections.deque = collections.deque(maxlen=UNSEEN_WINDOW)
        self.unseen_ns = 0
        self._last_heard_s = 0.0  # when anything last came from the controller
        self._wrong_address: str | None = None  # what a controller's workers' address said
        self._after_polls: list = []  # on_polled's callables
        # (opened before the I/O thread polls: its poller takes the lane's descriptor)
        self._lane_address = self._dealer.open_lane() if answer_lane else ""
        self.answers_on_lane = False  # the controller said it sends answers to that lane
        self._thread = threading.Thread(target=self._loop, name="cw-client", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            # With requests in flight this thread wakes within a millisecond anyway (their
            # answers, or the short wait's end), and what the callers put meanwhile leaves then:
            # waking it for every request cost a client sending 10,000 a second a fifth of its
            # CPU, taken from the controller and workers on a small machine. Idle, a request
            # wakes it at once.
            busy = bool(self._futures)
            received = self._dealer.poll(SEND_BATCH_MS if busy else 20, woken_by_puts=not busy)
            if received:
                received_ns = time.monotonic_ns()
                self._last_heard_s = received_s = received_ns / 1e9
            for msg in received:
                if isinstance(msg, Malformed):
                    self._read_foreign(msg)
                    continue
                entry = self._futures.pop(msg.request_id, None)
                if entry is None:  # (or answered after the client gave up on it)
                    continue
                future, decode, slots, _ = entry
                if slots is not None:
                    self._request_over(slots)  # its input slots are free
                if type(msg) is p.InferResponse and msg.latency_ns > 0:
                    self._saw_unseen(received_s - future.sent_s - msg.latency_ns / 1e9)
                if future.done():  # cancelled by close()
                    continue
                # when this thread took it in, before the answers ahead of it in the same poll
                # were settled: a late answer's way back splits there (cw replay's client_view)
                future.received_ns = received_ns
                if decode is None:
                    future.set_result(msg)
                    continue
                try:
                    result = decode(msg)
                except _OutputsUnknown as e:
                    self._decode_after_listing(e.model, decode, msg, future)
                except Exception as e:  # RequestFailed, or outputs that do not fit the model
                    future.set_exception(e)
                else:
                    future.set_result(result)
            for after_poll in self._after_polls:
                try:
                    after_poll()
                except Exception:  # (this thread must go on answering)
                    log.exception("a client's on_polled callable failed")
            now = time.monotonic()
            if now - self._swept_s >= SWEEP_S:
                self._swept_s = now
                self._give_up(now)
        self._dealer.close()

    def _saw_unseen(self, unseen_s: float) -> None:
        """One answer's latency that the controller did not see (its way back; from another
        host also the way in): the figure later requests carry is the most of the last
        UNSEEN_WINDOW. It errs low by what a call does before its request is handed on
        (`sent_s` is taken then; ~30 µs to copy a 600 KB input into shared memory)."""
        window = self._unseen_s
        window.append(unseen_s)
        if len(window) % UNSEEN_EVERY == 0 or len(window) == UNSEEN_WINDOW:
            self.unseen_ns = max(0, int(max(window) * 1e9))

    def _give_up(self, now: float) -> None:
        """Fail the requests whose time is up with NoAnswer, so that every future ends (an
        `ainfer` or `result()` without a timeout would wait forever for a controller that
        died) and none stays in the table. Their shared-memory slots are free again: the
        controller never runs a request past its deadline, which is long gone."""
        # (a list of the items is made in one step under the GIL: other threads may add)
        for rid, (future, _, slots, give_up_at) in list(self._futures.items()):
            if give_up_at > now or self._futures.pop(rid, None) is None:
                continue
            if slots is not None:
                self._request_over(slots)
            if not future.done():
                future.set_exception(NoAnswer(
                    f"no answer from the controller at {self.address} within "
                    f"{give_up_at - future.sent_s:g} s", "is `cw serve` running there?"))

    def _request_over(self, slots) -> None:
        """A request's input slots, its own or shared ones, are no longer its."""
        if type(slots) is SharedInputs:
            slots.answered()
        else:
            self._arena.free(slots)

    def _decode_after_listing(self, model: str, decode, msg, future: Future) -> None:
        """Answered for a model this client knew nothing of when it sent the request (its
        worker joined meanwhile): ask for the model's outputs, then decode. On the I/O thread:
        the listing's answer comes through this same loop."""
        def listed(listing: p.ModelsResponse):
            self._models.update({m.model_id: m for m in listing.models})
            if model not in self._models:
                raise CwError(f"model '{model}' answered, and then was no longer served",
                              "send the request again")
            return decode(msg)

        def settle(listing_future: Future) -> None:
            error = listing_future.exception()
            if future.done():
                return
            if error is None:
                future.set_result(listing_future.result())
            else:
                future.set_exception(error)

        self._send(lambda rid: p.ListModels(rid, [model]), listed).add_done_callback(settle)

    def _read_foreign(self, msg: Malformed) -> None:
        """A message that is no answer to a client: a controller's workers' address says
        where clients connect instead (its Goodbye)."""
        try:
            goodbye = _WORKER_MESSAGES.decode(msg.raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        if isinstance(goodbye, p.Goodbye):
            self._wrong_address = goodbye.reason

    def _send(self, make, decode=None, slots=None, slo_ns: int | None = None) -> Future:
        """Send `make(request id)`; the future gets the response, or `decode(response)`, set by
        the I/O thread, which also frees the request's shared-memory `slots`, and fails it with
        NoAnswer `timeout_s` past its SLO (`slo_ns`, see `_patience_s`). (A dict's get/set/pop
        are atomic: no lock on this per-request path.)"""
        if self._stop.is_set():  # (nothing would send it: the request would wait it out)
            self._not_sent(slots)
            raise UsageError(f"this client of {self.address} is closed",
                             "make a new Client (or use it inside its `with` block)")
        rid = next(self._ids)
        future: Future = Future()
        future.sent_s = time.monotonic()
        self._futures[rid] = (future, decode, slots,
                              future.sent_s + self._patience_s(slo_ns))
        try:
            self._dealer.send(make(rid))
        except BaseException:
            # not sent: its caller hears why now, not as NoAnswer past its SLO, and its input
            # slots (shared ones: its count in them) are free at once
            if self._futures.pop(rid, None) is not None:
                self._not_sent(slots)
            raise
        return future

    def _not_sent(self, slots) -> None:
        if slots is not None:
            self._request_over(slots)

    def _patience_s(self, slo_ns: int | None) -> float:
        """How long to wait for an answer: `timeout_s` past the SLO (0: the controller's
        default; a minute from an older controller, which does not say it; None: not a request
        to serve)."""
        slo_s = 0.0 if slo_ns is None else (slo_ns or self._default_slo_ns or 60 * 10**9) / 1e9
        return slo_s + self.timeout_s

    def send_now(self) -> None:
        """Have the I/O thread send the requests queued so far now. With requests in flight it
        sends only every SEND_BATCH_MS otherwise (waking it for each request costs CPU): a
        caller that has just sent a burst saves them that wait with one wake-up."""
        self._dealer.wake()

    def on_polled(self, after_poll):
        """Call `after_poll()` on the I/O thread after each of its polls, once the answers that
        poll took in are settled (at least every millisecond while requests are in flight);
        returns a callable that stops it. A load generator's futures' callbacks can then note
        answers, and `after_poll` wake its sender once per poll: woken by the first answer's
        callback, the sender took the GIL from this thread while it still settled the
        others."""
        # a new list each time: the I/O thread goes on through the one it holds
        self._after_polls = [*self._after_polls, after_poll]

        def stop() -> None:
            self._after_polls = [f for f in self._after_polls if f is not after_poll]
        return stop

    def close(self) -> None:
        self._stop.set()
        self._dealer.interrupt()  # else its I/O thread sees the stop when an idle poll ends
        self._thread.join(timeout=2)
        with self._lock:
            for f, _, _, _ in list(self._futures.values()):
                f.cancel()
            self._futures.clear()
        if self._arena is not None:
            self._arena.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def uses_shared_memory(self) -> bool:
        """Whether inputs (of `SHM_MIN_BYTES` or more, unless `shared_memory=True`) go through
        shared memory (known after the first call)."""
        return self._arena is not None and not self._arena_full

    def inputs_via(self, nbytes: int) -> str:
        """How a request's inputs of `nbytes` in all travel: "shared memory" or "socket"
        (known after the first call)."""
        by_reference = self.uses_shared_memory and (self.shared_memory or
                                                     nbytes >= SHM_MIN_BYTES)
        return "shared memory" if by_reference else "socket"

    # --- API -----------------------------------------------------------------------------
    def models(self, only: Iterable[str] | None = None) -> list[p.ModelInfo]:
        """The servable models: all of them, or those of the ids in `only` that are."""
        only = None if only is None else list(only)
        response = self._wait(self._send(lambda rid: p.ListModels(rid, only,
                                                                  self._lane_address)))
        found = {m.model_id: m for m in response.models}
        if only is None:
            self._models = found
        else:
            self._models.update(found)
        self.scheduler = response.scheduler or None
        self.workers = response.workers or None
        self.gpus = response.gpus or None
        self._default_slo_ns = response.default_slo_ns
        self._max_request_bytes = response.max_request_bytes
        self.answers_on_lane = response.answer_lane
        if not self._hello_done:
            self._hello_done = True
            self._same_clock = bool(response.clock_domain) and \
                response.clock_domain == clock_domain()
            self._choose_transfer(response.shm_domain)
            # requests that leave together go in one frame, and their answers come so
            self._dealer.pack = response.packed_frames
        return response.models

    def _choose_transfer(self, controller_domain: str) -> None:
        if self.shared_memory is False:
            return
        shared = bool(controller_domain) and controller_domain == shm_domain()
        if not shared:
            if self.shared_memory:
                raise CwError(f"the controller at {self.address} does not share this host's "
                              "shared memory (/dev/shm)",
                              "run the client on the controller's host, or pass "
                              "shared_memory=False")
            return
        remove_stale()
        self._arena = ShmArena()

    def _payload(self, inputs):
        """The inputs as sent: shared-memory references where possible, else the bytes; and
        the slots to free when the response comes."""
        if not self._hello_done:
            self.models(())  # learns whether the controller shares this host (once)
        if self._arena is not None and not self._arena_full and (
                self.shared_memory or sum(a.nbytes for a in inputs) >= SHM_MIN_BYTES):
            try:
                refs = self._arena.put(inputs)
                return refs, refs
            except OSError as e:
                if self.shared_memory:
                    raise CwError(f"no room for inputs in shared memory: {e}",
                                  "free space in /dev/shm, or pass shared_memory=False") from None
                log.warning("shared memory unusable (%s): sending inputs through the socket", e)
                self._arena_full = True  # its segments stay: requests in flight use them
        buffers = [_buffer(a) for a in inputs]
        size = sum(b.nbytes for b in buffers)
        # (the controller would drop the connection, and the request would go unanswered)
        if self._max_request_bytes and size + REQUEST_OVERHEAD_BYTES > self._max_request_bytes:
            raise UsageError(f"a request of {format_bytes(size)} is more than the "
                             f"{format_bytes(self._max_request_bytes)} the controller at "
                             f"{self.address} takes", "send fewer samples per request")
        return buffers, None

    def infer_async(self, model: str, x, slo_ms: float | None = None) -> Future:
        """A future of the output array(s). `x` is an array with a batch axis (for a model with
        several inputs, a list of arrays in the model's order or a dict by input name). An input
        the model cannot take raises a UsageError at once, saying how to fix it (the controller
        would answer BAD_INPUT)."""
        called_ns = time.monotonic_ns()  # the SLO runs from here, where the controller can tell
        slo_ns = _slo_ns(slo_ms)
        info = self._info(model)
        shared = self._own_shared(x)
        inputs = shared.arrays if shared is not None else _input_list(model, x, info)
        if info is not None:
            check_model_inputs(f"model '{model}'", info.inputs, info.batch_sizes, inputs)
        n = inputs[0].shape[0]
        if shared is not None:
            shared.sent()
            payload, slots = shared.payload, shared
        else:
            payload, slots = self._payload(inputs)
        sent_ns = called_ns if self._same_clock else 0
        return self._send(lambda rid: p.InferRequest(rid, model, payload, n, slo_ns, sent_ns,
                                                     self.unseen_ns),
                          lambda msg: self._decode(model, msg, n), slots, slo_ns)

    def infer(self, model: str, x, slo_ms: float | None = None):
        return self._wait(self.infer_async(model, x, slo_ms), _slo_ns(slo_ms))

    async def ainfer(self, model: str, x, slo_ms: float | None = None):
        return await asyncio.wrap_future(self.infer_async(model, x, slo_ms))

    def infer_response(self, model: str, x, slo_ms: float | None = None) -> p.InferResponse:
        """The raw response (status, latency, batch size) without raising on failure."""
        return self._wait(self.infer_response_async(model, x, slo_ms), _slo_ns(slo_ms))

    def infer_response_async(self, model: str, x, slo_ms: float | None = None) -> Future:
        """A future of the raw response, never of an exception but NoAnswer (no answer within
        the SLO plus `timeout_s`): for load generators, which count statuses and need not turn
        outputs into arrays. (An SLO ≤ 0 raises at once.)"""
        called_ns = time.monotonic_ns()
        slo_ns = _slo_ns(slo_ms)
        _check_model_id(model)
        if type(x) is SharedInputs:  # (the load generators' way: no copy, no checks)
            self._own_shared(x).sent()
            payload, slots, n = x.payload, x, x.n
        else:
            inputs = _input_list(model, x, self._info(model) if isinstance(x, dict) else None)
            payload, slots = self._payload(inputs)
            n = inputs[0].shape[0]
        sent_ns = called_ns if self._same_clock else 0
        return self._send(lambda rid: p.InferRequest(rid, model, payload, n, slo_ns, sent_ns,
                                                     self.unseen_ns), None, slots, slo_ns)

    def share(self, x, model: str | None = None) -> SharedInputs:
        """`x` (as `infer` takes it; `model` for inputs given by name) copied once, to send in
        many requests: `infer*(model, shared)` then sends no copy of its own. For a caller that
        sends the same inputs again and again, a load generator above all."""
        if self._stop.is_set():
            raise UsageError(f"this client of {self.address} is closed",
                             "make a new Client (or use it inside its `with` block)")
        info = self._info(model) if model is not None else None
        if isinstance(x, dict) and info is None:
            raise UsageError("inputs given by name need their model to share them",
                             "call share(x, model=...) with the model's id")
        inputs = [np.ascontiguousarray(a) for a in _input_list(model or "(shared)", x, info)]
        if not inputs or not all(isinstance(a, np.ndarray) and a.ndim >= 1 for a in inputs):
            raise UsageError("inputs to share are numpy arrays with a batch axis",
                             "give an array, or a list or dict of arrays")
        if info is not None:
            check_model_inputs(f"model '{model}'", info.inputs, info.batch_sizes, inputs)
        payload, slots = self._payload(inputs)
        if slots is None:  # through the socket: bytes of their own, so later changes do not show
            payload = [bytes(b) for b in payload]
        return SharedInputs(self, inputs, payload, slots)

    def _own_shared(self, x) -> SharedInputs | None:
        """`x` if it is shared inputs (this client's: another's slots are not its to count);
        else None."""
        if type(x) is not SharedInputs:
            return None
        if x.client is not self:
            raise UsageError("these inputs were shared by another client",
                             "share them with the client that sends them")
        return x

    # --- helpers -------------------------------------------------------------------------
    def _info(self, model: str) -> p.ModelInfo | None:
        """The model's description, fetched once (not from the I/O thread) for its output
        shapes and dtypes; unknown, it is asked again and the controller says UNKNOWN_MODEL."""
        _check_model_id(model)
        if model not in self._models:
            self.models([model])
        return self._models.get(model)

    def _wait(self, future: Future, slo_ns: int | None = None):
        """The future's result, waited for `timeout_s` past the request's SLO (`_patience_s`),
        saying why when it can (wrong address, key, nothing listening) before that."""
        patience_s = self._patience_s(slo_ns)
        deadline = future.sent_s + patience_s
        probed = False
        while True:
            left = deadline - time.monotonic()
            try:
                wait = min(left, threading.TIMEOUT_MAX) if probed else min(left, 1.0)
                return future.result(timeout=max(0.0, wait))  # (an absurd SLO: a finite wait)
            except TimeoutError:
                if self._wrong_address is not None:
                    raise CwError(f"{self.address} is not a cw controller's clients' address: "
                                  f"{self._wrong_address}",
                                  "give the clients' address: cw serve prints both, and 7001 "
                                  "is the default port") from None
                if time.monotonic() >= deadline:  # (the I/O thread fails it about now)
                    raise NoAnswer(f"no answer from the controller at {self.address} within "
                                   f"{patience_s:g} s", "is `cw serve` running there?") from None
                probed = True  # a second without an answer: is anything there at all?
                if time.monotonic() - self._last_heard_s < 1.0:
                    continue  # it answers other requests: this one is just slow
                refused = self._dealer.handshake_problem
                if refused is not None:
                    raise CwError(f"the controller at {self.address} {refused}",
                                  "give every client, worker and the controller the same key "
                                  "file (`cw serve keygen`), or none") from None
                why = tcp_unreachable(self.address)
                if why is not None:
                    raise CwError(f"cannot reach the controller at {self.address}: {why}",
                                  "start it with `cw serve`, or give the address it listens "
                                  "on for clients") from None

    def _decode(self, model: str, msg, n: int):
        if isinstance(msg, p.ErrorResponse) or msg.status != RequestStatus.OK:
            raise RequestFailed(msg.status, msg.message)
        info = self._models.get(model)
        if info is None:  # it became servable after this client asked for it
            raise _OutputsUnknown(model)
        outs = [np.frombuffer(data, dtype=s.dtype).reshape(n, *s.sample_shape)
                for data, s in zip(msg.outputs, info.outputs)]
        return outs[0] if len(outs) == 1 else outs


class _OutputsUnknown(Exception):
    """An answer for a model whose outputs this client has not been told (yet)."""

    def __init__(self, model: str):
        super().__init__(model)
        self.model = model


REQUEST_OVERHEAD_BYTES = 4096  # a request's fields besides its inputs, generously


def _check_model_id(model) -> None:
    # (a non-string id reached the controller as a malformed message, which no request id
    # can answer: the client waited out its timeout)
    if not isinstance(model, str) or not model:
        raise UsageError(f"model {model!r} is not a model id", "give the id as a string, e.g. "
                         "'resnet50' (Client.models() lists them)")


def _input_list(model: str, x, info: p.ModelInfo | None) -> list:
    """`x` as the list of the model's inputs in order: an array, a list or tuple of arrays, or
    a dict by input name (which needs the model's description)."""
    if isinstance(x, np.ndarray):
        return [x]
    if isinstance(x, (list, tuple)):
        return list(x)
    if isinstance(x, dict):
        if info is None:
            raise UsageError(f"inputs for model '{model}' given by name, but the controller "
                             "does not know the model", "check the id: Client.models() lists "
                             "the servable ones")
        names = [t.name for t in info.inputs]
        if set(x) != set(names):
            raise UsageError(f"inputs for model '{model}' named {sorted(x)}; it takes "
                             f"{names}", "give one array per input name")
        return [x[name] for name in names]
    raise UsageError(f"input for model '{model}' is a {type(x).__name__}",
                     "give a numpy array with a batch axis, or for several inputs a list of "
                     "arrays or a dict by input name")


def _slo_ns(slo_ms: float | None) -> int:
    if slo_ms is None:
        return 0  # the controller's default SLO
    if isinstance(slo_ms, bool) or not isinstance(slo_ms, (int, float, np.number)):
        raise UsageError(f"slo_ms={slo_ms!r} is not a number of milliseconds",
                         "e.g. slo_ms=100 for 100 ms")
    if slo_ms > 0:  # (NaN is not)
        if slo_ms * 1_000_000 >= 2**63:  # inf too: no message could carry it
            raise UsageError(f"SLO {slo_ms:g} ms is absurd", "give one in milliseconds, e.g. 100")
        return max(1, int(slo_ms * 1_000_000))  # a 0 on the wire would mean the default
    raise UsageError(f"SLO {slo_ms} ms must be positive", "omit it for the controller's default")
