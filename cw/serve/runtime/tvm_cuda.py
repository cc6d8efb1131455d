"""TVM on a CUDA GPU: the runtime of a real GPU worker and of `cw profile --device cuda`.

Device memory is taken once, at start: the weights page cache is one cudaMalloc'd region, and
each (bundle, batch size) gets a fixed pool of IO buffers in `prepare`, which also runs every
kernel so that TVM's pooled allocator holds its workspace blocks before serving. Weights are copied
page by page from pinned host memory on a copy stream of their own; INPUT and OUTPUT copies have
their own streams and EXEC runs on an exec stream, so copies overlap execution. Each phase is
bracketed by CUDA events. EXEC is launched ahead of its start and released at it (`launch`,
`finish`); the copies are waited for before their calls return. The worker's executors, not the
runtime, decide when work starts. With `exec_graphs`, EXEC is one CUDA graph launch once its
graph is captured (cw/serve/runtime/exec_graphs.py).
"""

from __future__ import annotations

import ctypes
import logging
import threading
from dataclasses import dataclass, field

import numpy as np

from cw.engine import check_target
from cw.errors import DeviceError
from cw.serve.runtime import cuda_api as cuda
from cw.serve.runtime.base import (IOSlot, PhaseTiming, Runtime, RuntimeFault, fill_input,
                                   now_ns, wait_until_ns)
from cw.serve.runtime.dlpack import KDL_CUDA, RawTensor, tensor_at
from cw.serve.runtime.exec_graphs import ExecGraph, GraphBuilder, GraphIO
from cw.serve.runtime.host import HostModel, HostWeights
from cw.tvm_env import load_tvm

log = logging.getLogger(__name__)
_ALIGN = 256
# IO buffer sets per (bundle, batch size), all taken in `prepare`: how many INFERs of one bundle
# and size can be between their input copy and their output copy at once. More wait for one
# (inputs are copied ahead of EXEC, so a short wait costs nothing); none is allocated later.
IO_SLOTS = 8
_pinned: dict[int, object] = {}  # id(HostWeights) -> the registered buffer (process-wide)


def pin_host_weights(weights: HostWeights) -> None:
    """Page-lock a model's host weights once (copies share them): pageable copies run at a
    fraction of the pinned bandwidth and are not truly asynchronous."""
    if id(weights) in _pinned or weights.buffer is None or not weights.buffer.nbytes:
        return
    buf = weights.buffer
    try:
        cuda.host_register(buf.ctypes.data, buf.nbytes)
    except DeviceError as e:
        raise DeviceError(f"cannot pin {buf.nbytes / 2**20:.0f} MiB of host weights: {e.message}",
                          "raise the locked-memory limit (ulimit -l unlimited)") from None
    _pinned[id(weights)] = buf


