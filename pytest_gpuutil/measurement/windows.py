"""The call's window: how each test's call phase is measured, chosen once before the first test.

- :class:`ContinuousWindows` (the default on a CUDA machine): one event source (CUPTI, or what a
  ``pytest_gpuutil_event_source`` hook returns) collects across tests; each call phase is a
  window, and windows become profiles in bulk when the capture is flushed;
- :class:`ProfilerWindows`: a torch.profiler session around each call phase, when CUPTI cannot
  be used or CPU activity is asked for (``--gpu-util-cpu``);
- :class:`CallWindows` itself: not measured (no CUDA, or before the choice).
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from pytest_gpuutil.measurement.call_profile import CONTINUOUS, OFF, PER_TEST, TestProfile, profile_items

if TYPE_CHECKING:
    from pytest_gpuutil.analysis.classify import KernelClassifier
    from pytest_gpuutil.analysis.finding_records import Finding
    from pytest_gpuutil.analysis.windows import WindowStats
    from pytest_gpuutil.capture.continuous import ContinuousCapture, EventSource
    from pytest_gpuutil.capture.profiler import RegionProfiler


@dataclass(frozen=True)
class WindowSettings:
    """What the options ask of the windows."""

    classifier: KernelClassifier
    keep_events: bool
    cpu_activity: bool
    use_cupti: bool = True
    #: look for findings in each test, leaving out these rules
    findings: bool = False
    findings_ignore: frozenset[str] = frozenset()
    #: tests whose call gets a timeline: the N worst so far (0: none; None: all), and the shortest gap shown
    timelines: Optional[int] = 0
    timeline_gap_ms: float = 0.1

    @property
    def records_host_waits(self) -> bool:
        """Whether CUPTI records the host's waits: only the host-sync rule reads them, so they are
        not recorded when findings are off or that rule is left out. They come from CUPTI's
        callbacks at the synchronizing calls (capture/host_waits.py), or from activity kind 38 where
        those cannot be had (kind 38 made every launch dearer on an H100: benchmarks/RESULTS.md,
        "2026-11-23 late evening")."""
        return self.findings and "host-sync" not in self.findings_ignore


class CallWindows:
    """Calls not measured: no CUDA here, or the choice not made yet."""

    mode = OFF
    #: the continuous capture, when there is one
    capture: Optional[ContinuousCapture] = None
    #: what the continuous capture reads from ("CUPTI"), and the source itself
    source_name = ""
    source: Optional[EventSource] = None
    #: why child processes cannot be measured with these windows ("" where that is not said)
    children_problem = ""

    def begin(self, nodeid: str, results: Any) -> Optional[TestProfile]:
        """Open the call's window; a profile at once if it cannot be measured."""
        return None

    def end(self, nodeid: str, results: Any) -> Optional[TestProfile]:
        """Close it; the profile now if it is already known (per-test profiling), else None."""
        results.measurement = None
        return None

    @property
    def pending_tests(self) -> int:
        return 0

    def pending_bytes(self) -> int:
        return 0

    def flush(self) -> dict[str, TestProfile]:
        return {}

    def close(self) -> dict[str, TestProfile]:
        return {}

    @property
    def broken(self) -> str:
        return ""


class _StepAside:
    """What a fixture calls when it needs the profiler or a quiet GPU (see TestResults.quiet_measurement)."""

    def __init__(self, capture: ContinuousCapture):
        self._capture = capture

    def step_aside(self, reason: str, warn: bool = True) -> None:
        self._capture.step_aside(reason)


