"""Analyse one trace: GPU busy time, categories, top kernels, idle gaps, overlap.

Definitions (the README repeats them):
- window: the profiler's own span (``cat: "Trace"``) when the trace has one, else first GPU start
  to last GPU end, unless the caller passes one (the plugin passes the test's call phase).
  GPU work is clipped to the window.
- busy: union of GPU-work intervals (kernels, memcpy, memset) on each device over all its
  streams, summed over devices. busy % = busy / (window × devices that did GPU work).
- a category's time is the union of its intervals per device (so overlapping streams do not
  double-count); its share of busy is that time over busy time.

The figures' records are in :mod:`~pytest_gpuutil.analysis.stats`; grouping events by code and the
unions of intervals, which :mod:`~pytest_gpuutil.analysis.windows` shares, in ``grouping``.
"""
from __future__ import annotations

import operator
from functools import partial
from heapq import nlargest
from itertools import compress

from pytest_gpuutil.analysis.classify import (
    COMMUNICATION,
    MM_CONV_CATEGORIES,
    OTHER,
    KernelClassifier,
    category_order,
)
from pytest_gpuutil.analysis.grouping import (
    blocks,
    kernel_keys,
    kernel_pairs,
    plain_blocks,
    plain_text_codes,
    plain_union_where,
    tally,
    text_codes,
    union_ns,
    unions_in_c,
    value_codes,
)
from pytest_gpuutil.analysis.stats import (
    CategoryStat,
    DeviceStat,
    IdleGap,
    KernelStat,
    Overlap,
    StreamStat,
    device_key,
    pct,
)
from pytest_gpuutil.analysis.window_facts import Timeline, timeline_of
from pytest_gpuutil.frozen import field, frozen, tuple_record
from pytest_gpuutil.traces.model import (
    GpuColumns,
    Trace,
    Window,
    use_plain_python,
)

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Any, Optional

    import numpy as np

KERNEL_KIND = "kernel"


