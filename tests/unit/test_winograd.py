"""Winograd's transform matrices (cw/compile/winograd.py) against a direct convolution, in
exact arithmetic: a wrong coefficient shows as an error, not as rounding."""

from fractions import Fraction

import numpy as np
import pytest

from cw.compile.winograd import ALGOS, MATRICES


def _matrix(rows) -> np.ndarray:
    return np.array([[Fraction(v) for v in row] for row in rows], dtype=object)


@pytest.mark.parametrize("m", sorted(MATRICES))
def test_each_output_tile_equals_the_direct_convolution_exactly(m):
    at, g, bt = (_matrix(x) for x in MATRICES[m])
    alpha = m + 2
    assert at.shape == (m, alpha) and g.shape == (alpha, 3) and bt.shape == (alpha, alpha)
    rng = np.random.default_rng(m)
    for _ in range(5):
        tile = _matrix(rng.integers(-9, 10, (alpha, alpha)))
        filt = _matrix(rng.integers(-9, 10, (3, 3)))
        direct = np.array([[sum(tile[i + a, j + b] * filt[a, b] for a in range(3)
                                for b in range(3)) for j in range(m)] for i in range(m)])
        wino = at.dot((g.dot(filt).dot(g.T)) * (bt.dot(tile).dot(bt.T))).dot(at.T)
        assert (wino == direct).all()


def test_algorithm_names_map_to_tile_sizes():
    assert ALGOS == {"direct": 0, "winograd2": 2, "winograd4": 4}
    assert all(ALGOS[name] in MATRICES for name in ("winograd2", "winograd4"))
