"""A device that is not there: every action takes the time the bundle's estimates say (profile,
else the paper's figures), optionally with noise, and INFER outputs are zeros. For thousands of
models, many workers and long traces on one machine; every result it produces says simulated."""

from __future__ import annotations

import random
import time

import numpy as np

from cw.serve.estimates import Estimates, bundle_estimates
from cw.serve.runtime.base import IOSlot, PhaseTiming, Runtime, now_ns, samples_given
from cw.serve.runtime.host import HostModel


def sleep_until(deadline_ns: int) -> None:
    """Sleep, then spin the last 200 µs: time.sleep alone overshoots by ~100 µs."""
    remaining = deadline_ns - now_ns()
    if remaining > 300_000:
        time.sleep((remaining - 200_000) / 1e9)
    while now_ns() < deadline_ns:
        pass


class SimulatedRuntime(Runtime):
    name = "simulated"
    simulated = True

    def __init__(self, page_size: int, num_pages: int, noise: float = 0.0, seed: int = 0):
        super().__init__(page_size, num_pages)
        self.noise = noise  # relative standard deviation of durations
        self._rng = random.Random(seed)
        self._estimates: dict[int, Estimates] = {}  # id(bundle) -> estimates, shared by copies

    def estimates(self, model: HostModel) -> Estimates:
        key = id(model.bundle)
        if key not in self._estimates:
            self._estimates[key] = bundle_estimates(model.bundle, percentile="p50_ns")
        return self._estimates[key]

    def noisy(self, duration_ns: int) -> int:
        if self.noise:
            return max(1, int(duration_ns * (1 + self._rng.gauss(0, self.noise))))
        return duration_ns

    def _take(self, duration_ns: int) -> PhaseTiming:
        duration_ns = self.noisy(duration_ns)
        start = now_ns()
        sleep_until(start + duration_ns)
        return PhaseTiming(start, now_ns(), duration_ns)

    def _copy_weights(self, model: HostModel, slots: list[int]) -> PhaseTiming:
        return self._take(self.estimates(model).load_ns)

    def prepare(self, model: HostModel, batch_size: int, lanes: int = 1) -> None:
        self.estimates(model)

    def acquire_slot(self, model: HostModel, batch_size: int,
                     deadline_ns: int | None = None) -> IOSlot | None:
        return IOSlot(model.model_id, batch_size)

    def release_slot(self, slot: IOSlot) -> None:
        pass

    def copy_input(self, model: HostModel, slot: IOSlot, inputs: list[np.ndarray]) -> PhaseTiming:
        slot.n = samples_given(inputs[0])
        return self._take(self.estimates(model).input_ns[slot.batch_size])

    def execute(self, model: HostModel, slot: IOSlot, lane: int = 0) -> PhaseTiming:
        return self._take(self.estimates(model).exec_ns[slot.batch_size])

    def copy_output(self, model: HostModel, slot: IOSlot) -> tuple[list[np.ndarray], PhaseTiming]:
        timing = self._take(self.estimates(model).output_ns[slot.batch_size])
        outs = [np.zeros((slot.n, *s.sample_shape), dtype=s.dtype) for s in model.manifest.outputs]
        return outs, timing
