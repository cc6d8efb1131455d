import numpy as np
import pytest

from cw.bundle import TENSOR_ALIGNMENT
from cw.compile.paging import MIB, needed_page_size, pack, page_bytes
from cw.errors import ModelError


def test_first_fit_decreasing_never_crosses_a_page():
    sizes = [9 * MIB, 6 * MIB, 5 * MIB, 3 * MIB, 1000, 7 * MIB]
    names = [f"t{i}" for i in range(len(sizes))]
    layout = pack(names, sizes, 16 * MIB)
    for size, place in zip(sizes, layout.placements):
        assert place.offset % TENSOR_ALIGNMENT == 0
        assert place.offset + size <= 16 * MIB
    # decreasing order: 9 opens page 0, 7 fits beside it, 6 opens page 1, 5 and 3 fill it
    assert layout.placements[0].page == layout.placements[5].page == 0
    assert layout.placements[1].page == layout.placements[2].page == 1
    assert layout.num_pages == 2
    # no two tensors on a page overlap
    for page in range(layout.num_pages):
        spans = sorted((p.offset, p.offset + s) for p, s in zip(layout.placements, sizes)
                       if p.page == page)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_tensor_larger_than_page_names_tensor_and_needed_size():
    with pytest.raises(ModelError) as e:
        pack(["small", "fc.weight"], [100, 40 * MIB], 16 * MIB)
    assert "fc.weight" in e.value.message
    assert "--page-size 64MiB" in e.value.hint
    assert needed_page_size(40 * MIB) == 64 * MIB
    assert needed_page_size(MIB) == MIB


def test_page_bytes_places_tensor_data_at_offsets():
    tensors = [np.arange(10, dtype=np.float32), np.full(3, 7, dtype=np.int64)]
    layout = pack(["a", "b"], [t.nbytes for t in tensors], MIB)
    data = page_bytes(layout, tensors, 0)
    for t, p in zip(tensors, layout.placements):
        assert data[p.offset:p.offset + t.nbytes] == t.tobytes()


def test_page_bytes_takes_every_dtype_and_rank_and_strided_tensors():
    tensors = [np.array(2.5, dtype=np.float32), np.array([True, False, True]),
               np.arange(6, dtype=np.float16).reshape(2, 3),
               np.arange(12, dtype=np.int8).reshape(3, 4).T]  # not C-contiguous
    layout = pack(list("abcd"), [t.nbytes for t in tensors], MIB)
    data = page_bytes(layout, tensors, 0)
    assert len(data) == layout.used_bytes[0]
    for t, p in zip(tensors, layout.placements):
        assert data[p.offset:p.offset + t.nbytes] == t.tobytes(order="C")
