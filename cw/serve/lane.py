"""Lanes: on one host, a Unix datagram socket in the abstract namespace beside an endpoint's
ZeroMQ socket, that peers told its address send to directly. ZeroMQ carries each message
through an I/O thread on either side; on the 2-core build machine that costs ~90 µs of a
~125 µs one-way trip that a Unix socket makes in ~35 µs. A message a lane cannot take (too
large, its buffer full, the receiver gone) goes the ZeroMQ way instead (cw/serve/transport.py).

Two directions use them: a worker's results to the controller's router (`Lane`, routed: each
datagram starts with the sender's routing id; `LaneSender` on the worker's side), and the
controller's answers to a client's dealer (`Lane(routed=False)` in the client; `PeerLanes` in the
controller's router, one connected socket per client that offered one)."""

from __future__ import annotations

import errno
import os
import socket

from cw.serve.framing import decode_frame
from cw.serve.protocol import Packed

ROUTING_ID_BYTES = 8        # a sender's routing id: the first bytes of each lane datagram
LANE_MAX_BYTES = 200_000    # larger messages take ZeroMQ (Unix datagrams are bounded by buffers)
_LANE_RCVBUF = 8 << 20


class Lane:
    """The receiving end of a lane: one non-blocking datagram socket, read until empty.
    `routed`: each datagram starts with its sender's routing id (a router's lane), and
    `receive_all` gives (routing id, message) pairs; else it gives messages."""

    def __init__(self, routed: bool = True):
        self.routed = routed
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.address = f"\0cw-lane-{os.getpid()}-{os.urandom(6).hex()}"
        try:
            self.socket.bind(self.address)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        try:  # room for bursts of results; the kernel caps it at net.core.rmem_max
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _LANE_RCVBUF)
        except OSError:
            pass
        self._buffer = bytearray(LANE_MAX_BYTES + ROUTING_ID_BYTES)
        self.received = 0  # messages that came this way

    def receive_all(self, decode, limit: int | None) -> list:
        out, view, n = [], memoryview(self._buffer), 0
        while limit is None or n < limit:
            try:
                size = self.socket.recv_into(self._buffer)
            except (BlockingIOError, InterruptedError):
                break
            # a copy: decoded messages keep views into their bytes (tensor fields)
            if self.routed:
                sender = bytes(view[:ROUTING_ID_BYTES])
                msg = decode_frame(decode, bytes(view[ROUTING_ID_BYTES:size]))
                if type(msg) is Packed:
                    out.extend((sender, m) for m in msg)
                else:
                    out.append((sender, msg))
            else:
                msg = decode_frame(decode, bytes(view[:size]))
                if type(msg) is Packed:
                    out.extend(msg)
                else:
                    out.append(msg)
            n += 1
        self.received += n
        return out

    def close(self) -> None:
        self.socket.close()


class LaneSender:
    """A sender's end of the lane: `connect` from any thread, `send` from the sending thread
    only. A socket replaced while that thread may be sending on it is closed with the sender,
    not at once."""

    def __init__(self):
        self._socket: socket.socket | None = None
        self._retired: list[socket.socket] = []
        self.sent = 0

    def connect(self, address: str) -> bool:
        """Send to the lane at `address` from now on ("": stop); False if it cannot be reached
        from here (another host or network namespace)."""
        lane = None
        if address:
            lane = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                lane.connect(address)
            except OSError:
                lane.close()
                lane = None
            else:
                lane.setblocking(False)
        old, self._socket = self._socket, lane
        if old is not None:
            self._retired.append(old)
        return lane is not None

    def send(self, routing_id: bytes, frame: bytes) -> bool:
        """False if the lane did not take `frame` (none, too large, full, refused: the router
        went away): the caller sends it the other way."""
        lane = self._socket
        if lane is None or len(frame) > LANE_MAX_BYTES:
            return False
        try:
            lane.send(routing_id + frame)
        except OSError:
            return False
        self.sent += 1
        return True

    def close(self) -> None:
        self.connect("")
        for lane in self._retired:
            lane.close()
        self._retired.clear()


# a router keeps this many peers' lanes at most (a file descriptor each: a process's soft limit
# is often 1,024); past it the lane connected longest ago is let go (its peer's answers then
# take ZeroMQ: a peer that went away without a send failing is the likeliest to be that one)
MAX_PEER_LANES = 256
# a send that fails so means the receiver is gone: its lane is forgotten (others, such as a
# datagram too large for the socket's buffer, only send that one the ZeroMQ way)
_GONE = {errno.ECONNREFUSED, errno.ENOENT, errno.ENOTCONN, errno.EPIPE}


class PeerLanes:
    """A router's lanes to its peers (the clients that offered one): a connected, non-blocking
    datagram socket per peer. Owner thread only."""

    def __init__(self, max_lanes: int = MAX_PEER_LANES):
        self.max_lanes = max_lanes
        # peer -> (address, socket), oldest connection first; a router's send path tests the
        # dict itself (no call: it runs for every message a router sends, lanes or not)
        self.by_peer: dict[bytes, tuple[str, socket.socket]] = {}
        self._peer_of: dict[str, bytes] = {}  # address -> peer
        self.sent = 0

    def connect(self, peer: bytes, address: str) -> bool:
        """Send to `peer` through its lane at `address` from now on; False if that cannot be
        reached from here (another host or network namespace)."""
        held = self.by_peer.get(peer)
        if held is not None and held[0] == address:
            return True
        self.drop(peer)
        if not address.startswith("\0cw-lane-"):
            return False
        before = self._peer_of.get(address)
        if before is not None:  # the same client under a new routing id (it reconnected)
            self.drop(before)
        if len(self.by_peer) >= self.max_lanes:
            self.drop(next(iter(self.by_peer)))
        try:
            lane = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        except OSError:  # out of descriptors
            return False
        try:
            lane.connect(address)
        except OSError:
            lane.close()
            return False
        lane.setblocking(False)
        self.by_peer[peer] = (address, lane)
        self._peer_of[address] = peer
        return True

    def send(self, peer: bytes, frame) -> bool:
        """False if `peer` has no lane or it did not take `frame` (too large, its buffer full):
        the caller sends it the ZeroMQ way. A lane whose receiver is gone is dropped."""
        held = self.by_peer.get(peer)
        if held is None or len(frame) > LANE_MAX_BYTES:
            return False
        try:
            held[1].send(frame)
        except OSError as e:
            if e.errno in _GONE:  # the client went away (or closed its lane)
                self.drop(peer)
            return False  # (its queue full, the datagram too large: this one takes ZeroMQ)
        self.sent += 1
        return True

    def drop(self, peer: bytes) -> None:
        held = self.by_peer.pop(peer, None)
        if held is not None:
            del self._peer_of[held[0]]
            held[1].close()

    def close(self) -> None:
        for peer in list(self.by_peer):
            self.drop(peer)
