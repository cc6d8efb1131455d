"""Message transport: ZeroMQ (ROUTER/DEALER over TCP); its in-process twin with the same
interface, for tests, is cw/serve/inproc.py. Components receive an endpoint; they never create
sockets.

- `Router` (server side: the controller's worker and client sockets): many peers, each message
  tagged with the peer's identity.
- `Dealer` (a worker or client connecting to the controller).

`send` may be called from any thread: messages go to an outbox (cw/serve/outbox.py) and the owner
thread's next `poll` writes them (ZeroMQ sockets must only be used by one thread; a pipe wakes a
waiting poll).
A thread on a latency-critical path (a worker's EXEC completions) takes a `sender()` of its own
instead: a second connection to the same address that it sends on directly, with no hand-over
to the poll loop. The receiving router sees it as another peer; its `routing_id` is announced
so the receiver can tell whose it is.

On one host a router may also open a *lane* (`ZmqRouter(..., lane=True)`, cw/serve/lane.py): a
Unix datagram socket that senders told its `lane_address` send to directly, past ZeroMQ's I/O
threads. `poll` decodes with the endpoint's one decoder (cw/serve/framing.py); what does not
decode comes back as `Malformed`, so the component can answer with an error and keep serving.

With a key (`CurveKey`, cw/serve/keys.py), every connection is encrypted and authenticated
(ZeroMQ's CURVE): a router takes only peers that hold the same key, and a dealer only talks to a
router that does. A dealer watches its handshakes, so that a missing or wrong key is said
(`handshake_problem`) rather than heard as silence.
"""

from __future__ import annotations

import os
import socket
import threading

from cw.serve.framing import Alone, Malformed, decode_frame, packed, take_pack
from cw.serve.keys import CurveKey, curve_client, curve_server, handshake_words
from cw.serve.lane import LANE_MAX_BYTES, ROUTING_ID_BYTES, Lane, LaneSender, PeerLanes
from cw.serve.outbox import Outbox
from cw.serve.protocol import (PACK_MAX_BYTES, PACK_MAX_MESSAGE_BYTES, PACK_MAX_MESSAGES, Codec,
                               Packed)

# re-exported: what poll returns, and the lane's bound, belong to this module's interface
__all__ = ["LANE_MAX_BYTES", "Malformed", "MultiPoller", "ZmqDealer", "ZmqRouter", "ZmqSender",
           "tcp_unreachable"]


def tcp_unreachable(address: str) -> str | None:
    """Why nothing can answer at a tcp:// address (nothing listens, no such host), or None
    when that cannot be told (it listens, a timeout, another transport). ZeroMQ retries a
    refused connection without saying so: a client or worker would only hear silence."""
    if not address.startswith("tcp://"):
        return None
    host, _, port = address[len("tcp://"):].rpartition(":")
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return None
    except ConnectionRefusedError:
        return "nothing listens there (connection refused)"
    except socket.gaierror:
        return f"no such host '{host}'"
    except (OSError, ValueError):
        return None


def _port_problem(address: str) -> str | None:
    """ZeroMQ takes a tcp port modulo 65536: tcp://*:70000 listened on 4464 without a word."""
    if not address.startswith("tcp://"):
        return None
    port = address.rpartition(":")[2]
    if port.isdigit() and int(port) > 65535:
        return f"port {port} is out of range (ports are 1..65535)"
    return None


MAX_PACKING_PEERS = 1 << 16  # a router remembers this many peers that take packed frames


# --- ZeroMQ -----------------------------------------------------------------------------------