@frozen
class TraceSummary:
    """What ``gpuutil analyze`` reports of one trace (see the module docstring for the definitions)."""

    path: str
    window: Window
    busy_us: float
    busy_pct: float
    mm_conv_us: float
    mm_conv_pct: float
    kernel_count: int
    event_count: int
    categories: tuple[CategoryStat, ...]
    devices: tuple[DeviceStat, ...]
    streams: tuple[StreamStat, ...]
    top_kernels: tuple[KernelStat, ...]
    idle_gaps: tuple[IdleGap, ...]
    overlap: Optional[Overlap]
    top_other: tuple[KernelStat, ...]
    #: busy and idle over time (before the first event, between, after the last), gaps, kernel
    #: lengths: what the findings rules read (not in to_dict)
    timeline: Optional[Timeline] = field(default=None, compare=False, repr=False)

    @property
    def window_us(self) -> float:
        return self.window.duration_ns / 1000

    @property
    def window_source(self) -> str:
        return self.window.source

    def category(self, name: str) -> Optional[CategoryStat]:
        return next((c for c in self.categories if c.name == name), None)

    def category_pct_of_window(self, name: str) -> float:
        stat = self.category(name)
        return stat.pct_of_window if stat else 0.0

    def category_times_us(self) -> dict[str, float]:
        """Each category's time in µs."""
        return {c.name: c.time_us for c in self.categories}

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``gpuutil analyze --format json``."""
        return {
            "path": self.path,
            "window_us": self.window_us,
            "window_source": self.window_source,
            "busy_us": self.busy_us,
            "busy_pct": self.busy_pct,
            "mm_conv_us": self.mm_conv_us,
            "mm_conv_pct": self.mm_conv_pct,
            "kernel_count": self.kernel_count,
            "event_count": self.event_count,
            "categories": {
                c.name: {
                    "time_us": c.time_us,
                    "share_of_busy": c.share_of_busy,
                    "pct_of_window": c.pct_of_window,
                    "count": c.count,
                }
                for c in self.categories
            },
            "devices": {
                d.device: {"busy_us": d.busy_us, "busy_pct": d.busy_pct, "event_count": d.event_count}
                for d in self.devices
            },
            "streams": [vars(s).copy() for s in self.streams],
            "top_kernels": [vars(k).copy() for k in self.top_kernels],
            "idle_gaps": [vars(g).copy() for g in self.idle_gaps],
            "overlap": vars(self.overlap).copy() if self.overlap else None,
            "top_other": [vars(k).copy() for k in self.top_other],
        }


def choose_window(trace: Trace, window: Optional[Window] = None) -> Window:
    """The explicit window, else the profiler span, else the GPU span, else an empty one."""
    if window is not None:
        return window
    if trace.profiler_span is not None:
        return Window(trace.profiler_span[0], trace.profiler_span[1], "profiler")
    cols = trace.columns
    if not len(cols):
        return Window(0, 0, "none")
    if _plain(cols):
        ends = map(int.__add__, cols.starts_ns, cols.durs_ns)
        return Window(min(cols.starts_ns), max(ends), "gpu_span")
    np = _numpy()
    starts = np.asarray(cols.starts_ns, dtype=np.int64)
    ends = starts + np.asarray(cols.durs_ns, dtype=np.int64)
    return Window(int(starts.min()), int(ends.max()), "gpu_span")


def _numpy():  # type: ignore[no-untyped-def]
    import numpy  # not for a small trace in a process without numpy (see use_plain_python)

    return numpy


def _plain(cols: GpuColumns) -> bool:
    """True when ``cols`` are analysed in plain Python: plain lists, few events, numpy not loaded."""
    return not hasattr(cols.starts_ns, "dtype") and not hasattr(cols.durs_ns, "dtype") and use_plain_python(len(cols))


@tuple_record
class _Figures:
    """What both ways of computing (numpy arrays, plain lists) give; ``analyze`` builds the summary."""

    busy_ns: int
    mm_conv_ns: int
    comm_ns: int
    compute_ns: int
    overlap_ns: int
    #: per category code
    cat_ns: list[int]
    cat_count: list[int]
    #: per (name, kind) pair: events and their total clipped time (ns, as floats)
    counts: list[int]
    totals: list[float]
    devices: list[DeviceStat]
    streams: list[StreamStat]
    idle: list[IdleGap]
    kernel_count: int
    event_count: int
    timeline: Timeline


def analyze(
    trace: Trace,
    classifier: Optional[KernelClassifier] = None,
    window: Optional[Window] = None,
    top: int = 10,
    gap_count: int = 5,
) -> TraceSummary:
    """Analyse ``trace`` over ``window`` (see the module docstring for the definitions).

    Small traces in a process without numpy are computed in plain Python, big ones with numpy;
    both give the same figures to the nanosecond (the tests compare them on every real trace).
    """
    classifier = classifier or KernelClassifier()
    win = choose_window(trace, window)
    cols = trace.columns
    plain = _plain(cols)
    # One classification per distinct (name, kind) pair; memcpy/memset go by kind.
    pair_codes, key_names, key_kinds = (kernel_pairs if plain else kernel_keys)(cols.names, cols.kinds)
    key_cats = [classifier.classify(name, kind) for name, kind in zip(key_names, key_kinds)]
    cat_of_key, categories_seen = value_codes(key_cats)
    figures = (_plain_figures if plain else _numpy_figures)(
        cols, win, pair_codes, key_kinds, cat_of_key, categories_seen, gap_count
    )
    return _summary(trace.path, win, figures, key_names, key_cats, categories_seen, top, gap_count)


def _summary(path: str, win: Window, f: _Figures, key_names: list[str], key_cats: list[str],
             categories_seen: list[str], top: int, gap_count: int) -> TraceSummary:
    """The summary's records from the figures."""
    denominator = win.duration_ns * len(f.devices)
    code_of = {name: i for i, name in enumerate(categories_seen)}
    categories = tuple(
        CategoryStat(
            name,
            f.cat_ns[code_of[name]] / 1000,
            pct(f.cat_ns[code_of[name]], f.busy_ns),
            pct(f.cat_ns[code_of[name]], denominator),
            f.cat_count[code_of[name]],
        )
        for name in category_order(n for n, i in code_of.items() if f.cat_count[i])
    )
    kernel_stats = sorted(
        (
            KernelStat(key_names[i], key_cats[i], f.counts[i], f.totals[i] / 1000,
                       f.totals[i] / 1000 / f.counts[i], pct(f.totals[i], denominator))
            for i in range(len(key_names))
            if f.counts[i]
        ),
        key=lambda k: (-k.total_us, k.name),
    )
    comm_code = code_of.get(COMMUNICATION, -1)
    overlap = (
        Overlap(f.comm_ns / 1000, f.compute_ns / 1000, f.overlap_ns / 1000, pct(f.overlap_ns, f.comm_ns))
        if comm_code >= 0 and f.cat_count[comm_code]
        else None
    )
    return TraceSummary(
        path=path,
        window=win,
        busy_us=f.busy_ns / 1000,
        busy_pct=pct(f.busy_ns, denominator),
        mm_conv_us=f.mm_conv_ns / 1000,
        mm_conv_pct=pct(f.mm_conv_ns, denominator),
        kernel_count=f.kernel_count,
        event_count=f.event_count,
        categories=categories,
        devices=tuple(f.devices),
        streams=tuple(f.streams),
        top_kernels=tuple(kernel_stats[:top]) if top > 0 else tuple(kernel_stats),
        idle_gaps=tuple(sorted(f.idle, key=lambda g: -g.dur_us)[:gap_count]),
        overlap=overlap,
        top_other=tuple(k for k in kernel_stats if k.category == OTHER)[:top],
        timeline=f.timeline,
    )


