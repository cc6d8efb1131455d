"""The lane: on one host, a Unix datagram socket in the abstract namespace beside a router's
ZeroMQ socket, that senders told its address send to directly. ZeroMQ carries each message
through an I/O thread on either side; on the 2-core build machine that costs ~90 µs of a
~125 µs one-way trip that a Unix socket makes in ~35 µs. A message the lane cannot take (too
large, its buffer full, the router gone) goes the ZeroMQ way instead (cw/serve/transport.py)."""

from __future__ import annotations

import os
import socket

from cw.serve.framing import decode_frame

ROUTING_ID_BYTES = 8        # a sender's routing id: the first bytes of each lane datagram
LANE_MAX_BYTES = 200_000    # larger messages take ZeroMQ (Unix datagrams are bounded by buffers)
_LANE_RCVBUF = 8 << 20


class Lane:
    """The router's end of the lane: one non-blocking datagram socket, read until empty."""

    def __init__(self):
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
            data = bytes(view[ROUTING_ID_BYTES:size])
            out.append((bytes(view[:ROUTING_ID_BYTES]), decode_frame(decode, data)))
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
