"""Which sizes a Resize may be given as scales: those whose ratio float32 holds exactly."""

import numpy as np
import pytest

from cw.compile.resize_scales import exact_scales


@pytest.mark.parametrize("size_in,size_out,scale", [
    (8, 16, 2.0), (16, 8, 0.5), (6, 9, 1.5), (8, 13, 1.625), (5, 5, 1.0),
    (7, 15, None), (3, 7, None), (10, 4, None),  # 15/7, 7/3, 0.4: no float32 is exact
])
def test_a_ratio_is_a_scale_only_where_exact(size_in, size_out, scale):
    got = exact_scales([1, 3, size_in, size_in], ["N", 3, size_out, size_out])
    assert got == (None if scale is None else [1.0, 1.0, scale, scale])
    if got is not None:  # and floor(in * scale) gives the size back, as ONNX computes it
        assert int(np.floor(size_in * np.float32(got[2]))) == size_out


def test_unknown_or_changed_dims_give_no_scales():
    assert exact_scales([1, 3, 8, 8], [1, 3, None, 16]) is None
    assert exact_scales([1, 3, "h", 8], [1, 3, 16, 16]) is None
    assert exact_scales([1, 3, 8, 8], [1, 6, 16, 16]) is None  # across channels
    assert exact_scales([1, 3, 8, 8], [1, 3, 16]) is None
    assert exact_scales(None, [1, 3, 16, 16]) is None
    assert exact_scales([1, 3, 8, 8], ["N", "unk__1", 16, 16]) == [1.0, 1.0, 2.0, 2.0]
