#!/bin/bash
# alternating rounds: stop 48's code (8f6a427, worktree /tmp/wt-old) vs this stop's, fig5 live simulated at SLO $1 with ${EXTRA}
slo=$1; rounds=${2:-3}
for r in $(seq 1 $rounds); do
  for mode in old new; do
    pp=/work/main; [ $mode = old ] && pp=/tmp/wt-old
    PP=$pp bash /tmp/ab3.sh c-$mode-$r $slo ${EXTRA:-} > /dev/null
    python3 - /tmp/ab-c-$mode-$r.json $mode $r <<'PY'
import json,sys
s=json.load(open(sys.argv[1])); c=s['client_view']
f=lambda d: f"{d['p50']}/{d['p99']}/{d['p999']}/{d['max']}"
print(sys.argv[2], sys.argv[3], 'req', s['requests'], 'goodput', s['goodput_rps'], 'late ctl', s['late'],
      '| client late', c['late'], c['late_by_status'], 'left in time', c['late_that_left_in_time'],
      '| way back', f(c['way_back_ms']), '| no core', s['host_cpu']['no_core_fraction'], flush=True)
PY
  done
done
