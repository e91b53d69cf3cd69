"""What the findings rules read about one window: its GPU timeline, its kinds of work, the host's waits.

Everything is computed when a rule first asks for it (cached), in plain Python over the window's
events, with the per-event work in C where it can be (``map``, ``sorted``, ``compress``, and the
busy blocks by :func:`~pytest_gpuutil.analysis.grouping.plain_blocks`): a rule whose cheap precondition fails never pays for the rest, and a window of a
few events never imports numpy. Definitions follow :func:`~pytest_gpuutil.analysis.summary.analyze`:

- an event belongs to the window when it overlaps it (``start <= end of window`` and ``end >=
  start of window``, except an event of positive length that ends exactly at the window's start),
  and is clipped to it;
- busy: the union of the events on each device, summed over devices; idle: window × devices that
  did work, minus busy, split per device into before the first event, between events and after
  the last;
- the host's waits: the union of the wait intervals (a ``cudaStreamSynchronize`` and the "Stream
  Sync" record of the same call are one wait), clipped to the window and to ``sync_end_ns`` (the
  capture's own closing synchronize is not the test's).

:func:`~pytest_gpuutil.analysis.summary.analyze` builds the same :class:`Timeline` in the pass it
makes anyway (sorted events, their blocks); given one, the rules do not sort the events again.
Events in int64 arrays (what the live capture gives, and big traces) are looked at with numpy,
events in lists (small traces, where numpy is not loaded) in plain Python: the same figures (the
tests compare both ways on every recording).
"""
from __future__ import annotations

import bisect
import functools
import operator
from collections import Counter
from itertools import chain, compress

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.analysis.grouping import blocks as array_blocks
from pytest_gpuutil.analysis.grouping import kernel_keys, kernel_pairs, plain_blocks, plain_text_codes
from pytest_gpuutil.analysis.intervals.waits import Waits, waits_in
from pytest_gpuutil.frozen import tuple_record
from pytest_gpuutil.traces.model import GpuColumns, SyncColumns, Window

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Any, Optional, Sequence

KERNEL = "kernel"
MEMCPY = "gpu_memcpy"


@tuple_record
class Timeline:
    """The window's GPU work as time: busy, idle and its parts, summed over devices."""

    devices: int
    busy_ns: int
    idle_before_ns: int
    idle_between_ns: int
    idle_after_ns: int
    #: the stretches with no work between two pieces of work, every device's (ns, > 0; a tuple, or
    #: an int64 array where the blocks were arrays on one device, or an ``array('q')`` where the C
    #: part found them on one device: analysis/intervals/event_figures.py)
    gaps_ns: Sequence[int]
    #: the union of all devices' work, as sorted disjoint blocks: their starts and their ends
    any_busy_starts: Sequence[int]
    any_busy_ends: Sequence[int]
    #: the kernels' clipped lengths (ns), when the maker of the timeline had them at hand
    kernel_lengths: Optional[Sequence[int]] = None

    @property
    def idle_ns(self) -> int:
        return self.idle_before_ns + self.idle_between_ns + self.idle_after_ns


@tuple_record
class KeyTotals:
    """Events and their clipped time for one (name, kind) pair in the window."""

    name: str
    kind: str
    category: str
    count: int
    total_ns: int


