"""`/healthz` of the metrics endpoint: what a load balancer asks, answered from the gauges the
controller's loop updates; a loop that stopped updating them is unhealthy."""

from cw.serve.metrics import HEALTH_STALE_S, Metrics


def test_health_follows_the_loop_and_the_workers():
    m = Metrics("clockwork")
    assert m.health(100.0) == (False, "the controller has not started serving")
    m.gauges(0, {}, {}, now_s=100.0, workers=0)
    assert m.health(100.1) == (False, "no worker has joined")
    m.gauges(0, {"1/0": 0.1, "2/0": 0.0}, {}, now_s=100.2, workers=2)
    assert m.health(100.3) == (True, "ok: 2 workers, 2 GPUs")
    # the loop stuck: no update for longer than HEALTH_STALE_S
    assert m.health(100.2 + HEALTH_STALE_S + 0.5) == (
        False, f"the controller's loop has not run for {HEALTH_STALE_S + 0.5:.1f} s")
