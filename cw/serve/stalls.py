"""What held a serving process up: `--log-stalls 1ms` on `cw serve`, `cw serve controller` and
`cw serve worker` reports every stall longer than that.

Three kinds, each a plain log line, so that a run on the GPU machine shows which one a latency
outlier coincides with:
- a loop iteration that kept the loop busy that long (the loop reports it, with what it handled,
  how much of that time its thread ran and, on Linux, how much it was runnable without a core:
  the rest it waited for the GIL or in a system call);
- a garbage collection that long (`gc.callbacks`);
- the process unable to run Python that long: a watch thread that asks to wake every
  millisecond and notes how late it wakes (workers), or a loop that is the process's one thread
  reporting how late its polls return (`woke`: the controller, which saves the thread's cost).
  Late means another thread held the GIL (a long call into C that does not release it, a
  collection) or the OS gave the process no core. On Linux the line says how much of it was
  spent runnable without a core (the run-queue wait, /proc/thread-self/schedstat): the rest
  went waiting for the GIL. A GPU run's late answers came with stalls that could have been
  either (docs/benchmarks.md, "Fig. 5 on the GPU"). A watch thread's line also names the
  threads of the process that ran meanwhile, and where in Python the busiest one was: the one
  that held the GIL, unless it ran in C without it. The loop's own line gives the CPU time its
  process's other threads took over the late poll.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time

_TICK_S = 0.001
# Stall lines go to this logger (a process may send it to a file of its own: a live replay does)
log = logging.getLogger("cw.stalls")


class StallWatch:
    def __init__(self, name: str, threshold_ns: int, report=log.warning, thread: bool = True):
        """`report(message)` is called, from any thread, once per stall over `threshold_ns`.
        `thread=False`: no watch thread; a process whose one loop reports how late its polls
        return (`woke`) sees the same for free. A watch thread that wakes every millisecond
        cost the controller ~23 µs of CPU per request at 3,000 r/s (docs/benchmarks.md)."""
        self.name = name
        self.threshold_ns = threshold_ns
        self.report = report
        self.stalls = 0
        self._stop = threading.Event()
        self._watching = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"{name}-stall-watch",
                                        daemon=True) if thread else None
        self._gc_started_ns: int | None = None

    def start(self) -> "StallWatch":
        gc.callbacks.append(self._on_gc)
        if self._thread is not None:
            self._thread.start()
            self._watching.wait(1)  # a stall from here on is seen
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=1)

    def woke(self, waited_ns: int, timeout_ns: int, core_wait_ns: int | None = None,
             others_ran_ns: int | None = None) -> None:
        """The owning loop's report of one poll: `waited_ns` in it, with `timeout_ns` asked for,
        `core_wait_ns` of it runnable without a core and `others_ran_ns` of CPU time the
        process's other threads took meanwhile (`LoopMeter.since`). Past its timeout, or that
        long without a core, the loop could not run."""
        stalled = max(waited_ns - timeout_ns, core_wait_ns or 0)
        if stalled > self.threshold_ns:
            others = "" if others_ran_ns is None else \
                f"; the process's other threads ran {others_ran_ns / 1e6:.2f} ms meanwhile"
            self._stall(f"Python could not run for {stalled / 1e6:.2f} ms after the loop's poll "
                        f"({_cause(stalled, core_wait_ns, others_ran_ns)}{others})")

    def iteration(self, busy_ns: int, detail: str, spent: tuple | None = None) -> None:
        """The owning loop's report of one iteration (a cheap comparison when below);
        `spent`, where known (`LoopMeter.since`), how much of `busy_ns` the loop's thread ran,
        and how much it was runnable without a core (None where the OS does not say)."""
        if busy_ns > self.threshold_ns:
            how = ""
            if spent is not None:
                running_ns, core_wait_ns = spent[:2]
                how = f", {min(running_ns, busy_ns) / 1e6:.2f} ms of it running"
                if core_wait_ns is not None:
                    how += f" and {min(core_wait_ns, busy_ns) / 1e6:.2f} ms without a core"
            self._stall(f"a loop iteration was busy {busy_ns / 1e6:.2f} ms{how} ({detail})")

    @staticmethod
    def loop_meter() -> "LoopMeter":
        """A meter of the calling thread, for its loop's `iteration` reports."""
        return LoopMeter()

    def _stall(self, what: str) -> None:
        self.stalls += 1
        self.report(f"{self.name} stall: {what}")

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started_ns = time.perf_counter_ns()
        elif self._gc_started_ns is not None:
            took = time.perf_counter_ns() - self._gc_started_ns
            self._gc_started_ns = None
            if took > self.threshold_ns:
                self._stall(f"garbage collection of generation {info['generation']} took "
                            f"{took / 1e6:.2f} ms")

    def _watch(self) -> None:
        clock, tick_ns = time.perf_counter_ns, int(_TICK_S * 1e9)
        core_wait = RunQueueWait()  # opened here: it reads the thread that opens it
        # every thread's CPU time, read every 16 ticks only: each read lets go of the GIL, and
        # a thread that holds it would take it back at each. A stall's line compares the last
        # snapshot taken before the stall began with one taken after: it covers the stall and
        # up to 32 ms before it.
        threads = ThreadTimes(exclude=threading.get_native_id())
        try:
            expected = clock() + tick_ns
            waited = core_wait.total_ns()
            ran = older = threads.timed_snapshot()
            self._watching.set()
            ticks, known = 0, threading.active_count()
            while True:
                # a stall still going on when stop() is called is reported too: under a
                # spinning process a watch at the least priority waited seconds for a core,
                # and stop()'s wake-up then came first
                stopping = self._stop.wait(_TICK_S)
                now = clock()
                late = now - expected
                if late > self.threshold_ns:
                    began = expected - tick_ns  # when the last tick ended
                    who, after, others_ns = threads.since(ran if ran[1] <= began else older)
                    older, ran = ran, after
                    # held up in those reads too: all of it is this stall
                    now = clock()
                    late = now - expected
                    before, waited = waited, core_wait.total_ns()
                    cause = _cause(late, None if waited is None else waited - before,
                                   others_ns)
                    self._stall(f"Python could not run for {late / 1e6:.2f} ms ({cause}{who})")
                    if stopping:
                        break
                    expected = now + tick_ns
                    continue
                if stopping:
                    break
                waited = core_wait.total_ns()
                ticks += 1
                # threads come and go: a listing (~8 µs) at once for a new Python thread, now
                # and then for others (ZeroMQ's, CUDA's)
                count = threading.active_count()
                if count != known or ticks % 256 == 0:
                    known = count
                    threads.refresh()
                    older, ran = ran, threads.timed_snapshot()
                elif ticks % 16 == 0:
                    older, ran = ran, threads.timed_snapshot()
                # from this tick's start: time held up in its own reads is the next one's
                expected = now + tick_ns
        finally:
            core_wait.close()
            threads.close()


