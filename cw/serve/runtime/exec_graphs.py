"""EXEC as one CUDA graph (`--exec-graphs`; off by default until measured on a GPU).

Why: launching resnet50's ~100 kernels through TVM's VM takes ~0.6 ms of host time per EXEC,
60 % of the EXEC itself at batch 1 on the H200, and a worker held up for a few milliseconds
could not spare it (docs/benchmarks.md, "Fig. 5 on the GPU"). A graph is one host call.

What a graph bakes in, and how each stays right (cw/serve/runtime/tvm_cuda.py):
- the weights' addresses in the page cache: one graph per (bundle, batch size, placement),
  captured here, on a thread of its own, after each LOAD. Until it is ready, EXEC runs through
  the VM as before. A graph never goes stale: whenever its bundle is at that placement again,
  the same weights are there.
- inputs: device buffers of its own per (bundle, batch size) (`GraphIO`): EXEC copies the
  slot's inputs in, device to device, within EXEC's timing.
- intermediates and outputs: blocks of TVM's pooled allocator, free again once captured and
  handed to later calls and captures too. Safe because every EXEC runs on one stream, in
  order, and ends with a device-to-device copy of its outputs into its slot's own buffers
  (graph or VM alike), which the output copy to the host reads: nothing later on the stream
  can overwrite an output before it has been copied out of the pool. So graphs take one EXEC
  lane: concurrency experiments (`lanes` > 1) run without them.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Hashable

log = logging.getLogger(__name__)

# Graphs kept per runtime; beyond it, new placements run through the VM (a graph is destroyed
# only at close: one may be queued on the GPU at any time)
MAX_GRAPHS = 1024


@dataclass
class GraphIO:
    """A (bundle, batch size)'s own input buffers, the ones its graphs read."""
    input_ptrs: list[int]
    input_nbytes: list[int]
    input_tensors: list            # TVM tensors at input_ptrs, what the capture passes
    holders: list = field(default_factory=list)  # keeps the DLPack views alive


@dataclass
class ExecGraph:
    handle: object                 # cudaGraphExec_t
    io: GraphIO
    output_ptrs: list[int]         # where the graph leaves its outputs (TVM pool blocks)
    nodes: int | None


class GraphBuilder:
    """Captures graphs on a thread of its own, one request at a time, so that no EXEC waits
    for one. `capture(item)` makes the graph for an item (raises if it cannot); a request whose
    capture failed turns graphs off for its group (a bundle and batch size) for good, with one
    log line: those EXECs keep running through the VM."""

    def __init__(self, capture: Callable[[object], ExecGraph],
                 group_of: Callable[[Hashable], Hashable] = lambda key: key[:2],
                 max_graphs: int = MAX_GRAPHS, name: str = "exec-graphs"):
        self._capture = capture
        self._group_of = group_of
        self.max_graphs = max_graphs
        self.graphs: dict[Hashable, ExecGraph] = {}
        self.failed: dict[Hashable, str] = {}  # group -> why
        self._queue: deque[tuple[Hashable, object, str]] = deque()
        self._queued: set[Hashable] = set()
        self._busy = False
        self._full_said = False
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def get(self, key: Hashable) -> ExecGraph | None:
        return self.graphs.get(key)  # a dict read: no lock on the EXEC path

    def request(self, key: Hashable, item: object, label: str) -> bool:
        """Queue a capture unless it is made, queued, or its group failed; True if queued.
        `label` names the group in a log line."""
        with self._cond:
            if (self._stop or key in self.graphs or key in self._queued
                    or self._group_of(key) in self.failed):
                return False
            self._queue.append((key, item, label))
            self._queued.add(key)
            self._cond.notify_all()
            return True

    def settle(self, timeout_s: float = 60.0) -> bool:
        """Wait until every queued capture is done (profiling, tests); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout_s)

    def close(self) -> list[ExecGraph]:
        """Stop capturing; the graphs made, for their owner to destroy."""
        with self._cond:
            self._stop = True
            self._queue.clear()
            self._queued.clear()
            self._cond.notify_all()
        self._thread.join(timeout=30)
        graphs, self.graphs = list(self.graphs.values()), {}
        return graphs

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._stop)
                if self._stop:
                    return
                key, item, label = self._queue.popleft()
                self._busy = True
            try:
                self._build(key, item, label)
            finally:
                with self._cond:
                    self._queued.discard(key)
                    self._busy = False
                    self._cond.notify_all()

    def _build(self, key: Hashable, item: object, label: str) -> None:
        group = self._group_of(key)
        if key in self.graphs or group in self.failed:
            return
        if len(self.graphs) >= self.max_graphs:
            if not self._full_said:
                self._full_said = True
                log.warning("%d CUDA graphs made, the most kept: EXECs at other placements "
                            "run through TVM's VM", self.max_graphs)
            return
        try:
            graph = self._capture(item)
        except Exception as e:  # a kernel that cannot be captured: that group runs as before
            self.failed[group] = str(e)
            log.warning("no CUDA graph for %s (%s): its EXECs run through TVM's VM", label, e)
            return
        self.graphs[key] = graph
