#!/usr/bin/env bash
# A/B of Client.share in the open loop: a Poisson workload at RATE r/s on simulated workers
# serving the bundles in MODELS (602 KB inputs), old (copy per request) vs new (shared once).
# Usage: MODELS=DIR open_ab.sh RATE ROUNDS [COPIES]
set -u
rate=${1:-3000} rounds=${2:-3} copies=${3:-4}
old=${OLD:-/tmp/cw-old} new=${NEW:-/work/main}
py=/work/main/.venv/bin/python
for i in $(seq 1 "$rounds"); do
  for side in old new; do
    dir=$old; [ "$side" = new ] && dir=$new
    out=$(mktemp -d)
    (cd "$dir" && PYTHONSAFEPATH=1 PYTHONPATH="$dir" timeout 300 "$py" -m cw replay \
        --models "${MODELS:-/tmp/r18sim}" --runtime simulated --copies "$copies" \
        --workload poisson --rate "$rate" --slo 100ms --duration 10s --out "$out/r" --json \
        > "$out/s.json" 2>/dev/null)
    "$py" - "$side" "$out/s.json" <<'PY'
import json, sys
side, f = sys.argv[1:]
s = json.load(open(f))
cpu = s["client_cpu"]
us = cpu["python"][0] * s["duration_s"] * 1e6 / s["requests"]
print(f"{side}: requests {s['requests']}, in SLO {s['slo_attainment']}, client python cores "
      f"{cpu['python'][0]} -> {us:.1f} us/request; sent late p99 {s['send_lateness_ms']['p99']} ms, "
      f"late (client) {s['client_view']['late']}, inputs via {s.get('inputs_via')}", flush=True)
PY
    rm -rf "$out"
  done
done