# Below this much, time neither without a core nor another thread's goes unsaid (the counters'
# own granularity and the span a thread snapshot covers blur it)
_UNACCOUNTED_MIN_NS = 500_000


def _cause(late_ns: int, core_wait_ns: int | None, others_ran_ns: int | None = None) -> str:
    """Why Python could not run for `late_ns`: `core_wait_ns` of it runnable without a core;
    of the rest, the GIL's share is at most what the process's other threads ran meanwhile
    (`others_ran_ns`): a thread holds the GIL while it runs (or, rarely, while a call into C
    blocks without letting go of it). What is left is neither: the thread was not runnable (a
    timer that woke it late) or ran where Linux does not see (a hypervisor that took the
    core). A GPU run's stall lines said "waiting for the GIL" with every other thread idle."""
    if core_wait_ns is None:
        if others_ran_ns is not None and others_ran_ns < late_ns / 10:
            return ("the process's other threads hardly ran: no core, a late wake-up or the "
                    "hypervisor, not the GIL")
        return "another thread held the GIL, or the process had no core"
    core_wait_ns = min(core_wait_ns, late_ns)
    rest_ns = late_ns - core_wait_ns
    unaccounted_ns = 0 if others_ran_ns is None else max(0, rest_ns - others_ran_ns)
    if unaccounted_ns < _UNACCOUNTED_MIN_NS:
        return f"{core_wait_ns / 1e6:.2f} ms of it without a core, the rest waiting for the GIL"
    return (f"{core_wait_ns / 1e6:.2f} ms of it without a core, at most "
            f"{(rest_ns - unaccounted_ns) / 1e6:.2f} ms waiting for the GIL, "
            f"{unaccounted_ns / 1e6:.2f} ms neither: not runnable (a late wake-up) or held "
            f"where Linux does not count (the hypervisor)")


