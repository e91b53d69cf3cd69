"""Hardware-counter samples and their attribution to test windows (numpy only: no NVML, no CUPTI).

A counter source (CUPTI PM sampling, NVML GPM) delivers **samples**: each covers
``[start_ns, end_ns)`` on the source's clock and holds each metric's mean over that span (a
percentage of the hardware's peak). A window's value of a metric is the **overlap-weighted mean**
of the samples it spans::

    value = sum(overlap_i * v_i) / sum(overlap_i)

so a sample shared by two tests is split between them by time: each test takes the part of the
sample that overlaps its own window, and a sample half in one test and half in the next weighs
half as much in each as a sample wholly inside. Energy is extensive: a reading of the energy
counter covers the span since the previous reading, and that span's joules are spread evenly over
it, so a window gets ``joules_i * overlap_i / duration_i`` of each.

Rules that keep a number honest:

- a window shorter than two sampling periods of the source gets no number but the note
  :data:`TOO_SHORT` (one sample cannot be split into "this test" and "its neighbours" fairly);
  energy needs :data:`ENERGY_MIN_S` of window, because NVML's energy counter steps every ~100 ms;
- a window that the samples cover less than :data:`MIN_COVERAGE` of (samples lost, the sampler
  stopped) gets no number but :data:`NOT_COVERED`;
- every window, short or not, adds its sums (:class:`CounterSums`) to its file's and the session's
  figures, which are overlap-weighted means over all their tests' time.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

#: The per-test hardware figures, as TestRecord fields (percent of the hardware's peak).
COUNTER_FIELDS = ("sm_pct", "tensor_pct", "dram_bw_pct", "occupancy_pct", "fp16_pct", "fp32_pct", "fp64_pct")
#: The key of energy in :class:`CounterSums` (joules, spread over time, summed rather than averaged).
ENERGY = "energy_j"
TOO_SHORT = "too short for the hardware counters"
NOT_COVERED = "the hardware counters missed part of this test"
#: a window needs samples over at least this share of its time
MIN_COVERAGE = 0.9
#: a window needs this long for an energy figure: the counter steps every ~100 ms, so a window of
#: 1 s is off by at most ~20 % (two steps), one of 5 s by ~4 %
ENERGY_MIN_S = 1.0


@dataclass(frozen=True)
class CounterSamples:
    """Samples as columns: sample i covers ``[start_ns[i], end_ns[i])``; ``values[name][i]`` is NaN
    where the sample has no value for that metric."""

    start_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    end_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    values: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.start_ns.size)

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[int, int, Mapping[str, Optional[float]]]]) -> "CounterSamples":
        """From ``(start_ns, end_ns, {metric: value})`` rows (tests and small sources)."""
        rows = list(rows)
        names = sorted({name for _, _, values in rows for name in values})
        return cls(
            np.asarray([r[0] for r in rows], dtype=np.int64),
            np.asarray([r[1] for r in rows], dtype=np.int64),
            {name: np.asarray([_nan(r[2].get(name)) for r in rows], dtype=np.float64) for name in names},
        )

    @classmethod
    def concat(cls, parts: Sequence["CounterSamples"]) -> "CounterSamples":
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls()
        if len(parts) == 1:
            return parts[0]
        names = sorted({name for p in parts for name in p.values})
        nan = [np.full(len(p), np.nan) for p in parts]
        return cls(
            np.concatenate([p.start_ns for p in parts]),
            np.concatenate([p.end_ns for p in parts]),
            {name: np.concatenate([p.values.get(name, nan[i]) for i, p in enumerate(parts)]) for name in names},
        )

    def take(self, index: np.ndarray) -> "CounterSamples":
        return CounterSamples(self.start_ns[index], self.end_ns[index], {k: v[index] for k, v in self.values.items()})

    def ending_after(self, t_ns: int) -> "CounterSamples":
        """The samples that end after ``t_ns`` (what a later window can still overlap)."""
        return self.take(np.flatnonzero(self.end_ns > t_ns))

    def tidy(self) -> "CounterSamples":
        """Sorted by start, empty or backwards samples dropped, overlaps cut off the later sample."""
        if not len(self):
            return self
        keep = np.flatnonzero(self.end_ns > self.start_ns)
        ordered = self.take(keep[np.argsort(self.start_ns[keep], kind="stable")])
        ends_before = np.maximum.accumulate(ordered.end_ns)
        starts = ordered.start_ns.copy()
        starts[1:] = np.maximum(starts[1:], ends_before[:-1])
        keep = np.flatnonzero(ordered.end_ns > starts)
        return CounterSamples(starts[keep], ordered.end_ns[keep], {k: v[keep] for k, v in ordered.values.items()})

    def median_period_ns(self) -> Optional[int]:
        return int(np.median(self.end_ns - self.start_ns)) if len(self) else None


def _nan(value: Optional[float]) -> float:
    return math.nan if value is None else float(value)


def _cumulative(starts: np.ndarray, ends: np.ndarray, rates: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The integral of a step function (``rates[i]`` on ``[starts[i], ends[i])``, 0 elsewhere) from
    the first sample to each time in ``at``. Samples must be sorted and must not overlap."""
    whole = np.concatenate([[0.0], np.cumsum(rates * (ends - starts).astype(np.float64))])
    index = np.searchsorted(starts, at, side="right") - 1  # the sample starting at or before t
    inside = index >= 0
    clipped = np.where(inside, index, 0)
    partial = np.clip(at - starts[clipped], 0, (ends - starts)[clipped]).astype(np.float64) * rates[clipped]
    return np.where(inside, whole[clipped] + partial, 0.0)


