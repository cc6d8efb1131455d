"""Where one request's time goes on an idle `cw serve --runtime cpu`, leg by leg.

    python bench/idle_latency.py [--model mlp] [--requests 200] [--gaps-ms 50,1] [--rounds 2]

Starts `cw serve --runtime cpu --workers 1 --log-dir` (the demo models unless `--models DIR`),
sends requests one at a time from this process (`cw.client.Client.infer`), each `--gaps-ms`
after the previous answer, and reads the controller's telemetry: the client's send → INFER sent
to the worker, INFER sent → its EXEC started (the window opens 200 µs after the send), EXEC,
EXEC end → the worker sent its result, and the result's way to the controller. The gaps run
side by side, round by round: a long gap leaves the machine idle between requests, and every
hop then waits for a sleeping thread (on a virtual machine, a halted virtual CPU) to wake.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

LEGS = ("client send → INFER sent", "INFER sent → EXEC start", "EXEC", "EXEC end → result sent",
        "result sent → controller", "latency (controller's count)")


def legs(log_dir: Path, skip: int) -> dict[str, list[int]]:
    actions = {row["action_id"]: row for row in csv.DictReader(open(log_dir / "actions.csv"))}
    out: dict[str, list[int]] = {leg: [] for leg in LEGS}
    rows = list(csv.DictReader(open(log_dir / "requests.csv")))[skip:]  # the first: cold
    for r in rows:
        a = actions.get(r["action_id"])
        if r["status"] != "OK" or a is None:
            continue
        t = {k: int(a[k]) for k in ("sent_ns", "start_ns", "end_ns", "measured_ns",
                                    "result_sent_ns", "result_ns")}
        for leg, ns in zip(LEGS, (t["sent_ns"] - int(r["arrival_ns"]),
                                  t["start_ns"] - t["sent_ns"], t["measured_ns"],
                                  t["result_sent_ns"] - t["end_ns"],
                                  t["result_ns"] - t["result_sent_ns"], int(r["latency_ns"]))):
            out[leg].append(ns)
    return out


def one_run(args, gap_ms: float, port: int, label: str) -> dict[str, list[int]]:
    from cw.client import Client, RequestFailed

    failed: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        log_dir = Path(tmp) / "logs"
        cmd = [sys.executable, "-m", "cw", "serve", "--runtime", "cpu", "--workers", "1",
               "--log-dir", str(log_dir), "--clients-listen", f"tcp://127.0.0.1:{port}",
               "--workers-listen", f"tcp://127.0.0.1:{port + 1}"]
        if args.models:
            cmd += ["--models", args.models]
        errors = open(Path(tmp) / "serve.err", "w+")  # (a pipe nobody reads could fill)
        server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errors)
        try:
            client = Client(f"tcp://127.0.0.1:{port}")
            deadline = time.monotonic() + 120
            while args.model not in {m.model_id for m in client.models()}:
                if time.monotonic() > deadline or server.poll() is not None:
                    errors.seek(0)
                    raise SystemExit(f"cw serve did not serve {args.model}: "
                                     f"{errors.read()[-2000:]}")
                time.sleep(0.5)
            (spec,) = client.models([args.model])
            rng = np.random.default_rng(0)
            for i in range(args.requests):
                x = [rng.standard_normal((1, *t.sample_shape)).astype(t.dtype)
                     for t in spec.inputs]
                try:
                    client.infer(args.model, x[0] if len(x) == 1 else x, slo_ms=100)
                except RequestFailed as e:
                    failed.append(f"request {i}: {e}")
                time.sleep(gap_ms / 1e3)
            client.close()
        finally:
            server.terminate()
            server.wait(timeout=60)
            errors.close()
        for line in failed:
            print(f"  (gap {gap_ms:g} ms) {line}", file=sys.stderr)
        if args.keep_logs:
            shutil.copytree(log_dir, Path(args.keep_logs) / label, dirs_exist_ok=True)
            shutil.copy(Path(tmp) / "serve.err", Path(args.keep_logs) / label)
        return legs(log_dir, skip=5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=None, help="a models directory (default: the demo set)")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--gaps-ms", default="50,1", help="idle time between requests, each run")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--port", type=int, default=7301)
    ap.add_argument("--keep-logs", default=None, metavar="DIR", help="copy the telemetry here")
    args = ap.parse_args()
    gaps = [float(g) for g in args.gaps_ms.split(",")]
    print(f"{args.requests} requests to {args.model} a run, one at a time; µs, p50 / p90 / max; "
          f"{os.cpu_count()} cores")
    print(f"| round | gap ms | {' | '.join(LEGS)} |")
    print("|---|---|" + "---|" * len(LEGS))
    for r in range(args.rounds):
        for gap_ms in gaps:
            got = one_run(args, gap_ms, args.port, f"round{r + 1}-gap{gap_ms:g}ms")
            cells = []
            for leg in LEGS:
                v = np.array(got[leg]) / 1e3
                cells.append(f"{np.percentile(v, 50):.0f} / {np.percentile(v, 90):.0f} / "
                             f"{v.max():.0f}" if v.size else "-")
            print(f"| {r + 1} | {gap_ms:g} | {' | '.join(cells)} |",
                  flush=True)


if __name__ == "__main__":
    main()
