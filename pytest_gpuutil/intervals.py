"""Interval arithmetic on integer-nanosecond (start, end) pairs. Pure functions; inputs untouched."""
from __future__ import annotations

from typing import Iterable, Iterator


def merged(intervals: Iterable[tuple[int, int]], presorted: bool = False) -> Iterator[tuple[int, int]]:
    """Yield the union of ``intervals`` as disjoint (start, end) pairs in time order."""
    ordered = intervals if presorted else sorted(intervals)
    cur_start = cur_end = None
    for start, end in ordered:
        if cur_end is None:
            cur_start, cur_end = start, end
        elif start <= cur_end:
            if end > cur_end:
                cur_end = end
        else:
            yield cur_start, cur_end  # type: ignore[misc]
            cur_start, cur_end = start, end
    if cur_end is not None:
        yield cur_start, cur_end  # type: ignore[misc]


def union_length(intervals: Iterable[tuple[int, int]], presorted: bool = False) -> int:
    """Total length covered by ``intervals`` (overlaps counted once)."""
    return sum(end - start for start, end in merged(intervals, presorted))


def gaps(union: Iterable[tuple[int, int]], window_start: int, window_end: int) -> Iterator[tuple[int, int]]:
    """Idle (start, end) stretches of the window not covered by a merged ``union``."""
    cursor = window_start
    for start, end in union:
        if start > cursor:
            yield cursor, min(start, window_end)
        cursor = max(cursor, end)
    if window_end > cursor:
        yield cursor, window_end