def integrate(samples: CounterSamples, starts: np.ndarray, ends: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per window ``[starts[j], ends[j])`` and metric: (ns covered by samples with a value,
    ``sum(overlap_ns * value)``). ``samples`` must be tidy (see :meth:`CounterSamples.tidy`)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    covered: dict[str, np.ndarray] = {}
    weighted: dict[str, np.ndarray] = {}
    if not len(samples):
        zero = np.zeros(starts.size)
        return {k: zero for k in samples.values}, {k: zero for k in samples.values}
    for name, column in samples.values.items():
        has = np.isfinite(column)
        rate = np.where(has, column, 0.0)
        covered[name] = (_cumulative(samples.start_ns, samples.end_ns, has.astype(np.float64), ends)
                         - _cumulative(samples.start_ns, samples.end_ns, has.astype(np.float64), starts))
        weighted[name] = (_cumulative(samples.start_ns, samples.end_ns, rate, ends)
                          - _cumulative(samples.start_ns, samples.end_ns, rate, starts))
    return covered, weighted


def spread(readings: CounterSamples, starts: np.ndarray, ends: np.ndarray, name: str = ENERGY) -> tuple[np.ndarray, np.ndarray]:
    """Per window: (ns covered by readings, the share of their ``name`` totals that falls in the
    window, each reading's total spread evenly over its span)."""
    if not len(readings) or name not in readings.values:
        zero = np.zeros(np.asarray(starts).size)
        return zero, zero
    span = (readings.end_ns - readings.start_ns).astype(np.float64)
    per_ns = CounterSamples(readings.start_ns, readings.end_ns, {name: readings.values[name] / span})
    covered, weighted = integrate(per_ns, starts, ends)
    return covered[name], weighted[name]


@dataclass(frozen=True)
class CounterSums:
    """Additive sums of one window (or many): per metric, (ms covered, ``sum(ms * value)``); for
    energy, (ms covered, joules). Files and the session add their tests' sums."""

    sums: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, list[float]]:
        return {k: [v[0], v[1]] for k, v in self.sums.items()}

    @classmethod
    def from_dict(cls, data: Any) -> "CounterSums":
        if not isinstance(data, Mapping):
            return cls()
        out = {}
        for key, pair in data.items():
            if isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(x, (int, float)) for x in pair):
                out[str(key)] = (float(pair[0]), float(pair[1]))
        return cls(out)

    @classmethod
    def total(cls, parts: Iterable["CounterSums"]) -> "CounterSums":
        out: dict[str, tuple[float, float]] = {}
        for part in parts:
            for key, (ms, amount) in part.sums.items():
                old = out.get(key, (0.0, 0.0))
                out[key] = (old[0] + ms, old[1] + amount)
        return cls(out)

    def mean(self, name: str) -> Optional[float]:
        """The overlap-weighted mean of a metric over all the time summed (None: never covered)."""
        ms, amount = self.sums.get(name, (0.0, 0.0))
        return amount / ms if ms > 0 else None

    @property
    def energy_j(self) -> Optional[float]:
        pair = self.sums.get(ENERGY)
        return pair[1] if pair and pair[0] > 0 else None

    @property
    def avg_power_w(self) -> Optional[float]:
        pair = self.sums.get(ENERGY)
        return pair[1] / (pair[0] / 1000) if pair and pair[0] > 0 else None

    def figures(self) -> dict[str, Optional[float]]:
        """``{sm_pct: ..., ..., energy_j: ..., avg_power_w: ..., covered_ms: ...}`` over all the time summed."""
        covered = [ms for key, (ms, _) in self.sums.items() if key != ENERGY]
        return {**{name: self.mean(name) for name in COUNTER_FIELDS}, "energy_j": self.energy_j,
                "avg_power_w": self.avg_power_w, "covered_ms": max(covered) if covered else None}


def file_of(test: str) -> str:
    """The file part of a test id (``tests/test_a.py::test_b[1]`` -> ``tests/test_a.py``)."""
    return test.split("::", 1)[0]


