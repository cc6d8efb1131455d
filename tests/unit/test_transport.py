"""The outbox's wake-ups: one per batch of sends from other threads, never a lost message."""

import os
import threading

from cw.serve.outbox import Outbox


def pending_wakeups(box: Outbox) -> int:
    try:
        return len(os.read(box.read_fd, 4096))
    except BlockingIOError:
        return 0


def put_from_another_thread(box: Outbox, item) -> None:
    t = threading.Thread(target=box.put, args=(item,))
    t.start()
    t.join()


def test_one_wakeup_until_the_owner_drains():
    box = Outbox()
    box.owner = threading.get_ident()
    try:
        for i in range(3):
            put_from_another_thread(box, i)
        assert pending_wakeups(box) == 1  # three items, one system call
        box.drain_wakeups()
        put_from_another_thread(box, 3)
        assert pending_wakeups(box) == 1  # after a drain the next put signals again
        assert list(box.queue) == [0, 1, 2, 3]
    finally:
        box.close()


def test_a_put_during_the_owners_drain_leaves_the_next_put_able_to_wake_it(monkeypatch):
    """A put that lands while the owner drains the pipe: afterwards, either its wake-up is
    still in the pipe or the flag is clear, so that a later put signals. (Clearing the flag
    before reading let the read swallow that put's wake-up with the flag left set: no put
    woke the owner again, and a client's requests waited for its poll's timeout.)"""
    box = Outbox()
    box.owner = threading.get_ident()
    read = os.read
    raced = []

    def read_with_a_put_in_between(fd, n):
        if not raced:
            raced.append(True)
            put_from_another_thread(box, "during")
        return read(fd, n)

    try:
        put_from_another_thread(box, "before")
        monkeypatch.setattr(os, "read", read_with_a_put_in_between)
        box.drain_wakeups()
        monkeypatch.setattr(os, "read", read)
        assert raced
        box.queue.clear()  # the owner's flush sends both
        put_from_another_thread(box, "after")
        assert box.signalled and pending_wakeups(box) == 1  # the owner's poll wakes for it
    finally:
        box.close()


def test_the_owner_never_signals_itself():
    box = Outbox()
    box.owner = threading.get_ident()
    try:
        box.put("x")
        assert pending_wakeups(box) == 0
        assert list(box.queue) == ["x"]
    finally:
        box.close()


def test_a_threads_own_sender_reaches_the_router_as_a_peer_of_its_own():
    """ZeroMQ and in-process alike: a sender's messages arrive under its routing id, straight
    from the thread that sends them (no poll of the dealer's owner in between)."""
    import time

    from cw.serve import protocol as p
    from cw.serve.inproc import InprocDealer, InprocHub, InprocRouter
    from cw.serve.transport import ZmqDealer, ZmqRouter

    hub = InprocHub()
    for make_router, make_dealer in (
            (lambda: ZmqRouter("tcp://127.0.0.1:*", p.Codec(p.FromWorker), p.Codec(p.ToWorker)),
             lambda a: ZmqDealer(a, p.Codec(p.ToWorker), p.Codec(p.FromWorker))),
            (lambda: InprocRouter(hub, "inproc://w", p.Codec(p.FromWorker), p.Codec(p.ToWorker)),
             lambda a: InprocDealer(hub, a, p.Codec(p.ToWorker), p.Codec(p.FromWorker)))):
        router = make_router()
        dealer = make_dealer(router.address)
        sender = dealer.sender()
        try:
            dealer.send(p.Ping(1))
            dealer.poll(0)
            thread = threading.Thread(target=lambda: [sender.send(p.Result(i, "infer", p.Status.OK,
                                                                           0)) for i in range(5)])
            thread.start()
            thread.join()
            got, deadline = [], time.monotonic() + 5
            while len(got) < 6 and time.monotonic() < deadline:
                dealer.poll(0)  # (its owner's polls send what waits for the connection)
                got += router.poll(50)
            peers = {type(m).__name__: peer for peer, m in got}
            assert len(got) == 6 and peers["Ping"] != peers["Result"] == sender.routing_id
            assert [m.id for _, m in got if isinstance(m, p.Result)] == list(range(5))
        finally:
            sender.close()
            dealer.close()
            router.close()


