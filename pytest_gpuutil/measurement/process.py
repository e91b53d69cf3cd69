"""This process's measurement of each test's call: the call's window and the parts beside it.

The window (:mod:`~pytest_gpuutil.measurement.windows`) gives each call its GPU figures; the
parts (:class:`~pytest_gpuutil.measurement.part.MeasurementPart`: GPU memory, hardware counters,
child processes) add theirs at the same moments; a
:class:`~pytest_gpuutil.measurement.flush_schedule.FlushSchedule` says when the windows closed so
far become profiles. torch is imported only by :meth:`Measurement.prepare`, which the plugin
calls only under ``--gpu-util``.
"""
from __future__ import annotations

import gc
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from pytest_gpuutil.measurement.call_profile import CONTINUOUS
from pytest_gpuutil.measurement.child_processes import ChildProcesses
from pytest_gpuutil.measurement.counter_reads import CounterReads
from pytest_gpuutil.measurement.flush_schedule import FlushSchedule
from pytest_gpuutil.measurement.memory_reads import MemoryReads
from pytest_gpuutil.measurement.part import MeasurementPart, Setup
from pytest_gpuutil.measurement.unseen_cost import UnseenCost
from pytest_gpuutil.measurement.windows import CallWindows, WindowSettings, choose_windows

if TYPE_CHECKING:
    from pytest_gpuutil.analysis.classify import KernelClassifier
    from pytest_gpuutil.capture.continuous import ContinuousCapture, EventSource
    from pytest_gpuutil.capture.flush_policy import FlushPolicy
    from pytest_gpuutil.capture.memory import MemoryMeter
    from pytest_gpuutil.hardware.capture import CounterCapture
    from pytest_gpuutil.measurement.call_profile import TestProfile
    from pytest_gpuutil.measurement.memory_reads import CallMemories
    from pytest_gpuutil.measurement.windows import ContinuousWindows


