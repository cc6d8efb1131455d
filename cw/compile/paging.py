"""Pack weight tensors into fixed-size pages, first-fit decreasing, as Clockwork does.

A page is the unit of the worker's GPU weights cache: a model is loaded by copying its pages into
free cache pages, so no tensor may cross a page boundary. Every batch size shares this layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cw.bundle import TENSOR_ALIGNMENT
from cw.errors import ModelError

MIB = 1024 * 1024


def _align(n: int) -> int:
    return (n + TENSOR_ALIGNMENT - 1) // TENSOR_ALIGNMENT * TENSOR_ALIGNMENT


@dataclass(frozen=True)
class Placement:
    page: int
    offset: int


@dataclass(frozen=True)
class PageLayout:
    page_size: int
    placements: list[Placement]  # one per tensor, in the order the tensors were given
    used_bytes: list[int]        # per page

    @property
    def num_pages(self) -> int:
        return len(self.used_bytes)


def needed_page_size(nbytes: int) -> int:
    """The smallest power-of-two MiB page that holds `nbytes`."""
    size = MIB
    while size < nbytes:
        size *= 2
    return size


def pack(names: list[str], sizes: list[int], page_size: int) -> PageLayout:
    for name, size in zip(names, sizes):
        if size > page_size:
            need = needed_page_size(size)
            raise ModelError(f"weight tensor '{name}' ({size} bytes) is larger than a page "
                             f"({page_size} bytes)",
                             f"use --page-size {need // MIB}MiB or larger (a worker serves "
                             "bundles of one page size: compile the others with it too)")
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    used: list[int] = []
    placements: list[Placement | None] = [None] * len(sizes)
    for i in order:
        size = sizes[i]
        for page, fill in enumerate(used):
            start = _align(fill)
            if start + size <= page_size:
                placements[i] = Placement(page, start)
                used[page] = start + size
                break
        else:
            placements[i] = Placement(len(used), 0)
            used.append(size)
    return PageLayout(page_size, placements, used)  # type: ignore[arg-type]


def page_bytes(layout: PageLayout, tensors: list[np.ndarray], page: int) -> bytearray:
    """The stored bytes of one page (its used prefix; free space is not stored). Each tensor's
    bytes are copied once, into the page: a page is up to hundreds of MiB."""
    buf = bytearray(layout.used_bytes[page])
    view = np.frombuffer(buf, dtype=np.uint8)
    for tensor, place in zip(tensors, layout.placements):
        if place.page == page:
            raw = np.ascontiguousarray(tensor).reshape(-1).view(np.uint8)
            view[place.offset:place.offset + raw.size] = raw
    return buf
