"""Regression gates: compare per-test records of a run with a baseline under ``--fail`` rules."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Union

from tabulate import tabulate

from pytest_gpuutil.gates.matching import match_tests
from pytest_gpuutil.gates.noise_floor import FLOOR_MS, below_floor
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.rundoc.metrics import METRICS, MetricSpec, metric_values
from pytest_gpuutil.rundoc.number_format import compact_number, format_value


#: Used when no ``--fail`` expression is given: a drop of more than 5 points of GPU busy time or
#: of matmul/conv share, or more than 10% more GPU busy time, is a regression.
DEFAULT_FAIL_EXPRS: tuple[str, ...] = ("busy_pct:5", "mm_conv_pct:5", "gpu_busy_ms:10%")

#: ``findings:N`` fails a test with more than N findings its baseline record did not have;
#: ``findings.RULE:N`` counts that rule's only (N is 0 then: the rule newly fired)
FINDINGS = "findings"
_FINDINGS_OF = "findings."
_EPS = 1e-9
_EXPR_RE = re.compile(r"^(?P<metric>[A-Za-z_][A-Za-z0-9_.\-]*):(?P<num>[^%]+)(?P<pct>%?)$")

RecordsLike = Union[Mapping[str, Any], Iterable[Any]]



@dataclass(frozen=True)
class FailExpr:
    """One gate: ``METRIC:N`` (absolute change) or ``METRIC:N%`` (relative change)."""

    metric: str
    threshold: float
    relative: bool = False

    @property
    def spec(self) -> MetricSpec:
        """The metric's direction and unit."""
        return METRICS[FINDINGS if self.metric.startswith(_FINDINGS_OF) else self.metric]

    @property
    def text(self) -> str:
        """The expression as a user writes it."""
        return f"{self.metric}:{compact_number(self.threshold)}{'%' if self.relative else ''}"

    @property
    def threshold_text(self) -> str:
        """The allowed change with the bad direction's sign, e.g. ``-5 pts`` or ``+10%``."""
        sign = "-" if self.spec.higher_is_better else "+"
        if self.relative:
            return f"{sign}{compact_number(self.threshold)}%"
        unit = f" {self.spec.unit}" if self.spec.unit else ""
        return f"{sign}{compact_number(self.threshold)}{unit}"

    def __str__(self) -> str:
        return self.text


def parse_fail_expr(text: str) -> FailExpr:
    """Parse ``METRIC:N`` or ``METRIC:N%``; ValueError naming the expression and valid metrics."""
    valid = ", ".join(METRICS)
    raw = text.strip()
    match = _EXPR_RE.match(raw)
    if not match:
        raise ValueError(
            f"bad fail expression {text!r}: expected METRIC:N or METRIC:N% "
            f"(e.g. busy_pct:5, gpu_busy_ms:10%); metrics: {valid}"
        )
    metric = match.group("metric")
    if metric.startswith(_FINDINGS_OF):
        from pytest_gpuutil.analysis.rules import RULE_IDS

        if metric[len(_FINDINGS_OF):] not in RULE_IDS:
            raise ValueError(
                f"bad fail expression {text!r}: unknown findings rule {metric[len(_FINDINGS_OF):]!r}; "
                f"rules: {', '.join(RULE_IDS)}"
            )
    elif metric not in METRICS:
        raise ValueError(
            f"bad fail expression {text!r}: unknown metric {metric!r}; metrics: {valid}, findings.RULE"
        )
    if (metric == FINDINGS or metric.startswith(_FINDINGS_OF)) and match.group("pct"):
        raise ValueError(
            f"bad fail expression {text!r}: {metric} takes a number of new findings, not a percentage "
            f"(e.g. {metric}:0)"
        )
    try:
        threshold = float(match.group("num"))
    except ValueError:
        threshold = math.nan
    if not math.isfinite(threshold) or threshold < 0:
        raise ValueError(
            f"bad fail expression {text!r}: threshold must be a non-negative number, "
            f"got {match.group('num')!r}"
        )
    return FailExpr(metric, threshold, relative=bool(match.group("pct")))