class WindowFacts:
    """One window's events, with what the rules read computed on first use (never changed after).

    ``syncs``: the host's waits; ``sync_end_ns``: waits that start from then on (the capture's own
    closing synchronize) are not the test's; ``given_timeline`` and ``given_event_count``: what
    analyze already found for the same window (see :func:`timeline_of`).
    """

    def __init__(self, events: GpuColumns, window: Window, classifier: KernelClassifier,
                 syncs: Optional[SyncColumns] = None, sync_end_ns: Optional[int] = None,
                 given_timeline: Optional[Timeline] = None, given_event_count: Optional[int] = None):
        self.events = events
        self.window = window
        self.classifier = classifier
        self.syncs = syncs
        self.sync_end_ns = sync_end_ns
        self.given_timeline = given_timeline
        self.given_event_count = given_event_count
        #: the events are int64 arrays: numpy does the work (loaded already)
        self.arrays = hasattr(events.starts_ns, "dtype")

    @property
    def window_ns(self) -> int:
        return self.window.duration_ns

    @functools.cached_property
    def _kept(self) -> Optional[Sequence[int]]:
        """The indices of the events in the window; None when all of them are (nothing reaches outside)."""
        cols = self.events
        ws, we = self.window.start_ns, self.window.end_ns
        if self.arrays:
            starts, ends = cols.starts_ns, cols.starts_ns + cols.durs_ns
            if not len(starts) or (starts.min() >= ws and ends.max() <= we):
                return None
            return (~((starts > we) | (ends < ws) | ((ends == ws) & (cols.durs_ns > 0)))).nonzero()[0]
        starts, durs = _ints(cols.starts_ns), _ints(cols.durs_ns)
        if not starts or (min(starts) >= ws and max(map(operator.add, starts, durs)) <= we):
            return None
        return [i for i, (s, d) in enumerate(zip(starts, durs)) if not (s > we or s + d < ws or (s + d == ws and d > 0))]

    @functools.cached_property
    def _rows(self) -> tuple[Sequence[int], Sequence[int], list[int], list[int]]:
        """(key code, device code, clipped start, clipped end) columns of the events in the window
        (device codes are built on first use)."""
        cols = self.events
        keys, kept = self.keys[0], self._kept
        if self.arrays:
            starts, ends = cols.starts_ns, cols.starts_ns + cols.durs_ns
            if kept is None:
                return keys, _LazyDevices(cols.devices, None), starts, ends
            ws, we = self.window.start_ns, self.window.end_ns
            return (keys[kept], _LazyDevices(cols.devices, kept), starts[kept].clip(min=ws), ends[kept].clip(max=we))
        starts, durs = _ints(cols.starts_ns), _ints(cols.durs_ns)
        ends = list(map(operator.add, starts, durs))
        if kept is None:
            return keys, _LazyDevices(cols.devices, None), starts, ends
        ws, we = self.window.start_ns, self.window.end_ns
        return ([keys[i] for i in kept], _LazyDevices(cols.devices, kept), [max(starts[i], ws) for i in kept],
                [min(ends[i], we) for i in kept])

    @functools.cached_property
    def keys(self) -> tuple[Sequence[int], list[str], list[str]]:
        """Each event's code for its (name, kind) pair, and the pairs' names and kinds."""
        pairs_of = kernel_keys if self.arrays else kernel_pairs
        return pairs_of(self.events.names, self.events.kinds)

    @functools.cached_property
    def categories(self) -> list[str]:
        """Each (name, kind) pair's category, by the classifier."""
        _, names, kinds = self.keys
        return [self.classifier.classify(name, kind) for name, kind in zip(names, kinds)]

    @property
    def event_count(self) -> int:
        if self.given_event_count is not None:
            return self.given_event_count
        kept = self._kept
        return len(self.events) if kept is None else len(kept)

    @functools.cached_property
    def _lengths(self) -> Sequence[int]:
        _, _, starts, ends = self._rows
        return ends - starts if self.arrays else list(map(operator.sub, ends, starts))

    @functools.cached_property
    def _key_counts(self) -> list[int]:
        # membership is all that counts here: analyze's count of the events in the window may say all are
        kept = None if self.given_event_count == len(self.events) else self._kept
        keys, n_keys = self.keys[0], len(self.keys[1])
        if self.arrays:
            import numpy as np

            return np.bincount(keys if kept is None else keys[kept], minlength=n_keys).tolist()
        if kept is None and n_keys <= 16 and isinstance(keys, list):  # a few kernels: list.count runs in C
            return [keys.count(code) for code in range(n_keys)]
        found = Counter(keys if kept is None else map(keys.__getitem__, kept))
        return [found.get(code, 0) for code in range(n_keys)]

    def counts(self, wanted: Sequence[bool]) -> list[tuple[str, int]]:
        """(name, events) of each (name, kind) pair where ``wanted[pair]``, most events first."""
        names = self.keys[1]
        found = [(names[c], n) for c, n in enumerate(self._key_counts) if n and wanted[c]]
        return sorted(found, key=lambda r: (-r[1], r[0]))

    @functools.cached_property
    def kernel_count(self) -> int:
        kinds = self.keys[2]
        return sum(count for count, kind in zip(self._key_counts, kinds) if kind == KERNEL)

    def totals(self, wanted: Sequence[bool]) -> list[KeyTotals]:
        """Count and clipped time of each (name, kind) pair where ``wanted[pair]``, most time first."""
        picked = [code for code, want in enumerate(wanted) if want and self._key_counts[code]]
        if not picked:
            return []
        keys, lengths = self._rows[0], self._lengths
        _, names, kinds = self.keys
        if self.arrays:
            import numpy as np

            sums = np.bincount(keys, weights=lengths, minlength=len(names)) if len(keys) else np.zeros(len(names))
            totals = {c: int(sums[c]) for c in picked}
        elif len(picked) == 1:
            totals = {picked[0]: sum(compress(lengths, map(picked[0].__eq__, keys)))}
        else:
            totals = dict.fromkeys(picked, 0)
            for key, length in compress(zip(keys, lengths), map(wanted.__getitem__, keys)):
                totals[key] += length
        rows = [KeyTotals(names[c], kinds[c], self.categories[c], self._key_counts[c], totals[c]) for c in picked]
        return sorted(rows, key=lambda r: (-r.total_ns, r.name))

    def union_ns(self, wanted: Sequence[bool], min_length: int = 0) -> tuple[int, int]:
        """The time (union per device, summed) of the events whose (name, kind) pair is ``wanted`` and
        that last at least ``min_length``, and how many events that is. Never more than the
        category statistics' time for the categories those pairs are in (their union)."""
        keys, devices, starts, ends = self._rows
        if self.arrays:
            return self._array_union(wanted, min_length)
        rows = [i for i in compress(range(len(keys)), map(wanted.__getitem__, keys)) if ends[i] - starts[i] >= min_length]
        devices = devices.codes() if rows else []
        by_device: dict[int, list[int]] = {}
        for i in rows:
            by_device.setdefault(devices[i], []).append(i)
        total = 0
        for picked in by_device.values():
            picked.sort(key=starts.__getitem__)
            block_starts, block_ends = plain_blocks(list(map(starts.__getitem__, picked)), list(map(ends.__getitem__, picked)))
            total += sum(map(operator.sub, block_ends, block_starts))
        return total, len(rows)

    def _array_union(self, wanted: Sequence[bool], min_length: int) -> tuple[int, int]:
        import numpy as np

        keys, devices, starts, ends = self._rows
        chosen = np.asarray(wanted, dtype=bool)[keys] & (ends - starts >= min_length) if len(keys) else keys.astype(bool)
        rows = chosen.nonzero()[0]
        if not rows.size:
            return 0, 0
        device_of = devices.array_codes()[rows]
        total = 0
        for device in _present(np, device_of):
            on = rows[device_of == device]
            order = on[np.argsort(starts[on], kind="stable")]
            block_starts, block_ends = array_blocks(starts[order], ends[order])
            total += int((block_ends - block_starts).sum())
        return total, int(rows.size)

    def lengths_of(self, wanted: Sequence[bool]) -> Sequence[int]:
        """The clipped lengths of the events whose (name, kind) pair is ``wanted``."""
        if self.arrays:
            import numpy as np

            keys = self._rows[0]
            return self._lengths[np.asarray(wanted, dtype=bool)[keys]] if len(keys) else self._lengths
        return list(compress(self._lengths, map(wanted.__getitem__, self._rows[0])))

    def idle_next_to(self, wanted: Sequence[bool]) -> tuple[int, int]:
        """(the GPU's idle time right before and right after the ``wanted`` events, how many gaps):
        each gap between two busy blocks that such an event begins or ends, counted once; never the
        idle before the window's first work or after its last (gpu-idle's)."""
        keys, _, starts, ends = self._rows
        pick = list(compress(range(len(keys)), map(wanted.__getitem__, _ints(keys))))
        if not pick:
            return 0, 0
        busy_starts, busy_ends = _ints(self.timeline.any_busy_starts), _ints(self.timeline.any_busy_ends)
        starts, ends = _ints(starts), _ints(ends)
        gaps: set[int] = set()  # gap i lies between block i - 1 and block i
        for row in pick:
            block = bisect.bisect_right(busy_starts, starts[row]) - 1
            if block > 0 and busy_starts[block] == starts[row]:
                gaps.add(block)
            after = bisect.bisect_left(busy_ends, ends[row])
            if after < len(busy_ends) - 1 and busy_ends[after] == ends[row]:
                gaps.add(after + 1)
        return sum(busy_starts[i] - busy_ends[i - 1] for i in gaps), len(gaps)

    @functools.cached_property
    def is_kernel(self) -> list[bool]:
        """Per (name, kind) pair: whether it is a kernel."""
        return [kind == KERNEL for kind in self.keys[2]]

    @functools.cached_property
    def kernel_lengths(self) -> Sequence[int]:
        given = self.given_timeline
        if given is not None and given.kernel_lengths is not None:
            return given.kernel_lengths
        return self.lengths_of(self.is_kernel)

    @functools.cached_property
    def timeline(self) -> Timeline:
        if self.given_timeline is not None:
            return self.given_timeline
        if self.arrays:
            return self._array_timeline()
        _, devices, starts, ends = self._rows
        by_device: dict[int, list[int]] = {}
        devices = devices.codes()
        if len(set(devices)) <= 1:
            by_device = {0: []} if starts else {}
        else:
            for i, device in enumerate(devices):
                by_device.setdefault(device, []).append(i)
        found = []
        for rows in by_device.values():
            if len(by_device) == 1:
                s, e = starts, ends
            else:
                s, e = list(map(starts.__getitem__, rows)), list(map(ends.__getitem__, rows))
            if not all(map(operator.le, s, s[1:])):
                order = sorted(range(len(s)), key=s.__getitem__)
                s, e = list(map(s.__getitem__, order)), list(map(e.__getitem__, order))
            found.append(plain_blocks(s, e))
        return timeline_of(self.window, found)

    def _array_timeline(self) -> Timeline:
        import numpy as np

        _, devices, starts, ends = self._rows
        if not len(starts):
            return timeline_of(self.window, [])
        codes = devices.array_codes()
        found = []
        for device in _present(np, codes):
            on = (codes == device).nonzero()[0]
            order = on[np.argsort(starts[on], kind="stable")]
            found.append(array_blocks(starts[order], ends[order]))
        return timeline_of(self.window, found)

    @property
    def capacity_ns(self) -> int:
        """Window × devices that did work: what busy and idle shares are of (as busy %)."""
        return self.window_ns * max(1, self.timeline.devices)

    def pct_of_window(self, ns: float) -> float:
        capacity = self.capacity_ns
        return 100.0 * ns / capacity if capacity > 0 else 0.0

    @property
    def busy_pct(self) -> float:
        return self.pct_of_window(self.timeline.busy_ns)

    @functools.cached_property
    def sync_rows(self) -> list[tuple[str, int, int]]:
        """The host's waits that overlap the window (and start before ``sync_end_ns``): (name, start, end), clipped."""
        if not self.syncs:
            return []
        ws, we = self.window.start_ns, self.window.end_ns
        limit = we if self.sync_end_ns is None else min(we, self.sync_end_ns)
        return [(name, max(start, ws), min(start + dur, limit)) for name, start, dur in self.syncs.rows()
                if start < limit and start + dur > ws]

    @functools.cached_property
    def waits(self) -> Waits:
        return waits_in(self.sync_rows, _ints(self.timeline.any_busy_starts), _ints(self.timeline.any_busy_ends),
                        self.read_back_copies, self.window.start_ns)

    @functools.cached_property
    def read_back_copies(self) -> list[tuple[int, int]]:
        """(start, end) of the window's device-to-host copies, by start (clipped to the window)."""
        keys, _, starts, ends = self._rows
        names = self.keys[1]
        wanted = [name.startswith("Memcpy DtoH") for name in names]
        if not any(wanted):
            return []
        if self.arrays:
            import numpy as np

            picked = np.asarray(wanted)[keys].nonzero()[0]
            return sorted(zip(starts[picked].tolist(), ends[picked].tolist()))
        return sorted((s, e) for k, s, e in zip(keys, starts, ends) if wanted[k])