def summarise(tests: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Per-file and session figures from the tests' ``counter_sums`` (``(test id, sums)`` pairs),
    short tests included: ``{"session": figures, "files": {file: figures}}``; ``{}`` when none has any."""
    by_file: dict[str, list[CounterSums]] = {}
    for test, raw in tests:
        sums = CounterSums.from_dict(raw)
        if sums.sums:
            by_file.setdefault(file_of(test), []).append(sums)
    if not by_file:
        return {}
    files = {name: {**CounterSums.total(parts).figures(), "tests": len(parts)} for name, parts in sorted(by_file.items())}
    every = [s for parts in by_file.values() for s in parts]
    return {"session": {**CounterSums.total(every).figures(), "tests": len(every)}, "files": files}


@dataclass(frozen=True)
class CounterFigures:
    """One window's hardware figures: a value per metric (None: not measured), energy, why not."""

    values: Mapping[str, Optional[float]]
    energy_j: Optional[float]
    avg_power_w: Optional[float]
    #: why the metrics are empty ("too short ..."), or a remark; else ""
    note: str
    sums: CounterSums


def window_figures(
    samples: CounterSamples,
    energy: CounterSamples,
    windows: Sequence[tuple[int, int]],
    period_ns: Optional[int],
    energy_min_ns: int = int(ENERGY_MIN_S * 1e9),
    fields: Sequence[str] = COUNTER_FIELDS,
) -> list[CounterFigures]:
    """Each window's figures from tidy ``samples`` (metrics) and ``energy`` readings (joules).

    ``period_ns`` is the source's sampling period (None: no metric source, energy only): a window
    shorter than two periods gets :data:`TOO_SHORT` and no metric values.
    """
    if not windows:
        return []
    starts = np.asarray([w[0] for w in windows], dtype=np.int64)
    ends = np.asarray([w[1] for w in windows], dtype=np.int64)
    lengths = np.maximum(ends - starts, 0)
    covered, weighted = integrate(samples, starts, ends)
    e_covered, e_joules = spread(energy, starts, ends)
    out = []
    for j in range(len(windows)):
        length = float(lengths[j])
        sums = {name: (float(covered[name][j]) / 1e6, float(weighted[name][j]) / 1e6) for name in fields
                if name in covered and covered[name][j] > 0}
        if e_covered[j] > 0:
            sums[ENERGY] = (float(e_covered[j]) / 1e6, float(e_joules[j]))
        values: dict[str, Optional[float]] = dict.fromkeys(fields)
        note = ""
        if period_ns is not None:
            if length < 2 * period_ns:
                note = TOO_SHORT
            else:
                present = [name for name in fields if name in covered]
                if present and all(covered[name][j] < MIN_COVERAGE * length for name in present):
                    note = NOT_COVERED
                for name in present:
                    if covered[name][j] >= MIN_COVERAGE * length:
                        values[name] = float(weighted[name][j] / covered[name][j])
        energy_j = power_w = None
        if length >= energy_min_ns and length > 0 and e_covered[j] >= MIN_COVERAGE * length:
            energy_j = float(e_joules[j] * length / e_covered[j])  # the uncovered sliver at the rate of the rest
            power_w = energy_j / (length / 1e9)
        out.append(CounterFigures(values, energy_j, power_w, note, CounterSums(sums)))
    return out


@dataclass(frozen=True)
class ProcessChecks:
    """What the periodic check of the GPU's processes saw: at ``times_ns[k]``, ``foreign[k]`` (the
    pids on the GPU that are not this run's). A pid seen at check k may have been there any time
    between check k-1 and check k+1, so it marks that whole span."""

    times_ns: tuple[int, ...] = ()
    foreign: tuple[frozenset[int], ...] = ()
    period_ns: int = 100_000_000

    def pids_during(self, start_ns: int, end_ns: int) -> list[int]:
        """Foreign pids that may have used the GPU during ``[start_ns, end_ns]``, sorted."""
        spans = self._spans
        if spans is None:
            return []
        before, after = spans
        hits = np.flatnonzero((before <= end_ns) & (after >= start_ns))
        return sorted(set().union(*(self.foreign[k] for k in hits.tolist()))) if hits.size else []

    @functools.cached_property
    def _spans(self) -> Optional[tuple[np.ndarray, np.ndarray]]:
        """Per check, the span its pids mark (from the check before to the one after); None when no
        check saw another process (the common case: every window's lookup is then free)."""
        if not any(self.foreign):
            return None
        times = np.asarray(self.times_ns, dtype=np.int64)
        return (np.concatenate([[times[0] - self.period_ns], times[:-1]]),
                np.concatenate([times[1:], [times[-1] + self.period_ns]]))

    def after(self, t_ns: int) -> "ProcessChecks":
        """The checks a window ending after ``t_ns`` can still need (one before it kept)."""
        if not self.times_ns:
            return self
        first = max(0, int(np.searchsorted(np.asarray(self.times_ns), t_ns)) - 1)
        return ProcessChecks(self.times_ns[first:], self.foreign[first:], self.period_ns)


def other_process_note(pids: Sequence[int]) -> str:
    if not pids:
        return ""
    shown = ", ".join(str(p) for p in pids[:3]) + (f" and {len(pids) - 3} more" if len(pids) > 3 else "")
    return f"another process used the GPU during this test: pid {shown} (the hardware counters are device-wide)"