def parse_fail_exprs(values: str | Iterable[str]) -> tuple[FailExpr, ...]:
    """Parse expressions separated by spaces or commas (one string or several)."""
    items = [values] if isinstance(values, str) else list(values)
    exprs = []
    for item in items:
        for token in re.split(r"[\s,]+", item.strip()):
            if token:
                exprs.append(parse_fail_expr(token))
    return tuple(exprs)


@dataclass(frozen=True)
class Regression:
    """A metric of one test that got worse than its gate allows."""

    test: str
    metric: str
    baseline: float
    current: float
    change: float
    change_text: str
    threshold_text: str


@dataclass(frozen=True)
class Comparison:
    """Outcome of comparing a run with a baseline."""

    regressions: tuple[Regression, ...]
    #: nodeids present in both runs (compared, whether or not a value was missing)
    compared: tuple[str, ...]
    #: nodeids of the current run without a baseline record
    new_tests: tuple[str, ...]
    #: nodeids of the baseline that the current run does not have
    missing_tests: tuple[str, ...]
    #: (baseline id, this run's id) of tests matched although their ids differ by a leading path
    moved: tuple[tuple[str, str], ...] = ()
    #: baseline ids that several tests could be (same path suffix): not compared
    ambiguous: tuple[str, ...] = ()
    #: how many tests the baseline holds (0: unknown, as in the history's comparison)
    baseline_size: int = 0
    #: changes past a limit that stand for less GPU or idle time than the floor (gates.noise_floor)
    below_floor: tuple[Regression, ...] = ()

    @property
    def matched_none(self) -> bool:
        """True when the baseline has tests, this run has tests, and not one of them matched."""
        return self.baseline_size > 0 and not self.compared and bool(self.new_tests)

    @property
    def failed(self) -> bool:
        """True when at least one gate was exceeded, or no test matched a non-empty baseline."""
        return bool(self.regressions) or self.matched_none


def _as_record(value: Any) -> TestRecord:
    """A TestRecord from a record or its dict form."""
    if isinstance(value, TestRecord):
        return value
    if isinstance(value, Mapping):
        return TestRecord.from_dict(value)
    raise TypeError(f"expected a TestRecord or a record dict, got {type(value).__name__}")


def _by_nodeid(records: RecordsLike) -> dict[str, TestRecord]:
    """Records keyed by nodeid from a mapping or an iterable of records (last one wins)."""
    values = records.values() if isinstance(records, Mapping) else records
    out: dict[str, TestRecord] = {}
    for value in values:
        record = _as_record(value)
        out[record.test] = record
    return out


def change_of(expr: FailExpr, base: float, now: float) -> tuple[float, str] | None:
    """How ``now`` differs from ``base`` in ``expr``'s terms (points, %, units) and as the regression
    table writes it; None for a relative change from zero, which is undefined."""
    delta = now - base
    if expr.relative:
        if base == 0:
            return None
        change = delta / abs(base) * 100.0
        return change, f"{change:+.1f}%"
    unit = expr.spec.unit
    if unit == "pts":
        return delta, f"{delta:+.1f} pts"
    if unit:
        return delta, f"{delta:+.3g} {unit}" if abs(delta) < 1 else f"{delta:+.1f} {unit}"
    return delta, f"{delta:+.4g}" if not delta.is_integer() else f"{int(delta):+d}"


def worsening(expr: FailExpr, change: float) -> float:
    """``change`` signed so that positive is worse for ``expr``'s metric."""
    return -change if expr.spec.higher_is_better else change