class _LazyDevices:
    """The events' device codes (device 0 and "0" are one device), made when first asked for."""

    def __init__(self, devices: Sequence[Any], kept: Optional[list[int]]):
        self._devices, self._kept = devices, kept
        self._codes: Optional[list[int]] = None

    def codes(self) -> list[int]:
        if self._codes is None:
            codes = plain_text_codes(self._devices)[0]
            self._codes = codes if self._kept is None else [codes[i] for i in self._kept]
        return self._codes

    def array_codes(self) -> Any:
        """:meth:`codes` as an int64 array; of one device id (the usual case) without a list per event."""
        import numpy as np

        devices = self._devices
        if self._codes is None and getattr(devices, "dtype", None) is not None and devices.dtype.kind in "iu" \
                and devices.ndim == 1 and len(devices) and devices.min() == devices.max():
            return np.zeros(len(devices) if self._kept is None else len(self._kept), dtype=np.int64)
        return np.asarray(self.codes(), dtype=np.int64)


def _present(np: Any, codes: Any) -> list[int]:
    """The distinct values of non-negative integer codes, in order (np.unique without a return_*
    imports numpy.ma, ~10 ms once, ~100 ms where no bytecode is cached)."""
    return np.flatnonzero(np.bincount(codes)).tolist() if len(codes) else []


