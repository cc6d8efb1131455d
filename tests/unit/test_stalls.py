"""StallWatch (`--log-stalls`): busy loop iterations, long collections, and a process that
cannot run Python are each reported once."""

import gc
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from cw.serve.stalls import StallWatch, host_cpu_counters, host_cpu_delta

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


@pytest.mark.skipif(not Path("/proc/self/task").exists(),
                    reason="Linux's per-thread counters (/proc/self/task) are not kept here")
def test_a_stall_line_names_the_thread_that_ran_and_where():
    lines = []
    watch = StallWatch("worker w", 20 * MS, lines.append).start()
    hog = threading.Thread(target=_hold_the_gil, args=(time.perf_counter() + 0.3,), name="hog")
    try:
        hog.start()  # started after the watch: it lists the threads again when one starts
        hog.join()
    finally:
        watch.stop()
    named = [line for line in lines if "could not run" in line and "threads ran: hog" in line]
    assert named, lines
    m = re.search(r"in the last (\d+) ms other threads ran: hog ([\d.]+) ms \(now at "
                  r"test_stalls.py:\d+ in _hold_the_gil\)", named[0])
    assert m and 10 < float(m[2]) <= float(m[1]) + 1, named[0]


def _hold_the_gil(until_s: float) -> None:
    while time.perf_counter() < until_s:
        sum(range(3_000_000))  # calls into C that keep the GIL ~40 ms each
    time.sleep(0.2)  # still there when the watch, let go, reads what each thread ran


def _stall_ms(line: str) -> tuple[float, float]:
    """(how long Python could not run, how much of it without a core) from a stall line."""
    m = re.search(r"could not run for ([\d.]+) ms \(([\d.]+) ms of it without a core", line)
    assert m, line
    return float(m[1]), float(m[2])


@pytest.mark.skipif(not Path("/proc/thread-self/schedstat").exists(),
                    reason="Linux's per-thread run-queue wait (schedstat) is not kept here")
