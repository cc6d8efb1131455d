#!/usr/bin/env bash
# Compile time of this checkout against another commit, alternated ROUNDS times in one go, on
# zoo models: wall time per run, and whether the two bundles' weights and kernel libraries came
# out byte-identical. Usage: bash bench/compile_vs.sh COMMIT [ROUNDS] [MODEL...]
# (default models: bert_base resnet50 mobilenet_v2, batch 1; BERT-base with --page-size 128MiB,
# as before stop 72, which split its embedding into blocks of the default page)
set -euo pipefail
cd "$(dirname "$0")/.."
commit=${1:?usage: bash bench/compile_vs.sh COMMIT [ROUNDS] [MODEL...]}
rounds=${2:-2}
shift $(( $# < 2 ? $# : 2 ))
models=("${@:-bert_base resnet50 mobilenet_v2}")
read -r -a models <<< "${models[*]}"
work=$(mktemp -d)
trap 'git worktree remove --force "$work/old" > /dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -f -q "$work/old" "$commit"
python=$PWD/.venv/bin/python
echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
echo "this checkout: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' + changes'); old: $commit"
for model in "${models[@]}"; do
  .venv/bin/cw zoo export "$model" -o "$work/$model.onnx" > /dev/null
done
run() {  # side model
  local side=$1 model=$2 root=$PWD extra=()
  [ "$side" = old ] && root=$work/old
  [ "$model" = bert_base ] && extra=(--page-size 128MiB)
  local start end
  start=$(date +%s.%N)
  (cd "$root" && "$python" -m cw compile "$work/$model.onnx" -o "$work/$model-$side" --force \
     --batch-sizes 1 "${extra[@]}" > /dev/null)
  end=$(date +%s.%N)
  printf '%-14s %-4s %6.1f s\n' "$model" "$side" "$(echo "$end - $start" | bc)"
}
for round in $(seq "$rounds"); do
  for model in "${models[@]}"; do
    run new "$model"
    run old "$model"
  done
done
for model in "${models[@]}"; do
  same=yes
  for f in weights.bin kernels/batch1.so; do
    cmp -s "$work/$model-new/$f" "$work/$model-old/$f" || same=no
  done
  echo "$model: weights and kernels byte-identical: $same"
done
