#!/bin/bash
# (ran at stop 49 with environment switches since replaced: CW_SENDER_WAKE is gone, the closed loop wakes per poll; CW_SENDER_FLUSH=1 is now cw replay --send-at-once / CW_SEND_AT_ONCE=1)
# alternating rounds: CW_SENDER_FLUSH=0 (requests wait for the client's I/O thread's next poll, <= 1 ms) vs 1 (Client.send_now after each burst); fig5 simulated live at SLO $1
slo=$1; rounds=${2:-3}
for r in $(seq 1 $rounds); do
  for mode in 0 1; do
    CW_SENDER_FLUSH=$mode bash /tmp/ab3.sh sn-$mode-$r $slo ${EXTRA:-} > /dev/null
    python3 - /tmp/ab-sn-$mode-$r.json flush=$mode $r <<'PY'
import json,sys
s=json.load(open(sys.argv[1])); c=s['client_view']; i=s['controller_loop']['intake']
f=lambda d: f"{d['p50']}/{d['p99']}/{d['max']}"
print(sys.argv[2], sys.argv[3], 'req', s['requests'], 'goodput', s['goodput_rps'], 'late ctl', s['late'],
      '| intake >1ms', round(i['over_1ms']/i['requests'],3), '>2ms', round(i['over_2ms']/i['requests'],3),
      '| client in SLO', c['completed_in_slo'], 'late', c['late'], '| OK latency', f(c['latency_ms']), '| no core', s['host_cpu']['no_core_fraction'], flush=True)
PY
  done
done
