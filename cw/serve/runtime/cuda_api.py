"""The few CUDA runtime calls cw makes itself (memory, streams, events, copies), through
cuda-bindings (`pip install 'cw[gpu]'`), with every error turned into one DeviceError.

TVM launches the kernels; cw owns the memory around them and the timing. Both use the device's
primary context, so pointers and streams made here are valid in TVM's launches.
"""

from __future__ import annotations

import threading

from cw.errors import DeviceError

_local = threading.local()


def _rt():
    try:
        from cuda.bindings import runtime
    except ImportError:
        raise DeviceError("the CUDA runtime needs cuda-bindings, which is not installed",
                          "pip install 'cw[gpu]'") from None
    return runtime


def require_gpu(index: int = 0) -> None:
    """Refuse, as one DeviceError, a machine where a CUDA worker could not start: before a
    launcher starts anything else."""
    _rt()
    from cw.engine import tvm_device

    tvm_device("cuda", index)


def check(result, what: str):
    """cuda-bindings calls return (error, values...); raise on error, return the values."""
    rt = _rt()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != rt.cudaError_t.cudaSuccess:
        name = rt.cudaGetErrorName(err)[1].decode()
        hint = ("free GPU memory or ask for a smaller --page-cache"
                if err == rt.cudaError_t.cudaErrorMemoryAllocation else
                "check the GPU with nvidia-smi")
        raise DeviceError(f"CUDA {what} failed: {name}", hint)
    return values[0] if len(values) == 1 else (tuple(values) or None)


def use_device(index: int) -> None:
    """The current device is per host thread in CUDA; cw's executors are threads."""
    if getattr(_local, "device", None) != index:
        check(_rt().cudaSetDevice(index), f"cudaSetDevice({index})")
        _local.device = index


def device_count() -> int:
    try:
        return check(_rt().cudaGetDeviceCount(), "cudaGetDeviceCount")
    except DeviceError:
        return 0


def device_properties(index: int) -> dict:
    rt = _rt()
    props = check(rt.cudaGetDeviceProperties(index), "cudaGetDeviceProperties")
    driver = check(rt.cudaDriverGetVersion(), "cudaDriverGetVersion")
    runtime = check(rt.cudaRuntimeGetVersion(), "cudaRuntimeGetVersion")
    name = props.name
    name = name.split(b"\0", 1)[0].decode() if isinstance(name, bytes) else str(name)
    return {"name": name, "arch": f"sm_{props.major}{props.minor}",
            "total_bytes": int(props.totalGlobalMem),
            "driver_version": f"{driver // 1000}.{driver % 1000 // 10}",
            "cuda_version": f"{runtime // 1000}.{runtime % 1000 // 10}"}


