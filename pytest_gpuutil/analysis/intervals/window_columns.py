"""Many windows' figures at once, as columns: the numbers behind :func:`~pytest_gpuutil.analysis.windows.window_stats`.

One pass of array operations over all events of a flush, whatever the number of windows: the
events are put in (window, device, start) order once (a capture's events mostly come in that order
already: then no sort at all), and every union is a segmented union over rows in that order
(busy per device, per category, mm/conv), every count a bincount, every ranking (top kernels,
longest idle gaps) one sort of the few rows that can make it. Each window's rows (categories,
kernels, gaps) are made from arrays in one ``zip`` for all windows and cut per window by slices:
no Python loop per window or per category. The definitions are ``analyze``'s, to the nanosecond
(see :mod:`~pytest_gpuutil.analysis.windows`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from pytest_gpuutil.analysis.classify import MM_CONV_CATEGORIES, KernelClassifier, category_order
from pytest_gpuutil.analysis.grouping import column_codes, kernel_keys
from pytest_gpuutil.analysis.stats import device_key
from pytest_gpuutil.analysis.summary import KERNEL_KIND
from pytest_gpuutil.traces.model import GpuColumns

#: what a window keeps of its kernels and idle gaps (analyze's ``top`` and ``gap_count``)
TOP_KERNELS = 5
IDLE_GAPS = 3
#: int64 headroom for the per-segment offsets of the segmented union
_OFFSET_LIMIT = 1 << 62
_EMPTY = np.zeros(0, dtype=np.int64)
_NEVER = np.iinfo(np.int64).max
#: the numbers _figures.rows turns into Python floats and ints itself
_ROW_DTYPES = (np.dtype(np.float64), np.dtype(np.int64))

try:  # the rows in C (analysis/intervals/_figures.c, built at install where a C compiler is found)
    from pytest_gpuutil.analysis.intervals import _figures as _C_FIGURES_MODULE

    _C_ROWS = _C_FIGURES_MODULE if hasattr(_C_FIGURES_MODULE, "rows") else None
except ImportError:  # pragma: no cover - the same rows from tolist() and zip
    _C_ROWS = None


@dataclass(frozen=True)
class WindowFigures:
    """Per window (lists indexed like the windows), the values of a ``WindowStats`` after its window."""

    busy_us: list[float]
    busy_pct: list[float]
    mm_conv_pct: list[float]
    kernel_count: list[int]
    event_count: list[int]
    devices: list[tuple[tuple[str, float], ...]]
    category_rows: list[tuple[tuple[str, float, float, float, int], ...]]
    kernel_rows: list[tuple[tuple[str, str, int, float, float, float], ...]]
    gap_rows: list[tuple[tuple[str, float, float], ...]]
    kernel_totals: list[tuple[tuple[str, int, float], ...]]
    #: (event index, window index) of every event in every window it overlaps (``assign``)
    assigned: tuple[np.ndarray, np.ndarray] = (_EMPTY, _EMPTY)
    #: the categories in category order, and per window (rows) and category (columns) the union of
    #: their time (ns) and their event count: the columns behind ``category_rows``
    category_names: tuple[str, ...] = ()
    category_ns: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64), compare=False)
    category_count: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64), compare=False)
    #: ``busy_pct``, ``event_count`` and ``kernel_count`` as the arrays their lists were made from (float64,
    #: int64: the findings' gates read them as columns, not from the lists again)
    columns: tuple[np.ndarray, np.ndarray, np.ndarray] = field(default=(_EMPTY, _EMPTY, _EMPTY), compare=False)


def assign(starts: np.ndarray, ends: np.ndarray, window_starts: np.ndarray,
           window_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(event index, window index) for every event and every window it overlaps (see ``assign_windows``)."""
    if starts.size == 0 or window_starts.size == 0:
        return _EMPTY, _EMPTY
    if (window_ends < window_starts).any() or (window_starts[1:] < window_ends[:-1]).any():
        raise ValueError("windows must be sorted, each ending at or after its start, and must not overlap")
    n_windows = window_starts.size
    first = _first_windows(starts, window_ends)  # first window ending at or after the start
    at = np.minimum(first, n_windows - 1)
    # the usual case: no event reaches the window after its first (then no second search)
    if not (ends >= np.concatenate((window_starts[1:], [_NEVER]))[at]).any():
        start_of_first = window_starts[at]
        # in the first window: it starts by the event's end, except that an event of positive
        # length that ends exactly where a window starts is not in it
        inside = (first < n_windows) & (ends >= start_of_first) & ~((ends == start_of_first) & (ends > starts))
        events = inside.nonzero()[0]
        return events, first[events]
    last = window_starts.searchsorted(ends, side="right") - 1  # last window starting at or before the end
    counts = np.maximum(last - first + 1, 0)
    events = np.repeat(np.arange(starts.size, dtype=np.int64), counts)
    offsets = np.arange(events.size, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    windows = np.repeat(first, counts) + offsets
    touching = (ends[events] == window_starts[windows]) & (ends[events] > starts[events])
    return events[~touching], windows[~touching]


def _first_windows(starts: np.ndarray, window_ends: np.ndarray) -> np.ndarray:
    """For each event, the first window ending at or after its start (``searchsorted``); where the
    events come in start order (a capture's mostly do), from the windows' places among the starts."""
    if starts.size > 2 * window_ends.size and (starts[1:] >= starts[:-1]).all():
        reached = starts.searchsorted(window_ends, side="right")  # events starting by each window's end
        edges = np.concatenate(([0], reached, [starts.size]))  # np.diff(reached, prepend=0, append=starts.size)
        return np.repeat(np.arange(window_ends.size + 1, dtype=np.int64), edges[1:] - edges[:-1])
    return window_ends.searchsorted(starts, side="left")


def figures(columns: GpuColumns, w_start: np.ndarray, w_end: np.ndarray,
            classifier: KernelClassifier) -> WindowFigures:
    """Each window's figures over ``columns`` (windows sorted, not overlapping)."""
    n_windows = int(w_start.size)
    starts = np.asarray(columns.starts_ns, dtype=np.int64)
    ends = starts + np.asarray(columns.durs_ns, dtype=np.int64)
    event, win = assigned = assign(starts, ends, w_start, w_end)

    pair_codes, key_names, key_kinds = kernel_keys(columns.names, columns.kinds)
    key_cats = [classifier.classify(name, kind) for name, kind in zip(key_names, key_kinds)]  # once a (name, kind)
    categories_seen = list(dict.fromkeys(key_cats))
    code_of_category = {name: i for i, name in enumerate(categories_seen)}
    cat_of_key = np.asarray([code_of_category[c] for c in key_cats], dtype=np.int64)
    is_kernel_key = np.asarray([k == KERNEL_KIND for k in key_kinds], dtype=bool)
    is_mm_cat = np.asarray([c in MM_CONV_CATEGORIES for c in categories_seen], dtype=bool)
    devices, device_names = _device_codes(columns.devices, len(columns))

    every_event = event.size == starts.size and event.size > 0 and int(event[-1]) == event.size - 1 \
        and bool((event[1:] > event[:-1]).all())  # each event once, in order: no gathers

    def of_rows(column: np.ndarray) -> np.ndarray:
        return column if every_event else column[event]

    keys = np.asarray(of_rows(pair_codes), dtype=np.int64) if event.size else _EMPTY
    n_devs, n_cats = max(1, len(device_names)), max(1, len(categories_seen))
    # one category (a launch loop's flush): every row's code is 0, no gather
    cats = (cat_of_key[keys] if n_cats > 1 else np.zeros(keys.size, dtype=np.int64)) if keys.size else _EMPTY
    devs = of_rows(devices) if event.size else _EMPTY
    by_window = _rows_by_window(win, n_windows)  # each window's row count where rows come by window, else None
    row_start, row_end = _per_row(w_start, win, by_window), _per_row(w_end, win, by_window)
    rel_s = np.maximum(of_rows(starts), row_start) - row_start
    rel_e = np.minimum(of_rows(ends), row_end) - row_start
    # (window, device, start) order, once: the capture's events mostly come so (then no sort)
    dev_seg = win * n_devs + devs if n_devs > 1 else win  # one device: every code is 0
    order = _order(dev_seg, rel_s)
    if order is not None:
        win, keys, cats, devs, rel_s, rel_e, dev_seg = (a[order] for a in (win, keys, cats, devs, rel_s, rel_e, dev_seg))
    lengths = w_end - w_start

    dev_busy = np.zeros(n_windows * n_devs, dtype=np.int64)
    cat_ns = np.zeros(n_windows * n_cats, dtype=np.int64)
    mm_ns = np.zeros(n_windows, dtype=np.int64)
    gap_parts = []
    for begin, end in _chunks(lengths, n_devs * n_cats):
        rows = slice(*win.searchsorted((begin, end)).tolist())  # rows sorted by window
        span = int(lengths[begin:end].max()) if end > begin else 0
        offset = begin * n_devs
        seg, s, e, c = dev_seg[rows] - offset, rel_s[rows], rel_e[rows], cats[rows]
        blocks = sorted_blocks(seg, s, e, span)
        ids, total = block_unions(blocks)
        dev_busy[offset + ids] = total
        gap_w, *gap_rest = _gaps(blocks, lengths[begin:end], n_devs)
        gap_parts.append((gap_w + begin, *gap_rest))
        if n_cats == 1:  # one category: its unions are the devices'
            cat_ids = ids
        else:
            cat_seg = seg * n_cats + c
            by_cat = _order(cat_seg, None)
            cat_blocks = sorted_blocks(cat_seg, s, e, span) if by_cat is None else \
                sorted_blocks(cat_seg[by_cat], s[by_cat], e[by_cat], span)
            cat_ids, total = block_unions(cat_blocks)
        # a (window, category) cell sums its devices' unions
        np.add.at(cat_ns, (cat_ids // (n_devs * n_cats) + begin) * n_cats + cat_ids % n_cats, total)
        mm = is_mm_cat[c] if c.size and is_mm_cat.any() else np.zeros(0, dtype=bool)
        if mm.any():  # a subset of rows in order is in order
            ids, total = block_unions(sorted_blocks(seg[mm], s[mm], e[mm], span))
            np.add.at(mm_ns, begin + ids // n_devs, total)

    dev_busy, cat_ns = dev_busy.reshape(n_windows, n_devs), cat_ns.reshape(n_windows, n_cats)
    event_count = np.bincount(win, minlength=n_windows) if by_window is None else by_window  # the same counts
    kernel_count = (np.bincount(win[is_kernel_key[keys]], minlength=n_windows)
                    if keys.size and not is_kernel_key.all() else event_count)  # every key a kernel's: the events
    cat_count = np.bincount(win * n_cats + cats, minlength=n_windows * n_cats).reshape(n_windows, n_cats)
    present = np.bincount(win * n_devs + devs, minlength=n_windows * n_devs).reshape(n_windows, n_devs) > 0
    busy = dev_busy.sum(axis=1)
    denominator = lengths * present.sum(axis=1)
    device_order = sorted(range(len(device_names)), key=lambda i: device_key(device_names[i]))
    names_in_order = category_order(categories_seen)
    codes_in_order = [code_of_category[name] for name in names_in_order]
    category_ns, category_count = cat_ns[:, codes_in_order], cat_count[:, codes_in_order]
    busy_pct = _pct(busy, denominator)
    event_count, kernel_count = event_count.astype(np.int64, copy=False), kernel_count.astype(np.int64, copy=False)
    return WindowFigures(
        busy_us=(busy / 1000).tolist(),
        busy_pct=busy_pct.tolist(),
        mm_conv_pct=_pct(mm_ns, denominator).tolist(),
        kernel_count=kernel_count.tolist(),
        event_count=event_count.tolist(),
        devices=_device_rows(dev_busy, present, device_order, device_names),
        category_rows=_category_rows(category_ns, category_count, busy, denominator, names_in_order),
        **_kernel_rows(win, keys, rel_e - rel_s, key_names, key_cats, denominator, n_windows),
        gap_rows=_gap_rows(gap_parts, device_order, device_names, n_windows),
        assigned=assigned,
        category_names=tuple(names_in_order),
        category_ns=category_ns,
        category_count=category_count,
        columns=(busy_pct, event_count, kernel_count),
    )


def _order(segments: np.ndarray, starts: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """The stable order of the rows by (segment, start), or None where they are in it already."""
    if segments.size < 2:
        return None
    step = segments[1:] - segments[:-1]
    if starts is None:
        if (step >= 0).all():
            return None
        return segments.argsort(kind="stable")
    if ((step > 0) | ((step == 0) & (starts[1:] >= starts[:-1]))).all():
        return None
    return np.lexsort((starts, segments))


def _stable_order(values: np.ndarray, bound: int) -> np.ndarray:
    """``np.argsort(values, kind="stable")`` of ints in ``[0, bound)``: the same order, by numpy's radix sort
    where they fit 16 bits (a flush's (window, key) codes mostly do), else its timsort."""
    if bound <= 1 << 16:
        return values.astype(np.uint16).argsort(kind="stable")
    return values.argsort(kind="stable")


def _most_first(window: np.ndarray, amount: np.ndarray, n_windows: int, ties: Optional[np.ndarray] = None,
                n_ties: int = 1) -> np.ndarray:
    """``np.lexsort((ties, -amount, window))`` (``ties`` ints in ``[0, n_ties)``; without them
    ``np.lexsort((-amount, window))``): by window, the most first, then by ``ties``, then as they came. One
    stable sort of the three as one int64 where they fit (each a digit of its own range), else lexsort's."""
    if amount.size:
        low, high = int(amount.min()), int(amount.max())
        span = high - low + 1
        if n_windows * span * n_ties < 1 << 62:
            composite = (window * span + (high - amount)) * n_ties
            if ties is not None:
                composite += ties
            return composite.argsort(kind="stable")
    return np.lexsort((-amount, window) if ties is None else (ties, -amount, window))


def _rows_by_window(window_of_row: np.ndarray, n_windows: int) -> Optional[np.ndarray]:
    """How many rows each window has, where the rows come by window (a capture's do) and outnumber the
    windows (then a window's values are repeated over its rows); else None."""
    if window_of_row.size > 2 * n_windows and (window_of_row[1:] >= window_of_row[:-1]).all():
        return np.bincount(window_of_row, minlength=n_windows)
    return None


def _per_row(values: np.ndarray, window_of_row: np.ndarray, by_window: Optional[np.ndarray]) -> np.ndarray:
    """``values[window_of_row]``: each window's value repeated over its rows where they come by window
    (``by_window``: their counts; a fill, not a gather)."""
    return values[window_of_row] if by_window is None else np.repeat(values, by_window)


def sorted_blocks(seg: np.ndarray, s: np.ndarray, e: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of rows already sorted by (segment, start): the union of each segment's intervals as
    (segment, start, end) blocks, with one running maximum over all rows
    (each segment's ends lifted by its rank × (span + 1), so no end carries into the next segment)."""
    if seg.size == 0:
        return _EMPTY, _EMPTY, _EMPTY
    new_segment = np.empty(seg.size, dtype=bool)
    new_segment[0] = True
    np.not_equal(seg[1:], seg[:-1], out=new_segment[1:])
    rank = new_segment.cumsum() - 1
    lift = rank * (span + 1)
    reach = np.maximum.accumulate(e + lift) - lift
    new_block = new_segment.copy()
    new_block[1:] |= s[1:] > reach[:-1]
    block_first = new_block.nonzero()[0]
    if block_first.size == seg.size:  # every row a block of its own (a launch loop's tiny kernels): no gathers
        return seg, s, reach
    block_last = np.empty_like(block_first)
    block_last[:-1] = block_first[1:] - 1
    block_last[-1] = seg.size - 1
    return seg[block_first], s[block_first], reach[block_last]


def block_unions(blocks: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Union length of each segment of :func:`sorted_blocks`: (segment ids ascending, lengths)."""
    seg, start, end = blocks
    if seg.size == 0:
        return seg, seg
    first = np.concatenate(([True], seg[1:] != seg[:-1])).nonzero()[0]
    return seg[first], np.add.reduceat(end - start, first)


def _pct(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """``stats.pct`` of each pair (arrays of one shape): the same float64 operations (100.0 × part, then /
    whole), 0 where whole is 0 (divided only where whole is positive, into zeros: no second where)."""
    out = np.zeros(whole.shape, dtype=np.float64)
    return np.divide(100.0 * part, whole, out=out, where=whole > 0)


def _device_codes(ids: Any, n: int) -> tuple[np.ndarray, list[str]]:
    """Each event's device code by the text of its id (device 0 and "0" are one device), and the texts."""
    if n and getattr(ids, "dtype", None) is not None and ids.dtype.kind in "iu" and ids.ndim == 1 \
            and ids.min() == ids.max():  # one device (the usual case): no sort
        return np.zeros(n, dtype=np.int64), [str(int(ids[0]))]
    codes, values = column_codes(ids)
    texts = [str(v) for v in values]
    distinct = list(dict.fromkeys(texts))
    index = {t: i for i, t in enumerate(distinct)}
    text_of_code = np.asarray([index[t] for t in texts], dtype=np.int64)
    return (text_of_code[np.asarray(codes, dtype=np.int64)] if n else _EMPTY), distinct


def row_bounds(window_of_row: np.ndarray, n_windows: int) -> np.ndarray:
    """Where each window's rows begin, and the end, of rows sorted by window (``searchsorted(window_of_row,
    arange(n_windows + 1))``: from the rows' counts, one pass, where the windows are not few against the rows;
    else that search, a few steps a window)."""
    if window_of_row.size > 16 * (n_windows + 1):  # a launch-bound flush: thousands of rows a window
        return window_of_row.searchsorted(np.arange(n_windows + 1, dtype=np.int64))
    bounds = np.zeros(n_windows + 1, dtype=np.int64)
    np.bincount(window_of_row, minlength=n_windows).cumsum(out=bounds[1:])
    return bounds


def _firsts(window_of_row: np.ndarray, n_windows: int, limit: int) -> np.ndarray:
    """Which rows (sorted by window) are among the first ``limit`` of their window."""
    group_start = row_bounds(window_of_row, n_windows)
    return np.arange(window_of_row.size) - group_start[window_of_row] < limit


def _cut(columns: tuple[Any, ...], window_of_row: np.ndarray, n_windows: int) -> list[tuple[Any, ...]]:
    """The rows of ``columns`` (lists, or numpy arrays: their ``tolist()`` values), sorted by window, as
    one tuple of row tuples per window; in C where built (_figures.rows: no list per column, no zip)."""
    bounds = row_bounds(window_of_row, n_windows)
    columns = tuple(map(_row_column, columns))
    if _C_ROWS is not None:
        return _C_ROWS.rows(np.ascontiguousarray(bounds, dtype=np.int64), columns)
    edges = bounds.tolist()
    # a slice of a tuple is the window's tuple: one object a window, not a list and a tuple
    whole = tuple(zip(*(c if isinstance(c, list) else c.tolist() for c in columns)))
    return [whole[a:b] for a, b in zip(edges, edges[1:])]


def _row_column(values: Any) -> Any:
    """A column as _figures.rows reads it: a list, or contiguous float64 or int64 (anything else as its list)."""
    if isinstance(values, list):
        return values
    if values.dtype in _ROW_DTYPES:
        return np.ascontiguousarray(values)
    return values.tolist()


def _device_rows(dev_busy: np.ndarray, present: np.ndarray, device_order: list[int],
                 device_names: list[str]) -> list[tuple[Any, ...]]:
    if not device_order:
        return [()] * dev_busy.shape[0]
    ordered = present[:, device_order]
    w, d = ordered.nonzero()
    codes = np.asarray(device_order, dtype=np.int64)[d]
    names = np.asarray(device_names, dtype=object)[codes].tolist()
    return _cut((names, dev_busy[w, codes] / 1000), w, dev_busy.shape[0])


def _category_rows(cat_ns: np.ndarray, counts: np.ndarray, busy: np.ndarray, denominator: np.ndarray,
                   names_in_order: list[str]) -> list[tuple[Any, ...]]:
    """(name, time µs, % of busy, % of window, count) of each category with events, in category order
    (``cat_ns`` and ``counts``: a column per category, in that order)."""
    if not names_in_order:
        return [()] * cat_ns.shape[0]
    w, c = counts.nonzero()
    ns = cat_ns[w, c]
    names = np.asarray(names_in_order, dtype=object)[c].tolist()
    return _cut((names, ns / 1000, _pct(ns, busy[w]), _pct(ns, denominator[w]), counts[w, c]), w, cat_ns.shape[0])


def _kernel_rows(win: np.ndarray, keys: np.ndarray, lengths: np.ndarray, key_names: list[str], key_cats: list[str],
                 denominator: np.ndarray, n_windows: int) -> dict[str, list[tuple[Any, ...]]]:
    """Per window, every (name, kind) key's (name, count, total µs) with the most clipped time first
    (ties by name, then key, as analyze sorts them), and the first TOP_KERNELS of them as kernel rows."""
    if keys.size == 0:
        empty: list[tuple[Any, ...]] = [()] * n_windows
        return {"kernel_rows": empty, "kernel_totals": empty}
    n_keys = len(key_names)
    pair = win * n_keys + keys if n_keys > 1 else win
    if not (pair[1:] >= pair[:-1]).all():  # in (window, key) order already (a launch loop's): no sort
        by_pair = _stable_order(pair, n_windows * n_keys)
        pair, lengths = pair[by_pair], lengths[by_pair]
    first = np.concatenate(([True], pair[1:] != pair[:-1])).nonzero()[0]
    pairs = pair[first]
    totals = np.add.reduceat(lengths, first)
    counts = np.empty_like(first)  # np.diff(np.append(first, pair.size)), without their Python frames
    np.subtract(first[1:], first[:-1], out=counts[:-1])
    counts[-1] = pair.size - first[-1]
    name_rank = np.argsort(np.argsort(np.asarray(key_names, dtype=object), kind="stable"), kind="stable")
    pair_win, pair_key = pairs // n_keys, pairs % n_keys
    # (window, most time, name); a key's name rank is its own (a permutation), so no tie is left for the key
    order = _most_first(pair_win, totals, n_windows, name_rank[pair_key], n_keys)
    pair_win, pair_key, totals, counts = pair_win[order], pair_key[order], totals[order], counts[order]
    names = np.asarray(key_names, dtype=object)[pair_key].tolist()
    every = _cut((names, counts, totals / 1000), pair_win, n_windows)
    top = _firsts(pair_win, n_windows, TOP_KERNELS)
    t_totals, t_counts, t_win = totals[top], counts[top], pair_win[top]
    t_us = t_totals / 1000
    columns = (np.asarray(key_names, dtype=object)[pair_key[top]].tolist(),
               np.asarray(key_cats, dtype=object)[pair_key[top]].tolist(), t_counts, t_us, t_us / t_counts,
               _pct(t_totals, denominator[t_win]))
    return {"kernel_rows": _cut(columns, t_win, n_windows), "kernel_totals": every}


def _gaps(blocks: tuple[np.ndarray, np.ndarray, np.ndarray],
          window_lengths: np.ndarray, n_devs: int) -> tuple[np.ndarray, ...]:
    """The idle gaps of each (window, device) segment of ``blocks`` (``window × n_devs + device``):
    before each block and after the last, as analyze counts them; (window, device, place within
    the device, start, length), gaps of zero length left out. With one device the places are not
    needed (the gaps of a window are in place order already: see _gap_rows) and come empty."""
    seg, start, end = blocks
    if seg.size == 0:
        return (_EMPTY,) * 5
    changes = seg[1:] != seg[:-1]
    first = np.concatenate(([True], changes))
    last = np.concatenate((changes, [True]))
    before_start = np.concatenate(([0], end[:-1]))
    before_start[first] = 0
    window = seg // n_devs if n_devs > 1 else seg
    g_seg = np.concatenate((seg, seg[last]))
    g_start = np.concatenate((before_start, end[last]))
    g_len = np.concatenate((start - before_start, window_lengths[window[last]] - end[last]))
    keep = g_len > 0
    if n_devs == 1:  # one device: the segment is the window, the device 0
        kept = g_seg[keep]
        return kept, np.zeros(kept.size, dtype=np.int64), _EMPTY, g_start[keep], g_len[keep]
    place = np.arange(seg.size) - np.maximum.accumulate(np.where(first, np.arange(seg.size), 0))
    g_place = np.concatenate((place, place[last] + 1))
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


def _gap_rows(parts: list[tuple[np.ndarray, ...]], device_order: list[int], device_names: list[str],
              n_windows: int) -> list[tuple[Any, ...]]:
    """Per window, its longest idle gaps, at most IDLE_GAPS, as (device, start µs, length µs);
    ties in device order, then in time order, as analyze picks them."""
    window, device, place, start, length = parts[0] if len(parts) == 1 else (np.concatenate(column)
                                                                            for column in zip(*parts))
    if window.size == 0:
        return [()] * n_windows
    rank = np.zeros(max(device_order, default=0) + 1, dtype=np.int64)
    rank[device_order] = np.arange(len(device_order))
    if len(device_order) <= 1:  # one device: rows of a window are in place order (the last gap comes last)
        order = _most_first(window, length, n_windows)
    else:
        order = np.lexsort((place, rank[device], -length, window))
    window = window[order]
    keep = _firsts(window, n_windows, IDLE_GAPS)
    kept = order[keep]
    names = np.asarray(device_names, dtype=object)[device[kept]].tolist()
    return _cut((names, start[kept] / 1000, length[kept] / 1000), window[keep], n_windows)


def stats_rows(figures_of: WindowFigures, windows: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
    """(window, then each field of ``WindowStats`` in its order) per window, as they are read (a zip: no
    list of the rows, and one tuple reused where each is unpacked before the next)."""
    f = figures_of
    return zip(windows, f.busy_us, f.busy_pct, f.mm_conv_pct, f.kernel_count, f.event_count, f.devices,
               f.category_rows, f.kernel_rows, f.gap_rows, f.kernel_totals)
