"""The Clockwork scheduler on a fake clock advanced by hand: no sockets, threads or sleeping."""

import pytest

from cw.serve.protocol import ModelInfo, RequestStatus, Status
from cw.serve.scheduler import make_scheduler
from cw.serve.scheduler.base import (ActionResult, Finish, GpuInfo, Request, SchedulerConfig,
                                     SendInfer, SendLoad, SendUnload, WorkerInfo)

MS = 1_000_000
EXEC = {1: 2 * MS, 2: 3 * MS, 4: 5 * MS, 8: 9 * MS, 16: 16 * MS}


def model(name, pages=2, load_ns=8 * MS, exec_ns=None):
    return ModelInfo(name, name, pages * 16 * 2**20, pages, [1, 2, 4, 8, 16], [], [], load_ns,
                     dict(exec_ns or EXEC), "profile")


def worker(wid, models, gpus=1, pages=10, shares_memory=False):
    return WorkerInfo(wid, f"w{wid}", [GpuInfo(i, pages, 16 * 2**20) for i in range(gpus)],
                      models, shares_memory=shares_memory)


class Clock:
    """The fake clock: nothing moves unless the test says so."""
    def __init__(self):
        self.now = 1_000 * MS

    def advance(self, ns):
        self.now += ns
        return self.now


@pytest.fixture
def clock():
    return Clock()


def of(decisions, cls):
    return [d for d in decisions if isinstance(d, cls)]


class Harness:
    def __init__(self, clock, config=SchedulerConfig(), models=("m",), workers=1, pages=10,
                 shares_memory=False, policy="clockwork"):
        self.clock = clock
        self.s = make_scheduler(policy, config)
        self.ids = iter(range(1, 10**9))
        self.finished: dict[int, Finish] = {}
        self.sent = []
        for w in range(workers):
            infos = [model(m) if isinstance(m, str) else m for m in models]
            self.event(self.s.worker_joined(clock.now, worker(w, infos, pages=pages,
                                                              shares_memory=shares_memory)))

    def event(self, decisions):
        """Apply an event's immediate decisions, then tick, as the controller does."""
        self.apply(decisions)
        return self.apply(self.s.tick(self.clock.now))

    def apply(self, decisions):
        for d in decisions:
            if isinstance(d, Finish):
                assert d.request_id not in self.finished, "a request answered twice"
                self.finished[d.request_id] = d
            else:
                self.sent.append(d)
        return decisions

    def request(self, model="m", slo_ms=100):
        rid = next(self.ids)
        now = self.clock.now
        self.event(self.s.request_arrived(now, Request(rid, model, 1, now, now + slo_ms * MS)))
        return rid

    def complete(self, action, status=Status.OK, device_ns=None, late_ns=0):
        """The worker ran `action` as planned (or reports `status`)."""
        start = action.earliest_ns + late_ns
        dur = device_ns if device_ns is not None else action.expected_ns
        self.clock.now = max(self.clock.now, start + dur)
        return self.event(self.s.result_returned(
            self.clock.now, ActionResult(action.action_id, status, start, start + dur, dur)))

    def step(self):
        """One tick, then the worker completes every action whose predicted end has passed."""
        self.apply(self.s.tick(self.clock.now))
        for d in list(self.sent):
            if d.earliest_ns + d.expected_ns <= self.clock.now:
                self.sent.remove(d)
                self.complete(d)

    def complete_infers(self):
        """Run every pending INFER as planned."""
        for d in of(self.sent, SendInfer):
            self.sent.remove(d)
            self.complete(d)

    def load_all(self):
        """Run every pending LOAD to completion."""
        for d in list(self.sent):
            if isinstance(d, SendLoad):
                self.sent.remove(d)
                self.complete(d)


def test_cold_request_triggers_load_then_infer(clock):
    h = Harness(clock)
    rid = h.request()
    (load,) = of(h.sent, SendLoad)
    assert load.model == "m" and load.expected_ns == 8 * MS
    assert not of(h.sent, SendInfer) or of(h.sent, SendInfer)[0].earliest_ns >= \
        load.earliest_ns + load.expected_ns  # an INFER may be planned after the predicted load
    h.load_all()
    infers = of(h.sent, SendInfer)
    assert len(infers) == 1 and infers[0].request_ids == [rid]
    h.complete(infers[0])
    assert h.finished[rid].status == RequestStatus.OK and h.finished[rid].cold_start


