"""Test windows on the counter sampler's clock, turned into per-test hardware figures at a flush.

The window of a test's call phase is stamped with :meth:`CounterSampler.now` when it opens and
closes (the GPU already synchronised by the activity capture); at a flush the sampler is asked
for everything up to the last window's end and the pure attribution of
:mod:`pytest_gpuutil.analysis.counters` gives each window its figures, its sums (for per-file and
session figures) and its notes (too short, another process on the GPU, the counters stopped).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from pytest_gpuutil.analysis.counters import (
    COUNTER_FIELDS,
    ENERGY_MIN_S,
    NOT_COVERED,
    CounterSums,
    other_process_note,
    window_figures,
)
from pytest_gpuutil.hardware.sampler import CounterSampler

#: the counters a timeline's strip shows
STRIP_METRICS = ("sm_pct", "tensor_pct", "dram_bw_pct")


@dataclass(frozen=True)
class TestCounters:
    """One test's hardware figures (values None: not measured; ``note`` says why)."""

    __test__ = False

    source: str
    values: Mapping[str, Optional[float]]
    energy_j: Optional[float]
    avg_power_w: Optional[float]
    note: str
    sums: CounterSums = field(default_factory=CounterSums)
    #: the samples over the call for a timeline's strip (analysis/timeline.counter_strip); empty unless asked
    strip: Mapping[str, Any] = field(default_factory=dict)

    def record_fields(self) -> dict[str, Any]:
        """The TestRecord fields these figures fill."""
        return {
            **{name: self.values.get(name) for name in COUNTER_FIELDS},
            "energy_j": self.energy_j,
            "avg_power_w": self.avg_power_w,
            "counters_source": self.source,
            "counters_note": self.note,
            "counter_sums": self.sums.to_dict(),
        }


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def starting_note(note: str, missed_ns: int, length_ns: int) -> str:
    """The note of a window whose first ``missed_ns`` the counters missed while they started."""
    if missed_ns >= length_ns:
        return "the hardware counters were still starting"
    return _join(f"the hardware counters started {missed_ns / 1e6:,.0f} ms into it and cover the rest of it", note)


