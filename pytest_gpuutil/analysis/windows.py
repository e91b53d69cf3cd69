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
from typing import Iterable, Optional, Sequence

import numpy as np

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.analysis.intervals.window_columns import IDLE_GAPS, TOP_KERNELS, assign, figures, stats_rows
from pytest_gpuutil.analysis.stats import CategoryStat, IdleGap, KernelStat
from pytest_gpuutil.analysis.summary import TraceSummary
from pytest_gpuutil.frozen import field, frozen, records_of
from pytest_gpuutil.traces.model import GpuColumns, Window

__all__ = ["IDLE_GAPS", "TOP_KERNELS", "WindowStats", "assign_windows", "stats_of_rows", "window_stats"]


@frozen
class WindowStats:
    """What one window's GPU work amounts to: the figures a per-test record holds.

    A frozen record (:mod:`pytest_gpuutil.frozen`: a dataclass when asked), made for every window
    of every flush: its ``__init__`` is one dict update, not a ``object.__setattr__`` per field.

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


def stats_of_rows(rows: Iterable[tuple]) -> list[WindowStats]:
    """The WindowStats of rows of every field in order (``window_columns.stats_rows``): ``WindowStats(*row)``
    each, made without an ``__init__`` call per window (a flush makes one for every test)."""
    return records_of(WindowStats, [
        {"window": window, "busy_us": busy_us, "busy_pct": busy_pct, "mm_conv_pct": mm_conv_pct,
         "kernel_count": kernel_count, "event_count": event_count, "devices": devices, "category_rows": category_rows,
         "kernel_rows": kernel_rows, "gap_rows": gap_rows, "kernel_totals": kernel_totals}
        for (window, busy_us, busy_pct, mm_conv_pct, kernel_count, event_count, devices, category_rows, kernel_rows,
             gap_rows, kernel_totals) in rows])


def assign_windows(starts: np.ndarray, ends: np.ndarray, window_starts: np.ndarray,
                   window_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(event index, window index) for every event and every window it belongs to.

    An event usually belongs to one window or none; one that spans a gap between windows is
    listed once per window it overlaps.
    """
    return assign(starts, ends, window_starts, window_ends)


def window_stats(columns: GpuColumns, windows: Sequence[Window],
                 classifier: Optional[KernelClassifier] = None) -> list[WindowStats]:
    """Per-window figures for ``windows`` (sorted, not overlapping) over ``columns``."""
    if not windows:
        return []
    found = figures(columns, np.asarray([w.start_ns for w in windows], dtype=np.int64),
                    np.asarray([w.end_ns for w in windows], dtype=np.int64), classifier or KernelClassifier())
    return stats_of_rows(stats_rows(found, windows))
