"""What the history holds, as data: its runs, and per test the series of every comparable metric."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from pytest_gpuutil.rundoc.metrics import METRICS, metric_values
from pytest_gpuutil.history.store import History, Point, RunRow
from pytest_gpuutil.records import TestRecord

#: runs a trend line shows (the current one last)
TREND_RUNS = 20
#: the metric a trend line shows, when the gate's metrics give none: the first the test has
TREND_METRICS = ("gpu_busy_ms", "kernel_bench.median", "busy_pct", "wall_ms")


def series_of(points: Sequence[Point]) -> dict[str, Any]:
    """One test's runs, the machine id of each, and each metric's value per run (None where missing)."""
    metrics: dict[str, list[Optional[float]]] = {}
    for index, point in enumerate(points):
        for metric in METRICS:
            for name, (value, _unit) in metric_values(point.record, metric).items():
                metrics.setdefault(name, [None] * len(points))[index] = value
    return {
        "runs": [p.run_id for p in points],
        "machine_ids": [p.machine_id for p in points],
        "outcomes": [p.record.outcome for p in points],
        "metrics": {name: values for name, values in metrics.items() if any(v is not None for v in values)},
    }


def history_document(history: History, tests: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """``{"runs": [...], "tests": {test: {"runs", "machine_ids", "outcomes", "metrics": {name: [...]}}}}``."""
    runs: list[RunRow] = history.runs()
    series = history.series(tests)
    return {
        "db": str(history.path),
        "runs": [r.to_dict() for r in runs],
        "tests": {test: series_of(points) for test, points in series.items()},
    }


def trend(series: Mapping[str, Any], metric: str) -> list[Optional[float]]:
    """One metric's values from ``series_of`` output (empty when the test never had it)."""
    return list(series.get("metrics", {}).get(metric, ()))


def earlier_records(history: History, records: Iterable[TestRecord], machine_of: Callable[[TestRecord], str],
                    last: int, created: Optional[str] = None) -> dict[str, list[TestRecord]]:
    """Each test's records in its ``last`` runs of the history on the machine id that ran it now
    (``machine_of``: the run's id, or each record's own in a run merged from several machines). With
    the run's ``created``, the run itself is left out when it is in the history already."""
    by_machine: dict[str, dict[str, TestRecord]] = {}
    for record in records:
        by_machine.setdefault(machine_of(record), {})[record.test] = record
    out: dict[str, list[TestRecord]] = {}
    for machine, own in by_machine.items():
        out.update(history.recent(machine, last, own, (created, own) if created else None))
    return out


@dataclass(frozen=True)
class Trend:
    """One test's metric over its earlier runs and this one (last), for a trend line."""

    metric: str
    values: tuple[Optional[float], ...]
    unit: str = ""


def _base_metric(name: str) -> str:
    """``kernel_bench[mm].median`` -> ``kernel_bench.median``; other names as they are."""
    return f"kernel_bench.{name.rsplit('].', 1)[1]}" if name.startswith("kernel_bench[") and "]." in name else name


def trend_of(record: TestRecord, earlier: Sequence[TestRecord], prefer: Sequence[str] = ()) -> Optional[Trend]:
    """The first metric of ``prefer`` (metrics, or reported names such as ``kernel_bench[mm].median``)
    then ``TREND_METRICS`` that ``record`` has (of a kernel_bench statistic, the label named, else the
    first), over ``earlier`` and ``record``; None without an earlier run."""
    if not earlier:
        return None
    for wanted in dict.fromkeys([*prefer, *TREND_METRICS]):
        metric = _base_metric(wanted)
        if metric not in METRICS:
            continue
        now = metric_values(record, metric)
        for name, (value, unit) in now.items():
            if value is None or (wanted != metric and name != wanted):
                continue
            points = [metric_values(r, metric).get(name, (None, unit)) for r in earlier[-(TREND_RUNS - 1):]]
            values = tuple(v if u == unit else None for v, u in points) + (value,)
            return Trend(name, values, unit or METRICS[metric].unit)
    return None


def trends(records: Iterable[TestRecord], earlier: Mapping[str, Sequence[TestRecord]],
           prefer: Sequence[str] = (), first: Mapping[str, str] | None = None) -> dict[str, Trend]:
    """``trend_of`` each record that has earlier runs; ``first``: test -> the metric to show before
    ``prefer`` (the one that regressed)."""
    out = {}
    for record in records:
        ahead = (first or {}).get(record.test)
        found = trend_of(record, earlier.get(record.test, ()), [ahead, *prefer] if ahead else prefer)
        if found is not None:
            out[record.test] = found
    return out