def metric_pairs(old: TestRecord, new: TestRecord, metric: str) -> list[tuple[str, float, float]]:
    """(reported name, baseline, now) for each comparable value of ``metric`` in both records (one per
    ``kernel_bench`` label of the same unit); values missing or not finite on either side are skipped.
    For ``findings``: the findings new against the baseline record, as (``findings: new RULE, ...``,
    0, how many), when there are any and both records were looked at for findings."""
    if metric == FINDINGS or metric.startswith(_FINDINGS_OF):
        return _new_findings(old, new, metric)
    old_values = metric_values(old, metric)
    pairs = []
    for name, (now, unit) in metric_values(new, metric).items():
        then, old_unit = old_values.get(name, (None, ""))
        if now is not None and then is not None and unit == old_unit:
            pairs.append((name, then, now))
    return pairs


def _new_findings(old: TestRecord, new: TestRecord, metric: str) -> list[tuple[str, float, float]]:
    if old.findings is None or new.findings is None:  # findings off, or a baseline from before them
        return []
    before = set(old.finding_rules)
    fresh = [rule for rule in new.finding_rules if rule not in before
             and (metric == FINDINGS or rule == metric[len(_FINDINGS_OF):])]
    return [(f"{FINDINGS}: new {', '.join(fresh)}", 0.0, float(len(fresh)))] if fresh else []


def _check(
    test: str, name: str, base: float, now: float, expr: FailExpr
) -> Regression | None:
    """A Regression when ``now`` is worse than ``base`` by more than the gate allows."""
    found = change_of(expr, base, now)
    if found is None:
        return None
    change, change_text = found
    if worsening(expr, change) <= expr.threshold + _EPS * max(1.0, expr.threshold):
        return None
    return Regression(
        test=test,
        metric=name,
        baseline=base,
        current=now,
        change=change,
        change_text=change_text,
        threshold_text=expr.threshold_text,
    )


def compare_records(
    baseline_records: RecordsLike, current_records: RecordsLike, exprs: Iterable[FailExpr],
    floor_ms: float = FLOOR_MS,
) -> Comparison:
    """Compare by nodeid (ids moved under another rootdir matched too: gates.matching); values missing
    (None) on either side are skipped, never regressions; changes standing for less than ``floor_ms``
    of GPU or idle time are kept apart (gates.noise_floor)."""
    base = _by_nodeid(baseline_records)
    current = _by_nodeid(current_records)
    gates = tuple(exprs)
    matching = match_tests(base, list(current))
    regressions: list[Regression] = []
    floored: list[Regression] = []
    for base_id, test in matching.pairs:
        old, record = base[base_id], current[test]
        for expr in gates:
            for name, then, now in metric_pairs(old, record, expr.metric):
                found = _check(test, name, then, now, expr)
                if found is None:
                    continue
                if not expr.metric.startswith(_FINDINGS_OF) and below_floor(expr.metric, old, record, floor_ms):
                    floored.append(found)
                else:
                    regressions.append(found)
    return Comparison(tuple(regressions), tuple(test for _, test in matching.pairs), matching.new_tests,
                      matching.missing_tests, moved=matching.moved, ambiguous=matching.ambiguous,
                      baseline_size=len(base), below_floor=tuple(floored))


def find_regressions(
    baseline_records: RecordsLike, current_records: RecordsLike, exprs: Iterable[FailExpr]
) -> tuple[Regression, ...]:
    """Regressions of ``current_records`` against ``baseline_records`` (see compare_records)."""
    return compare_records(baseline_records, current_records, exprs).regressions


REGRESSION_HEADERS = ("test", "metric", "baseline", "now", "change", "limit")


def regression_rows(regressions: Iterable[Regression]) -> list[list[str]]:
    """Rows of the regression table, one per regression, as strings."""
    return [
        [
            r.test,
            r.metric,
            format_value(r.baseline),
            format_value(r.current),
            r.change_text,
            r.threshold_text,
        ]
        for r in regressions
    ]


def regression_table(regressions: Iterable[Regression], tablefmt: str = "simple") -> str:
    """Plain-text table (test, metric, baseline, now, change, limit) of the regressions."""
    return tabulate(
        regression_rows(regressions),
        headers=list(REGRESSION_HEADERS),
        tablefmt=tablefmt,
        disable_numparse=True,
        colalign=("left", "left", "right", "right", "right", "right"),
    )
