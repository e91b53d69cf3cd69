"""What measuring one test's call phase gives: its profile, its GPU memory, and the ways of measuring."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from pytest_gpuutil.frozen import frozen, records_of

if TYPE_CHECKING:
    from pytest_gpuutil.analysis.finding_records import Finding
    from pytest_gpuutil.analysis.windows import WindowStats
    from pytest_gpuutil.capture.memory import DeviceMemory
    from pytest_gpuutil.capture.profiler import RegionProfiler
    from pytest_gpuutil.hardware.capture import TestCounters
    from pytest_gpuutil.traces.model import GpuColumns, SyncColumns, Window

#: the ways of measuring a call: windows of one continuous capture, a profiler per test, or none
CONTINUOUS = "continuous"
PER_TEST = "per_test"
OFF = "off"


@frozen
class TestProfile:
    """What measuring one test's call phase gave (``stats`` None: not measured, ``note`` says why).

    A frozen record (:mod:`pytest_gpuutil.frozen`: a dataclass when asked), made for every test at
    each flush: its ``__init__`` is one dict update, not a ``object.__setattr__`` per field.
    """

    __test__ = False

    wall_ms: Optional[float]
    stats: Optional[WindowStats]
    note: str = ""
    #: what measuring this test cost (None when it was not measured at all)
    measure_ms: Optional[float] = None
    #: the window and its events, kept for a trace file (continuous capture with --gpu-util-traces)
    window: Optional[Window] = None
    events: Optional[GpuColumns] = None
    #: the per-test torch.profiler session, kept for a trace file (per-test profiling)
    profiler: Optional[RegionProfiler] = None
    #: what to fix (None: findings were not looked for)
    findings: Optional[tuple[Finding, ...]] = None
    #: the host's waits in the window, kept with ``events`` for a trace file
    syncs: Optional[SyncColumns] = None
    #: the hardware counters over the call (None: not read)
    counters: Optional[TestCounters] = None
    #: the counters are not read yet: a later flush gives this profile again, with them
    counters_pending: bool = False
    #: the processes that took part when child processes did (ProcessShare), this one first
    processes: tuple[Any, ...] = ()
    #: the call's timeline in its compact form (analysis/timeline.py), when it is among those drawn
    timeline: Optional[dict[str, Any]] = None

    def timeline_with_counters(self) -> Optional[dict[str, Any]]:
        """The timeline with the strip of hardware-counter samples under it, where the counters ran."""
        strip = getattr(self.counters, "strip", None)
        if self.timeline is None or not strip:
            return self.timeline
        return {**self.timeline, "c": dict(strip)}


@dataclass(frozen=True)
class TestMemory:
    """GPU memory of one test's call phase, per device (empty: CUDA was not in use)."""

    __test__ = False

    devices: tuple[DeviceMemory, ...]
    #: the meter's mark at the call's start (the memory history is replayed from there)
    start: Any
    cost_ms: float


def profile_items(fields: tuple[list[Any], ...]) -> dict[str, TestProfile]:
    """Each window's TestProfile by node id, from every window's fields at once as columns (what
    ``ContinuousCapture.flush(make_all=...)`` hands over instead of making WindowResults): the profiles
    ``TestProfile(wall_ms, stats, note, measure_ms, stats.window, events, None, findings, syncs, None,
    False, processes, timeline)`` makes, made without a call per window."""
    keys, *columns = fields
    profiles = records_of(TestProfile, [
        {"wall_ms": wall_ms, "stats": stats, "note": note, "measure_ms": measure_ms,
         "window": stats.window if stats is not None else None, "events": events, "profiler": None,
         "findings": findings, "syncs": syncs, "counters": None, "counters_pending": False, "processes": processes,
         "timeline": timeline}
        for wall_ms, stats, note, measure_ms, events, findings, syncs, processes, timeline in zip(*columns)])
    return dict(zip(keys, profiles))
