"""When Python's cycle collector may run in a serving process.

A full collection scans every tracked object, and a serving process can hold millions: bundles
and TVM modules, and with thousands of models (`--copies`) their descriptions and the
scheduler's state for each. Scanning them stalls the process for hundreds of milliseconds,
long enough to answer requests late. So what is made to be kept is frozen out of the
collector's reach (`gc.freeze`, O(1)), and a burst of allocations that makes no garbage (a
registration of 40,000 models decoded) runs with the collector paused. What serving allocates
afterwards is collected as usual.
"""

from __future__ import annotations

import contextlib
import gc
import threading

_lock = threading.Lock()
_pauses = 0  # threads inside paused(): the collector runs again when the last one leaves
_was_enabled = True

LARGE_MESSAGE_BYTES = 1 << 20  # decoding more than this makes objects by the hundred thousand


@contextlib.contextmanager
def paused():
    """No collection inside; re-entrant and safe across threads (the enabled flag is the
    process's)."""
    global _pauses, _was_enabled
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()


@contextlib.contextmanager
def kept():
    """Around code that makes state to keep for as long as a worker stays (a worker's models
    joining the scheduler): nothing collected meanwhile, all of it frozen afterwards. At 40,000
    models a full collection of that state took 0.37 s on the build machine."""
    with paused():
        try:
            yield
        finally:
            gc.freeze()


def freeze_heap() -> None:
    """Move every object alive now out of the collector's reach, once, before serving. A
    serving process starts with a large heap (bundles, TVM modules, a test suite's leftovers);
    a full collection scanning it stalled a controller for ~145 ms on this 2-core machine, long
    enough to answer a 100 ms request late."""
    gc.collect()
    gc.freeze()