class CounterCapture:
    """Windows over one :class:`CounterSampler`; see the module docstring."""

    def __init__(self, sampler: CounterSampler, energy_min_s: float = ENERGY_MIN_S):
        self.sampler = sampler
        self.energy_min_ns = int(energy_min_s * 1e9)
        self._open: Optional[tuple[Any, int, str]] = None
        #: (key, start, end, remark): the remark joins the window's note
        self._closed: list[tuple[Any, int, int, str]] = []
        #: seconds spent in flushes (waiting for samples, attributing them)
        self.flush_s = 0.0
        #: also give each window its samples as a strip for the HTML page's timelines
        self.strips = False

    def begin(self, key: Any, remark: str = "", since_ns: Optional[int] = None) -> None:
        """Open a window now, or from ``since_ns`` on the sampler's clock (``remark``: said in its note,
        e.g. that it covers only part of the call)."""
        self._open = (key, self.sampler.now() if since_ns is None else since_ns, remark)
        self.sampler.energy_edge()  # an energy reading at the start, unless one was asked for lately

    def end(self) -> None:
        if self._open is None:
            return
        key, start, remark = self._open
        self._open = None
        end = self.sampler.now()
        self._closed.append((key, start, end, remark))
        if end - start >= self.energy_min_ns:  # a window with energy of its own: a reading at its end
            self.sampler.energy_edge(always=True)

    def _timeout_s(self) -> float:
        """How long a flush waits for the samples (a source may set ``sync_timeout_s``, e.g. a test's)."""
        given = getattr(self.sampler.source, "sync_timeout_s", None)
        if given:
            return float(given)
        period = self.sampler.period_ns or 0
        return max(0.5, 3 * period / 1e9)

    def flush(self, wait: bool = True) -> dict[Any, TestCounters]:
        """Figures for the windows closed since the last flush, by key.

        ``wait=False`` takes only the windows the samples already cover and leaves the rest for a
        later flush (no waiting for a decode, ~20-40 ms for PM sampling); ``wait=True`` takes them
        all, asking the sampler for what it has not read yet.
        """
        windows = self._closed
        if not wait:
            ready = 0
            for _, start, end, _ in windows:  # in order: the first uncovered one ends the batch
                if not self._covered(start, end):
                    break
                ready += 1
            windows = windows[:ready]
        self._closed = self._closed[len(windows):]
        if not windows:
            return {}
        figures = self._figures([(start, end) for _, start, end, _ in windows], wait)
        self.sampler.forget_before(max(end for _, _, end, _ in windows))
        return {key: dataclasses.replace(figure, note=_join(remark, figure.note)) if remark else figure
                for (key, _, _, remark), figure in zip(windows, figures)}

    def first_waiting_covered(self) -> bool:
        """Whether the samples now cover the first closed window not yet given (a flush would give it)."""
        return bool(self._closed) and self._covered(*self._closed[0][1:3])

    def _covered(self, start: int, end: int) -> bool:
        """Whether the samples (and energy readings, for a window long enough to get energy) reach its end."""
        return self.sampler.covers(end, energy=end - start >= self.energy_min_ns)

    def waiting(self) -> set[Any]:
        """Keys of the closed windows whose figures a later flush gives."""
        return {key for key, _, _, _ in self._closed}

    def wait_started(self, timeout_s: float = 10.0) -> bool:
        """Wait until a source started on the sampler's thread has started (or failed to): e.g. before
        kernel_bench's timed loop, which wants its whole span covered. False if it is still starting."""
        deadline = time.monotonic() + timeout_s
        while getattr(self.sampler.source, "starting", False) and self.sampler.running:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)
        return True

    def figures_between(self, start_ns: int, end_ns: int) -> TestCounters:
        """The figures of one span on the sampler's clock (e.g. kernel_bench's timed loop)."""
        return self._figures([(start_ns, end_ns)])[0]

    def _figures(self, spans: list[tuple[int, int]], wait: bool = False) -> list[TestCounters]:
        began = time.perf_counter()
        sampler = self.sampler
        last_end = max(end for _, end in spans)
        # energy up to the last window when one is long enough for its own, or (a flush that waits)
        # when a window's start asked for a reading the thread has not taken yet (the sums need it)
        needs_energy = (any(end - start >= self.energy_min_ns for start, end in spans)
                        or (wait and sampler.energy_asked_ns > sampler.energy_until))
        sampler.sync(last_end, energy=needs_energy, timeout_s=self._timeout_s())
        samples, energy, checks = sampler.collected()
        # a source that never started on the sampler's thread: energy only, as if there were none
        live = sampler.source is not None and not getattr(sampler.source, "failed", False)
        period = sampler.period_ns or samples.median_period_ns()
        if live and period is None:
            period = 1 << 62  # no sample yet: every window is "too short"
        began_ns = int(getattr(sampler.source, "started_ns", 0) or 0)  # a source started from the thread
        cut = [(min(max(start, began_ns), end), end) for start, end in spans]
        results = []
        for (start, end), (from_ns, _), figure in zip(spans, cut, window_figures(
                samples, energy, cut, period if live else None, energy_min_ns=self.energy_min_ns)):
            note = figure.note
            if sampler.error and live and note == NOT_COVERED:
                note = f"the hardware counters stopped: {sampler.error}"
            if from_ns > start:
                note = starting_note(note, from_ns - start, end - start)
            results.append(TestCounters(sampler.source_name or "nvml_utilization", figure.values, figure.energy_j,
                                        figure.avg_power_w, _join(note, other_process_note(checks.pids_during(start, end))),
                                        figure.sums, self._strip(samples, start, end) if self.strips else {}))
        self.flush_s += time.perf_counter() - began
        return results

    @staticmethod
    def _strip(samples: Any, start: int, end: int) -> dict[str, Any]:
        from pytest_gpuutil.analysis.timeline import counter_strip

        wanted = {name: samples.values[name] for name in STRIP_METRICS if name in samples.values}
        return counter_strip(samples.start_ns, samples.end_ns, wanted, start, end) if wanted else {}

    def close(self) -> dict[Any, TestCounters]:
        """The last windows' figures, then the sampler stops."""
        self.end()
        results = self.flush()
        self.sampler.stop()
        return results