class _ZmqEndpoint:
    """Socket setup, the outbox, and the poll loop shared by both socket kinds."""

    _blocked = False  # (dealers) the outbox waits for a connection: poll wakes when one is up
    takes_packed_frames = True  # its receive unpacks them (protocol.pack)

    def __init__(self, kind: str, address: str, decode: Codec, encode: Codec, context=None,
                 key: CurveKey | None = None):
        import zmq

        self._zmq = zmq
        self.context = context or zmq.Context.instance()
        self.key = key
        self.socket = self.context.socket(getattr(zmq, kind))
        for option, value in ((zmq.LINGER, 0), (zmq.SNDHWM, 0), (zmq.RCVHWM, 0)):
            self.socket.setsockopt(option, value)
        self._monitor = None
        self.handshake_problem: str | None = None  # (dealers) why the last handshake failed
        self._configure(zmq)
        problem = _port_problem(address)
        if problem is None:
            try:
                self._attach(address)
            except zmq.ZMQError as e:
                problem = zmq.strerror(e.errno)  # (str(e) repeats the address in newer pyzmq)
        if problem is not None:
            self.socket.close()
            from cw.errors import UsageError
            raise UsageError(f"cannot {self._verb} {address}: {problem}", self._hint)
        self._in, self._out = decode, encode
        # pyzmq's Python-level send and send_multipart cost ~4x the send itself (flag enums,
        # argument checks): at thousands of messages a second that is the controller's largest
        # single cost, so frames go straight to the Cython base class's send.
        base = super(zmq.Socket, self.socket)
        self._send_frame, self._recv_frame, self._get_option = base.send, base.recv, base.get
        self._rcvmore = int(zmq.RCVMORE)
        self._more = int(zmq.SNDMORE | zmq.NOBLOCK)
        self._last = int(zmq.NOBLOCK)  # also the flags of a non-blocking receive
        self._outbox = Outbox()
        self._poller = zmq.Poller()
        self._poller.register(self.socket, zmq.POLLIN)
        self._poller.register(self._outbox.read_fd, zmq.POLLIN)
        if self._monitor is not None:
            self._poller.register(self._monitor, zmq.POLLIN)

    def _poll_socket(self, timeout_ms: int, receive, woken_by_puts: bool = True) -> list:
        """Flush the outbox, wait for input (or a wake-up), then receive all that is there.
        `woken_by_puts=False`: other threads' puts do not end this wait (a short one), and go
        out at its end."""
        box = self._outbox
        box.owner = threading.get_ident()
        self._flush()
        if woken_by_puts and box.wait_begins():
            self._flush()
        events = dict(self._poller.poll(timeout_ms))
        box.waiting = False
        if self._outbox.read_fd in events:
            self._outbox.drain_wakeups()
            self._flush()
        elif self._blocked and events.get(self.socket, 0) & self._zmq.POLLOUT:
            self._flush()  # a connection came up
        if self._monitor is not None and self._monitor in events:
            self._read_handshakes()
        return self._receive_all(receive) if events.get(self.socket, 0) & self._zmq.POLLIN \
            else []

    def _watch_handshakes(self) -> None:
        """A dealer's monitor of its handshakes: what a peer thought of our key."""
        # imported here, not at the first event: it pulls in zmq.asyncio, ~0.1 s that stalled a
        # worker's loop (or a client's I/O thread) at its first handshake
        from zmq.utils.monitor import recv_monitor_message

        zmq = self._zmq
        self._recv_monitor_message = recv_monitor_message
        self._words = handshake_words(zmq)
        self._monitor = self.socket.get_monitor_socket(sum(self._words))

    def _read_handshakes(self) -> None:
        recv_monitor_message = self._recv_monitor_message
        zmq = self._zmq
        while True:
            try:
                event = recv_monitor_message(self._monitor, zmq.NOBLOCK)["event"]
            except zmq.Again:
                return
            if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:  # plain on one side, CURVE on other
                self.handshake_problem = (
                    "expects no key: it was started without --key" if self.key is not None
                    else "requires a key: give the controller's key file with --key "
                         "(or CW_KEY)")
            else:
                self.handshake_problem = self._words.get(event)

    def _receive_all(self, receive, limit: int | None = None) -> list:
        """What is there, until `limit` messages or more are taken (a packed frame is taken
        whole)."""
        received = []
        while limit is None or len(received) < limit:
            try:
                item = receive()
            except self._zmq.Again:
                break
            if type(item) is Packed:
                received.extend(item)
            else:
                received.append(item)
        return received

    def close(self) -> None:
        if self.socket.closed:  # closing twice is allowed, and does nothing
            return
        self._flush()
        if self._monitor is not None:
            self.socket.disable_monitor()
            self._monitor.close(linger=0)
        self.socket.close(linger=0)
        self._outbox.close()


