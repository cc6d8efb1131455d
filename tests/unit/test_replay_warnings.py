"""The replay's warning that its own client process was the bottleneck."""

from rich.console import Console

from cw.cli.app import Consoles
from cw.cli.replay_cmds import CLIENT_BUSY_CORES, _warn_busy_client


def warned(monkeypatch, summaries) -> str:
    record = Console(record=True, width=400)
    monkeypatch.setattr(Consoles, "out", record)
    _warn_busy_client(summaries)
    return record.export_text()


def summary(python, workload="closed", models=15, name="fig5"):
    return {"name": name, "workload": workload, "models": models,
            "client_cpu": {"python": python, "zmq": [0.1] * len(python)}}


def test_a_client_at_the_gils_limit_is_warned_of_with_what_to_do(monkeypatch):
    assert warned(monkeypatch, [summary([CLIENT_BUSY_CORES - 0.01])]) == ""
    text = warned(monkeypatch, [summary([0.97])])
    assert "kept 0.97 of a core busy in Python" in text and "--senders 4 spreads" in text
    # several senders, one of them saturated: four times as many, at most one per model
    text = warned(monkeypatch, [summary([0.3, 0.92], models=5)])
    assert "kept 0.92 of a core" in text and "--senders 5 spreads" in text
    # an open loop has no --senders; several runs say which one
    text = warned(monkeypatch, [summary([0.2], name="a"), summary([0.9], "poisson", name="b")])
    assert text.count("warning:") == 1 and "client (b) kept 0.90" in text
    assert "--senders" not in text and "lower rate" in text
    # summaries from before client_cpu was kept, or simulated ones: nothing to say
    assert warned(monkeypatch, [{"name": "old"}]) == ""
