"""Live replay: arrivals sent in real time over ZeroMQ to a controller by one open-loop sender,
or closed-loop clients in this process or in several (`--senders`, cw/replay/senders.py).

Against a local controller (the default: one started in a process of its own, with simulated
or CPU worker processes) the telemetry is the controller's own, read back from its CSV files.
Against a remote `--controller` only the client's side is seen: request rows are built from
send and answer times on this machine (NO_ANSWER where none came), and there are no action rows.
"""

from __future__ import annotations

import collections
import contextlib
import fnmatch
import gc
import heapq
import logging
import queue
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgspec
import numpy as np

from cw.client import Client
from cw.errors import CwError, HostError, UsageError
from cw.replay.answers import answers_of, client_rows, client_view, lateness_ms, no_answer
from cw.replay.workloads import ClosedLoop
from cw.serve.protocol import ModelInfo, describe_models
from cw.serve.stalls import (StallWatch, cpu_cores, host_cpu_counters, host_cpu_delta,
                             process_cpu_ns)
from cw.serve.telemetry import ActionRow, RequestRow, read_csv

TIME_FIELDS_REQUEST = ("arrival_ns", "deadline_ns", "completion_ns")
TIME_FIELDS_ACTION = ("sent_ns", "earliest_ns", "latest_ns", "expected_end_ns", "start_ns",
                      "end_ns", "result_sent_ns", "result_ns")


# How long past the last deadline a replay waits for answers before it calls the rest NO_ANSWER
ANSWER_WAIT_NS = 10 * 1_000_000_000
PROGRESS_EVERY_NS = 100_000_000  # a closed loop's progress report, at most this often
SENDER_SWITCH_INTERVAL_S = 0.0002  # sys.setswitchinterval while a sender runs (below)
CLIENT_STALLS_LOG = "client.log"  # the replay's own stall lines, beside its processes' logs


def shift(rows, fields, origin_ns: int):
    """Times relative to the replay's start (0 stays 0: 'did not happen')."""
    return [msgspec.structs.replace(r, **{f: getattr(r, f) - origin_ns
                                          for f in fields if getattr(r, f)}) for r in rows]


def _instance_order(info: ModelInfo) -> tuple:
    """Bundles by name, each one's copies by number (`resnet50#10` after `resnet50#9`)."""
    _, _, copy = info.model_id.rpartition("#")
    return (info.bundle, int(copy) if copy.isdigit() else -1, info.model_id)


def pick_models(infos: list[ModelInfo], spec: str | None) -> list[ModelInfo]:
    """The served models a replay drives: all (`spec` None); a number N: the first N (bundles
    by name, copies in order); else comma-separated model ids, bundle names (the bundle's every
    copy) or shell-style patterns of ids."""
    ordered = sorted(infos, key=_instance_order)
    if spec is None:
        return ordered
    served = {m.model_id: m for m in ordered}
    if spec.strip().isdigit():
        count = int(spec)
        if not 1 <= count <= len(ordered):
            raise UsageError(f"--models {count}: the controller serves {len(ordered):,} models",
                             f"give a number from 1 to {len(ordered):,}")
        return ordered[:count]
    chosen: set[str] = set()
    for item in (i.strip() for i in spec.split(",")):
        if not item:
            continue
        matched = [m.model_id for m in ordered
                   if m.model_id == item or m.bundle == item or fnmatch.fnmatchcase(m.model_id,
                                                                                    item)]
        if not matched:
            raise UsageError(f"--models: no model of the controller is or matches '{item}'",
                             f"it serves {describe_models(served)}")
        chosen.update(matched)
    if not chosen:
        raise UsageError("--models is empty", "name models, e.g. --models resnet50,mlp")
    return [m for m in ordered if m.model_id in chosen]


def model_inputs(client: Client, spec: str | None = None) -> tuple[list[str], dict]:
    """Served model ids (those `spec` picks: pick_models) and one zero-filled sample for
    each."""
    infos = client.models()
    if not infos:
        raise UsageError("the controller serves no models yet", "start workers first")
    infos = pick_models(infos, spec)
    inputs = {}
    samples: dict[tuple, list[np.ndarray]] = {}  # one per kind of input: copies share theirs
    for m in infos:
        kind = tuple((s.dtype, tuple(s.sample_shape)) for s in m.inputs)
        if kind not in samples:
            samples[kind] = [np.zeros((1, *shape), dtype=dtype) for dtype, shape in kind]
        inputs[m.model_id] = samples[kind]
    return list(inputs), inputs