class ZmqRouter(_ZmqEndpoint):
    _verb, _hint = "listen on", "choose another address or port"

    def __init__(self, address: str, decode: Codec, encode: Codec, context=None,
                 lane: bool = False, max_message_bytes: int | None = None,
                 key: CurveKey | None = None):
        """`max_message_bytes`: a peer that sends a larger message is disconnected (ZeroMQ
        never takes it into memory). `key`: only peers holding it get through."""
        self.unreachable: list[bytes] = []  # peers a send failed for, since the last poll
        self._max_message_bytes = max_message_bytes
        # peers that sent packed frames, and so take them: what is sent to them at once goes
        # packed (insertion-ordered: past MAX_PACKING_PEERS the oldest is forgotten, and only
        # costs it its answers' packing)
        self._packing_peers: dict[bytes, None] = {}
        self._peer_lanes = PeerLanes()  # answers to peers on this host, past ZeroMQ
        self._peers_with_lanes = self._peer_lanes.by_peer
        super().__init__("ROUTER", address, decode, encode, context, key)
        self.lane = None
        if lane:
            try:
                self.lane = Lane()
            except (OSError, AttributeError):  # no abstract Unix sockets here (not Linux)
                self.lane = None
        if self.lane is not None:
            self._poller.register(self.lane.socket.fileno(), self._zmq.POLLIN)

    @property
    def lane_address(self) -> str:
        """Where senders on this host may send directly ("" for no lane)."""
        return self.lane.address if self.lane is not None else ""

    def use_peer_lane(self, peer: bytes, address: str) -> bool:
        """Send to `peer` through the lane it opened at `address` (its dealer's `open_lane`)
        from now on, what fits in one; False if that cannot be reached from here. Never with a
        key: a lane is not encrypted. Owner thread only."""
        if self.key is not None or not address or address == self.lane_address:
            return False
        return self._peer_lanes.connect(peer, address)

    @property
    def sent_on_peer_lanes(self) -> int:
        return self._peer_lanes.sent

    def _configure(self, zmq) -> None:
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)  # report sends to vanished peers
        if self._max_message_bytes is not None:
            self.socket.setsockopt(zmq.MAXMSGSIZE, self._max_message_bytes)
        if self.key is not None:
            curve_server(self.socket, self.context, self.key)

    def _attach(self, address: str) -> None:
        self.socket.bind(address)
        self.address = self.socket.getsockopt(self._zmq.LAST_ENDPOINT).decode()

    def send(self, peer: bytes, msg) -> None:
        self._outbox.put((peer, self._out.encode(msg)))

    def flush(self) -> None:
        """Send what the owner thread has queued, now rather than at its next poll (owner
        only)."""
        self._flush()

    def _flush(self) -> None:
        queue = self._outbox.queue
        if self._packing_peers:
            return self._flush_packing()
        while queue:
            self._send_to(*queue.popleft())

    def _send_to(self, peer: bytes, data) -> None:
        if self._peers_with_lanes and self._peer_lanes.send(peer, data):
            return
        try:
            self._send_frame(peer, self._more)  # a vanished peer fails here (ROUTER_MANDATORY)
            self._send_frame(data, self._last)
        except self._zmq.ZMQError:
            self.unreachable.append(peer)
            self._packing_peers.pop(peer, None)
            self._peer_lanes.drop(peer)

    def _flush_packing(self) -> None:
        """Send what is queued, each packing peer's small messages packed (in their order)."""
        queue, packing, send_to = self._outbox.queue, self._packing_peers, self._send_to
        packs: dict[bytes, list] = {}  # peer -> [messages, bytes]
        while queue:
            peer, data = queue.popleft()
            held = packs.get(peer)
            if peer in packing and len(data) <= PACK_MAX_MESSAGE_BYTES:
                if held is None:
                    packs[peer] = [[data], len(data)]
                    continue
                if len(held[0]) < PACK_MAX_MESSAGES and held[1] + len(data) <= PACK_MAX_BYTES:
                    held[0].append(data)
                    held[1] += len(data)
                    continue
            if held is not None:  # what was held for the peer goes first
                del packs[peer]
                send_to(peer, packed(held[0]))
            if peer in packing and len(data) <= PACK_MAX_MESSAGE_BYTES:
                packs[peer] = [[data], len(data)]
            else:
                send_to(peer, data)
        for peer, (frames, _) in packs.items():
            send_to(peer, packed(frames))

    def _receive(self):
        recv, last = self._recv_frame, self._last
        peer = recv(last)
        frames = []
        while self._get_option(self._rcvmore):
            frames.append(recv(last, False).buffer)
        if len(frames) != 1:
            return peer, Malformed(b"".join(frames), "bad framing")
        msg = decode_frame(self._in, frames[0])
        if type(msg) is not Packed:
            return peer, msg
        packing = self._packing_peers
        if peer not in packing:
            packing[peer] = None
            if len(packing) > MAX_PACKING_PEERS:
                del packing[next(iter(packing))]
        return Packed([(peer, m) for m in msg])

    _receive_one = _receive

    def poll(self, timeout_ms: int) -> list[tuple[bytes, object]]:
        received = self._poll_socket(timeout_ms, self._receive)
        return received + self.receive_lane(None) if self.lane is not None else received

    def receive_lane(self, limit: int | None) -> list[tuple[bytes, object]]:
        return self.lane.receive_all(self._in, limit) if self.lane is not None else []

    def close(self) -> None:
        super().close()
        self._peer_lanes.close()
        if self.lane is not None:
            self.lane.close()