def _ints(values: Sequence[Any]) -> list[int]:
    to_list = getattr(values, "tolist", None)
    return to_list() if to_list is not None else list(values)


def timeline_of(window: Window, devices: Sequence[tuple[Any, ...]],
                kernel_lengths: Optional[Sequence[int]] = None,
                any_blocks: Optional[tuple[Sequence[int], Sequence[int]]] = None) -> Timeline:
    """A :class:`Timeline` from each device's blocks (sorted disjoint starts and ends; lists or int64
    arrays), as :func:`~pytest_gpuutil.analysis.summary.analyze` finds them, and their busy time
    when already summed (``(starts, ends)`` or ``(starts, ends, busy)``; lists may also bring their
    gaps and the gaps' sum: ``(starts, ends, busy, gaps, between)``). ``any_blocks``: the union of
    several devices' blocks, when already found."""
    ws, we = window.start_ns, window.end_ns
    busy = before = between = after = 0
    gaps: list[Any] = []  # per device: a list, or an array (kept so: the rules count them with numpy)
    all_starts: list[Any] = []
    all_ends: list[Any] = []
    for block_starts, block_ends, *known in devices:
        if not len(block_starts):
            continue
        if hasattr(block_starts, "dtype"):
            dev_gaps = block_starts[1:] - block_ends[:-1]
            dev_gaps = dev_gaps[dev_gaps > 0]
            busy += known[0] if known else int((block_ends - block_starts).sum())
            between += int(dev_gaps.sum())
            first, last = int(block_starts[0]), int(block_ends[-1])
        else:
            dev_gaps = known[1] if len(known) > 1 else list(filter(None, map(operator.sub, block_starts[1:], block_ends)))
            busy += known[0] if known else sum(block_ends) - sum(block_starts)
            between += known[2] if len(known) > 2 else sum(dev_gaps)
            first, last = block_starts[0], block_ends[-1]
        before += first - ws
        after += we - last
        gaps.append(dev_gaps)
        all_starts.append(block_starts)
        all_ends.append(block_ends)
    if len(all_starts) == 1:
        any_starts, any_ends = all_starts[0], all_ends[0]
    elif any_blocks is not None:
        any_starts, any_ends = any_blocks
    else:
        flat_s = [v for part in all_starts for v in _ints(part)]
        flat_e = [v for part in all_ends for v in _ints(part)]
        order = sorted(range(len(flat_s)), key=flat_s.__getitem__)
        any_starts, any_ends = plain_blocks(list(map(flat_s.__getitem__, order)), list(map(flat_e.__getitem__, order)))
    if len(gaps) == 1 and not isinstance(gaps[0], list):  # an int64 array (numpy's or array's): kept as it is
        all_gaps: Sequence[int] = gaps[0]
    else:
        all_gaps = tuple(chain.from_iterable(map(_ints, gaps)))
    return Timeline(len(all_starts), busy, before, between, after, all_gaps, any_starts, any_ends, kernel_lengths)