def _numpy_figures(cols: GpuColumns, win: Window, pair_codes: "np.ndarray", key_kinds: list[str],
                   cat_codes_of_key: list[int], categories_seen: list[str], gap_count: int) -> _Figures:
    """The figures over int64 arrays: what big traces and the live capture take."""
    np = _numpy()
    ws, we = win.start_ns, win.end_ns
    starts = np.asarray(cols.starts_ns, dtype=np.int64)
    durs = np.asarray(cols.durs_ns, dtype=np.int64)
    ends = starts + durs
    keep = ~((starts > we) | (ends < ws) | ((ends == ws) & (durs > 0)))
    keep_idx = np.flatnonzero(keep)
    starts = np.maximum(starts[keep_idx], ws)
    ends = np.minimum(ends[keep_idx], we)

    key_codes = pair_codes[keep_idx]
    cat_of_key = np.asarray(cat_codes_of_key, dtype=np.int64)
    cats = cat_of_key[key_codes] if key_codes.size else key_codes
    is_kernel_key = np.asarray([k == KERNEL_KIND for k in key_kinds], dtype=bool)
    devs, device_names = text_codes(cols.devices, keep_idx)
    strs, stream_names = text_codes(cols.streams, keep_idx)

    mm_codes = [i for i, c in enumerate(categories_seen) if c in MM_CONV_CATEGORIES]
    is_mm = np.zeros(len(categories_seen), dtype=bool)
    is_mm[mm_codes] = True
    comm_code = categories_seen.index(COMMUNICATION) if COMMUNICATION in categories_seen else -1
    present_devices = sorted(set(devs.tolist()), key=lambda d: device_key(device_names[d]))

    busy_ns = mm_conv_ns = comm_ns = compute_ns = overlap_ns = 0
    cat_ns = [0] * len(categories_seen)
    device_stats = []
    stream_stats = []
    idle: list[IdleGap] = []
    device_blocks = []
    for d in present_devices:
        on_dev = np.flatnonzero(devs == d)
        order = on_dev[np.argsort(starts[on_dev], kind="stable")]
        s, e, c, st = starts[order], ends[order], cats[order], strs[order]
        block_starts, block_ends = blocks(s, e)
        dev_busy = int((block_ends - block_starts).sum())
        device_blocks.append((block_starts, block_ends, dev_busy))
        busy_ns += dev_busy
        name = device_names[d]
        device_stats.append(DeviceStat(name, dev_busy / 1000, pct(dev_busy, win.duration_ns), int(order.size)))
        gap_starts = np.concatenate(([ws], block_ends))
        gap_lengths = np.concatenate((block_starts, [we])) - gap_starts
        for i in np.argsort(-gap_lengths, kind="stable")[:gap_count].tolist():
            if gap_lengths[i] > 0:
                idle.append(IdleGap(name, (int(gap_starts[i]) - ws) / 1000, int(gap_lengths[i]) / 1000))
        for code in np.flatnonzero(np.bincount(c)).tolist():
            m = c == code
            cat_ns[code] += union_ns(s[m], e[m])
        if mm_codes:
            m = is_mm[c]
            mm_conv_ns += union_ns(s[m], e[m])
        if comm_code >= 0 and (c == comm_code).any():
            m = c == comm_code
            dev_comm = union_ns(s[m], e[m])
            dev_compute = union_ns(s[~m], e[~m])
            comm_ns += dev_comm
            compute_ns += dev_compute
            overlap_ns += dev_comm + dev_compute - dev_busy
        for code in sorted(np.flatnonzero(np.bincount(st)).tolist(), key=lambda x: stream_names[x]):
            m = st == code
            stream_stats.append(StreamStat(name, stream_names[code], union_ns(s[m], e[m]) / 1000, int(m.sum())))

    n_keys, n_cats = len(key_kinds), len(categories_seen)
    cat_count = np.bincount(cats, minlength=n_cats).tolist() if cats.size else [0] * n_cats
    counts = np.bincount(key_codes, minlength=n_keys).tolist() if key_codes.size else [0] * n_keys
    totals = (np.bincount(key_codes, weights=(ends - starts), minlength=n_keys).tolist() if key_codes.size
              else [0.0] * n_keys)
    kernel_count = int(is_kernel_key[key_codes].sum()) if key_codes.size else 0
    kernel_lengths = (ends - starts)[is_kernel_key[key_codes]] if key_codes.size else ends[:0]
    return _Figures(busy_ns, mm_conv_ns, comm_ns, compute_ns, overlap_ns, cat_ns, cat_count, counts, totals,
                    device_stats, stream_stats, idle, kernel_count, int(keep_idx.size),
                    timeline_of(win, device_blocks, kernel_lengths))