class ContinuousWindows(CallWindows):
    """Each call a window of one capture that runs across tests."""

    mode = CONTINUOUS

    def __init__(self, capture: ContinuousCapture, source: EventSource, restore_guard: Callable[[], None]):
        self.capture = capture
        self.source = source
        self.source_name = source.name
        self._restore_guard: Optional[Callable[[], None]] = restore_guard
        self._step_aside = _StepAside(capture)  # what each test's fixtures call (one for all)

    def begin(self, nodeid: str, results: Any) -> Optional[TestProfile]:
        self.begin_at(nodeid, results, None)
        return None

    def end(self, nodeid: str, results: Any) -> Optional[TestProfile]:
        self.end_at(nodeid, results, None)
        return None

    def begin_at(self, nodeid: str, results: Any, began: Optional[float]) -> float:
        """:meth:`begin` from the caller's clock ``began``; the clock when the call's wall time starts."""
        opened = self.capture.begin(nodeid, began)
        results.measurement = self._step_aside
        return opened

    def end_at(self, nodeid: str, results: Any, began: Optional[float]) -> float:
        """:meth:`end` from the caller's clock ``began``; the clock when the plugin's work for it ended."""
        results.measurement = None
        return self.capture.end(began)

    @property
    def pending_tests(self) -> int:
        return self.capture.pending_tests

    def pending_bytes(self) -> int:
        return self.capture.pending_bytes()

    def flush(self) -> dict[str, TestProfile]:
        return self.capture.flush(make_all=profile_items) or {}  # profiles straight from the columns: no WindowResults

    def close(self) -> dict[str, TestProfile]:
        try:
            return self.capture.close(make_all=profile_items) or {}
        finally:
            if self._restore_guard is not None:
                self._restore_guard()
                self._restore_guard = None

    @property
    def broken(self) -> str:
        return self.capture.broken


class ProfilerWindows(CallWindows):
    """A torch.profiler session around each call (slower; CPU activity too with --gpu-util-cpu)."""

    mode = PER_TEST

    def __init__(self, settings: WindowSettings, cuda: bool):
        self._settings = settings
        self._cuda = cuda
        self._profilers: dict[str, RegionProfiler] = {}
        self._begun: dict[str, float] = {}

    def begin(self, nodeid: str, results: Any) -> Optional[TestProfile]:
        from pytest_gpuutil.capture.profiler import RegionProfiler

        s = self._settings
        began = time.perf_counter()
        profiler = RegionProfiler(s.classifier, cuda=self._cuda, cpu_activity=s.cpu_activity, keep=s.keep_events,
                                  findings=s.findings, findings_ignore=s.findings_ignore)
        try:
            profiler.start()
        except Exception as exc:  # noqa: BLE001 - profiling must never fail the test
            return TestProfile(None, None, f"profiler did not start: {exc}")
        self._profilers[nodeid] = profiler
        self._begun[nodeid] = time.perf_counter() - began
        results.measurement = profiler
        return None

    def end(self, nodeid: str, results: Any) -> Optional[TestProfile]:
        results.measurement = None
        profiler = self._profilers.pop(nodeid, None)
        if profiler is None:
            return None
        began = time.perf_counter()
        try:
            region = profiler.stop()
        except Exception as exc:  # noqa: BLE001
            return TestProfile(None, None, f"profiler error: {exc}")
        from pytest_gpuutil.analysis.windows import WindowStats

        stats = WindowStats.from_summary(region.summary) if region.summary is not None and self._cuda else None
        cost_ms = (self._begun.pop(nodeid, 0.0) + time.perf_counter() - began) * 1000
        return TestProfile(region.wall_ms, stats, region.note, cost_ms, region.window,
                           profiler=profiler if profiler.prof is not None else None,
                           findings=region.findings if stats is not None else None)


@dataclass(frozen=True)
class Chosen:
    """The windows chosen, and why not the continuous capture where it was not."""

    windows: CallWindows
    fallback_reason: str = ""


def choose_windows(settings: WindowSettings, torch: Any, cuda: bool, source: Optional[EventSource]) -> Chosen:
    """The continuous capture where a source is there (CUPTI by default), else a profiler per test
    on CUDA, else none; a nested pytest run takes over the child bootstrap's capture."""
    # this process may be a child of a measured test (a nested pytest run): one CUPTI client
    # per process, so the child bootstrap's capture is taken over, not doubled
    from pytest_gpuutil.children import bootstrap

    inherited = bootstrap.take_over()
    if settings.cpu_activity:
        _stop(inherited)
        return Chosen(ProfilerWindows(settings, cuda))
    fallback = ""
    if source is None and cuda and settings.use_cupti:
        from pytest_gpuutil.capture.cupti import CuptiError, CuptiSource

        try:
            source = inherited or CuptiSource(demangle=getattr(torch._C, "_demangle", None),
                                              host_syncs=settings.records_host_waits, waits_from_callbacks=True)
        except CuptiError as exc:
            fallback = f"CUPTI not usable ({exc}): each test profiled with torch.profiler (slower)"
    if source is not inherited:
        _stop(inherited)
    if source is None:
        if not cuda:
            return Chosen(CallWindows(), fallback)
        windows = ProfilerWindows(settings, cuda)
        windows.children_problem = "child processes are measured only with the continuous CUPTI capture"
        return Chosen(windows, fallback)
    return Chosen(_continuous(settings, torch, cuda, source, inherited=source is inherited), fallback)


