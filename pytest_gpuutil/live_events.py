"""GPU events straight from a finished torch.profiler session, with no JSON round trip.

Kineto's in-memory events carry the same fields the exported trace does: activity type (the
trace's ``cat``), device index (``pid``), stream (``tid``), and start/duration in integer
nanoseconds (the export writes them as µs with three decimals, so both paths agree exactly).
"""
from __future__ import annotations

import re
from typing import Any, Optional

from .trace_model import GPU_WORK_CATEGORIES, GpuEvent, Trace, Window


_MEMCPY = re.compile(r"^Memcpy [A-Za-z]+ \(")
_MEMSET = re.compile(r"^Memset \(")


def trace_from_profiler(prof: Any, label: str = "<live profiler>") -> Trace:
    """Build a Trace from a stopped ``torch.profiler.profile`` (or its autograd ``profile``)."""
    results = _kineto_results(prof)
    events = []
    kind_of = _activity_kind
    for ev in results.events():
        kind = kind_of(ev)
        if kind in GPU_WORK_CATEGORIES:
            events.append(
                GpuEvent(
                    ev.name(),
                    kind,
                    str(ev.device_index()),
                    str(ev.device_resource_id()),
                    ev.start_ns(),
                    ev.duration_ns(),
                )
            )
    return Trace.from_events(label, events)


def _activity_kind(ev: Any) -> str:
    """The event's trace category (``kernel``, ``gpu_memcpy``, ...), on any torch >= 2.3.

    torch >= 2.12 exposes Kineto's activity type directly. Older releases do not: there a GPU
    event (device type CUDA) is a user annotation if flagged so, a memcpy or memset by Kineto's
    fixed names for those (``Memcpy HtoD (Pinned -> Device)``, ``Memset (Device)``), else a kernel.
    """
    activity_type = getattr(ev, "activity_type", None)
    if activity_type is not None:
        return activity_type()
    if "CUDA" not in str(ev.device_type()):
        return "cpu"
    is_annotation = getattr(ev, "is_user_annotation", None)
    if is_annotation is not None and is_annotation():
        return "gpu_user_annotation"
    name = ev.name()
    if _MEMCPY.match(name):
        return "gpu_memcpy"
    if _MEMSET.match(name):
        return "gpu_memset"
    return "kernel"


def _kineto_results(prof: Any) -> Any:
    inner = getattr(prof, "profiler", None) or prof
    results = getattr(inner, "kineto_results", None)
    if results is None:
        raise RuntimeError("the profiler has no results: was it started and stopped?")
    return results


def shift_window(window: Window, base_time_ns: int) -> Window:
    """The same window on the clock of an exported trace whose times are relative to its base."""
    return Window(window.start_ns - base_time_ns, window.end_ns - base_time_ns, window.source)


def live_window(start_ns: int, end_ns: int, source: str = "test_call") -> Window:
    """A window measured with ``time.time_ns()`` around the profiled region (Kineto's clock)."""
    return Window(start_ns, end_ns, source)


def trace_window_or_none(trace: Trace) -> Optional[Window]:
    """The profiler span of an exported trace as a Window, if it has one."""
    if trace.profiler_span is None:
        return None
    return Window(trace.profiler_span[0], trace.profiler_span[1], "profiler")
