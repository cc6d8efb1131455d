#!/usr/bin/env bash
# `cw serve` answers `cw infer` with what `cw run` computes, on one machine (issue 5's GPU point).
#
#   bash bench/serve_infer.sh MODELS MODEL WORK [RUNTIME=cuda]
#
# MODELS holds MODEL's bundle. Three random images (seed 5: a batch of 3, padded to 4) go through
# `cw run` on the device and through `cw serve` + `cw infer` (inputs through shared memory, the
# result lane, the TVM worker), then SIGTERM stops the server, whose exit status is printed. The
# two outputs are compared: the same kernels on the same device, so they should agree to the bit.
# A bundle refilled with pattern weights (bench/gpu_stage.py --refill) checks the serving path,
# not the model's accuracy (tests/gpu and `cw run --verify` do that on real weights).
# VERIFY=MODEL.onnx: `cw run` checks its answer against onnxruntime's first (real weights).
# With RUNTIME=cpu and a CPU bundle the same script checks itself on a CPU machine.
set -euo pipefail
models=$1 model=$2 work=$3 runtime=${4:-cuda}
cw=${CW:-cw}
device=$([ "$runtime" = cuda ] && echo cuda || echo cpu)
mkdir -p "$work"
python3 - "$models/$model" "$work/x.npy" <<'PY'
import json, pathlib, sys
import numpy as np
spec = json.loads((pathlib.Path(sys.argv[1]) / "manifest.json").read_text())["inputs"][0]
shape = [3] + [int(d) for d in spec["sample_shape"]]
np.save(sys.argv[2], np.random.default_rng(5).standard_normal(shape).astype(spec["dtype"]))
PY
$cw run "$models/$model" --device "$device" --input "$work/x.npy" -o "$work/y_run.npy" \
  ${VERIFY:+--verify "$VERIFY"}
$cw serve --models "$models" --runtime "$runtime" --log-dir "$work/logs" >"$work/serve.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null || true' EXIT
for _ in $(seq 240); do
  $cw infer --list 2>/dev/null | grep -q "$model" && break
  kill -0 $server 2>/dev/null || { echo "cw serve ended early:"; tail -5 "$work/serve.log"; exit 1; }
  sleep 0.5
done
start=$(date +%s.%N)
$cw infer "$model" --input "$work/x.npy" -o "$work/y_serve.npy" --slo 1000ms
echo "cw infer took $(python3 -c "print(round(($(date +%s.%N) - $start) * 1e3, 1))") ms (process start included)"
kill -TERM $server
code=0; wait $server || code=$?
trap - EXIT
echo "cw serve exit status after SIGTERM: $code"
python3 - "$work" <<'PY'
import sys
import numpy as np
run, served = (np.load(f"{sys.argv[1]}/y_{k}.npy") for k in ("run", "serve"))
scale = max(float(np.abs(run).max()), 1e-30)
print(f"served vs cw run: shape {served.shape} vs {run.shape}, "
      f"max abs diff {float(np.abs(served - run).max()):.3g} (outputs up to {scale:.3g}), "
      f"identical {bool(np.array_equal(served, run))}")
sys.exit(0 if served.shape == run.shape and np.allclose(served, run, rtol=1e-5, atol=1e-6 * scale)
         else 1)
PY
