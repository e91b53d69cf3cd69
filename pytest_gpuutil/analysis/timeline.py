"""One window's GPU work as a timeline the HTML page draws: lanes, events, host waits, idle gaps.

A lane is one (device, stream, process): the pytest process's streams, then each child
process's, labelled with its program and rank. Events are kept as columns and written in a
compact form (:func:`encode`), never as JSON per event: four columns of unsigned LEB128 varints
(lane, (name, kind) key, start as a delta from the previous start in the same lane, duration;
integer ns relative to the window's start), zlib'd and base64'd. The page's script inflates them
with the browser's ``DecompressionStream``. A window of more than ``max_events`` events is
reduced first (:func:`reduce`): the events of each lane that fall in the same slice of the window
(window / ``max_events``) become one span with a count, so a timeline never holds more than
about ``max_events`` rows whatever the test did.

The idle gaps are the stretches of at least ``gap_ns`` in which a device did no work on any lane
(before the first event and after the last included), the longest :data:`GAPS_PER_DEVICE` per
device; the host's waits are the merged wait intervals, clipped to the window.
"""
from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.analysis.grouping import column_codes, kernel_keys, value_codes
from pytest_gpuutil.traces.model import GpuColumns, SyncColumns, Window

FORMAT = 1
#: events kept in full per window; more are reduced to spans (see the module docstring)
MAX_EVENTS = 100_000
#: idle gaps shown per device, the longest first
GAPS_PER_DEVICE = 24
#: the default shortest idle gap shown (ns)
GAP_NS = 100_000
#: host waits kept per window (the longest)
MAX_WAITS = 2_000
#: kernel names longer than this are cut (the page shows them in a tooltip)
NAME_CHARS = 300
KINDS = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclass(frozen=True)
class Lane:
    """Where events ran: a device, a stream, and the process ("" for the pytest process itself)."""

    device: str
    stream: str
    process: str = ""


@dataclass(frozen=True)
class Timeline:
    """A window's events as columns (times in ns from the window's start), ready for :func:`encode`."""

    window_ns: int
    lanes: tuple[Lane, ...]
    #: (name, kind, category) of each key
    keys: tuple[tuple[str, str, str], ...]
    lane: np.ndarray
    key: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    #: events merged into each row (all 1 unless reduced)
    count: Optional[np.ndarray] = None
    #: the host's waits: (start, end, name), ns from the window's start
    waits: tuple[tuple[int, int, str], ...] = ()
    #: idle gaps: (device, start, length) ns, by device then start
    gaps: tuple[tuple[str, int, int], ...] = ()
    gap_ns: int = GAP_NS
    #: events in the window before any reduction
    events: int = 0

    def __len__(self) -> int:
        return int(self.start.size)


