#!/usr/bin/env bash
# A/B: the replay's load generator copying each request's input into shared memory (old: the
# commit before Client.share) against sharing each model's inputs once (new: this tree).
# Usage: MODELS=DIR share_ab.sh SLO ROUNDS [COPIES]; fig5 preset on simulated workers serving the
# bundles in DIR (one with 602 KB inputs: a resnet18 bundle), inputs through shared memory.
set -u
slo=${1:-10ms} rounds=${2:-3} copies=${3:-15}
old=${OLD:-/tmp/cw-old} new=${NEW:-/work/main}
py=/work/main/.venv/bin/python
for i in $(seq 1 "$rounds"); do
  for side in old new; do
    dir=$old; [ "$side" = new ] && dir=$new
    out=$(mktemp -d)
    (cd "$dir" && PYTHONSAFEPATH=1 PYTHONPATH="$dir" timeout 300 "$py" -m cw replay --preset fig5 --models "${MODELS:-/tmp/r18sim}" \
        --runtime simulated --copies "$copies" --slo "$slo" --duration 10s --out "$out/r" --json \
        > "$out/s.json" 2>/dev/null)
    "$py" - "$side" "$out/s.json" <<'PY'
import json, sys
side, f = sys.argv[1:]
s = json.load(open(f))
c, cpu = s["client_view"], s["client_cpu"]
us = cpu["python"][0] * s["duration_s"] * 1e6 / s["requests"]
print(f"{side}: requests {s['requests']}, goodput {s['goodput_rps']}, client python cores "
      f"{cpu['python'][0]} zmq {cpu['zmq'][0]} -> {us:.1f} us/request; late (client) {c['late']}, "
      f"late (controller) {s['late']}, inputs via {s.get('inputs_via')}, no-core "
      f"{s['host_cpu']['no_core_fraction']}", flush=True)
PY
    rm -rf "$out"
  done
done
