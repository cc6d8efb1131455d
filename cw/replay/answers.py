"""What a live replay's client saw of its requests: the answers in send order (`Answers`, also
from sender processes: cw/replay/senders.py), the request rows built from them where the
controller's own telemetry is out of reach, and the client's view (lateness from its send to its
receipt, and where the late answers lost their time on the way back)."""

from __future__ import annotations

import collections
from dataclasses import dataclass

import numpy as np

from cw.client import NoAnswer
from cw.serve.protocol import InferResponse
from cw.serve.telemetry import RequestRow

# the status of a request the controller never answered (the client's, not a RequestStatus)
NO_ANSWER = "NO_ANSWER"
# client_view lists this many of the answers late by the client's count (the first ones), each
# with when it was sent and where its time went, to set against the runs' stall lines
LATE_ANSWERS_LISTED = 100


@dataclass
class Answers:
    """What a sender saw of its requests, in the order it sent them: what a replay's request
    rows and its client view are made of, also when the senders ran in other processes
    (cw/replay/senders.py)."""
    sent_ns: np.ndarray        # int64, the client's call
    done_ns: np.ndarray        # int64, its receipt of the answer (0: none came)
    status: list[str]          # RequestStatus name, NO_ANSWER, or ERROR (the client failed)
    batch_size: np.ndarray     # int32, the compiled batch size it ran in (0: unknown)
    simulated: np.ndarray      # bool, answered by a simulated worker
    left_after_ns: np.ndarray  # int64, InferResponse.latency_ns: its send to the answer
    models: list[str]          # leaving the controller (0: not said)
    # int64, when the client's I/O thread took the answer in (0: not known), before it settled
    # the answers ahead of it in that poll and ran the callbacks: `done_ns` is after those
    received_ns: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.status)


def answers_of(futures, sent_ns, names) -> Answers:
    """The sender's futures of raw responses as Answers. (The client cancels what is pending
    at its close, and fails with NoAnswer what waited its timeout past the deadline.)"""
    n = len(futures)
    done, batch = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int32)
    simulated, left = np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64)
    received = np.zeros(n, dtype=np.int64)
    status = []
    for i, (f, t0) in enumerate(zip(futures, sent_ns)):
        if not f.done() or f.cancelled() or isinstance(f.exception(), NoAnswer):
            status.append(NO_ANSWER)
            continue
        done[i] = getattr(f, "done_ns", int(t0))
        received[i] = getattr(f, "received_ns", 0)
        if f.exception() is not None:
            status.append("ERROR")
            continue
        response = f.result()
        status.append(response.status.name)
        if isinstance(response, InferResponse):
            batch[i], simulated[i] = response.batch_size, response.simulated
            left[i] = max(0, response.latency_ns)
    return Answers(np.asarray(sent_ns, dtype=np.int64), done, status, batch, simulated, left,
                   list(names), received)


def client_rows(answers: Answers, slo_ns: int) -> list[RequestRow]:
    """Request rows as the client saw them (a remote controller's own telemetry is out of
    reach): a request unanswered counts as answered at its deadline, NO_ANSWER."""
    rows = []
    for i in range(len(answers)):
        t0, status = int(answers.sent_ns[i]), answers.status[i]
        done = t0 + slo_ns if status == NO_ANSWER else int(answers.done_ns[i])
        latency = done - t0
        rows.append(RequestRow(i + 1, answers.models[i], 1, t0, t0 + slo_ns, slo_ns, done,
                               latency, status, status == "OK" and latency <= slo_ns,
                               int(answers.batch_size[i]), -1, -1, -1, False,
                               bool(answers.simulated[i])))
    return rows


def client_view(rows: list[RequestRow], answers: Answers | None = None,
                origin_ns: int = 0) -> dict:
    """Lateness and latency as the client measured them, from its send to its receipt. With
    the `answers` (a controller on this host, whose answers say how long the request took
    until the answer left: InferResponse.latency_ns), also what the way back took, and the
    first LATE_ANSWERS_LISTED late answers one by one (`sent_s`: seconds after `origin_ns`,
    the replay's start on the rows' clock)."""
    from cw.replay.summary import percentiles_ms

    late = collections.Counter(r.status for r in rows if r.completion_ns > r.deadline_ns)
    view = {"late": sum(late.values()), "late_by_status": dict(sorted(late.items())),
            "completed_in_slo": sum(1 for r in rows if r.deadline_met),
            "latency_ms": percentiles_ms([r.latency_ns for r in rows if r.status == "OK"]),
            "answer_ms": percentiles_ms([r.latency_ns for r in rows if r.status != NO_ANSWER])}
    if answers is not None:
        received = answers.received_ns if answers.received_ns is not None \
            else np.zeros(len(rows), dtype=np.int64)
        way_back, to_thread, in_client, listed = [], [], [], []
        left_in_time = late_when_taken_in = 0
        for r, left_after_ns, received_ns in zip(rows, answers.left_after_ns.tolist(),
                                                 received.tolist()):
            if r.status in (NO_ANSWER, "ERROR") or left_after_ns <= 0:
                continue
            way_back.append(r.latency_ns - left_after_ns)
            late_on_the_way = r.completion_ns > r.deadline_ns and left_after_ns <= r.slo_ns
            left_in_time += late_on_the_way
            if received_ns > 0:
                to_thread.append(received_ns - r.arrival_ns - left_after_ns)
                in_client.append(r.completion_ns - received_ns)
                late_when_taken_in += late_on_the_way and received_ns > r.deadline_ns
            if r.completion_ns > r.deadline_ns and len(listed) < LATE_ANSWERS_LISTED:
                listed.append({
                    "sent_s": round((r.arrival_ns - origin_ns) / 1e9, 6), "model": r.model,
                    "status": r.status, "left_ms": round(left_after_ns / 1e6, 4),
                    "taken_in_ms": round((received_ns - r.arrival_ns) / 1e6, 4)
                    if received_ns > 0 else None,
                    "answered_ms": round(r.latency_ns / 1e6, 4)})
        # the answer's way from the controller to the client's receipt (and the client's own
        # call before the send's stamp: microseconds); late answers that left in time were
        # late on this way alone: already when the client's I/O thread took them in (ZeroMQ,
        # or that thread waiting for the GIL or a core), or only after (the answers ahead of
        # them in its poll, and the callbacks)
        view["way_back_ms"] = percentiles_ms(way_back)
        view["late_that_left_in_time"] = left_in_time
        view["late_answers"] = listed
        if to_thread:
            view["way_to_client_thread_ms"] = percentiles_ms(to_thread)
            view["in_client_ms"] = percentiles_ms(in_client)
            view["late_when_taken_in"] = late_when_taken_in
    return view


def no_answer(requests: list[RequestRow]) -> dict:
    """How many requests a controller never answered, and when the first and the last of them
    were sent (seconds into the replay: rows relative to its start): a controller that stopped,
    or restarted, mid-run."""
    sent = [r.arrival_ns for r in requests if r.status == NO_ANSWER]
    return {"no_answer": len(sent),
            "no_answer_sent_s": [round(min(sent) / 1e9, 3), round(max(sent) / 1e9, 3)]
            if sent else None}


def lateness_ms(lateness_ns) -> dict:
    a = np.asarray(lateness_ns, dtype=np.float64) / 1e6
    if a.size == 0:
        return {"p50": None, "p99": None, "max": None}
    return {"p50": round(float(np.percentile(a, 50)), 4),
            "p99": round(float(np.percentile(a, 99)), 4), "max": round(float(a.max()), 4)}
