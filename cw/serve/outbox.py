"""The hand-over between threads that send on an endpoint and the one thread that owns its
socket (ZeroMQ sockets must only be used by one thread): a queue of frames, and a pipe that
wakes the owner's poll only when it waits."""

from __future__ import annotations

import collections
import os
import threading


class Outbox:
    """Thread-safe queue of frames to send, with a pipe that wakes the owner's poll."""

    def __init__(self):
        self.queue: collections.deque = collections.deque()
        self.owner: int | None = None  # the thread that polls; set on its first poll
        self.signalled = False  # a wake-up was written and the owner has not drained it yet
        # The owner waits in its poll (or is about to): only then does a put need to wake it.
        # An owner that is awake flushes before it waits again. (A client's I/O thread, woken
        # for every request, took ~20 µs of CPU a request more at 10,000 r/s: cw/client.py.)
        self.waiting = True
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)

    def put(self, item) -> None:
        self.queue.append(item)
        if self.signalled or not self.waiting or threading.get_ident() == self.owner:
            # The owner flushes before it next waits (`wait_begins` sees this item if it came
            # after the flush), or a wake-up is already on its way (the flag is cleared only
            # after the pipe is read, and before a flush): no syscall.
            return
        self._signal()

    def wake(self) -> None:
        """End the owner's poll now, also a short one that puts do not end (a caller done
        queueing a burst); nothing if a wake-up is on its way or nothing is queued."""
        if self.queue and not self.signalled and threading.get_ident() != self.owner:
            self._signal()

    def interrupt(self) -> None:
        """End the owner's poll now, queued or not (its thread is asked to stop)."""
        if not self.signalled and threading.get_ident() != self.owner:
            self._signal()

    def _signal(self) -> None:
        self.signalled = True
        try:
            os.write(self.write_fd, b"\0")
        except BlockingIOError:
            pass  # the pipe is full of wake-ups already
        except OSError:
            pass  # closed (-1): nobody polls any more

    def drain_wakeups(self) -> None:
        """Called by the owner before it flushes: a put after this point signals again. The
        pipe is emptied *before* the flag is cleared: cleared first, a put in between wrote a
        wake-up that the read then swallowed, leaving the flag set over an empty pipe, and from
        then on no put woke the owner, whose sends waited for its poll's timeout (a client's
        requests, up to 20 ms, in a 10 ms closed-loop replay)."""
        try:
            while os.read(self.read_fd, 4096):
                pass
        except BlockingIOError:
            pass
        self.signalled = False

    def wait_begins(self) -> bool:
        """Called by the owner after its flush and before it polls: from here a put wakes it.
        True if something was put in between (the owner flushes again instead of waiting)."""
        self.waiting = True
        return bool(self.queue)

    def close(self) -> None:
        # once only: a second os.close of these numbers would close whatever file, socket or
        # ZeroMQ signaler has been given them since, and libzmq aborts the process when its own
        # descriptor is closed under it
        fds, self.read_fd, self.write_fd = (self.read_fd, self.write_fd), -1, -1
        for fd in fds:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
