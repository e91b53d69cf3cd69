"""What the page shows of a baseline comparison: every compared metric of every test, regressions first."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping, Optional, Sequence

from pytest_gpuutil.gates.regression import (
    Comparison,
    FailExpr,
    change_of,
    compare_records,
    metric_pairs,
    worsening,
)
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.rundoc.metrics import METRICS

if TYPE_CHECKING:
    from pytest_gpuutil.rundoc.document import RunDoc


@dataclass(frozen=True)
class ComparedMetric:
    """One metric of one test, baseline against now."""

    test: str
    metric: str
    baseline: float
    current: float
    change_text: str
    limit_text: str
    regressed: bool
    #: how far toward its limit it moved (1.0 = at the limit; negative = better)
    severity: float


@dataclass(frozen=True)
class BaselineView:
    """What the report shows of a comparison: every compared metric, regressions first."""

    label: str
    machine_id: str
    created: Optional[str]
    limits: tuple[str, ...]
    rows: tuple[ComparedMetric, ...]
    compared: int
    new_tests: int
    missing_tests: int

    @property
    def regressions(self) -> tuple[ComparedMetric, ...]:
        return tuple(r for r in self.rows if r.regressed)


def _change(expr: FailExpr, base: float, now: float) -> tuple[str, float]:
    """The change as the regression table writes it, and how bad it is relative to the limit."""
    found = change_of(expr, base, now)
    if found is None:
        return "n/a", 0.0
    change, text = found
    worse = worsening(expr, change)
    return text, worse / expr.threshold if expr.threshold > 0 else worse


def baseline_view(
    label: str,
    baseline: Mapping[str, TestRecord] | Iterable[TestRecord],
    current: Mapping[str, TestRecord] | Iterable[TestRecord],
    exprs: Sequence[FailExpr],
    *,
    machine_id: str = "",
    created: Optional[str] = None,
    comparison: Optional[Comparison] = None,
) -> BaselineView:
    """Every metric that ``exprs`` name, for every test in both runs; regressions first.

    The regressions are those of ``compare_records`` (computed here unless ``comparison`` is given),
    so the page and the gate never disagree.
    """
    base = {r.test: r for r in (baseline.values() if isinstance(baseline, Mapping) else baseline)}
    now = {r.test: r for r in (current.values() if isinstance(current, Mapping) else current)}
    result = comparison if comparison is not None else compare_records(base, now, exprs)
    regressed = {(r.test, r.metric) for r in result.regressions}
    rows = []
    base_id = {current_id: then for then, current_id in result.moved}  # ids under a moved rootdir
    for test in result.compared:
        old = base.get(base_id.get(test, test))
        if old is None or test not in now:
            continue
        for expr in exprs:
            if expr.metric not in METRICS:
                continue
            for name, then, current_value in metric_pairs(old, now[test], expr.metric):
                text, severity = _change(expr, then, current_value)
                rows.append(ComparedMetric(test, name, then, current_value, text, expr.threshold_text,
                                           (test, name) in regressed, severity))
    rows.sort(key=lambda r: (not r.regressed, -r.severity, r.test, r.metric))
    return BaselineView(label, machine_id, created, tuple(e.text for e in exprs), tuple(rows),
                        len(result.compared), len(result.new_tests), len(result.missing_tests))


def baseline_view_of(run: RunDoc, current: Iterable[TestRecord], exprs: Sequence[FailExpr],
                     comparison: Optional[Comparison] = None, label: Optional[str] = None) -> BaselineView:
    """``baseline_view`` for a baseline read with ``rundoc.reading.load_run_doc``."""
    return baseline_view(label or str(run.path), run.records, list(current), exprs, machine_id=run.machine_id,
                         created=run.created, comparison=comparison)
