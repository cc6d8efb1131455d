"""Random workloads and policies through both simulators (cw/replay/native/ and
simulate.py with clockwork.py or baselines.py): their telemetry must be byte-identical. tests/integration/test_fastsim.py checks
chosen cases; this looks for the corners those miss (ties, memory pressure, odd configs).

    python bench/fastsim_fuzz.py [--cases 50] [--seed 1] [--seconds 4]

Prints each case and stops at the first difference, with the case's parameters to reproduce it.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from cw.replay import arrivals, fastsim, workloads
from cw.replay.runner import DEFAULT_ZOO_MODELS, resolve_models
from cw.replay.simulate import SimConfig, Simulation
from cw.replay.traces import load_trace
from cw.serve.scheduler import SchedulerConfig, make_scheduler
from cw.serve.telemetry import TelemetryLog

MS = 1_000_000


def case(rng: random.Random, seconds: float) -> dict:
    return dict(
        scheduler=rng.choice([
            "clockwork", "clockwork", "clipper", "batch-timeout", "fifo",
            # the baselines' settings (cw/serve/scheduler/spec.py); clockwork's come through
            # the SchedulerConfig below
            f"clipper:step={rng.randint(1, 4)}:backoff={rng.choice([0.5, 0.75, 0.9])}",
            f"batch-timeout:max-batch={rng.choice([2, 4, 8, 16])}"
            f":delay={rng.choice(['100us', '1ms', '5ms', '20ms'])}"]),
        models=",".join(rng.sample(DEFAULT_ZOO_MODELS, rng.randint(1, 5))),
        copies=rng.choice([1, 2, 5, 10, 30]),
        timings=rng.choice(["paper", "measured"]),
        gpus=rng.randint(1, 6),
        pages=rng.choice([10, 20, 40, 100, 400, 1376]),
        noise=rng.choice([0.0, 0.0, 0.05, 0.3]),
        sim_seed=rng.randint(0, 2**40),
        slo_ms=rng.choice([5, 10, 25, 50, 100, 500]),
        rate=rng.choice([50, 200, 1000, 3000]),
        arrivals=rng.choice(["poisson", "exact", "gamma:4"]),
        mapping=rng.choice(["contiguous", "stripe"]),
        closed=rng.random() < 0.2,
        ahead_ms=rng.choice([1, 5, 20]),
        margin_us=rng.choice([0, 500, 2000]),
        slack_ms=rng.choice([1, 3, 10]),
        max_loads=rng.choice([1, 2, 4]),
        seconds=seconds,
    )


def run_case(c: dict, tmp: Path) -> tuple[bool, int]:
    infos, durations = resolve_models(c["models"], c["copies"], c["timings"])
    sched = SchedulerConfig(schedule_ahead_ns=c["ahead_ms"] * MS,
                            completion_margin_ns=c["margin_us"] * 1000,
                            infer_slack_ns=c["slack_ms"] * MS,
                            max_loads_in_flight=c["max_loads"])
    sim = SimConfig(c["gpus"], 1, c["pages"], noise=c["noise"], seed=c["sim_seed"])
    slo = c["slo_ms"] * MS
    loop = times = names = None
    if c["closed"]:
        loop = workloads.ClosedLoop([m.model_id for m in infos[:8]], concurrency=4,
                                    duration_ns=int(c["seconds"] * 1e9))
    else:
        arr = arrivals.generate(load_trace("azure"), [m.model_id for m in infos],
                                duration_s=c["seconds"], start_minute=0, rate_scale=None,
                                target_rate=c["rate"], arrivals=c["arrivals"],
                                mapping=c["mapping"], seed=c["sim_seed"] % 1000)
        times, names = arr.times_ns, [arr.models[i] for i in arr.model_index]
    out = {}
    for engine in ("python", "compiled"):
        log = TelemetryLog(tmp / engine)
        if engine == "python":
            s = Simulation(make_scheduler(c["scheduler"], sched), infos, durations, sim, log)
            s.run_closed(loop, slo) if loop else s.run(times, names, slo)
        else:
            fastsim.run(sched, infos, durations, sim, slo, log, scheduler=c["scheduler"],
                        times_ns=times, model_names=names, closed=loop)
        log.close()
        out[engine] = [(tmp / engine / f).read_bytes() for f in ("requests.csv", "actions.csv")]
    return out["python"] == out["compiled"], out["python"][0].count(b"\n") - 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    if not fastsim.available():
        sys.exit("the compiled simulator is not built (pip install -e . with g++ present)")
    rng = random.Random(args.seed)
    start = time.perf_counter()
    for i in range(args.cases):
        c = case(rng, args.seconds)
        with tempfile.TemporaryDirectory() as tmp:
            same, requests = run_case(c, Path(tmp))
        print(f"case {i}: {requests} requests, {'identical' if same else 'DIFFERENT'}: {c}",
              flush=True)
        if not same:
            sys.exit(1)
    print(f"{args.cases} cases identical in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