def _policy_of(client: Client, config) -> str:
    """The policy the controller runs: the replay's own, or a running `cw serve`'s, which
    --scheduler cannot change."""
    running = client.scheduler or config.scheduler  # "": a controller before 2026-11-24
    if config.controller and running != config.scheduler and config.scheduler != "clockwork":
        raise UsageError(f"the controller at {config.controller} runs '{running}', not "
                         f"--scheduler {config.scheduler}",
                         "restart it with that --scheduler, or drop --controller to have "
                         "cw replay start one")
    return running


def wait_until(target_ns: int) -> int:
    """Sleep until `target_ns` (monotonic clock) and return the time then. Never spins: a sleep
    overshoots by ~0.1 ms, well inside the 1 ms a sender may be late, whereas spinning the last
    fraction of each gap kept a core busy at a few thousand requests a second, starving the
    controller and workers that share this machine."""
    now = time.monotonic_ns()
    if target_ns > now:
        time.sleep((target_ns - now) / 1e9)
        now = time.monotonic_ns()
    return now


@contextlib.contextmanager
def sender_switch_interval():
    """While a sender runs, Python lets another thread of this process take the GIL after
    SENDER_SWITCH_INTERVAL_S instead of 5 ms: the client's I/O thread, which sends the requests
    and takes the answers in, waited up to that long behind a sender busy with a burst of
    requests (each answer lets a closed-loop client send again), late by the client's count."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(SENDER_SWITCH_INTERVAL_S)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@sender_switch_interval()
def send_open_loop(client: Client, times_ns, names: list[str], inputs: dict, slo_ms: float,
                   progress=None, stop=None):
    """Send request i at start + times_ns[i]; returns (futures, send times, lateness), of the
    requests sent before `stop()` said to stop (it is asked now and then)."""
    n = len(times_ns)
    sent = np.zeros(n, dtype=np.int64)
    futures = []
    shared = share_inputs(client, {name: inputs[name] for name in set(names)})
    start = time.monotonic_ns()
    for i in range(n):
        if i % 2000 == 0:
            # Every request leaves a future alive until the end; a full collection scanning
            # hundreds of thousands of them stalled this loop for ~100 ms. Frozen objects are
            # skipped by the collector (and still freed when their last reference goes).
            gc.freeze()
        sent[i] = wait_until(start + int(times_ns[i]))
        future = client.infer_response_async(names[i], shared[names[i]], slo_ms=slo_ms)
        future.add_done_callback(lambda f: setattr(f, "done_ns", time.monotonic_ns()))
        futures.append(future)
        if i % 500 == 0:
            if progress is not None:
                progress(i, int(times_ns[i]))
            if stop is not None and stop():
                sent = sent[:i + 1]
                break
    release(shared)
    return futures, sent, sent - (start + np.asarray(times_ns[:len(sent)], dtype=np.int64)), start


def share_inputs(client, inputs: dict) -> dict:
    """Each model's inputs shared once (`Client.share`): an open loop sends the same inputs
    again and again at the trace's times, and copying a 600 KB image into shared memory for
    each request took half its client's CPU (185 against 90 µs a request at 3,000 r/s on 2
    cores; arrivals sent late by p99 19-28 ms against 3.5-6.4; docs/benchmarks.md, stop 51).
    Clients without `share` get them as they are. Not for the closed loop: it resends each
    answered request at once, so a cheaper client only sends more of them (×2.9 at 10 ms on 2
    cores), and the queue it kept in its own process, before each call, moves to the
    controller's intake, where it counts against the SLO (late answers ×20-60 there)."""
    share = getattr(client, "share", None)
    if share is None:
        return dict(inputs)
    # once per inputs object: the copies of a model, and models with inputs of one kind, share
    # theirs (model_inputs), and 3,600 copies must not hold 3,600 slots of /dev/shm
    once: dict[int, object] = {}
    return {m: once[id(x)] if id(x) in once else once.setdefault(id(x), share(x))
            for m, x in inputs.items()}


