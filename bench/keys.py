"""What `--key` (ZeroMQ CURVE encryption) costs a request: serial round trips through a local
`cw serve` (simulated worker, the demo `mlp` or any bundle folder), without and with a key,
rounds alternating. Prints the median and p99 round trip of each, and their ratio.

    python bench/keys.py --models DIR [--model mlp] [--inputs socket|shm] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from cw.client import Client
from cw.serve.controller import ControllerConfig
from cw.serve.local import LocalServeConfig, LocalServing
from cw.serve.keys import write_key


def round_trips(models: Path, key_file: Path | None, model: str, requests: int,
                shared_memory: bool) -> list[float]:
    config = LocalServeConfig(models_dir=models, runtime="simulated", controller=ControllerConfig(
        workers_listen="tcp://127.0.0.1:*", clients_listen="tcp://127.0.0.1:*",
        key_file=key_file))
    with LocalServing(config) as serving:
        with Client(serving.clients_address, key_file=key_file,
                    shared_memory=shared_memory) as client:
            info = client.models([model])[0]
            x = np.random.default_rng(0).standard_normal(
                (1, *info.inputs[0].sample_shape)).astype(info.inputs[0].dtype)
            for _ in range(100):  # warm-up
                client.infer(model, x)
            took = []
            for _ in range(requests):
                began = time.perf_counter()
                client.infer(model, x)
                took.append(time.perf_counter() - began)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True)
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--inputs", choices=("socket", "shm"), default="socket",
                        help="inputs through the sockets (encrypted with a key), or through "
                             "shared memory (only references travel)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / "bench.key"
        write_key(key)
        runs = {"no key": [], "key": []}
        for _ in range(args.rounds):
            for name, key_file in (("no key", None), ("key", key)):
                runs[name] += round_trips(args.models, key_file, args.model, args.requests,
                                          args.inputs == "shm")
    p50 = {name: statistics.median(t) * 1e3 for name, t in runs.items()}
    p99 = {name: float(np.percentile(t, 99)) * 1e3 for name, t in runs.items()}
    for name in runs:
        print(f"{name:7s} round trip p50 {p50[name]:.3f} ms  p99 {p99[name]:.3f} ms")
    print(f"key / no key: p50 ×{p50['key'] / p50['no key']:.3f}, "
          f"p99 ×{p99['key'] / p99['no key']:.3f}; "
          f"+{(p50['key'] - p50['no key']) * 1e3:.0f} µs at p50")


if __name__ == "__main__":
    main()