def build(columns: GpuColumns, window: Window, classifier: KernelClassifier, *, syncs: Optional[SyncColumns] = None,
          owners: Optional[Sequence[int]] = None, owner_labels: Sequence[str] = ("",), sync_end_ns: Optional[int] = None,
          gap_ns: int = GAP_NS, max_events: int = MAX_EVENTS) -> Timeline:
    """The timeline of the events in ``columns`` that overlap ``window`` (clipped to it).

    ``owners``: per event, an index into ``owner_labels`` (the process that ran it: 0 the pytest
    process); ``sync_end_ns``: waits from then on are the capture's own, not the test's.
    """
    ws, we = window.start_ns, window.end_ns
    starts = np.asarray(columns.starts_ns, dtype=np.int64)
    ends = starts + np.asarray(columns.durs_ns, dtype=np.int64)
    inside = ~((starts > we) | (ends < ws) | ((ends == ws) & (ends > starts))) if starts.size else np.zeros(0, bool)
    rows = np.flatnonzero(inside)
    key_codes, names, kinds = kernel_keys(columns.names, columns.kinds) if len(columns) else (np.zeros(0, np.int64), [], [])
    dev_codes, dev_values = column_codes(columns.devices)
    str_codes, str_values = column_codes(columns.streams)
    dev = np.asarray(dev_codes, dtype=np.int64)[rows] if rows.size else np.zeros(0, np.int64)
    strm = np.asarray(str_codes, dtype=np.int64)[rows] if rows.size else np.zeros(0, np.int64)
    own = np.asarray(owners, dtype=np.int64)[rows] if owners is not None and rows.size else np.zeros(rows.size, np.int64)
    n_str = max(1, len(str_values))
    place = (own * max(1, len(dev_values)) + dev) * n_str + strm
    place_codes, places = value_codes(place.tolist())
    lanes = [Lane(str(dev_values[(p // n_str) % max(1, len(dev_values))]), str(str_values[p % n_str]),
                  owner_labels[p // n_str // max(1, len(dev_values))] if owners is not None else "") for p in places]
    order = sorted(range(len(lanes)), key=lambda i: (lanes[i].process != "", lanes[i].process,
                                                     _id_key(lanes[i].device), _id_key(lanes[i].stream)))
    rank = np.empty(len(lanes), dtype=np.int64)
    rank[order] = np.arange(len(lanes))
    lane = rank[np.asarray(place_codes, dtype=np.int64)] if rows.size else np.zeros(0, np.int64)
    used_keys, key = np.unique(key_codes[rows], return_inverse=True) if rows.size else (np.zeros(0, np.int64), rows)
    keys = tuple((names[k][:NAME_CHARS], kinds[k], classifier.classify(names[k], kinds[k])) for k in used_keys.tolist())
    start = np.maximum(starts[rows], ws) - ws
    dur = np.minimum(ends[rows], we) - ws - start
    sort = np.lexsort((start, lane))
    timeline = Timeline(max(0, we - ws), tuple(lanes[i] for i in order), keys, lane[sort], key.reshape(-1)[sort],
                        start[sort], dur[sort], None, _waits(syncs, ws, we, sync_end_ns), (), gap_ns, int(rows.size))
    timeline = replace(timeline, gaps=idle_gaps(timeline, gap_ns))
    return reduce(timeline, max_events) if len(timeline) > max_events else timeline


def _id_key(text: str) -> tuple[int, Any]:
    return (0, int(text)) if text.lstrip("-").isdigit() else (1, text)


def _waits(syncs: Optional[SyncColumns], ws: int, we: int, sync_end_ns: Optional[int]) -> tuple[tuple[int, int, str], ...]:
    """The host's waits in the window, merged where they overlap (a call and its record are one wait)."""
    if not syncs:
        return ()
    limit = we if sync_end_ns is None else min(we, sync_end_ns)
    rows = sorted((max(s, ws) - ws, min(s + d, limit) - ws, name) for name, s, d in syncs.rows() if s < limit and s + d > ws)
    merged: list[list[Any]] = []
    for start, end, name in rows:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end, name])
    if len(merged) > MAX_WAITS:
        merged = sorted(sorted(merged, key=lambda w: w[0] - w[1])[:MAX_WAITS])
    return tuple((int(s), int(e), str(n)) for s, e, n in merged)


def idle_gaps(timeline: Timeline, gap_ns: int) -> tuple[tuple[str, int, int], ...]:
    """The stretches of at least ``gap_ns`` in which a device ran nothing on any of its lanes."""
    found = []
    lane_device = np.asarray([lane.device for lane in timeline.lanes], dtype=object)
    for device in dict.fromkeys(lane.device for lane in timeline.lanes):
        on = np.isin(timeline.lane, np.flatnonzero(lane_device == device))
        starts, ends = timeline.start[on], timeline.start[on] + timeline.dur[on]
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], np.maximum.accumulate(ends[order]) if ends.size else ends
        gap_starts = np.concatenate(([0], ends))
        gap_ends = np.concatenate((starts, [timeline.window_ns]))
        length = gap_ends - gap_starts
        keep = np.flatnonzero(length >= max(gap_ns, 1))
        longest = keep[np.argsort(-length[keep], kind="stable")][:GAPS_PER_DEVICE]
        found += [(device, int(gap_starts[i]), int(length[i])) for i in sorted(longest.tolist())]
    return tuple(found)


def reduce(timeline: Timeline, max_events: int) -> Timeline:
    """At most about ``max_events`` rows: each lane's events in one slice of the window become one
    span from the first start to the last end, keyed by its longest event, with its count."""
    slice_ns = max(1, -(-timeline.window_ns // max(1, max_events)))
    counts = timeline.count if timeline.count is not None else np.ones(len(timeline), dtype=np.int64)
    bucket = timeline.start // slice_ns
    new = np.concatenate(([True], (timeline.lane[1:] != timeline.lane[:-1]) | (bucket[1:] != bucket[:-1])))
    group = np.cumsum(new) - 1
    heads = np.flatnonzero(new)
    ends = timeline.start + timeline.dur
    span_end = np.zeros(heads.size, dtype=np.int64)
    np.maximum.at(span_end, group, ends)
    longest = np.lexsort((-timeline.dur, group))
    first_of_group = longest[np.concatenate(([True], group[longest][1:] != group[longest][:-1]))]
    total = np.zeros(heads.size, dtype=np.int64)
    np.add.at(total, group, counts)
    start = timeline.start[heads]
    return replace(timeline, lane=timeline.lane[heads], key=timeline.key[first_of_group], start=start,
                   dur=span_end - start, count=total)


# -- the compact form ---------------------------------------------------------------------------
def _varints(values: np.ndarray) -> bytes:
    """Unsigned LEB128 of non-negative int64 values, concatenated (numpy: 7 bits a pass)."""
    v = np.asarray(values, dtype=np.uint64)
    if not v.size:
        return b""
    groups = np.ones(v.size, dtype=np.int64)
    rest = v >> np.uint64(7)
    while rest.any():
        groups += rest > 0
        rest >>= np.uint64(7)
    out = np.zeros(int(groups.sum()), dtype=np.uint8)
    offsets = np.concatenate(([0], np.cumsum(groups)[:-1]))
    rest = v.copy()
    for k in range(int(groups.max())):
        live = groups > k
        byte = (rest[live] & np.uint64(0x7F)).astype(np.uint8)
        more = groups[live] > k + 1
        out[offsets[live] + k] = byte | (more.astype(np.uint8) << 7)
        rest[live] >>= np.uint64(7)
    return out.tobytes()


def _read_varints(data: bytes, count: int, at: int) -> tuple[np.ndarray, int]:
    """``count`` varints from ``data`` at ``at``, and where they end."""
    out = np.zeros(count, dtype=np.int64)
    for i in range(count):
        shift = value = 0
        while True:
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        out[i] = value
    return out, at


def _deltas(timeline: Timeline) -> np.ndarray:
    first = np.concatenate(([True], timeline.lane[1:] != timeline.lane[:-1])) if len(timeline) else np.zeros(0, bool)
    previous = np.concatenate(([0], timeline.start[:-1])) if len(timeline) else timeline.start
    return np.where(first, timeline.start, timeline.start - previous)


def encode(timeline: Timeline, counters: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The JSON-able compact form (see the module docstring); ``counters``: the strip of hardware
    counter samples (:func:`counter_strip`)."""
    streams = [timeline.lane, timeline.key, _deltas(timeline), timeline.dur]
    if timeline.count is not None:
        streams.append(timeline.count)
    raw = b"".join(_varints(s) for s in streams)
    packed = zlib.compress(raw, 6)
    data: dict[str, Any] = {
        "v": FORMAT, "w": int(timeline.window_ns), "n": len(timeline), "ne": timeline.events,
        "l": [[lane.device, lane.stream, lane.process] for lane in timeline.lanes],
        "k": [[name, KINDS.index(kind) if kind in KINDS else 0, category] for name, kind, category in timeline.keys],
        "z": 1 if len(packed) < len(raw) else 0,
        "e": base64.b64encode(packed if len(packed) < len(raw) else raw).decode("ascii"),
        "h": [list(w) for w in timeline.waits], "g": [list(g) for g in timeline.gaps], "gt": timeline.gap_ns,
    }
    if timeline.count is not None:
        data["m"] = 1
    if counters:
        data["c"] = dict(counters)
    return data


def decode(data: Mapping[str, Any]) -> Timeline:
    """A :class:`Timeline` from :func:`encode`'s form (tests, and reducing a stored one); ValueError if malformed."""
    try:
        raw = base64.b64decode(data["e"])
        if data.get("z"):
            raw = zlib.decompress(raw)
        n, at, columns = int(data["n"]), 0, []
        for _ in range(5 if data.get("m") else 4):
            column, at = _read_varints(raw, n, at)
            columns.append(column)
        lane, key, delta, dur = columns[:4]
        first = np.concatenate(([True], lane[1:] != lane[:-1])) if n else np.zeros(0, bool)
        group = np.cumsum(first) - 1
        base = np.cumsum(delta)
        start = base - (base - delta)[first][group] if n else delta
        return Timeline(int(data["w"]), tuple(Lane(*map(str, lane_)) for lane_ in data["l"]),
                        tuple((str(k[0]), KINDS[int(k[1])], str(k[2])) for k in data["k"]), lane, key, start, dur,
                        columns[4] if data.get("m") else None, tuple((int(s), int(e), str(nm)) for s, e, nm in data["h"]),
                        tuple((str(d), int(s), int(g)) for d, s, g in data["g"]), int(data.get("gt", GAP_NS)),
                        int(data.get("ne", n)))
    except (KeyError, IndexError, TypeError, ValueError, zlib.error) as exc:
        raise ValueError(f"not a timeline: {exc}") from None


def shrink(data: Mapping[str, Any], max_events: int) -> dict[str, Any]:
    """A stored timeline with at most about ``max_events`` rows (as it is when it has fewer)."""
    if int(data.get("n", 0)) <= max_events:
        return dict(data)
    return encode(reduce(decode(data), max_events), data.get("c"))


def counter_strip(starts_ns: Sequence[int], ends_ns: Sequence[int], values: Mapping[str, Sequence[float]],
                  window_start_ns: int, window_end_ns: int, points: int = 400) -> dict[str, Any]:
    """Hardware counter samples over the window, for the strip under the lanes: ``t`` (start) and
    ``d`` (length) in ns from the window's start, and a value list per metric (None: no value);
    at most ``points`` samples (neighbours averaged beyond that). Empty when none overlap."""
    s = np.asarray(starts_ns, dtype=np.int64)
    e = np.asarray(ends_ns, dtype=np.int64)
    rows = np.flatnonzero((e > window_start_ns) & (s < window_end_ns))
    if not rows.size:
        return {}
    step = -(-rows.size // points)
    groups = [rows[i:i + step] for i in range(0, rows.size, step)]
    start = [int(max(s[g[0]], window_start_ns) - window_start_ns) for g in groups]
    end = [int(min(e[g[-1]], window_end_ns) - window_start_ns) for g in groups]
    out: dict[str, Any] = {"t": start, "d": [b - a for a, b in zip(start, end)]}
    for name, column in values.items():
        v = np.asarray(column, dtype=np.float64)
        means = [np.nanmean(v[g]) if np.isfinite(v[g]).any() else None for g in groups]
        if any(m is not None for m in means):
            out[name] = [None if m is None else round(float(m), 1) for m in means]
    return out