def _plain_figures(cols: GpuColumns, win: Window, pair_codes: list[int], key_kinds: list[str],
                   cat_of_key: list[int], categories_seen: list[str], gap_count: int) -> _Figures:
    """The figures of :func:`_numpy_figures` in plain Python, for small traces (no numpy import).

    The per-event work runs in C where it can: all of it in one call (analysis/intervals/_figures.c),
    else ``map``, ``sorted``, ``compress``, ``Counter``.
    """
    from pytest_gpuutil.analysis.intervals.event_figures import figures_in_c

    found = figures_in_c(cols, win, pair_codes, key_kinds, cat_of_key, categories_seen, gap_count)
    if found is not None:
        return _Figures._make(found)
    ws, we = win.start_ns, win.end_ns
    starts, durs = list(cols.starts_ns), list(cols.durs_ns)
    ends = list(map(operator.add, starts, durs))
    dev_codes, device_names = plain_text_codes(cols.devices)
    str_codes, stream_names = plain_text_codes(cols.streams)
    cat_of_event = list(map(cat_of_key.__getitem__, pair_codes))
    if starts and (min(starts) < ws or max(ends) > we):  # some event reaches outside the window
        kept = [i for i, (s, e, d) in enumerate(zip(starts, ends, durs))
                if not (s > we or e < ws or (e == ws and d > 0))]
        starts = [max(start, ws) for start in starts]
        ends = [min(end, we) for end in ends]
        keys = list(map(pair_codes.__getitem__, kept))
        lengths = list(map(operator.sub, map(ends.__getitem__, kept), map(starts.__getitem__, kept)))
    else:  # all inside: nothing clipped, nothing dropped (what the profiler's span gives)
        kept, keys, lengths = range(len(starts)), pair_codes, durs
    counts = tally(keys, len(key_kinds))
    totals = [0] * len(key_kinds)
    for key, length in zip(keys, lengths):
        totals[key] += length
    cat_count = [0] * len(categories_seen)  # per category from per (name, kind) pair: no second pass over the events
    for key, count in enumerate(counts):
        cat_count[cat_of_key[key]] += count
    is_kernel_key = [k == KERNEL_KIND for k in key_kinds]
    kernel_count = sum(compress(counts, is_kernel_key))

    by_device: dict[int, list[int]] = {}
    if len(device_names) == 1:  # one device: no need to sort the events out
        by_device = {0: list(kept)} if kept else {}
    else:
        for i in kept:
            on_device = by_device.get(dev_codes[i])
            if on_device is None:
                on_device = by_device[dev_codes[i]] = []
            on_device.append(i)
    mm_cats = {i for i, c in enumerate(categories_seen) if c in MM_CONV_CATEGORIES}
    comm_code = categories_seen.index(COMMUNICATION) if COMMUNICATION in categories_seen else -1
    busy_ns = mm_conv_ns = comm_ns = compute_ns = overlap_ns = 0
    cat_ns = [0] * len(categories_seen)
    device_stats = []
    stream_stats = []
    idle: list[IdleGap] = []
    device_blocks = []
    for d in sorted(by_device, key=lambda d: device_key(device_names[d])):
        order = sorted(by_device[d], key=starts.__getitem__)  # stable, as numpy's argsort(kind="stable")
        s, e = list(map(starts.__getitem__, order)), list(map(ends.__getitem__, order))
        c, st = list(map(cat_of_event.__getitem__, order)), list(map(str_codes.__getitem__, order))
        u = _device_unions(s, e, c, st, len(categories_seen), mm_cats, comm_code, len(stream_names))
        block_starts, block_ends, dev_busy = u.block_starts, u.block_ends, u.busy
        device_blocks.append((block_starts, block_ends, dev_busy))
        busy_ns += dev_busy
        name = device_names[d]
        device_stats.append(DeviceStat(name, dev_busy / 1000, pct(dev_busy, win.duration_ns), len(order)))
        gap_starts = [ws, *block_ends]
        gap_lengths = list(map(operator.sub, [*block_starts, we], gap_starts))
        for i in nlargest(gap_count, range(len(gap_lengths)), key=gap_lengths.__getitem__):  # stable, as sorted()
            if gap_lengths[i] > 0:
                idle.append(IdleGap(name, (gap_starts[i] - ws) / 1000, gap_lengths[i] / 1000))
        present_cats = set(c)
        for code in present_cats:
            cat_ns[code] += u.by_category[code]
        mm_conv_ns += u.mm_conv
        if comm_code in present_cats:
            comm_ns += u.comm
            compute_ns += u.compute
            overlap_ns += u.comm + u.compute - dev_busy
        stream_count = [len(st)] if len(stream_names) == 1 else tally(st, len(stream_names))
        for code in sorted(set(st), key=stream_names.__getitem__):
            union = dev_busy if stream_count[code] == len(st) else u.by_stream[code]
            stream_stats.append(StreamStat(name, stream_names[code], union / 1000, stream_count[code]))
    kernel_lengths = (list(lengths) if all(is_kernel_key) else
                      list(compress(lengths, map(is_kernel_key.__getitem__, keys))))
    return _Figures(busy_ns, mm_conv_ns, comm_ns, compute_ns, overlap_ns, cat_ns, cat_count, counts,
                    list(map(float, totals)), device_stats, stream_stats, idle, kernel_count, len(kept),
                    timeline_of(win, device_blocks, kernel_lengths))


