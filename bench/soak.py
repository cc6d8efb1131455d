"""A long-running `cw serve`: does anything grow with the requests and clients it has served?

    python bench/soak.py [--models DIR] [--workers 2] [--copies 20] [--rate 1500]
        [--round-s 60] [--rounds 8] [--page-cache 160MiB] [--log-dir] [--scrape-s 5]

Starts `cw serve --runtime simulated` (the real controller and ZeroMQ path, simulated worker
processes) and drives it round after round with `cw replay --controller ... --workload poisson`:
a fresh client process each round, as users' clients come and go. After each round it reads,
for the controller's process and for each worker: resident memory (RSS), open file descriptors
and threads; and the shared-memory segments left in /dev/shm. It prints a row a round and, from
round 2 on (round 1 fills caches and allocator pools), the growth per million requests.
`--page-cache`: room for fewer models than are served, so that LOADs and UNLOADs go on all the
time; `--log-dir`: the controller writes its telemetry (to a temporary folder); `--scrape-s`:
Prometheus's /metrics read that often, as a monitoring system would.

The workers are simulated (durations from the bundles' estimates): what this measures is the
controller's and the workers' own bookkeeping, not a device's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil


def shm_entries() -> int:
    try:
        return len(os.listdir("/dev/shm"))
    except OSError:
        return -1


def sample(proc: psutil.Process) -> dict:
    with proc.oneshot():
        return {"rss_mb": proc.memory_info().rss / 2**20, "fds": proc.num_fds(),
                "threads": proc.num_threads()}


def actions(metrics_text: str) -> str:
    """LOADs and UNLOADs so far, from a /metrics page."""
    counts = {}
    for line in metrics_text.splitlines():
        if line.startswith("cw_actions_total{") and 'status="OK"' in line:
            kind = line.split('kind="', 1)[1].split('"', 1)[0]
            counts[kind] = int(float(line.rsplit(" ", 1)[1]))
    return f"{counts.get('load', 0):,} loads, {counts.get('unload', 0):,} unloads"


def workers_of(server: psutil.Process) -> list[psutil.Process]:
    return [p for p in server.children(recursive=True)
            if "worker" in " ".join(p.cmdline())]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=None, help="a models directory (default: the demo set)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--copies", type=int, default=20, help="instances of each model per worker")
    ap.add_argument("--rate", type=float, default=1500.0, help="requests/s each round")
    ap.add_argument("--round-s", type=float, default=60.0)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--port", type=int, default=7401)
    ap.add_argument("--page-cache", default=None, help="each worker's weights cache, e.g. 160MiB")
    ap.add_argument("--log-dir", action="store_true", help="the controller writes telemetry")
    ap.add_argument("--scrape-s", type=float, default=0.0, help="read /metrics this often")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        clients = f"tcp://127.0.0.1:{args.port}"
        cmd = [sys.executable, "-m", "cw", "serve", "--runtime", "simulated",
               "--workers", str(args.workers), "--copies", str(args.copies),
               "--clients-listen", clients,
               "--workers-listen", f"tcp://127.0.0.1:{args.port + 1}"]
        if args.models:
            cmd += ["--models", args.models]
        if args.page_cache:
            cmd += ["--page-cache", args.page_cache]
        if args.log_dir:
            cmd += ["--log-dir", str(Path(tmp) / "logs")]
        if args.scrape_s:
            cmd += ["--metrics-port", str(args.port + 2)]
        errors = open(Path(tmp) / "serve.err", "w+")
        server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors, text=True)
        try:
            for line in server.stdout:  # "serving ..." once every worker has joined
                if line.startswith("serving"):
                    break
            else:
                errors.seek(0)
                raise SystemExit(f"cw serve ended: {errors.read()[-2000:]}")
            controller = psutil.Process(server.pid)
            workers = workers_of(controller)
            print(f"cw serve pid {server.pid}, workers {[w.pid for w in workers]}; "
                  f"{args.rounds} rounds of {args.round_s:g} s at {args.rate:g} r/s", flush=True)
            stop = threading.Event()
            scrapes = [0]
            last = [""]

            def scrape():
                url = f"http://127.0.0.1:{args.port + 2}/metrics"
                while not stop.wait(args.scrape_s):
                    with urllib.request.urlopen(url, timeout=5) as r:
                        last[0] = r.read().decode()
                    scrapes[0] += 1

            if args.scrape_s:
                threading.Thread(target=scrape, daemon=True).start()
            print("round | requests (total) | ok | late | controller RSS MB / fds / threads | "
                  "workers RSS MB | /dev/shm", flush=True)
            rows = []
            total = 0
            for i in range(1, args.rounds + 1):
                out = Path(tmp) / f"round{i}"
                r = subprocess.run([sys.executable, "-m", "cw", "replay", "--controller", clients,
                                    "--workload", "poisson", "--rate", str(args.rate),
                                    "--duration", f"{args.round_s:g}s", "--out", str(out),
                                    "--json"], capture_output=True, text=True)
                if r.returncode != 0:
                    raise SystemExit(f"round {i}: cw replay failed: {r.stderr[-2000:]}")
                s = json.loads((out / "summary.json").read_text())
                total += s["requests"]
                time.sleep(1.0)  # the last answers' bookkeeping
                c = sample(controller)
                w = [sample(p)["rss_mb"] for p in workers]
                rows.append((total, c, w))
                ok = s["requests"] - s["rejected"] - s["errors"] - s.get("timed_out", 0)
                print(f"{i} | {s['requests']:,} ({total:,}) | {ok:,} | {s['late']} | "
                      f"{c['rss_mb']:.1f} / {c['fds']} / {c['threads']} | "
                      f"{', '.join(f'{x:.1f}' for x in w)} | {shm_entries()}"
                      + (f" | {scrapes[0]} scrapes, {actions(last[0])}" if args.scrape_s
                         else ""), flush=True)
                for d in out.iterdir():  # the telemetry of a round is not needed again
                    d.unlink()
            if len(rows) >= 3:
                (n0, c0, w0), (n1, c1, w1) = rows[0], rows[-1]
                per_m = 1e6 / (n1 - n0)
                print(f"growth from round 1 to {len(rows)}, per million requests: controller "
                      f"{(c1['rss_mb'] - c0['rss_mb']) * per_m:+.2f} MB, "
                      f"{(c1['fds'] - c0['fds']) * per_m:+.1f} fds; workers "
                      + ", ".join(f"{(b - a) * per_m:+.2f} MB" for a, b in zip(w0, w1)))
            stop.set()
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()


if __name__ == "__main__":
    main()
