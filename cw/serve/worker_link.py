"""A worker's standing with its controller: registration, clock pings, and what it says when the
controller is not there, goes silent, or turns it away.

The worker (cw/serve/worker.py) executes actions; this part only keeps it known to a controller
that may start after it, restart, or be the wrong address. A controller that will never take it
(another protocol version, a clashing model description, a clients' address) sets `fatal`, which
the worker's loop raises: registering forever would only hide the reason.
"""

from __future__ import annotations

import logging
from typing import Callable

import msgspec

from cw.errors import CwError, UsageError
from cw.serve.clock import ClockSync
from cw.serve.protocol import (PROTOCOL_VERSION, Codec, Goodbye, Leaving, Ping, Pong, Register,
                               ToClient, Welcome)
from cw.serve.runtime.base import now_ns
from cw.serve.transport import Malformed, tcp_unreachable

log = logging.getLogger("cw.worker")
_CLIENT_ANSWERS = Codec(ToClient)  # what a controller's clients' address sends


class ControllerLink:
    def __init__(self, config, transport, clock: ClockSync,
                 registration: Callable[[int], Register], result_senders: list):
        """`registration(sent_ns)`: the Register message to send; `result_senders`: the
        devices' result sockets, told the controller's lane when it welcomes the worker."""
        self.config = config
        self.transport = transport
        self.clock = clock
        self._registration = registration
        self._result_senders = result_senders
        self.worker_id: int | None = None
        self.fatal: CwError | None = None  # why serving cannot go on
        self.handlers = {Pong: self._on_pong, Welcome: self._on_welcome,
                         Goodbye: self._on_goodbye, Malformed: self._on_malformed}
        self._last_ping_ns = 0
        self._last_register_ns = 0
        self._unanswered_registrations = 0
        self._registering_since_ns = 0
        self._last_heard_ns = 0  # from the controller, any message
        self._silence_told = False

    def register(self) -> None:
        self._last_register_ns = now_ns()
        if self._unanswered_registrations == 0:
            self._registering_since_ns = self._last_register_ns
        self._unanswered_registrations += 1
        self.transport.send(self._registration(self._last_register_ns))

    def heard(self, now: int) -> None:
        """Something came from the controller."""
        self._last_heard_ns = now
        if self._silence_told:
            self._silence_told = False
            log.info("the controller at %s answers again", self.config.controller)

    def tick(self, now: int) -> bool:
        """Register again, warn of silence, ping when due; True when a ping went out."""
        if self.worker_id is None and now - self._last_register_ns > self._register_again_ns():
            tries = self._unanswered_registrations  # tries at 0, 1, 3 s, then every 4 s
            if tries >= 2 and (tries - 2) % 15 == 0:
                self._say_unwelcome(now)  # after 3 s, then every minute
            self.register()  # the controller is not there yet, or restarted
        if (self.worker_id is not None and not self._silence_told
                and now - self._last_heard_ns > self.config.controller_silence_ns):
            self._silence_told = True
            why = self._why_unheard()
            log.warning("no word from the controller at %s for %.0f s%s; serving on until it "
                        "answers", self.config.controller, (now - self._last_heard_ns) / 1e9,
                        f": {why}" if why else "")
        if now - self._last_ping_ns <= self.config.ping_interval_ns:
            return False
        self._last_ping_ns = now
        c = self.clock
        self.transport.send(Ping(now, c.offset_ns, c.estimate_ns, c.rtt_ns or 0))
        return True

    def leave(self, reason: str) -> None:
        if self.worker_id is not None:
            self.transport.send(Leaving(reason))

    def _register_again_ns(self) -> int:
        """How long to wait for a Welcome before registering again: 1 s, then 2 s, then 4 s.
        A controller busy with thousands of models (another worker's, or these) decodes every
        repeat, 0.3 s each at 40,000 models: repeats every second kept it busier still."""
        return 1_000_000_000 << min(2, max(0, self._unanswered_registrations - 1))

    def _why_unheard(self) -> str | None:
        """What can be told of a controller that does not answer: its handshake refused our
        key (or lack of one), or nothing listens there."""
        refused = getattr(self.transport, "handshake_problem", None)
        if refused is not None:
            return f"it {refused}"
        return tcp_unreachable(self.config.controller)

    def _say_unwelcome(self, now: int) -> None:
        why = self._why_unheard()
        log.warning("no answer from the controller at %s for %.0f s%s; still trying",
                    self.config.controller, (now - self._registering_since_ns) / 1e9,
                    f": {why}" if why else "")

    def _on_pong(self, msg: Pong) -> None:
        self.clock.observe(msg.worker_sent_ns, msg.controller_ns, now_ns())

    def _on_welcome(self, msg: Welcome) -> None:
        self.worker_id = msg.worker_id
        self._unanswered_registrations = 0
        self.clock.set_same_clock(msg.same_clock)
        for sender in self._result_senders:
            sender.use_lane(msg.lane_address)
        self.clock.observe(msg.worker_sent_ns, msg.controller_ns, now_ns())
        log.info("registered as worker %d", msg.worker_id)

    def _on_goodbye(self, msg: Goodbye) -> None:
        was_registered, self.worker_id = self.worker_id is not None, None
        if msg.protocol_version and msg.protocol_version != PROTOCOL_VERSION:
            # it will never take this worker: stop, and say why, instead of asking forever
            self.fatal = UsageError(
                f"the controller at {self.config.controller} speaks protocol "
                f"{msg.protocol_version}, this worker {PROTOCOL_VERSION}",
                "run the same cw version for the controller and its workers")
            return
        if msg.refused:  # it would refuse again: stop, and say why
            self.fatal = UsageError(
                f"the controller at {self.config.controller} refused this worker: {msg.reason}",
                "serve one model under each id: compile the bundles alike, or give one another "
                "name (cw compile --name)")
            return
        if was_registered:  # (pings queued while it was away each get this answer: say it once)
            log.warning("controller says: %s; registering again", msg.reason)
        if now_ns() - self._last_register_ns > 1_000_000_000:
            self.register()  # else tick() does, a second after the last try: no ping-pong

    def _on_malformed(self, msg: Malformed) -> None:
        try:  # a controller's answer to a client: this worker was given the clients' address
            answer = _CLIENT_ANSWERS.decode(msg.raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            answer = None
        if answer is not None:
            self.fatal = UsageError(
                f"{self.config.controller} is a cw controller's clients' address, not its "
                "workers'", "give --controller the workers' address: cw serve prints both, and "
                "7000 is the default port")
            return
        log.warning("malformed message from the controller (%d bytes): %s", len(msg.raw),
                    msg.error)