def test_the_lane_carries_a_senders_messages_past_zeromq_and_falls_back_when_it_cannot():
    import time

    from cw.serve import protocol as p
    from cw.serve.transport import LANE_MAX_BYTES, MultiPoller, ZmqDealer, ZmqRouter

    router = ZmqRouter("tcp://127.0.0.1:*", p.Codec(p.FromWorker), p.Codec(p.ToWorker),
                       lane=True)
    other = ZmqRouter("tcp://127.0.0.1:*", p.Codec(p.FromClient), p.Codec(p.ToClient))
    dealer = ZmqDealer(router.address, p.Codec(p.ToWorker), p.Codec(p.FromWorker))
    sender = dealer.sender()
    poller = MultiPoller([router, other])  # as the controller's loop waits on both
    try:
        assert router.lane_address.startswith("\0cw-lane-") and other.lane_address == ""
        assert not sender.use_lane("\0cw-lane-nobody-listens")  # ZeroMQ alone, then
        assert sender.use_lane(router.lane_address)
        small = p.Result(1, "infer", p.Status.OK, 0, outputs=[memoryview(b"x" * 4000)])
        big = p.Result(2, "infer", p.Status.OK, 0, outputs=[memoryview(b"y" * LANE_MAX_BYTES)])
        sender.send(small)
        sender.send(big)  # too large for a datagram: ZeroMQ takes it
        got, deadline = [], time.monotonic() + 5
        while len(got) < 2 and time.monotonic() < deadline:
            got += poller.poll(50)[0]
        assert sorted((peer, m.id) for peer, m in got) == [(sender.routing_id, 1),
                                                           (sender.routing_id, 2)]
        assert {m.id: bytes(m.outputs[0])[:1] for _, m in got} == {1: b"x", 2: b"y"}
        assert router.lane.received == 1 and sender.sent_on_lane == 1
        import socket

        from cw.serve.transport import Malformed
        stranger = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # any local process can
        stranger.sendto(b"x" * 8 + b"\xc1 not msgpack", router.lane_address)
        stranger.sendto(b"abc", router.lane_address)  # shorter than a routing id
        stranger.close()
        got, deadline = [], time.monotonic() + 5
        while len(got) < 2 and time.monotonic() < deadline:
            got += router.poll(50)
        assert [type(m) for _, m in got] == [Malformed, Malformed]
        router.lane.close()  # the router's lane is gone: sends go the ZeroMQ way again
        router.lane = None
        sender.send(small)
        got, deadline = [], time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            got += router.poll(50)
        assert [m.id for _, m in got] == [1] and sender.sent_on_lane == 1
    finally:
        sender.close()
        dealer.close()
        router.close()
        other.close()


