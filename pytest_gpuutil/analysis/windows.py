"""Many windows at once: attribute GPU events to the windows they fall in, and summarise each window.

A continuous capture holds the GPU work of many tests; each test's call phase is one window.
``window_stats`` gives, for every window, what a per-test record needs (busy time, per-device
busy, category times, mm/conv, kernel count, top kernels, longest idle gaps), in a few numpy
passes over all events
instead of one :func:`~pytest_gpuutil.analysis.summary.analyze` call per test. The definitions
are analyze's, to the nanosecond (the tests compare both on real traces):

- an event belongs to a window when it overlaps it: ``start <= window end`` and
  ``end >= window start``, except an event of positive duration that ends exactly at the window
  start; it is clipped to the window;
- busy: the union of a window's events per device, summed over devices; the denominator of every
  percentage is window length × devices that did work in the window.

Windows must be sorted and must not overlap (they may touch), as the call phases of the tests
of one process are.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from pytest_gpuutil.analysis.classify import (
    MM_CONV_CATEGORIES,
    KernelClassifier,
    category_order,
)
from pytest_gpuutil.analysis.grouping import column_codes, kernel_keys, segment_blocks, segment_unions
from pytest_gpuutil.analysis.stats import (
    CategoryStat,
    IdleGap,
    KernelStat,
    device_key,
    pct,
)
from pytest_gpuutil.analysis.summary import KERNEL_KIND, TraceSummary
from pytest_gpuutil.traces.model import GpuColumns, Window

#: int64 headroom for the per-segment offsets of the segmented union (see grouping.segment_blocks)
_OFFSET_LIMIT = 1 << 62
#: what a window keeps of its kernels and idle gaps (analyze's ``top`` and ``gap_count``)
TOP_KERNELS = 5
IDLE_GAPS = 3


@dataclass(frozen=True)
class WindowStats:
    """What one window's GPU work amounts to: the figures a per-test record holds.

    Categories, top kernels and idle gaps are kept as rows of plain values (a flush makes them
    for every window, and a record turns them into dicts); ``categories``, ``top_kernels`` and
    ``idle_gaps`` give them as :mod:`~pytest_gpuutil.analysis.stats` objects, made when first asked for.
    """

    window: Window
    busy_us: float
    busy_pct: float
    mm_conv_pct: float
    kernel_count: int
    event_count: int
    #: (device, busy µs) for each device that did work, in device order
    devices: tuple[tuple[str, float], ...]
    #: (name, time µs, % of busy, % of window, count) per category that had events, in category order
    category_rows: tuple[tuple[str, float, float, float, int], ...]
    #: (name, category, count, total µs, mean µs, % of window) of the kernels with the most time in
    #: the window, most first (at most TOP_KERNELS)
    kernel_rows: tuple[tuple[str, str, int, float, float, float], ...] = ()
    #: (device, start µs, length µs) of the longest stretches with no GPU work, per device that
    #: worked, longest first (at most IDLE_GAPS)
    gap_rows: tuple[tuple[str, float, float], ...] = ()
    #: (name, count, total µs) of every kernel, copy and memset name in the window, most time first
    #: (what a gate's explanation compares between two runs: gates/explain.py)
    #: (analyze's summary lists its top 10 unless asked for all: not part of equality)
    kernel_totals: tuple[tuple[str, int, float], ...] = field(default=(), compare=False)

    @functools.cached_property
    def categories(self) -> tuple[CategoryStat, ...]:
        return tuple(CategoryStat(*row) for row in self.category_rows)

    @functools.cached_property
    def top_kernels(self) -> tuple[KernelStat, ...]:
        return tuple(KernelStat(*row) for row in self.kernel_rows)

    @functools.cached_property
    def idle_gaps(self) -> tuple[IdleGap, ...]:
        return tuple(IdleGap(*row) for row in self.gap_rows)

    @property
    def top_kernel(self) -> Optional[str]:
        return self.kernel_rows[0][0] if self.kernel_rows else None

    def category_pct_of_window(self, name: str) -> float:
        return next((row[3] for row in self.category_rows if row[0] == name), 0.0)

    def category_times_us(self) -> dict[str, float]:
        """Each category's time in µs."""
        return {row[0]: row[1] for row in self.category_rows}

    @classmethod
    def from_summary(cls, summary: TraceSummary) -> "WindowStats":
        """The same figures from a full analysis (a window profiled on its own)."""
        return cls(
            window=summary.window,
            busy_us=summary.busy_us,
            busy_pct=summary.busy_pct,
            mm_conv_pct=summary.mm_conv_pct,
            kernel_count=summary.kernel_count,
            event_count=summary.event_count,
            devices=tuple((d.device, d.busy_us) for d in summary.devices),
            category_rows=tuple((c.name, c.time_us, c.share_of_busy, c.pct_of_window, c.count)
                                for c in summary.categories),
            kernel_rows=tuple((k.name, k.category, k.count, k.total_us, k.mean_us, k.pct_of_window)
                              for k in summary.top_kernels[:TOP_KERNELS]),
            gap_rows=tuple((g.device, g.start_us, g.dur_us) for g in summary.idle_gaps[:IDLE_GAPS]),
            kernel_totals=tuple((k.name, k.count, k.total_us) for k in summary.top_kernels),
        )


