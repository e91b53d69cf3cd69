"""The noise-aware gate: each test against the median of its last runs, a regression only outside their noise.

A metric of a test regresses when (1) it is worse than the median of the test's last N runs (on the
same machine id) by more than its ``--gpu-util-fail`` limit, as ``gates.regression.compare_records``
decides against a baseline, and (2) it lies outside those runs' noise: further from the median than
``NOISE_K`` times the scaled median absolute deviation, ``MAD_SCALE * median(|x - median|)``. 1.4826
makes the MAD estimate the standard deviation of normal noise, so the band is about 3 sigma; the
median and the MAD are robust: one wild run among five moves neither much, so a slowdown right
after a wild run is still caught (a band from the range or the standard deviation would swallow it).
The MAD of a handful of runs is a shaky estimate, though: drawn from the same normal noise, a 6th
value lies beyond 3 scaled MADs of 5 runs on the worse side 7.7% of the time (10 runs: 2.6%, 20:
1.1%; 3 sigma itself: 0.13%), which is why it is the second condition and the limit the first. A
test with fewer than ``MIN_RUNS`` earlier runs is not gated (a warning). The comparison is
``compare_records`` against a record of medians, so the gate's table and the HTML page show the same
regressions.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

from pytest_gpuutil.gates.regression import Comparison, FailExpr, Regression, compare_records
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.rundoc.metrics import METRICS, metric_values
from pytest_gpuutil.rundoc.number_format import format_value

#: the scaled MAD estimates a normal distribution's standard deviation
MAD_SCALE = 1.4826
#: a value is outside the noise when it is more than this many scaled MADs from the median
NOISE_K = 3.0
#: fewer earlier runs than this: the test is not gated
MIN_RUNS = 3
#: earlier runs a test is compared with (--gpu-util-history-runs)
DEFAULT_RUNS = 5

_KERNEL_BENCH = "kernel_bench."


@dataclass(frozen=True)
class Noise:
    """One metric of one test over its earlier runs: their median and scaled MAD."""

    median: float
    mad: float
    runs: int

    def band(self, k: float = NOISE_K) -> float:
        """How far from the median a value may lie and still be noise."""
        return k * self.mad

    def outside(self, value: float, k: float = NOISE_K) -> bool:
        return abs(value - self.median) > self.band(k)


def noise_of(values: Sequence[float]) -> Noise:
    """Median and scaled MAD of ``values`` (at least one)."""
    middle = statistics.median(values)
    return Noise(middle, MAD_SCALE * statistics.median(abs(v - middle) for v in values), len(values))


@dataclass(frozen=True)
class HistoryComparison:
    """A run against the history: the gate's outcome and what it was decided on."""

    #: regressions past their limit and outside the noise (the gate); ``compared``: tests gated
    comparison: Comparison
    #: the baseline the gate used: per test, each metric's median over its earlier runs
    medians: Mapping[str, TestRecord]
    #: changes past their limit but inside the noise: not regressions
    within_noise: tuple[Regression, ...]
    #: tests with some earlier runs, but fewer than ``min_runs``: not gated
    too_few: tuple[str, ...]
    #: (test, reported metric) -> its noise, for every metric the gate looked at
    noise: Mapping[tuple[str, str], Noise]
    #: the most earlier runs any test was compared with
    runs: int
    #: each gated test's most recent earlier record (what a regression's explanation compares with)
    latest: Mapping[str, TestRecord] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.comparison.failed


def median_record(test: str, records: Sequence[TestRecord], exprs: Iterable[FailExpr], min_runs: int = MIN_RUNS
                  ) -> tuple[TestRecord, dict[str, Noise]]:
    """A record whose gated metrics are their medians over ``records`` (a metric with fewer than
    ``min_runs`` values is left out, so it is not compared), and each metric's noise."""
    fields: dict[str, Any] = {}
    bench: dict[str, dict[str, Any]] = {}
    noise: dict[str, Noise] = {}
    for metric in dict.fromkeys(e.metric for e in exprs if e.metric in METRICS):
        series: dict[str, list[float]] = {}
        units: dict[str, str] = {}
        for record in records:
            for name, (value, unit) in metric_values(record, metric).items():
                if value is None:
                    continue
                if units.get(name, unit) != unit:  # the unit changed: only the newest unit's values count
                    series[name] = []
                units[name] = unit
                series.setdefault(name, []).append(value)
        for name, values in series.items():
            if len(values) < min_runs:
                continue
            found = noise_of(values)
            noise[name] = found
            if metric.startswith(_KERNEL_BENCH):
                label = name[len("kernel_bench["):name.rindex("]")]
                bench.setdefault(label, {"unit": units[name]})[metric[len(_KERNEL_BENCH):]] = found.median
            else:
                fields[metric] = found.median
    return TestRecord(test, "passed", kernel_bench=bench, **fields), noise


