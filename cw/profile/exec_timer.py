"""EXEC timed the way a worker runs it, for benchmarks that compare cw with another system.

TVM's time evaluator launches every kernel from the host as the GPU runs them, so a network of
many short kernels (CUTLASS convolutions at batch 1, densenet121's ~190 calls) can leave the GPU
waiting for the host between kernels. A worker does not: its CUDA runtime queues the whole EXEC
behind a closed gate and releases it at once (cw/serve/runtime/tvm_cuda.py), which is what
`cw profile` stores and the scheduler plans with. `ExecTimer` keeps one runtime with the
bundle's weights loaded in its page cache and times EXEC through it, one batch size's input
resident, so that rounds can be interleaved with the system compared against.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cw.bundle import open_bundle
from cw.engine import check_inputs
from cw.serve.runtime.base import IOSlot
from cw.serve.runtime.host import HostModel, HostWeights


class ExecTimer:
    """One bundle loaded on one device (`cuda:N` or `cpu`) through cw's serving runtime."""

    def __init__(self, path: str | Path, device: str = "cuda:0", gate_exec: bool = True,
                 exec_graphs: bool = False):
        from cw.profile.profiler import make_runtime

        bundle = open_bundle(path)
        m = bundle.manifest
        self.model = HostModel(m.name, bundle, HostWeights(bundle))
        pages = self.model.weights.num_pages
        self.runtime = make_runtime(device, m.weights.page_size, pages, gate_exec, exec_graphs)
        try:
            self.runtime.load(self.model, self.runtime.cache.allocate(pages))
        except BaseException:
            self.runtime.close()
            raise
        self._slots: dict[int, IOSlot] = {}

    def _slot(self, inputs: list[np.ndarray]) -> IOSlot:
        batch = check_inputs(self.model.manifest, inputs)
        size = self.model.manifest.kernel_for(batch).batch_size
        slot = self._slots.get(size)
        if slot is None:
            self.runtime.prepare(self.model, size)
            self.runtime.settle()  # with exec_graphs: its graph captured before it is timed
            slot = self._slots[size] = self.runtime.acquire_slot(self.model, size)
        self.runtime.copy_input(self.model, slot, inputs)
        return slot

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """One INPUT, EXEC, OUTPUT: the outputs, unpadded (to check that the timed path
        computes what `cw run` does)."""
        slot = self._slot(inputs)
        self.runtime.execute(self.model, slot)
        outputs, _ = self.runtime.copy_output(self.model, slot)
        return outputs

    def exec_ns(self, inputs: list[np.ndarray], runs: int) -> list[int]:
        """EXEC's device time (CUDA events; host time on a CPU) of `runs` executions one after
        another on these inputs, each followed by its output copy, as `cw profile` runs them."""
        if runs < 1:
            raise ValueError(f"runs must be ≥ 1, not {runs}")
        slot = self._slot(inputs)
        samples = []
        for _ in range(runs):
            samples.append(self.runtime.execute(self.model, slot).device_ns)
            self.runtime.copy_output(self.model, slot)
        return samples

    def close(self) -> None:
        for slot in self._slots.values():
            self.runtime.release_slot(slot)
        self._slots.clear()
        self.runtime.close()

    def __enter__(self) -> ExecTimer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
