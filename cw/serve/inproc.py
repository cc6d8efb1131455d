"""The in-process twin of the ZeroMQ transport (cw/serve/transport.py): the same endpoint
interface, frames routed between threads of one process by address, like ZeroMQ's inproc://.
Tests use it to run a controller and workers without sockets."""

from __future__ import annotations

import collections
import threading

from cw.serve.protocol import Codec
from cw.serve.framing import decode_frame


class InprocHub:
    """Routes frames between in-process endpoints by address, like ZeroMQ's inproc://."""

    def __init__(self):
        self.lock = threading.Condition()
        self.routers: dict[str, "InprocRouter"] = {}
        self._next = 0

    def peer_id(self) -> bytes:
        with self.lock:
            self._next += 1
            return f"peer-{self._next}".encode()


class _Inbox:
    def __init__(self):
        self.cond = threading.Condition()
        self.items: collections.deque = collections.deque()

    def put(self, item) -> None:
        with self.cond:
            self.items.append(item)
            self.cond.notify_all()

    def take(self, timeout_ms: int) -> list:
        with self.cond:
            if not self.items and timeout_ms > 0:
                self.cond.wait(timeout_ms / 1000)
            out = list(self.items)
            self.items.clear()
            return out


class InprocRouter:
    def __init__(self, hub: InprocHub, address: str, decode: Codec, encode: Codec):
        self.hub, self.address = hub, address
        self._in, self._out = decode, encode
        self.inbox = _Inbox()
        self.peers: dict[bytes, "InprocDealer"] = {}
        self.unreachable: list[bytes] = []
        with hub.lock:
            hub.routers[address] = self

    lane_address = ""  # in-process: nothing to bypass

    def send(self, peer: bytes, msg) -> None:
        dealer = self.peers.get(peer)
        if dealer is None or dealer.closed:
            self.unreachable.append(peer)
            return
        dealer.inbox.put(self._out.encode(msg))

    def flush(self) -> None:
        """(Sends are delivered at once here.)"""

    def use_peer_lane(self, peer: bytes, address: str) -> bool:
        return False  # in-process: nothing to bypass

    def poll(self, timeout_ms: int) -> list[tuple[bytes, object]]:
        return [(peer, decode_frame(self._in, data)) for peer, data in self.inbox.take(timeout_ms)]

    def close(self) -> None:
        with self.hub.lock:
            self.hub.routers.pop(self.address, None)


class InprocDealer:
    def __init__(self, hub: InprocHub, address: str, decode: Codec, encode: Codec):
        self.hub, self.address = hub, address
        self._in, self._out = decode, encode
        self.inbox = _Inbox()
        self.identity = hub.peer_id()
        self.closed = False

    def _router(self) -> InprocRouter | None:
        with self.hub.lock:
            return self.hub.routers.get(self.address)

    def send(self, msg) -> None:
        self.send_raw(self._out.encode(msg))

    def wake(self) -> None:
        """(Sends are delivered at once here.)"""

    def interrupt(self) -> None:
        """End the owner's current poll now, with nothing to send (its thread is to stop)."""
        with self.inbox.cond:
            self.inbox.cond.notify_all()

    def send_raw(self, data: bytes) -> None:
        router = self._router()
        if router is not None:  # like ZeroMQ, messages to a missing peer are dropped
            router.peers[self.identity] = self
            router.inbox.put((self.identity, data))

    def poll(self, timeout_ms: int) -> list[object]:
        return [decode_frame(self._in, data) for data in self.inbox.take(timeout_ms)]

    @property
    def routing_id(self) -> bytes:
        return self.identity

    def sender(self) -> "InprocDealer":
        """Another peer to the same router, as ZmqDealer.sender (its sends are thread-safe)."""
        return InprocDealer(self.hub, self.address, self._in, self._out)

    def use_lane(self, address: str) -> bool:
        return False

    def open_lane(self) -> str:
        return ""

    def close(self) -> None:
        self.closed = True