def test_a_router_answers_a_dealer_on_its_lane_and_falls_back_when_it_cannot():
    """The controller's answers to a client on its host (ZmqDealer.open_lane, told to the
    router in a message): past ZeroMQ, packed frames too; too large, or the dealer gone,
    the ZeroMQ way; never with a key (a lane is not encrypted)."""
    import time

    from cw.serve import protocol as p
    from cw.serve.keys import CurveKey
    from cw.serve.transport import LANE_MAX_BYTES, ZmqDealer, ZmqRouter

    router = ZmqRouter("tcp://127.0.0.1:*", p.Codec(p.FromClient), p.Codec(p.ToClient))
    dealer = ZmqDealer(router.address, p.Codec(p.ToClient), p.Codec(p.FromClient))

    def poll_dealer(n):
        got, deadline = [], time.monotonic() + 5
        while len(got) < n and time.monotonic() < deadline:
            got += dealer.poll(50)
        return got

    try:
        address = dealer.open_lane()
        assert address.startswith("\0cw-lane-") and dealer.open_lane() == address
        dealer.send(p.ListModels(1, None, address))
        deadline = time.monotonic() + 5
        got = []
        while not got and time.monotonic() < deadline:
            dealer.poll(0)  # (the dealer's outbox leaves at its polls)
            got = router.poll(50)
        ((peer, hello),) = got
        assert hello.lane_address == address
        assert not router.use_peer_lane(peer, "\0cw-lane-nobody-listens")
        assert not router.use_peer_lane(peer, "\0elsewhere")  # only cw's lanes
        assert router.use_peer_lane(peer, address)
        router.send(peer, p.ErrorResponse(1, p.RequestStatus.MALFORMED, "small"))
        router.send(peer, p.InferResponse(2, p.RequestStatus.OK,
                                          outputs=[memoryview(b"y" * LANE_MAX_BYTES)]))
        router.flush()
        got = poll_dealer(2)
        assert sorted(m.request_id for m in got) == [1, 2]
        assert dealer.received_on_lane == 1 and router.sent_on_peer_lanes == 1
        router._packing_peers[peer] = None  # a peer that takes packed frames (it sent one)
        for rid in (3, 4, 5):
            router.send(peer, p.ErrorResponse(rid, p.RequestStatus.MALFORMED, "packed"))
        router.flush()
        assert sorted(m.request_id for m in poll_dealer(3)) == [3, 4, 5]
        assert dealer.received_on_lane == 2 and router.sent_on_peer_lanes == 2
        # the client's lane is gone: ZeroMQ again, the lane forgotten
        dealer._poller.unregister(dealer._lane.socket.fileno())
        dealer._lane.close()
        dealer._lane = None
        router.send(peer, p.ErrorResponse(6, p.RequestStatus.MALFORMED, "after"))
        router.flush()
        assert [m.request_id for m in poll_dealer(1)] == [6] and router.sent_on_peer_lanes == 2
        assert not router._peer_lanes.by_peer
    finally:
        dealer.close()
        router.close()
    import zmq

    key = CurveKey(*zmq.curve_keypair())
    keyed = ZmqDealer("tcp://127.0.0.1:9", p.Codec(p.ToClient), p.Codec(p.FromClient), key=key)
    assert keyed.open_lane() == ""
    keyed.close()


def test_peer_lanes_forget_a_reconnected_clients_old_id_and_the_oldest_when_full():
    from cw.serve.lane import Lane, PeerLanes

    receivers = [Lane(routed=False) for _ in range(3)]
    lanes = PeerLanes(max_lanes=2)
    try:
        assert lanes.connect(b"a", receivers[0].address)
        # the same client's lane under a new routing id (it reconnected): one entry, the new id
        assert lanes.connect(b"a2", receivers[0].address)
        assert list(lanes.by_peer) == [b"a2"] and not lanes.send(b"a", b"x")
        assert lanes.connect(b"b", receivers[1].address)
        # full: the lane connected longest ago goes, so a new client still gets one
        assert lanes.connect(b"c", receivers[2].address)
        assert list(lanes.by_peer) == [b"b", b"c"]
        assert lanes.send(b"b", b"to b") and lanes.send(b"c", b"to c")
        assert not lanes.send(b"a2", b"to a")  # (its answers take ZeroMQ)
        got = [r.socket.recv(64) if i else None for i, r in enumerate(receivers)]
        assert got[1:] == [b"to b", b"to c"]
        lanes.drop(b"b")  # and its address may be taken again
        assert lanes.connect(b"b2", receivers[1].address) and list(lanes.by_peer) == [b"c", b"b2"]
    finally:
        lanes.close()
        for r in receivers:
            r.close()
    assert not lanes.by_peer and not lanes._peer_of


def test_closing_twice_leaves_descriptors_opened_since_alone():
    """A second close closed the outbox's pipe numbers again, by then another file's (in a
    test, a ZeroMQ socket's of another thread: libzmq aborted the whole process)."""
    from cw.serve import protocol as p
    from cw.serve.transport import ZmqDealer

    box = Outbox()
    box.close()
    reused = os.pipe()  # the lowest free numbers: most likely the box's own
    try:
        box.close()
        box.put("late")  # from a thread that has not heard of the close: dropped, no error
        for fd in reused:
            os.fstat(fd)  # still open
    finally:
        for fd in reused:
            os.close(fd)
    dealer = ZmqDealer("tcp://127.0.0.1:9", p.Codec(p.ToWorker), p.Codec(p.FromWorker))
    dealer.close()
    reused = os.pipe()
    try:
        dealer.close()
        for fd in reused:
            os.fstat(fd)
    finally:
        for fd in reused:
            os.close(fd)


