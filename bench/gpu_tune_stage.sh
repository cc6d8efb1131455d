#!/usr/bin/env bash
# Stage `cw tune --target cuda` for the GPU machine, whose image has no TVM compiler.
#
#   bash bench/gpu_tune_stage.sh
#
# A device call carries at most 64 MiB; the full TVM is ~100 MB as a wheel, its compiler library
# alone 57 MiB xz-compressed. So it travels in two carries, to two device calls less than ~30 s
# apart (the machine stays warm, and its /tmp with it, between them):
#   .gputuneA  the compiler library (libtvm_compiler.so.xz)
#   .gputuneB  the rest of the TVM package, the wheels the image lacks (apache-tvm-ffi,
#              xgboost-cpu for MetaSchedule's cost model, onnxslim, msgspec, pyzmq) and the
#              tuning database so far (bench/results/tuning-cuda-sm_90/db.tar.xz), to resume it
# Device calls (bench/gpu_tune.sh; each command starts in the repository root):
#   1. carry [".gputuneA"]:  bash bench/gpu_tune.sh receive
#   2. carry [".gputuneB"]:  bash bench/gpu_tune.sh run [MODELS] [BATCH_SIZES] [BUDGET]
#   3. while warm, carry nothing:  bash bench/gpu_tune.sh run ...   (continues the same database)
# Each `run` leaves $OUT/db.tar.xz (the whole database) and $OUT/tune.log; unpack the latest to
# bench/results/tuning-cuda-sm_90/ and commit it, then `cw tune-compact` into cw/tuning/cuda-sm_90.
#
# PYTHON: the project's Python (default .venv/bin/python); PYVER: the GPU machine's (3.12).
set -euo pipefail
PY=${PYTHON:-.venv/bin/python}
PYVER=${PYVER:-3.12}
ROOT=$(git rev-parse --show-toplevel); cd "$ROOT"
TVM_DIR=$($PY -c "import importlib.util,os; print(os.path.dirname(importlib.util.find_spec('tvm').origin))")
version() { $PY -c "import importlib.metadata as m; print(m.version('$1'))"; }
LIB=$TVM_DIR/lib/libtvm_compiler.so
# xz -9 of 250 MiB takes minutes on two cores: keep it, keyed by the library's size and time
CACHE=.devpack/libtvm_compiler-$(stat -c %s-%Y "$LIB").so.xz
if [ ! -f "$CACHE" ]; then
  echo "compressing $LIB (a few minutes, once)"
  mkdir -p .devpack
  xz -T0 -9 -c "$LIB" > "$CACHE.tmp" && mv "$CACHE.tmp" "$CACHE"
fi
rm -rf .gputuneA .gputuneB
mkdir -p .gputuneA .gputuneB/wheels
cp "$CACHE" .gputuneA/libtvm_compiler.so.xz
tar -C "$(dirname "$TVM_DIR")" -cJf .gputuneB/tvm-rest.tar.xz \
  --exclude tvm/lib/libtvm_compiler.so --exclude tvm/3rdparty --exclude '__pycache__' tvm
for spec in "apache-tvm-ffi==$(version apache-tvm-ffi)" "xgboost-cpu==$(version xgboost-cpu)" \
            "onnxslim==$(version onnxslim)" "msgspec==$(version msgspec)" "pyzmq==$(version pyzmq)"; do
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d .gputuneB/wheels "$spec"
done
DB=bench/results/tuning-cuda-sm_90/db.tar.xz
if [ -f "$DB" ]; then cp "$DB" .gputuneB/db.tar.xz; echo "resuming $DB"; fi
tracked=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
for d in .gputuneA .gputuneB; do
  size=$(du -sb "$d" | cut -f1)
  echo "$d: $(( (size + tracked) / 1048576 )) MiB with the tracked files (limit 64)"
done
