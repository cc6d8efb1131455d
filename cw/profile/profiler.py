"""Measure a bundle the way a worker runs it and store the result as the bundle's profile.json.

Weights are loaded page by page into the runtime's page cache (LOAD, repeated); then, per batch
size, INPUT copy, EXEC and OUTPUT copy are timed separately, EXEC strictly one at a time. The
concurrency experiment (K executions at once) is reported but never written as the profile.
"""

from __future__ import annotations

import datetime
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import cw
from cw.bundle import (PROFILE_FILE, encode_json, open_bundle, profile_intact, synthetic_input,
                       replace_file_in_bundle)
from cw.engine import check_target, parse_device, tvm_device
from cw.errors import UsageError
from cw.profile.schema import (PROFILE_SCHEMA_VERSION, SLOWEST_KEPT, BatchProfile, DeviceInfo,
                               LoadProfile, Profile, SlowRun)
from cw.profile.stats import Stats, summarize
from cw.profile.store import merge_measured, read_profile
from cw.serve.runtime.base import Runtime, now_ns
from cw.serve.runtime.host import HostModel, HostWeights
from cw.tvm_env import load_tvm
from cw.units import format_duration_ns

Progress = Callable[[str, dict], None]
# never fewer measured runs than the controller's own estimates take (the p99 of the last 10
# measurements, the paper's window): a profile is their first value
MIN_ITERATIONS = 10
# warm-up runs stop early once they have taken this share of --max-time (after the first, which
# takes the one-time costs): 20 warm-ups of a model that takes seconds a run took minutes
WARMUP_SHARE = 0.1
# measured runs timed before the rest are planned (within --max-time)
_PLAN_AFTER = 5


