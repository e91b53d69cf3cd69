"""How this process measures each test's call phase, and the profile each test ends up with.

Two ways, chosen once before the first test:

- **continuous** (the default on a CUDA machine): one event source (CUPTI, or what a
  ``pytest_gpuutil_event_source`` hook returns) collects across tests; each call phase is a
  window, and windows become profiles in bulk when the capture is flushed;
- **per test**: a torch.profiler session around each call phase, when CUPTI cannot be used or
  CPU activity is asked for (``--gpu-util-cpu``).

torch is imported only by :meth:`Measurement.prepare`, which the plugin calls only under
``--gpu-util``.
"""
from __future__ import annotations

import dataclasses
import gc
import os
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from pytest_gpuutil.analysis.classify import KernelClassifier
    from pytest_gpuutil.analysis.finding_records import Finding
    from pytest_gpuutil.hardware.capture import CounterCapture, TestCounters
    from pytest_gpuutil.analysis.windows import WindowStats
    from pytest_gpuutil.capture.continuous import ContinuousCapture, EventSource
    from pytest_gpuutil.capture.flush_policy import FlushPolicy
    from pytest_gpuutil.capture.memory import DeviceMemory, MemoryMeter
    from pytest_gpuutil.capture.profiler import RegionProfiler
    from pytest_gpuutil.children.collect import ProcessTree
    from pytest_gpuutil.traces.model import GpuColumns, SyncColumns, Window

CONTINUOUS = "continuous"
PER_TEST = "per_test"
OFF = "off"


@dataclass(frozen=True)
class TestProfile:
    """What measuring one test's call phase gave (``stats`` None: not measured, ``note`` says why)."""

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
    #: the call's timeline in its compact form (capture/timeline.py), when it is among those drawn
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


class _StepAside:
    """What a fixture calls when it needs the profiler or a quiet GPU (see TestResults.quiet_measurement)."""

    def __init__(self, capture: ContinuousCapture):
        self._capture = capture

    def step_aside(self, reason: str, warn: bool = True) -> None:
        self._capture.step_aside(reason)


