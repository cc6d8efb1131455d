"""Estimates from a profile that measured only some of a bundle's batch sizes."""

from cw.serve.estimates import _interpolate


def test_sizes_between_measured_ones_are_interpolated_and_outside_err_long():
    points = [(1, 100), (16, 400)]
    assert _interpolate(points, 1) == 100 and _interpolate(points, 16) == 400
    assert _interpolate(points, 4) == 160       # 100 + 300 × 3/15
    assert _interpolate(points, 2) == 120
    assert _interpolate([(4, 200)], 1) == 200   # below the smallest: the smallest's time
    assert _interpolate([(4, 200), (8, 300)], 16) == 600  # above: scaled from the largest
    assert _interpolate([(4, 201)], 6) == 302   # rounded up, never down
