#!/usr/bin/env bash
# Stop 55: the Fig. 5 preset simulated (resnet50's H200 profile, as stop 53's sim_fig5.sh) with
# closed-loop clients that pause `--think` after each answer: how much of the 10 ms gap between
# the simulation and the live GPU run is the pace of the clients (the simulated ones resend
# 200 µs after an answer; the live replay's one Python process sent 200,799 in 15 s).
# Virtual time: the build machine's load does not change the results. One JSON line per run.
# Usage: sim_think.sh > sim_think.jsonl   (~5 min)
set -euo pipefail
cw=${CW:-.venv/bin/cw}
out=$(mktemp -d)
run() {  # run SLO THINK SEED NOISE [SCHEDULER]
  $cw replay --preset fig5 --simulate --slo "$1" --think "$2" --seed "$3" --noise "$4" \
    --scheduler "${5:-clockwork}" --duration 15s --out "$out/run" --force --json 2>/dev/null |
    python3 -c 'import json, sys
d = json.load(sys.stdin)
print(json.dumps({"slo_ms": d["slo_ms"], "think": sys.argv[1], "scheduler": d["scheduler"],
                  "seed": d["seed"],
                  "noise": float(sys.argv[2]), "requests": d["requests"],
                  "goodput_rps": d["goodput_rps"], "rejected": d["rejected"], "late": d["late"],
                  "mean_batch_size": d["mean_batch_size"]}))' "$2" "$4"
}
for think in 0 1ms 4ms 8ms 12ms 16ms; do run 10ms "$think" 0 0; done
for think in 14ms 16ms 18ms; do for seed in 1 2; do run 10ms "$think" "$seed" 0.003; done; done
for think in 0 5ms 10ms 15ms; do run 25ms "$think" 0 0; done
# the planning horizon at the live client's pace
for ahead in 1ms 2ms 3ms; do for seed in 1 2; do
  run 10ms 16ms "$seed" 0.003 "clockwork:ahead=$ahead"
done; done
# less slack at that pace: the SLO shortened by what requests lose before the controller's intake
for slo in 9.5ms 9ms 8.5ms 8ms; do run "$slo" 16ms 1 0.003; done
rm -rf "$out"
