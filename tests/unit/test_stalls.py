"""StallWatch (`--log-stalls`): busy loop iterations, long collections, and a process that
cannot run Python are each reported once."""

import gc
import time

from cw.serve.stalls import StallWatch

MS = 1_000_000


def test_busy_iterations_over_the_threshold_are_reported():
    lines = []
    watch = StallWatch("worker w", 2 * MS, lines.append)  # not started: no thread, no gc hook
    watch.iteration(2 * MS, "3 messages")  # at the threshold: fine
    watch.iteration(5 * MS, "64 messages")
    assert lines == ["worker w stall: a loop iteration was busy 5.00 ms (64 messages)"]
    assert watch.stalls == 1


def test_long_collections_and_a_held_gil_are_reported():
    lines = []
    watch = StallWatch("controller", 20 * MS, lines.append).start()
    try:
        junk = [[i] for i in range(300_000)]  # a heap worth scanning
        t0 = time.perf_counter()
        total = sum(range(30_000_000))  # one call into C: the GIL is not let go meanwhile
        held_ms = (time.perf_counter() - t0) * 1e3
        time.sleep(0.05)  # the watch thread wakes and notices
        assert total > 0 and held_ms > 60, held_ms  # long enough to be seen over 20 ms
        assert any("Python could not run" in line for line in lines), lines
        watch.threshold_ns = 0  # any collection now
        gc.collect()
        assert any("garbage collection of generation 2" in line for line in lines), lines
        del junk
    finally:
        watch.stop()
    assert watch._on_gc not in gc.callbacks and not watch._thread.is_alive()
