"""Attributing hardware-counter samples to test windows, on synthetic samples (no GPU needed)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_gpuutil.analysis.counters import (
    ENERGY,
    NOT_COVERED,
    TOO_SHORT,
    CounterSamples,
    CounterSums,
    ProcessChecks,
    integrate,
    other_process_note,
    spread,
    window_figures,
)

MS = 1_000_000


def steps(*values: float, period: int = 10 * MS, start: int = 0, name: str = "sm_pct") -> CounterSamples:
    """Back-to-back samples of ``period`` ns, one value each."""
    return CounterSamples.from_rows((start + i * period, start + (i + 1) * period, {name: v}) for i, v in enumerate(values))


def test_a_sample_shared_by_two_tests_is_split_by_overlap_time() -> None:
    # samples of 10 ms: 0-10 at 100 %, 10-20 at 0 %, 20-30 at 100 %; test A 0-15 ms, test B 15-30 ms
    samples = steps(100.0, 0.0, 100.0)
    a, b = window_figures(samples, CounterSamples(), [(0, 15 * MS), (15 * MS, 30 * MS)], period_ns=5 * MS)
    assert a.values["sm_pct"] == pytest.approx(100 * 10 / 15)  # 10 ms at 100 %, 5 ms at 0 %
    assert b.values["sm_pct"] == pytest.approx(100 * 10 / 15)
    # the shared sample's 10 ms went 5 to A and 5 to B
    assert a.sums.sums["sm_pct"] == pytest.approx((15.0, 1000.0))
    assert b.sums.sums["sm_pct"] == pytest.approx((15.0, 1000.0))


def test_a_window_inside_one_sample_gets_that_samples_value_when_long_enough() -> None:
    samples = steps(42.0, period=100 * MS)
    (figure,) = window_figures(samples, CounterSamples(), [(30 * MS, 60 * MS)], period_ns=10 * MS)
    assert figure.values["sm_pct"] == pytest.approx(42.0) and figure.note == ""


def test_a_window_shorter_than_two_periods_gets_no_number() -> None:
    samples = steps(50.0, 50.0, 50.0)
    short, exact = window_figures(samples, CounterSamples(), [(0, 19 * MS), (0, 20 * MS)], period_ns=10 * MS)
    assert short.note == TOO_SHORT and all(v is None for v in short.values.values())
    assert short.sums.sums["sm_pct"] == pytest.approx((19.0, 950.0))  # still counts for the file and session
    assert exact.note == "" and exact.values["sm_pct"] == pytest.approx(50.0)


def test_a_window_the_samples_do_not_cover_gets_no_number() -> None:
    samples = steps(80.0, 80.0)  # 0-20 ms
    (figure,) = window_figures(samples, CounterSamples(), [(10 * MS, 40 * MS)], period_ns=1 * MS)
    assert figure.note == NOT_COVERED and figure.values["sm_pct"] is None
    assert figure.sums.sums["sm_pct"] == pytest.approx((10.0, 800.0))


def test_a_metric_missing_in_some_samples_is_averaged_over_the_others() -> None:
    rows = [(i * MS, (i + 1) * MS, {"sm_pct": float(i), "dram_bw_pct": None if i == 3 else 50.0 + i}) for i in range(10)]
    (figure,) = window_figures(CounterSamples.from_rows(rows), CounterSamples(), [(0, 10 * MS)], period_ns=MS)
    assert figure.values["sm_pct"] == pytest.approx(4.5)
    assert figure.values["dram_bw_pct"] == pytest.approx(np.mean([50.0 + i for i in range(10) if i != 3]))
    assert figure.values["tensor_pct"] is None  # the source has no tensor metric
    assert figure.sums.sums["dram_bw_pct"][0] == pytest.approx(9.0)


def test_coverage_is_needed_per_metric() -> None:
    samples = CounterSamples.from_rows([(i * MS, (i + 1) * MS, {"sm_pct": 1.0, "dram_bw_pct": None if i < 5 else 2.0})
                                        for i in range(10)])
    (figure,) = window_figures(samples, CounterSamples(), [(0, 10 * MS)], period_ns=MS)
    assert figure.values["sm_pct"] == 1.0
    assert figure.values["dram_bw_pct"] is None  # half the window: not enough


def test_integrate_matches_a_brute_force_sum_on_random_samples() -> None:
    rng = np.random.default_rng(7)
    edges = np.cumsum(rng.integers(1, 50, size=200)).astype(np.int64)
    values = rng.uniform(0, 100, size=199)
    samples = CounterSamples(edges[:-1], edges[1:], {"sm_pct": values})
    starts = rng.integers(0, int(edges[-1]), size=50)
    ends = starts + rng.integers(0, 500, size=50)
    covered, weighted = integrate(samples, starts, ends)
    for j in range(50):
        overlap = np.clip(np.minimum(edges[1:], ends[j]) - np.maximum(edges[:-1], starts[j]), 0, None)
        assert covered["sm_pct"][j] == pytest.approx(overlap.sum())
        assert weighted["sm_pct"][j] == pytest.approx((overlap * values).sum())


def test_tidy_drops_backwards_samples_and_cuts_overlaps() -> None:
    samples = CounterSamples.from_rows([
        (50, 10, {"sm_pct": 1.0}),  # start after end (the first PM sample seen on an H100)
        (20, 30, {"sm_pct": 3.0}),
        (0, 20, {"sm_pct": 2.0}),
        (25, 40, {"sm_pct": 4.0}),
        (30, 30, {"sm_pct": 5.0}),
    ]).tidy()
    assert samples.start_ns.tolist() == [0, 20, 30]
    assert samples.end_ns.tolist() == [20, 30, 40]
    assert samples.values["sm_pct"].tolist() == [2.0, 3.0, 4.0]


def test_energy_is_spread_over_each_readings_span() -> None:
    # readings every 100 ms: 10 J, then 30 J
    readings = CounterSamples.from_rows([(0, 100 * MS, {ENERGY: 10.0}), (100 * MS, 200 * MS, {ENERGY: 30.0})])
    covered, joules = spread(readings, np.asarray([50 * MS, 0]), np.asarray([150 * MS, 200 * MS]))
    assert joules.tolist() == pytest.approx([5.0 + 15.0, 40.0])
    assert covered.tolist() == pytest.approx([100 * MS, 200 * MS])


def test_energy_needs_a_long_enough_window() -> None:
    readings = CounterSamples.from_rows([(i * 100 * MS, (i + 1) * 100 * MS, {ENERGY: 50.0}) for i in range(30)])
    long, short = window_figures(CounterSamples(), readings, [(0, 2000 * MS), (2000 * MS, 2500 * MS)], period_ns=None,
                                 energy_min_ns=1000 * MS)
    assert long.energy_j == pytest.approx(1000.0) and long.avg_power_w == pytest.approx(500.0)
    assert short.energy_j is None and short.avg_power_w is None
    assert short.sums.energy_j == pytest.approx(250.0)  # but it counts for the file and session
    assert long.note == "" and short.note == ""  # no metric source: energy only, nothing "too short"


def test_sums_add_up_to_file_and_session_figures_with_short_tests_in() -> None:
    samples = steps(*([90.0] * 10 + [10.0] * 10), period=MS)
    windows = [(0, 10 * MS), (10 * MS, 11 * MS), (11 * MS, 20 * MS)]  # the middle test is too short
    figures = window_figures(samples, CounterSamples(), windows, period_ns=MS * 2)
    assert figures[1].values["sm_pct"] is None
    total = CounterSums.total(f.sums for f in figures)
    assert total.mean("sm_pct") == pytest.approx(50.0)
    assert total.mean("tensor_pct") is None
    again = CounterSums.from_dict(total.to_dict())
    assert again == total
    assert CounterSums.from_dict({"sm_pct": [1, "x"], "tensor_pct": "bad", "dram_bw_pct": [2.0, 4.0]}).sums == {
        "dram_bw_pct": (2.0, 4.0)}


def test_nothing_to_attribute() -> None:
    assert window_figures(steps(1.0), CounterSamples(), [], period_ns=MS) == []
    (figure,) = window_figures(CounterSamples(), CounterSamples(), [(0, 10 * MS)], period_ns=MS)
    assert all(v is None for v in figure.values.values()) and figure.sums.sums == {}


def test_another_process_seen_between_checks_marks_the_span_around_its_check() -> None:
    checks = ProcessChecks((0, 100, 200, 300), (frozenset(), frozenset({7}), frozenset(), frozenset({9, 8})), period_ns=100)
    assert checks.pids_during(0, 10) == [7]  # pid 7 may have been there from the check before (0) on
    assert checks.pids_during(150, 160) == [7]
    assert checks.pids_during(201, 202) == [8, 9]
    assert checks.pids_during(350, 390) == [8, 9]  # after the last check, one period on
    assert checks.pids_during(500, 600) == []
    assert checks.after(250).times_ns == (200, 300)
    assert "pid 7" in other_process_note([7]) and other_process_note([]) == ""
    assert other_process_note([1, 2, 3, 4, 5]).endswith("pid 1, 2, 3 and 2 more (the hardware counters are device-wide)")


def test_concat_fills_metrics_a_part_lacks_with_nan() -> None:
    a = steps(1.0, name="sm_pct")
    b = steps(2.0, start=10 * MS, name="tensor_pct")
    both = CounterSamples.concat([a, b])
    assert both.values["sm_pct"][0] == 1.0 and math.isnan(both.values["sm_pct"][1])
    assert math.isnan(both.values["tensor_pct"][0]) and both.values["tensor_pct"][1] == 2.0
    assert len(both.ending_after(10 * MS)) == 1
