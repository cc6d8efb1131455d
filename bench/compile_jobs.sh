#!/usr/bin/env bash
# `cw compile --jobs`: the same compile built one batch size at a time and with the default
# (one per CPU, at most 4), alternated ROUNDS times in one go; wall time per run and whether the
# kernel libraries came out byte-identical. Usage: bash bench/compile_jobs.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cw=.venv/bin/cw
$cw zoo export resnet18 -o "$work/r18.onnx" > /dev/null
$cw zoo export resnet50 -o "$work/r50.onnx" > /dev/null
echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
run() {  # name onnx jobs extra-args...
  local name=$1 onnx=$2 jobs=$3; shift 3
  local start end
  start=$(date +%s.%N)
  $cw compile "$onnx" -o "$work/$name-j$jobs" --force --jobs "$jobs" "$@" > /dev/null
  end=$(date +%s.%N)
  printf '%-28s --jobs %s  %6.1f s\n' "$name $*" "$jobs" "$(echo "$end - $start" | bc)"
}
for round in $(seq "$rounds"); do
  run r18-cpu "$work/r18.onnx" 1 --batch-sizes 1,2,4,8,16
  run r18-cpu "$work/r18.onnx" 0 --batch-sizes 1,2,4,8,16
  run r50-cuda "$work/r50.onnx" 1 --target cuda --batch-sizes 1,4,16
  run r50-cuda "$work/r50.onnx" 0 --target cuda --batch-sizes 1,4,16
done
for name in r18-cpu r50-cuda; do
  same=yes
  for f in "$work/$name-j1"/kernels/*.so; do
    cmp -s "$f" "$work/$name-j0/kernels/$(basename "$f")" || same=no
  done
  echo "$name: kernel libraries byte-identical between --jobs 1 and 0: $same"
done