def test_largest_feasible_batch_wins(clock):
    h = Harness(clock, SchedulerConfig(schedule_ahead_ns=1 * MS))
    h.request()
    h.load_all()
    (first,) = of(h.sent, SendInfer)
    h.sent.clear()
    # the GPU is planned 2 ms ahead, beyond the 1 ms horizon: new requests wait in the queue
    clock.now = first.earliest_ns
    rids = [h.request() for _ in range(3)]
    assert not of(h.sent, SendInfer)
    clock.now = first.earliest_ns + first.expected_ns - MS // 2  # within the horizon again
    h.apply(h.s.tick(clock.now))
    (batch,) = of(h.sent, SendInfer)
    assert batch.request_ids == rids and batch.batch_size == 4  # 3 requests, padded to 4
    assert batch.earliest_ns >= first.earliest_ns + first.expected_ns  # one EXEC at a time


def test_batch_shrinks_to_meet_the_deadline(clock):
    h = Harness(clock)
    h.request()
    h.load_all()
    h.complete(of(h.sent, SendInfer)[0])
    h.sent.clear()
    # 8 requests with a 12 ms SLO: batch 8 (9 ms) would start too late behind nothing? it fits;
    # with an 8 ms SLO only batch 4 (5 ms) fits the deadline minus the completion margin
    for _ in range(8):
        h.apply(h.s.request_arrived(clock.now, Request(next(h.ids), "m", 1, clock.now,
                                                       clock.now + 8 * MS)))
    h.apply(h.s.tick(clock.now))  # all eight arrived within one controller iteration
    sizes = [d.batch_size for d in of(h.sent, SendInfer)]
    assert sizes and max(sizes) <= 4
    for d in of(h.sent, SendInfer):
        assert d.earliest_ns + d.expected_ns <= clock.now + 8 * MS


def test_infeasible_requests_rejected_immediately_never_sent(clock):
    h = Harness(clock)
    h.request()
    h.load_all()
    rid = h.request(slo_ms=1)  # exec alone takes 2 ms
    assert h.finished[rid].status == RequestStatus.REJECTED
    assert all(rid not in d.request_ids for d in of(h.sent, SendInfer))