class ZmqDealer(_ZmqEndpoint):
    _verb, _hint = "connect to", "give an address like tcp://127.0.0.1:7000"

    def __init__(self, address: str, decode: Codec, encode: Codec, context=None,
                 key: CurveKey | None = None, hold_unsent: int | None = None):
        """`hold_unsent`: send only on a connection that is up, and while there is none keep
        only the newest this many messages (a worker's pings and registrations, stale once it
        is back: an hour without its controller queued ~900 registrations, which the
        controller then decoded one by one). None (a client): ZeroMQ keeps every request for
        the next connection, also those it had queued for one that broke (a controller
        restarting), which a connection-only pipe would drop."""
        self._hold_unsent = hold_unsent
        self.dropped_unsent = 0  # messages dropped so, in all
        # send what is queued at once as packed frames (protocol.pack): set once the peer has
        # said it takes them
        self.pack = False
        self._lane: Lane | None = None  # (open_lane) answers from the router past ZeroMQ
        super().__init__("DEALER", address, decode, encode, context, key)

    def _configure(self, zmq) -> None:
        self.socket.setsockopt(zmq.RECONNECT_IVL, 100)
        self.socket.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        if self._hold_unsent is not None:
            # messages only go to a connection that is up: ZeroMQ would otherwise queue them,
            # with no bound, for a controller that is not there; the outbox holds them instead
            self.socket.setsockopt(zmq.IMMEDIATE, 1)
        curve_client(self.socket, self.key)
        self._watch_handshakes()

    def _attach(self, address: str) -> None:
        self.socket.connect(address)
        self.address = address

    def send(self, msg) -> None:
        self._outbox.put(self._out.encode(msg))

    def send_raw(self, data: bytes) -> None:
        """Bytes as they are, in a frame of their own (tests send malformed messages with
        this)."""
        self._outbox.put(Alone(data))

    def wake(self) -> None:
        """Have the owner send what is queued now, also during a poll that puts do not end."""
        self._outbox.wake()

    def interrupt(self) -> None:
        """End the owner's current poll now, with nothing to send (its thread is to stop)."""
        self._outbox.interrupt()

    def _flush(self) -> None:
        queue, send, flags = self._outbox.queue, self._send_frame, self._last
        while queue:
            frame, taken = queue[0], 1
            if self.pack and len(queue) > 1:
                frame, taken = take_pack(queue)
            try:
                # never blocking: with no connection to send on a blocking send waits for one,
                # and the owner thread with it (forever, when a handshake keeps failing)
                send(frame, flags)
            except self._zmq.Again:
                hold = self._hold_unsent
                while hold is not None and len(queue) > hold:
                    queue.popleft()
                    self.dropped_unsent += 1
                self._set_blocked(True)
                return  # kept, in order, for when a connection is up
            for _ in range(taken):
                queue.popleft()
        self._set_blocked(False)

    def _set_blocked(self, blocked: bool) -> None:
        if blocked != self._blocked:
            self._blocked = blocked
            zmq = self._zmq
            self._poller.modify(self.socket, zmq.POLLIN | (zmq.POLLOUT if blocked else 0))

    def _receive_one(self):
        return decode_frame(self._in, self._recv_frame(self._last, False).buffer)

    def poll(self, timeout_ms: int, woken_by_puts: bool = True) -> list[object]:
        received = self._poll_socket(timeout_ms, self._receive_one, woken_by_puts)
        return received + self._lane.receive_all(self._in, None) if self._lane is not None \
            else received

    def open_lane(self) -> str:
        """A lane for the router to send to this dealer past ZeroMQ, on this host (the router
        is told its address in a message: ZmqRouter.use_peer_lane); "" where there can be none
        (a key: a lane is not encrypted; not Linux). Call before the owner's first poll."""
        if self.key is not None:
            return ""
        if self._lane is None:
            try:
                self._lane = Lane(routed=False)
            except (OSError, AttributeError):
                return ""
            self._poller.register(self._lane.socket.fileno(), self._zmq.POLLIN)
        return self._lane.address

    @property
    def received_on_lane(self) -> int:
        return self._lane.received if self._lane is not None else 0

    def close(self) -> None:
        super().close()
        if self._lane is not None:
            self._lane.close()

    def sender(self) -> "ZmqSender":
        return ZmqSender(self)