def test_a_held_gil_is_told_apart_from_a_process_without_a_core():
    # held GIL: the watch thread waits for it, not for a core
    lines = []
    watch = StallWatch("controller", 20 * MS, lines.append).start()
    try:
        sum(range(30_000_000))  # one call into C that keeps the GIL
        time.sleep(0.05)
    finally:
        watch.stop()
    late_ms, no_core_ms = max(_stall_ms(line) for line in lines
                              if "could not run" in line)
    assert late_ms > 20 and no_core_ms < late_ms / 2, lines

    # no core: this watch's process shares its one core with a process that spins (in a
    # process of its own, so that only the OS can be in the way): in real-time priority 60 ms
    # of every 100 where it may (root), so that the watch cannot run then; else all the time,
    # at normal priority against this one's lowest. (That alone let the watch run on time for
    # 30 s in 1 of 3 runs on Linux 6.18, whose scheduler runs a thread that wakes soon.) Not
    # SCHED_IDLE: with the machine's cores taken it waited over a minute for a core to report
    # and exit in.
    spinner = textwrap.dedent("""
        import os, sys, time
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
            on_s, off_s = 0.06, 0.04
        except (PermissionError, AttributeError):
            on_s, off_s = 1.0, 0.0
        print(flush=True)
        while True:
            end = time.perf_counter() + on_s
            while time.perf_counter() < end:
                pass
            time.sleep(off_s)
    """)
    script = textwrap.dedent(f"""
        import os, subprocess, sys, time
        from cw.serve.stalls import StallWatch
        os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})
        spin = subprocess.Popen([sys.executable, "-c", {spinner!r}], stdout=subprocess.PIPE)
        spin.stdout.readline()  # it spins now
        os.nice(19)  # (this thread's: the threads it starts inherit it)
        lines = []
        watch = StallWatch("worker", 20_000_000, lines.append).start()
        # until the first stall is reported: how soon one comes is up to the OS
        deadline = time.monotonic() + 30
        while not any("could not run" in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.05)
        watch.stop()
        spin.kill()
        print("\\n".join(lines))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    stalls = [_stall_ms(line) for line in out.stdout.splitlines() if "could not run" in line]
    assert stalls, out.stdout
    late_ms, no_core_ms = max(stalls)
    assert late_ms > 20 and no_core_ms > late_ms / 2, out.stdout


def test_a_stall_still_going_on_when_the_watch_is_stopped_is_reported():
    # Stopped while this thread holds the GIL: the watch wakes to the stop, past its tick.
    # (The event is set directly: stop() would wait for the watch, which needs the GIL.)
    lines = []
    watch = StallWatch("controller", 20 * MS, lines.append).start()
    watch._stop.set()
    sum(range(30_000_000))  # one call into C that keeps the GIL
    watch.stop()
    assert [line for line in lines if "could not run" in line], lines


def test_a_busy_iteration_says_how_much_of_it_its_thread_ran_and_waited_for_a_core():
    lines = []
    watch = StallWatch("controller", 2 * MS, lines.append)
    watch.iteration(5 * MS, "3 worker and 9 client messages", (int(1.2 * MS), 3 * MS))
    watch.iteration(5 * MS, "1 messages", (7 * MS, None))  # clocks differ: capped
    assert lines == [
        "controller stall: a loop iteration was busy 5.00 ms, 1.20 ms of it running and "
        "3.00 ms without a core (3 worker and 9 client messages)",
        "controller stall: a loop iteration was busy 5.00 ms, 5.00 ms of it running (1 messages)"]
    # a meter of this thread: spinning is running, sleeping is not
    # (spins count this thread's CPU time, not the wall clock's: with the cores taken by other
    # processes, 0.2 s of spinning by the clock was 0.0999 s of running)
    meter = watch.loop_meter()
    try:
        mark = meter.mark()
        wall_ns, cpu_ns = time.perf_counter_ns(), time.thread_time_ns()
        _spin_for(150 * MS)
        wall_ns, cpu_ns = time.perf_counter_ns() - wall_ns, time.thread_time_ns() - cpu_ns
        ran, no_core, others = meter.since(mark)
        mark = meter.mark()
        spinner = threading.Thread(target=_spin_for, args=(50 * MS,))
        spinner.start()
        time.sleep(0.2)
        spinner.join()
        slept, _, others_spun = meter.since(mark)
    finally:
        meter.close()
    assert 0.9 * cpu_ns < ran < 1.1 * cpu_ns + 5 * MS and slept < 0.05e9, (ran, cpu_ns, slept)
    assert no_core is None or 0 <= no_core < wall_ns
    # the process's other threads: none while this one spun; the spinner while it slept
    assert others < 0.05e9 and others_spun > 0.02e9, (others, others_spun)


def _spin_for(cpu_ns: int) -> None:
    """Run this thread until it has had `cpu_ns` of CPU time more."""
    until = time.thread_time_ns() + cpu_ns
    while time.thread_time_ns() < until:
        pass


def test_host_cpu_counters_and_their_difference_over_a_run():
    before = host_cpu_counters()
    assert before["cpus"] >= 1
    began = time.perf_counter_ns()
    sum(range(3_000_000))
    after = host_cpu_counters()
    delta = host_cpu_delta(before, after, time.perf_counter_ns() - began)
    assert delta["cpus"] == after["cpus"] and delta["quota_cpus"] == after["quota_cpus"]
    if after["pressure_some_us"] is not None:
        assert delta["no_core_fraction"] >= 0
    # made-up counters: 30 ms without a core and 5 ms throttled over 100 ms
    made_up = host_cpu_delta({"cpus": 4, "quota_cpus": 2.0, "pressure_some_us": 1_000,
                              "throttled_ns": 10**6},
                             {"cpus": 4, "quota_cpus": 2.0, "pressure_some_us": 31_000,
                              "throttled_ns": 6 * 10**6}, 100 * MS)
    assert made_up == {"cpus": 4, "quota_cpus": 2.0, "no_core_fraction": 0.3,
                       "throttled_ms": 5.0}
    assert host_cpu_delta({"cpus": 1, "quota_cpus": None, "pressure_some_us": None,
                           "throttled_ns": None},
                          {"cpus": 1, "quota_cpus": None, "pressure_some_us": None,
                           "throttled_ns": None}, MS) == {
        "cpus": 1, "quota_cpus": None, "no_core_fraction": None, "throttled_ms": None}


def test_a_loop_that_reports_its_polls_needs_no_watch_thread():
    lines = []
    watch = StallWatch("controller", 2 * MS, lines.append, thread=False).start()
    try:
        assert watch._thread is None and watch._on_gc in gc.callbacks
        watch.woke(int(1.5 * MS), MS)  # within the threshold past its timeout
        watch.woke(int(0.2 * MS), MS, int(0.5 * MS))  # a message woke it; a short wait
        assert lines == []
        watch.woke(5 * MS, MS, 3 * MS)  # 4 ms past the timeout, 3 of them without a core
        watch.woke(int(0.5 * MS), MS, int(2.5 * MS))  # woken early, but kept from a core
        watch.woke(4 * MS, MS)  # where the OS does not say
        watch.woke(4 * MS, MS, 0, int(2.9 * MS))  # another thread of the process ran
        # no other thread ran enough to have held the GIL that long: not the GIL
        watch.woke(4 * MS, MS, int(0.5 * MS), int(0.3 * MS))
        watch.woke(4 * MS, MS, None, int(0.1 * MS))
    finally:
        watch.stop()
    assert lines == [
        "controller stall: Python could not run for 4.00 ms after the loop's poll (3.00 ms of "
        "it without a core, the rest waiting for the GIL)",
        "controller stall: Python could not run for 2.50 ms after the loop's poll (2.50 ms of "
        "it without a core, the rest waiting for the GIL)",
        "controller stall: Python could not run for 3.00 ms after the loop's poll (another "
        "thread held the GIL, or the process had no core)",
        "controller stall: Python could not run for 3.00 ms after the loop's poll (0.00 ms of "
        "it without a core, the rest waiting for the GIL; the process's other threads ran "
        "2.90 ms meanwhile)",
        "controller stall: Python could not run for 3.00 ms after the loop's poll (0.50 ms of "
        "it without a core, at most 0.30 ms waiting for the GIL, 2.20 ms neither: not runnable "
        "(a late wake-up) or held where Linux does not count (the hypervisor); the process's "
        "other threads ran 0.30 ms meanwhile)",
        "controller stall: Python could not run for 3.00 ms after the loop's poll (the "
        "process's other threads hardly ran: no core, a late wake-up or the hypervisor, not "
        "the GIL; the process's other threads ran 0.10 ms meanwhile)"]
    assert watch.stalls == 6 and watch._on_gc not in gc.callbacks


def test_a_replays_client_reports_its_own_stalls_to_a_log_of_its_own(tmp_path):
    """`cw replay --log-stalls`: the replay's client process is watched too (its answers count
    late by its own clock), into client.log, which collect_stalls counts as the client's."""
    from cw.replay.live import CLIENT_STALLS_LOG, client_stalls, collect_stalls

    with client_stalls(None, tmp_path) as watch:  # without --log-stalls: nothing
        assert watch is None
    assert not (tmp_path / CLIENT_STALLS_LOG).exists()
    with client_stalls(20 * MS, tmp_path) as watch:
        t0 = time.perf_counter()
        total = sum(range(30_000_000))  # one call into C: the GIL is not let go meanwhile
        held_ms = (time.perf_counter() - t0) * 1e3
        time.sleep(0.05)
    assert total > 0 and held_ms > 60, held_ms
    assert not watch._thread.is_alive() and watch._on_gc not in gc.callbacks
    lines = (tmp_path / CLIENT_STALLS_LOG).read_text().splitlines()
    # timestamped as the controller's lines, so that the gathered file sorts by time
    assert any(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} client stall: Python could not "
                        r"run for \d+\.\d\d ms", line) for line in lines), lines
    (tmp_path / "worker-0.log").write_text("2026-01-01 00:00:00,000 cw.stalls WARNING worker "
                                           "local-0 stall: a loop iteration was busy 3 ms\n")
    counts = collect_stalls(tmp_path, tmp_path / "all.txt")
    assert counts == {"client": len(lines), "worker-0": 1}
    gathered = (tmp_path / "all.txt").read_text().splitlines()
    assert gathered[0].endswith("busy 3 ms") and len(gathered) == len(lines) + 1
