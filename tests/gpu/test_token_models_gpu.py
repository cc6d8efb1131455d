"""Token-id models (the zoo's small_bert) on a real GPU: the CUDA kernels agree with onnxruntime,
negative ids included, and an id past the vocabulary that gets past every check is clamped by
the kernel, not read outside the embedding table (on a GPU such a read is an illegal address
that kills the worker's CUDA context). Skipped without a CUDA GPU."""

import subprocess
import sys

import numpy as np
import pytest

from cw.engine import run_bundle

pytestmark = pytest.mark.gpu

VOCABULARY = 1000  # small_bert's (model_zoo)


def test_token_ids_on_gpu_agree_with_onnxruntime(cuda_bundle, zoo_onnx):
    bundle = cuda_bundle("small_bert")
    for batch in (1, 3):  # 3 runs padded to 4
        ids = np.random.default_rng(batch).integers(-VOCABULARY, VOCABULARY, (batch, 32))
        result = run_bundle(bundle, [ids.astype(np.int64)], device="cuda:0",
                            verify_onnx=zoo_onnx("small_bert"))
        assert result.relative_error <= 1e-4, (batch, result.relative_error)


def test_the_cuda_kernels_clamp_an_id_past_the_table(cuda_bundle):
    """The VM called directly, in a process of its own: id 10^12 reads the table's last row."""
    code = f"""
import numpy as np
from cw.engine import LocalModel
m = LocalModel({str(cuda_bundle("small_bert"))!r}, "cuda:0")
def run(x):
    t = m.tvm.runtime.tensor(x, device=m.device)
    return m._vm(1)["main"](t, *m.weights).numpy()
x = np.random.default_rng(0).integers(0, {VOCABULARY}, (1, 32)).astype(np.int64)
last = x.copy()
x[0, 5], last[0, 5] = 10**12, {VOCABULARY - 1}
y = run(x)
assert np.isfinite(y).all(), y
assert np.array_equal(y, run(last)), np.abs(y - run(last)).max()
print("clamped")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "clamped" in r.stdout, (r.returncode, r.stderr[-2000:])
