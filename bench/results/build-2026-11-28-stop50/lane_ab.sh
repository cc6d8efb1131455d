#!/bin/bash
# lane_ab.sh SLO [ROUNDS]: alternating rounds, answers through ZeroMQ (CW_ANSWER_LANE=0) and
# through the client's lane (the default), fig5 live on simulated workers at SLO with ${EXTRA}
# (ab3.sh beside this script: `cw replay --preset fig5 --runtime simulated --copies 15
# --duration 10s`, mlp bundles in /tmp/demo-mlp)
here=$(cd "$(dirname "$0")" && pwd)
slo=$1; rounds=${2:-3}
for r in $(seq 1 $rounds); do
  for mode in zmq lane; do
    lane=1; [ $mode = zmq ] && lane=0  # (the default was the lane while this ran)
    CW_ANSWER_LANE=$lane bash "$here/ab3.sh" l-$mode-$r $slo ${EXTRA:-} > /dev/null
    python3 - /tmp/ab-l-$mode-$r.json $mode $r <<'PY'
import json,sys
s=json.load(open(sys.argv[1])); c=s['client_view']
f=lambda d: f"{d['p50']}/{d['p99']}/{d['p999']}/{d['max']}"
print(sys.argv[2], sys.argv[3], s.get('answers_via'), 'req', s['requests'], 'goodput', s['goodput_rps'],
      'late ctl', s['late'], '| client late', c['late'], 'left in time', c['late_that_left_in_time'],
      'late when taken in', c.get('late_when_taken_in'),
      '| way back', f(c['way_back_ms']), '| to thread', f(c['way_to_client_thread_ms']),
      '| no core', s['host_cpu']['no_core_fraction'], flush=True)
PY
  done
done