def _host_array(ptr: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    dt = np.dtype(dtype)
    count = int(np.prod(shape)) if shape else 1
    raw = (ctypes.c_uint8 * (count * dt.itemsize)).from_address(ptr)
    return np.frombuffer(raw, dtype=dt, count=count).reshape(shape)


@dataclass
class _CudaIO(IOSlot):
    key: tuple = ()
    dev_inputs: list[RawTensor] = field(default_factory=list)
    dev_input_ptrs: list[int] = field(default_factory=list)
    input_tensors: list = field(default_factory=list)
    pinned_inputs: list[np.ndarray] = field(default_factory=list)
    pinned_outputs: list[np.ndarray] = field(default_factory=list)
    # with CUDA graphs: EXEC's outputs, copied out of TVM's pool at its end (exec_graphs.py)
    dev_outputs: list[RawTensor] = field(default_factory=list)
    in_events: object = None
    exec_events: object = None
    out_events: object = None
    output_queued: bool = False  # the output copy is queued behind EXEC already


class TvmCudaRuntime(Runtime):
    name = "tvm-cuda"
    # EXEC i+1 is launched behind its gate while EXEC i runs, then released at its earliest
    # time: the GPU goes from one to the next without waiting for the host (densenet121 takes
    # ~1.5 ms to launch); 3 ms covers the slowest launch of the zoo
    launch_lead_ns = 3_000_000

    def __init__(self, index: int, page_size: int, num_pages: int, gate_exec: bool = True,
                 exec_graphs: bool = False):
        super().__init__(page_size, num_pages)
        self.index = index
        self.tvm = load_tvm()
        self.device = self.tvm.cuda(index)
        if not self.device.exist:
            raise DeviceError(f"no CUDA GPU {index} on this machine",
                              "use --device cpu with a bundle compiled for --target cpu")
        cuda.use_device(index)
        self.props = cuda.device_properties(index)
        nbytes = page_size * num_pages
        self.base = cuda.malloc(nbytes, "the weights page cache") if nbytes else 0
        if nbytes:
            cuda.memset(self.base, 0, nbytes)  # warm-up runs read it: zeros, not NaN garbage
        self.copy_stream = cuda.new_stream()
        self.input_stream = cuda.new_stream()
        self.output_stream = cuda.new_stream()
        # EXEC is queued in full behind a closed gate and then released: launching ~100 kernels
        # from the host takes longer than some of them run, and the GPU idling in those gaps
        # made EXEC's device time vary (resnet50 batch 1 p99.99/p50 1.16 ungated, 1.002 gated)
        self._gate_stream = cuda.new_stream() if gate_exec else None
        # per lane: (stream, TVM stream context, gate or None)
        self._exec_lanes: list[tuple[int, object, object]] = []
        self._add_lanes(1)
        self._load_events = cuda.EventPair()
        self.clock = cuda.GpuClock(now_ns)
        self._last_end_ns: dict[int, int] = {}  # lane -> end of its last EXEC (host clock)
        self._weights: dict[str, list] = {}  # model id -> TVM tensors in its cache pages
        self._page_tensors: dict[tuple[int, int, int], list[tuple[int, RawTensor]]] = {}
        self._vms: dict[tuple[int, int, int], object] = {}  # (id(bundle), batch, lane) -> main
        self._checked: set[int] = set()
        self._warm: set[tuple[int, int, int]] = set()
        self._free_slots: dict[tuple[int, int], list[_CudaIO]] = {}
        self._slot_count: dict[tuple[int, int], int] = {}
        self._slots_released = threading.Condition()
        self._all_slots: list[_CudaIO] = []
        self._device_buffers: list[int] = []
        self._host_buffers: list[int] = []
        self._libs: dict[tuple[int, int], object] = {}  # (id(bundle), batch) -> kernels
        self.graphs = None
        self.graph_execs = 0  # EXECs launched as a CUDA graph
        if exec_graphs:
            import tvm_ffi

            self._graph_io: dict[tuple[int, int], GraphIO] = {}
            self._capture_fns: dict[tuple[int, int], object] = {}
            self._capture_stream = cuda.new_stream()
            self._capture_context = tvm_ffi.use_raw_stream(self.device, self._capture_stream)
            self.graphs = GraphBuilder(self._capture, name=f"dev{index}-graphs")

    def _add_lanes(self, lanes: int) -> None:
        import tvm_ffi

        while len(self._exec_lanes) < lanes:
            stream = cuda.new_stream()
            gate = cuda.StreamGate(self._gate_stream) if self._gate_stream else None
            self._exec_lanes.append((stream, tvm_ffi.use_raw_stream(self.device, stream), gate))

    # Weights ------------------------------------------------------------------------------
    def _copy_weights(self, model: HostModel, slots: list[int]) -> PhaseTiming:
        pin_host_weights(model.weights)
        cuda.use_device(self.index)
        ps, ev, stream = self.cache.page_size, self._load_events, self.copy_stream
        start = now_ns()
        ev.record_start(stream)
        for page, slot in zip(model.weights.pages, slots):
            cuda.copy_async(self.base + slot * ps, page.ctypes.data, page.nbytes, True, stream)
        ev.record_end(stream)
        tensors = self._weight_tensors(model, slots)  # host work while the copy engine runs
        ev.wait()
        end = now_ns()
        self._weights[model.model_id] = tensors
        if self.graphs is not None:
            self._request_graphs(model, slots)
        return PhaseTiming(start, end, ev.elapsed_ns())

    def _weight_tensors(self, model: HostModel, slots: list[int]) -> list:
        """TVM tensors at each weight's address for this placement; cached per (bundle, page,
        slot) so that reloading a model costs no DLPack work."""
        m = model.manifest
        out: list = [None] * len(m.weights.tensors)
        for page_index, slot in enumerate(slots):
            key = (id(model.bundle), page_index, slot)
            entries = self._page_tensors.get(key)
            if entries is None:
                base = self.base + slot * self.cache.page_size
                entries = [(i, tensor_at(base + t.offset, t.shape, t.dtype, KDL_CUDA, self.index))
                           for i, t in enumerate(m.weights.tensors) if t.page == page_index]
                self._page_tensors[key] = entries
            for i, holder in entries:
                out[i] = holder.tensor
        return out

    def _forget(self, model: HostModel) -> None:
        self._weights.pop(model.model_id, None)

    # Inference ----------------------------------------------------------------------------
    def prepare(self, model: HostModel, batch_size: int, lanes: int = 1) -> None:
        from tvm.runtime.vm import VirtualMachine

        bundle = model.bundle
        if id(bundle) not in self._checked:
            check_target(model.manifest, "cuda", model.model_id, self.index)
            self._checked.add(id(bundle))
        cuda.use_device(self.index)
        # page-locked now, at start, not by the first LOAD: pinning 97 MB (resnet50) on the LOAD
        # path is the likely reason EXECs launched meanwhile started late (H200, 2026-11-27:
        # 1.6-6.6 ms late while a run's first LOADs went)
        pin_host_weights(model.weights)
        if self.graphs is not None and lanes > 1:
            from cw.errors import UsageError
            raise UsageError("CUDA graphs take one EXEC lane: their intermediates are TVM pool "
                             "blocks that only EXECs in one stream's order may share",
                             "measure concurrency without --exec-graphs")
        self._add_lanes(lanes)
        key = (id(bundle), batch_size)
        lib = self._libs.get(key)
        if lib is None:
            kernel = next(k for k in model.manifest.kernels if k.batch_size == batch_size)
            lib = self._libs[key] = self.tvm.runtime.load_module(
                str(bundle.file(kernel.kernel_file)))
        for lane in range(lanes):
            lane_key = (id(bundle), batch_size, lane)
            if lane_key not in self._vms:
                self._vms[lane_key] = VirtualMachine(lib, self.device, memory_cfg="pooled")["main"]
            if lane_key not in self._warm:
                self._warm_up(model, batch_size, lane)
        while self._slot_count.get(key, 0) < IO_SLOTS:
            self.release_slot(self._new_slot(model, batch_size))
        if self.graphs is not None:
            if key not in self._graph_io:
                self._graph_io[key] = self._new_graph_io(model, batch_size)
            if self.is_loaded(model.model_id):
                self._request_graphs(model, self.slots_of(model.model_id))

    def settle(self, timeout_s: float = 120.0) -> None:
        """Wait for the CUDA graphs being captured (before measuring EXEC with them)."""
        if self.graphs is not None and not self.graphs.settle(timeout_s):
            raise DeviceError(f"CUDA graphs still being captured after {timeout_s:.0f} s",
                              "run without --exec-graphs")

    def _warm_up(self, model: HostModel, batch_size: int, lane: int) -> None:
        """Run the kernels twice before serving: CUDA modules load on first launch and TVM's
        pooled allocator takes its workspace and output blocks then, not on the measured path.
        Weights are whatever the first cache pages hold (zeros at start); outputs are dropped."""
        pages = model.weights.num_pages
        if pages > self.cache.num_pages:
            return  # a model that can never load needs no warm kernels
        weights = self._weights.get(model.model_id) or \
            self._weight_tensors(model, list(range(pages)))
        slot = self.acquire_slot(model, batch_size)
        stream, context, _ = self._exec_lanes[lane]
        fn = self._vms[(id(model.bundle), batch_size, lane)]
        for _ in range(2):
            with context:
                fn(*slot.input_tensors, *weights)
            slot.exec_events.record_end(stream)
            slot.exec_events.wait()
        self.release_slot(slot)
        self._warm.add((id(model.bundle), batch_size, lane))

    def acquire_slot(self, model: HostModel, batch_size: int,
                     deadline_ns: int | None = None) -> IOSlot | None:
        """Without a deadline (profiling, tests) a new set is made when none is free."""
        key = (id(model.bundle), batch_size)
        with self._slots_released:
            free = self._free_slots.setdefault(key, [])
            if deadline_ns is not None and self._slot_count.get(key, 0) >= IO_SLOTS:
                while not free:
                    left = deadline_ns - now_ns()
                    if left <= 0:
                        return None
                    self._slots_released.wait(left / 1e9)
            if free:
                slot = free.pop()
                slot.model_id = model.model_id
                return slot
        return self._new_slot(model, batch_size)

    def _new_slot(self, model: HostModel, batch_size: int) -> _CudaIO:
        key = (id(model.bundle), batch_size)
        cuda.use_device(self.index)
        slot = _CudaIO(model.model_id, batch_size, key=key)
        for spec in model.manifest.inputs:
            shape = (batch_size, *spec.sample_shape)
            nbytes = batch_size * spec.sample_bytes
            padded = -(-nbytes // _ALIGN) * _ALIGN
            ptr = cuda.malloc(padded, f"the inputs of {model.manifest.name}")
            self._device_buffers.append(ptr)
            cuda.memset(ptr, 0, padded)
            holder = tensor_at(ptr, shape, spec.dtype, KDL_CUDA, self.index)
            slot.dev_inputs.append(holder)
            slot.dev_input_ptrs.append(ptr)
            slot.input_tensors.append(holder.tensor)
            host = _host_array(self._pinned_buffer(padded), shape, spec.dtype)
            host[...] = 0
            slot.pinned_inputs.append(host)
        for spec in model.manifest.outputs:
            nbytes = -(-batch_size * spec.sample_bytes // _ALIGN) * _ALIGN
            slot.pinned_outputs.append(_host_array(self._pinned_buffer(nbytes),
                                                   (batch_size, *spec.sample_shape), spec.dtype))
            if self.graphs is not None:
                ptr = cuda.malloc(nbytes, f"the outputs of {model.manifest.name}")
                self._device_buffers.append(ptr)
                slot.dev_outputs.append(tensor_at(ptr, (batch_size, *spec.sample_shape),
                                                  spec.dtype, KDL_CUDA, self.index))
        slot.in_events, slot.out_events = cuda.EventPair(), cuda.EventPair()
        slot.exec_events = cuda.EventPair()
        with self._slots_released:
            self._slot_count[key] = self._slot_count.get(key, 0) + 1
            self._all_slots.append(slot)
        return slot

    def _pinned_buffer(self, nbytes: int) -> int:
        ptr = cuda.malloc_host(nbytes)
        self._host_buffers.append(ptr)
        return ptr

    def release_slot(self, slot: IOSlot) -> None:
        slot.outputs = []  # hands the output blocks back to TVM's pool
        with self._slots_released:
            self._free_slots.setdefault(slot.key, []).append(slot)
            self._slots_released.notify()

    def copy_input(self, model: HostModel, slot: IOSlot, inputs: list[np.ndarray]) -> PhaseTiming:
        cuda.use_device(self.index)
        start = now_ns()
        for host, x in zip(slot.pinned_inputs, inputs):
            slot.n = fill_input(host, x)
        ev, stream = slot.in_events, self.input_stream
        ev.record_start(stream)
        for host, ptr in zip(slot.pinned_inputs, slot.dev_input_ptrs):
            cuda.copy_async(ptr, host.ctypes.data, host.nbytes, True, stream)
        ev.record_end(stream)
        ev.wait()
        end = now_ns()
        return PhaseTiming(start, end, ev.elapsed_ns())

    def execute(self, model: HostModel, slot: IOSlot, lane: int = 0) -> PhaseTiming:
        return self.finish(self.launch(model, slot, 0, lane))

    def launch(self, model: HostModel, slot: IOSlot, release_at_ns: int = 0, lane: int = 0):
        fn = self._vms.get((id(model.bundle), slot.batch_size, lane))
        weights = self._weights.get(model.model_id)
        if fn is None or weights is None:
            raise RuntimeFault(f"model {model.model_id} batch {slot.batch_size} is not ready")
        cuda.use_device(self.index)
        stream, context, gate = self._exec_lanes[lane]
        ev = slot.exec_events
        reference = self.clock.current()
        graph = None
        if self.graphs is not None:
            graph = self.graphs.get((id(model.bundle), slot.batch_size,
                                     tuple(self.slots_of(model.model_id))))
        if gate is None:
            wait_until_ns(release_at_ns)  # ungated, launching is starting
        sequence = gate.close_on(stream) if gate is not None else 0
        try:
            ev.record_start(stream)
            if graph is not None:
                self._launch_graph(graph, slot, stream)
                self.graph_execs += 1
                outputs = graph.output_ptrs
            else:
                with context:
                    result = fn(*slot.input_tensors, *weights)
                outputs = [result] if hasattr(result, "data_ptr") else list(result)
            if self.graphs is not None:  # out of the pool before anything later can reuse it
                self._keep_outputs(model, slot, outputs, stream)
            else:
                slot.outputs = outputs
            ev.record_end(stream)
            # the output copy follows EXEC on the GPU, on its own stream, without waiting for
            # a host thread to notice that EXEC ended
            cuda.stream_wait_event(self.output_stream, ev.end)
            self._queue_output(model, slot)
        finally:
            if gate is not None:  # even after an error: a closed gate would block the stream
                wait_until_ns(release_at_ns)
                gate.open(sequence)
        return slot, reference, lane

    @staticmethod
    def _launch_graph(graph: ExecGraph, slot: _CudaIO, stream: int) -> None:
        io = graph.io
        for dst, src, nbytes in zip(io.input_ptrs, slot.dev_input_ptrs, io.input_nbytes):
            cuda.copy_d2d_async(dst, src, nbytes, stream)
        cuda.launch_graph(graph.handle, stream)

    @staticmethod
    def _keep_outputs(model: HostModel, slot: _CudaIO, outputs: list, stream: int) -> None:
        """Copy EXEC's outputs (pool blocks: tensors, or a graph's addresses) into the slot's
        own device buffers, on the exec stream."""
        for holder, out, spec in zip(slot.dev_outputs, outputs, model.manifest.outputs):
            src = out if isinstance(out, int) else out.data_ptr()
            cuda.copy_d2d_async(holder.tensor.data_ptr(), src, slot.n * spec.sample_bytes,
                                stream)
        slot.outputs = [holder.tensor for holder in slot.dev_outputs]

    def finish(self, handle) -> PhaseTiming:
        """EXEC's start and end as the GPU saw them, on the host clock."""
        slot, reference, lane = handle
        slot.exec_events.wait()
        ev = slot.exec_events
        # EXECs on a lane run one after another; two read against different references could
        # otherwise seem to overlap by the references' few µs of disagreement
        start = max(self.clock.host_ns(reference, ev.start), self._last_end_ns.get(lane, 0))
        end = max(self.clock.host_ns(reference, ev.end), start)
        self._last_end_ns[lane] = end
        return PhaseTiming(start, end, ev.elapsed_ns())

    def _queue_output(self, model: HostModel, slot: _CudaIO) -> None:
        ev, stream = slot.out_events, self.output_stream
        ev.record_start(stream)
        for host, out, spec in zip(slot.pinned_outputs, slot.outputs, model.manifest.outputs):
            cuda.copy_async(host.ctypes.data, out.data_ptr(), slot.n * spec.sample_bytes, False,
                            stream)
        ev.record_end(stream)
        slot.output_queued = True

    def copy_output(self, model: HostModel, slot: IOSlot) -> tuple[list[np.ndarray], PhaseTiming]:
        """Waits for the copy queued behind EXEC (`launch` queues it)."""
        cuda.use_device(self.index)
        start = now_ns()
        if not slot.output_queued:
            self._queue_output(model, slot)
        slot.out_events.wait()
        slot.output_queued = False
        outs = [host[:slot.n].copy() for host in slot.pinned_outputs]
        end = now_ns()
        return outs, PhaseTiming(start, end, slot.out_events.elapsed_ns())

    # Measurements for `cw profile` -------------------------------------------------------
    def _plain_copy_gbps(self, nbytes: int, repeats: int = 5) -> float | None:
        """Plain pinned host→device bandwidth of one `nbytes` copy into the cache: what LOAD's
        page-by-page copies are compared with."""
        nbytes = min(nbytes, self.cache.page_size * self.cache.num_pages)
        if nbytes <= 0:
            return None
        cuda.use_device(self.index)
        host = cuda.malloc_host(nbytes)
        try:
            ev, stream, samples = cuda.EventPair(), self.copy_stream, []
            for _ in range(repeats):
                ev.record_start(stream)
                cuda.copy_async(self.base, host, nbytes, True, stream)
                ev.record_end(stream)
                ev.wait()
                samples.append(ev.elapsed_ns())
        finally:
            cuda.free_host(host)
        return nbytes / max(sorted(samples)[len(samples) // 2], 1)

    def close(self) -> None:
        """Free what this runtime allocated. TVM's pooled allocator keeps its workspace blocks
        for the process's lifetime (it has no per-VM release)."""
        if self.base is None:
            return
        graphs = self.graphs.close() if self.graphs is not None else []
        if self.graphs is not None:
            log.info("GPU %d: %d CUDA graphs made, %d EXECs ran as one, %d (bundle, batch size) "
                     "without (capture failed)", self.index, len(graphs), self.graph_execs,
                     len(self.graphs.failed))
        cuda.use_device(self.index)
        cuda.sync_device()
        for graph in graphs:
            cuda.destroy_graph_exec(graph.handle)
        if self.graphs is not None:
            self._graph_io.clear()
            self._capture_fns.clear()
            cuda.destroy_stream(self._capture_stream)
        self._vms.clear()
        self._weights.clear()
        self._page_tensors.clear()
        self._free_slots.clear()
        gates = [lane[2]._flag for lane in self._exec_lanes if lane[2] is not None]
        for ptr in self._device_buffers + gates + ([self.base] if self.base else []):
            cuda.free(ptr)
        for ptr in self._host_buffers:
            cuda.free_host(ptr)
        for slot in self._all_slots:
            for events in (slot.in_events, slot.exec_events, slot.out_events):
                events.destroy()
        self._load_events.destroy()
        self.clock.close()
        streams = [lane[0] for lane in self._exec_lanes] + [self.copy_stream, self.input_stream,
                                                            self.output_stream]
        for stream in streams + ([self._gate_stream] if self._gate_stream else []):
            cuda.destroy_stream(stream)
        self._exec_lanes, self._all_slots, self._slot_count = [], [], {}
        self._device_buffers, self._host_buffers, self.base = [], [], None

    def describe(self) -> dict:
        out = {**super().describe(), "device": self.props["name"], "arch": self.props["arch"]}
        if self.graphs is not None:
            out["exec_graphs"] = {"made": len(self.graphs.graphs),
                                  "failed": len(self.graphs.failed),
                                  "execs": self.graph_execs}
        return out

    # CUDA graphs (exec_graphs) -------------------------------------------------------------
    def _request_graphs(self, model: HostModel, slots: list[int]) -> None:
        """Capture, in the background, this placement's graph at every prepared batch size."""
        for batch in model.manifest.batch_sizes:
            if (id(model.bundle), batch) in self._graph_io:
                self.graphs.request((id(model.bundle), batch, tuple(slots)),
                                    (model, batch, list(slots)),
                                    f"{model.manifest.name} at batch {batch}")

    def _new_graph_io(self, model: HostModel, batch_size: int) -> GraphIO:
        ptrs, sizes, tensors, holders = [], [], [], []
        for spec in model.manifest.inputs:
            nbytes = batch_size * spec.sample_bytes
            ptr = cuda.malloc(-(-nbytes // _ALIGN) * _ALIGN,
                              f"the graph inputs of {model.manifest.name}")
            self._device_buffers.append(ptr)
            cuda.memset(ptr, 0, nbytes)
            holder = tensor_at(ptr, (batch_size, *spec.sample_shape), spec.dtype, KDL_CUDA,
                               self.index)
            ptrs.append(ptr)
            sizes.append(nbytes)
            tensors.append(holder.tensor)
            holders.append(holder)
        return GraphIO(ptrs, sizes, tensors, holders)

    def _capture(self, item: tuple[HostModel, int, list[int]]) -> ExecGraph:
        """One EXEC recorded as a graph (on the builder's thread and stream): the VM's
        launches with this placement's weights and the graph's own inputs; where it leaves
        its outputs (pool blocks, free again once this returns: see exec_graphs.py)."""
        from tvm.runtime.vm import VirtualMachine

        model, batch, slots = item
        cuda.use_device(self.index)
        key = (id(model.bundle), batch)
        fn = self._capture_fns.get(key)
        if fn is None:  # a VM of its own: a VM is not to be called from two threads at once
            fn = self._capture_fns[key] = VirtualMachine(self._libs[key], self.device,
                                                         memory_cfg="pooled")["main"]
        io = self._graph_io[key]
        weights = self._weight_tensors(model, slots)
        stream, graph, result, outs = self._capture_stream, None, None, None
        try:
            cuda.begin_capture(stream)
            try:
                with self._capture_context:
                    result = fn(*io.input_tensors, *weights)
                outs = [result] if hasattr(result, "data_ptr") else list(result)
                output_ptrs = [out.data_ptr() for out in outs]
            finally:
                graph = cuda.end_capture(stream)  # ends it also after an error
            handle = cuda.instantiate_graph(graph)
            nodes = cuda.graph_node_count(graph)
        except Exception:
            cuda.clear_last_error()
            raise
        finally:
            result = outs = None  # the pool blocks go back (the graph keeps their addresses)
            if graph is not None:
                cuda.destroy_graph(graph)
        cuda.upload_graph(handle, stream)
        cuda.sync_stream(stream)  # uploaded before the EXEC thread can launch it elsewhere
        return ExecGraph(handle, io, output_ptrs, nodes)
