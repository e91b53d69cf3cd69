"""Analyse one trace: GPU busy time, categories, top kernels, idle gaps, overlap.

Definitions (the README repeats them):
- window: the profiler's own span (``cat: "Trace"``) when the trace has one, else first GPU start
  to last GPU end, unless the caller passes one (the plugin passes the test's call phase).
  GPU work is clipped to the window.
- busy: union of GPU-work intervals (kernels, memcpy, memset) on each device over all its
  streams, summed over devices. busy % = busy / (window × devices that did GPU work).
- a category's time is the union of its intervals per device (so overlapping streams do not
  double-count); its share of busy is that time over busy time.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from .classify import COMMUNICATION, MM_CONV_CATEGORIES, OTHER, KernelClassifier, category_order
from .intervals import gaps, merged, union_length
from .trace_model import Trace, Window

KERNEL_KIND = "kernel"


@dataclass(frozen=True)
class CategoryStat:
    name: str
    time_us: float
    #: percent of busy time (0-100)
    share_of_busy: float
    #: percent of window × devices (0-100)
    pct_of_window: float
    count: int


@dataclass(frozen=True)
class DeviceStat:
    device: str
    busy_us: float
    busy_pct: float
    event_count: int


@dataclass(frozen=True)
class StreamStat:
    device: str
    stream: str
    busy_us: float
    event_count: int


@dataclass(frozen=True)
class KernelStat:
    name: str
    category: str
    count: int
    #: sum of the kernel's own durations (like the profiler's "self CUDA time")
    total_us: float
    mean_us: float
    pct_of_window: float


@dataclass(frozen=True)
class IdleGap:
    device: str
    #: start relative to the window start
    start_us: float
    dur_us: float


@dataclass(frozen=True)
class Overlap:
    """Communication kernels against all other GPU work, per device, summed."""

    communication_us: float
    compute_us: float
    overlap_us: float
    #: percent of communication time hidden under compute (0-100)
    overlap_pct_of_communication: float


@dataclass(frozen=True)
class TraceSummary:
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
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

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
    if trace.events:
        return Window(min(e.start_ns for e in trace.events), max(e.end_ns for e in trace.events), "gpu_span")
    return Window(0, 0, "none")


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def analyze(
    trace: Trace,
    classifier: Optional[KernelClassifier] = None,
    window: Optional[Window] = None,
    top: int = 10,
    gap_count: int = 5,
) -> TraceSummary:
    """Analyse ``trace`` over ``window`` (see the module docstring for the definitions)."""
    classifier = classifier or KernelClassifier()
    win = choose_window(trace, window)
    ws, we = win.start_ns, win.end_ns

    # (start, end, category, stream, name, kind) per device, clipped to the window, sorted by start.
    by_device: dict[str, list[tuple[int, int, str, str, str, str]]] = defaultdict(list)
    classify = classifier.classify
    for ev in trace.events:
        start, end = ev.start_ns, ev.start_ns + ev.dur_ns
        if start > we or end < ws or (end == ws and ev.dur_ns > 0):
            continue
        by_device[ev.device].append(
            (max(start, ws), min(end, we), classify(ev.name, ev.kind), ev.stream, ev.name, ev.kind)
        )
    for rows in by_device.values():
        rows.sort(key=_start_key)

    denominator = win.duration_ns * len(by_device)
    busy_ns = 0
    mm_conv_ns = 0
    devices = []
    cat_ns: dict[str, int] = defaultdict(int)
    cat_count: dict[str, int] = defaultdict(int)
    stream_rows: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    kernels: dict[str, list] = {}
    idle: list[IdleGap] = []
    comm_ns = compute_ns = overlap_ns = 0
    has_comm = False

    for device in sorted(by_device, key=_device_key):
        rows = by_device[device]
        union = list(merged(((r[0], r[1]) for r in rows), presorted=True))
        dev_busy = sum(e - s for s, e in union)
        busy_ns += dev_busy
        devices.append(DeviceStat(device, dev_busy / 1000, _pct(dev_busy, win.duration_ns), len(rows)))
        idle.extend(IdleGap(device, (s - ws) / 1000, (e - s) / 1000) for s, e in gaps(union, ws, we))

        per_cat: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for start, end, category, stream, name, kind in rows:
            per_cat[category].append((start, end))
            stream_rows[(device, stream)].append((start, end))
            entry = kernels.get(name)
            if entry is None:
                kernels[name] = [category, 1, end - start]
            else:
                entry[1] += 1
                entry[2] += end - start
        for category, spans in per_cat.items():
            cat_ns[category] += union_length(spans, presorted=True)
            cat_count[category] += len(spans)
        mm_conv_ns += union_length(
            ((r[0], r[1]) for r in rows if r[2] in MM_CONV_CATEGORIES), presorted=True
        )
        if COMMUNICATION in per_cat:
            has_comm = True
            dev_comm = union_length(per_cat[COMMUNICATION], presorted=True)
            dev_compute = union_length(((r[0], r[1]) for r in rows if r[2] != COMMUNICATION), presorted=True)
            comm_ns += dev_comm
            compute_ns += dev_compute
            overlap_ns += dev_comm + dev_compute - dev_busy

    categories = tuple(
        CategoryStat(
            name,
            cat_ns[name] / 1000,
            _pct(cat_ns[name], busy_ns),
            _pct(cat_ns[name], denominator),
            cat_count[name],
        )
        for name in category_order(cat_ns)
    )
    kernel_stats = sorted(
        (
            KernelStat(name, cat, count, total / 1000, total / 1000 / count, _pct(total, denominator))
            for name, (cat, count, total) in kernels.items()
        ),
        key=lambda k: (-k.total_us, k.name),
    )
    streams = tuple(
        StreamStat(dev, stream, union_length(spans) / 1000, len(spans))
        for (dev, stream), spans in sorted(stream_rows.items(), key=lambda kv: (_device_key(kv[0][0]), kv[0][1]))
    )
    overlap = (
        Overlap(comm_ns / 1000, compute_ns / 1000, overlap_ns / 1000, _pct(overlap_ns, comm_ns))
        if has_comm
        else None
    )
    return TraceSummary(
        path=trace.path,
        window=win,
        busy_us=busy_ns / 1000,
        busy_pct=_pct(busy_ns, denominator),
        mm_conv_us=mm_conv_ns / 1000,
        mm_conv_pct=_pct(mm_conv_ns, denominator),
        kernel_count=sum(1 for rows in by_device.values() for r in rows if r[5] == KERNEL_KIND),
        event_count=sum(len(rows) for rows in by_device.values()),
        categories=categories,
        devices=tuple(devices),
        streams=streams,
        top_kernels=tuple(kernel_stats[:top]) if top > 0 else tuple(kernel_stats),
        idle_gaps=tuple(sorted(idle, key=lambda g: -g.dur_us)[:gap_count]),
        overlap=overlap,
        top_other=tuple(k for k in kernel_stats if k.category == OTHER)[:top],
    )


def _start_key(row: Sequence[Any]) -> Any:
    return row[0]


def _device_key(device: str) -> tuple[int, Any]:
    return (0, int(device)) if device.lstrip("-").isdigit() else (1, device)


def analyze_many(traces: Iterable[Trace], **kwargs: Any) -> list[TraceSummary]:
    """analyze() each trace with the same options."""
    return [analyze(t, **kwargs) for t in traces]
