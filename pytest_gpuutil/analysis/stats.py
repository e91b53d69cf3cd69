"""Records of the figures the package reports about a trace or a window. Pure: no torch, no pytest.

One window's or one trace's figures, as both analyses report them (one trace: ``analyze``; many
windows: ``window_stats``): per category, device, stream, kernel, idle gap and communication
overlap, and the two rules every figure follows: a percentage of nothing is 0, and devices are
listed by number first. What a ``kernel_bench`` timing gives is in
:mod:`~pytest_gpuutil.timing_stats`.
"""
from __future__ import annotations


from pytest_gpuutil.frozen import frozen

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Any


@frozen
class CategoryStat:
    """One kernel category's union of time, its share of busy time and of the window, its event count."""

    name: str
    time_us: float
    #: percent of busy time (0-100)
    share_of_busy: float
    #: percent of window × devices (0-100)
    pct_of_window: float
    count: int


@frozen
class DeviceStat:
    """One device's busy time (the union over its streams) and its events."""

    device: str
    busy_us: float
    busy_pct: float
    event_count: int


@frozen
class StreamStat:
    """One stream's busy time (the union of its events) and its events."""

    device: str
    stream: str
    busy_us: float
    event_count: int


@frozen
class KernelStat:
    """One kernel (name and category): how often it ran and its total and mean time."""

    name: str
    category: str
    count: int
    #: sum of the kernel's own durations (like the profiler's "self CUDA time")
    total_us: float
    mean_us: float
    pct_of_window: float


@frozen
class IdleGap:
    """A stretch of the window in which a device did no GPU work."""

    device: str
    #: start relative to the window start
    start_us: float
    dur_us: float


@frozen
class Overlap:
    """Communication kernels against all other GPU work, per device, summed."""

    communication_us: float
    compute_us: float
    overlap_us: float
    #: percent of communication time hidden under compute (0-100)
    overlap_pct_of_communication: float


def pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def device_key(device: str) -> tuple[int, Any]:
    return (0, int(device)) if device.lstrip("-").isdigit() else (1, device)
