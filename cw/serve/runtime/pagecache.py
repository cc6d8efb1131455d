"""Bookkeeping of a device's weights page cache: which slots are free.

The cache is allocated once per device; a model is loaded by copying its weight pages into free
slots. Nothing here evicts: only an explicit UNLOAD frees slots, so what is resident is exactly
what the controller decided.
"""

from __future__ import annotations


class PageCache:
    def __init__(self, page_size: int, num_pages: int):
        if page_size <= 0 or num_pages < 0:
            raise ValueError("page size must be positive and the page count non-negative")
        self.page_size = page_size
        self.num_pages = num_pages
        self._free = list(range(num_pages - 1, -1, -1))  # pop() hands out low slots first

    @property
    def free_pages(self) -> int:
        return len(self._free)

    def allocate(self, count: int) -> list[int] | None:
        """`count` free slots, or None (and nothing taken) when there are not enough."""
        if count > len(self._free):
            return None
        return [self._free.pop() for _ in range(count)]

    def release(self, slots: list[int]) -> None:
        for slot in slots:
            if not 0 <= slot < self.num_pages or slot in self._free:
                raise ValueError(f"slot {slot} is not allocated")
        self._free.extend(sorted(slots, reverse=True))
