"""The noise-aware gate: past the limit AND outside median ± 3 scaled MADs of the last runs."""
from __future__ import annotations

import pytest

from pytest_gpuutil.gates.regression import parse_fail_exprs, regression_table
from pytest_gpuutil.history.noise import (
    MAD_SCALE,
    NOISE_K,
    compare_with_history,
    median_record,
    noise_of,
)
from pytest_gpuutil.records import TestRecord


def bench(test: str, median: float, label: str = "mm") -> TestRecord:
    return TestRecord(test, "passed", kernel_bench={label: {"median": median, "mean": median, "unit": "ms"}})


def busy(test: str, value: float) -> TestRecord:
    return TestRecord(test, "passed", busy_pct=value, gpu_busy_ms=10.0)


def test_noise_is_the_median_and_scaled_mad():
    noise = noise_of([1.0, 2.0, 3.0, 4.0, 100.0])
    assert noise.median == 3.0 and noise.mad == pytest.approx(MAD_SCALE * 1.0) and noise.runs == 5
    assert noise.band() == pytest.approx(NOISE_K * MAD_SCALE)
    assert noise.outside(3.0 + 4.5) and not noise.outside(3.0 + 4.4)


def test_a_noisy_test_is_not_flagged_where_a_single_baseline_would_be():
    exprs = parse_fail_exprs("kernel_bench.median:10%")
    history = {"t::a": [bench("t::a", v) for v in (1.0, 1.3, 0.8, 1.2, 0.9)]}
    result = compare_with_history(history, [bench("t::a", 1.25)], exprs)  # +25% over the median 1.0, inside its noise
    assert not result.failed and result.comparison.compared == ("t::a",)
    assert [r.metric for r in result.within_noise] == ["kernel_bench[mm].median"]


def test_a_real_slowdown_is_past_the_limit_and_outside_the_noise():
    exprs = parse_fail_exprs("kernel_bench.median:50%")
    history = {"t::a": [bench("t::a", v) for v in (1.00, 1.02, 0.98, 1.01, 0.99)]}
    result = compare_with_history(history, [bench("t::a", 5.0)], exprs)
    (regression,) = result.comparison.regressions
    assert (regression.test, regression.metric, regression.baseline, regression.current) == (
        "t::a", "kernel_bench[mm].median", 1.0, 5.0)
    assert regression.change_text == "+400.0%"
    assert regression.threshold_text == "+50%, noise ±0.0445 ms"  # 3 x 1.4826 x 0.01
    assert "+50%, noise ±0.0445 ms" in regression_table(result.comparison.regressions)


def test_outside_the_noise_but_within_the_limit_is_no_regression():
    exprs = parse_fail_exprs("busy_pct:5")
    history = {"t::a": [busy("t::a", 50.0)] * 5}  # no noise at all
    assert not compare_with_history(history, [busy("t::a", 47.0)], exprs).failed
    assert compare_with_history(history, [busy("t::a", 44.0)], exprs).failed


def test_higher_is_better_metrics_regress_downwards_only():
    exprs = parse_fail_exprs("busy_pct:5")
    history = {"t::a": [busy("t::a", v) for v in (50.0, 51.0, 49.0)]}
    assert not compare_with_history(history, [busy("t::a", 70.0)], exprs).failed
    result = compare_with_history(history, [busy("t::a", 40.0)], exprs)
    assert result.failed and result.comparison.regressions[0].threshold_text.startswith("-5 pts, noise ±")


def test_fewer_than_three_runs_is_not_gated_and_said():
    exprs = parse_fail_exprs("busy_pct:5")
    history = {"t::a": [busy("t::a", 50.0)] * 2, "t::b": [busy("t::b", 50.0)] * 3}
    result = compare_with_history(history, [busy("t::a", 1.0), busy("t::b", 50.0), busy("t::c", 1.0)], exprs)
    assert not result.failed
    assert result.too_few == ("t::a",) and result.comparison.new_tests == ("t::c",)
    assert result.comparison.compared == ("t::b",) and result.runs == 3


def test_a_metric_with_too_few_values_is_left_out_of_the_median():
    exprs = parse_fail_exprs("busy_pct:5,kernel_bench.median:5%")
    records = [busy("t::a", 50.0), busy("t::a", 50.0), TestRecord("t::a", "passed", kernel_bench={
        "mm": {"median": 1.0, "unit": "ms"}})]
    median, noise = median_record("t::a", records, exprs)
    assert median.busy_pct is None and median.kernel_bench == {}  # two values and one: neither gated
    median, noise = median_record("t::a", records[:2] * 2, exprs)
    assert median.busy_pct == 50.0 and set(noise) == {"busy_pct"}


def test_each_kernel_bench_label_has_its_own_series():
    exprs = parse_fail_exprs("kernel_bench.median:20%")
    history = {"t::a": [TestRecord("t::a", "passed", kernel_bench={"fwd": {"median": 1.0, "unit": "ms"},
                                                                   "bwd": {"median": 2.0, "unit": "ms"}})] * 4}
    now = TestRecord("t::a", "passed", kernel_bench={"fwd": {"median": 1.1, "unit": "ms"},
                                                     "bwd": {"median": 3.0, "unit": "ms"}})
    result = compare_with_history(history, [now], exprs)
    assert [r.metric for r in result.comparison.regressions] == ["kernel_bench[bwd].median"]


def test_a_unit_change_restarts_the_series():
    exprs = parse_fail_exprs("kernel_bench.median:20%")
    old = [TestRecord("t::a", "passed", kernel_bench={"mm": {"median": 1000.0, "unit": "us"}})] * 3
    new = [TestRecord("t::a", "passed", kernel_bench={"mm": {"median": 1.0, "unit": "ms"}})] * 2
    median, _ = median_record("t::a", old + new, exprs)
    assert median.kernel_bench == {}  # only two values in the newest unit
