#!/usr/bin/env bash
# `cw tune` on the GPU machine with a TVM compiler carried in two calls (bench/gpu_tune_stage.sh
# stages them; read it first).
#
#   bash bench/gpu_tune.sh receive                            # call 1, carry .gputuneA
#   bash bench/gpu_tune.sh run [MODELS] [BATCH_SIZES] [BUDGET] # call 2, carry .gputuneB; again
#
# MODELS: zoo names, heaviest work first (default resnet50,resnet18,densenet121); BATCH_SIZES
# (default 1,4,16); BUDGET: no kernel starts after it, for all models together (default 7m, so
# that a call ends inside the device's 10-minute limit). The database lives in /tmp/cwtune/db
# while the machine is warm; every run leaves it in $OUT/db.tar.xz after each model.
# TRIALS: measured candidates per kernel (default 64). PRECISION=fp16 tunes the kernels of
# `cw compile --precision fp16` (into the same database). TARGET=cpu runs the same on a CPU (to
# check the staging anywhere).
set -euo pipefail
W=${CW_TUNE_WORK:-/tmp/cwtune}
OUT=${OUT:-$W/out}
TARGET=${TARGET:-cuda}
TRIALS=${TRIALS:-64}
PRECISION=${PRECISION:-fp32}
case "${1:-}" in
receive)
  mkdir -p "$W"
  cp .gputuneA/libtvm_compiler.so.xz "$W/"
  echo "compiler received in $W: start the 'run' call now, while the machine is warm"
  ;;
run)
  if [ ! -f "$W/ready" ]; then
    if [ ! -f "$W/libtvm_compiler.so.xz" ]; then
      echo "gpu_tune: no compiler in $W (a fresh machine?): run 'receive' with .gputuneA first" >&2
      exit 2
    fi
    if [ ! -f .gputuneB/tvm-rest.tar.xz ]; then
      echo "gpu_tune: .gputuneB not carried: carry it in the first 'run' call" >&2
      exit 2
    fi
    rm -rf "$W/py" "$W/site"; mkdir -p "$W/py"
    tar -C "$W/py" -xJf .gputuneB/tvm-rest.tar.xz
    xz -dc "$W/libtvm_compiler.so.xz" > "$W/py/tvm/lib/libtvm_compiler.so"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" \
      .gputuneB/wheels/*.whl
    if [ -f .gputuneB/db.tar.xz ] && [ ! -d "$W/db" ]; then tar -C "$W" -xJf .gputuneB/db.tar.xz; fi
    touch "$W/ready"
  fi
  export PYTHONPATH="$W/site:$W/py:$(pwd)" PYTHONUNBUFFERED=1
  # cw looks for the toolkit under /usr/local/cuda-13* and /usr/local/cuda; elsewhere, say where
  if [ -z "${CUDA_PATH:-}" ] && ! ls /usr/local/cuda*/bin/nvcc >/dev/null 2>&1 && command -v nvcc >/dev/null; then
    export CUDA_PATH=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  fi
  mkdir -p "$OUT"
  { echo "== $(date -u +%FT%TZ) nvcc: $(command -v nvcc || echo none), CUDA_PATH=${CUDA_PATH:-unset}";
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
    python3 -c "from cw.tvm_env import cuda_codegen_problem as p; print('CUDA codegen:', p() or 'ok')"
  } 2>&1 | tee -a "$OUT/tune.log"
  models=${2:-resnet50,resnet18,densenet121}
  batches=${3:-1,4,16}
  budget=${4:-7m}
  budget_s=$(python3 -c "from cw.units import parse_duration_ns as p; print(int(p('$budget', 'budget') / 1e9))")
  start=$(date +%s)
  for m in ${models//,/ }; do
    left=$(( budget_s - ($(date +%s) - start) ))
    if [ "$left" -le 0 ]; then echo "budget spent before $m" | tee -a "$OUT/tune.log"; break; fi
    [ -f "$W/$m.onnx" ] || python3 -c "import model_zoo; model_zoo.export('$m', '$W/$m.onnx')"
    echo "== $m ($PRECISION), batch sizes $batches, ${left}s left ($(date -u +%FT%TZ))" | tee -a "$OUT/tune.log"
    python3 -m cw tune "$W/$m.onnx" --db "$W/db" --target "$TARGET" --batch-sizes "$batches" \
      --trials "$TRIALS" --precision "$PRECISION" --time-budget "${left}s" 2>&1 | tee -a "$OUT/tune.log" || echo "cw tune failed on $m" | tee -a "$OUT/tune.log"
    tar -C "$W" -cJf "$OUT/db.tar.xz.tmp" db && mv "$OUT/db.tar.xz.tmp" "$OUT/db.tar.xz"
  done
  ;;
*)
  echo "usage: bash bench/gpu_tune.sh receive | run [MODELS] [BATCH_SIZES] [BUDGET]" >&2
  exit 2
  ;;
esac