class Measurement:
    """Per-test measurement of one process (a plain run or one xdist worker)."""

    def __init__(self, classifier: KernelClassifier, keep_events: bool, cpu_activity: bool, policy: FlushPolicy,
                 use_cupti: bool = True, memory: bool = True, memory_history: bool = False, findings: bool = False,
                 findings_ignore: frozenset[str] = frozenset(), counters: str = "off",
                 counters_interval_ms: float = 1.0, children: bool = True, timelines: Optional[int] = 0,
                 timeline_gap_ms: float = 0.1):
        self.settings = WindowSettings(classifier, keep_events, cpu_activity, use_cupti, findings, findings_ignore,
                                       timelines, timeline_gap_ms)
        self.windows: CallWindows = CallWindows()
        #: the windows are the continuous capture's (``mode == CONTINUOUS``, kept as a flag for each test)
        self.continuous = False
        self.schedule = FlushSchedule(policy)
        self.memory_reads = MemoryReads(memory, memory_history)
        self.child_processes = ChildProcesses(children, classifier)
        self.counter_reads = CounterReads(counters, counters_interval_ms, strips=timelines != 0)
        #: the sources of per-test figures beside the window, called in this order
        self.parts: tuple[MeasurementPart, ...] = (self.memory_reads, self.child_processes, self.counter_reads)
        #: the parts that do something at each moment of a test (a part that keeps a default no-op
        #: is not called per test: a call less per part and moment, inside the test's timing)
        self._begins = _overriding(self.parts, "begin")
        self._openers = _overriding(self.parts, "opened")
        self._enders = _overriding(self.parts, "end")
        self._waiters = _overriding(self.parts, "waiting")
        #: the continuous windows when nothing but them acts at a call's edges (the memory meter is read
        #: at the capture's own edges): the measuring calls them straight, else None
        self.edges: Optional[ContinuousWindows] = None
        self.cuda = False
        #: what measuring costs inside the tests where no timer sees it (CUPTI's records, the sampler)
        self.unseen = UnseenCost()
        self._torch: Any = None
        #: why the continuous capture is not used where it was wanted ("" when it is)
        self.fallback_reason = ""
        self._prepare_s: Optional[float] = None
        #: the seconds it took to set the objects that existed before the first test aside from the
        #: garbage collector (part of the start-up); see :func:`_freeze_objects`
        self.startup_gc_s: Optional[float] = None
        self._froze = False

    # -- what the rest of the plugin reads -------------------------------------------------------
    @property
    def mode(self) -> str:
        return self.windows.mode

    @property
    def capture(self) -> Optional[ContinuousCapture]:
        return self.windows.capture

    @property
    def source_name(self) -> str:
        return self.windows.source_name

    @property
    def records_host_waits(self) -> bool:
        return self.settings.records_host_waits

    @property
    def memory(self) -> CallMemories:
        """Each finished call's GPU memory, by node id, until its record takes it."""
        return self.memory_reads.memory

    @property
    def meter(self) -> Optional[MemoryMeter]:
        return self.memory_reads.meter

    @property
    def counters(self) -> Optional[CounterCapture]:
        return self.counter_reads.capture

    @property
    def counters_fallback(self) -> str:
        return self.counter_reads.fallback

    @property
    def startup_s(self) -> Optional[float]:
        """Everything done once before the first test: loading the capture, starting its source."""
        return self._prepare_s if self.capture is not None else None

    # -- set-up -----------------------------------------------------------------------------------
    def prepare(self, torch: Any, cuda: bool, source: Optional[EventSource], counter_source: Any = None) -> None:
        """Choose how to measure and start the capture, before the first test (its start-up is charged to none)."""
        began = time.perf_counter()
        try:
            self.cuda, self._torch = cuda, torch
            chosen = choose_windows(self.settings, torch, cuda, source)
            self.windows, self.fallback_reason = chosen.windows, chosen.fallback_reason
            self.continuous = self.windows.mode == CONTINUOUS
            setup = Setup(torch, cuda, self.windows, counter_source)
            for part in self.parts:
                if not part.starts_late:
                    part.start(setup)
            self.startup_gc_s, self._froze = _freeze_objects()
        finally:
            self._prepare_s = time.perf_counter() - began
        for part in self.parts:
            if part.starts_late:
                part.start(setup)
        self._per_test_parts()

    def _per_test_parts(self) -> None:
        """Only the parts with something to do per test in this run are called per test (no memory
        figures, no counters: no call at all, inside the test's timing; nor asked what waits at each
        teardown: a part with nothing to do per test has nothing waiting)."""
        active = tuple(part for part in self.parts if part.per_test)
        self._begins = _overriding(active, "begin")
        self._openers = _overriding(active, "opened")
        self._enders = _overriding(active, "end")
        self._waiters = _overriding(active, "waiting")
        alone = self.continuous and not (self._begins or self._openers or self._enders)
        self.edges = self.windows if alone else None  # type: ignore[assignment]

    # -- per test ---------------------------------------------------------------------------------
    def begin(self, nodeid: str, results: Any) -> Optional[TestProfile]:
        """Open the test's window (or start its profiler); a profile at once if it cannot be measured."""
        for part in self._begins:
            part.begin(nodeid)
        profile = self.windows.begin(nodeid, results)
        if profile is None:
            for part in self._openers:
                part.opened(nodeid)
        return profile

    def end(self, nodeid: str, results: Any) -> Optional[TestProfile]:
        """Close the window; the profile now if it is already known (per-test profiling), else None."""
        profile = self.windows.end(nodeid, results)
        for part in self._enders:
            part.end(nodeid)
        if profile is None or profile.measure_ms is None:
            return profile  # none yet (a flush gives it), or one that says why it was not measured
        return self._completed({nodeid: profile}, wait=False)[nodeid]  # counters: now if read, else later

    # -- flushing -------------------------------------------------------------------------------
    def flush_due(self) -> Optional[str]:
        """Why a flush is due now (the policy's reason), or None (nothing waiting: the bytes not asked).

        Asked at every teardown, so it answers "not yet" in this one frame where it can: a continuous
        capture's closed windows counted (``len``), the clock read, and the source's pending bytes read
        as its ``completed_bytes`` attribute where it keeps one (CUPTI does; else its ``pending_bytes()``),
        each compared with the schedule's bounds as the policy compares them. Where a bound is reached,
        the policy gives the reason (:meth:`FlushSchedule.due`); parts with tests waiting (the
        counters) are asked as before."""
        capture = self.windows.capture
        if capture is None or self._waiters:
            return self._due_with_parts()
        pending = len(capture._closed)  # capture.pending_tests without its call
        if not pending:
            return None
        schedule = self.schedule
        if not capture.started:
            waiting = 0
        else:
            source = capture.source
            waiting = getattr(source, "completed_bytes", None)
            if waiting is None:
                waiting = source.pending_bytes()
        if pending < schedule.tests and waiting < schedule.byte_limit \
                and time.perf_counter() - schedule.last < schedule.seconds:
            return None
        return schedule.due(pending, waiting)

    def _due_with_parts(self) -> Optional[str]:
        """:meth:`flush_due` where parts hold tests back too, or without a continuous capture."""
        windows = self.windows
        capture = windows.capture
        pending = capture.pending_tests if capture is not None else windows.pending_tests
        for part in self._waiters:
            pending += part.waiting()
        if not pending:
            return None
        return self.schedule.due(pending, capture.pending_bytes() if capture is not None else windows.pending_bytes())

    def flush(self, wait: bool = True) -> dict[str, TestProfile]:
        """Profiles of every window closed since the last flush, by node id.

        ``wait=False`` (a flush the policy asked for) does not wait for the hardware counters of
        the last windows: their profiles come now marked ``counters_pending`` and again, complete,
        from a later flush.
        """
        self.schedule.flushed()
        source = self.windows.source
        if source is not None and self.cuda:
            capture = self.windows.capture  # outside every window: none is open now
            self.unseen.calibrate_if_due(self._torch, source, capture.synchronize if capture is not None else None)
        collecting = gc.isenabled()  # the collector waits for the flush's thousands of young records
        if collecting:
            gc.disable()
        try:
            profiles = self.windows.flush()
        finally:
            if collecting:
                gc.enable()  # one young collection at the next allocation, over all of them at once
        self.unseen.count(profiles)
        return self._completed(profiles, wait)

    def close(self) -> dict[str, TestProfile]:
        """The session's end: what is left, then the sources stop, the guard comes off and the
        children's spool is removed (children still running are noted, never waited for long)."""
        try:
            profiles = self.windows.close()
            self.unseen.count(profiles)
            for part in self.parts:
                part.end("")  # a call the session's end left open
            return self._completed(profiles, wait=True)
        finally:
            for part in reversed(self.parts):
                part.close()
            if self._froze:
                gc.unfreeze()  # the collector sees them again, as before the first test
                self._froze = False

    def _completed(self, profiles: dict[str, TestProfile], wait: bool) -> dict[str, TestProfile]:
        for part in self.parts:
            profiles = part.complete(profiles, wait)
        return profiles

    def info(self) -> dict[str, Any]:
        """What the summary says of the parts in this process (JSON-able): the counters' keys, then
        ``children``."""
        return {**self.counter_reads.info(), "children": self.child_processes.info(),
                **self.unseen.info(self._sampler_cpu_s()), "torch_calls_s": self.torch_calls_s()}

    def torch_calls_s(self) -> float:
        """Seconds of torch's own calls at the calls' edges so far (the synchronizes, the allocator's reset
        and read) with CUPTI's clock reads between them (timed as one span): the part of the plugin's own
        time that any measuring of each test pays (benchmarks/checks/floor_probe.py times the same calls)."""
        capture = self.capture
        return (capture.torch_s if capture is not None else 0.0) + self.memory_reads.torch_s

    def _sampler_cpu_s(self) -> float:
        """The findings' stack sampler's CPU time so far (0 without places)."""
        places = getattr(self.capture, "places", None)
        return float(getattr(getattr(places, "sampler", None), "cpu_s", 0.0) or 0.0)


