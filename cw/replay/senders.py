"""A closed loop's clients in several processes (`cw replay --senders N`).

One Python process sending for the paper's Fig. 5 (240 closed-loop clients) does ~13,000
requests a second at a 10 ms SLO, where rejected requests are sent again at once: its I/O thread
then takes answers in late, and they count late by the client's clock although they left the
controller in time (docs/benchmarks.md, "Fig. 5 on the GPU"). Here each of N processes has a
client of its own and drives whole models (model i goes to sender i mod N); every sender starts
at one signal, and what each saw comes back as `Answers`, merged in send order.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from pathlib import Path

import numpy as np

from cw.errors import CwError, UsageError
from cw.replay.answers import Answers, answers_of
from cw.replay.live import ANSWER_WAIT_NS, PROGRESS_EVERY_NS, send_closed_loop, wait_for
from cw.replay.workloads import ClosedLoop
from cw.serve.stalls import cpu_cores, process_cpu_ns

READY_TIMEOUT_S = 60  # for every sender to connect and learn its models


def split_models(models: list[str], senders: int) -> list[list[str]]:
    """Model i to sender i mod `senders` (whole models: a model's clients share one sender)."""
    if senders > len(models):
        raise UsageError(f"--senders {senders} is more than the {len(models)} models driven",
                         f"give at most --senders {len(models)}: each sender drives whole models")
    return [models[i::senders] for i in range(senders)]


def merge(parts: list[Answers]) -> Answers:
    """Several senders' answers as one, in send order."""
    sent = np.concatenate([a.sent_ns for a in parts])
    order = np.argsort(sent, kind="stable")

    def joined(field):
        return np.concatenate([getattr(a, field) for a in parts])[order]

    def listed(field):
        values = [v for a in parts for v in getattr(a, field)]
        return [values[i] for i in order.tolist()]

    received = None if any(a.received_ns is None for a in parts) else joined("received_ns")
    return Answers(sent[order], joined("done_ns"), listed("status"), joined("batch_size"),
                   joined("simulated"), joined("left_after_ns"), listed("models"), received)


def _sender(index: int, results, counts, go, halt, address: str, key_file: Path | None,
            shared_memory: bool, loop: ClosedLoop, inputs: dict, slo_ms: float,
            send_at_once: bool, answer_lane: bool) -> None:
    """One sender process: connect, say so, wait for the go, drive its models' clients, wait
    for their answers, send back what it saw."""
    from cw.client import Client

    try:
        with Client(address, timeout_s=10, key_file=key_file,
                    shared_memory=None if shared_memory else False,
                    answer_lane=answer_lane) as client:
            client.models(loop.models)  # the hello, and these models' outputs
            results.put(("ready", index, None))
            if not go.wait(READY_TIMEOUT_S):
                return

            def progress(sent: int, _elapsed_ns: int) -> None:
                counts[index] = sent

            cpu_before, began_ns = process_cpu_ns(), time.perf_counter_ns()
            futures, sent, names, start = send_closed_loop(client, loop, inputs, slo_ms,
                                                           progress, halt.is_set, send_at_once)
            counts[index] = len(futures)
            wait_for(futures, (slo_ms * 1e6 + ANSWER_WAIT_NS) / 1e9, halt.is_set)
            cpu = cpu_cores(cpu_before, process_cpu_ns(), time.perf_counter_ns() - began_ns)
            results.put(("done", index, (answers_of(futures, sent, names), start, cpu)))
    except Exception as e:  # told to the parent, which stops the replay with it
        results.put(("error", index, f"{type(e).__name__}: {e}"))


def send_closed_loop_in_processes(address: str, key_file: Path | None, shared_memory: bool,
                                  loop: ClosedLoop, inputs: dict, slo_ms: float, senders: int,
                                  progress=None, stop=None, send_at_once: bool = False,
                                  answer_lane: bool = False
                                  ) -> tuple[Answers, int, list[dict[str, float]]]:
    """`loop` driven by `senders` processes; returns what they saw, merged, the earliest
    start (CLOCK_MONOTONIC: the same in every process of this host), and the cores each
    process used while it sent and waited (`cpu_cores`)."""
    shares = split_models(list(loop.models), senders)
    ctx = mp.get_context("spawn")  # (fork would copy this process's ZeroMQ threads' state)
    # go: every sender is connected; halt: the controller went away (the replay's own)
    results, go, halt = ctx.Queue(), ctx.Event(), ctx.Event()
    counts = ctx.Array("q", senders, lock=False)
    procs = [ctx.Process(target=_sender, name=f"cw-sender-{i}", daemon=True, args=(
        i, results, counts, go, halt, address, key_file, shared_memory,
        ClosedLoop(share, loop.concurrency, loop.duration_ns, loop.think_ns),
        {m: inputs[m] for m in share}, slo_ms, send_at_once, answer_lane))
        for i, share in enumerate(shares)]
    for p in procs:
        p.start()
    try:
        _gather(results, procs, "ready", READY_TIMEOUT_S)
        go.set()
        began = time.monotonic_ns()
        patience_s = (loop.duration_ns + slo_ms * 1e6 + 2 * ANSWER_WAIT_NS) / 1e9 + 30
        done = _gather(results, procs, "done", patience_s, progress=progress, counts=counts,
                       began_ns=began, duration_ns=loop.duration_ns, stop=stop, halt=halt)
    finally:
        go.set()  # (a sender still waiting for it ends)
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join()
    parts = [done[i][0] for i in range(senders)]
    return (merge(parts), min(done[i][1] for i in range(senders)),
            [done[i][2] for i in range(senders)])


def _gather(results, procs, kind: str, timeout_s: float, progress=None, counts=None,
            began_ns: int = 0, duration_ns: int = 0, stop=None, halt=None) -> dict:
    """Every sender's message of `kind`, by sender; raises what a sender reported, or that one
    died or took longer than `timeout_s`. Once `stop()` says so, `halt` tells the senders to
    stop sending and waiting (what they saw still comes back)."""
    got: dict = {}
    deadline = time.monotonic() + timeout_s
    while len(got) < len(procs):
        try:
            what, index, payload = results.get(timeout=PROGRESS_EVERY_NS / 1e9)
        except queue.Empty:
            dead = [p for i, p in enumerate(procs) if i not in got and not p.is_alive()]
            if dead:
                raise CwError(f"replay sender {dead[0].name} ended without a word (exit code "
                              f"{dead[0].exitcode})",
                              "run the replay again with --senders 1 to see its error")
            if time.monotonic() > deadline:
                raise CwError(f"the replay's senders did not report '{kind}' in time "
                              f"({len(got)} of {len(procs)} did)",
                              "check that the controller still runs, and run the replay again")
        else:
            if what == "error":
                raise CwError(f"replay sender {index} failed: {payload}",
                              "run the replay again with --senders 1 to see where")
            if what == kind:
                got[index] = payload
        if halt is not None and stop is not None and not halt.is_set() and stop():
            halt.set()
        if progress is not None and counts is not None:
            progress(sum(counts), min(time.monotonic_ns() - began_ns, duration_ns))
    return got
