"""What a worker needs from a device, behind one interface: TVM on CUDA, TVM on CPU, simulated.

A runtime owns the device memory, allocated once: the weights page cache and the IO buffers. Its
calls are synchronous and each returns measured timings; the worker's executors decide *when* to
call them (never the runtime). Phases of one INFER: `copy_input` → `execute` → `copy_output`,
through an `IOSlot` that holds that action's buffers.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from cw.errors import CwError
from cw.serve.runtime.host import HostModel
from cw.serve.runtime.pagecache import PageCache


def now_ns() -> int:
    """The worker's clock: CLOCK_MONOTONIC in nanoseconds."""
    return time.monotonic_ns()


SPIN_NS = 200_000  # sleeps overshoot by ~100 µs; spin the rest


def wait_until_ns(t_ns: int, spin_ns: int = SPIN_NS) -> None:
    """Return at `t_ns`: sleep (which lets other threads have the GIL) until shortly before,
    then spin, so that the moment is hit within a few µs."""
    ahead = t_ns - spin_ns - now_ns()
    if ahead > 0:
        time.sleep(ahead / 1e9)
    while now_ns() < t_ns:
        pass


def fill_input(buffer: np.ndarray, given) -> int:
    """Write one model input into `buffer`'s leading samples and zero the rest; returns how
    many samples were given. `given`: an array with a batch axis, or several (one per request
    of the batch, in order)."""
    at = 0
    for part in (given if isinstance(given, list) else [given]):
        buffer[at:at + len(part)] = part
        at += len(part)
    buffer[at:] = 0
    return at


def samples_given(given) -> int:
    return sum(len(p) for p in given) if isinstance(given, list) else len(given)


class PhaseTiming(NamedTuple):  # a tuple: made for every phase of every action, cheaply
    start_ns: int   # host clock when the phase started
    end_ns: int     # host clock when its completion was seen
    device_ns: int  # duration measured on the device (CUDA events); host duration elsewhere


class RuntimeFault(CwError):
    """A device-side failure while executing an action."""


@dataclass
class IOSlot:
    """The buffers of one INFER in flight, reused once its output has been copied out."""
    model_id: str
    batch_size: int
    n: int = 0  # real (unpadded) requests in the batch
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)


class Runtime(ABC):
    name: str = "abstract"
    simulated: bool = False
    # How long before an EXEC's earliest time the worker may hand it to `launch`: a runtime
    # that queues work asynchronously (CUDA) launches the next EXEC while the current one runs
    # and releases it at `earliest`, so the GPU does not wait for the host. 0: synchronous.
    launch_lead_ns: int = 0

    def __init__(self, page_size: int, num_pages: int):
        self.cache = PageCache(page_size, num_pages)
        self._resident: dict[str, list[int]] = {}  # model id -> cache slots

    # Weights ------------------------------------------------------------------------------
    def is_loaded(self, model_id: str) -> bool:
        return model_id in self._resident

    def slots_of(self, model_id: str) -> list[int]:
        return self._resident[model_id]

    def load(self, model: HostModel, slots: list[int]) -> PhaseTiming:
        """Copy the model's weight pages into `slots` (already allocated from `cache`)."""
        timing = self._copy_weights(model, slots)
        self._resident[model.model_id] = slots
        return timing

    def mark_loaded(self, model: HostModel, slots: list[int]) -> None:
        """Record weights placed without `load` (a simulated device that only keeps time)."""
        self._resident[model.model_id] = slots

    def unload(self, model: HostModel) -> list[int]:
        slots = self._resident.pop(model.model_id, [])
        self._forget(model)
        return slots

    @abstractmethod
    def _copy_weights(self, model: HostModel, slots: list[int]) -> PhaseTiming: ...

    def _forget(self, model: HostModel) -> None:
        pass

    # Inference ----------------------------------------------------------------------------
    @abstractmethod
    def prepare(self, model: HostModel, batch_size: int, lanes: int = 1) -> None:
        """Warm up: load the kernels for this batch size; done before serving, off the hot path.
        `lanes` > 1 readies that many independent executors (only for concurrency experiments;
        a worker executes one at a time)."""

    @abstractmethod
    def acquire_slot(self, model: HostModel, batch_size: int,
                     deadline_ns: int | None = None) -> IOSlot | None:
        """IO buffers for one INFER. With a `deadline_ns`, a runtime whose pool of buffers is
        bounded may wait for one to be released until then, and returns None if none was."""

    @abstractmethod
    def release_slot(self, slot: IOSlot) -> None: ...

    @abstractmethod
    def copy_input(self, model: HostModel, slot: IOSlot, inputs: list[np.ndarray]) -> PhaseTiming:
        """Inputs hold `n ≤ batch_size` samples; the rest of the batch is zero padding. Each
        input is an array, or a list of arrays (one per request) that `fill_input` joins."""

    @abstractmethod
    def execute(self, model: HostModel, slot: IOSlot, lane: int = 0) -> PhaseTiming: ...

    def launch(self, model: HostModel, slot: IOSlot, release_at_ns: int = 0):
        """Queue EXEC to start at `release_at_ns` (or when the EXEC queued before it ends) and
        return a handle for `finish`. Launches are released in the order they were made. A
        synchronous runtime (launch_lead_ns 0, called at `release_at_ns`) runs it here."""
        return self.execute(model, slot)

    def finish(self, handle) -> PhaseTiming:
        """Wait for a launched EXEC to end; its timing."""
        return handle

    @abstractmethod
    def copy_output(self, model: HostModel, slot: IOSlot) -> tuple[list[np.ndarray], PhaseTiming]:
        """The first `n` samples of every output."""

    def settle(self, timeout_s: float = 120.0) -> None:
        """Wait for work the runtime does in the background after `load` and `prepare` (CUDA
        graphs being captured), before measuring what it serves. Nothing here."""

    def copy_bandwidth_gbps(self, nbytes: int) -> float | None:
        """Bandwidth of one plain copy of `nbytes` into device memory (what LOAD's page-by-page
        copies are compared with), or None where there is nothing to compare.

        The copy goes into the page cache, so it is refused while any weights are there: the
        profiler once made it after its loads, and every EXEC it timed ran on the copy's bytes
        instead of the model's weights (denormals on the CPU, 2.5-4.5x slower)."""
        if self._resident:
            loaded = ", ".join(sorted(self._resident))
            raise RuntimeFault(
                f"a plain copy into the page cache would overwrite the loaded weights of "
                f"{loaded}",
                hint="measure the copy bandwidth before the first LOAD, or unload first")
        return self._plain_copy_gbps(nbytes)

    def _plain_copy_gbps(self, nbytes: int) -> float | None:
        return None

    def close(self) -> None:
        """Give the device memory back (after every executor has stopped)."""

    def describe(self) -> dict:
        return {"runtime": self.name, "simulated": self.simulated,
                "page_size": self.cache.page_size, "pages": self.cache.num_pages}
