"""The live replay's closed-loop sender against a client whose answers come from another thread
(as the real client's I/O thread answers), or at once (a rejection at the client's door)."""

import concurrent.futures
import queue
import threading
import time

import numpy as np

from cw.replay import workloads
from cw.replay.live import send_closed_loop

MS = 1_000_000


class AnsweringClient:
    """`infer_response_async` returns a future that a thread of its own answers after
    `service_s`; `at_once` models' futures are answered before they are returned. Counts what
    each model has in flight."""

    def __init__(self, service_s: float, at_once=()):
        self.service_s, self.at_once = service_s, set(at_once)
        self.in_flight: dict[str, int] = {}
        self.most_in_flight: dict[str, int] = {}
        self.lock = threading.Lock()
        self.todo: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._answer, daemon=True)
        self.thread.start()

    def infer_response_async(self, model, inputs, slo_ms):
        future = concurrent.futures.Future()
        with self.lock:
            n = self.in_flight[model] = self.in_flight.get(model, 0) + 1
            self.most_in_flight[model] = max(self.most_in_flight.get(model, 0), n)
        if model in self.at_once:
            self._finish(model, future)
        else:
            self.todo.put((time.monotonic() + self.service_s, model, future))
        return future

    def _finish(self, model, future):
        with self.lock:
            self.in_flight[model] -= 1
        future.set_result(model)

    def _answer(self):
        while True:
            due, model, future = self.todo.get()
            time.sleep(max(0.0, due - time.monotonic()))
            self._finish(model, future)


def test_each_client_keeps_one_request_in_flight_until_the_end():
    client = AnsweringClient(service_s=0.001, at_once={"rejected"})
    models = ["a", "b", "rejected"]
    loop = workloads.ClosedLoop(models, concurrency=3, duration_ns=300 * MS)
    reports = []
    futures, sent, names, start = send_closed_loop(
        client, loop, {m: None for m in models}, slo_ms=10,
        progress=lambda n, t: reports.append((n, t)))
    assert len(futures) == len(sent) == len(names)
    assert all(f.done() and f.result() == m for f, m in zip(futures, names))
    # answered futures say when (the replay's client view reads it)
    assert all(f.done_ns >= s for f, s in zip(futures, sent))
    for model in models:
        assert client.most_in_flight[model] <= 3
    counts = {m: names.count(m) for m in models}
    # 3 clients × ~300 answers of 1 ms each at most; far fewer would mean the loop stalled
    assert 3 * 20 < counts["a"] <= 3 * 300 + 3 and 3 * 20 < counts["b"] <= 3 * 300 + 3
    # answered at once, a client asks again at once: many more, and still none after the end
    # (a sender busy with those held the GIL for Python's 5 ms switch interval: the thread
    # answering "a" and "b" got it ~100 times in 300 ms)
    assert counts["rejected"] > counts["a"]
    assert int(np.max(sent)) < start + loop.duration_ns
    assert reports and reports[-1][0] == len(futures)