def release(shared: dict) -> None:
    for x in {id(x): x for x in shared.values()}.values():
        if hasattr(x, "release"):
            x.release()  # (their slots are free once the requests in flight are over)


@sender_switch_interval()
def send_closed_loop(client: Client, loop, inputs: dict, slo_ms: float, progress=None,
                     stop=None, send_at_once: bool = False):
    """`loop.concurrency` clients per model, each sending its next request when the previous
    one is answered, until `loop.duration_ns` has passed. Returns (futures, send times, model
    of each request, start). `send_at_once`: each burst of requests leaves at once
    (`Client.send_now`), not within the client's I/O thread's next millisecond. A client with
    `loop.think_ns` sends its next request that long after its answer came."""
    futures, sent, names = [], [], []
    # Answers reach this thread through a queue their futures' callbacks fill. Waiting on the
    # futures themselves (concurrent.futures.wait over the ~240 in flight) cost ~145 µs of
    # this thread's time per wake-up, held the GIL that the client's I/O thread needs to send
    # and to take answers in, and so delayed both by milliseconds at 12,000 r/s (the 10 ms
    # Fig. 5 on the H200, 2026-11-28).
    answered: queue.SimpleQueue = queue.SimpleQueue()
    in_flight = 0
    start = time.monotonic_ns()
    end = start + loop.duration_ns
    # The answers a poll of the client's I/O thread settled are handed over once, after that
    # poll: woken by the first answer's callback, this thread took the GIL from the I/O thread
    # while it still settled the others (their callers' time: late by the client's count;
    # docs/benchmarks.md, stop 49)
    per_poll = hasattr(client, "on_polled")
    noted: collections.deque = collections.deque()
    this_thread = threading.get_ident()

    def answer(future) -> None:
        future.done_ns = time.monotonic_ns()
        if per_poll and threading.get_ident() != this_thread:
            noted.append(future.model)
        else:  # (answered before it left, in this thread: no poll would hand it over)
            answered.put((future.model,))

    def hand_over() -> None:  # on the client's I/O thread, once its poll's answers are settled
        n = len(noted)
        if n:
            answered.put([noted.popleft() for _ in range(n)])

    def issue(model: str, now_ns: int) -> None:
        nonlocal in_flight
        if len(futures) % 2000 == 0:
            gc.freeze()  # as in send_open_loop: keep full collections off the live futures
        # the instant the send was decided on: a stamp taken anew here could fall past the
        # end after a check made before it (this thread waited 4 ms for a core or the GIL)
        sent.append(now_ns)
        future = client.infer_response_async(model, inputs[model], slo_ms=slo_ms)
        future.model = model
        in_flight += 1
        futures.append(future)
        names.append(model)
        future.add_done_callback(answer)  # (at once, in this thread, if already answered)

    stop_handing_over = client.on_polled(hand_over) if per_poll else None
    send_now = getattr(client, "send_now", None) if send_at_once else None
    try:
        for model in loop.models:
            for _ in range(loop.concurrency):
                issue(model, time.monotonic_ns())
        reported = start
        thinking: list[tuple[int, str]] = []  # (when its client asks again, model): a heap
        while in_flight or thinking:
            wait_s = 1.0 if not thinking else (thinking[0][0] - time.monotonic_ns()) / 1e9
            try:
                done = list(answered.get(timeout=min(max(wait_s, 0.0), 1.0)))
            except queue.Empty:
                done = []
            while True:  # every answer there is, in one go
                try:
                    done.extend(answered.get_nowait())
                except queue.Empty:
                    break
            in_flight -= len(done)
            if loop.think_ns:
                done = _after_thinking(done, thinking, loop.think_ns, end)
            issued = False
            for model in done:
                now_ns = time.monotonic_ns()
                if now_ns < end:
                    issue(model, now_ns)
                    issued = True
            if issued and send_now is not None:
                send_now()
            now = time.monotonic_ns()
            if progress is not None and (now - reported > PROGRESS_EVERY_NS
                                         or not (in_flight or thinking)):
                reported = now
                progress(len(futures), min(now - start, loop.duration_ns))
            if now > end + ANSWER_WAIT_NS + int(slo_ms * 1e6) or (stop is not None and stop()):
                break  # what is still unanswered then counts as NO_ANSWER
    finally:
        if stop_handing_over is not None:
            stop_handing_over()
    return futures, np.asarray(sent, dtype=np.int64), names, start


