"""How many parts cw splits a CUDA convolution's reduction into (cw/compile/cuda_conv.py)."""

import pytest

from cw.compile.cuda_conv import MAX_SPLIT, sm_count, split_count

TILE = (32, 64)  # dlight's Matmul on CUDA: 32 output pixels x 64 output channels per block
H100 = 132


@pytest.mark.parametrize("batch,hw,channels,parts", [
    (1, 7, 512, 8),     # resnet18 layer4 at batch 1: 2 x 8 = 16 blocks -> 128
    (1, 14, 256, 4),    # layer3: 7 x 4 = 28 blocks -> 112
    (1, 28, 128, 2),    # layer2: 25 x 2 = 50 blocks -> 100
    (1, 56, 64, 1),     # layer1: 98 blocks already, two waves would not help
    (4, 7, 512, 2),     # layer4 at batch 4: 56 blocks -> 112
    (16, 7, 512, 1),    # at batch 16 every conv fills the GPU: 200 blocks
])
def test_resnet18_3x3_convs_split_until_one_wave(batch, hw, channels, parts):
    got = split_count(batch * hw * hw, channels, channels, 9, TILE, H100)
    assert got == parts
    blocks = -(-batch * hw * hw // TILE[0]) * -(-channels // TILE[1])
    assert blocks * got <= H100 or got == 1


def test_parts_keep_enough_products_and_divide_the_channels():
    # resnet50's 1x1 conv 256 -> 512 at 7x7: 16 blocks, but each part keeps >= 128 products
    assert split_count(49, 512, 256, 1, TILE, H100) == 2
    # 2 blocks leave room for 16 parts; what stops the doubling:
    assert split_count(49, 64, 384, 9, TILE, H100) == 16  # the maximum
    assert split_count(49, 64, 96, 9, TILE, H100) == 4    # 8 parts: 12 x 9 = 108 products
    assert split_count(49, 64, 100, 9, TILE, H100) == 4   # 8 does not divide 100
    assert split_count(49, 64, 99, 9, TILE, H100) == 1    # odd
    # a tiny reduction is never split: 16 channels of a 1x1 conv
    assert split_count(49, 64, 16, 1, TILE, H100) == 1


def test_parts_never_exceed_the_maximum():
    assert split_count(1, 64, 8192, 9, TILE, 10_000) == MAX_SPLIT


def test_sm_counts():
    assert sm_count("sm_90") == H100
    assert sm_count("sm_75") == sm_count(None) > 0