def assign_windows(starts: np.ndarray, ends: np.ndarray, window_starts: np.ndarray,
                   window_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(event index, window index) for every event and every window it belongs to.

    An event usually belongs to one window or none; one that spans a gap between windows is
    listed once per window it overlaps.
    """
    if starts.size == 0 or window_starts.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    if (window_ends < window_starts).any() or (window_starts[1:] < window_ends[:-1]).any():
        raise ValueError("windows must be sorted, each ending at or after its start, and must not overlap")
    first = np.searchsorted(window_ends, starts, side="left")  # first window ending at or after the start
    last = np.searchsorted(window_starts, ends, side="right") - 1  # last window starting at or before the end
    counts = np.maximum(last - first + 1, 0)
    events = np.repeat(np.arange(starts.size, dtype=np.int64), counts)
    offsets = np.arange(events.size, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    windows = np.repeat(first, counts) + offsets
    # an event of positive length that ends exactly where a window starts is not in it
    touching = (ends[events] == window_starts[windows]) & (ends[events] > starts[events])
    return events[~touching], windows[~touching]


def _gaps(blocks: tuple[np.ndarray, np.ndarray, np.ndarray],
          window_lengths: np.ndarray, n_devs: int) -> tuple[np.ndarray, ...]:
    """The idle gaps of each (window, device) segment of ``blocks`` (``window × n_devs + device``):
    before each block and after the last, as analyze counts them; (window, device, place within
    the device, start, length), gaps of zero length left out."""
    seg, start, end = blocks
    if seg.size == 0:
        return tuple(np.zeros(0, dtype=np.int64) for _ in range(5))
    first = np.concatenate(([True], seg[1:] != seg[:-1]))
    last = np.concatenate((seg[1:] != seg[:-1], [True]))
    place = np.arange(seg.size) - np.maximum.accumulate(np.where(first, np.arange(seg.size), 0))
    before_start = np.where(first, 0, np.concatenate(([0], end[:-1])))
    window = seg // n_devs
    g_seg = np.concatenate((seg, seg[last]))
    g_place = np.concatenate((place, place[last] + 1))
    g_start = np.concatenate((before_start, end[last]))
    g_len = np.concatenate((start - before_start, window_lengths[window[last]] - end[last]))
    keep = g_len > 0
    return g_seg[keep] // n_devs, g_seg[keep] % n_devs, g_place[keep], g_start[keep], g_len[keep]


def _chunks(window_lengths: np.ndarray, rows_per_window: int) -> list[tuple[int, int]]:
    """Window ranges small enough that segment offsets stay within int64."""
    n = window_lengths.size
    if n == 0 or n * rows_per_window * (int(window_lengths.max()) + 1) < _OFFSET_LIMIT:
        return [(0, n)]
    bounds, begin = [], 0
    while begin < n:
        end, longest = begin, 0
        while end < n:
            longest = max(longest, int(window_lengths[end]))
            if (end - begin + 1) * rows_per_window * (longest + 1) >= _OFFSET_LIMIT and end > begin:
                break
            end += 1
        bounds.append((begin, end))
        begin = end
    return bounds


def window_stats(columns: GpuColumns, windows: Sequence[Window],
                 classifier: Optional[KernelClassifier] = None) -> list[WindowStats]:
    """Per-window figures for ``windows`` (sorted, not overlapping) over ``columns``."""
    classifier = classifier or KernelClassifier()
    if not windows:
        return []
    w_start = np.asarray([w.start_ns for w in windows], dtype=np.int64)
    w_end = np.asarray([w.end_ns for w in windows], dtype=np.int64)
    starts = np.asarray(columns.starts_ns, dtype=np.int64)
    ends = starts + np.asarray(columns.durs_ns, dtype=np.int64)
    event, win = assign_windows(starts, ends, w_start, w_end)

    pair_codes, key_names, key_kinds = kernel_keys(columns.names, columns.kinds)
    key_cats = [classifier.classify(name, kind) for name, kind in zip(key_names, key_kinds)]
    categories_seen = list(dict.fromkeys(key_cats))
    cat_of_key = np.asarray([categories_seen.index(c) for c in key_cats], dtype=np.int64)
    is_kernel_key = np.asarray([k == KERNEL_KIND for k in key_kinds], dtype=bool)
    is_mm_cat = np.asarray([c in MM_CONV_CATEGORIES for c in categories_seen], dtype=bool)
    device_codes, device_values = column_codes(columns.devices)
    text_of_code, device_names = _text_code_table(device_values)
    devices = text_of_code[np.asarray(device_codes, dtype=np.int64)] if len(columns) else np.zeros(0, np.int64)

    keys = pair_codes[event] if event.size else np.zeros(0, dtype=np.int64)
    cats = cat_of_key[keys] if keys.size else keys
    devs = devices[event] if event.size else np.zeros(0, dtype=np.int64)
    rel_s = np.maximum(starts[event], w_start[win]) - w_start[win]
    rel_e = np.minimum(ends[event], w_end[win]) - w_start[win]
    n_windows, n_devs, n_cats = len(windows), max(1, len(device_names)), max(1, len(categories_seen))
    lengths = w_end - w_start

    dev_busy = np.zeros((n_windows, n_devs), dtype=np.int64)
    cat_ns = np.zeros((n_windows, n_cats), dtype=np.int64)
    mm_ns = np.zeros(n_windows, dtype=np.int64)
    gap_parts = []
    for begin, end in _chunks(lengths, n_devs * n_cats):
        rows = (win >= begin) & (win < end)
        span = int(lengths[begin:end].max()) if end > begin else 0
        w, d, c, s, e = win[rows] - begin, devs[rows], cats[rows], rel_s[rows], rel_e[rows]
        blocks = segment_blocks(w * n_devs + d, s, e, span)
        ids, total = segment_unions(blocks)
        dev_busy[begin + ids // n_devs, ids % n_devs] = total
        gap_w, *gap_rest = _gaps(blocks, lengths[begin:end], n_devs)
        gap_parts.append((gap_w + begin, *gap_rest))
        ids, total = segment_unions(segment_blocks((w * n_devs + d) * n_cats + c, s, e, span))
        np.add.at(cat_ns, (begin + ids // (n_devs * n_cats), ids % n_cats), total)
        mm = is_mm_cat[c] if c.size else np.zeros(0, dtype=bool)
        ids, total = segment_unions(segment_blocks(w[mm] * n_devs + d[mm], s[mm], e[mm], span))
        np.add.at(mm_ns, begin + ids // n_devs, total)

    event_count = np.bincount(win, minlength=n_windows)
    kernel_count = np.bincount(win[is_kernel_key[keys]], minlength=n_windows) if keys.size else event_count
    cat_count = np.bincount(win * n_cats + cats, minlength=n_windows * n_cats).reshape(n_windows, n_cats)
    present = np.bincount(win * n_devs + devs, minlength=n_windows * n_devs).reshape(n_windows, n_devs) > 0
    every = _top_keys(win, keys, rel_e - rel_s, key_names, n_windows, limit=None)
    top = [rows[:TOP_KERNELS] for rows in every]
    device_order = sorted(range(len(device_names)), key=lambda i: device_key(device_names[i]))
    gaps = _longest_gaps(gap_parts, device_order, n_windows)
    names_in_order = category_order(categories_seen)
    code_of = {name: i for i, name in enumerate(categories_seen)}

    # the per-window objects are built from Python ints (indexing numpy arrays one scalar at a time
    # cost more than the arithmetic)
    busy_rows, present_rows = dev_busy.tolist(), present.tolist()
    cat_ns_rows, cat_count_rows = cat_ns.tolist(), cat_count.tolist()
    mm_list, kernel_list, event_list = mm_ns.tolist(), kernel_count.tolist(), event_count.tolist()
    category_codes = [(name, code_of[name]) for name in names_in_order]
    window_ns = lengths.tolist()
    stats = []
    for i, window in enumerate(windows):
        busy_row, present_row, ns_row, count_row = busy_rows[i], present_rows[i], cat_ns_rows[i], cat_count_rows[i]
        busy = sum(busy_row)
        denominator = window_ns[i] * sum(present_row)
        stats.append(WindowStats(
            window, busy / 1000, pct(busy, denominator), pct(mm_list[i], denominator), kernel_list[i], event_list[i],
            tuple([(device_names[d], busy_row[d] / 1000) for d in device_order if present_row[d]]),
            tuple([(name, ns_row[code] / 1000, pct(ns_row[code], busy), pct(ns_row[code], denominator),
                    count_row[code]) for name, code in category_codes if count_row[code]]),
            tuple([(key_names[k], key_cats[k], count, total / 1000, total / 1000 / count, pct(total, denominator))
                   for k, total, count in top[i]]),
            tuple([(device_names[d], start / 1000, length / 1000) for d, start, length in gaps[i]]),
            tuple([(key_names[k], count, total / 1000) for k, total, count in every[i]]),
        ))
    return stats


def _text_code_table(values: Sequence[Any]) -> tuple[np.ndarray, list[str]]:
    """For each distinct id, the code of its text (device 0 and "0" are one device), and the texts."""
    texts = [str(v) for v in values]
    distinct = list(dict.fromkeys(texts))
    index = {t: i for i, t in enumerate(distinct)}
    return np.asarray([index[t] for t in texts], dtype=np.int64), distinct


def _top_keys(win: np.ndarray, keys: np.ndarray, lengths: np.ndarray, key_names: list[str],
              n_windows: int, limit: Optional[int] = TOP_KERNELS) -> list[list[tuple[int, int, int]]]:
    """Per window, the (name, kind) keys with the most clipped time, at most TOP_KERNELS, as
    (key, total ns, events); ties by name, then key, as analyze sorts them."""
    top: list[list[tuple[int, int, int]]] = [[] for _ in range(n_windows)]
    if keys.size == 0:
        return top
    n_keys = len(key_names)
    pair = win * n_keys + keys
    pairs, inverse, counts = np.unique(pair, return_inverse=True, return_counts=True)
    totals = np.zeros(pairs.size, dtype=np.int64)
    np.add.at(totals, inverse, lengths)
    name_rank = np.argsort(np.argsort(np.asarray(key_names, dtype=object), kind="stable"), kind="stable")
    pair_win, pair_key = pairs // n_keys, pairs % n_keys
    order = np.lexsort((pair_key, name_rank[pair_key], -totals, pair_win))
    _append_firsts(top, pair_win[order], (pair_key[order], totals[order], counts[order]),
                   pairs.size if limit is None else limit)
    return top


def _longest_gaps(parts: list[tuple[np.ndarray, ...]], device_order: list[int],
                  n_windows: int) -> list[list[tuple[int, int, int]]]:
    """Per window, its longest idle gaps, at most IDLE_GAPS, as (device code, start, length);
    ties in device order, then in time order, as analyze picks them."""
    gaps: list[list[tuple[int, int, int]]] = [[] for _ in range(n_windows)]
    window, device, place, start, length = (np.concatenate(column) for column in zip(*parts))
    if window.size == 0:
        return gaps
    rank = np.zeros(max(device_order, default=0) + 1, dtype=np.int64)
    rank[device_order] = np.arange(len(device_order))
    order = np.lexsort((place, rank[device], -length, window))
    _append_firsts(gaps, window[order], (device[order], start[order], length[order]), IDLE_GAPS)
    return gaps


def _append_firsts(into: list[list[Any]], window_of_row: np.ndarray, columns: tuple[np.ndarray, ...],
                   limit: int) -> None:
    """Append to ``into[w]`` the first ``limit`` rows of each window, as tuples of ``columns``'
    values (rows sorted by window; only the kept rows become Python objects)."""
    keep = np.arange(window_of_row.size) - np.searchsorted(window_of_row, window_of_row, side="left") < limit
    for w, *row in zip(window_of_row[keep].tolist(), *(column[keep].tolist() for column in columns)):
        into[w].append(tuple(row))
