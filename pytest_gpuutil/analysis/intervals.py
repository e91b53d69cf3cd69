"""Unions of time intervals: what busy time, category time and idle gaps are made of.

Intervals overlap when several streams work at once; a union counts each nanosecond once. The
numpy functions take int64 arrays (and import numpy only when called); the ``plain_`` ones take
lists, for small traces in a process without numpy. ``segment_blocks`` does many unions at once
(one per window and device, say) in a few array passes.
"""
from __future__ import annotations

import operator
from itertools import accumulate, compress
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    import numpy as np


def blocks(starts: "np.ndarray", ends: "np.ndarray") -> tuple["np.ndarray", "np.ndarray"]:
    """Union of intervals sorted by start, as arrays of disjoint block starts and ends."""
    if starts.size == 0:
        return starts, ends
    import numpy as np

    reach = np.maximum.accumulate(ends)
    first = np.flatnonzero(starts[1:] > reach[:-1]) + 1
    first = np.concatenate(([0], first))
    last = np.concatenate((first[1:] - 1, [starts.size - 1]))
    return starts[first], reach[last]


def union_ns(starts: "np.ndarray", ends: "np.ndarray") -> int:
    block_starts, block_ends = blocks(starts, ends)
    return int((block_ends - block_starts).sum())


def plain_blocks(starts: Sequence[int], ends: Sequence[int]) -> tuple[list[int], list[int]]:
    """:func:`blocks` on lists: a block ends where the next start is past every end so far."""
    if not starts:
        return [], []
    reach = list(accumulate(ends, max))  # the furthest end so far, as numpy's maximum.accumulate
    new_block = list(map(operator.gt, starts[1:], reach))  # the next start is past every end so far
    return [starts[0], *compress(starts[1:], new_block)], [*compress(reach, new_block), reach[-1]]


def plain_union_ns(starts: Sequence[int], ends: Sequence[int]) -> int:
    """The length of the union of intervals sorted by start: :func:`plain_blocks`, summed as it goes."""
    if not starts:
        return 0
    total, first, reach = 0, starts[0], ends[0]
    for start, end in zip(starts, ends):
        if start > reach:
            total += reach - first
            first = start
        if end > reach:
            reach = end
    return total + reach - first


def plain_union_where(starts: list[int], ends: list[int], chosen: Iterable[bool]) -> int:
    """:func:`plain_union_ns` of the intervals where ``chosen`` is true (in C: one mask, two picks)."""
    mask = list(chosen)
    return plain_union_ns(list(compress(starts, mask)), list(compress(ends, mask)))


def segment_blocks(segments: "np.ndarray", rel_starts: "np.ndarray",
                   rel_ends: "np.ndarray", span: int) -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
    """The union of each segment's intervals as blocks: (segment, start, end) per block, sorted by
    segment and start.

    Times are relative to their window (0..span). Sorted by (segment, start), every segment's
    ends are lifted by ``segment × (span + 1)``, so one running maximum over all rows never
    carries an end from one segment into the next.
    """
    import numpy as np

    if segments.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    order = np.lexsort((rel_starts, segments))
    seg, s, e = segments[order], rel_starts[order], rel_ends[order]
    _, seg_index = np.unique(seg, return_inverse=True)
    lift = seg_index.astype(np.int64) * (span + 1)
    reach = np.maximum.accumulate(e + lift) - lift
    new_block = np.concatenate(([True], seg_index[1:] != seg_index[:-1]))
    new_block[1:] |= s[1:] > reach[:-1]
    block_first = np.flatnonzero(new_block)
    block_last = np.concatenate((block_first[1:] - 1, [seg.size - 1]))
    return seg[block_first], s[block_first], reach[block_last]


def segment_unions(segmented: tuple["np.ndarray", "np.ndarray", "np.ndarray"]) -> tuple["np.ndarray", "np.ndarray"]:
    """Union length of each segment of :func:`segment_blocks`: (segment ids, lengths), ids ascending."""
    import numpy as np

    seg, start, end = segmented
    if seg.size == 0:
        return seg, seg
    first = np.flatnonzero(np.concatenate(([True], seg[1:] != seg[:-1])))
    return seg[first], np.add.reduceat(end - start, first)
