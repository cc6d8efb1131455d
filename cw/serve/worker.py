"""The worker: executes timed actions exactly as the controller says, and reports timings.

It never chooses. Per device it has one executor per kind of work — weights (LOAD/UNLOAD), input
copy, EXEC, output copy — each a queue ordered by `earliest`; EXEC runs one at a time. An action
that cannot start by `latest` is refused (TOO_LATE), never run late. Every action gets exactly
one Result. Message handling (`step`) is separate from the loop (`serve_forever`).

On a runtime that launches asynchronously (CUDA), the EXEC executor hands an EXEC to the runtime
`launch_lead_ns` before its window opens: it is queued on the GPU behind the one running and
released at `earliest`; its output copy is queued behind it, and a completion thread waits for
both and sends the result. Whether it can start by `latest` is decided before it is launched,
from the predicted end of the EXECs ahead of it (their `expected_ns`, else the last measured
duration), since a launched EXEC cannot be taken back.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import secrets
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from cw.errors import CwError, UsageError
from cw.serve.clock import ClockSync, clock_domain
from cw.serve.executor import Executor
from cw.serve.loop_errors import LoopErrors
from cw.serve.protocol import (PROTOCOL_VERSION, DeviceDesc, Infer, Load, ModelInfo, Register,
                               Result, Status, TensorInfo, Timing, Unload)
from cw.serve.runtime.base import SPIN_NS, IOSlot, PhaseTiming, Runtime, now_ns
from cw.serve.runtime.host import HostModel
from cw.serve.shm import ShmError, ShmReader, ShmRef, shm_domain
from cw.serve.simdevice import SimulatedDevice
from cw.serve.worker_link import ControllerLink

log = logging.getLogger("cw.worker")
NEVER = 2**62
_KIND = {Load: "load", Unload: "unload", Infer: "infer"}


@dataclass(frozen=True)
class WorkerConfig:
    controller: str = "tcp://127.0.0.1:7000"
    models_dir: Path = Path("models")
    devices: tuple[str, ...] = ("cpu",)
    runtime: str = "tvm"                  # "tvm" | "simulated"
    page_cache_bytes: int | None = None   # per device; None: the runtime's default
    copies: int = 1
    name: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    input_lead_ns: int = 5_000_000        # input copies may start this long before earliest
    horizon_ns: int = 10_000_000_000      # windows starting further ahead are TOO_EARLY
    ping_interval_ns: int = 500_000_000
    # nothing from the controller this long (it answers every ping): say so, once
    controller_silence_ns: int = 3_000_000_000
    shm_sweep_ns: int = 2_000_000_000     # how often to let go of clients' segments that are gone
    noise: float = 0.0                    # simulated runtime: relative std of durations
    log_stalls_ns: int | None = None      # log every stall longer than this (cw/serve/stalls.py)
    exec_graphs: bool = False             # CUDA: EXEC as one CUDA graph (runtime/exec_graphs.py)
    key_file: Path | None = None          # the controller's key (`cw serve keygen`), if it has one

    def __post_init__(self):
        if self.runtime not in ("tvm", "simulated"):
            raise UsageError(f"unknown runtime '{self.runtime}'", "use --runtime tvm or simulated")
        if self.copies < 1:
            raise UsageError("--copies must be ≥ 1")
        if not self.devices:
            raise UsageError("no devices given", "e.g. --device cpu or --device cuda:0,cuda:1")
        from cw.engine import parse_device

        # one runtime per device: a second on it would allocate a second page cache there (or
        # run its kernels on the cores the first uses), and neither would run as profiled
        seen = set()
        for text in self.devices:
            kind, index = parse_device(text)
            key = (kind, index if kind == "cuda" else 0)
            if key in seen:
                raise UsageError(f"--device {','.join(self.devices)} names "
                                 f"{'the CPU' if kind == 'cpu' else f'cuda:{index}'} twice",
                                 "give each device once; a CPU worker uses all the cores "
                                 "--cpus gives it")
            seen.add(key)
        if self.exec_graphs and (self.runtime != "tvm"
                                 or any(parse_device(d)[0] != "cuda" for d in self.devices)):
            raise UsageError("--exec-graphs is for TVM workers on CUDA devices",
                             "drop it, or serve with --runtime tvm --device cuda:N")
        if not 0 <= self.noise < 1:
            raise UsageError(f"noise {self.noise:g} must be ≥ 0 and < 1",
                             "a relative standard deviation of simulated durations, e.g. 0.02")
        # the name labels this worker's metrics and telemetry: nothing that needs quoting
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}", self.name):
            raise UsageError(f"--name: '{self.name}' is not a valid worker name",
                             "use letters, digits, '.', '_', ':', '+' or '-'")


def model_info(model: HostModel) -> ModelInfo:
    from cw.serve.estimates import bundle_estimates

    m = model.manifest
    est = bundle_estimates(model.bundle)

    def tensors(specs):
        return [TensorInfo(s.name, s.dtype, list(s.sample_shape), s.sample_bytes, s.index_limit)
                for s in specs]

    return ModelInfo(model.model_id, m.name, m.weights.total_bytes, len(m.weights.pages),
                     list(m.batch_sizes), tensors(m.inputs), tensors(m.outputs), est.load_ns,
                     est.exec_ns, est.source)


def model_infos(models: list[HostModel]) -> list[ModelInfo]:
    """`model_info` of each instance, worked out once per bundle: copies differ only in id
    (40,000 copies took the worker seconds to describe, one profile read each)."""
    first: dict[int, ModelInfo] = {}
    infos = []
    for m in models:
        info = first.get(id(m.bundle))
        if info is None:
            info = first[id(m.bundle)] = model_info(m)
        infos.append(info if info.model_id == m.model_id
                     else msgspec.structs.replace(info, model_id=m.model_id))
    return infos


@dataclass(slots=True)
class _InferJob:
    action: Infer
    model: HostModel
    received_ns: int
    slot: IOSlot | None = None
    timings: list = field(default_factory=list)
    padded: int = 0  # the compiled batch size it runs at (simulated device)
    inputs: list = field(default_factory=list)  # action.inputs with shared memory mapped


class _Device:
    def __init__(self, index: int, runtime: Runtime, worker: "Worker"):
        self.index = index
        self.runtime = runtime
        # EXEC vs UNLOAD: weights never vanish while an EXEC that reads them is launched and
        # not finished; UNLOAD waits for the model's count to reach zero
        self.executing = threading.Condition()
        self.in_flight: dict[str, int] = {}  # EXECs launched and not finished, by model
        self.launched = 0                    # ... and in all
        self.busy_until_ns = 0  # predicted end of the last EXEC launched (worker clock)
        self.last_exec_ns: dict[tuple[int, int], int] = {}  # (bundle, batch) -> device time
        # LOADs submitted and not finished, by model: an INFER planned to start right after
        # its model's LOAD waits for it (inside its own window) instead of failing NOT_LOADED
        self.loading: dict[str, threading.Event] = {}
        w = worker
        # A simulated device keeps time on the worker's loop, without threads (simdevice.py)
        self.sim = SimulatedDevice(index, runtime, worker) if runtime.simulated else None
        if self.sim is None:
            self.weights = Executor(f"dev{index}-weights", w._run_weights, w._too_late, SPIN_NS)
            self.input = Executor(f"dev{index}-input", w._run_input, w._too_late, SPIN_NS)
            self.exec = Executor(f"dev{index}-exec", w._run_exec, w._too_late, SPIN_NS)
            self.output = Executor(f"dev{index}-output", w._run_output, w._too_late, SPIN_NS)
        # INFER results leave from the thread that collects the outputs, on a connection of
        # its own (on the controller's host, its lane past ZeroMQ): a hand-over to the poll
        # loop (pipe, wake-up, GIL) and ZeroMQ's I/O threads are most of the way back
        # (bench/result_path.py). Simulated devices finish on the loop thread, and share one
        # such connection of that thread's: the same way back as a GPU's, and on one host the
        # lane saves both processes' ZeroMQ I/O threads a message per INFER.
        self.result_sender = w.transport.sender() if self.sim is None else w.loop_sender()
        self.completions: queue.SimpleQueue | None = None
        if self.sim is None and runtime.launch_lead_ns:
            self.completions = queue.SimpleQueue()
            self._completer = threading.Thread(target=w._complete_loop, args=(self,),
                                               name=f"dev{index}-complete", daemon=True)
            self._completer.start()

    def executors(self):
        if self.sim is not None:
            return ()
        return (self.weights, self.input, self.exec, self.output)

    def drain_completions(self) -> None:
        if self.completions is not None:
            self.completions.put(None)
            self._completer.join(timeout=10)
            self.completions = None


class Worker:
    def __init__(self, config: WorkerConfig, transport, models: list[HostModel],
                 runtimes: list[Runtime]):
        self.config = config
        self.transport = transport
        self.models = {m.model_id: m for m in models}
        self.clock = ClockSync()
        # shared by the loop and the executor threads: one traceback per kind of failure
        self.errors = LoopErrors(log, "worker step")
        self.shm = ShmReader()  # clients' input segments, for INFERs that carry ShmRef
        self.incarnation = secrets.randbits(62) + 1  # Register.incarnation
        self._loop_sender = None  # the loop thread's result connection (loop_sender)
        self.devices = [_Device(i, rt, self) for i, rt in enumerate(runtimes)]
        self.link = ControllerLink(config, transport, self.clock, self._registration,
                                   self._result_senders())
        self._handlers = {Load: self._on_weights, Unload: self._on_weights, Infer: self._on_infer,
                          **self.link.handlers}
        self._last_shm_sweep_ns = 0
        self._registered_models: list[ModelInfo] | None = None
        self.stopped = False
        self.stall_watch = None  # a StallWatch while serving with config.log_stalls_ns
        self.loop_meter = None   # ... and the loop thread's LoopMeter

    def loop_sender(self):
        """A result connection of the loop thread's own, made once (simulated devices)."""
        if self._loop_sender is None:
            self._loop_sender = self.transport.sender()
        return self._loop_sender

    def _result_senders(self) -> list:
        """The devices' result connections, each once (simulated devices share one)."""
        return list({id(d.result_sender): d.result_sender for d in self.devices
                     if d.result_sender is not None}.values())

    # --- lifecycle -----------------------------------------------------------------------
    def warm_up(self) -> None:
        """Load kernels for every model and batch size before serving (off the hot path)."""
        seen = set()
        for model in self.models.values():
            if id(model.bundle) in seen:
                continue
            seen.add(id(model.bundle))
            for device in self.devices:
                for b in model.manifest.batch_sizes:
                    device.runtime.prepare(model, b)
        # what registration sends, made now: before the launcher freezes the heap, so that
        # full collections while serving do not rescan thousands of model descriptions
        self._model_infos()

    @property
    def worker_id(self) -> int | None:
        """The id the controller welcomed this worker with; None while unregistered."""
        return self.link.worker_id

    @property
    def fatal(self) -> CwError | None:
        """Why serving cannot go on (raised by serve_forever)."""
        return self.link.fatal

    def _registration(self, sent_ns: int) -> Register:
        rt = self.devices[0].runtime
        return Register(
            PROTOCOL_VERSION, self.config.name, rt.name, rt.simulated,
            [DeviceDesc(d.index, d.runtime.name, d.runtime.cache.page_size,
                        d.runtime.cache.num_pages) for d in self.devices],
            self._model_infos(), sent_ns, shm_domain(), clock_domain(),
            [sender.routing_id for sender in self._result_senders()],
            self.incarnation)

    def _model_infos(self) -> list[ModelInfo]:
        """What registration tells of the models, made once: with thousands of copies it
        takes a while, and a worker whose Welcome is slow to come registers again."""
        if self._registered_models is None:
            self._registered_models = model_infos(list(self.models.values()))
        return self._registered_models

    def step(self, timeout_ms: int = 50) -> None:
        """One tick: receive and handle messages, advance simulated devices, keep registered
        (cw/serve/worker_link.py)."""
        sims = [d.sim for d in self.devices if d.sim is not None]
        due = [t for t in (sim.next_ns() for sim in sims) if t is not None]
        if due:
            # wake for the next simulated event, rounding up to whole milliseconds: never spin
            # (simulated workers share cores with the controller), so a result may leave up to
            # ~1 ms after its planned end; its timings still carry the planned times
            timeout_ms = min(timeout_ms, max(0, -(-(min(due) - now_ns()) // 1_000_000)))
        received = self.transport.poll(timeout_ms)
        began = now_ns()
        mark = self.loop_meter.mark() if self.loop_meter is not None else None
        if received:
            self.link.heard(began)
        for msg in received:
            handler = self._handlers.get(type(msg))
            if handler is None:
                log.warning("unexpected message type %s from the controller", type(msg).__name__)
                continue
            try:
                handler(msg)
            except Exception as e:  # a bug of ours: the action still gets its one result
                self.errors.report(e, now_ns(), f"handling {type(msg).__name__}")
                if isinstance(msg, (Load, Unload, Infer)):
                    self._send(msg, Status.RUNTIME_ERROR, now_ns(), message=f"worker error: {e}")
        for sim in sims:
            sim.advance(now_ns())
        now = now_ns()
        if self.link.tick(now):
            self.errors.flush(now)  # repeats of a failure, at most every 10 s (as pings go)
        if now - self._last_shm_sweep_ns > self.config.shm_sweep_ns:
            self._last_shm_sweep_ns = now
            self.shm.sweep()
        if self.stall_watch is not None:
            self.stall_watch.iteration(now_ns() - began, f"{len(received)} messages",
                                       self.loop_meter.since(mark) if mark else None)

    def serve_forever(self, stop: threading.Event) -> None:
        if self.config.log_stalls_ns is not None:
            from cw.serve.stalls import StallWatch

            self.stall_watch = StallWatch(f"worker {self.config.name}",
                                          self.config.log_stalls_ns).start()
            self.loop_meter = self.stall_watch.loop_meter()
        self.link.register()
        try:
            while not stop.is_set() and self.link.fatal is None:
                try:
                    self.step()
                except Exception as e:  # the loop logs the unexpected and keeps serving
                    self.errors.report(e, now_ns())
        finally:
            self.errors.flush()
            if self.stall_watch is not None:
                self.loop_meter.close()
                self.stall_watch.stop()
        self.shutdown()
        if self.link.fatal is not None:
            raise self.link.fatal

    def shutdown(self) -> None:
        """Stop the executors; every action not started gets a SHUTTING_DOWN result."""
        self.stopped = True
        for device in self.devices:
            if device.sim is not None:
                for item in device.sim.stop():
                    self._reply_status(item, Status.SHUTTING_DOWN, "worker is shutting down")
            for executor in device.executors():
                if executor is device.output:
                    device.drain_completions()  # launched EXECs still feed the output copy
                for item in executor.stop():
                    self._reply_status(item, Status.SHUTTING_DOWN, "worker is shutting down")
        self.link.leave("shutting down")
        self.transport.poll(0)  # flush the outbox
        if all(not e.alive for d in self.devices for e in d.executors()):
            for device in self.devices:
                device.runtime.close()
            for sender in self._result_senders():  # no thread sends on them any more
                sender.close()

    # --- actions -------------------------------------------------------------------------
    def _check(self, action) -> tuple[Status, str] | None:
        if action.model not in self.models:
            return Status.UNKNOWN_MODEL, f"no model '{action.model}' on this worker"
        if not 0 <= action.gpu < len(self.devices):
            return Status.BAD_DEVICE, \
                f"no device {action.gpu} (this worker has {len(self.devices)})"
        if action.earliest_ns > action.latest_ns:
            return Status.BAD_WINDOW, "earliest_ns is after latest_ns"
        if self.clock.to_local(action.earliest_ns) - now_ns() > self.config.horizon_ns:
            return Status.TOO_EARLY, "window starts beyond the worker's horizon"
        return None

    def _on_weights(self, action: Load | Unload) -> None:
        received = now_ns()
        problem = self._check(action)
        if problem:
            return self._send(action, problem[0], received, message=problem[1])
        device = self.devices[action.gpu]
        if device.sim is not None:
            return device.sim.submit_weights(now_ns(), action, received)
        if isinstance(action, Load):
            device.loading.setdefault(action.model, threading.Event())
        device.weights.submit(self.clock.to_local(action.earliest_ns),
                                                self.clock.to_local(action.latest_ns),
                                                (action, received))

    def _run_weights(self, item) -> None:
        action, received = item
        try:
            self._do_weights(action, received)
        finally:
            if isinstance(action, Load):
                self._load_finished(action)

    def _load_finished(self, action) -> None:
        event = self.devices[action.gpu].loading.pop(action.model, None)
        if event is not None:
            event.set()

    def _do_weights(self, action, received) -> None:
        model = self.models[action.model]
        device = self.devices[action.gpu]
        rt = device.runtime
        if isinstance(action, Unload):
            start = now_ns()
            with device.executing:
                device.executing.wait_for(lambda: not device.in_flight.get(model.model_id))
                slots = rt.unload(model)
                rt.cache.release(slots)
            end = now_ns()
            return self._send(action, Status.OK, received, [PhaseTiming(start, end, end - start)])
        if rt.is_loaded(model.model_id):
            return self._send(action, Status.ALREADY_LOADED, received)
        slots = rt.cache.allocate(model.weights.num_pages)
        if slots is None:
            return self._send(action, Status.NO_PAGES, received,
                              message=f"needs {model.weights.num_pages} pages, "
                                      f"{rt.cache.free_pages} free")
        try:
            timing = rt.load(model, slots)
        except Exception as e:
            rt.cache.release(slots)
            self.errors.report(e, now_ns(), "LOAD", model.model_id)
            return self._send(action, Status.RUNTIME_ERROR, received, message=str(e))
        self._send(action, Status.OK, received, [timing])

    def _on_infer(self, action: Infer) -> None:
        received = now_ns()
        problem = self._check(action)
        if problem is None:
            inputs = [[self._bytes_of(t) for t in chunks] for chunks in action.inputs]
            problem = self._check_inputs(action, inputs)
        if problem:
            return self._send(action, problem[0], received, message=problem[1])
        job = _InferJob(action, self.models[action.model], received, inputs=inputs)
        if self.devices[action.gpu].sim is not None:
            return self.devices[action.gpu].sim.submit_infer(now_ns(), job)
        earliest = self.clock.to_local(action.earliest_ns)
        self.devices[action.gpu].input.submit(earliest - self.config.input_lead_ns,
                                              self.clock.to_local(action.latest_ns), job)

    def _bytes_of(self, tensor):
        """A request's input bytes; shared memory mapped on first sight. A segment that is gone
        was closed by its client, which therefore waits for no output: zeros stand in, so that
        the requests batched with it still run."""
        if type(tensor) is not ShmRef:
            return tensor
        try:
            return self.shm.view(tensor)
        except ShmError as e:
            log.warning("INFER input: %s; running its request on zeros", e)
            return memoryview(bytes(tensor.nbytes))

    def _check_inputs(self, action: Infer, inputs: list) -> tuple[Status, str] | None:
        m = self.models[action.model].manifest
        if not 1 <= action.n <= action.batch_size or action.batch_size > m.batch_sizes[-1]:
            return Status.BAD_INPUT, (f"n={action.n}, batch_size={action.batch_size}; compiled "
                                      f"batch sizes {m.batch_sizes}")
        if len(inputs) != len(m.inputs):
            return Status.BAD_INPUT, f"{len(inputs)} inputs given, the model has {len(m.inputs)}"
        for chunks, spec in zip(inputs, m.inputs):
            nbytes = sum(len(c) for c in chunks)
            if nbytes != action.n * spec.sample_bytes or any(len(c) % spec.sample_bytes
                                                             for c in chunks):
                return Status.BAD_INPUT, (f"input '{spec.name}' has {nbytes} bytes; {action.n} "
                                          f"samples of {spec.dtype}{spec.sample_shape} need "
                                          f"{action.n * spec.sample_bytes}")
        return None

    def _run_input(self, job: _InferJob) -> None:
        a, model = job.action, job.model
        device = self.devices[a.gpu]
        rt = device.runtime
        size = model.manifest.kernel_for(a.batch_size).batch_size  # uncompiled sizes pad up
        job.slot = rt.acquire_slot(model, size, self.clock.to_local(a.latest_ns))
        if job.slot is None:
            return self._send(a, Status.TOO_LATE, job.received_ns, job.timings,
                              message="no free IO buffers before latest_ns")
        inputs = [[np.frombuffer(c, dtype=s.dtype).reshape(-1, *s.sample_shape) for c in chunks]
                  for chunks, s in zip(job.inputs, model.manifest.inputs)]
        try:
            job.timings.append(rt.copy_input(model, job.slot, inputs))
        except Exception as e:
            return self._fail_infer(job, e)
        device.exec.submit(self.clock.to_local(a.earliest_ns) - rt.launch_lead_ns,
                           self.clock.to_local(a.latest_ns), job)

    def _run_exec(self, job: _InferJob) -> None:
        a, model = job.action, job.model
        device = self.devices[a.gpu]
        rt = device.runtime
        earliest, latest = self.clock.to_local(a.earliest_ns), self.clock.to_local(a.latest_ns)
        pending_load = device.loading.get(model.model_id)
        if pending_load is not None and not rt.is_loaded(model.model_id):
            pending_load.wait(max(0, latest - now_ns()) / 1e9)
            if now_ns() > latest:
                return self._too_late(job)
        shape = (id(model.bundle), job.slot.batch_size)
        with device.executing:
            start = max(earliest, device.busy_until_ns, now_ns())
            if start > latest:  # behind the EXECs already launched it would start too late
                return self._too_late(job)
            if not rt.is_loaded(model.model_id):
                self._release(job)
                return self._send(a, Status.NOT_LOADED, job.received_ns, job.timings,
                                  message=f"model '{a.model}' is not loaded on device {a.gpu}")
            device.in_flight[model.model_id] = device.in_flight.get(model.model_id, 0) + 1
            device.launched += 1
            device.busy_until_ns = start + (a.expected_ns or device.last_exec_ns.get(shape, 0))
        try:
            handle = rt.launch(model, job.slot, earliest)
        except Exception as e:
            self._exec_ended(device, model)
            return self._fail_infer(job, e)
        if device.completions is not None:
            device.completions.put((job, handle))
        elif self._finish_exec(device, job, handle):
            device.output.submit(0, NEVER, job)

    def _complete_loop(self, device: _Device) -> None:
        """Waits for launched EXECs in launch order (the order they run in)."""
        while (item := device.completions.get()) is not None:
            try:
                job = item[0]
                if self._finish_exec(device, *item):
                    # collected here, not handed to the output thread: the runtime queued the
                    # copy behind EXEC on the device, so it is (nearly) done already
                    self._run_output(job)
            except Exception:  # the thread must outlive any one action
                log.exception("dev%d: completing an EXEC failed", device.index)

    def _finish_exec(self, device: _Device, job: _InferJob, handle) -> bool:
        """Records EXEC's timing; False if it failed (the INFER is answered then)."""
        try:
            timing = device.runtime.finish(handle)
        except Exception as e:
            self._fail_infer(job, e)
            return False
        finally:
            self._exec_ended(device, job.model)
        device.last_exec_ns[(id(job.model.bundle), job.slot.batch_size)] = timing.device_ns
        job.timings.append(timing)
        return True

    def _exec_ended(self, device: _Device, model: HostModel) -> None:
        with device.executing:
            device.in_flight[model.model_id] -= 1
            device.launched -= 1
            if not device.launched:
                device.busy_until_ns = 0  # the prediction ends with the last EXEC in flight
            device.executing.notify_all()

    def _run_output(self, job: _InferJob) -> None:
        rt = self.devices[job.action.gpu].runtime
        try:
            outputs, timing = rt.copy_output(job.model, job.slot)
        except Exception as e:
            return self._fail_infer(job, e)
        job.timings.append(timing)
        self._release(job)
        # only this device's output thread, or its completion thread, gets here
        self._send(job.action, Status.OK, job.received_ns, job.timings,
                   outputs=[memoryview(np.ascontiguousarray(y)).cast("B") for y in outputs],
                   via=self.devices[job.action.gpu].result_sender)

    def _fail_infer(self, job: _InferJob, error: Exception) -> None:
        self.errors.report(error, now_ns(), "INFER", job.action.model)
        self._release(job)
        self._send(job.action, Status.RUNTIME_ERROR, job.received_ns, job.timings,
                   message=str(error))

    def _release(self, job: _InferJob) -> None:
        if job.slot is not None:
            self.devices[job.action.gpu].runtime.release_slot(job.slot)
            job.slot = None

    def _too_late(self, item) -> None:
        if isinstance(item, tuple) and isinstance(item[0], Load):
            self._load_finished(item[0])
        if isinstance(item, _InferJob):
            self._release(item)
            return self._send(item.action, Status.TOO_LATE, item.received_ns, item.timings,
                              message="could not start by latest_ns")
        action, received = item
        self._send(action, Status.TOO_LATE, received, message="could not start by latest_ns")

    def _reply_status(self, item, status: Status, message: str) -> None:
        if isinstance(item, tuple) and isinstance(item[0], Load):
            self._load_finished(item[0])
        if isinstance(item, _InferJob):
            self._release(item)
            self._send(item.action, status, item.received_ns, item.timings, message=message)
        else:
            action, received = item
            self._send(action, status, received, message=message)

    # --- results -------------------------------------------------------------------------
    def _send(self, action, status: Status, received_ns: int, timings=(), message: str = "",
              outputs=(), via=None) -> None:
        offset = self.clock.offset_ns  # worker clock → controller clock
        (via or self.transport).send(Result(
            action.id, _KIND[type(action)], status, received_ns + offset, message,
            [Timing(start + offset, end + offset, device) for start, end, device in timings],
            list(outputs), self.devices[0].runtime.simulated, now_ns() + offset))
