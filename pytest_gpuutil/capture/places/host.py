"""What the host did during the tests' calls, for the findings' places: the calls' places and the stack samples.

One object per capture (:class:`HostPlaces`): :meth:`begin` and :meth:`end` bracket a test's call
(the sampler runs only then), :meth:`take` hands a flush everything since the last one, and
:meth:`attach` gives each window's findings their places
(:func:`pytest_gpuutil.analysis.places.with_places`). :meth:`before_cuda_note` rewrites the note
of a call that brought CUDA up: its time before CUDA came up split into the test's own host work
(with its places) and CUDA's start-up. Nothing here ever raises into the session: a failure leaves
the findings without places.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from pytest_gpuutil.analysis.finding_records import Finding
from pytest_gpuutil.analysis.places import HostActivity, HostCalls, HostSamples, before_cuda, source_text, with_places
from pytest_gpuutil.capture.places.calls import CallPlaces, is_users, skipped_prefixes
from pytest_gpuutil.capture.places.sampler import INTERVAL_S, StackSampler
from pytest_gpuutil.traces.model import GpuColumns, Window

#: sampled places a timeline keeps at most (evenly spaced)
MAX_TIMELINE_SAMPLES = 2_000


def busy_blocks(events: GpuColumns) -> tuple[list[int], list[int]]:
    """The union of a window's GPU work, as sorted block starts and ends (all devices together)."""
    import numpy as np

    from pytest_gpuutil.analysis.grouping import blocks

    starts = np.asarray(events.starts_ns, dtype=np.int64)
    if not starts.size:
        return [], []
    order = np.argsort(starts, kind="stable")
    ends = starts + np.asarray(events.durs_ns, dtype=np.int64)
    block_starts, block_ends = blocks(starts[order], ends[order])
    return block_starts.tolist(), block_ends.tolist()


class HostPlaces:
    """The host's calls with places and its stack samples, taken per flush (see the module)."""

    def __init__(self, clock: Callable[[], int], to_ns: Optional[Callable[[Any], Any]] = None,
                 interval_s: float = INTERVAL_S, calls: bool = True):
        prefixes = skipped_prefixes()
        self._clock = clock
        self.sampler = StackSampler(clock, lambda path: is_users(path, prefixes), interval_s)
        self.calls = CallPlaces.open(to_ns or (lambda ticks: ticks.astype("int64"))) if calls else None
        self._calls_on = False
        self.note = "" if self.calls is not None else "places at syncs and copies need the C parts (Python 3.11-3.13)"

    def begin(self) -> None:
        try:
            if self.calls is not None and not self._calls_on:
                self.calls.start()
                self._calls_on = True
            self.sampler.begin()  # the thread that runs the test's call
        except Exception as exc:  # noqa: BLE001 - no places, never a failed session
            self.note = f"places could not be recorded: {exc}"

    def end(self) -> None:
        self.sampler.end()

    def close(self) -> None:
        self.sampler.close()
        if self.calls is not None and self._calls_on:
            self.calls.stop()
            self._calls_on = False

    def take(self) -> HostActivity:
        """Everything recorded since the last take."""
        try:
            calls = self.calls.take() if self.calls is not None else HostCalls()
        except Exception:  # noqa: BLE001
            calls = HostCalls()
        return HostActivity(calls, self.sampler.take())

    @staticmethod
    def attach(findings: Sequence[Finding], host: Optional[HostActivity], window: Window,
               events: Optional[GpuColumns] = None) -> tuple[Finding, ...]:
        """The findings of ``window`` with their places (as they were where that fails); ``events``:
        the window's GPU work (gpu-idle's places are the samples taken while the GPU was idle)."""
        if host is None or not findings:
            return tuple(findings)
        try:
            return with_places(findings, host.within(window), busy_blocks(events) if events is not None else None)
        except Exception:  # noqa: BLE001 - the findings stand without places
            return tuple(findings)

    @staticmethod
    def with_host_frames(timeline: dict[str, Any], host: Optional[HostActivity], window: Window) -> dict[str, Any]:
        """A window's compact timeline with the host's sampled places (``hs``: [ns from the window's
        start, "path:line function: text"]), which the page shows over its idle gaps."""
        if host is None:
            return timeline
        try:
            samples = host.samples.within(window.start_ns, window.end_ns)
            step = max(1, len(samples) // MAX_TIMELINE_SAMPLES)
            rows = []
            for i in range(0, len(samples), step):
                sites = samples.sites[i]
                if sites:
                    path, line, function = sites[0]
                    rows.append([int(samples.times_ns[i] - window.start_ns),
                                 f"{path}:{line} {function}: {source_text(path, line)}"])
            return {**timeline, "hs": rows} if rows else timeline
        except Exception:  # noqa: BLE001 - the timeline stands without them
            return timeline

    @staticmethod
    def before_cuda_note(remark: str, host: Optional[HostActivity], began_ns: int, start_ns: int) -> str:
        """A call's remark about CUDA coming up, with its time before CUDA split into the test's own
        host work (and where) and CUDA's start-up, from the samples of that span."""
        if host is None or not began_ns or start_ns <= began_ns or "CUDA came up" not in remark:
            return remark
        samples: HostSamples = host.samples.within(began_ns, start_ns)
        if not len(samples):
            return remark
        own_ms, init_ms, places = before_cuda(samples)
        total_ms = (start_ns - began_ns) / 1e6
        share = own_ms / max(own_ms + init_ms, 1e-9)
        own, init = total_ms * share, total_ms * (1 - share)
        where = f" at {places[0].where} ({places[0].function}: {places[0].text})" if places else ""
        return (f"CUDA came up during this call: its first {total_ms:,.1f} ms are not in the window: about "
                f"{own:,.1f} ms the test's own host work{where}, {init:,.1f} ms CUDA's start-up "
                f"(from {len(samples)} stack samples)")