def test_a_dealer_holds_what_it_cannot_send_and_a_workers_keeps_only_the_newest():
    """With no connection up, a worker's messages wait in its dealer's outbox, the newest few
    only (ZeroMQ queued them with no bound for a controller that was not there, and pings and
    registrations are stale once it is back); a client's are all kept (by ZeroMQ, for the next
    connection). Both go out, in order, once a router listens at the address."""
    import socket
    import time

    from cw.serve import protocol as p
    from cw.serve.transport import ZmqDealer, ZmqRouter

    with socket.socket() as s:  # a port nothing listens on until the router binds it
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    worker_like = ZmqDealer(address, p.Codec(p.ToWorker), p.Codec(p.FromWorker), hold_unsent=4)
    client_like = ZmqDealer(address, p.Codec(p.ToWorker), p.Codec(p.FromWorker))
    router = None
    try:
        for i in range(10):
            worker_like.send(p.Ping(i))
            client_like.send(p.Ping(100 + i))
        began = time.monotonic()
        worker_like.poll(0)
        client_like.poll(0)
        assert time.monotonic() - began < 0.5  # (a blocking send waited for a connection)
        assert worker_like.dropped_unsent == 6 and len(worker_like._outbox.queue) == 4
        assert client_like.dropped_unsent == 0
        router = ZmqRouter(address, p.Codec(p.FromWorker), p.Codec(p.ToWorker))
        got, deadline = [], time.monotonic() + 10
        while len(got) < 14 and time.monotonic() < deadline:
            worker_like.poll(10)
            client_like.poll(10)
            got += router.poll(10)
        times = [m.worker_sent_ns for _, m in got]
        assert sorted(t for t in times if t < 100) == [6, 7, 8, 9]
        assert [t for t in times if t >= 100] == list(range(100, 110))
    finally:
        worker_like.close()
        client_like.close()
        if router is not None:
            router.close()


def test_wake_ends_a_poll_that_puts_do_not_end():
    """`wake` (Client.send_now): the owner, in a poll that puts do not end, is woken once for
    what is queued, and not at all when nothing is or a wake-up is already on its way."""
    box = Outbox()
    box.owner = threading.get_ident()
    box.waiting = False  # a short poll: puts do not wake it
    try:
        t = threading.Thread(target=box.wake)  # nothing queued: no system call
        t.start()
        t.join()
        put_from_another_thread(box, "x")
        assert pending_wakeups(box) == 0
        for _ in range(2):
            t = threading.Thread(target=box.wake)
            t.start()
            t.join()
        assert pending_wakeups(box) == 1 and box.signalled
        box.drain_wakeups()
        box.wake()  # the owner itself: it sends before it next waits
        assert pending_wakeups(box) == 0
    finally:
        box.close()


def test_a_dealer_woken_sends_before_its_poll_would_end():
    import time

    from cw.serve import protocol as p
    from cw.serve.transport import ZmqDealer, ZmqRouter

    router = ZmqRouter("tcp://127.0.0.1:*", p.Codec(p.FromClient), p.Codec(p.ToClient))
    dealer = ZmqDealer(router.address, p.Codec(p.ToClient), p.Codec(p.FromClient))
    done = threading.Event()

    def io_thread():  # as a client's with requests in flight, its polls 3 s long here
        while not done.is_set():
            dealer.poll(3000, woken_by_puts=False)

    polling = threading.Thread(target=io_thread)
    try:
        polling.start()
        time.sleep(0.1)  # in its poll (one may end early, at the connection's handshake)
        sent = time.monotonic()
        dealer.send(p.ListModels(1))
        dealer.wake()
        got = _collect(lambda: router.poll(20), 1, timeout_s=2.5)
        assert [m.request_id for _, m in got] == [1]
        assert time.monotonic() - sent < 2.0  # not a poll's 3 s
        done.set()
        dealer.send(p.ListModels(2))
        dealer.wake()  # (ends the thread's last poll)
        polling.join()
    finally:
        dealer.close()
        router.close()