def test_windows_are_tight_and_meet_the_deadline(clock):
    config = SchedulerConfig(infer_slack_ns=2 * MS)
    h = Harness(clock, config)
    h.request()
    h.load_all()
    for _ in range(20):
        h.request(slo_ms=50)
        clock.advance(MS // 2)
        h.apply(h.s.tick(clock.now))
    for d in of(h.sent, SendInfer):
        assert d.earliest_ns >= 0 and d.latest_ns >= d.earliest_ns
        assert d.latest_ns - d.earliest_ns <= 2 * MS
        assert d.expected_ns == EXEC[d.batch_size]


def test_planning_stays_within_schedule_ahead(clock):
    config = SchedulerConfig(schedule_ahead_ns=5 * MS)
    h = Harness(clock, config)
    h.request()
    h.load_all()
    h.complete(of(h.sent, SendInfer)[0])
    h.sent.clear()
    t0 = clock.now
    for _ in range(200):  # far more work than 5 ms: only the head is planned now
        h.apply(h.s.request_arrived(t0, Request(next(h.ids), "m", 1, t0, t0 + 1000 * MS)))
    h.apply(h.s.tick(t0))
    planned = of(h.sent, SendInfer)
    assert planned and all(d.earliest_ns < t0 + 5 * MS for d in planned)
    assert sum(d.expected_ns for d in planned) < 5 * MS + 16 * MS
    # advancing the clock lets the scheduler plan more, never more than 5 ms ahead of now
    clock.advance(20 * MS)
    before = len(h.sent)
    h.apply(h.s.tick(clock.now))
    assert len(h.sent) > before
    assert all(d.earliest_ns < clock.now + 5 * MS for d in of(h.sent[before:], SendInfer))


def test_load_priority_follows_demand_and_lru_unload(clock):
    # pages for two models only; three models; max one load in flight
    config = SchedulerConfig(max_loads_in_flight=1)
    h = Harness(clock, config, models=("a", "b", "c"), pages=4)
    h.request("a")
    h.load_all()
    h.complete_infers()
    clock.advance(10 * MS)
    h.request("b")
    h.load_all()
    h.complete_infers()
    clock.advance(10 * MS)
    # "a" is least recently used; "c" needs its pages
    h.sent.clear()
    h.request("c")
    unloads, loads = of(h.sent, SendUnload), of(h.sent, SendLoad)
    assert [u.model for u in unloads] == ["a"]
    assert [l.model for l in loads] == ["c"]
    assert unloads[0].earliest_ns <= loads[0].earliest_ns


def test_higher_demand_model_loads_first(clock):
    config = SchedulerConfig(max_loads_in_flight=1)
    h = Harness(clock, config, models=("x", "y"), pages=10)
    t = clock.now
    # y: many urgent requests arrive in one tick; x: one relaxed request
    decisions = []
    decisions += h.s.request_arrived(t, Request(1, "x", 1, t, t + 500 * MS))
    decisions += h.s.tick(t)
    first = of(decisions, SendLoad)
    assert [l.model for l in first] == ["x"]  # alone, it is loaded at once
    h2 = Harness(Clock(), config, models=("x", "y"), pages=10)
    s = h2.s
    t = h2.clock.now
    # queue both before any tick can load: with the GPU's one load slot busy
    s.gpus[(0, 0)].loads_in_flight = 1
    s.request_arrived(t, Request(1, "x", 1, t, t + 500 * MS))
    for i in range(5):
        s.request_arrived(t, Request(10 + i, "y", 1, t, t + 60 * MS))
    s.gpus[(0, 0)].loads_in_flight = 0
    loads = of(s.tick(t), SendLoad)
    assert loads[0].model == "y"


def test_worker_loss_replans_on_another_worker(clock):
    h = Harness(clock, workers=2)
    rid = h.request()
    h.load_all()
    (infer,) = of(h.sent, SendInfer)
    lost = infer.worker_id
    h.sent.clear()
    h.event(h.s.worker_left(clock.now, lost))
    h.load_all()
    (again,) = of(h.sent, SendInfer)
    assert again.worker_id != lost and again.request_ids == [rid]
    h.complete(again)
    assert h.finished[rid].status == RequestStatus.OK


def test_worker_loss_without_alternative_rejects(clock):
    h = Harness(clock, workers=1)
    rid = h.request()
    h.load_all()
    h.event(h.s.worker_left(clock.now, 0))
    assert h.finished[rid].status == RequestStatus.REJECTED
    assert h.s.models() == {}


@pytest.mark.parametrize("policy", ["clockwork", "clipper", "batch-timeout", "fifo"])
def test_a_worker_that_keeps_coming_back_leaves_nothing_behind(clock, policy):
    """Each return is a new worker id; a controller that runs for weeks beside a restarting
    worker must not keep every id's estimates (thousands of keys with many models)."""
    models = [model(f"m{i}") for i in range(20)]
    h = Harness(clock, models=models, workers=0, pages=64, policy=policy)
    for wid in range(30):
        h.event(h.s.worker_joined(clock.now, worker(wid, models, pages=64)))
        for i in range(3):
            rid = h.request(f"m{i}")
            h.load_all()
            for infer in of(h.sent, SendInfer):
                h.sent.remove(infer)
                h.complete(infer, device_ns=infer.expected_ns + 200_000)
            assert h.finished[rid].status == RequestStatus.OK
        clock.advance(5 * MS)
        h.event(h.s.worker_left(clock.now, wid))
        h.sent.clear()
        sizes = {"estimates": len(h.s.estimates.value), "margins": len(h.s.margin_ns),
                 "answer times": len(h.s._answer_seen_ns), "last exec": len(h.s.last_exec),
                 "gpus": len(h.s.gpus), "workers": len(h.s.workers)}
        if policy != "clockwork":
            sizes["busy"] = len(h.s.busy)
        assert sizes == dict.fromkeys(sizes, 0), (wid, sizes)
        assert h.s.models() == {}


def test_too_late_result_requeues_or_rejects(clock):
    h = Harness(clock)
    rid = h.request(slo_ms=30)
    h.load_all()
    (infer,) = of(h.sent, SendInfer)
    h.sent.clear()
    clock.now = infer.latest_ns + 1
    h.complete(infer, status=Status.TOO_LATE)
    (again,) = of(h.sent, SendInfer)
    assert again.request_ids == [rid] and again.earliest_ns >= clock.now
    # a second failure after the deadline has effectively passed: rejected, not sent
    h.sent.clear()
    clock.now = clock.now + 30 * MS
    h.complete(again, status=Status.TOO_LATE)
    assert h.finished[rid].status == RequestStatus.REJECTED and not of(h.sent, SendInfer)


def test_runtime_error_fails_requests_with_reason(clock):
    h = Harness(clock)
    rid = h.request()
    h.load_all()
    h.complete(of(h.sent, SendInfer)[0], status=Status.RUNTIME_ERROR)
    assert h.finished[rid].status == RequestStatus.ERROR
    assert "RUNTIME_ERROR" in h.finished[rid].message


def test_estimates_are_rolling_p99_of_measurements(clock):
    h = Harness(clock)
    h.request()
    h.load_all()
    (infer,) = of(h.sent, SendInfer)
    h.sent.clear()
    h.complete(infer, device_ns=7 * MS)  # slower than the 2 ms profile said
    h.request()
    (nxt,) = of(h.sent, SendInfer)
    assert nxt.expected_ns == 7 * MS
    key = ("exec", 0, 0, "m", 1)
    for v in range(1, 11):  # ten faster measurements push the 7 ms out of the window
        h.s.estimates.observe(key, v * 100_000)
    assert h.s.estimates.get(key) == 1_000_000


def test_every_request_answered_exactly_once_under_load(clock):
    h = Harness(clock, models=("a", "b"), workers=2)
    rids = []
    for i in range(600):
        rids.append(h.request("a" if i % 3 else "b", slo_ms=25))
        clock.advance(800_000)
        h.step()
    for _ in range(200):
        clock.advance(MS)
        h.step()
    assert set(h.finished) == set(rids)
    ok = [f for f in h.finished.values() if f.status == RequestStatus.OK]
    assert len(ok) > 0.95 * len(rids)


def test_hot_model_is_replicated_when_one_gpu_cannot_keep_up(clock):
    h = Harness(clock, models=("a",), workers=2)
    for _ in range(400):  # 2,000 r/s of one model: one GPU does ~1,000 r/s at batch 16
        h.request("a", slo_ms=50)
        clock.advance(500_000)
        h.step()
    assert all("a" in g.loaded for g in h.s.gpus.values())
    ok = [f for f in h.finished.values() if f.status == RequestStatus.OK]
    assert len(ok) > 0.9 * len(h.finished)


def test_model_too_slow_to_load_within_the_slo_still_gets_loaded(clock):
    # LOAD 8 ms + EXEC 2 ms cannot meet a 5 ms SLO cold: the request is turned away, but the
    # model is loaded anyway so that the next requests can be served warm
    h = Harness(clock)
    first = h.request(slo_ms=5)
    assert h.finished[first].status == RequestStatus.REJECTED
    loads = of(h.sent, SendLoad)
    assert [l.model for l in loads] == ["m"]
    h.load_all()
    clock.advance(MS)
    second = h.request(slo_ms=5)
    (infer,) = of(h.sent, SendInfer)
    h.complete(infer)
    assert h.finished[second].status == RequestStatus.OK


def test_a_gpu_that_had_nothing_feasible_gets_the_next_request_in_the_same_tick(clock):
    """GPU A (slow) cannot meet the urgent head; GPU B takes it. The next request, now at the
    head, fits A: the same tick must give it to A (a tick that re-examined only the GPUs that
    just got work would leave A idle and hand it to B later)."""
    slow = {1: 20 * MS, 2: 25 * MS, 4: 30 * MS, 8: 35 * MS, 16: 40 * MS}
    fast = {1: 2 * MS, 2: 10 * MS, 4: 12 * MS, 8: 14 * MS, 16: 16 * MS}
    s = make_scheduler("clockwork", SchedulerConfig())
    now = clock.now
    s.worker_joined(now, worker(0, [model("m", exec_ns=slow)]))
    s.worker_joined(now, worker(1, [model("m", exec_ns=fast)]))
    a, b = s.gpus[(0, 0)], s.gpus[(1, 0)]
    a.loaded["m"] = b.loaded["m"] = now
    b.exec_free_ns = now + 1 * MS  # A is earlier: it is looked at first
    assert s.request_arrived(now, Request(1, "m", 1, now, now + 10 * MS)) == []
    assert s.request_arrived(now, Request(2, "m", 1, now, now + 100 * MS)) == []
    infers = of(s.tick(now), SendInfer)
    assert {(d.worker_id, tuple(d.request_ids)) for d in infers} == {(1, (1,)), (0, (2,))}


def test_estimates_are_the_rolling_p99():
    from cw.serve.scheduler.base import Estimator

    K = ("exec", 7, "m", 1)  # (kind, worker, ...)
    small = Estimator(10)
    for v in [5, 1, 9, 3]:
        small.observe(K, v)
    assert small.get(K) == 9  # under 100 samples the p99 is the largest
    for v in range(10):
        small.observe(K, 100 + v)
    assert small.get(K) == 109  # only the last 10 count
    large = Estimator(200)
    for v in range(200, 0, -1):
        large.observe(K, v)
    assert large.get(K) == 199  # rank int(0.99 * 200) of the sorted window
    # a worker that leaves takes its keys along, seeded or measured
    large.seed(("exec", 8, "m", 1), 5)
    large.forget_worker(7)
    assert K not in large.value and large.value == {("exec", 8, "m", 1): 5}
    large.forget_worker(8)
    assert len(large) == 0 and not large._samples


@pytest.mark.parametrize("answer_delay_ms, tight_request_served", [(0, True), (10, False)])
def test_a_slow_way_back_widens_the_margin_before_deadlines(clock, answer_delay_ms,
                                                            tight_request_served):
    """Results that reach the controller long after their EXEC ended (a loaded machine) make it
    keep that much time before each deadline: such requests are rejected, not answered late."""
    h = Harness(clock)
    h.request()
    h.load_all()
    (first,) = of(h.sent, SendInfer)
    h.sent.clear()
    clock.now = first.earliest_ns + first.expected_ns + answer_delay_ms * MS
    h.complete(first)
    tight = h.request(slo_ms=8)  # 2 ms EXEC: fits a 2 ms margin, not a 10 ms one
    if tight_request_served:
        assert tight not in h.finished and of(h.sent, SendInfer)
    else:
        assert h.finished[tight].status == RequestStatus.REJECTED
        assert not of(h.sent, SendInfer)
    h.sent.clear()
    clock.advance(50 * MS)
    arrival = clock.now
    h.request(slo_ms=100)
    (infer,) = of(h.sent, SendInfer)
    margin = max(2, answer_delay_ms) * MS
    assert infer.latest_ns + infer.expected_ns <= arrival + 100 * MS - margin


def test_a_margin_wider_than_the_slo_expires_instead_of_rejecting_forever(clock):
    """One slow answer widens the margin past a tight SLO, so every request is rejected and no
    result comes to narrow it again; after `margin_expiry_ns` without results it falls back."""
    h = Harness(clock)
    h.request()
    h.load_all()
    (first,) = of(h.sent, SendInfer)
    h.sent.clear()
    clock.now = first.earliest_ns + first.expected_ns + 40 * MS  # a 40 ms stall on the way back
    h.complete(first)
    for _ in range(3):
        clock.advance(500 * MS)
        rejected = h.request(slo_ms=10)
        assert h.finished[rejected].status == RequestStatus.REJECTED
    clock.advance(h.s.config.margin_expiry_ns)
    h.step()
    served = h.request(slo_ms=10)
    assert served not in h.finished and of(h.sent, SendInfer)


def test_rolling_quantile_is_the_p99_of_the_window_refreshed_in_steps():
    import random

    from cw.serve.scheduler.base import RollingQuantile

    rng = random.Random(1)
    values = [rng.randrange(1000) for _ in range(3000)] + [1] * 1000
    q = RollingQuantile(1000, 0.99, 100)
    for i, v in enumerate(values, start=1):
        q.observe("w", v)
        if i <= 100:
            assert q.value["w"] == max(values[:i])  # first values: the largest so far
        elif i % 100 == 0:
            window = sorted(values[max(0, i - 1000):i])
            assert q.value["w"] == window[int(0.99 * len(window))]
    assert q.value["w"] == 1  # the old tail has left the window


@pytest.mark.parametrize("ns_per_byte", [0.0, 1.0])
def test_a_batch_starts_no_sooner_than_its_inputs_can_reach_the_worker(clock, ns_per_byte):
    """A batch's inputs travel with its INFER: 16 ResNet-50 images (9.6 MB) cannot be at the
    worker 0.2 ms after they are sent, so the window opens once they can be."""
    from cw.serve.protocol import TensorInfo

    image = TensorInfo("x", "float32", [3, 224, 224], 3 * 224 * 224 * 4)
    big = ModelInfo("big", "big", 2 * 16 * 2**20, 2, [1, 2, 4, 8, 16], [image], [], 8 * MS,
                    dict(EXEC), "profile")
    h = Harness(clock, SchedulerConfig(input_ns_per_byte=ns_per_byte), models=(big,))
    h.request("big")  # a cold start: the rest queue up behind its LOAD
    for _ in range(15):
        h.apply(h.s.request_arrived(clock.now, Request(next(h.ids), "big", 1, clock.now,
                                                       clock.now + 100 * MS)))
    h.load_all()
    (infer,) = of(h.sent, SendInfer)
    assert infer.batch_size == 16
    allowance = infer.earliest_ns - clock.now - h.s.config.network_latency_ns
    assert allowance == pytest.approx(16 * image.sample_bytes * ns_per_byte, abs=1)


@pytest.mark.parametrize("shares_memory", [True, False])
def test_inputs_in_shared_memory_are_allowed_the_time_of_a_copy_not_of_the_socket(
        clock, shares_memory):
    """By-reference inputs (cw/serve/shm.py) reach a worker on the clients' host with one
    memory copy; to a worker elsewhere the controller sends their bytes through the socket."""
    from cw.serve.protocol import TensorInfo

    image = TensorInfo("x", "float32", [3, 224, 224], 3 * 224 * 224 * 4)
    big = ModelInfo("big", "big", 2 * 16 * 2**20, 2, [1, 2, 4, 8, 16], [image], [], 8 * MS,
                    dict(EXEC), "profile")
    config = SchedulerConfig(input_ns_per_byte=1.0, shm_input_ns_per_byte=0.25)
    h = Harness(clock, config, models=(big,), shares_memory=shares_memory)
    by_reference = [i % 4 != 0 for i in range(16)]  # 12 from clients on the host, 4 not
    for ref in by_reference:
        h.apply(h.s.request_arrived(clock.now, Request(next(h.ids), "big", 1, clock.now,
                                                       clock.now + 100 * MS, ref)))
    h.apply(h.s.tick(clock.now))
    h.load_all()
    (infer,) = of(h.sent, SendInfer)
    assert infer.batch_size == 16
    allowance = infer.earliest_ns - clock.now - config.network_latency_ns
    rate = 0.25 if shares_memory else 1.0
    expected = image.sample_bytes * (12 * rate + 4 * 1.0)
    assert allowance == pytest.approx(expected, abs=1)


def _warm(clock):
    """A harness whose model is loaded, one request served, nothing in flight."""
    h = Harness(clock)
    h.request()
    h.load_all()
    h.complete_infers()
    h.sent.clear()
    return h


def _infer_of(h, rid):
    (d,) = [d for d in of(h.sent, SendInfer) if rid in d.request_ids]
    return d


def test_a_result_still_missing_before_the_deadline_is_answered_timed_out_on_time(clock):
    """The answer guard: a client hears by its deadline even when the result is stuck (a worker
    stalled, a slow way back). The late result is then dropped: one answer per request."""
    h = _warm(clock)
    arrival = clock.now
    early = h.request(slo_ms=40)
    clock.advance(10 * MS)
    late = h.request(slo_ms=60)
    first, second = _infer_of(h, early), _infer_of(h, late)
    assert first is not second
    guard = h.s.config.answer_guard_ns
    # nothing comes back; the scheduler asks to be woken for the guard, not later
    assert h.s.next_wakeup_ns(clock.now) <= arrival + 40 * MS - guard
    clock.now = arrival + 40 * MS - guard - 1
    h.apply(h.s.tick(clock.now))
    assert early not in h.finished  # not yet: the result may still come in time
    clock.now += 1
    h.apply(h.s.tick(clock.now))
    assert h.finished[early].status == RequestStatus.TIMED_OUT
    assert clock.now < arrival + 40 * MS  # answered before its deadline
    assert late not in h.finished  # its own INFER is not overdue
    # the first result comes after all: dropped, never a second (late) answer
    h.sent.remove(first)
    h.complete(first)
    assert h.finished[early].status == RequestStatus.TIMED_OUT
    # the second returns in time: answered OK
    h.sent.remove(second)
    h.complete(second)
    assert h.finished[late].status == RequestStatus.OK


def test_urgent_runs_the_answer_guard_and_plans_nothing(clock):
    """Between parts of a burst the controller asks only what cannot wait: an overdue result
    is answered TIMED_OUT, while requests taken in meanwhile wait for the tick to be planned
    (planned every few requests, batches came out smaller)."""
    h = _warm(clock)
    arrival = clock.now
    stuck = h.request(slo_ms=40)
    infer = _infer_of(h, stuck)
    clock.now = arrival + 40 * MS - h.s.config.answer_guard_ns
    queued = []
    for _ in range(3):  # taken in during the burst: no tick yet
        rid = next(h.ids)
        h.apply(h.s.request_arrived(clock.now, Request(rid, "m", 1, clock.now,
                                                       clock.now + 100 * MS)))
        queued.append(rid)
    urgent = h.s.urgent(clock.now)
    assert [(d.request_id, d.status) for d in urgent] == [(stuck, RequestStatus.TIMED_OUT)]
    assert not of(urgent, SendInfer)
    h.apply(urgent)
    (planned,) = of(h.s.tick(clock.now), SendInfer)  # the tick plans them, as one batch
    assert sorted(planned.request_ids) == queued and infer.request_ids == [stuck]


def test_part_of_a_batch_times_out_and_the_rest_is_served(clock):
    h = _warm(clock)
    # the GPU is planned busy for 20 ms: two requests with different deadlines wait, go together
    h.s.gpus[(0, 0)].exec_free_ns = clock.now + 20 * MS
    arrival = clock.now
    tight, loose = h.request(slo_ms=30), h.request(slo_ms=80)
    assert not of(h.sent, SendInfer)
    clock.now = arrival + 20 * MS - h.s.config.schedule_ahead_ns + 1
    h.apply(h.s.tick(clock.now))
    (batch,) = of(h.sent, SendInfer)
    assert sorted(batch.request_ids) == sorted([tight, loose])
    clock.now = arrival + 30 * MS - h.s.config.answer_guard_ns
    h.apply(h.s.tick(clock.now))
    assert h.finished[tight].status == RequestStatus.TIMED_OUT and loose not in h.finished
    h.sent.remove(batch)
    h.complete(batch)
    assert h.finished[loose].status == RequestStatus.OK


@pytest.mark.parametrize("queued", [16, 1])
def test_a_batch_is_planned_when_its_inputs_must_leave(clock, queued):
    """16 images through the socket take ~9.8 ms to reach the worker, more than the 5 ms
    Clockwork plans ahead: the next batch is planned when its inputs must leave, so that it
    starts the moment the GPU frees, not ~5 ms later. The stretch is per batch: one image
    arrives quickly, so a lone request waits about schedule_ahead, as in Clockwork."""
    from cw.serve.protocol import TensorInfo

    image = TensorInfo("x", "float32", [3, 224, 224], 3 * 224 * 224 * 4)
    big = ModelInfo("big", "big", 2 * 16 * 2**20, 2, [1, 2, 4, 8, 16], [image], [], 8 * MS,
                    dict(EXEC), "profile")
    config = SchedulerConfig(input_ns_per_byte=1.0)
    h = Harness(clock, config, models=(big,))

    def arrive(n):
        for _ in range(n):
            h.apply(h.s.request_arrived(clock.now, Request(next(h.ids), "big", 1, clock.now,
                                                           clock.now + 500 * MS)))

    arrive(16)
    h.apply(h.s.tick(clock.now))
    h.load_all()
    (first,) = of(h.sent, SendInfer)
    gpu_free_ns = first.earliest_ns + first.expected_ns
    arrive(queued)
    h.apply(h.s.tick(clock.now))
    assert len(of(h.sent, SendInfer)) == 1  # GPU busy beyond what the inputs need: not yet
    lead_ns = config.network_latency_ns + queued * image.sample_bytes
    due_ns = gpu_free_ns - config.schedule_ahead_ns - lead_ns + 1
    assert h.s.next_wakeup_ns(clock.now) == due_ns
    clock.now = due_ns - 1
    h.apply(h.s.tick(clock.now))
    assert len(of(h.sent, SendInfer)) == 1
    clock.now = due_ns
    h.apply(h.s.tick(clock.now))
    second = of(h.sent, SendInfer)[1]
    assert second.batch_size == queued
    assert second.earliest_ns == gpu_free_ns  # back to back: no gap of our making
    assert second.earliest_ns >= clock.now + lead_ns  # and no sooner than its inputs arrive


@pytest.mark.parametrize("seed", range(5))
def test_a_queue_heaps_head_is_its_k_smallest_in_order(seed):
    import heapq
    import random

    from cw.serve.scheduler.clockwork import _heap_head

    rng = random.Random(seed)
    heap: list = []
    for i in range(rng.randrange(1, 400)):
        heapq.heappush(heap, (rng.randrange(50), i))  # repeated deadlines, ties broken by id
        if rng.random() < 0.3:
            heapq.heappop(heap)
    for k in (1, 2, 5, 16, len(heap), len(heap) + 3):
        assert _heap_head(heap, k) == sorted(heap)[:k]


@pytest.mark.parametrize("adapt", [1, 0])
def test_a_late_worker_gets_wider_windows_and_a_punctual_one_tight_ones_again(clock, adapt):
    config = SchedulerConfig(infer_slack_ns=3 * MS, adapt_slack=adapt)
    h = Harness(clock, config)
    rid = h.request()
    h.load_all()
    (infer,) = of(h.sent, SendInfer)
    assert infer.latest_ns - infer.earliest_ns == 3 * MS
    h.sent.clear()
    # the worker got to it 10 ms after its earliest: refused, and the request planned again
    h.complete(infer, status=Status.TOO_LATE, late_ns=10 * MS)
    (again,) = of(h.sent, SendInfer)
    assert again.request_ids == [rid]
    # twice the lateness seen (with room to the deadline), or the fixed slack
    assert again.latest_ns - again.earliest_ns == (20 * MS if adapt else 3 * MS)
    h.sent.clear()
    h.complete(again, late_ns=15 * MS)  # started late, inside its window: served
    assert h.finished[rid].status == RequestStatus.OK
    # the window stays wide while a late start is among the worker's last 100 INFERs...
    for i in range(100):
        h.request()
        (d,) = of(h.sent, SendInfer)
        h.sent.clear()
        assert d.latest_ns - d.earliest_ns == (30 * MS if adapt else 3 * MS), i
        h.complete(d)  # on time
    # ... and is tight again once none is
    h.request()
    (d,) = of(h.sent, SendInfer)
    assert d.latest_ns - d.earliest_ns == 3 * MS


def test_recent_max_is_the_largest_of_the_window():
    import random

    from cw.serve.scheduler.base import RecentMax

    rng = random.Random(3)
    values = [rng.randrange(50) for _ in range(2000)] + [100] + [0] * 30
    top = RecentMax(10)
    for i, v in enumerate(values, start=1):
        top.observe("w", v)
        assert top.value["w"] == max(values[max(0, i - 10):i]), i
