"""A counter source whose slow start runs on the sampler's thread, not on the tests' thread.

CUPTI PM sampling takes ~0.4 s to start (profiler initialise, counter availability, the config
image, SetConfig, the counter data image: :mod:`pytest_gpuutil.hardware.cupti_pm`); the calls
release the GIL, so made from the sampler's thread they overlap the tests instead of holding the
session up. :class:`DeferredStart` wraps the sources to try, best first (PM sampling, then NVML
GPM): its ``start`` returns at once, and its first ``poll`` (on the sampler's thread) starts the
first source that will, keeping each refusal's reason. Windows that open before its samples begin
are cut at :attr:`DeferredStart.started_ns` by the capture, which says so in their note.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

from pytest_gpuutil.analysis.counters import CounterSamples

#: how long a flush waits for samples while the source is still starting (s): its start-up and a poll
STARTING_SYNC_TIMEOUT_S = 10.0


class DeferredStart:
    """The first of ``sources`` that starts, started from the sampler's thread (see the module docstring).

    ``sources`` are ``(label, make)`` pairs: ``make()`` builds the source (it may raise), e.g.
    ``("CUPTI PM sampling", lambda: PmSamplingSource(...))``. ``reason(exc)`` words a refusal.
    """

    #: its samples begin on the sampler's thread, at ``started_ns``: whether that has happened yet or
    #: not (``starting``), a window that began before is cut there
    starts_on_thread = True

    def __init__(self, sources: Sequence[tuple[str, Callable[[], Any]]],
                 reason: Callable[[BaseException], str] = str, clock: Callable[[], int] = time.time_ns):
        self._pending = list(sources)
        self._reason = reason
        self._clock = clock
        self.source: Any = None
        #: the label of the source that started ("" until one did)
        self.label = ""
        #: why each source before it (or every source) did not start: "label: reason"
        self.reasons: list[str] = []
        #: when its samples begin, on the sampler's clock (0 until started)
        self.started_ns = 0
        #: seconds the start took on the sampler's thread (None until it ended, started or not)
        self.startup_s: Optional[float] = None
        self.startup_cpu_s = 0.0
        #: no source started: the sampler goes on with energy and the process check only
        self.failed = False
        self._tried = False

    # -- what the sampler and the capture read: the started source's, or "not yet" ---------------
    @property
    def name(self) -> str:
        """The started source's name; "counters" while starting, "" when none started (energy only)."""
        return getattr(self.source, "name", "") or ("" if self.failed else "counters")

    @property
    def period_ns(self) -> Optional[int]:
        return getattr(self.source, "period_ns", None)

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(getattr(self.source, "fields", ()))

    @property
    def samples(self) -> int:
        return int(getattr(self.source, "samples", 0))

    @property
    def poll_interval_s(self) -> float:
        """At once until started (the first poll starts it), then the started source's."""
        if not self._tried:
            return 1e-4
        return float(getattr(self.source, "poll_interval_s", 0.0) or 0.0) or 0.1

    @property
    def sync_timeout_s(self) -> Optional[float]:
        if not self._tried:
            return STARTING_SYNC_TIMEOUT_S
        return getattr(self.source, "sync_timeout_s", None)

    @property
    def starting(self) -> bool:
        return not self._tried

    def __getattr__(self, name: str) -> Any:  # chip, startup_steps, decode_s...: the started source's
        if name.startswith("_") or name == "source":
            raise AttributeError(name)
        source = self.__dict__.get("source")
        if source is None:
            raise AttributeError(name)
        return getattr(source, name)

    # -- the source protocol ----------------------------------------------------------------------
    def start(self) -> None:
        """Nothing here: the sampler's thread starts a source at its first poll."""

    def poll(self) -> CounterSamples:
        if not self._tried:
            self._start_one()
        if self.source is None:
            raise RuntimeError(f"no source started ({'; '.join(self.reasons)})")
        return self.source.poll()

    def _start_one(self) -> None:
        began, cpu = time.perf_counter(), time.thread_time()
        try:
            for label, make in self._pending:
                try:
                    source = make()
                    source.start()
                except Exception as exc:  # noqa: BLE001 - the next source, or the reasons for none
                    self.reasons.append(f"{label}: {self._reason(exc)}")
                    continue
                self.started_ns = self._clock()
                self.source, self.label = source, label
                return
            self.failed = True
        finally:
            self._pending = []
            self.startup_s = time.perf_counter() - began
            self.startup_cpu_s = time.thread_time() - cpu
            self._tried = True

    def stop(self) -> CounterSamples:
        if self.source is None:
            self._tried = True  # never polled: nothing was started, nothing is left to release
            self._pending = []
            return CounterSamples()
        return self.source.stop()