@dataclass(frozen=True)
class ProfileConfig:
    device: str | None = None  # "cuda:N" or "cpu"; None: the bundle's target (cuda:0 or cpu)
    iterations: int = 1000
    warmup: int = 20
    load_iterations: int = 50
    # per batch size: where `iterations` would take longer, as many as fit (at least
    # MIN_ITERATIONS); a big model on a CPU takes seconds an iteration. None: no limit
    max_time_s: float | None = 120.0
    batch_sizes: tuple[int, ...] | None = None  # None: every compiled batch size
    concurrency: int = 1
    write: bool = True
    # False: the experiment without TvmCudaRuntime's EXEC gate (reported, never stored)
    gate_exec: bool = True
    exec_graphs: bool = False  # EXEC as one CUDA graph, as `cw serve --exec-graphs` runs it
    # also as many EXECs back to back, each queued while the one before runs (as a busy worker
    # runs them): the GPU never waits between them (reported, never stored)
    back_to_back: bool = False

    def __post_init__(self):
        if self.iterations < 1 or self.warmup < 0 or self.load_iterations < 1:
            raise UsageError("iterations must be ≥ 1 and warmup ≥ 0",
                             "e.g. --iterations 1000 --warmup 20")
        if self.concurrency < 1:
            raise UsageError("--concurrency must be ≥ 1")
        if self.exec_graphs and self.concurrency > 1:
            raise UsageError("--exec-graphs runs one EXEC at a time",
                             "measure --concurrency without --exec-graphs")
        if self.max_time_s is not None and not self.max_time_s > 0:
            raise UsageError(f"--max-time must be positive, not {self.max_time_s} s",
                             "e.g. --max-time 2m, or --max-time none for no limit")

    def planned_iterations(self, iteration_ns: int) -> int:
        """Measured runs for one batch size whose runs take `iteration_ns` each."""
        if self.max_time_s is None or iteration_ns <= 0:
            return self.iterations
        fit = int(self.max_time_s * 1e9 // iteration_ns)
        return min(self.iterations, max(fit, MIN_ITERATIONS))


@dataclass
class ConcurrencyResult:
    concurrency: int
    batch_size: int
    throughput_per_s: float
    latency: Stats


@dataclass
class BackToBackResult:
    """EXECs run back to back: their device times, the slowest with when they ran, and the
    share of the span from the first start to the last end that the GPU spent in them (near
    1: it never waited between them)."""
    batch_size: int
    exec: Stats
    exec_slowest: list[SlowRun]
    busy: float


@dataclass
class Reported:
    """What `cw profile` measures besides the profile, reported and never stored."""
    concurrency: list[ConcurrencyResult]
    back_to_back: list[BackToBackResult]


def make_runtime(device: str, page_size: int, num_pages: int, gate_exec: bool = True,
                 exec_graphs: bool = False) -> Runtime:
    kind, index = parse_device(device)
    if kind == "cpu" and exec_graphs:
        raise UsageError("--exec-graphs is for CUDA devices", "drop it, or use --device cuda:N")
    tvm_device(kind, index)  # raises when there is no such device
    if kind == "cpu":
        from cw.serve.runtime.tvm_cpu import TvmCpuRuntime
        return TvmCpuRuntime(page_size, num_pages)
    from cw.serve.runtime.tvm_cuda import TvmCudaRuntime
    return TvmCudaRuntime(index, page_size, num_pages, gate_exec, exec_graphs)


def _device_info(kind: str, runtime: Runtime, clock_before: int | None) -> DeviceInfo:
    import platform

    if kind == "cpu":
        name = platform.processor() or platform.machine()
        try:
            for line in open("/proc/cpuinfo"):
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        num_threads = runtime.tvm.get_global_func("runtime.NumThreads")
        return DeviceInfo("cpu", name, threads=int(num_threads()))
    from cw.serve.runtime import cuda_api

    props = runtime.props
    return DeviceInfo(kind, props["name"], props["driver_version"], props["cuda_version"],
                      clock_before, cuda_api.sm_clock_mhz(runtime.index))


def _none(event: str, info: dict) -> None:
    pass


def profile_bundle(path: str | Path, config: ProfileConfig = ProfileConfig(),
                   progress: Progress = _none) -> tuple[Profile, Reported]:
    bundle = open_bundle(path, remeasuring=True)
    # a damaged profile.json is measured afresh, not merged with
    earlier = read_profile(bundle) if profile_intact(bundle) else None
    m = bundle.manifest
    device = config.device or ("cuda:0" if m.target.kind == "cuda" else "cpu")
    kind, index = parse_device(device)
    check_target(m, kind, str(path), index)
    batch_sizes = list(config.batch_sizes or m.batch_sizes)
    missing = sorted(set(batch_sizes) - set(m.batch_sizes))
    if missing:
        raise UsageError(f"batch size(s) {missing} are not compiled in {path}",
                         f"compiled: {m.batch_sizes}")
    model = HostModel(m.name, bundle, HostWeights(bundle))
    free_before = clock_before = None
    if kind == "cuda":
        from cw.serve.runtime import cuda_api

        tvm_device(kind, index)
        cuda_api.use_device(index)
        free_before, clock_before = cuda_api.free_bytes(), cuda_api.sm_clock_mhz(index)
    runtime = make_runtime(device, m.weights.page_size, model.weights.num_pages,
                           config.gate_exec, config.exec_graphs)
    try:
        load = _measure_load(runtime, model, config, progress)
        shortened: list[str] = []  # batch sizes measured fewer times, to fit --max-time
        batches, reported = _measure_batches(runtime, model, batch_sizes, config, progress,
                                             shortened)
        max_workspace = max(k.workspace_bytes for k in m.kernels if k.batch_size in batch_sizes)
        io = max(k.input_bytes + k.output_bytes for k in m.kernels
                 if k.batch_size in batch_sizes)
        device_memory = runtime.cache.num_pages * runtime.cache.page_size + max_workspace + io
        notes = ["CPU timings use the host monotonic clock"]
        if free_before is not None:
            from cw.serve.runtime import cuda_api

            device_memory = free_before - cuda_api.free_bytes()
            notes = ["device memory = what cudaMemGetInfo lost from start to end (page cache, "
                     "IO buffers, TVM's kernels and workspace pool)"]
        notes += shortened
        if config.exec_graphs:
            notes.append("EXEC ran as one CUDA graph (--exec-graphs), as a worker with "
                         "--exec-graphs runs it")
        device = _device_info(kind, runtime, clock_before)
    finally:
        runtime.close()
    tvm = load_tvm()
    profile = Profile(
        schema_version=PROFILE_SCHEMA_VERSION, bundle=m.name, runtime=runtime.name,
        device=device,
        date_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        cw_version=cw.__version__, tvm_version="".join([str(tvm.__version__)]),
        iterations=config.iterations, warmup=config.warmup,
        device_memory_bytes=device_memory, load=load, batches=batches, notes=notes)
    if config.write and config.gate_exec:
        stored = merge_measured(earlier, profile)
        replace_file_in_bundle(bundle, PROFILE_FILE, encode_json(stored))
    return profile, reported


def _measure_load(runtime: Runtime, model: HostModel, config: ProfileConfig,
                  progress: Progress) -> LoadProfile:
    m = model.manifest
    progress("phase", {"text": "LOAD (weights → page cache)", "total": config.load_iterations})
    slots = runtime.cache.allocate(model.weights.num_pages)
    # The plain copy writes over the page cache, so it comes before the loads: after them it
    # overwrote the weights that every EXEC below runs on (on the CPU, bytes of 1 read as
    # denormal floats made ResNet-18's EXEC 2.5x slower than with its own weights).
    reference = runtime.copy_bandwidth_gbps(m.weights.total_bytes)
    load_samples = []
    for _ in range(config.load_iterations):
        if runtime.is_loaded(model.model_id):
            runtime.unload(model)
        load_samples.append(runtime.load(model, slots).device_ns)
        progress("advance", {})
    load_stats = summarize(load_samples)
    bandwidth = m.weights.total_bytes / max(load_stats.p50_ns, 1)
    load = LoadProfile(m.weights.total_bytes, len(m.weights.pages), load_stats,
                       round(bandwidth, 3), None if reference is None else round(reference, 3),
                       None if not reference else round(bandwidth / reference, 3))
    return load


def _measure_batches(runtime: Runtime, model: HostModel, batch_sizes: list[int],
                     config: ProfileConfig, progress: Progress, notes: list[str]
                     ) -> tuple[list[BatchProfile], Reported]:
    import numpy as np

    m = model.manifest
    batches, reported = [], Reported([], [])
    for b in batch_sizes:
        runtime.prepare(model, b)
        runtime.settle()  # with --exec-graphs: EXEC measured as its graph, not the VM's
        rng = np.random.default_rng(b)
        inputs = [synthetic_input(s, b, rng) for s in m.inputs]
        slot = runtime.acquire_slot(model, b)
        progress("phase", {"text": f"batch {b}: INPUT, EXEC, OUTPUT",
                           "total": config.warmup + config.iterations})
        samples = {"input": [], "exec": [], "exec_host": [], "output": []}
        warmup, warm_ns = config.warmup, 0
        total, took_ns, began_ns = warmup + config.iterations, [], []
        i = 0
        while i < total:
            began = now_ns()
            t_in = runtime.copy_input(model, slot, inputs)
            issued = now_ns()  # EXEC's own start is when the device began, after the launch
            t_ex = runtime.execute(model, slot)
            _, t_out = runtime.copy_output(model, slot)
            if i >= warmup:
                samples["input"].append(t_in.device_ns)
                samples["exec"].append(t_ex.device_ns)
                samples["exec_host"].append(t_ex.end_ns - issued)
                samples["output"].append(t_out.device_ns)
                took_ns.append(now_ns() - began)
                began_ns.append(began)
                if len(took_ns) == _PLAN_AFTER:
                    total = warmup + _plan(config, b, sorted(took_ns)[_PLAN_AFTER // 2],
                                           notes, progress, warmup)
            else:
                warm_ns += now_ns() - began
                if (config.max_time_s is not None and i + 1 < warmup
                        and warm_ns >= config.max_time_s * 1e9 * WARMUP_SHARE):
                    note = (f"batch {b}: {i + 1} of {warmup} warm-up runs, "
                            f"{warm_ns / (i + 1) / 1e6:.4g} ms each (a tenth of --max-time)")
                    notes.append(note)
                    warmup = i + 1
                    total = warmup + config.iterations
                    progress("total", {"total": total, "text": note})
            progress("advance", {})
            i += 1
        runtime.release_slot(slot)
        batches.append(BatchProfile(b, *(summarize(samples[k]) for k in
                                         ("input", "exec", "exec_host", "output")),
                                    exec_slowest=slowest_runs(samples["exec"], began_ns)))
        measured = total - warmup
        if config.back_to_back:
            progress("phase", {"text": f"batch {b}: EXECs back to back", "total": measured})
            reported.back_to_back.append(_back_to_back(runtime, model, b, inputs, measured,
                                                       progress))
        if config.concurrency > 1:
            progress("phase", {"text": f"batch {b}: {config.concurrency} EXECs at once",
                               "total": measured})
            reported.concurrency.append(_concurrent(runtime, model, b, inputs,
                                                    config.concurrency, measured, progress))
    return batches, reported


def _back_to_back(runtime: Runtime, model: HostModel, batch: int, inputs, runs: int,
                  progress: Progress) -> BackToBackResult:
    """`runs` EXECs on two IO slots in turn, each launched while the one before runs, so that
    the GPU goes from one to the next without waiting for the host (a synchronous runtime,
    the CPU's, runs them one after another all the same)."""
    slots = [runtime.acquire_slot(model, batch) for _ in range(2)]
    in_flight = []  # launched, not yet finished: the GPU may still write into their slots
    try:
        for slot in slots:
            runtime.copy_input(model, slot, inputs)
        for slot in slots:  # warm: each slot's first EXEC
            runtime.finish(runtime.launch(model, slot))
            runtime.copy_output(model, slot)
        device_ns, began_ns, spans = [], [], []
        in_flight.append(runtime.launch(model, slots[0]))
        for i in range(runs):
            if i + 1 < runs:
                in_flight.append(runtime.launch(model, slots[(i + 1) % 2]))
            t = runtime.finish(in_flight.pop(0))
            runtime.copy_output(model, slots[i % 2])  # (before its slot is launched again)
            device_ns.append(t.device_ns)
            began_ns.append(t.start_ns)
            spans.append((t.start_ns, t.end_ns))
            progress("advance", {})
    finally:
        # after an error too, no EXEC may still run in a slot handed back for reuse
        for handle in in_flight:
            try:
                runtime.finish(handle)
            except Exception:  # (the error that brought us here is the one to report)
                pass
        for slot in slots:
            runtime.release_slot(slot)
    span = spans[-1][1] - spans[0][0]
    busy = sum(device_ns) / span if span > 0 else 1.0
    return BackToBackResult(batch, summarize(device_ns), slowest_runs(device_ns, began_ns),
                            round(min(busy, 1.0), 4))


def slowest_runs(exec_ns: list[int], began_ns: list[int]) -> list[SlowRun]:
    """The SLOWEST_KEPT slowest of `exec_ns` (run i began at `began_ns[i]`), in run order."""
    import numpy as np

    a = np.asarray(exec_ns, dtype=np.int64)
    k = min(SLOWEST_KEPT, a.size)
    if k == 0:
        return []
    picked = np.sort(np.argpartition(a, a.size - k)[a.size - k:])
    return [SlowRun(int(i), int(a[i]), began_ns[i] - began_ns[0]) for i in picked]


def _plan(config: ProfileConfig, batch: int, iteration_ns: int, notes: list[str],
          progress: Progress, warmup: int) -> int:
    planned = config.planned_iterations(iteration_ns)
    if planned < config.iterations:
        note = (f"batch {batch}: {planned} of {config.iterations} iterations, "
                f"{iteration_ns / 1e6:.4g} ms each (--max-time "
                f"{format_duration_ns(int(config.max_time_s * 1e9))} per batch size)")
        notes.append(note)
        progress("total", {"total": warmup + planned, "text": note})
    return planned


def _concurrent(runtime: Runtime, model: HostModel, batch: int, inputs, k: int,
                iterations: int, progress: Progress) -> ConcurrencyResult:
    """K threads each running INPUT→EXEC→OUTPUT back to back on their own IO buffers."""
    per_thread = max(1, iterations // k)
    latencies: list[list[int]] = [[] for _ in range(k)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(k + 1)
    runtime.prepare(model, batch, lanes=k)
    slots = [runtime.acquire_slot(model, batch) for _ in range(k)]

    def worker(idx: int) -> None:
        barrier.wait()
        try:
            for _ in range(per_thread):
                runtime.copy_input(model, slots[idx], inputs)
                issued = now_ns()
                t = runtime.execute(model, slots[idx], lane=idx)
                runtime.copy_output(model, slots[idx])
                latencies[idx].append(t.end_ns - issued)
                progress("advance", {})
        except BaseException as e:  # re-raised in the caller: a dead thread must not skew results
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(k)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    for slot in slots:
        runtime.release_slot(slot)
    if errors:
        raise errors[0]
    flat = [x for lst in latencies for x in lst]
    return ConcurrencyResult(k, batch, len(flat) * batch / elapsed, summarize(flat))