def _after_thinking(models: list, thinking: list, think_ns: int, end_ns: int) -> list:
    """The models whose clients have thought long enough to ask again, soonest first. The
    answers in `models` start their clients' think time; one that would end past `end_ns`
    ends its client."""
    now_ns = time.monotonic_ns()
    if now_ns + think_ns < end_ns:
        for model in models:
            heapq.heappush(thinking, (now_ns + think_ns, model))
    ready = []
    while thinking and thinking[0][0] <= now_ns:
        ready.append(heapq.heappop(thinking)[1])
    return ready


def wait_for(futures, timeout_s: float, stop=None) -> None:
    """Until every future is done, `timeout_s` has passed, or `stop()` says to stop."""
    deadline = time.monotonic() + timeout_s
    for f in futures:
        while not f.done():
            left = deadline - time.monotonic()
            if left <= 0 or (stop is not None and stop()):
                return
            try:
                f.exception(timeout=min(left, 0.5))
            except Exception:  # TimeoutError: counted as unanswered below
                pass


@contextlib.contextmanager
def client_stalls(threshold_ns: int | None, log_dir: Path | None):
    """With --log-stalls, this process's stalls too, as "client stall: ..." lines in
    log_dir/client.log (collect_stalls counts them as the client's): its I/O thread takes the
    answers in under the same GIL as the sender, on the same machine. On the H200 (stop 61)
    the answers late by the client's count were late mostly before that thread took them in,
    with spikes of 3-7.6 ms on that way, which neither the controller's lines nor the workers'
    can explain. The watch thread wakes every millisecond (a few % of a core); with --senders
    the sender processes are not watched."""
    if threshold_ns is None or log_dir is None:
        yield None
        return
    logger = logging.getLogger("cw.replay.client-stalls")
    handler = logging.FileHandler(log_dir / CLIENT_STALLS_LOG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))  # as the controller's
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False  # not onto the replay's console
    watch = StallWatch("client", threshold_ns, logger.warning).start()
    try:
        yield watch
    finally:
        watch.stop()
        logger.removeHandler(handler)
        handler.close()


def wall_clock_of(monotonic_ns: int) -> str:
    """A time on this host's monotonic clock as the stall lines write theirs (logging's
    asctime: local time, milliseconds after a comma)."""
    wall_ns = time.time_ns() - (time.monotonic_ns() - monotonic_ns)
    seconds, ns = divmod(wall_ns, 1_000_000_000)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) + \
        f",{ns // 1_000_000:03d}"


def collect_stalls(log_dir: Path, into: Path) -> dict:
    """The stall lines of a replay's controller (its stalls.log), workers (their logs) and own
    client (client.log), in time order, into one file; how many each reported."""
    from cw.serve.launch import STALLS_LOG

    lines, counts = [], {}
    for path in sorted(log_dir.glob("*.log")):
        found = [line for line in path.read_text(errors="replace").splitlines()
                 if " stall: " in line]
        counts["controller" if path.name == STALLS_LOG else path.stem] = len(found)
        lines += found
    into.write_text("".join(line + "\n" for line in sorted(lines)))  # lines start with the time
    return counts