def sm_clock_mhz(index: int) -> int | None:
    """The SM clock if NVML is readable here (nvidia-ml-py), else None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:
        return None


def free_bytes() -> int:
    free, _total = check(_rt().cudaMemGetInfo(), "cudaMemGetInfo")
    return int(free)


def malloc(nbytes: int, what: str) -> int:
    try:
        return int(check(_rt().cudaMalloc(nbytes), "cudaMalloc"))
    except DeviceError as e:
        raise DeviceError(f"cannot allocate {nbytes / 2**20:.0f} MiB of GPU memory for {what} "
                          f"({e.message.rsplit(': ', 1)[-1]}; {free_bytes() / 2**20:.0f} MiB free)",
                          "ask for a smaller --page-cache or free the GPU") from None


def free(ptr: int) -> None:
    check(_rt().cudaFree(ptr), "cudaFree")


def malloc_host(nbytes: int) -> int:
    return int(check(_rt().cudaMallocHost(nbytes), "cudaMallocHost"))


def host_register(ptr: int, nbytes: int) -> None:
    rt = _rt()
    check(rt.cudaHostRegister(ptr, nbytes, rt.cudaHostRegisterPortable), "cudaHostRegister")


def new_stream() -> int:
    rt = _rt()
    # Non-blocking: no implicit sync with the legacy default stream that other code may use
    return int(check(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking),
                     "cudaStreamCreate"))


def destroy_stream(stream: int) -> None:
    check(_rt().cudaStreamDestroy(stream), "cudaStreamDestroy")


def memset(ptr: int, value: int, nbytes: int) -> None:
    check(_rt().cudaMemset(ptr, value, nbytes), "cudaMemset")


def sync_device() -> None:
    check(_rt().cudaDeviceSynchronize(), "cudaDeviceSynchronize")


class EventPair:
    """Two events around work on one stream; `elapsed_ns` is the device time between them."""

    def __init__(self):
        rt = _rt()
        self._rt = rt
        self.start = check(rt.cudaEventCreate(), "cudaEventCreate")
        self.end = check(rt.cudaEventCreate(), "cudaEventCreate")

    def record_start(self, stream: int) -> None:
        check(self._rt.cudaEventRecord(self.start, stream), "cudaEventRecord")

    def record_end(self, stream: int) -> None:
        check(self._rt.cudaEventRecord(self.end, stream), "cudaEventRecord")

    def wait(self) -> None:
        check(self._rt.cudaEventSynchronize(self.end), "cudaEventSynchronize")

    def destroy(self) -> None:
        self._rt.cudaEventDestroy(self.start)
        self._rt.cudaEventDestroy(self.end)

    def elapsed_ns(self) -> int:
        ms = check(self._rt.cudaEventElapsedTime(self.start, self.end), "cudaEventElapsedTime")
        return int(round(ms * 1e6))


class GpuClock:
    """Reads CUDA events on the host clock (now_ns): a reference event recorded on an idle
    stream and waited for is pinned to the host time when that wait returned; any other event's
    time is the reference's plus the device time between them. So an EXEC's start and end are
    known to within a few µs however late a host thread notices them, and never early (the
    reference is pinned at or after its true time). Re-pinned every second, since the two
    clocks drift apart (ppm)."""

    REPIN_NS = 1_000_000_000

    def __init__(self, now_ns):
        self._rt, self._now = _rt(), now_ns
        self._stream = new_stream()
        self._lock = threading.Lock()
        self._retired: list = []
        self.reference = self._pin()

    def _pin(self) -> tuple[object, int]:
        rt, best = self._rt, None
        for _ in range(5):  # keep the tightest of a few tries
            event = check(rt.cudaEventCreate(), "cudaEventCreate")
            before = self._now()
            check(rt.cudaEventRecord(event, self._stream), "cudaEventRecord")
            check(rt.cudaEventSynchronize(event), "cudaEventSynchronize")
            after = self._now()
            if best is None or after - before < best[0]:
                if best is not None:
                    rt.cudaEventDestroy(best[1])
                best = (after - before, event, after)
            else:
                rt.cudaEventDestroy(event)
        return best[1], best[2]

    def current(self) -> tuple[object, int]:
        """The reference to read events recorded from now on against (re-pinned when due)."""
        event, pinned_ns = self.reference
        if self._now() - pinned_ns > self.REPIN_NS and self._lock.acquire(blocking=False):
            try:
                self._retired.append(event)  # events in flight may still be read against it
                if len(self._retired) > 4:
                    self._rt.cudaEventDestroy(self._retired.pop(0))
                self.reference = self._pin()
            finally:
                self._lock.release()
        return self.reference

    def host_ns(self, reference: tuple[object, int], event) -> int:
        ref_event, pinned_ns = reference
        ms = check(self._rt.cudaEventElapsedTime(ref_event, event), "cudaEventElapsedTime")
        return pinned_ns + int(round(ms * 1e6))

    def close(self) -> None:
        for event in self._retired + [self.reference[0]]:
            self._rt.cudaEventDestroy(event)
        self._retired = []
        destroy_stream(self._stream)


def stream_wait_event(stream: int, event) -> None:
    check(_rt().cudaStreamWaitEvent(stream, event, 0), "cudaStreamWaitEvent")


def copy_async(dst: int, src: int, nbytes: int, to_device: bool, stream: int) -> None:
    rt = _rt()
    kind = (rt.cudaMemcpyKind.cudaMemcpyHostToDevice if to_device
            else rt.cudaMemcpyKind.cudaMemcpyDeviceToHost)
    check(rt.cudaMemcpyAsync(dst, src, nbytes, kind, stream), "cudaMemcpyAsync")


def free_host(ptr: int) -> None:
    check(_rt().cudaFreeHost(ptr), "cudaFreeHost")


class StreamGate:
    """Holds a stream's work until `open()`: the stream waits on a 32-bit device flag that a
    second stream raises. Work queued behind a closed gate starts all at once, so its device
    time has no gaps left by the host still launching kernels."""

    def __init__(self, release_stream: int):
        from cuda.bindings import driver

        self._driver = driver
        self._flag = malloc(256, "an execution gate")
        memset(self._flag, 0, 4)
        self._release_stream = release_stream
        self._sequence = 0

    def close_on(self, stream: int) -> int:
        """Queue a wait on `stream`; returns the number that `open` takes to release it. Gates
        open in the order they were closed, so several launches can wait behind one flag."""
        d = self._driver
        self._sequence += 1
        err, = d.cuStreamWaitValue32(d.CUstream(stream), d.CUdeviceptr(self._flag),
                                     self._sequence,
                                     d.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ)
        if err != d.CUresult.CUDA_SUCCESS:
            raise DeviceError(f"CUDA cuStreamWaitValue32 failed: {err}", "check the GPU")
        return self._sequence

    def open(self, sequence: int) -> None:
        d = self._driver
        err, = d.cuStreamWriteValue32(d.CUstream(self._release_stream),
                                      d.CUdeviceptr(self._flag), sequence,
                                      d.CUstreamWriteValue_flags.CU_STREAM_WRITE_VALUE_DEFAULT)
        if err != d.CUresult.CUDA_SUCCESS:
            raise DeviceError(f"CUDA cuStreamWriteValue32 failed: {err}", "check the GPU")


# --- events and CUDA graphs (EXEC as one graph: cw/serve/runtime/exec_graphs.py) ------------
def copy_d2d_async(dst: int, src: int, nbytes: int, stream: int) -> None:
    rt = _rt()
    check(rt.cudaMemcpyAsync(dst, src, nbytes, rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice,
                             stream), "cudaMemcpyAsync")


def begin_capture(stream: int) -> None:
    """Record instead of run what this thread queues on `stream`. Relaxed: another thread's
    calls (the EXEC thread launching meanwhile) and this one's allocations stay legal."""
    rt = _rt()
    check(rt.cudaStreamBeginCapture(stream,
                                    rt.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed),
          "cudaStreamBeginCapture")


