"""No gate on noise: percentage and ms gates act only on changes of at least FLOOR_MS of GPU or idle time."""
from __future__ import annotations

import pytest

from pytest_gpuutil.gates.matching import common_shift, match_tests
from pytest_gpuutil.gates.noise_floor import FLOOR_MS, below_floor, ms_behind
from pytest_gpuutil.gates.regression import compare_records, parse_fail_exprs
from pytest_gpuutil.records import TestRecord

GATES = parse_fail_exprs("busy_pct:5 mm_conv_pct:5 gpu_busy_ms:10%")


def rec(test="t.py::a", **fields) -> TestRecord:
    return TestRecord(test, "passed", **fields)


def test_the_issue_case_an_unchanged_short_test_is_not_flagged():
    # 1.36 ms of GPU work in a window that grew from 2.37 to 3.0 ms: 57.4 -> 45.3 % busy
    before = rec(wall_ms=2.37, gpu_busy_ms=1.36, busy_pct=57.38)
    after = rec(wall_ms=3.0, gpu_busy_ms=1.36, busy_pct=45.33)
    assert ms_behind("busy_pct", before, after) == pytest.approx(0.63, abs=0.01)
    result = compare_records([before], [after], GATES)
    assert not result.failed and result.regressions == ()
    assert [r.metric for r in result.below_floor] == ["busy_pct"]


def test_a_real_drop_in_busy_time_is_flagged():
    before = rec(wall_ms=20.0, gpu_busy_ms=18.0, busy_pct=90.0)
    after = rec(wall_ms=30.0, gpu_busy_ms=18.0, busy_pct=60.0)  # 10 ms more idle
    result = compare_records([before], [after], GATES)
    assert [r.metric for r in result.regressions] == ["busy_pct"]


@pytest.mark.parametrize("before, after, floored", [(0.5, 0.9, True), (5.0, 6.5, False), (10.0, 10.99, True)])
def test_ms_gates_need_a_change_of_the_floor(before, after, floored):
    old, new = rec(gpu_busy_ms=before), rec(gpu_busy_ms=after)
    assert below_floor("gpu_busy_ms", old, new) is floored
    result = compare_records([old], [new], parse_fail_exprs("gpu_busy_ms:5%"))
    assert bool(result.regressions) is not floored


def test_records_without_a_window_are_gated_without_the_floor():
    assert ms_behind("busy_pct", rec(busy_pct=50.0), rec(busy_pct=30.0)) is None
    assert compare_records([rec(busy_pct=50.0)], [rec(busy_pct=30.0)], GATES).regressions


def test_floor_is_one_ms():
    assert FLOOR_MS == 1.0


def test_ids_moved_by_a_leading_path_match_unambiguously():
    found = match_tests(["t.py::a", "t.py::b", "u/t.py::c"], ["w/p/t.py::a", "w/p/t.py::b", "x/t.py::c", "y/t.py::c"])
    assert found.moved == (("t.py::a", "w/p/t.py::a"), ("t.py::b", "w/p/t.py::b"))
    assert found.new_tests == ("x/t.py::c", "y/t.py::c") and found.missing_tests == ("u/t.py::c",)
    assert common_shift(found.moved) == "'w/p/' added at the front"


def test_exact_ids_win_and_a_suffix_never_matches_inside_a_name():
    found = match_tests(["t.py::a", "xt.py::a"], ["t.py::a", "p/xt.py::a", "pt.py::a"])
    assert found.pairs == (("t.py::a", "t.py::a"), ("xt.py::a", "p/xt.py::a"))
    assert found.new_tests == ("pt.py::a",)


def test_a_baseline_two_tests_could_be_is_not_matched():
    found = match_tests(["t.py::a"], ["p/t.py::a", "q/t.py::a"])
    assert found.pairs == () and found.ambiguous == ("t.py::a",)
    result = compare_records([rec("t.py::a")], [rec("p/t.py::a"), rec("q/t.py::a")], GATES)
    assert result.failed and result.matched_none