def _interrupted_poll_s(dealer) -> float:
    """How long a 3 s poll of `dealer` lasted when `interrupt` came 0.1 s into it."""
    import time

    took = []
    for _ in range(20):  # past the polls that the connection's handshake ends early
        began = time.monotonic()
        dealer.poll(100)
        if time.monotonic() - began >= 0.09:
            break

    def io_thread():
        began = time.monotonic()
        dealer.poll(3000)
        took.append(time.monotonic() - began)

    polling = threading.Thread(target=io_thread)
    polling.start()
    time.sleep(0.1)
    dealer.interrupt()
    polling.join(timeout=5)
    return took[0]


def test_interrupt_ends_an_idle_poll_with_nothing_to_send():
    """Client.close: the I/O thread, idle in its poll, is woken to see that it is to stop
    (`wake` sends nothing and so woke nothing: closing a client took one idle poll, ~20 ms,
    every `cw infer`). Both transports."""
    from cw.serve import protocol as p
    from cw.serve.inproc import InprocDealer, InprocHub, InprocRouter
    from cw.serve.transport import ZmqDealer, ZmqRouter

    router = ZmqRouter("tcp://127.0.0.1:*", p.Codec(p.FromClient), p.Codec(p.ToClient))
    dealer = ZmqDealer(router.address, p.Codec(p.ToClient), p.Codec(p.FromClient))
    try:
        assert _interrupted_poll_s(dealer) < 2.0  # not the poll's 3 s
        assert not dealer._outbox.queue  # nothing was sent for it
    finally:
        dealer.close()
        router.close()
    hub = InprocHub()
    inproc_router = InprocRouter(hub, "c", p.Codec(p.FromClient), p.Codec(p.ToClient))
    inproc_dealer = InprocDealer(hub, "c", p.Codec(p.ToClient), p.Codec(p.FromClient))
    assert _interrupted_poll_s(inproc_dealer) < 2.0
    inproc_router.close()


def _collect(poll, n: int, timeout_s: float = 5.0) -> list:
    import time

    got, deadline = [], time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        got += poll()
    return got


def test_packed_frames_carry_a_clients_requests_and_its_answers_in_order():
    """A packing dealer's queued messages reach the router one by one, in order, also around a
    message too large to pack and a raw one sent alone; the router then packs its answers to
    that peer, and the dealer reads them one by one, in order."""
    from cw.serve import protocol as p
    from cw.serve.transport import ZmqDealer, ZmqRouter

    router = ZmqRouter("tcp://127.0.0.1:*", p.Codec(p.FromClient), p.Codec(p.ToClient))
    dealer = ZmqDealer(router.address, p.Codec(p.ToClient), p.Codec(p.FromClient))
    dealer.pack = True
    big = memoryview(bytes(p.PACK_MAX_MESSAGE_BYTES + 1))
    try:
        for i in range(100):  # queued before the owner's flush: they leave together
            dealer.send(p.InferRequest(i, "m", [big if i == 50 else memoryview(b"x")], 1))
        dealer.send_raw(b"\xc1 not msgpack")
        dealer.send(p.ListModels(100))
        dealer.poll(0)
        got = _collect(lambda: router.poll(50), 102)
        assert [m.request_id for _, m in got[:100]] + [got[101][1].request_id] == \
            list(range(101))
        assert type(got[100][1]).__name__ == "Malformed"  # alone: the others still decode
        assert len(got[50][1].inputs[0]) == len(big)
        (peer,) = {peer for peer, _ in got}
        assert peer in router._packing_peers
        for i in range(100):
            router.send(peer, p.InferResponse(i, p.RequestStatus.OK,
                                              outputs=[big if i == 50 else memoryview(b"y")]))
        router.poll(0)
        answers = _collect(lambda: dealer.poll(50), 100)
        assert [a.request_id for a in answers] == list(range(100))
        assert len(answers[50].outputs[0]) == len(big) and bytes(answers[51].outputs[0]) == b"y"
    finally:
        dealer.close()
        router.close()