@tuple_record
class _DeviceUnions:
    """One device's unions in the plain-Python analysis (nanoseconds)."""

    block_starts: list[int]
    block_ends: list[int]
    busy: int
    #: per category code (0 for a category not on the device)
    by_category: list[int]
    mm_conv: int
    comm: int
    compute: int
    #: per stream code; only where the device has several streams (else empty)
    by_stream: list[int]


def _device_unions(s: list[int], e: list[int], c: list[int], st: list[int], n_cats: int, mm_cats: set[int],
                   comm_code: int, n_streams: int) -> _DeviceUnions:
    """The unions of one device's events (sorted by start; ``c`` their category codes, ``st`` their
    stream codes): in C, one pass per code column (analysis/intervals/_unions.c); else the Python passes."""
    maps = [list(range(n_cats)), [int(k in mm_cats) for k in range(n_cats)],
            [int(k == comm_code) for k in range(n_cats)]]
    found = unions_in_c(s, e, c, maps)
    by_stream: list[int] = []
    if found is not None and n_streams > 1:
        in_streams = unions_in_c(s, e, st, [list(range(n_streams))])
        found = None if in_streams is None else found
        by_stream = in_streams[2][0] if in_streams is not None else []
    if found is not None:
        block_starts, block_ends, (by_category, mm, comm) = found
        busy = sum(block_ends) - sum(block_starts)
        return _DeviceUnions(block_starts, block_ends, busy, [*by_category, *[0] * (n_cats - len(by_category))],
                             mm[1] if len(mm) > 1 else 0, comm[1] if len(comm) > 1 else 0, comm[0] if comm else 0,
                             [*by_stream, *[0] * (n_streams - len(by_stream))] if by_stream else [])
    block_starts, block_ends = plain_blocks(s, e)
    busy = sum(block_ends) - sum(block_starts)
    # every event a block of its own (none overlaps or touches another): the union of any of
    # them is the sum of their lengths, summed in C instead of merged again
    union_where = _disjoint_sum(s, e) if len(block_starts) == len(s) else partial(plain_union_where, s, e)
    present = set(c)
    by_category = [0] * n_cats
    for code in present:
        by_category[code] = busy if len(present) == 1 else union_where(map(code.__eq__, c))
    mm_conv = union_where(map(mm_cats.__contains__, c)) if mm_cats else 0
    comm = compute = 0
    if comm_code in present:
        comm, compute = union_where(map(comm_code.__eq__, c)), union_where(map(comm_code.__ne__, c))
    if n_streams > 1:
        on_device = set(st)
        by_stream = [union_where(map(code.__eq__, st)) if code in on_device else 0 for code in range(n_streams)]
    return _DeviceUnions(block_starts, block_ends, busy, by_category, mm_conv, comm, compute, by_stream)


def _disjoint_sum(starts: list[int], ends: list[int]) -> Any:
    """The union of the chosen intervals (a mask, as :func:`plain_union_where` takes) where no two
    intervals overlap or touch: the sum of their lengths."""
    lengths = list(map(operator.sub, ends, starts))
    return lambda chosen: sum(compress(lengths, chosen))
