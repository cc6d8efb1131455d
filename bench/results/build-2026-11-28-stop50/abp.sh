#!/bin/bash
rounds=$1; shift
for r in $(seq $rounds); do
  for spec in "$@"; do
    label=${spec%%=*}; args=${spec#*=}
    pp=/work/main
    case $label in old*) pp=/tmp/wt-old;; esac
    (cd /tmp && PYTHONSAFEPATH=1 PYTHONPATH=$pp /work/main/.venv/bin/python /work/main/bench/serve_throughput.py --models /tmp/demo-mlp --copies 4 --workers 2 --rate ${RATE:-10000} --seconds 10 $args 2>&1) | python3 /tmp/abparse.py $label
  done
done