class Measurement:
    """Per-test measurement of one process (a plain run or one xdist worker)."""

    def __init__(self, classifier: KernelClassifier, keep_events: bool, cpu_activity: bool, policy: FlushPolicy,
                 use_cupti: bool = True, memory: bool = True, memory_history: bool = False, findings: bool = False,
                 findings_ignore: frozenset[str] = frozenset(), counters: str = "off",
                 counters_interval_ms: float = 1.0, children: bool = True, timelines: Optional[int] = 0,
                 timeline_gap_ms: float = 0.1):
        self.classifier = classifier
        #: tests whose call gets a timeline: the N worst so far (0: none; None: all), and the shortest gap shown
        self.timelines = timelines
        self.timeline_gap_ms = timeline_gap_ms
        #: look for findings in each test (CUPTI then also records the host's waits), leaving out these rules
        self.findings = findings
        self.findings_ignore = findings_ignore
        #: hardware counters: the mode asked for, the capture once open, and what to say about it
        self.counters_mode = counters
        self.counters_interval_ms = counters_interval_ms
        self.counters: Optional[CounterCapture] = None
        self.counters_description = ""
        self.counters_fallback = ""
        self.counters_startup_s: Optional[float] = None
        #: profiles given out without their counters, until a flush has them
        self._awaiting: dict[str, TestProfile] = {}
        self._last_flush = time.perf_counter()
        #: (torch, cuda, source) while the counters wait for torch to bring CUDA up (see prepare)
        self._counters_later: Optional[tuple[Any, bool, Any]] = None
        #: the test whose call is open (node id, perf_counter at its start), for counters that start in it
        self._in_call: Optional[tuple[str, float]] = None
        #: tests whose call ran while the counters waited for CUDA: why they have no counter figures
        self._counters_missing: dict[str, str] = {}
        self._pid = os.getpid()
        #: the pids that are this run's own on the GPU (the counters' "another process" note skips
        #: them); the child-process tracking may replace it with one that adds the tests' children
        self.own_pids: Callable[[], set[int]] = lambda: {os.getpid()}
        #: measure the GPU work of the processes tests start (--gpu-util-children)
        self.children_on = children
        #: the children's spool and merge, while the continuous capture runs with children on
        self.children: Optional[ProcessTree] = None
        #: why child processes are not measured although asked for ("" when they are, or not asked)
        self.children_problem = ""
        #: what the children's side had to say when the session ended (kept for the summary)
        self.children_summary: Optional[dict[str, Any]] = None
        #: read the allocator's counters around each call (--gpu-util-memory), with its history
        self.memory_on = memory
        self.memory_history = memory_history
        #: GPU memory counters, when CUDA is there and they are on (with any way of measuring, or none)
        self.meter: Optional[MemoryMeter] = None
        #: each finished call's memory, by node id, until its record takes it
        self.memory: dict[str, TestMemory] = {}
        self._memory_start: dict[str, tuple[Any, float]] = {}
        self.use_cupti = use_cupti
        self.keep_events = keep_events
        self.cpu_activity = cpu_activity
        self.policy = policy
        self.mode = OFF
        self.cuda = False
        #: what the continuous capture reads from ("CUPTI"), or why there is none
        self.source_name = ""
        self.fallback_reason = ""
        self.capture: Optional[ContinuousCapture] = None
        self._step_aside: Optional[_StepAside] = None
        self._torch: Any = None
        self._restore_guard: Optional[Callable[[], None]] = None
        self._profilers: dict[str, RegionProfiler] = {}
        self._begun: dict[str, float] = {}
        self._prepare_s: Optional[float] = None
        #: the full garbage collection done before the first test (part of the start-up)
        self.startup_gc_s: Optional[float] = None

    @property
    def records_host_waits(self) -> bool:
        """Whether CUPTI records the host's waits: only the host-sync rule reads them, so they are
        not recorded when findings are off or that rule is left out. They come from CUPTI's
        callbacks at the synchronizing calls (capture/host_waits.py), or from activity kind 38 where
        those cannot be had (kind 38 made every launch dearer on an H100: benchmarks/RESULTS.md,
        "2026-11-23 late evening")."""
        return self.findings and "host-sync" not in self.findings_ignore

    @property
    def startup_s(self) -> Optional[float]:
        """Everything done once before the first test: loading the capture, starting its source."""
        return self._prepare_s if self.capture is not None else None

    # -- set-up -----------------------------------------------------------------------------------
    def prepare(self, torch: Any, cuda: bool, source: Optional[EventSource], counter_source: Any = None) -> None:
        """Choose how to measure and start the capture, before the first test (its start-up is charged to none)."""
        began = time.perf_counter()
        try:
            self._prepare(torch, cuda, source)
            self.startup_gc_s = _collect_garbage()
        finally:
            self._prepare_s = time.perf_counter() - began
        if cuda and not torch.cuda.is_initialized():
            # never initialise CUDA here (a test's forked child could then not use it, see
            # capture.continuous.synchronize_if_used): the counters open as torch brings CUDA up
            # (after the activity capture's start, which is queued first); a test whose call does
            # that gets them over the rest of its call, said in its note. Failing that, before the
            # next window.
            if self.counters_mode == "off" or self.mode == OFF:
                return
            self._counters_later = (torch, cuda, counter_source)
            lazy = getattr(torch.cuda, "_lazy_call", None)
            if lazy is not None:
                lazy(self._counters_at_cuda_start)
            return
        self._open_counters(torch, cuda, counter_source)

    def _counters_at_cuda_start(self) -> None:
        """torch's CUDA initialisation calls this: open the counters now (see prepare). Never raises."""
        if self._counters_later is None or os.getpid() != self._pid:
            return  # opened already, or a forked child that inherited torch's queued calls
        torch, cuda, source = self._counters_later
        self._counters_later = None
        try:
            self._open_counters(torch, cuda, source)
            if self.counters is None or self._in_call is None:
                return
            nodeid, began = self._in_call
            after_ms = (time.perf_counter() - began) * 1000
            self.counters.begin(nodeid, remark=f"this test brought CUDA up: the hardware counters started "
                                               f"{after_ms:,.0f} ms into its call (CUDA's start-up, then theirs) and "
                                               "cover the rest of it")
            self._counters_missing.pop(nodeid, None)
            if self.capture is not None:
                self.capture.counters_started()
        except Exception as exc:  # noqa: BLE001 - inside torch's CUDA initialisation: never raise there
            self.counters_fallback = self.counters_fallback or f"hardware counters off: they did not start: {exc}"

    def _open_counters_once_cuda_is_up(self) -> None:
        """Open the counters put off by :meth:`prepare`, once torch has initialised CUDA here."""
        if self._counters_later is None:
            return
        torch, cuda, source = self._counters_later
        if not torch.cuda.is_initialized():
            return
        self._counters_later = None
        self._open_counters(torch, cuda, source)

    def _open_counters(self, torch: Any, cuda: bool, source: Any) -> None:
        """The hardware counters, when asked for and there is a GPU (or a source from the hook)."""
        if self.counters_mode == "off" or self.mode == OFF or not (cuda or source is not None):
            return
        from pytest_gpuutil.hardware.choose import cuda_device, open_counters

        try:
            device = cuda_device(torch) if cuda else None
        except Exception as exc:  # noqa: BLE001 - counters are extra: the tests are measured without them
            self.counters_fallback = f"hardware counters off: the CUDA device could not be read: {exc}"
            return
        opened = open_counters(self.counters_mode, self.counters_interval_ms, device, own_pids=lambda: self.own_pids(),
                               source=source)
        self.counters = opened.capture
        if self.counters is not None and self.timelines != 0:
            self.counters.strips = True
        self.counters_description = opened.description
        self.counters_fallback = opened.fallback
        self.counters_startup_s = opened.startup_s

    def _prepare(self, torch: Any, cuda: bool, source: Optional[EventSource]) -> None:
        self._torch, self.cuda = torch, cuda
        # this process may be a child of a measured test (a nested pytest run): one CUPTI client
        # per process, so the child bootstrap's capture is taken over, not doubled
        from pytest_gpuutil.children import bootstrap

        inherited = bootstrap.take_over()
        if cuda and self.memory_on:
            from pytest_gpuutil.capture.memory import MemoryMeter

            self.meter = MemoryMeter(torch, history=self.memory_history)
        if self.cpu_activity:
            _stop(inherited)
            self.mode = PER_TEST
            return
        if source is None and cuda and self.use_cupti:
            from pytest_gpuutil.capture.cupti import CuptiError, CuptiSource

            try:
                source = inherited or CuptiSource(demangle=getattr(torch._C, "_demangle", None),
                                                  host_syncs=self.records_host_waits, waits_from_callbacks=True)
            except CuptiError as exc:
                self.fallback_reason = f"CUPTI not usable ({exc}): each test profiled with torch.profiler (slower)"
        if source is not inherited:
            _stop(inherited)
        if source is None:
            self.mode = PER_TEST if cuda else OFF
            if self.children_on and cuda:
                self.children_problem = "child processes are measured only with the continuous CUPTI capture"
            return
        from pytest_gpuutil.capture.continuous import ContinuousCapture, synchronize_if_used
        from pytest_gpuutil.capture.profiler import guard_profiler_starts

        enabled = getattr(torch.autograd, "_profiler_enabled", None)
        self.capture = ContinuousCapture(
            source,
            self.classifier,
            synchronize=synchronize_if_used(torch) if cuda else (lambda: None),
            profiler_active=(lambda: bool(enabled())) if enabled is not None else (lambda: False),
            keep_events=self.keep_events,
            findings=self.findings,
            findings_ignore=self.findings_ignore,
            device_name=(lambda: torch.cuda.get_device_name(0) if torch.cuda.is_initialized() else None) if cuda
            else (lambda: None),
            timeline_wanted=self._timeline_choice(),
            timeline_gap_ns=int(self.timeline_gap_ms * 1e6),
        )
        self.mode = CONTINUOUS
        self.source_name = source.name
        self._step_aside = _StepAside(self.capture)  # what each test's fixtures call (one for all)
        if cuda and source is not inherited and getattr(source, "ever_started", None) is False:
            self._wait_for_cuda(torch)
        self._restore_guard = guard_profiler_starts(torch, self.capture.before_foreign_profiler)
        if not self.capture.ensure_started() and self.capture.broken:
            warnings.warn(f"pytest-gpuutil: {self.capture.broken}; tests are not measured", stacklevel=2)
        if self.children_on:
            self._start_children(torch, source)

    def _timeline_choice(self) -> Optional[Callable[..., bool]]:
        """Which windows get a timeline: those among the worst so far (see report/timelines.py)."""
        if self.timelines == 0:
            return None
        from pytest_gpuutil.report.timelines import TimelineChoice

        choice = TimelineChoice(self.timelines)

        def wanted(key: Any, wall_ms: float, stats: WindowStats, findings: Optional[tuple[Finding, ...]]) -> bool:
            impact = max((f.impact_pct for f in findings or ()), default=None)
            has_work = bool(stats.kernel_count or stats.busy_us)
            return choice.offer(str(key), TimelineChoice.scores(wall_ms, stats.busy_pct, has_work, impact))[0]

        return wanted

    def _wait_for_cuda(self, torch: Any) -> None:
        """CUPTI starts when torch initialises CUDA here, not before (see CuptiSource.now).

        A process that touched CUPTI before fork() leaves its forked children a CUPTI that records
        nothing and hangs at their exit; and while CUDA is not up here, no GPU work of this
        process can be missed. torch runs ``cuda_ready`` inside its CUDA initialisation
        (``torch.cuda._lazy_call``); each window also looks (``torch.cuda.is_initialized``).
        """
        cuda = torch.cuda
        if cuda.is_initialized():
            return
        self.capture.ready = cuda.is_initialized
        lazy = getattr(cuda, "_lazy_call", None)
        if lazy is not None:
            lazy(self.capture.cuda_ready)

    def _start_children(self, torch: Any, source: EventSource) -> None:
        """The spool the tests' child processes hand their GPU work to (see pytest_gpuutil.children)."""
        from pytest_gpuutil.children.collect import start_process_tree
        from pytest_gpuutil.machine.loaded_libraries import find_loaded_library

        try:
            self.children = start_process_tree(
                self.classifier, source.now, demangle=getattr(torch._C, "_demangle", None),
                cupti_library=getattr(source, "library_path", None) or find_loaded_library())
        except Exception as exc:  # noqa: BLE001 - this process's own measuring goes on
            self.children_problem = f"child processes are not measured: {exc}"
            return
        self.capture.children = self.children

    # -- per test ---------------------------------------------------------------------------------
    def begin(self, nodeid: str, results: Any) -> Optional[TestProfile]:
        """Open the test's window (or start its profiler); a profile at once if it cannot be measured."""
        if self._counters_later is not None:
            self._open_counters_once_cuda_is_up()
        self._in_call = (nodeid, time.perf_counter())
        if self.counters is None and self._counters_later is not None:
            self._counters_missing[nodeid] = ("no hardware counters: CUDA was not up in this process when the call "
                                              "began (they start once it is)")
        if self.meter is not None:
            began = time.perf_counter()
            try:
                self._memory_start[nodeid] = (self.meter.begin(), time.perf_counter() - began)
            except Exception:  # noqa: BLE001 - memory figures are then missing, the test runs on
                pass
        if self.mode == CONTINUOUS:
            self.capture.begin(nodeid)
            results.measurement = self._step_aside
            if self.counters is not None:
                self.counters.begin(nodeid)
        elif self.mode == PER_TEST:
            from pytest_gpuutil.capture.profiler import RegionProfiler

            began = time.perf_counter()
            profiler = RegionProfiler(self.classifier, cuda=self.cuda, cpu_activity=self.cpu_activity,
                                      keep=self.keep_events, findings=self.findings,
                                      findings_ignore=self.findings_ignore)
            try:
                profiler.start()
            except Exception as exc:  # noqa: BLE001 - profiling must never fail the test
                return TestProfile(None, None, f"profiler did not start: {exc}")
            self._profilers[nodeid] = profiler
            self._begun[nodeid] = time.perf_counter() - began
            results.measurement = profiler
            if self.counters is not None:
                self.counters.begin(nodeid)
        return None

    def end(self, nodeid: str, results: Any) -> Optional[TestProfile]:
        """Close the window; the profile now if it is already known (per-test profiling), else None."""
        results.measurement = None
        self._in_call = None
        if self.mode == CONTINUOUS:
            self.capture.end()
            if self.counters is not None:
                self.counters.end()
            self._end_memory(nodeid)
            return None
        self._end_memory(nodeid)
        profiler = self._profilers.pop(nodeid, None)
        if profiler is None:
            return None
        began = time.perf_counter()
        try:
            region = profiler.stop()
        except Exception as exc:  # noqa: BLE001
            return TestProfile(None, None, f"profiler error: {exc}")
        from pytest_gpuutil.analysis.windows import WindowStats

        stats = WindowStats.from_summary(region.summary) if region.summary is not None and self.cuda else None
        if self.counters is not None:
            self.counters.end()
        cost_ms = (self._begun.pop(nodeid, 0.0) + time.perf_counter() - began) * 1000
        profile = TestProfile(region.wall_ms, stats, region.note, cost_ms, region.window,
                              profiler=profiler if profiler.prof is not None else None,
                              findings=region.findings if stats is not None else None)
        return self._with_counters({nodeid: profile}, wait=False)[nodeid]  # counters: now if read, else later

    def _end_memory(self, nodeid: str) -> None:
        started = self._memory_start.pop(nodeid, None)
        if started is None or self.meter is None:
            return
        start, begin_cost = started
        began = time.perf_counter()
        try:
            devices = self.meter.end(start)
        except Exception:  # noqa: BLE001
            return
        self.memory[nodeid] = TestMemory(devices, start, (begin_cost + time.perf_counter() - began) * 1000)

    # -- flushing -------------------------------------------------------------------------------
    @property
    def pending_tests(self) -> int:
        return self.capture.pending_tests if self.capture is not None else 0

    def flush_due(self) -> Optional[str]:
        """Why a flush is due now (the policy's reason), or None.

        Tests whose profiles wait only for their hardware counters count once the samples cover
        the first of them: before that a flush could give none of them, and counting them made
        every test's teardown flush while the sampler had not polled (tests=100 and 100 tests
        waiting).
        """
        capture = self.capture
        pending = capture.pending_tests if capture is not None else 0
        if self._awaiting and self.counters is not None and self.counters.first_waiting_covered():
            pending += len(self._awaiting)
        if not pending:
            return None
        return self.policy.reason(pending, capture.pending_bytes() if capture is not None else 0,
                                  time.perf_counter() - self._last_flush)

    def flush(self, wait: bool = True) -> dict[str, TestProfile]:
        """Profiles of every window closed since the last flush, by node id.

        ``wait=False`` (a flush the policy asked for) does not wait for the hardware counters of
        the last windows: their profiles come now marked ``counters_pending`` and again, complete,
        from a later flush.
        """
        self._last_flush = time.perf_counter()
        profiles = _profiles(self.capture.flush()) if self.capture is not None else {}
        return self._with_counters(profiles, wait)

    def close(self) -> dict[str, TestProfile]:
        """The session's end: what is left, then the sources stop, the guard comes off and the
        children's spool is removed (children still running are noted, never waited for long)."""
        try:
            profiles = _profiles(self.capture.close()) if self.capture is not None else {}
            if self.counters is not None:
                self.counters.end()
            profiles = self._with_counters(profiles, wait=True)
            if self.counters is not None:
                try:
                    self.counters.sampler.stop(background=True)  # the device is released while the session ends
                except Exception as exc:  # noqa: BLE001 - the records are out; the summary says so
                    self.counters_fallback = self.counters_fallback or f"the hardware counters failed to stop: {exc}"
        finally:
            if self._restore_guard is not None:
                self._restore_guard()
                self._restore_guard = None
            if self.children is not None:
                children, self.children = self.children, None
                try:
                    children.close()
                finally:
                    self.children_summary = children.summary()
        return profiles

    def _with_counters(self, profiles: dict[str, TestProfile], wait: bool) -> dict[str, TestProfile]:
        """The profiles with their hardware counters where known; the others marked pending and kept
        until a flush has them (they come out again then, with the profiles awaited before)."""
        profiles = self._with_missing_counters(profiles)
        if self.counters is None:
            return profiles
        try:
            got = self.counters.flush(wait)
        except Exception as exc:  # noqa: BLE001 - the records go out without counters, never stuck
            self.counters_fallback = self.counters_fallback or f"the hardware counters could not be read: {exc}"
            got, wait = {}, True
        waiting = self.counters.waiting() if not wait else set()
        out = {}
        for key, profile in profiles.items():
            if key in got:
                out[key] = dataclasses.replace(profile, counters=got[key])
            elif key in waiting:
                self._awaiting[key] = profile
                out[key] = dataclasses.replace(profile, counters_pending=True)
            else:
                out[key] = profile
        for key in [k for k in self._awaiting if k in got or k not in waiting]:
            out[key] = dataclasses.replace(self._awaiting.pop(key), counters=got.get(key))
        return out

    def _with_missing_counters(self, profiles: dict[str, TestProfile]) -> dict[str, TestProfile]:
        """Tests that ran while the counters waited for CUDA: empty figures, with the reason."""
        if not self._counters_missing:
            return profiles
        from pytest_gpuutil.hardware.capture import TestCounters

        missing = {k: self._counters_missing.pop(k) for k in list(profiles) if k in self._counters_missing}
        return {k: dataclasses.replace(p, counters=TestCounters("", {}, None, None, missing[k])) if k in missing else p
                for k, p in profiles.items()}

    def counters_info(self) -> dict[str, Any]:
        """What the summary says about the counters of this process (JSON-able)."""
        if self.counters is None:
            return {"counters": "", "counters_fallback": self.counters_fallback}
        cost = self.counters.sampler.cost()
        return {"counters": self.counters_description, "counters_fallback": self.counters_fallback,
                "counters_startup_s": self.counters_startup_s,
                "counters_cost": {**dataclasses.asdict(cost), "flush_s": self.counters.flush_s,
                                  "error": self.counters.sampler.error,
                                  "later": [e for e in (self.counters.sampler.energy_error,
                                                        self.counters.sampler.process_error)
                                            if e and e not in self.counters_fallback]}}

    def children_info(self) -> dict[str, Any]:
        """What the summary says of this process's child processes (JSON-able; empty when off)."""
        info: dict[str, Any] = dict(self.children_summary or {})
        if self.children is not None:
            info = self.children.summary()
        if self.children_problem:
            info["problem"] = self.children_problem
        return info


def _collect_garbage() -> float:
    """One full garbage collection before the first test; its seconds.

    What the session imported (torch: ~200,000 objects) leaves Python's collector a full collection
    owed; without this, the plugin's own allocations brought it due inside a test's window (one
    full collection of ~0.1 s among 300 small tests on the development machine, none in a plain
    run, which pays it at its exit instead). Done here, it is part of the start-up and no test's.
    """
    began = time.perf_counter()
    gc.collect()
    return time.perf_counter() - began


def _stop(source: Any) -> None:
    if source is not None:
        try:
            source.stop()
        except Exception:  # noqa: BLE001
            pass


def _profiles(results: list[Any]) -> dict[str, TestProfile]:
    """TestProfiles, by node id, from a continuous capture's WindowResults."""
    return {r.key: TestProfile(r.wall_ms, r.stats, r.note, r.measure_ms,
                               r.stats.window if r.stats is not None else None, r.events,
                               findings=r.findings, syncs=r.syncs, processes=getattr(r, "processes", ()),
                               timeline=getattr(r, "timeline", None))
            for r in results}
