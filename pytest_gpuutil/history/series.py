"""What the history holds, as data: its runs, and per test the series of every comparable metric."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from pytest_gpuutil.gates.regression import METRICS
from pytest_gpuutil.gates.regression import _values as metric_values
from pytest_gpuutil.history.store import History, Point, RunRow


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
