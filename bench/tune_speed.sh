#!/usr/bin/env bash
# `cw tune` on the CPU, two checkouts of cw side by side: the zoo's small_cnn (9 kernels, batch
# 1) tuned from an empty database by each checkout in turn, ROUNDS times in one go; wall time per
# run and the sum of the best kernel times each found.
# Usage: bash bench/tune_speed.sh OTHER_CHECKOUT [TRIALS] [ROUNDS]
#   e.g. git worktree add /tmp/cw-before HEAD~1 && bash bench/tune_speed.sh /tmp/cw-before 16
set -euo pipefail
cd "$(dirname "$0")/.."
here=$(pwd)
other=$(cd "${1:?usage: bench/tune_speed.sh OTHER_CHECKOUT [TRIALS] [ROUNDS]}" && pwd)
trials=${2:-16}
rounds=${3:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/cw zoo export small_cnn -o "$work/small_cnn.onnx" > /dev/null
echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
echo "trials per kernel: $trials; other: $other ($(git -C "$other" log -1 --format=%h)); this: $(git log -1 --format=%h)"
for round in $(seq "$rounds"); do
  for side in other this; do
    src=$here; [ "$side" = other ] && src=$other
    start=$(date +%s.%N)
    (cd "$src" && PYTHONPATH="$src" "$here/.venv/bin/python" -m cw tune "$work/small_cnn.onnx" \
      --db "$work/db-$side-$round" --batch-sizes 1 --trials "$trials" > "$work/$side.txt" 2>&1)
    end=$(date +%s.%N)
    printf 'round %s  %-5s %7.1f s  %s\n' "$round" "$side" "$(echo "$end - $start" | bc)" \
      "$(grep -o 'kernels add up to .*' "$work/$side.txt")"
  done
done
