"""TVM on the CPU: real inference on bundles compiled with `--target cpu` (CI, GPU-less users).

The page cache is one aligned host buffer allocated at start; LOAD copies pages into it and the
kernels read their weights zero-copy from there, exactly as the GPU runtime does in device memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cw.engine import check_target, host_rows
from cw.serve.runtime.base import (IOSlot, PhaseTiming, Runtime, RuntimeFault, fill_input,
                                   now_ns)
from cw.serve.runtime.host import HostModel
from cw.tvm_env import load_tvm


def aligned_empty(nbytes: int, alignment: int = 256) -> np.ndarray:
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + nbytes]


def aligned_zeros(shape: tuple, dtype: str) -> np.ndarray:
    dt = np.dtype(dtype)
    count = int(np.prod(shape))
    buf = aligned_empty(count * dt.itemsize)
    buf[:] = 0
    return buf.view(dt).reshape(shape)


@dataclass
class _CpuIO(IOSlot):
    # TVM's views of `inputs`, made once with the slot (with `main` kept and the outputs taken
    # by DLPack: Silero VAD's output phase 40-64 us -> 5-10, docs/benchmarks.md, stop 73)
    tensors: list = field(default_factory=list)


class TvmCpuRuntime(Runtime):
    name = "tvm-cpu"

    def __init__(self, page_size: int, num_pages: int):
        super().__init__(page_size, num_pages)
        self.tvm = load_tvm()
        self.device = self.tvm.cpu(0)
        self.memory = aligned_empty(page_size * num_pages)
        self._weights: dict[str, list] = {}  # model id -> TVM tensors aliasing cache pages
        # (id(bundle), batch, lane) -> the VM's entry point, shared by copies of a model. A TVM
        # VM is not thread-safe, so concurrent executions (the profiler's concurrency runs) get
        # a lane each.
        self._vms: dict[tuple[int, int, int], object] = {}
        self._free_slots: dict[tuple[str, int], list[IOSlot]] = {}

    def _page(self, slot: int) -> np.ndarray:
        ps = self.cache.page_size
        return self.memory[slot * ps:(slot + 1) * ps]

    def _copy_weights(self, model: HostModel, slots: list[int]) -> PhaseTiming:
        start = now_ns()
        for page, slot in zip(model.weights.pages, slots):
            self._page(slot)[:page.nbytes] = page
        rt = self.tvm.runtime
        tensors = []
        for t in model.manifest.weights.tensors:
            raw = self._page(slots[t.page])[t.offset:t.offset + t.nbytes]
            tensors.append(rt.from_dlpack(raw.view(np.dtype(t.dtype)).reshape(t.shape)))
        self._weights[model.model_id] = tensors
        end = now_ns()
        return PhaseTiming(start, end, end - start)

    def _forget(self, model: HostModel) -> None:
        self._weights.pop(model.model_id, None)

    def prepare(self, model: HostModel, batch_size: int, lanes: int = 1) -> None:
        check_target(model.manifest, "cpu", model.model_id)
        from tvm.runtime.vm import VirtualMachine

        lib = None
        for lane in range(lanes):
            key = (id(model.bundle), batch_size, lane)
            if key not in self._vms:
                if lib is None:
                    kernel = next(k for k in model.manifest.kernels if k.batch_size == batch_size)
                    lib = self.tvm.runtime.load_module(str(model.bundle.file(kernel.kernel_file)))
                self._vms[key] = VirtualMachine(lib, self.device)["main"]

    def acquire_slot(self, model: HostModel, batch_size: int,
                     deadline_ns: int | None = None) -> IOSlot | None:
        free = self._free_slots.get((model.model_id, batch_size))
        if free:
            return free.pop()
        slot = _CpuIO(model.model_id, batch_size)
        slot.inputs = [aligned_zeros((batch_size, *s.sample_shape), s.dtype)
                       for s in model.manifest.inputs]
        slot.tensors = [self.tvm.runtime.from_dlpack(x) for x in slot.inputs]
        return slot

    def release_slot(self, slot: IOSlot) -> None:
        slot.outputs = []
        self._free_slots.setdefault((slot.model_id, slot.batch_size), []).append(slot)

    def copy_input(self, model: HostModel, slot: IOSlot, inputs: list[np.ndarray]) -> PhaseTiming:
        start = now_ns()
        for buf, x in zip(slot.inputs, inputs):
            slot.n = fill_input(buf, x)
        end = now_ns()
        return PhaseTiming(start, end, end - start)

    def execute(self, model: HostModel, slot: _CpuIO, lane: int = 0) -> PhaseTiming:
        main = self._vms.get((id(model.bundle), slot.batch_size, lane))
        weights = self._weights.get(model.model_id)
        if main is None or weights is None:
            raise RuntimeFault(f"model {model.model_id} batch {slot.batch_size} is not ready")
        start = now_ns()
        result = main(*slot.tensors, *weights)
        end = now_ns()
        slot.outputs = [result] if hasattr(result, "numpy") else list(result)
        return PhaseTiming(start, end, end - start)

    def _plain_copy_gbps(self, nbytes: int, repeats: int = 5) -> float | None:
        nbytes = min(nbytes, self.memory.nbytes)
        if nbytes <= 0:
            return None
        src, samples = aligned_empty(nbytes), []
        src[:] = 1
        for _ in range(repeats):
            start = now_ns()
            self.memory[:nbytes] = src
            samples.append(now_ns() - start)
        return nbytes / max(sorted(samples)[len(samples) // 2], 1)

    def copy_output(self, model: HostModel, slot: IOSlot) -> tuple[list[np.ndarray], PhaseTiming]:
        start = now_ns()
        outs = [host_rows(o, slot.n) for o in slot.outputs]
        end = now_ns()
        return outs, PhaseTiming(start, end, end - start)
