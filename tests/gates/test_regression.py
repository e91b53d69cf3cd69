from __future__ import annotations

import pytest

from pytest_gpuutil.gates.regression import (
    DEFAULT_FAIL_EXPRS,
    FailExpr,
    Regression,
    compare_records,
    find_regressions,
    parse_fail_expr,
    parse_fail_exprs,
    regression_table,
)
from pytest_gpuutil.records import TestRecord


def rec(test: str = "t.py::test_a", **fields) -> TestRecord:
    return TestRecord(test=test, outcome="passed", **fields)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("busy_pct:5", FailExpr("busy_pct", 5.0, False)),
        (" gpu_busy_ms:10% ", FailExpr("gpu_busy_ms", 10.0, True)),
        ("kernel_count:0", FailExpr("kernel_count", 0.0, False)),
        ("kernel_bench.median:2.5%", FailExpr("kernel_bench.median", 2.5, True)),
        ("mm_conv_pct:0.5", FailExpr("mm_conv_pct", 0.5, False)),
    ],
)
def test_parse_fail_expr(text, expected):
    assert parse_fail_expr(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("busy_pct", "expected METRIC:N or METRIC:N%"),
        ("busy:5", "unknown metric 'busy'"),
        ("kernel_bench.max:5", "unknown metric 'kernel_bench.max'"),
        ("busy_pct:-5", "non-negative"),
        ("busy_pct:abc", "non-negative number, got 'abc'"),
        ("busy_pct:nan", "non-negative"),
        ("busy_pct:5%%", "expected METRIC:N"),
        ("", "expected METRIC:N"),
    ],
)
def test_parse_fail_expr_errors(text, why):
    with pytest.raises(ValueError) as info:
        parse_fail_expr(text)
    message = str(info.value)
    assert repr(text) in message
    assert why in message


def test_parse_error_lists_metrics():
    with pytest.raises(ValueError) as info:
        parse_fail_expr("nope:1")
    for metric in ("busy_pct", "gpu_busy_ms", "kernel_count", "kernel_bench.median"):
        assert metric in str(info.value)


def test_parse_fail_exprs_splits_and_defaults_parse():
    assert parse_fail_exprs(["busy_pct:5, gpu_busy_ms:10%", "kernel_count:3"]) == (
        FailExpr("busy_pct", 5.0),
        FailExpr("gpu_busy_ms", 10.0, True),
        FailExpr("kernel_count", 3.0),
    )
    assert [e.text for e in parse_fail_exprs(DEFAULT_FAIL_EXPRS)] == [
        "busy_pct:5", "mm_conv_pct:5", "gpu_busy_ms:10%",
    ]


def test_busy_pct_drop_regresses():
    (r,) = find_regressions([rec(busy_pct=80.0)], [rec(busy_pct=72.7)],
                            [parse_fail_expr("busy_pct:5")])
    assert r == Regression(
        test="t.py::test_a", metric="busy_pct", baseline=80.0, current=72.7,
        change=pytest.approx(-7.3), change_text="-7.3 pts", threshold_text="-5 pts",
    )


@pytest.mark.parametrize(
    ("before", "after", "regressed"),
    [
        (80.0, 75.0, False),  # exactly at the limit
        (12.3, 7.3, False),  # at the limit, with float noise
        (80.0, 74.9, True),
        (50.0, 90.0, False),  # improvement
    ],
)
def test_busy_pct_limit_boundary(before, after, regressed):
    found = find_regressions([rec(busy_pct=before)], [rec(busy_pct=after)],
                             [parse_fail_expr("busy_pct:5")])
    assert bool(found) is regressed


def test_gpu_ms_relative_increase():
    exprs = [parse_fail_expr("gpu_busy_ms:10%")]
    (r,) = find_regressions([rec(gpu_busy_ms=100.0)], [rec(gpu_busy_ms=112.0)], exprs)
    assert r.change == pytest.approx(12.0)
    assert r.change_text == "+12.0%"
    assert r.threshold_text == "+10%"
    assert find_regressions([rec(gpu_busy_ms=100.0)], [rec(gpu_busy_ms=109.0)], exprs) == ()
    # faster is never a regression
    assert find_regressions([rec(gpu_busy_ms=100.0)], [rec(gpu_busy_ms=10.0)], exprs) == ()