def _overriding(parts: tuple[MeasurementPart, ...], name: str) -> tuple[MeasurementPart, ...]:
    """The parts whose class does something at ``name`` (not MeasurementPart's default no-op)."""
    default = getattr(MeasurementPart, name)
    return tuple(part for part in parts if getattr(type(part), name) is not default)


def _freeze_objects() -> tuple[float, bool]:
    """Set every object that exists before the first test aside from the garbage collector
    (``gc.freeze()``, undone at the session's end); its seconds, and whether this call froze
    them (False when something else, or an earlier session, had frozen objects already).

    What the session imported (torch: ~200,000 objects) leaves Python's collector a full
    collection owed, and every full collection walks them all (0.08-0.25 s). Without this, the
    plugin's own allocations brought one due inside a test's window; a ``gc.collect()`` here
    instead cost that much again at every start. Frozen, they are not walked at all: a full
    collection among the tests walks only what was made since, and the freeze itself takes
    microseconds (counting them would walk them: ``gc.get_freeze_count()`` took 16 ms for 300,000).
    Cyclic garbage among the frozen objects waits for the session's end.
    """
    began = time.perf_counter()
    already = gc.get_freeze_count()  # 0 unless something froze objects before: nothing to walk
    gc.freeze()
    return time.perf_counter() - began, already == 0