def _unit(name: str) -> str:
    """The unit of a reported metric (``kernel_bench[x].median`` -> ms, ``busy_pct`` -> pts)."""
    if name.startswith("kernel_bench[") and "]." in name:
        name = _KERNEL_BENCH + name.rsplit("].", 1)[1]
    spec = METRICS.get(name)
    return spec.unit if spec is not None else ""


def noise_text(noise: Noise, metric: str, k: float = NOISE_K) -> str:
    """``noise ±0.031 ms``: the band as the limit column of the gate's table adds it."""
    unit = _unit(metric)
    return f"noise ±{format_value(noise.band(k))}{' ' + unit if unit else ''}"


def compare_with_history(history: Mapping[str, Sequence[TestRecord]], current: Iterable[TestRecord],
                         exprs: Sequence[FailExpr], min_runs: int = MIN_RUNS, k: float = NOISE_K
                         ) -> HistoryComparison:
    """Gate ``current`` against each test's earlier records in ``history`` (oldest first, already cut
    to the last N runs on this machine id) by the rule in this module's docstring."""
    now = {r.test: r for r in current}
    medians: dict[str, TestRecord] = {}
    noise: dict[tuple[str, str], Noise] = {}
    too_few = []
    for test in now:
        earlier = history.get(test, ())
        if not earlier:
            continue
        if len(earlier) < min_runs:
            too_few.append(test)
            continue
        medians[test], found = median_record(test, earlier, exprs, min_runs)
        noise.update({(test, name): n for name, n in found.items()})
    against = compare_records(medians, now, exprs)
    kept, inside = [], []
    for regression in against.regressions:
        spread = noise.get((regression.test, regression.metric))
        if spread is None or spread.outside(regression.current, k):
            band = "" if spread is None else f", {noise_text(spread, regression.metric, k)}"
            kept.append(replace(regression, threshold_text=f"{regression.threshold_text}{band}"))
        else:
            inside.append(regression)
    new_tests = tuple(t for t in against.new_tests if t not in too_few)
    runs = max((len(history.get(t, ())) for t in medians), default=0)
    return HistoryComparison(
        comparison=Comparison(tuple(kept), against.compared, new_tests, (), below_floor=against.below_floor),
        medians=MappingProxyType(medians),
        within_noise=tuple(inside),
        too_few=tuple(too_few),
        noise=MappingProxyType(noise),
        runs=runs,
        latest=MappingProxyType({t: history[t][-1] for t in medians}),
    )


#: tests and changes named in a message before "..."
LISTED = 5


def too_few_text(result: HistoryComparison, machine: str) -> str:
    """The warning for tests the history cannot gate yet ("" when there are none)."""
    if not result.too_few:
        return ""
    listed = ", ".join(result.too_few[:LISTED]) + (", ..." if len(result.too_few) > LISTED else "")
    return f"{len(result.too_few)} test(s) with fewer than {MIN_RUNS} earlier runs on {machine}: not gated ({listed})"


def not_gated_text(where: str, earlier: Mapping[str, Sequence[TestRecord]], machine: str) -> str:
    """The warning when no test has enough earlier runs to be gated."""
    most = max((len(v) for v in earlier.values()), default=0)
    return (f"the run history {where} has {most} earlier run(s) of these tests on {machine}: a test is gated once "
            f"it has {MIN_RUNS}; not compared")


def within_noise_text(result: HistoryComparison, k: float = NOISE_K) -> str:
    """The note on changes past their limit that the noise explains ("" when there are none)."""
    inside = result.within_noise
    if not inside:
        return ""
    shown = "; ".join(f"{r.test} {r.metric} {format_value(r.baseline)} -> {format_value(r.current)} ({r.change_text})"
                      for r in inside[:LISTED])
    more = f"; and {len(inside) - LISTED} more" if len(inside) > LISTED else ""
    return (f"{len(inside)} change(s) past the limit but within the noise of the last runs (median ± {k:g} scaled "
            f"MADs), not regressions: {shown}{more}")
