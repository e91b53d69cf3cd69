"""The plain-Python analysis of a trace's events (summary's ``_plain_figures``) in one C call.

``_figures.c`` clips the events to the window, counts and sums them by (name, kind) pair, sorts
each device's events by start and takes their unions (busy blocks, categories, matmul/conv,
communication, streams), the longest idle gaps and the kernels' lengths; this module turns its
integers into the records ``_plain_figures`` gives, to the nanosecond. None where the C part is
not built or refuses the values (not ints, past int64): the caller takes its Python passes.

The timeline's busy blocks and gaps come as ``array('q')`` (the same values as the Python passes'
lists and tuples): a big trace has one block and one gap per kernel, read by only a few
findings rules, in C (:func:`count_within`, :func:`lower_median`) or through ``tolist()``.
"""
from __future__ import annotations

from array import array
from itertools import compress

from pytest_gpuutil.analysis.classify import COMMUNICATION, MM_CONV_CATEGORIES
from pytest_gpuutil.analysis.grouping import plain_text_codes
from pytest_gpuutil.analysis.stats import DeviceStat, IdleGap, StreamStat, device_key, pct
from pytest_gpuutil.analysis.window_facts import timeline_of
from pytest_gpuutil.traces.model import GpuColumns, Window

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Any, Optional, Sequence

try:  # built at install where a C compiler is found (setup.py)
    from pytest_gpuutil.analysis.intervals import _figures as _C_FIGURES
except ImportError:  # pragma: no cover - summary's Python passes give the same figures
    _C_FIGURES = None

KERNEL_KIND = "kernel"
#: the category flags _figures.c reads
_MM_CONV, _COMMUNICATION = 1, 2


def figures_in_c(cols: GpuColumns, win: Window, pair_codes: Sequence[int], key_kinds: list[str],
                 cat_of_key: list[int], categories_seen: list[str], gap_count: int) -> Optional[tuple[Any, ...]]:
    """summary's ``_Figures`` fields of the events (``pair_codes``: each event's (name, kind) pair;
    ``cat_of_key``: each pair's category code), or None: then the Python passes."""
    if _C_FIGURES is None:
        return None
    dev_codes, device_names = plain_text_codes(cols.devices)
    str_codes, stream_names = plain_text_codes(cols.streams)
    is_kernel_key = [k == KERNEL_KIND for k in key_kinds]
    cat_flags = [_MM_CONV * (c in MM_CONV_CATEGORIES) + _COMMUNICATION * (c == COMMUNICATION) for c in categories_seen]
    ws, we = win.start_ns, win.end_ns
    try:
        kept, counts, totals, kernel_lengths, per_device, any_starts, any_ends = _C_FIGURES.figures(
            cols.starts_ns, cols.durs_ns, pair_codes, cat_of_key, is_kernel_key, dev_codes, len(device_names),
            str_codes, len(stream_names), cat_flags, ws, we, gap_count)
    except (TypeError, ValueError, OverflowError):
        return None
    comm_code = categories_seen.index(COMMUNICATION) if COMMUNICATION in categories_seen else -1
    cat_count = [0] * len(categories_seen)
    for key, count in enumerate(counts):
        cat_count[cat_of_key[key]] += count
    busy_ns = mm_conv_ns = comm_ns = compute_ns = overlap_ns = 0
    cat_ns = [0] * len(categories_seen)
    device_stats, stream_stats, idle, device_blocks = [], [], [], []
    present = [d for d, found in enumerate(per_device) if found is not None]
    for d in sorted(present, key=lambda d: device_key(device_names[d])):
        (events, block_starts, block_ends, busy, by_category, cat_events, mm_conv, comm, compute, stream_events,
         by_stream, idle_starts, idle_lengths, gaps, between) = per_device[d]
        device_blocks.append((_int64s(block_starts), _int64s(block_ends), busy, _int64s(gaps), between))
        busy_ns += busy
        name = device_names[d]
        device_stats.append(DeviceStat(name, busy / 1000, pct(busy, win.duration_ns), events))
        idle.extend(IdleGap(name, (start - ws) / 1000, length / 1000) for start, length in zip(idle_starts, idle_lengths))
        for code, count in enumerate(cat_events):
            if count:
                cat_ns[code] += by_category[code]
        mm_conv_ns += mm_conv
        if comm_code >= 0 and cat_events[comm_code]:
            comm_ns += comm
            compute_ns += compute
            overlap_ns += comm + compute - busy
        for code in sorted((c for c, n in enumerate(stream_events) if n), key=stream_names.__getitem__):
            stream_stats.append(StreamStat(name, stream_names[code], by_stream[code] / 1000, stream_events[code]))
    any_blocks = (_int64s(any_starts), _int64s(any_ends)) if any_starts is not None else None
    return (busy_ns, mm_conv_ns, comm_ns, compute_ns, overlap_ns, cat_ns, cat_count, counts, list(map(float, totals)),
            device_stats, stream_stats, idle, sum(compress(counts, is_kernel_key)), kept,
            timeline_of(win, device_blocks, kernel_lengths, any_blocks))


def _int64s(raw: bytes) -> "array[int]":
    """Native int64s as an ``array('q')`` (what the C part gives busy blocks and gaps as: no int
    object for each until one is read; ``tolist()`` gives a list; pickled and copied as a list is)."""
    values = array("q")
    values.frombytes(raw)
    return values


def count_within(values: Sequence[int], limit: float, strict: bool = False) -> Optional[int]:
    """How many of the ints ``values`` are at most ``limit`` (under it where ``strict``), counted in
    C; None where the C part is not built or refuses them (then ``sum(map(limit.__ge__, values))``)."""
    if _C_FIGURES is None or (isinstance(limit, int) and abs(limit) >= 2**53):  # not every such int is a double
        return None
    try:
        return _C_FIGURES.count_within(values, limit, strict)
    except (TypeError, ValueError, OverflowError):
        return None


def lower_median(values: Sequence[int], step: int) -> Optional[int]:
    """The lower median (the ⌈n/2⌉-th smallest) of ``values[::step]``, sorted in C; None as for
    :func:`count_within`."""
    if _C_FIGURES is None:
        return None
    try:
        return _C_FIGURES.lower_median(values, step)
    except (TypeError, ValueError, OverflowError):
        return None


def count_under(values: Sequence[int], limit: float, strict: bool) -> int:
    """How many of the ints ``values`` are at most ``limit`` (under it where ``strict``): in C where
    it is built (:func:`count_within`), else through ``map``."""
    found = count_within(values, limit, strict)
    return found if found is not None else sum(map(limit.__gt__ if strict else limit.__ge__, values))


def sample_median(values: Sequence[int], step: int) -> int:
    """The lower median of ``values[::step]``: in C where it is built (:func:`lower_median`), else sorted."""
    found = lower_median(values, step)
    if found is not None:
        return found
    ordered = sorted(values[::step])
    return ordered[(len(ordered) - 1) // 2]