def test_a_peer_that_never_packed_gets_one_message_a_frame_and_a_packed_frame_decodes():
    """At the wire: an older client (a plain DEALER) gets its answers one to a frame; once it
    sends a packed frame, what is sent to it at once comes packed."""
    import zmq

    from cw.serve import protocol as p
    from cw.serve.transport import ZmqRouter

    router = ZmqRouter("tcp://127.0.0.1:*", p.Codec(p.FromClient), p.Codec(p.ToClient))
    raw = zmq.Context.instance().socket(zmq.DEALER)
    raw.connect(router.address)
    raw.setsockopt(zmq.RCVTIMEO, 5000)
    codec = p.Codec(p.FromClient)
    to_client = p.Codec(p.ToClient)
    try:
        raw.send(codec.encode(p.ListModels(1)))
        ((peer, _),) = _collect(lambda: router.poll(50), 1)
        for i in range(3):
            router.send(peer, p.ErrorResponse(i, p.RequestStatus.MALFORMED, "x"))
        router.poll(0)
        frames = [raw.recv() for _ in range(3)]
        assert [to_client.decode(f).request_id for f in frames] == [0, 1, 2]
        raw.send(p.pack([codec.encode(p.ListModels(i)) for i in (2, 3, 4)]))
        got = _collect(lambda: router.poll(50), 3)
        assert [m.only for _, m in got] == [None] * 3 and \
            [m.request_id for _, m in got] == [2, 3, 4]
        for i in range(5, 8):
            router.send(peer, p.ErrorResponse(i, p.RequestStatus.MALFORMED, "x"))
        router.poll(0)
        frame = raw.recv()
        assert frame[0] in p.PACKED_LEADS
        assert [m.request_id for m in to_client.decode(frame)] == [5, 6, 7]
    finally:
        raw.close(linger=0)
        router.close()


def test_packing_while_other_threads_send():
    """The owner packs the outbox's head while callers append to it (a client's I/O thread and
    the threads calling `infer_async`): nothing raises, nothing is lost or reordered."""
    import sys

    from cw.serve import protocol as p
    from cw.serve.transport import ZmqDealer, ZmqRouter

    router = ZmqRouter("tcp://127.0.0.1:*", p.Codec(p.FromClient), p.Codec(p.ToClient))
    dealer = ZmqDealer(router.address, p.Codec(p.ToClient), p.Codec(p.FromClient))
    dealer.pack = True
    n, before = 200_000, sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as Python can
    try:
        for _ in range(3):  # (iterating the deque raised in about one round of two)
            sender = threading.Thread(
                target=lambda: [dealer.send(p.ListModels(i)) for i in range(n)])
            sender.start()
            while sender.is_alive():
                dealer.poll(0)
            sender.join()
            dealer.poll(0)
            got = _collect(lambda: router.poll(50), n)
            assert [m.request_id for _, m in got] == list(range(n))
    finally:
        sys.setswitchinterval(before)
        dealer.close()
        router.close()


def test_a_bad_message_in_a_packed_frame_is_malformed_alone():
    """The good messages around it are taken in, in order; the bad one keeps its bytes, from
    which the controller reads the request id to answer MALFORMED under."""
    import msgspec
    import zmq

    from cw.serve import protocol as p
    from cw.serve.transport import ZmqRouter

    router = ZmqRouter("tcp://127.0.0.1:*", p.Codec(p.FromClient), p.Codec(p.ToClient))
    raw = zmq.Context.instance().socket(zmq.DEALER)
    raw.connect(router.address)
    codec = p.Codec(p.FromClient)
    bad = msgspec.msgpack.encode({"type": "infer", "request_id": 7, "model": 5, "inputs": [],
                                  "n": 1})
    try:
        raw.send(p.pack([codec.encode(p.ListModels(6)), bad, codec.encode(p.ListModels(8))]))
        got = [m for _, m in _collect(lambda: router.poll(50), 3)]
        assert [type(m).__name__ for m in got] == ["ListModels", "Malformed", "ListModels"]
        assert got[0].request_id == 6 and got[2].request_id == 8
        assert msgspec.msgpack.decode(got[1].raw)["request_id"] == 7
        raw.send(b"\x93\xc1")  # a packed frame's header over bytes that are not msgpack
        (only,) = [m for _, m in _collect(lambda: router.poll(50), 1)]
        assert type(only).__name__ == "Malformed"
    finally:
        raw.close(linger=0)
        router.close()
