"""Virtual-time simulation speed: `cw replay --simulate` on the bundled 1,000-function Azure
sample (80 zoo model instances), wall time and virtual/wall ratio. The instances run for the
paper's Table 1 figures (`--zoo-timings paper`, as every run in docs/benchmarks.md before the
measured zoo profiles existed), so that figures stay comparable across versions.

    python bench/sim_speed.py [--seconds 120] [--rate 1000] [--gpus 6] [--scheduler clockwork]
    python bench/sim_speed.py --scheduler clockwork,clipper,batch-timeout --jobs 1|2
    python bench/sim_speed.py --sim-only [--repeat 3]   # the simulation alone: no files, best of N
    python bench/sim_speed.py --sim-engine python      # the Python simulator (default: auto,
                                                       # the compiled one for clockwork)

Several schedulers: `cw replay --scheduler a,b,c` (cw/replay/compare.py), `--jobs` at a time.

To compare two checkouts, run it in each, one after the other (PYTHONPATH=CHECKOUT).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from cw.replay.runner import ReplayConfig, replay


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--gpus", type=int, default=6)
    ap.add_argument("--scheduler", default="clockwork")
    ap.add_argument("--zoo-timings", default="paper", help="paper or measured")
    ap.add_argument("--jobs", type=int, default=None, help="several schedulers: at a time")
    ap.add_argument("--sim-only", action="store_true",
                    help="time Simulation.run alone (no CSVs, summary or report), best of --repeat")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sim-engine", default="auto", help="auto, compiled or python")
    args = ap.parse_args()
    if args.sim_only:
        return sim_only(args)
    if "," in args.scheduler:
        from cw.replay.compare import replay_side_by_side

        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            summaries = replay_side_by_side(
                ReplayConfig(duration_s=args.seconds, target_rate=args.rate, workers=args.gpus,
                             zoo_timings=args.zoo_timings, sim_engine=args.sim_engine,
                             out=Path(tmp) / "out"),
                args.scheduler.split(","), jobs=args.jobs)
            wall = time.perf_counter() - start
        print(f"{args.scheduler} ({args.jobs or 'one per core'} at a time), {args.rate:g} r/s, "
              f"{args.gpus} GPUs: {summaries[0]['requests']} requests each, {wall:.2f} s wall in "
              f"all, virtual/wall ×{len(summaries) * args.seconds / wall:.1f} summed over runs")
        return
    with tempfile.TemporaryDirectory() as tmp:
        s = replay(ReplayConfig(duration_s=args.seconds, target_rate=args.rate,
                                workers=args.gpus, scheduler=args.scheduler,
                                zoo_timings=args.zoo_timings, sim_engine=args.sim_engine,
                                out=Path(tmp) / "out"))
    print(f"{args.scheduler} ({s['sim_engine']}), {args.rate:g} r/s, {args.gpus} GPUs: "
          f"{s['requests']} requests, "
          f"{s['wall_s']} s wall, virtual/wall ×{s['speedup']}, SLO attainment "
          f"{s['slo_attainment']}, late {s['late']}")


def sim_only(args) -> None:
    """The scheduler, the simulated workers and the in-memory telemetry rows, nothing else: the
    part a faster scheduler or simulator speeds up, with less of the machine's noise."""
    from cw.replay import arrivals, fastsim
    from cw.replay.runner import make_scheduler, resolve_models
    from cw.replay.simulate import SimConfig, Simulation
    from cw.replay.traces import load_trace
    from cw.serve.scheduler.base import SchedulerConfig
    from cw.serve.telemetry import TelemetryLog

    config = ReplayConfig(duration_s=args.seconds, target_rate=args.rate, workers=args.gpus,
                          scheduler=args.scheduler, zoo_timings=args.zoo_timings)
    infos, durations = resolve_models(config.models, config.copies, config.zoo_timings)
    arr = arrivals.generate(load_trace(config.trace), [m.model_id for m in infos],
                            duration_s=config.duration_s, start_minute=config.start_minute,
                            rate_scale=None, target_rate=config.target_rate,
                            arrivals=config.arrivals, mapping=config.mapping, seed=config.seed)
    names = [arr.models[i] for i in arr.model_index]
    engine = fastsim.engine_for(config.scheduler, args.sim_engine)
    sim_config = SimConfig(config.workers, config.gpus_per_worker, config.pages_per_gpu,
                           seed=config.seed)
    best = float("inf")
    for _ in range(args.repeat):
        start = time.perf_counter()
        if engine == "compiled":
            fastsim.run(SchedulerConfig(), infos, durations, sim_config, config.slo_ns,
                        TelemetryLog(), times_ns=arr.times_ns, model_names=names)
        else:
            sim = Simulation(make_scheduler(config.scheduler, SchedulerConfig()), infos,
                             durations, sim_config)
            sim.run(arr.times_ns, names, config.slo_ns)
        best = min(best, time.perf_counter() - start)
    print(f"{args.scheduler} ({engine}), {args.rate:g} r/s, {args.gpus} GPUs, simulation only: "
          f"{len(names)} requests, best of {args.repeat} {best:.3f} s, "
          f"{best / len(names) * 1e6:.1f} µs per request, virtual/wall ×{args.seconds / best:.1f}")


if __name__ == "__main__":
    main()
