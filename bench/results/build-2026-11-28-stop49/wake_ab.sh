#!/bin/bash
# (ran at stop 49 with environment switches since replaced: CW_SENDER_WAKE is gone, the closed loop wakes per poll; CW_SENDER_FLUSH=1 is now cw replay --send-at-once / CW_SEND_AT_ONCE=1)
# alternating rounds: CW_SENDER_WAKE=poll vs answer, fig5 simulated live at SLO $1
slo=$1; rounds=${2:-4}
for r in $(seq 1 $rounds); do
  for mode in answer poll; do
    CW_SENDER_WAKE=$mode bash /tmp/ab3.sh w-$mode-$r $slo > /dev/null
    python3 - /tmp/ab-w-$mode-$r.json $mode $r <<'PY'
import json,sys
s=json.load(open(sys.argv[1])); c=s['client_view']
f=lambda d: f"{d['p50']}/{d['p99']}/{d['p999']}/{d['max']}"
print(sys.argv[2], sys.argv[3], 'req', s['requests'], 'goodput', s['goodput_rps'], 'late ctl', s['late'],
      '| client late', c['late'], 'left in time', c['late_that_left_in_time'], 'late at intake', c.get('late_when_taken_in'),
      '| to thread', f(c['way_to_client_thread_ms']), '| in client', f(c['in_client_ms']), flush=True)
PY
  done
done
