#!/usr/bin/env bash
# Stop 53: the Fig. 5 preset simulated with resnet50's profile measured on the H200 (CUTLASS
# convolutions, model_zoo/profiles/nvidia-h200/resnet50.json), to set beside what the live GPU
# served on 2026-11-28; then Clockwork's planning horizon (schedule_ahead) at 10 and 25 ms.
# Virtual time: the build machine's load does not change the results. One JSON line per run.
# Usage: sim_fig5.sh > sim_fig5.jsonl
set -euo pipefail
cw=${CW:-.venv/bin/cw}
out=$(mktemp -d)
run() {  # run SCHEDULER SLO SEED NOISE
  $cw replay --preset fig5 --simulate --scheduler "$1" --slo "$2" --seed "$3" --noise "$4" \
    --duration 15s --out "$out/run" --force --json 2>/dev/null | python3 -c 'import json, sys
d = json.load(sys.stdin)
print(json.dumps({"scheduler": d["scheduler"], "slo_ms": d["slo_ms"], "seed": d["seed"],
                  "noise": float(sys.argv[1]), "timings": d["timings"],
                  "requests": d["requests"], "goodput_rps": d["goodput_rps"],
                  "rejected": d["rejected"], "late": d["late"],
                  "mean_batch_size": d["mean_batch_size"]}))' "$4"
}
for slo in 10ms 25ms 50ms 100ms 500ms; do run clockwork "$slo" 0 0; done
for slo in 10ms 25ms; do
  for ahead in 0.5ms 1ms 1.5ms 2ms 2.5ms 3ms 4ms 5ms; do
    for seed in 1 2; do run "clockwork:ahead=$ahead" "$slo" "$seed" 0.003; done
  done
done
rm -rf "$out"
