#!/usr/bin/env bash
# Stop 52: the fig5 preset planned by the deadline (clockwork) and by the deadline less the
# client's reported way back (clockwork:way-back=1), alternating, on simulated workers serving
# the mlp bundle (2-core build machine). Usage: wayback_ab.sh MODELS_DIR "SLOS" PAIRS SECONDS
# (SCHEDULERS="clockwork clockwork:way-back=1 clockwork:way-back=2": each in turn)
set -euo pipefail
models=$1 slos=$2 pairs=$3 secs=$4
cw=${CW:-.venv/bin/cw}
for slo in $slos; do
  for i in $(seq "$pairs"); do
    for s in ${SCHEDULERS:-clockwork clockwork:way-back=1}; do
      $cw replay --preset fig5 --models "$models" --runtime simulated --scheduler "$s" \
        --slo "$slo" --duration "${secs}s" --out /tmp/wayback-ab --force --json 2>/dev/null \
        | python3 -c 'import json, sys
d = json.load(sys.stdin); c = d["client_view"]
print(json.dumps({"slo_ms": d["slo_ms"], "scheduler": d["scheduler"], "requests": d["requests"],
                  "goodput_rps": d["goodput_rps"], "late_controller": d["late"],
                  "late_client": c["late"], "left_in_time": c.get("late_that_left_in_time"),
                  "late_when_taken_in": c.get("late_when_taken_in"),
                  "way_back_p99_ms": (c.get("way_back_ms") or {}).get("p99"),
                  "client_python_cores": d["client_cpu"]["python"][0]}))'
    done
  done
done