class ZmqSender:
    """A send-only connection of one thread's own to its dealer's address, and to the router's
    lane once told of it (`use_lane`, from any thread). Create it before that thread starts (or
    in it); only that thread may send on it."""

    def __init__(self, dealer: ZmqDealer):
        zmq = dealer._zmq
        self.routing_id = b"s" + os.urandom(ROUTING_ID_BYTES - 1)
        self.socket = dealer.context.socket(zmq.DEALER)
        for option, value in ((zmq.LINGER, 0), (zmq.SNDHWM, 0), (zmq.ROUTING_ID, self.routing_id),
                              (zmq.RECONNECT_IVL, 100), (zmq.RECONNECT_IVL_MAX, 1000)):
            self.socket.setsockopt(option, value)
        curve_client(self.socket, dealer.key)
        self.socket.connect(dealer.address)
        self._out = dealer._out
        self._send_frame = super(zmq.Socket, self.socket).send  # as in _ZmqEndpoint
        self._lane = LaneSender()

    @property
    def sent_on_lane(self) -> int:
        return self._lane.sent

    def use_lane(self, address: str) -> bool:
        """Send to the router's lane at `address` from now on ("": stop); False if it cannot be
        reached from here (another host or network namespace), and ZeroMQ carries on alone."""
        return self._lane.connect(address)

    def send(self, msg) -> None:
        frame = self._out.encode(msg)
        if not self._lane.send(self.routing_id, frame):
            self._send_frame(frame, 0)  # queued at once: no high-water mark

    def close(self) -> None:
        self._lane.close()
        self.socket.close(linger=500)  # the last results may still be on their way out


class MultiPoller:
    """Waits on several endpoints owned by one thread at once; `poll` returns what each
    received, in order. ZeroMQ endpoints share one poll (one system call, and a message on any
    socket ends the wait at once); other endpoints are polled in turn, the last with the
    timeout."""

    def __init__(self, endpoints: list):
        self.endpoints = list(endpoints)
        self._poller = None
        if self.endpoints and all(isinstance(e, _ZmqEndpoint) for e in self.endpoints):
            import zmq

            self._poller = zmq.Poller()
            for e in self.endpoints:
                self._poller.register(e.socket, zmq.POLLIN)
                self._poller.register(e._outbox.read_fd, zmq.POLLIN)
                if getattr(e, "lane", None) is not None:
                    self._poller.register(e.lane.socket.fileno(), zmq.POLLIN)

    def take(self, index: int, limit: int | None = None) -> list:
        """What endpoint `index` holds now (its socket and lane), without waiting: a loop in
        the middle of a burst looks for results this way."""
        e = self.endpoints[index]
        if self._poller is None:
            return e.poll(0)
        got = e._receive_all(e._receive_one, limit)
        lane = getattr(e, "lane", None)
        if lane is not None:
            got += lane.receive_all(e._in, limit)
        return got

    def poll(self, timeout_ms: int, limit: int | None = None) -> list[list]:
        """`limit` bounds the messages taken per endpoint: the rest stay queued in ZeroMQ and
        make the next poll return at once. A loop that stamps time once per iteration needs
        this to keep its stamps fresh under a flood."""
        if self._poller is None:
            last = len(self.endpoints) - 1
            return [e.poll(timeout_ms if i == last else 0) for i, e in enumerate(self.endpoints)]
        me = threading.get_ident()
        for e in self.endpoints:
            e._outbox.owner = me
            e._flush()
        for e in self.endpoints:
            if e._outbox.wait_begins():
                e._flush()
        events = dict(self._poller.poll(timeout_ms))
        for e in self.endpoints:
            e._outbox.waiting = False
        out = []
        for e in self.endpoints:
            if e._outbox.read_fd in events:
                e._outbox.drain_wakeups()
                e._flush()
            got = e._receive_all(e._receive_one, limit) if e.socket in events else []
            lane = getattr(e, "lane", None)
            if lane is not None and lane.socket.fileno() in events:
                got += lane.receive_all(e._in, limit)
            out.append(got)
        return out
