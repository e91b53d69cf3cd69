"""The host's waits for the GPU in a window, and the GPU's idle that each cost (the host-sync rule's figures).

After a wait the GPU's queue is empty and the host refills it one launch at a time: the idle a wait
causes is every gap after it until the next wait (:func:`idle_after_wait`), and, for a read-back,
the gap before the copy the wait waited for (:func:`idle_before_read_back`).
"""
from __future__ import annotations

import bisect
from collections import Counter

from pytest_gpuutil.analysis.grouping import plain_blocks
from pytest_gpuutil.frozen import tuple_record

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Optional, Sequence

#: how far past the end of a host's wait the GPU work it waited for may end in the records: the
#: GPU's timestamps are converted to the host's clock, and the two may differ by microseconds. A
#: copy ending 5 µs after ``cudaStreamSynchronize`` returned made every one of 300 waits look as if
#: the GPU were still busy, and host-sync saw no idle after any (issue 42)
WAIT_CLOCK_SLACK_NS = 50_000
#: a gap shorter than this between two pieces of work is the GPU's own step from one queued piece
#: to the next (a kernel, then the copy of its result), not the host's doing
QUEUED_STEP_NS = 2_000


def idle_after_wait(busy_starts: Sequence[int], busy_ends: Sequence[int], start: int, end: int,
                    counted_to: int, until: Optional[int] = None) -> tuple[int, int]:
    """(the GPU's idle time after the host's wait ``start``-``end``, when the GPU's work resumed last).

    ``busy_starts``/``busy_ends``: the GPU's busy blocks (sorted, disjoint). The idle begins with the
    first gap that ends after the wait: from the wait's end, or, where the records show the work
    waited for ending after the wait (clocks apart by up to :data:`WAIT_CLOCK_SLACK_NS`), from that
    work's end; nothing when the GPU was busy past the slack (another stream's work), and nothing
    counted before ``counted_to`` (a gap counts once). Every later gap of :data:`QUEUED_STEP_NS` or
    more before ``until`` (the next wait) counts too: the host refills an empty queue one launch at
    a time (a 4096² matmul step on an H100: 20 µs idle before one launch, 6 µs before the next)."""
    n = len(busy_starts)
    i = max(0, bisect.bisect_left(busy_ends, start) - 1)  # the last block ending before the wait, or the first
    if n == 0:
        return 0, 0
    if busy_starts[0] > end:  # no GPU work before the wait ended
        return max(0, busy_starts[0] - max(end, counted_to)), busy_starts[0]
    while i < n - 1 and busy_ends[i] <= end + WAIT_CLOCK_SLACK_NS:
        gap_start, gap_end = busy_ends[i], busy_starts[i + 1]
        if gap_end > end and gap_end - gap_start >= QUEUED_STEP_NS:
            idle = max(0, gap_end - max(gap_start, end, counted_to))
            resumed = gap_end
            if until is not None:
                i += 1
                while i < n - 1 and busy_ends[i] < until:
                    gap_start, gap_end = busy_ends[i], min(busy_starts[i + 1], until)
                    if gap_end - gap_start >= QUEUED_STEP_NS:
                        idle += gap_end - max(gap_start, counted_to, resumed)
                        resumed = gap_end
                    i += 1
            return idle, resumed
        i += 1
    return 0, 0


def idle_before_read_back(busy_starts: Sequence[int], busy_ends: Sequence[int],
                          copies: Sequence[tuple[int, int]], start: int, end: int, counted_to: int) -> int:
    """The GPU's idle right before the device-to-host copies that the host's wait ``start``-``end``
    waited for (``copies``: (start, end) of the window's D2H copies, sorted by start).

    A read-back (``.item()``, ``.cpu()``, ``.tolist()``) queues a copy behind the work, then waits for
    it: the copy engine starts a few µs after the compute work ends (a 4096² step on an H100: 7.5 µs
    each time), and that gap, like the copy, is there only because the value is read now. Counted
    from the wait's start (or ``counted_to``) to the copy's start, when a gap ends there; copies
    ending later than the wait (past :data:`WAIT_CLOCK_SLACK_NS`) are not this wait's."""
    idle = 0
    first = bisect.bisect_left(copies, (start, -1))
    for copy_start, copy_end in copies[first:]:
        if copy_start > end:
            break
        if copy_end > end + WAIT_CLOCK_SLACK_NS:
            continue
        j = bisect.bisect_left(busy_starts, copy_start)
        if 0 < j < len(busy_starts) and busy_starts[j] == copy_start:
            idle += max(0, copy_start - max(busy_ends[j - 1], start, counted_to))
    return idle


@tuple_record
class Waits:
    """The host's waits for the GPU in the window and what the GPU did after each."""

    count: int
    #: calls or records behind the waits, by name
    by_name: tuple[tuple[str, int], ...]
    wait_ns: int
    #: GPU idle after each wait: its gaps from the wait's end until the next wait (waits followed by none: 0)
    idle_after_ns: int
    #: the waits as (start, end, idle after) relative to the window start, longest idle first (at most 5)
    worst: tuple[tuple[int, int, int], ...]
    #: GPU idle during the waits right before the device-to-host copies they waited for
    #: (:func:`idle_before_read_back`)
    read_back_idle_ns: int = 0

    @property
    def idle_ns(self) -> int:
        """What the waits cost the GPU: its idle after them and before their read-backs' copies."""
        return self.idle_after_ns + self.read_back_idle_ns


def waits_in(rows: Sequence[tuple[str, int, int]], busy_starts: Sequence[int], busy_ends: Sequence[int],
             copies: Sequence[tuple[int, int]], window_start: int) -> Waits:
    """The waits ``rows`` ((name, start, end), clipped to the window) against the GPU's busy blocks
    and its device-to-host copies (sorted by start); times in :class:`Waits` from ``window_start``."""
    rows = sorted(rows, key=lambda r: r[1])
    if not rows:
        return Waits(0, (), 0, 0, ())
    merged_s, merged_e = plain_blocks([r[1] for r in rows], [r[2] for r in rows])
    found = []
    read_back = 0
    counted_to = window_start  # idle before this is counted already (two waits before one gap count it once)
    nexts = [*merged_s[1:], None]
    for start, end, until in zip(merged_s, merged_e, nexts):
        if copies:
            read_back += idle_before_read_back(busy_starts, busy_ends, copies, start, end, counted_to)
        idle, resumed = idle_after_wait(busy_starts, busy_ends, start, end, counted_to, until)
        counted_to = max(counted_to, resumed)
        found.append((start - window_start, end - window_start, idle))
    names = Counter(r[0] for r in rows)
    worst = sorted(found, key=lambda w: (-w[2], w[0]))[:5]
    return Waits(len(found), tuple(sorted(names.items(), key=lambda kv: (-kv[1], kv[0]))),
                 sum(end - start for start, end in zip(merged_s, merged_e)), sum(w[2] for w in found),
                 tuple(worst), read_back)