def _continuous(settings: WindowSettings, torch: Any, cuda: bool, source: EventSource, inherited: bool) -> ContinuousWindows:
    from pytest_gpuutil.capture.continuous import ContinuousCapture, synchronize_if_used
    from pytest_gpuutil.capture.profiler import guard_profiler_starts

    enabled = getattr(torch.autograd, "_profiler_enabled", None)
    capture = ContinuousCapture(
        source,
        settings.classifier,
        synchronize=synchronize_if_used(torch, getattr(source, "quiet_waits", None)) if cuda else (lambda: None),
        profiler_active=enabled if enabled is not None else (lambda: False),  # torch's C call answers a bool
        keep_events=settings.keep_events,
        findings=settings.findings,
        findings_ignore=settings.findings_ignore,
        device_name=(lambda: torch.cuda.get_device_name(0) if torch.cuda.is_initialized() else None) if cuda
        else (lambda: None),
        timeline_wanted=_timeline_choice(settings.timelines),
        timeline_gap_ns=int(settings.timeline_gap_ms * 1e6),
        places=_host_places(settings, source, cuda),
    )
    if cuda and not inherited and getattr(source, "ever_started", None) is False:
        _wait_for_cuda(capture, torch)
    windows = ContinuousWindows(capture, source, guard_profiler_starts(torch, capture.before_foreign_profiler))
    if not capture.ensure_started() and capture.broken:
        warnings.warn(f"pytest-gpuutil: {capture.broken}; tests are not measured", stacklevel=3)
    return windows


def _host_places(settings: WindowSettings, source: EventSource, cuda: bool) -> Any:
    """The findings' places (capture/places): with findings on, on CUDA (or a source that asks for them,
    ``wants_places``: the plugin's CPU tests); None otherwise or where it cannot start."""
    if not (settings.findings and (cuda or getattr(source, "wants_places", False))):
        return None
    try:
        from pytest_gpuutil.capture.places.host import HostPlaces

        return HostPlaces(source.now, getattr(source, "_to_ns", None))
    except Exception:  # noqa: BLE001 - findings without places
        return None


def _timeline_choice(timelines: Optional[int]) -> Optional[Callable[..., bool]]:
    """Which windows get a timeline: those among the worst so far (see report/timelines.py)."""
    if timelines == 0:
        return None
    from pytest_gpuutil.report.timelines import TimelineChoice

    choice = TimelineChoice(timelines)

    def wanted(key: Any, wall_ms: float, stats: WindowStats, findings: Optional[tuple[Finding, ...]]) -> bool:
        impact = max((f.impact_pct for f in findings or ()), default=None)
        has_work = bool(stats.kernel_count or stats.busy_us)
        return choice.offer(str(key), TimelineChoice.scores(wall_ms, stats.busy_pct, has_work, impact))[0]

    return wanted


def _wait_for_cuda(capture: ContinuousCapture, torch: Any) -> None:
    """CUPTI starts when torch initialises CUDA here, not before (see CuptiSource.now).

    A process that touched CUPTI before fork() leaves its forked children a CUPTI that records
    nothing and hangs at their exit; and while CUDA is not up here, no GPU work of this
    process can be missed. torch runs ``cuda_ready`` inside its CUDA initialisation
    (``torch.cuda._lazy_call``); each window also looks (``torch.cuda.is_initialized``).
    """
    cuda = torch.cuda
    if cuda.is_initialized():
        return
    capture.ready = cuda.is_initialized
    lazy = getattr(cuda, "_lazy_call", None)
    if lazy is not None:
        lazy(capture.cuda_ready)


def _stop(source: Any) -> None:
    if source is not None:
        try:
            source.stop()
        except Exception:  # noqa: BLE001
            pass
