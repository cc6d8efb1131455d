"""The outbox's wake-ups: one per batch of sends from other threads, never a lost message."""

import os
import threading

from cw.serve.transport import _Outbox


def pending_wakeups(box: _Outbox) -> int:
    try:
        return len(os.read(box.read_fd, 4096))
    except BlockingIOError:
        return 0


def put_from_another_thread(box: _Outbox, item) -> None:
    t = threading.Thread(target=box.put, args=(item,))
    t.start()
    t.join()


def test_one_wakeup_until_the_owner_drains():
    box = _Outbox()
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


def test_the_owner_never_signals_itself():
    box = _Outbox()
    box.owner = threading.get_ident()
    try:
        box.put("x")
        assert pending_wakeups(box) == 0
        assert list(box.queue) == ["x"]
    finally:
        box.close()
