"""A request's SLO runs from when its client sent it, where the client reads the controller's
clock: time it spent queued before the controller's loop took it in (a busy loop, a busy
client) is the client's time too. Before, the SLO ran from intake, and a saturated controller
counted answers "in SLO" that its clients got late (on 2 cores, a 10 ms Fig. 5 replay: 2,269
in SLO by the controller's count, 31 by the clients')."""

from __future__ import annotations

import threading
import time

import msgspec
import zmq

from cw.serve import protocol as p
from cw.serve.clock import clock_domain
from cw.serve.controller import Controller, ControllerConfig
from cw.serve.inproc import InprocDealer, InprocHub, InprocRouter
from cw.serve.protocol import RequestStatus
from cw.serve.scheduler import make_scheduler
from cw.serve.telemetry import TelemetryLog

MS = 1_000_000
NOW = 50_000 * MS  # the fake clock's instant for every step
TENSOR = p.TensorInfo("x", "float32", [2], 8)
MODEL = p.ModelInfo("m", "m", 1000, 1, [1, 2], [TENSOR], [TENSOR], 1 * MS, {1: MS, 2: MS},
                    "profile")


def _controller(scheduler: str = "clockwork"):
    hub = InprocHub()
    workers = InprocRouter(hub, "w", p.Codec(p.FromWorker), p.Codec(p.ToWorker))
    clients = InprocRouter(hub, "c", p.Codec(p.FromClient), p.Codec(p.ToClient))
    worker = InprocDealer(hub, "w", p.Codec(p.ToWorker), p.Codec(p.FromWorker))
    client = InprocDealer(hub, "c", p.Codec(p.ToClient), p.Codec(p.FromClient))
    ctl = Controller(ControllerConfig(), workers, clients, make_scheduler(scheduler),
                     TelemetryLog(keep=True))
    worker.send(p.Register(p.PROTOCOL_VERSION, "w", "simulated", True,
                           [p.DeviceDesc(0, "sim", 16 << 20, 64)], [MODEL], NOW))
    ctl.step(NOW)
    assert ctl.workers and ctl.scheduler.models().keys() == {"m"}
    return ctl, client


def _infer(request_id: int, slo_ms: int, sent_ns: int) -> p.InferRequest:
    return p.InferRequest(request_id, "m", [b"\0" * 8], 1, slo_ms * MS, sent_ns)


def test_the_slo_runs_from_the_clients_send_and_a_request_that_waited_it_out_is_rejected():
    ctl, client = _controller()
    client.send(_infer(1, 10, NOW - 3 * MS))   # waited 3 ms to be taken in
    client.send(_infer(2, 10, NOW - 12 * MS))  # waited past its SLO
    client.send(_infer(3, 10, NOW + 5 * MS))   # a clock read just after ours: no earlier
    client.send(_infer(4, 10, 0))              # a client that cannot say
    ctl.handle(NOW, ctl._poller.poll(0))
    pending = {r.client_request_id: r for r in ctl.pending.values()}
    assert pending[1].arrival_ns == NOW - 3 * MS and pending[1].deadline_ns == NOW + 7 * MS
    assert pending[3].arrival_ns == NOW and pending[4].arrival_ns == NOW
    assert 2 not in pending
    rejected = [m for m in client.poll(0) if m.request_id == 2]
    assert rejected[0].status == RequestStatus.REJECTED
    assert "waited 12 ms to be taken in, past its 10 ms SLO" in rejected[0].message
    assert rejected[0].latency_ns == 12 * MS  # from its send, as the client counts it
    # counted as any answer, in telemetry and metrics; every client wait observed
    rows = ctl.telemetry.requests
    assert [(r.status, r.arrival_ns, r.deadline_met) for r in rows] == [
        ("REJECTED", NOW - 12 * MS, False)]
    assert ctl.metrics.requests["REJECTED"] == 1
    assert sum(ctl.metrics.intake.counts) == 3 and ctl.metrics.intake.max_ns == 12 * MS
    assert 'cw_controller_intake_seconds_bucket{le="+Inf"} 3' in ctl.metrics.render()


