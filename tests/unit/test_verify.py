"""The error measure behind `--verify` and tuning's wrong-answer check."""

import numpy as np

from cw.verify import max_relative_error, non_finite_hint

NAN, INF = float("nan"), float("inf")


def test_relative_to_the_largest_reference_value():
    ref = np.array([[1.0, -4.0], [0.0, 2.0]], np.float32)
    assert max_relative_error(ref.copy(), ref) == 0.0
    assert max_relative_error(ref + np.float32(0.02), ref) == np.float32(0.02) / 4
    assert max_relative_error(ref[:1], ref) == INF  # another shape
    zeros = np.zeros(3, np.float32)
    assert max_relative_error(zeros, zeros) == 0.0
    assert max_relative_error(zeros + 1e-6, zeros) == INF


def test_nan_and_inf_agree_only_where_the_reference_has_them():
    ref = np.array([NAN, INF, -INF, 2.0])
    assert max_relative_error(ref.copy(), ref) == 0.0
    # TVM's ReLU turns NaN into 0 where onnxruntime keeps NaN: a disagreement, not "nan"
    assert max_relative_error(np.array([0.0, INF, -INF, 2.0]), ref) == INF
    assert max_relative_error(np.array([NAN, -INF, -INF, 2.0]), ref) == INF
    assert max_relative_error(np.array([NAN, INF, -INF, NAN]), ref) == INF
    assert max_relative_error(np.array([NAN, INF]), np.array([NAN, INF])) == 0.0


def test_a_hint_names_non_finite_inputs():
    assert non_finite_hint([np.ones(4, np.float32), np.arange(3)]) is None
    hint = non_finite_hint([np.array([NAN, 1.0, INF], np.float32)])
    assert hint is not None and "2 NaN or infinite" in hint
