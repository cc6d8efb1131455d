"""A softmax along rows that whole vectors do not fill (a ViT's 197 keys, CLIP's 77 tokens) runs
in vectors: its maximum and sum in vectors of partial sums over the row padded to whole vectors
(cw/compile/fast_math.py), its other steps in whole vectors and one shorter one
(cw/compile/cpu_rows.py); and computes what numpy does, a masked row's (all far below 0) too."""

import re

import numpy as np
import pytest

from cw.compile import cpu_kernels, cpu_rows
from cw.tvm_env import load_tvm
from tests.integration.test_cpu_kernels import _kernels, _legalized_op

# the steps' final sums of a vector of partial sums: 16 in a loop of their own
_COMBINES = ("T_softmax_maxelem", "T_softmax_expsum")


@pytest.mark.parametrize("shape", [(6, 40, 197), (12, 77, 77), (2, 16, 1500)])
def test_a_softmax_over_ragged_rows_runs_in_vectors(shape):
    from tvm import relax, tirx

    tvm = load_tvm()
    target, fused = _legalized_op([shape], lambda x: relax.op.nn.softmax(x, axis=-1))
    (func,) = _kernels(fused).values()
    with target:
        sch = cpu_rows.schedule_rows(func)
        scheduled, count = cpu_kernels.schedule_kernels(fused)
    assert sch is not None and count == 1
    names = re.findall(r'T\.sblock\("(\w+)"\)', sch.mod.script())
    # the maximum and the sum each in a vector of partial sums (TVM's: one running maximum and
    # one running sum, each step waiting for the one before)
    for step in _COMBINES:
        assert any(n.startswith(step + "_rf_update") for n in names), names
    steps = [n for n in names if n != "root" and n not in _COMBINES
             and not n.endswith(("_common", "_partition", "_init"))]
    assert {n.split("_rf")[0].rstrip("_0123456789").removesuffix("_ax").removesuffix("_i")
            for n in steps} >= {"T_softmax_maxelem", "T_fast_exp", "T_softmax_expsum",
                                "T_softmax_norm"}, steps
    scalar = [n for n in steps
              if sch.get(sch.get_loops(sch.get_sblock(n))[-1]).kind != tirx.ForKind.VECTORIZED]
    assert not scalar, scalar
    rng = np.random.default_rng(sum(shape))
    v = rng.standard_normal(shape).astype(np.float32) * 4
    v[0, 0, -1] = 30        # the maximum where the padding repeats it
    v[0, 1] -= 1000         # a masked row: still a softmax, not NaN
    v[-1, -1, :-1] = -1e9   # all weight on the last element
    vm = relax.VirtualMachine(tvm.compile(scheduled, target=target), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(v)).numpy()
    w = v.astype(np.float64)
    e = np.exp(w - w.max(-1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
