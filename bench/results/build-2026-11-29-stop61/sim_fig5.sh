#!/usr/bin/env bash
# Stop 61: the Fig. 5 preset simulated with resnet50's H200 profile re-measured that day (the
# measured CUTLASS plans, EXEC on the weights: model_zoo/profiles/nvidia-h200/resnet50.json), to
# set beside what the live GPU served in the same session (docs/benchmarks.md, "Fig. 5 on the
# GPU", stop 61): the default at 10, 25 and 50 ms, then 10 ms at the live client's pace
# (`--think 16ms`, stop 55) with the default horizon and with 2 ms.
# Virtual time: the build machine's load does not change the results. One JSON line per run.
# Usage: sim_fig5.sh > sim_fig5.jsonl
set -euo pipefail
cw=${CW:-.venv/bin/cw}
out=$(mktemp -d)
run() {  # run SLO THINK SEED NOISE [SCHEDULER]
  $cw replay --preset fig5 --simulate --slo "$1" --think "$2" --seed "$3" --noise "$4" \
    --scheduler "${5:-clockwork}" --duration 15s --out "$out/run" --force --json 2>/dev/null |
    python3 -c 'import json, sys
d = json.load(sys.stdin)
print(json.dumps({"slo_ms": d["slo_ms"], "think": sys.argv[1], "scheduler": d["scheduler"],
                  "seed": d["seed"], "noise": float(sys.argv[2]), "timings": d["timings"],
                  "requests": d["requests"], "goodput_rps": d["goodput_rps"],
                  "rejected": d["rejected"], "late": d["late"],
                  "mean_batch_size": d["mean_batch_size"]}))' "$2" "$4"
}
for slo in 10ms 25ms 50ms; do run "$slo" 0 0 0; done
for seed in 1 2; do run 10ms 16ms "$seed" 0.003; done
for seed in 1 2; do run 10ms 16ms "$seed" 0.003 clockwork:ahead=2ms; done
rm -rf "$out"
