"""docs/api.md's example runs as written: the library API behind the commands."""

import collections
import os
import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import random_input

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_the_api_page_example_runs(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    assert len(blocks) == 1
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], str(DOCS), "exec"), {"__name__": "api_example"})
    printed = capsys.readouterr().out.split()
    assert float(printed[0]) > 0.9 and printed[1] == "True"
    assert (tmp_path / "bundles" / "mlp" / "profile.json").exists()


def test_local_serving_checks_first_and_stops_its_workers(cpu_bundle, tmp_path):
    import shutil

    from cw.client import Client
    from cw.errors import CwError
    from cw.serve.controller import ControllerConfig
    from cw.serve.local import LocalServeConfig, LocalServing

    models = tmp_path / "models"
    shutil.copytree(cpu_bundle("mlp", (1, 2)), models / "mlp")
    anywhere = ControllerConfig(workers_listen="tcp://127.0.0.1:*",
                                clients_listen="tcp://127.0.0.1:*")
    with pytest.raises(CwError, match="compiled for cpu, not cuda"):
        LocalServing(LocalServeConfig(models_dir=models, controller=anywhere,
                                      runtime="cuda")).prepare()
    with pytest.raises(CwError, match="unknown runtime 'gpu'"):
        LocalServeConfig(runtime="gpu")
    config = LocalServeConfig(models_dir=models, controller=anywhere, runtime="simulated",
                              workers=2)
    with LocalServing(config) as serving:
        assert list(serving.served()) == ["mlp"]
        with Client(serving.clients_address) as client:
            y = client.infer("mlp", random_input((2, 64)), slo_ms=100)
        assert y.shape == (2, 10)
        pids = [p.pid for p in serving.workers.procs]
        assert serving.ended() == {}
    for pid in pids:  # stopped and reaped
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert np.isfinite(y).all()


def test_local_serving_with_a_small_page_cache_loads_and_unloads_as_demand_moves(
        cpu_bundle, tmp_path):
    import csv
    import shutil

    from cw.bundle import read_manifest
    from cw.client import Client
    from cw.errors import CwError
    from cw.serve.controller import ControllerConfig
    from cw.serve.local import LocalServeConfig, LocalServing

    models = tmp_path / "models"
    shutil.copytree(cpu_bundle("mlp", (1, 2)), models / "mlp")
    page = read_manifest(models / "mlp").weights.page_size

    def config(page_cache_bytes, log_dir=None):
        return LocalServeConfig(
            models_dir=models, runtime="simulated", copies=6, page_cache_bytes=page_cache_bytes,
            controller=ControllerConfig(workers_listen="tcp://127.0.0.1:*",
                                        clients_listen="tcp://127.0.0.1:*", log_dir=log_dir))

    with pytest.raises(CwError, match="must be positive"):
        config(0)
    with pytest.raises(CwError, match=r"holds 0 page\(s\).*give --page-cache 16MiB or more"):
        with LocalServing(config(page // 2)):
            pass
    # six instances, room for two: each request in turn asks for a model not loaded
    with LocalServing(config(2 * page, tmp_path / "logs")) as serving:
        served = sorted(serving.served())
        assert len(served) == 6
        with Client(serving.clients_address) as client:
            for _ in range(3):
                for model in served:
                    assert client.infer(model, random_input((1, 64)), slo_ms=1000).shape == (1, 10)
    with open(tmp_path / "logs" / "actions.csv", newline="") as f:
        actions = collections.Counter((r["kind"], r["status"]) for r in csv.DictReader(f))
    assert actions[("load", "OK")] >= 18 and actions[("unload", "OK")] >= 16, actions
