"""`--key`: a controller started with a key file takes only workers and clients that hold the
same key, over encrypted connections (ZeroMQ CURVE); whoever lacks it is told why at once
rather than left waiting."""

import json
import logging
import os
import stat
import time

import pytest

from cw.client import Client
from cw.errors import CwError, UsageError
from cw.serve.controller import ControllerConfig
from cw.serve.launch import ControllerThread
from cw.serve.keys import read_key, write_key
from tests.conftest import random_input
from tests.integration.test_serving import WorkerThread, models_dir  # noqa: F401 (fixture)


def _controller(tmp_path, key_file=None):
    config = ControllerConfig(workers_listen="tcp://127.0.0.1:*",
                              clients_listen="tcp://127.0.0.1:*", key_file=key_file)
    return ControllerThread(config).start()


def test_keygen_writes_a_private_key_once(cli, tmp_path):
    path = tmp_path / "cluster.key"
    r = cli("serve", "keygen", path)
    assert r.code == 0, r.err
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    key = read_key(path)
    assert len(key.public) == len(key.secret) == 40 and key.secret.decode() not in repr(key)
    before = path.read_bytes()
    r = cli("serve", "keygen", path)
    assert r.code == 2 and "exists" in r.err and path.read_bytes() == before
    # a damaged file, a file of two halves that do not belong together, no file
    (tmp_path / "junk.key").write_text("hello")
    other = write_key(tmp_path / "other.key")
    (tmp_path / "mixed.key").write_text(before.decode().replace(
        key.secret.decode(), other.secret.decode()))
    for name, words in (("junk.key", "is not a cw key file"),
                        ("mixed.key", "do not belong together"),
                        ("none.key", "cannot read key file")):
        with pytest.raises(UsageError, match=words):
            read_key(tmp_path / name)
        r = cli("serve", "controller", "--key", tmp_path / name)
        assert r.code == 2 and words in r.err and "\n" not in r.err.strip(), r.err


def test_only_holders_of_the_key_get_in(cli, models_dir, tmp_path, caplog,  # noqa: F811
                                        monkeypatch):
    key, other = tmp_path / "a.key", tmp_path / "b.key"
    write_key(key)
    write_key(other)
    ctl = _controller(tmp_path, key)
    workers = [WorkerThread(ctl.workers_address, models_dir, "simulated", "keyed",
                            key_file=key)]
    try:
        ctl.wait_for_workers(1, timeout_s=20)
        with Client(ctl.clients_address, key_file=key, answer_lane=True) as client:
            y = client.infer("mlp", random_input((2, 64)), slo_ms=100)
            assert y.shape == (2, 10)
            # answers stay encrypted: no lane past ZeroMQ (it would not be)
            assert not client.answers_on_lane and ctl.clients_ep.sent_on_peer_lanes == 0
        # no key, or another: refused at the handshake, and said so within seconds
        for key_file, words in ((None, "requires a key"), (other, "does not hold this key")):
            began = time.monotonic()
            with Client(ctl.clients_address, key_file=key_file, timeout_s=30) as client:
                with pytest.raises(CwError, match=words):
                    client.infer("mlp", random_input((1, 64)), slo_ms=100)
            assert time.monotonic() - began < 5
        with caplog.at_level(logging.WARNING, logger="cw.worker"):
            workers += [WorkerThread(ctl.workers_address, models_dir, "simulated", "keyless"),
                        WorkerThread(ctl.workers_address, models_dir, "simulated", "other",
                                     key_file=other)]
            deadline = time.monotonic() + 10
            while len(caplog.records) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
        said = sorted(r.getMessage() for r in caplog.records)
        assert len(said) == 2 and "it does not hold this key" in said[0] and \
            "it requires a key" in said[1], said
        assert [w.name for w in ctl.controller.workers.values()] == ["keyed"]
        # a replay against it gives the key the same way (the CW_KEY environment variable)
        monkeypatch.setenv("CW_KEY", str(key))
        r = cli("replay", "--controller", ctl.clients_address, "--workload", "poisson",
                "--rate", "50", "--duration", "1s", "--out", tmp_path / "replay", "--json")
        assert r.code == 0, r.err
        summary = json.loads(r.out)
        assert summary["requests"] > 20 and summary["completed_in_slo"] == summary["requests"]
    finally:
        for w in workers:
            w.close()  # (the keyless one's sends wait in its outbox: it stops all the same)
        ctl.close()


def test_a_client_with_a_key_is_told_the_controller_has_none(tmp_path):
    path = tmp_path / "a.key"
    write_key(path)
    ctl = _controller(tmp_path)
    try:
        with Client(ctl.clients_address, key_file=path, timeout_s=30) as client:
            with pytest.raises(CwError, match="expects no key"):
                client.models()
    finally:
        ctl.close()


def test_cw_serve_gives_its_key_to_its_workers(models_dir, tmp_path):  # noqa: F811
    from cw.serve.local import LocalServeConfig, LocalServing

    key = tmp_path / "a.key"
    write_key(key)
    config = LocalServeConfig(models_dir=models_dir, runtime="simulated", controller=(
        ControllerConfig(workers_listen="tcp://127.0.0.1:*", clients_listen="tcp://127.0.0.1:*",
                         key_file=key)))
    with LocalServing(config) as serving:  # (the workers joined: they hold the key)
        with Client(serving.clients_address, key_file=key) as client:
            assert client.infer("mlp", random_input((1, 64)), slo_ms=100).shape == (1, 10)


def test_a_keyed_dealers_own_senders_hold_its_key(tmp_path):
    """A worker's results leave on connections of their own (`sender()`): with a key they
    must present it too, or a worker on another host would lose every result."""
    from cw.serve import protocol as p
    from cw.serve.transport import ZmqDealer, ZmqRouter

    key = write_key(tmp_path / "a.key")
    router = ZmqRouter("tcp://127.0.0.1:*", p.Codec(p.FromWorker), p.Codec(p.ToWorker), key=key)
    dealer = ZmqDealer(router.address, p.Codec(p.ToWorker), p.Codec(p.FromWorker), key=key)
    sender = dealer.sender()
    try:
        sender.send(p.Leaving("from the sender"))
        got, deadline = [], time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            got = router.poll(50)
        assert [(peer, msg) for peer, msg in got] == [(sender.routing_id,
                                                       p.Leaving("from the sender"))]
    finally:
        sender.close()
        dealer.close()
        router.close()
