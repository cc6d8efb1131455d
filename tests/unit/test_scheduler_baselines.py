"""Baseline policies on the fake clock."""

from cw.serve.protocol import RequestStatus
from cw.serve.scheduler import make_scheduler
from cw.serve.scheduler.base import Request, SchedulerConfig, SendInfer, SendLoad
from tests.unit.test_scheduler_clockwork import MS, Clock, Harness, of


def harness(name, clock):
    h = Harness(clock)
    h.s = make_scheduler(name, SchedulerConfig())
    from tests.unit.test_scheduler_clockwork import model, worker
    h.event(h.s.worker_joined(clock.now, worker(0, [model("m")])))
    return h


def drain(h, clock, steps=200):
    for _ in range(steps):
        clock.advance(MS)
        h.apply(h.s.tick(clock.now))
        for d in list(h.sent):
            if isinstance(d, SendLoad) or d.earliest_ns + d.expected_ns <= clock.now:
                h.sent.remove(d)
                h.complete(d)


def test_fifo_runs_one_at_a_time_and_never_rejects():
    clock = Clock()
    h = harness("fifo", clock)
    rids = [h.request(slo_ms=1) for _ in range(5)]  # hopeless SLOs: served anyway, late
    drain(h, clock)
    assert all(h.finished[r].status == RequestStatus.OK for r in rids)


def warm_with_requests(spec, n):
    """A policy whose model is loaded (its cold start done), with `n` requests just arrived:
    (harness, clock, the time they arrived)."""
    clock = Clock()
    h = harness(spec, clock)
    h.request()
    drain(h, clock, 20)
    h.sent.clear()
    t0 = clock.now
    for _ in range(n):
        h.apply(h.s.request_arrived(t0, Request(next(h.ids), "m", 1, t0, t0 + 100 * MS)))
    return h, clock, t0


def test_batch_timeout_waits_for_a_full_batch_or_the_delay():
    h, clock, t0 = warm_with_requests("batch-timeout", 3)
    h.apply(h.s.tick(t0))
    assert not of(h.sent, SendInfer)  # neither full nor old enough
    clock.now = t0 + 2 * MS
    h.apply(h.s.tick(clock.now))
    (batch,) = of(h.sent, SendInfer)
    assert len(batch.request_ids) == 3 and batch.batch_size == 4


def test_clipper_grows_its_batch_additively():
    clock = Clock()
    h = harness("clipper", clock)
    sizes = []
    apply = h.apply

    def recording(decisions):
        sizes.extend(len(d.request_ids) for d in of(decisions, SendInfer))
        return apply(decisions)

    h.apply = recording
    for _ in range(30):
        for _ in range(16):
            h.request()
        drain(h, clock, 30)
    assert sizes[0] == 1 and max(sizes) >= 8
    assert sizes.index(max(sizes)) > 5  # grown step by step, not at once
    assert h.s.max_batch["m"] > 8


def test_baselines_answer_every_request():
    for name in ("fifo", "batch-timeout", "clipper"):
        clock = Clock()
        h = harness(name, clock)
        rids = [h.request(slo_ms=50) for _ in range(40)]
        drain(h, clock, 400)
        assert set(rids) <= set(h.finished), name


def test_baselines_reject_what_no_gpu_can_hold_instead_of_queueing_it_forever():
    from tests.unit.test_scheduler_clockwork import model, worker

    for name in ("fifo", "batch-timeout", "clipper"):
        clock = Clock()
        h = Harness(clock)
        h.s = make_scheduler(name, SchedulerConfig())
        # a 30-page model on a 10-page GPU; a 2-page one on a 40-page GPU of another worker
        h.event(h.s.worker_joined(clock.now, worker(0, [model("big", pages=30), model("m")])))
        h.event(h.s.worker_joined(clock.now, worker(1, [model("m")], pages=40)))
        big = h.request(model="big")
        assert h.finished[big].status == RequestStatus.REJECTED, name
        assert "large enough" in h.finished[big].message
        # queued work whose only able workers leave is answered, not kept
        h.event(h.s.worker_joined(clock.now, worker(2, [model("huge", pages=30)], pages=40)))
        waiting = h.request(model="huge")
        assert waiting not in h.finished
        h.apply(h.s.worker_left(clock.now, 2))
        clock.advance(2 * MS)
        h.apply(h.s.tick(clock.now))
        assert h.finished[waiting].status == RequestStatus.REJECTED, name
