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


def test_the_metrics_listen_where_the_clients_do():
    from cw.serve.launch import metrics_host

    assert metrics_host("tcp://127.0.0.1:7001") == "127.0.0.1"
    assert metrics_host("tcp://localhost:7001") == metrics_host("tcp://[::1]:7001") == \
        "127.0.0.1"
    assert metrics_host("tcp://*:7001") == metrics_host("tcp://0.0.0.0:7001") == "0.0.0.0"
    assert metrics_host("tcp://10.1.2.3:7001") == "10.1.2.3"
    assert metrics_host("ipc:///tmp/cw-clients") == "127.0.0.1"