class LoopMeter:
    """What a serving loop's own thread did with its time: made in that thread (the run-queue
    counter is the thread's that opens it). `mark()` at an iteration's start, `since(mark)` at
    its end: ~2 µs for both."""

    def __init__(self):
        self._core_wait = RunQueueWait()

    def mark(self) -> tuple[int, int | None, int]:
        return time.thread_time_ns(), self._core_wait.total_ns(), time.process_time_ns()

    def since(self, mark: tuple[int, int | None, int]) -> tuple[int, int | None, int]:
        """(ns the thread ran, ns it was runnable without a core or None, ns the process's
        other threads ran) since `mark`."""
        ran, waited, process = self.mark()
        ran_ns = ran - mark[0]
        return (ran_ns, None if waited is None or mark[1] is None else waited - mark[1],
                max(0, process - mark[2] - ran_ns))

    def close(self) -> None:
        self._core_wait.close()


class RunQueueWait:
    """The calling thread's total time runnable but not running (Linux's schedstat run_delay),
    read through one open file: ~1 µs a read. None where the kernel does not keep it."""

    def __init__(self):
        try:
            self._fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self._fd = None
        if self.total_ns() is None:
            self.close()

    def total_ns(self) -> int | None:
        if self._fd is None:
            return None
        try:
            return int(os.pread(self._fd, 64, 0).split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


class ThreadTimes:
    """CPU time of each thread of this process (Linux's per-thread schedstat), for naming what
    ran while the watch thread could not. `snapshot()` reads every thread's counter through
    files kept open (~0.7 µs a thread); only a stall's two snapshots are parsed."""

    def __init__(self, exclude: int | None = None):
        self._exclude = exclude
        self._fds: dict[int, int] = {}
        self.available = os.path.isdir("/proc/self/task")  # Linux
        self.refresh()

    def refresh(self) -> None:
        """Follow the threads that started or ended since the last listing."""
        try:
            tids = {int(t) for t in os.listdir("/proc/self/task")} - {self._exclude}
        except OSError:
            tids = set()
        for tid in set(self._fds) - tids:
            os.close(self._fds.pop(tid))
        for tid in tids - set(self._fds):
            try:
                self._fds[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
            except OSError:
                pass

    def snapshot(self) -> dict[int, bytes]:
        out = {}
        for tid, fd in self._fds.items():
            try:
                out[tid] = os.pread(fd, 64, 0)
            except OSError:  # the thread ended
                pass
        return out

    def timed_snapshot(self) -> tuple[int, int, dict[int, bytes]]:
        """(perf_counter_ns before, after, the snapshot): its reads may wait for the GIL."""
        start = time.perf_counter_ns()
        values = self.snapshot()
        return start, time.perf_counter_ns(), values

    def since(self, base: tuple[int, int, dict[int, bytes]],
              most: int = 3) -> tuple[str, tuple[int, int, dict[int, bytes]], int | None]:
        """("; in the last S ms other threads ran: NAME X ms (now at FILE:LINE in FUNCTION),
        ...", a new timed snapshot, ns all of them ran): the threads that ran over 0.1 ms since
        the timed snapshot `base`, busiest first. A thread started since ran at most that long.
        ("", base, None) where the OS keeps no per-thread counters."""
        if not self.available:
            return "", base, None
        self.refresh()
        after = self.timed_snapshot()
        before = base[2]
        span_ns = after[1] - base[0]
        ran, total_ns = [], 0
        for tid, raw in after[2].items():
            try:
                ran_ns = int(raw.split()[0])
                ran_ns = ran_ns - int(before[tid].split()[0]) if tid in before \
                    else min(ran_ns, span_ns)
            except (ValueError, IndexError):
                continue
            total_ns += ran_ns
            if ran_ns > 100_000:
                ran.append((ran_ns, tid))
        if not ran:
            return f"; in the last {span_ns / 1e6:.0f} ms no other thread ran", after, total_ns
        ran.sort(reverse=True)
        by_tid = {t.native_id: t for t in threading.enumerate()}
        parts = []
        for i, (ran_ns, tid) in enumerate(ran[:most]):
            thread = by_tid.get(tid)
            part = f"{_thread_name(tid, thread)} {ran_ns / 1e6:.2f} ms"
            if i == 0 and thread is not None:
                part += _where(thread)
            parts.append(part)
        return (f"; in the last {span_ns / 1e6:.0f} ms other threads ran: " + ", ".join(parts),
                after, total_ns)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}


def _thread_name(tid: int, thread: threading.Thread | None) -> str:
    if thread is not None:
        return thread.name
    name = _read(f"/proc/self/task/{tid}/comm")  # a thread Python did not start (ZeroMQ, CUDA)
    return (name or "").strip() or f"thread {tid}"


def _where(thread: threading.Thread) -> str:
    """Where a Python thread is now: just after a stall, about where it held the GIL."""
    frame = sys._current_frames().get(thread.ident)
    if frame is None:
        return ""
    code = frame.f_code
    return f" (now at {os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name})"


def process_cpu_ns() -> dict[str, int]:
    """This process's CPU time so far, split: ZeroMQ's own threads ("zmq": named ZMQbg/...,
    they run without the GIL) and the rest ("python": the interpreter's threads, which take
    turns under one GIL, so that together they get at most about one core). The difference of
    two of these over a run says whether a client process was saturated (`cpu_cores`)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)  # (threads that ended count too)
    total_ns = int((usage.ru_utime + usage.ru_stime) * 1e9)
    zmq_ns = 0
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:  # not Linux: all of it counts as the interpreter's
        tids = []
    for tid in tids:
        if (_read(f"/proc/self/task/{tid}/comm") or "").startswith("ZMQbg"):
            raw = _read(f"/proc/self/task/{tid}/schedstat")
            if raw:
                zmq_ns += int(raw.split()[0])
    return {"python": max(0, total_ns - zmq_ns), "zmq": zmq_ns}


def cpu_cores(before: dict[str, int], after: dict[str, int], span_ns: int) -> dict[str, float]:
    """`process_cpu_ns` over a span, in cores (1.0: one core all the time)."""
    return {k: round((after[k] - before[k]) / span_ns, 3) if span_ns > 0 else 0.0
            for k in after}


# --- the machine's side: was there a core to run on? -----------------------------------------
_CGROUP_CPU = ("/sys/fs/cgroup", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct")


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def host_cpu_counters() -> dict:
    """What the OS counts about CPU contention, now: a run's `host_cpu` is the difference of two
    of these (`host_cpu_delta`). Linux only; absent counters are None."""
    pressure = _read("/proc/pressure/cpu")  # µs during which some runnable task had no core
    some_us = None
    if pressure:
        for line in pressure.splitlines():
            if line.startswith("some"):
                some_us = int(line.rpartition("total=")[2])
    throttled_ns = quota_cpus = None
    for root in _CGROUP_CPU:
        stat = _read(f"{root}/cpu.stat")
        if stat is None or "throttled" not in stat:
            continue
        fields = dict(line.split() for line in stat.splitlines() if len(line.split()) == 2)
        throttled_ns = int(fields["throttled_usec"]) * 1000 if "throttled_usec" in fields \
            else int(fields.get("throttled_time", 0))
        limit = _read(f"{root}/cpu.max")  # v2: "QUOTA PERIOD" or "max PERIOD"
        if limit is not None:
            quota, period = (limit.split() + ["100000"])[:2]
            quota_cpus = None if quota == "max" else int(quota) / int(period)
        else:  # v1
            quota, period = _read(f"{root}/cpu.cfs_quota_us"), _read(f"{root}/cpu.cfs_period_us")
            if quota and period and int(quota) > 0:
                quota_cpus = int(quota) / int(period)
        break
    return {"cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count(), "quota_cpus": quota_cpus, "pressure_some_us": some_us,
            "throttled_ns": throttled_ns}


def host_cpu_delta(before: dict, after: dict, span_ns: int) -> dict:
    """summary.json's `host_cpu`: the cores this process may use, the cgroup's CPU quota (None:
    none), and over the run: the share of time some runnable task of the machine (or of its
    cgroup) had no core, and how long the cgroup's quota throttled it."""
    def diff(key):
        if before.get(key) is None or after.get(key) is None:
            return None
        return after[key] - before[key]

    some_us, throttled_ns = diff("pressure_some_us"), diff("throttled_ns")
    return {"cpus": after["cpus"], "quota_cpus": after["quota_cpus"],
            "no_core_fraction": None if some_us is None or span_ns <= 0
            else round(some_us * 1000 / span_ns, 6),
            "throttled_ms": None if throttled_ns is None else round(throttled_ns / 1e6, 3)}
