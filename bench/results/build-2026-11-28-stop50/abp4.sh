#!/bin/bash
rounds=$1
for r in $(seq $rounds); do
  for spec in "zmq-cf|clients|--no-answer-lane" "lane-cf|clients|" "lane-wf|workers|" "zmq-wf|workers|--no-answer-lane"; do
    IFS='|' read label order args <<< "$spec"
    (cd /tmp && CW_SEND_ORDER=$order /work/main/.venv/bin/python /work/main/bench/serve_throughput.py --models /tmp/demo-mlp --copies 4 --workers 2 --rate ${RATE:-12000} --seconds 10 $args 2>&1) | python3 /tmp/abparse.py $label
  done
done