def end_capture(stream: int):
    """The graph recorded since `begin_capture`; raises if the capture was invalidated (an
    operation that cannot be captured, such as a synchronous copy)."""
    graph = check(_rt().cudaStreamEndCapture(stream), "cudaStreamEndCapture")
    if graph is None or int(graph) == 0:
        raise DeviceError("CUDA cudaStreamEndCapture gave no graph", "run without --exec-graphs")
    return graph


def graph_node_count(graph) -> int | None:
    """How many nodes a graph has (for telling what was captured), None if not readable."""
    try:
        _nodes, count = check(_rt().cudaGraphGetNodes(graph, 0), "cudaGraphGetNodes")
        return int(count)
    except Exception:  # the bindings' signature differs between versions; only a figure
        return None


def instantiate_graph(graph):
    return check(_rt().cudaGraphInstantiateWithFlags(graph, 0), "cudaGraphInstantiate")


def upload_graph(graph_exec, stream: int) -> None:
    """Move the graph's launch state to the device now, not at its first launch."""
    check(_rt().cudaGraphUpload(graph_exec, stream), "cudaGraphUpload")


def sync_stream(stream: int) -> None:
    check(_rt().cudaStreamSynchronize(stream), "cudaStreamSynchronize")


def launch_graph(graph_exec, stream: int) -> None:
    check(_rt().cudaGraphLaunch(graph_exec, stream), "cudaGraphLaunch")


def destroy_graph(graph) -> None:
    _rt().cudaGraphDestroy(graph)


def destroy_graph_exec(graph_exec) -> None:
    _rt().cudaGraphExecDestroy(graph_exec)


def clear_last_error() -> None:
    """A failed capture leaves its error as this thread's last one: read it away."""
    _rt().cudaGetLastError()
