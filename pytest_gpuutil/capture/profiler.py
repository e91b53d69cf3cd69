"""Profile one region (a test's call phase) with torch.profiler and analyse it in memory.

torch is imported only when a profiler is started. While a region is profiled, a guard wraps
``torch.autograd.profiler.profile._prepare_trace`` (the step every torch.profiler and
autograd-profiler session goes through): if code inside the region starts its own profiler,
ours stops first and the region is reported as not measured, instead of the two fighting.
"""
from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.analysis.findings import Finding, find_in_trace
from pytest_gpuutil.analysis.summary import TraceSummary, analyze
from pytest_gpuutil.capture.live_events import trace_from_profiler
from pytest_gpuutil.traces.model import Window


class GpuUtilWarning(UserWarning):
    """pytest-gpuutil could not measure something and says why."""


@dataclass(frozen=True)
class RegionProfile:
    """What profiling one region gave: a summary, or a note saying why there is none."""

    wall_ms: float
    summary: Optional[TraceSummary]
    window: Optional[Window]
    note: str = ""
    #: what to fix (None: findings were not looked for)
    findings: Optional[tuple[Finding, ...]] = None


@contextlib.contextmanager
def _quiet_profiler() -> Iterator[None]:
    """Silence torch.profiler's "clears events at the end of each cycle" (we run one cycle)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
        yield


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


class RegionProfiler:
    """Start/stop torch.profiler around a region; ``stop()`` returns a RegionProfile.

    ``keep`` keeps the torch profiler object after stop so that ``export(path)`` can write
    a Chrome trace; otherwise it is dropped at once.
    """

    def __init__(
        self,
        classifier: KernelClassifier,
        cuda: bool,
        cpu_activity: bool = False,
        keep: bool = False,
        window_source: str = "test_call",
        findings: bool = False,
        findings_ignore: frozenset[str] = frozenset(),
    ):
        self.classifier = classifier
        self.findings = findings
        self.findings_ignore = findings_ignore
        self.cuda = cuda
        self.cpu_activity = cpu_activity
        self.keep = keep
        self.window_source = window_source
        self.prof: Any = None
        self._torch: Any = None
        self._note = ""
        self._starting = False
        self._restore_guard: Optional[Callable[[], None]] = None
        self._t0_ns = 0
        self._p0 = 0.0

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        self._torch = torch
        profiler_enabled = getattr(torch.autograd, "_profiler_enabled", None)
        if profiler_enabled is not None and profiler_enabled():
            # someone else's session is running (e.g. started in a fixture): starting ours would wreck it
            self._note = "a torch.profiler session was already active"
            self._t0_ns, self._p0 = time.time_ns(), time.perf_counter()
            warnings.warn(GpuUtilWarning(f"pytest-gpuutil: {self._note}; not measured"), stacklevel=2)
            return
        activities = []
        if self.cuda:
            activities.append(ProfilerActivity.CUDA)
        if self.cpu_activity or not self.cuda:
            activities.append(ProfilerActivity.CPU)
        if self.cuda:
            torch.cuda.synchronize()
        self.prof = profile(activities=activities)
        self._starting = True
        try:
            with _quiet_profiler():
                self.prof.start()
        finally:
            self._starting = False
        self._install_guard()
        self._t0_ns = time.time_ns()
        self._p0 = time.perf_counter()

    def stop(self) -> RegionProfile:
        sync_end_ns = time.time_ns()  # the synchronize below is ours, not the region's
        if self.cuda:
            self._torch.cuda.synchronize()
        t1_ns = time.time_ns()
        wall_ms = (time.perf_counter() - self._p0) * 1000
        self._remove_guard()
        if self._note:
            return RegionProfile(wall_ms, None, None, self._note)
        with _quiet_profiler():
            self.prof.stop()
        window = Window(self._t0_ns, t1_ns, self.window_source)
        trace = trace_from_profiler(self.prof, label=self.window_source)
        summary = analyze(trace, self.classifier, window=window)
        findings = None
        if self.findings:
            try:
                findings = find_in_trace(trace, window, self.classifier, ignore=self.findings_ignore,
                                         sync_end_ns=sync_end_ns, summary=summary)
            except Exception:  # noqa: BLE001 - the figures stand without findings (the record says none were looked for)
                findings = None
        if not self.keep:
            self.prof = None
        return RegionProfile(wall_ms, summary, window, findings=findings)

    def step_aside(self, reason: str, warn: bool = True) -> None:
        """Stop measuring this region (someone else needs the profiler); say why."""
        if self._note or self.prof is None:
            return
        self._note = reason
        self._remove_guard()
        try:
            self.prof.stop()
        except Exception:  # noqa: BLE001 - the profiler is being handed over; its state is moot
            pass
        self.prof = None
        if warn:
            warnings.warn(GpuUtilWarning(f"pytest-gpuutil: {reason}; this test is not measured"), stacklevel=3)

    def export(self, path: str) -> None:
        """Write the profiled region as a Chrome trace (gzip'd when ``path`` ends in .gz)."""
        if self.prof is None:
            raise RuntimeError("no profile to export")
        self.prof.export_chrome_trace(path)

    # -- the guard -------------------------------------------------------------------------
    def _install_guard(self) -> None:
        def on_foreign_start() -> None:
            if not self._starting:
                self.step_aside("the test started its own torch.profiler session")

        self._restore_guard = guard_profiler_starts(self._torch, on_foreign_start)

    def _remove_guard(self) -> None:
        if self._restore_guard is not None:
            self._restore_guard()
            self._restore_guard = None


def guard_profiler_starts(torch: Any, before_start: Callable[[], None]) -> Optional[Callable[[], None]]:
    """Call ``before_start()`` whenever a torch.profiler or autograd-profiler session is about to start.

    Wraps ``torch.autograd.profiler.profile._prepare_trace``, the step every such session goes
    through; returns the function that puts the original back (None on a torch without it).
    Guards nest: each restores the one it wrapped.
    """
    autograd_profile = getattr(torch.autograd.profiler, "profile", None)
    original = getattr(autograd_profile, "_prepare_trace", None)
    if original is None:  # very old torch: no guard, nested profilers are the user's risk
        return None

    def _prepare_trace(prof_self: Any, *args: Any, **kwargs: Any) -> Any:
        before_start()
        return original(prof_self, *args, **kwargs)

    autograd_profile._prepare_trace = _prepare_trace

    def restore() -> None:
        autograd_profile._prepare_trace = original

    return restore