def test_relative_from_zero_is_skipped():
    exprs = [parse_fail_expr("gpu_busy_ms:10%")]
    assert find_regressions([rec(gpu_busy_ms=0.0)], [rec(gpu_busy_ms=5.0)], exprs) == ()


def test_kernel_count_absolute_and_relative_drop_direction():
    (r,) = find_regressions([rec(kernel_count=100)], [rec(kernel_count=150)],
                            [parse_fail_expr("kernel_count:20")])
    assert (r.change, r.change_text, r.threshold_text) == (50, "+50", "+20")
    # mm_conv_pct relative drop
    (r,) = find_regressions([rec(mm_conv_pct=50.0)], [rec(mm_conv_pct=40.0)],
                            [parse_fail_expr("mm_conv_pct:10%")])
    assert r.change_text == "-20.0%"
    assert r.threshold_text == "-10%"


def test_absolute_ms_change_text():
    (r,) = find_regressions([rec(wall_ms=10.0)], [rec(wall_ms=13.5)],
                            [parse_fail_expr("wall_ms:2")])
    assert r.change_text == "+3.5 ms"
    assert r.threshold_text == "+2 ms"


def test_kernel_bench_labels_present_in_both():
    base = rec(kernel_bench={"mm": {"median": 1.0, "p80": 1.1}, "old": {"median": 1.0}})
    now = rec(kernel_bench={"mm": {"median": 1.3, "p80": 1.1}, "new": {"median": 9.0}})
    (r,) = find_regressions([base], [now], [parse_fail_expr("kernel_bench.median:10%")])
    assert r.metric == "kernel_bench[mm].median"
    assert r.change == pytest.approx(30.0)
    assert find_regressions([base], [now], [parse_fail_expr("kernel_bench.p80:1%")]) == ()


def test_kernel_bench_different_units_are_not_compared():
    base = rec(kernel_bench={"mm": {"median": 1.0, "unit": "ms"}})
    now = rec(kernel_bench={"mm": {"median": 900.0, "unit": "us"}})
    assert find_regressions([base], [now], [parse_fail_expr("kernel_bench.median:1%")]) == ()


def test_missing_values_and_tests_are_skipped():
    base = [rec("a", busy_pct=90.0), rec("b", busy_pct=None), rec("gone", busy_pct=90.0)]
    now = [rec("a", busy_pct=None), rec("b", busy_pct=10.0), rec("new", busy_pct=1.0)]
    result = compare_records(base, now, [parse_fail_expr("busy_pct:5")])
    assert result.regressions == ()
    assert not result.failed
    assert result.compared == ("a", "b")
    assert result.new_tests == ("new",)
    assert result.missing_tests == ("gone",)


def test_accepts_mappings_and_dicts():
    base = {"a": rec("a", busy_pct=90.0)}
    now = [rec("a", busy_pct=50.0).to_dict()]
    result = compare_records(base, now, parse_fail_exprs(DEFAULT_FAIL_EXPRS))
    assert result.failed
    assert [r.metric for r in result.regressions] == ["busy_pct"]


def test_several_exprs_order():
    base = rec(busy_pct=90.0, mm_conv_pct=80.0, gpu_busy_ms=10.0)
    now = rec(busy_pct=50.0, mm_conv_pct=20.0, gpu_busy_ms=20.0)
    found = find_regressions([base], [now], parse_fail_exprs(DEFAULT_FAIL_EXPRS))
    assert [r.metric for r in found] == ["busy_pct", "mm_conv_pct", "gpu_busy_ms"]


def test_regression_table():
    found = find_regressions(
        [rec("t.py::test_mm", busy_pct=80.0, gpu_busy_ms=1234.5)],
        [rec("t.py::test_mm", busy_pct=72.7, gpu_busy_ms=1500.0)],
        parse_fail_exprs("busy_pct:5 gpu_busy_ms:10%"),
    )
    table = regression_table(found)
    lines = table.splitlines()
    assert lines[0].split() == ["test", "metric", "baseline", "now", "change", "limit"]
    assert len(lines) == 4
    assert "t.py::test_mm" in lines[2] and "-7.3 pts" in lines[2] and "72.70" in lines[2]
    assert "1234.5" in lines[3] and "+21.5%" in lines[3] and "+10%" in lines[3]