def test_the_scheduler_plans_for_the_way_back_its_client_has_seen():
    """With `clockwork:way-back=1`, a client that says its answers lately took 3 ms more than
    the controller saw (InferRequest.unseen_ns: their way back) has its requests planned to be
    answered 3 ms before the deadline; the request's own deadline, which telemetry judges by,
    stays. At most half the SLO comes off; a negative figure counts as none. Without the
    setting (the default) the figure is carried but not used."""
    for spec, off in (("clockwork:way-back=1", {1: 3, 2: 5, 3: 0, 4: 0}),
                      ("clockwork", {1: 0, 2: 0, 3: 0, 4: 0})):
        ctl, client = _controller(spec)
        for request_id, unseen_ms in ((1, 3), (2, 8), (3, 0), (4, -5)):
            client.send(msgspec.structs.replace(_infer(request_id, 10, NOW),
                                                unseen_ns=unseen_ms * MS))
        ctl.handle(NOW, ctl._poller.poll(0))
        planned = {ctl.pending[rid].client_request_id: deadline
                   for deadline, rid, _ in ctl.scheduler.queues["m"]}
        assert planned == {i: NOW + (10 - ms) * MS for i, ms in off.items()}, spec
        assert all(r.deadline_ns == NOW + 10 * MS for r in ctl.pending.values())


def test_way_back_2_plans_by_the_earlier_deadline_only_where_it_can_be_met():
    """`clockwork:way-back=2`: where the deadline less the way back cannot be met (a cold model
    needs ~4 ms: LOAD, EXEC and the completion margin), the request is planned by its deadline
    itself and served, not rejected as `way-back=1` does; where it can, as `way-back=1`."""
    for spec, planned_ms, rejected in (("clockwork:way-back=1", {2: 5}, [1]),
                                       ("clockwork:way-back=2", {1: 6, 2: 5}, [])):
        ctl, client = _controller(spec)
        for request_id, unseen_ms in ((1, 3), (2, 1)):  # 6 ms SLOs: 3 or 5 ms left to plan by
            client.send(msgspec.structs.replace(_infer(request_id, 6, NOW),
                                                unseen_ns=unseen_ms * MS))
        ctl.handle(NOW, ctl._poller.poll(0))
        planned = {ctl.pending[rid].client_request_id: deadline
                   for deadline, rid, _ in ctl.scheduler.queues.get("m", [])}
        assert planned == {i: NOW + ms * MS for i, ms in planned_ms.items()}, spec
        answered = [m for m in client.poll(0) if isinstance(m, p.InferResponse)]
        assert [m.request_id for m in answered if m.status == RequestStatus.REJECTED] == \
            rejected, spec


def test_a_client_tells_the_controller_what_its_answers_way_back_took():
    """Answers that reached the client ~5 ms after the controller's own latency_ns (1 ms):
    the client's later requests say ~4 ms unseen, its first ones none."""
    import numpy as np

    from cw.client import UNSEEN_EVERY, Client

    address, got, close = _fake_controller(clock_domain(), delay_s=0.005)
    try:
        with Client(address, timeout_s=5, shared_memory=False) as client:
            for _ in range(UNSEEN_EVERY + 1):
                client.infer_response("m", np.zeros((1, 2), np.float32), slo_ms=100)
    finally:
        close()
    unseen = [msg.unseen_ns for msg, _ in got]
    assert unseen[:UNSEEN_EVERY] == [0] * UNSEEN_EVERY
    # (5 ms of the fake's sleep, less its claimed 1 ms, and the way back; a busy machine more)
    assert 3.9 * MS < unseen[-1] < 100 * MS, unseen[-1] / MS


def test_a_controller_on_another_clock_takes_no_clients_send_time():
    """A caller driving the controller with a clock of its own (a simulation) clears its
    clock domain: a client's CLOCK_MONOTONIC would mean nothing to it."""
    ctl, client = _controller()
    ctl.clock_domain = ""
    client.send(_infer(1, 10, NOW - 12 * MS))
    ctl.handle(NOW, ctl._poller.poll(0))
    (pending,) = ctl.pending.values()
    assert pending.arrival_ns == NOW and sum(ctl.metrics.intake.counts) == 0


def _fake_controller(domain: str, answer: bool = True, delay_s: float = 0.0,
                     hold: threading.Event | None = None):
    """A ZeroMQ router that lists one model with `domain` and keeps the requests it gets (with
    the time each came), answering them unless `answer` is False; with `delay_s`, that much
    later, and saying the request took 1 ms (as if its answer's way back took the rest); with
    `hold`, not before that event is set."""
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    decode, encode = p.Codec(p.FromClient), p.Codec(p.ToClient)
    got: list = []
    stop = threading.Event()

    def serve():
        held: list = []
        while not stop.is_set():
            if held and hold.is_set():
                for peer, reply in held:
                    router.send_multipart([peer, encode.encode(reply)])
                held.clear()
            if router.poll(1 if held else 20):
                peer, data = router.recv_multipart()
                msg = decode.decode(data)
                if isinstance(msg, p.ListModels):
                    reply = p.ModelsResponse(msg.request_id, [MODEL], clock_domain=domain)
                else:
                    got.append((msg, time.monotonic_ns()))
                    if not answer:
                        continue
                    if delay_s:
                        time.sleep(delay_s)
                    reply = p.InferResponse(msg.request_id, RequestStatus.REJECTED, "test",
                                            latency_ns=MS if delay_s else 0)
                    if hold is not None and not hold.is_set():
                        held.append((peer, reply))
                        continue
                router.send_multipart([peer, encode.encode(reply)])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def close():
        stop.set()
        thread.join()
        router.close()

    return f"tcp://127.0.0.1:{port}", got, close


