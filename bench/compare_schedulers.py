"""Clockwork vs the baselines on the same trace and the same simulated workers, at several SLOs.

    python bench/compare_schedulers.py [--duration 5m] [--target-rate 400] [--workers 2]
        [--slos 25ms,100ms] [--models DIR] [--out /tmp/cw-compare]

Prints a markdown table for docs/benchmarks.md. Simulated workers take their durations from the
models' profiles: for the zoo models by name, the GPU machine's committed profiles where a model
has one and Clockwork's Table 1 (V100) figures elsewhere (`--zoo-timings paper`: Table 1 for
all); with `--models DIR`, the profile.json of each bundle in DIR.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cw.replay.runner import ReplayConfig, replay
from cw.units import parse_duration_ns

SCHEDULERS = ("clockwork", "clipper", "batch-timeout", "fifo")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", default="5m")
    ap.add_argument("--target-rate", type=float, default=400)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--slos", default="25ms,100ms")
    ap.add_argument("--schedulers", default=",".join(SCHEDULERS))
    ap.add_argument("--models", default=None, help="a directory of profiled bundles")
    ap.add_argument("--zoo-timings", default="measured", help="measured or paper")
    ap.add_argument("--out", default="/tmp/cw-compare")
    args = ap.parse_args()
    print("| SLO | scheduler | offered r/s | goodput r/s | SLO attainment | rejected | late | "
          "p50 ms | p99 ms | max ms | mean batch | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for slo in args.slos.split(","):
        for name in args.schedulers.split(","):
            s = replay(ReplayConfig(
                duration_s=parse_duration_ns(args.duration) / 1e9, target_rate=args.target_rate,
                workers=args.workers, copies=args.copies, slo_ns=parse_duration_ns(slo),
                scheduler=name, zoo_timings=args.zoo_timings,
                out=Path(args.out) / f"{name}-{slo}", force=True,
                **({"models": args.models} if args.models else {})))
            lat = s["latency_ms"]
            print(f"| {slo} | {name} | {s['offered_rps']:.1f} | {s['goodput_rps']:.1f} | "
                  f"{s['slo_attainment']:.4f} | {s['rejected']} | {s['late']} | {lat['p50']} | "
                  f"{lat['p99']} | {lat['max']} | {s['mean_batch_size']} | {s['wall_s']} |",
                  flush=True)


if __name__ == "__main__":
    main()
