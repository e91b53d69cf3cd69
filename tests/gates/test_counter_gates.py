"""Limits and regression gates on the hardware counters: SM %, tensor %, energy."""
from __future__ import annotations

import pytest

from pytest_gpuutil.gates.regression import compare_records, parse_fail_exprs
from pytest_gpuutil.gates.thresholds import Thresholds, check, parse_ini
from pytest_gpuutil.records import TestRecord


def record(**fields) -> TestRecord:
    base = {"gpu_busy_ms": 50.0, "busy_pct": 90.0, "kernel_count": 10, "wall_ms": 60.0}
    return TestRecord("t.py::test_a", "passed", **{**base, **fields})


def messages(thresholds: Thresholds, rec: TestRecord) -> list[str] | None:
    misses = check(thresholds, rec)
    return None if misses is None else [m.message for m in misses]


def test_counter_limits_parse_from_marker_and_ini() -> None:
    assert Thresholds.from_kwargs({"min_sm_pct": 50, "min_tensor_pct": 20, "max_energy_j": 1.5}, "m") == Thresholds(
        min_sm_pct=50.0, min_tensor_pct=20.0, max_energy_j=1.5)
    assert parse_ini("min_sm_pct=20, max_energy_j=300") == Thresholds(min_sm_pct=20.0, max_energy_j=300.0)
    with pytest.raises(ValueError, match="min_tensor_pct is a percentage"):
        Thresholds.from_kwargs({"min_tensor_pct": 120}, "m")
    with pytest.raises(ValueError, match="max_energy_j must be a non-negative number"):
        Thresholds.from_kwargs({"max_energy_j": -1}, "m")


def test_low_sm_and_tensor_fail_high_pass() -> None:
    limits = Thresholds(min_sm_pct=50.0, min_tensor_pct=20.0)
    low = record(counters_source="cupti_pm_sampling", sm_pct=3.25, tensor_pct=0.0)
    assert messages(limits, low) == ["gpu_util: sm_pct 3.25 is below min_sm_pct=50",
                                     "gpu_util: tensor_pct 0 is below min_tensor_pct=20"]
    high = record(counters_source="cupti_pm_sampling", sm_pct=95.0, tensor_pct=90.0)
    assert messages(limits, high) == []


def test_a_call_too_short_for_the_counters_is_a_miss_that_says_so() -> None:
    short = record(counters_source="nvml_gpm", counters_note="too short for the hardware counters")
    assert messages(Thresholds(min_sm_pct=50.0), short) == [
        "gpu_util: sm_pct was not measured (too short for the hardware counters), required by min_sm_pct=50"]


def test_a_source_without_the_metric_is_a_miss_that_names_the_source() -> None:
    energy_only = record(counters_source="nvml_utilization", energy_j=2.0)
    assert messages(Thresholds(min_tensor_pct=5.0), energy_only) == [
        "gpu_util: tensor_pct was not measured (nvml_utilization has no tensor_pct), required by min_tensor_pct=5"]


def test_without_counters_the_counter_limits_are_not_checked() -> None:
    no_counters = record()
    assert check(Thresholds(min_sm_pct=50.0), no_counters) is None  # not checked, never a pass
    assert messages(Thresholds(min_sm_pct=50.0, min_busy_pct=95.0), no_counters) == [
        "gpu_util: busy_pct 90 is below min_busy_pct=95"]


def test_energy_limit() -> None:
    limits = Thresholds(max_energy_j=100.0)
    assert messages(limits, record(counters_source="nvml_gpm", energy_j=150.0, wall_ms=2000.0)) == [
        "gpu_util: energy_j 150 is above max_energy_j=100"]
    assert messages(limits, record(counters_source="nvml_gpm", energy_j=50.0, wall_ms=2000.0)) == []
    assert messages(limits, record(counters_source="nvml_gpm", wall_ms=300.0)) == [
        "gpu_util: energy_j was not measured (the energy figure needs a call of 1 s or more), required by max_energy_j=100"]


@pytest.mark.parametrize("expr, before, after, fails", [
    ("sm_pct:5", {"sm_pct": 90.0}, {"sm_pct": 80.0}, True),  # a drop of SM % is worse
    ("sm_pct:5", {"sm_pct": 80.0}, {"sm_pct": 95.0}, False),
    ("tensor_pct:5", {"tensor_pct": 60.0}, {"tensor_pct": 56.0}, False),
    ("dram_bw_pct:5", {"dram_bw_pct": 80.0}, {"dram_bw_pct": 70.0}, True),
    ("energy_j:10%", {"energy_j": 100.0}, {"energy_j": 120.0}, True),  # a rise of energy is worse
    ("energy_j:10%", {"energy_j": 100.0}, {"energy_j": 60.0}, False),
    ("sm_pct:5", {"sm_pct": 90.0}, {}, False),  # not measured now: skipped, never a regression
])
def test_regression_gates_on_counters(expr: str, before: dict, after: dict, fails: bool) -> None:
    comparison = compare_records([record(**before)], [record(**after)], parse_fail_exprs(expr))
    assert comparison.failed is fails
    if fails:
        (regression,) = comparison.regressions
        assert regression.metric == expr.split(":")[0]