def test_a_client_on_the_controllers_clock_says_when_it_sent_and_one_elsewhere_does_not():
    import numpy as np

    from cw.client import Client

    for domain, same in ((clock_domain(), True), ("another-host/none", False)):
        address, got, close = _fake_controller(domain)
        try:
            with Client(address, timeout_s=5, shared_memory=False) as client:
                before = time.monotonic_ns()
                client.infer_response("m", np.zeros((1, 2), np.float32), slo_ms=10)
                client.infer_response_async("m", np.zeros((1, 2), np.float32),
                                            slo_ms=10).result(5)
                after = time.monotonic_ns()
        finally:
            close()
        assert len(got) == 2
        for msg, _ in got:
            assert (before <= msg.sent_ns <= after) if same else msg.sent_ns == 0, (domain, msg)


def test_requests_leave_within_milliseconds_while_others_are_in_flight():
    """A client with requests in flight is not woken for each new one (that cost a fifth of its
    CPU at 10,000 r/s), but its I/O thread still sends them within about a millisecond: none
    waits for an answer to come, nor for the long idle poll."""
    import numpy as np

    from cw.client import Client

    address, got, close = _fake_controller(clock_domain(), answer=False)
    try:
        with Client(address, timeout_s=5, shared_memory=False) as client:
            x = np.zeros((1, 2), np.float32)
            for _ in range(20):
                called = time.monotonic_ns()
                client.infer_response_async("m", x, slo_ms=60_000)  # never answered
                deadline = time.monotonic() + 5
                while len(got) < _ + 1 and time.monotonic() < deadline:
                    time.sleep(0.0005)
                assert len(got) == _ + 1
                # (1 ms of batching, and the scheduling of two busy threads on a busy machine)
                assert got[-1][1] - called < 15 * MS, (got[-1][1] - called) / MS
    finally:
        close()


def test_on_polled_runs_on_the_io_thread_after_that_polls_answers_are_settled():
    """Client.on_polled: called on the I/O thread after its answers' callbacks (each future
    says when that thread took it in: `received_ns`), never again once stopped; one that
    raises is logged and the client goes on answering."""
    import numpy as np

    from cw.client import Client

    # answers wait until every callback is added: one added to a future already answered runs
    # at once on this thread (seen with the CPU loaded), not on the I/O thread this checks
    answers_may_go = threading.Event()
    address, got, close = _fake_controller(clock_domain(), hold=answers_may_go)
    events: list = []
    try:
        with Client(address, timeout_s=5, shared_memory=False) as client:
            client.models()

            def polled():
                events.append(("polled", threading.get_ident()))

            def broken():
                raise RuntimeError("a hook that fails")

            stop_polled = client.on_polled(polled)
            stop_broken = client.on_polled(broken)
            x = np.zeros((1, 2), np.float32)
            futures = []
            for _ in range(10):
                f = client.infer_response_async("m", x, slo_ms=60_000)
                f.add_done_callback(lambda f: events.append(
                    ("answered", threading.get_ident(), time.monotonic_ns(), f)))
                futures.append(f)
            answers_may_go.set()
            for f in futures:
                assert f.result(timeout=5).status == RequestStatus.REJECTED
            deadline = time.monotonic() + 5
            while events[-1][0] != "polled" and time.monotonic() < deadline:
                time.sleep(0.001)
            stop_polled()
            stop_broken()
            time.sleep(0.05)  # (an idle client polls every 20 ms)
            calls = sum(e[0] == "polled" for e in events)
            time.sleep(0.05)
            assert sum(e[0] == "polled" for e in events) == calls
            # still answering after the failing hook
            assert client.infer_response("m", x, slo_ms=60_000).status == RequestStatus.REJECTED
    finally:
        close()
    answered = [i for i, e in enumerate(events) if e[0] == "answered"]
    assert len(answered) == 10
    io_threads = {e[1] for e in events}
    assert len(io_threads) == 1 and threading.get_ident() not in io_threads
    last_polled = max(i for i, e in enumerate(events) if e[0] == "polled")
    assert last_polled > answered[-1]  # every answer settled before a call
    for i in answered:
        _, _, done_ns, f = events[i]
        assert 0 < f.received_ns <= done_ns
