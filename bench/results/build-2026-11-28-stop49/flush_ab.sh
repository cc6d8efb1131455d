#!/bin/bash
# alternating rounds: old (answers at the next poll) vs new (send_now), fig5 simulated live at SLO $1
slo=$1; rounds=${2:-3}
for r in $(seq 1 $rounds); do
  for mode in old new; do
    pp=/work/main; [ $mode = old ] && pp=/tmp/wt-old
    PP=$pp bash /tmp/ab3.sh f-$mode-$r $slo > /dev/null
    python3 - /tmp/ab-f-$mode-$r.json $mode $r <<'PY'
import json,sys
s=json.load(open(sys.argv[1])); c=s['client_view']
f=lambda d: f"{d['p50']}/{d['p99']}/{d['p999']}/{d['max']}"
print(sys.argv[2], sys.argv[3], 'req', s['requests'], 'goodput', s['goodput_rps'], 'late ctl', s['late'],
      '| client late', c['late'], 'left in time', c['late_that_left_in_time'], 'late at intake', c.get('late_when_taken_in'),
      '| way back', f(c['way_back_ms']), '| to thread', f(c['way_to_client_thread_ms']), '| in client', f(c['in_client_ms']), flush=True)
PY
  done
done
