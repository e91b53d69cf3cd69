from __future__ import annotations

import pytest

from pytest_gpuutil.gates.thresholds import (
    ThresholdMiss,
    Thresholds,
    check,
    has_gpu_data,
    merge,
    parse_ini,
)
from pytest_gpuutil.records import TestRecord

WHERE = "@pytest.mark.gpu_util on t.py::test_a"


def gpu_rec(**fields) -> TestRecord:
    values = dict(busy_pct=50.0, mm_conv_pct=40.0, gpu_busy_ms=10.0, kernel_count=100)
    values.update(fields)
    return TestRecord(test="t.py::test_a", outcome="passed", **values)


def test_from_kwargs():
    t = Thresholds.from_kwargs({"min_busy_pct": 20, "max_gpu_ms": 1.5}, WHERE)
    assert t == Thresholds(min_busy_pct=20.0, max_gpu_ms=1.5)
    assert not t.is_empty
    assert Thresholds.from_kwargs({}, WHERE).is_empty


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"min_busy": 20}, "unknown threshold min_busy (valid: min_busy_pct"),
        ({"min_busy_pct": "20"}, "min_busy_pct must be a number, got '20'"),
        ({"max_gpu_ms": True}, "max_gpu_ms must be a number"),
        ({"max_kernel_count": -1}, "must be a non-negative number"),
        ({"max_gpu_ms": float("inf")}, "must be a non-negative number"),
        ({"min_mm_conv_pct": 120}, "percentage (0-100)"),
    ],
)
def test_from_kwargs_errors_name_where(kwargs, why):
    with pytest.raises(ValueError) as info:
        Thresholds.from_kwargs(kwargs, WHERE)
    assert str(info.value).startswith(WHERE + ": ")
    assert why in str(info.value)


def test_merge_marker_wins_per_field():
    default = Thresholds(min_busy_pct=20, max_kernel_count=5000)
    marker = Thresholds(min_busy_pct=50, max_gpu_ms=3)
    assert merge(default, marker) == Thresholds(min_busy_pct=50, max_gpu_ms=3,
                                                max_kernel_count=5000)
    assert merge(default, None) == default
    assert merge(None, marker) == marker


@pytest.mark.parametrize(
    "text",
    ["min_busy_pct=20 max_kernel_count=5000", "min_busy_pct=20,max_kernel_count=5000",
     " min_busy_pct = 20 ,\n max_kernel_count=5e3 "],
)
def test_parse_ini(text):
    assert parse_ini(text) == Thresholds(min_busy_pct=20, max_kernel_count=5000)


def test_parse_ini_empty():
    assert parse_ini("") == Thresholds()
    assert parse_ini(None) == Thresholds()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("min_busy_pct", "expected KEY=NUMBER, got 'min_busy_pct'"),
        ("min_busy_pct=abc", "min_busy_pct must be a number, got 'abc'"),
        ("min_busy_pct=1 min_busy_pct=2", "given twice"),
        ("max_ms=3", "unknown threshold max_ms"),
        ("max_gpu_ms=-3", "non-negative"),
    ],
)
def test_parse_ini_errors(text, why):
    with pytest.raises(ValueError) as info:
        parse_ini(text, where="ini gpu_util_thresholds")
    assert str(info.value).startswith("ini gpu_util_thresholds: ")
    assert why in str(info.value)


def test_check_pass():
    t = Thresholds(min_busy_pct=20, min_mm_conv_pct=40, max_gpu_ms=10, max_kernel_count=100)
    assert check(t, gpu_rec()) == ()  # equal to each limit passes


def test_check_misses_each_metric():
    t = Thresholds(min_busy_pct=20, min_mm_conv_pct=50, max_gpu_ms=5, max_kernel_count=99)
    misses = check(t, gpu_rec(busy_pct=12.3))
    assert [m.message for m in misses] == [
        "gpu_util: busy_pct 12.3 is below min_busy_pct=20",
        "gpu_util: mm_conv_pct 40 is below min_mm_conv_pct=50",
        "gpu_util: gpu_busy_ms 10 is above max_gpu_ms=5",
        "gpu_util: kernel_count 100 is above max_kernel_count=99",
    ]
    assert misses[0] == ThresholdMiss("busy_pct", "min_busy_pct", 20.0, 12.3)


def test_check_without_gpu_is_not_checked():
    record = TestRecord(test="t.py::test_a", outcome="passed", wall_ms=5.0,
                        note="no CUDA device")
    assert not has_gpu_data(record)
    assert check(Thresholds(min_busy_pct=20), record) is None


def test_check_empty_thresholds_is_pass():
    assert check(Thresholds(), gpu_rec(busy_pct=0.0)) == ()


def test_check_unmeasured_metric_is_a_miss():
    (miss,) = check(Thresholds(min_mm_conv_pct=10), gpu_rec(mm_conv_pct=None))
    assert miss.measured is None
    assert miss.message == "gpu_util: mm_conv_pct was not measured, required by min_mm_conv_pct=10"


# -- GPU memory limits ----------------------------------------------------------------------------
def mem_rec(**fields) -> TestRecord:
    values = dict(peak_alloc_mb=1536.0, peak_reserved_mb=2048.0, leaked_mb=0.0, alloc_retries=0, ooms=0)
    values.update(fields)
    return TestRecord(test="t.py::test_a", outcome="passed", **values)


def test_memory_limits_are_sizes_in_bytes():
    t = Thresholds.from_kwargs({"max_memory": "2 GiB", "max_leak": "0 B"}, WHERE)
    assert (t.max_memory, t.max_leak) == (2.0 * (1 << 30), 0.0)
    assert parse_ini("max_memory=1.5 GB max_leak = 1 MiB, min_busy_pct=5", "ini") == Thresholds(
        max_memory=1.5 * (1 << 30), max_leak=float(1 << 20), min_busy_pct=5.0)


@pytest.mark.parametrize(("value", "why"), [("2 parsecs", "max_memory: unknown unit"), ("lots", "max_memory: expected a size"),
                                            ("-1 GiB", "max_memory: a size must be a non-negative number")])
def test_a_bad_size_names_the_test(value, why):
    with pytest.raises(ValueError) as info:
        Thresholds.from_kwargs({"max_memory": value}, WHERE)
    assert str(info.value).startswith(WHERE + ": " + why)


def test_memory_misses_say_the_figure_and_the_limit():
    misses = check(Thresholds.from_kwargs({"max_memory": "1 GiB", "max_leak": "0 B"}, WHERE), mem_rec(leaked_mb=256.0))
    assert [m.message for m in misses] == [
        "gpu_util: peak_alloc_mb 1.5 GiB is above max_memory=1.0 GiB",
        "gpu_util: leaked_mb 256.0 MiB is above max_leak=0 B",
    ]
    assert check(Thresholds.from_kwargs({"max_memory": "2 GiB"}, WHERE), mem_rec()) == ()


def test_memory_limits_are_checked_without_gpu_events_and_gpu_limits_without_memory():
    # a test the profiler stepped aside for (kernel_bench) still has its memory measured
    assert check(Thresholds(max_memory=1.0), mem_rec()) != ()
    assert check(Thresholds(min_busy_pct=10), mem_rec()) is None  # no GPU events: not checked
    assert check(Thresholds(max_memory=1.0), gpu_rec()) is None  # no memory figures: not checked
    assert check(Thresholds(max_memory=1.0), TestRecord(test="t", outcome="passed")) is None
    both = check(Thresholds(min_busy_pct=90, max_memory=1.0), gpu_rec())
    assert [m.threshold_name for m in both] == ["min_busy_pct"]  # what could be checked was
