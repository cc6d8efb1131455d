#!/bin/bash
# ab3.sh LABEL SLO [extra args]: live fig5 replay on simulated workers with /work/main
label=$1 slo=$2; shift 2
cd /tmp && rm -rf /tmp/ab-$label
PYTHONSAFEPATH=1 PYTHONPATH=${PP:-/work/main} /work/main/.venv/bin/python -m cw replay --preset fig5 --models /tmp/demo-mlp --runtime simulated --copies 15 --slo $slo --duration 10s --out /tmp/ab-$label --json "$@" > /tmp/ab-$label.json 2>/tmp/ab-$label.err
python3 - /tmp/ab-$label.json $label <<'PY'
import json,sys
s=json.load(open(sys.argv[1])); c=s.get('client_view',{})
print(sys.argv[2], 'req',s['requests'],'goodput',s['goodput_rps'],'late',s['late'],'too_late', s.get('actions_too_late'), 'timed_out', s.get('timed_out'), 'batch',s['mean_batch_size'],'| client late',c.get('late'),'left in time',c.get('late_that_left_in_time'))
PY