def test_a_client_thinks_between_its_answer_and_its_next_request():
    client = AnsweringClient(service_s=0.001, at_once={"rejected"})
    loop = workloads.ClosedLoop(["a", "rejected"], concurrency=2, duration_ns=300 * MS,
                                think_ns=20 * MS)
    futures, sent, names, start = send_closed_loop(client, loop, {"a": None, "rejected": None},
                                                   slo_ms=10)
    assert all(f.done() for f in futures)
    for model in ("a", "rejected"):
        mine = [i for i, m in enumerate(names) if m == model]
        # each of the 2 clients: its first request at the start, then one per answer + 20 ms
        assert 2 * 8 <= len(mine) <= 2 * (300 // 20 + 1), (model, len(mine))
        assert client.most_in_flight[model] <= 2
        answers = sorted(futures[i].done_ns for i in mine)
        later_sends = sorted(int(sent[i]) for i in mine)[2:]
        # the k-th send after the first two waited 20 ms after the k-th answer at least
        assert all(s - a >= 20 * MS for s, a in zip(later_sends, answers)), model
    assert int(np.max(sent)) < start + loop.duration_ns


class PollingClient(AnsweringClient):
    """As cw's client: its answering thread calls `on_polled`'s callables after each round of
    answers; `send_now` is counted."""

    def __init__(self, service_s: float, at_once=()):
        self.after_polls, self.sends_now = [], 0
        super().__init__(service_s, at_once)

    def on_polled(self, after_poll):
        self.after_polls.append(after_poll)
        return lambda: self.after_polls.remove(after_poll)

    def send_now(self):
        self.sends_now += 1

    def _answer(self):
        while True:
            due, model, future = self.todo.get()
            time.sleep(max(0.0, due - time.monotonic()))
            self._finish(model, future)
            if self.todo.empty():  # (a poll's answers settled)
                for after_poll in list(self.after_polls):
                    after_poll()


def test_answers_handed_over_once_per_poll_keep_every_client_going():
    """The per-poll hand-over (Client.on_polled): answers noted by the callbacks reach the
    sender after the poll, those answered at once in the sender's own thread at once; with
    `send_at_once` each burst is followed by one send_now."""
    for send_at_once in (False, True):
        client = PollingClient(service_s=0.001, at_once={"rejected"})
        models = ["a", "b", "rejected"]
        loop = workloads.ClosedLoop(models, concurrency=3, duration_ns=300 * MS)
        futures, sent, names, start = send_closed_loop(
            client, loop, {m: None for m in models}, slo_ms=10, send_at_once=send_at_once)
        assert all(f.done() and f.result() == m for f, m in zip(futures, names))
        counts = {m: names.count(m) for m in models}
        assert 3 * 20 < counts["a"] <= 3 * 300 + 3 and 3 * 20 < counts["b"] <= 3 * 300 + 3
        assert counts["rejected"] > counts["a"]
        assert all(client.most_in_flight[m] <= 3 for m in models)
        assert client.after_polls == []  # stopped at the end
        assert (client.sends_now > 0) == send_at_once


def test_the_way_back_of_a_late_answer_splits_where_the_clients_thread_took_it_in():
    """client_view: of the answers that left the controller in time but reached the caller late,
    those already late when the client's I/O thread took them in (the way there, or that thread
    kept from running) are told from those made late after (answers ahead of them in its poll,
    callbacks)."""
    from cw.replay.answers import Answers, client_rows, client_view

    slo = 10 * MS
    sent = np.array([0, 0, 0, 0], dtype=np.int64)
    left = np.array([4, 9, 9, 12], dtype=np.int64) * MS  # the answers left the controller
    received = np.array([5, 11, 9.5, 13], dtype=float) * MS  # the I/O thread took them in
    done = np.array([5.1, 11.2, 10.5, 13.1], dtype=float) * MS  # the caller had them
    answers = Answers(sent, done.astype(np.int64), ["OK"] * 4, np.ones(4, dtype=np.int32),
                      np.zeros(4, dtype=bool), left, ["m"] * 4, received.astype(np.int64))
    view = client_view(client_rows(answers, slo), answers)
    assert view["late"] == 3  # the last left late, by the controller's fault
    assert view["late_that_left_in_time"] == 2
    assert view["late_when_taken_in"] == 1  # the second; the third was in time at intake
    assert view["way_to_client_thread_ms"]["max"] == 2.0
    assert view["in_client_ms"]["max"] == 1.0
    # each late answer listed, sent relative to the replay's start, to set beside stall lines
    view = client_view(client_rows(answers, slo), answers, origin_ns=-2 * MS)
    assert view["late_answers"] == [
        {"sent_s": 0.002, "model": "m", "status": "OK", "left_ms": 9.0, "taken_in_ms": 11.0,
         "answered_ms": 11.2},
        {"sent_s": 0.002, "model": "m", "status": "OK", "left_ms": 9.0, "taken_in_ms": 9.5,
         "answered_ms": 10.5},
        {"sent_s": 0.002, "model": "m", "status": "OK", "left_ms": 12.0, "taken_in_ms": 13.0,
         "answered_ms": 13.1}]
    # a sender from before the stamp (or a merge with one): no split, the rest as before
    older = Answers(*[getattr(answers, f) for f in ("sent_ns", "done_ns", "status",
                                                   "batch_size", "simulated", "left_after_ns",
                                                   "models")])
    view = client_view(client_rows(older, slo), older)
    assert view["late_that_left_in_time"] == 2 and "late_when_taken_in" not in view


def test_an_open_loop_shares_each_inputs_object_once_and_releases_it_at_the_end():
    """The open loop sends shared inputs (Client.share): once per inputs object, however many
    models (copies of a model share theirs), each request with its model's, released at the
    end; a client without `share` gets the inputs as they are."""
    from cw.replay.live import send_open_loop

    class Shared:
        def __init__(self, x):
            self.x, self.released = x, 0

        def release(self):
            self.released += 1

    class SharingClient:
        def __init__(self):
            self.shared, self.sent = [], []

        def share(self, x):
            self.shared.append(Shared(x))
            return self.shared[-1]

        def infer_response_async(self, model, x, slo_ms):
            self.sent.append((model, x))
            future = concurrent.futures.Future()
            future.set_result(model)
            return future

    image, other = [np.zeros((1, 3))], [np.zeros((1, 5))]
    inputs = {"a": image, "a-copy": image, "b": other, "b-copy": other, "c": image}
    names = ["a", "a-copy", "b", "b-copy", "c", "a"]
    client = SharingClient()
    futures, sent, lateness, start = send_open_loop(client, [i * MS for i in range(6)], names,
                                                    inputs, slo_ms=10)
    assert len(futures) == 6 and [f.result() for f in futures] == names
    assert sorted(id(s.x) for s in client.shared) == sorted([id(image), id(other)])
    assert all(x.x is inputs[model] for model, x in client.sent)
    assert [s.released for s in client.shared] == [1, 1]

    class PlainClient:  # (no share)
        infer_response_async = SharingClient.infer_response_async
        sent = []

    plain = PlainClient()
    send_open_loop(plain, [0, MS], ["a", "b"], inputs, slo_ms=10)
    assert [x for _, x in plain.sent][0] is image and [x for _, x in plain.sent][1] is other