def run_live(config, generate_arrivals, progress, logs_to: Path | None = None):
    """Returns (request rows, action rows, simulated?, runtime, extra summary fields, duration,
    rate scale) with times relative to the start of the replay. With `config.log_stalls_ns`, the
    stall lines of the controller and the workers it starts go to `logs_to`/stalls.log."""
    from cw.serve.controller import ControllerConfig
    from cw.serve.launch import ControllerProcess, WorkerProcesses, local_address

    ctl = procs = telemetry_dir = None
    address = config.controller
    try:
        if address is None:
            models_dir = Path(config.models)
            if not models_dir.is_dir():
                raise UsageError("a local live replay needs compiled bundles for its workers",
                                 "give --models DIR of bundles, or add --simulate for zoo names")
            from cw.serve.local import check_local_serving

            devices = check_local_serving(models_dir, config.runtime, config.workers,
                                          config.copies)
            # The controller gets a process of its own (not a thread of this one, where it
            # would share the GIL with the sender); its telemetry comes back as CSV files.
            telemetry_dir = Path(tempfile.mkdtemp(prefix="cw-replay-telemetry-"))
            ctl = ControllerProcess(ControllerConfig(
                workers_listen="tcp://127.0.0.1:*", clients_listen="tcp://127.0.0.1:*",
                scheduler=config.scheduler,
                log_dir=telemetry_dir, log_stalls_ns=config.log_stalls_ns))
            runtime = "simulated" if config.runtime == "simulated" else "tvm"
            procs = WorkerProcesses(local_address(ctl.workers_address), models_dir,
                                    config.workers, runtime, devices, config.copies,
                                    log_dir=telemetry_dir,
                                    log_stalls=f"{config.log_stalls_ns}ns"
                                    if config.log_stalls_ns is not None else None,
                                    exec_graphs=config.exec_graphs)
            try:
                procs.wait_until_joined(ctl, timeout_s=120)
            except CwError as e:  # its hint names a log that goes with the temporary folder
                raise type(e)(e.message, f"run `cw serve worker --runtime {runtime} --device "
                                         f"{devices[0]} --models {models_dir}` by hand to see "
                                         "its whole output") from None
            address = local_address(ctl.clients_address)
        with Client(address, timeout_s=10, key_file=config.key_file,
                    shared_memory=None if config.shared_memory else False,
                    answer_lane=config.answer_lane) as client:
            names, inputs = model_inputs(client, config.models if config.controller else None)
            policy = _policy_of(client, config)
            arr = generate_arrivals(names, client.gpus if config.controller else None)
            progress("start", {"requests": arr.count, "duration_ns": arr.duration_ns})
            advance = lambda i, t: progress("advance", {"requests": i, "virtual_ns": t})  # noqa
            extra = {"live": True, "controller": config.controller or "local",
                     "scheduler": policy, "models": len(names),
                     "inputs_via": " and ".join(sorted({
                         client.inputs_via(sum(a.nbytes for a in x)) for x in inputs.values()}))}
            if config.controller and client.gpus:  # what serves it, not what --workers says
                extra.update(workers=client.workers, gpus=client.gpus)
            if config.exec_graphs:
                extra["exec_graphs"] = True
            # a controller of the replay's own that has died answers nothing more: stop there
            # (a running one's end is not seen from here: its requests wait ANSWER_WAIT_NS)
            gone = None if ctl is None else (lambda: not ctl.process.is_alive())
            # whether this machine's processes had cores to run on (stalls answer late)
            cpu_before, cpu_since_ns = host_cpu_counters(), time.perf_counter_ns()
            client_before = process_cpu_ns()
            with client_stalls(config.log_stalls_ns, telemetry_dir):
                if isinstance(arr, ClosedLoop) and config.senders > 1:
                    from cw.replay.senders import send_closed_loop_in_processes

                    answers, start, client_cpu = send_closed_loop_in_processes(
                        address, config.key_file, config.shared_memory, arr, inputs,
                        config.slo_ns / 1e6, config.senders, advance, gone,
                        config.send_at_once, config.answer_lane)
                    extra["senders"] = config.senders
                else:
                    if isinstance(arr, ClosedLoop):
                        futures, sent, chosen, start = send_closed_loop(
                            client, arr, inputs, config.slo_ns / 1e6, advance, gone,
                            config.send_at_once)
                    else:
                        chosen = [arr.models[i] for i in arr.model_index]
                        futures, sent, lateness, start = send_open_loop(
                            client, arr.times_ns, chosen, inputs, config.slo_ns / 1e6, advance,
                            gone)
                        extra["send_lateness_ms"] = lateness_ms(lateness)
                    wait_for(futures, (config.slo_ns + ANSWER_WAIT_NS) / 1e9, gone)
                    client_cpu = [cpu_cores(client_before, process_cpu_ns(),
                                            time.perf_counter_ns() - cpu_since_ns)]
                    answers = answers_of(futures, sent, chosen)
            # a client process busy ~one core in Python (its GIL's limit) is the bottleneck: its
            # answers wait to be taken in, and count late by its own clock (cli: a warning)
            extra["client_cpu"] = {k: [c[k] for c in client_cpu] for k in client_cpu[0]}
            if config.send_at_once:
                extra["send_at_once"] = True
            if config.answer_lane:  # how answers reached this client: its lane, or ZeroMQ
                extra["answers_via"] = "lane" if client.answers_on_lane else "socket"
            if ctl is not None:
                # the controller's rows end when it sends an answer (and start at the client's
                # send only where they share a clock): the way back, and any wait before the
                # controller took a request in, show from the client's side alone
                extra["client_view"] = client_view(client_rows(answers, config.slo_ns), answers,
                                                   start)
            # the replay's time 0 as the stall lines write times: where its rows' times and
            # client_view's late answers meet those lines
            extra["clock_origin"] = wall_clock_of(start)
            extra["host_cpu"] = host_cpu_delta(cpu_before, host_cpu_counters(),
                                               time.perf_counter_ns() - cpu_since_ns)
        if ctl is not None:
            # a worker that died mid-run: the controller served on without it; say so, and
            # keep its log with the output
            ended = procs.ended()
            extra["workers_lost"] = [how for _, how in sorted(ended.items())]
            if logs_to is not None:
                for i in ended:
                    shutil.copyfile(procs.log_of(i), logs_to / f"worker-{i}.log")
            procs.stop()  # workers first: the controller then has nothing left in flight
            procs = None
            ctl.close()  # writes the last telemetry rows
            if ctl.failure is not None:  # its telemetry ends where it did: no report from it
                missed = no_answer(shift(client_rows(answers, config.slo_ns),
                                         TIME_FIELDS_REQUEST, start))
                lost = (f"{missed['no_answer']:,} of the {len(answers):,} requests sent got no "
                        f"answer (the first sent {missed['no_answer_sent_s'][0]:g} s in)"
                        if missed["no_answer"] else "its telemetry is incomplete")
                raise CwError(f"the replay's controller process {ctl.failure}; {lost}",
                              "nothing was written; run the replay again, with fewer "
                              "--copies or a shorter --duration if memory ran out")
            # how long the controller's loop iterations kept it busy: stalls answer late
            extra["controller_loop"] = ctl.loop
            lost = ctl.telemetry_lost
            ctl = None
            if lost is not None:  # a report from part of the rows would mislead
                raise HostError(f"the controller could not write {lost[0]} of its telemetry "
                                f"rows to {telemetry_dir} ({lost[1]})",
                                "free space in the temporary folder (or point TMPDIR "
                                "elsewhere) and run the replay again")
            if config.log_stalls_ns is not None and logs_to is not None:
                extra["stalls"] = collect_stalls(telemetry_dir, logs_to / "stalls.log")
            requests = shift(read_csv(telemetry_dir / "requests.csv", RequestRow),
                             TIME_FIELDS_REQUEST, start)
            actions = shift(read_csv(telemetry_dir / "actions.csv", ActionRow),
                            TIME_FIELDS_ACTION, start)
            simulated = bool(requests) and all(r.simulated for r in requests if r.status == "OK")
            runtime_name = {"simulated": "simulated", "cpu": "cpu", "cuda": "gpu"}[config.runtime]
        else:
            requests = shift(client_rows(answers, config.slo_ns), TIME_FIELDS_REQUEST, start)
            actions = []
            # what answered is unknown from here, but for simulated workers: their answers say so
            simulated = any(r.status == "OK" for r in requests) and all(
                r.simulated for r in requests if r.status == "OK")
            runtime_name = "simulated" if simulated else "remote"
            extra.update(no_answer(requests))
        return requests, actions, simulated, runtime_name, extra, arr
    finally:
        if procs is not None:
            procs.stop()
        if ctl is not None:
            ctl.close()
        if telemetry_dir is not None:
            shutil.rmtree(telemetry_dir, ignore_errors=True)

