"""Virtual-time simulation speed: `cw replay --simulate` on the bundled 1,000-function Azure
sample (80 zoo model instances), wall time and virtual/wall ratio.

    python bench/sim_speed.py [--seconds 120] [--rate 1000] [--gpus 6] [--scheduler clockwork]

To compare two checkouts, run it in each, one after the other (PYTHONPATH=CHECKOUT).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from cw.replay.runner import ReplayConfig, replay


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--gpus", type=int, default=6)
    ap.add_argument("--scheduler", default="clockwork")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        s = replay(ReplayConfig(duration_s=args.seconds, target_rate=args.rate,
                                workers=args.gpus, scheduler=args.scheduler,
                                out=Path(tmp) / "out"))
    print(f"{args.scheduler}, {args.rate:g} r/s, {args.gpus} GPUs: {s['requests']} requests, "
          f"{s['wall_s']} s wall, virtual/wall ×{s['speedup']}, SLO attainment "
          f"{s['slo_attainment']}, late {s['late']}")


if __name__ == "__main__":
    main()
