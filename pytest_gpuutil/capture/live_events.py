"""GPU events straight from a finished torch.profiler session, with no JSON round trip.

Kineto's in-memory events carry the same fields the exported trace does: activity type (the
trace's ``cat``), device index (``pid``), stream (``tid``), and start/duration in integer
nanoseconds (the export writes them as µs with three decimals, so both paths agree exactly).
"""
from __future__ import annotations

import re
from typing import Any, Sequence

from pytest_gpuutil.traces.model import (
    GPU_WORK_CATEGORIES,
    HOST_SYNC_NAMES,
    SYNC_CATEGORIES,
    GpuColumns,
    SyncColumns,
    Trace,
    Window,
)

_MEMCPY = re.compile(r"^Memcpy [A-Za-z]+ \(")
_MEMSET = re.compile(r"^Memset \(")


def trace_from_profiler(prof: Any, label: str = "<live profiler>") -> Trace:
    """Build a Trace from a stopped ``torch.profiler.profile`` (or its autograd ``profile``)."""
    events = _kineto_results(prof).events()
    if not events:
        return Trace(label)
    if hasattr(events[0], "activity_type"):  # torch >= 2.12 says what each event is
        gpu = [ev for ev in events if ev.activity_type() in GPU_WORK_CATEGORIES]
        kinds = [ev.activity_type() for ev in gpu]
        names = [ev.name() for ev in gpu]
        waits = [ev for ev in events if ev.activity_type() in SYNC_CATEGORIES and ev.name() in HOST_SYNC_NAMES]
    else:
        gpu, kinds, names = _gpu_events_by_device_type(events)
        cuda = type(events[0].device_type()).CUDA
        waits = [ev for ev in events if ev.device_type() != cuda and ev.name() in HOST_SYNC_NAMES]  # runtime calls
    columns = GpuColumns(
        names,
        kinds,
        [ev.device_index() for ev in gpu],
        [ev.device_resource_id() for ev in gpu],
        [ev.start_ns() for ev in gpu],
        [ev.duration_ns() for ev in gpu],
    )
    syncs = SyncColumns([ev.name() for ev in waits], [ev.start_ns() for ev in waits], [ev.duration_ns() for ev in waits])
    return Trace(label, columns, syncs=syncs)


def _gpu_events_by_device_type(events: Sequence[Any]) -> tuple[list[Any], list[str], list[str]]:
    """GPU work, its kinds and names on torch < 2.12, whose events do not expose their activity type.

    There a GPU event (device type CUDA) is a user annotation if flagged so, a memcpy or memset
    by Kineto's fixed names for those (``Memcpy HtoD (Pinned -> Device)``, ``Memset (Device)``),
    else a kernel.
    """
    cuda = type(events[0].device_type()).CUDA
    on_gpu = [ev for ev in events if ev.device_type() == cuda]
    if on_gpu and hasattr(on_gpu[0], "is_user_annotation"):
        on_gpu = [ev for ev in on_gpu if not ev.is_user_annotation()]
    names = [ev.name() for ev in on_gpu]
    kinds = [
        "gpu_memcpy" if name.startswith("Memcpy") and _MEMCPY.match(name)
        else "gpu_memset" if name.startswith("Memset") and _MEMSET.match(name)
        else "kernel"
        for name in names
    ]
    return on_gpu, kinds, names


def _kineto_results(prof: Any) -> Any:
    inner = getattr(prof, "profiler", None) or prof
    results = getattr(inner, "kineto_results", None)
    if results is None:
        raise RuntimeError("the profiler has no results: was it started and stopped?")
    return results


def shift_window(window: Window, base_time_ns: int) -> Window:
    """The same window on the clock of an exported trace whose times are relative to its base."""
    return Window(window.start_ns - base_time_ns, window.end_ns - base_time_ns, window.source)
