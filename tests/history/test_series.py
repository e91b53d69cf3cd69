"""What the history shows: per-test series of every metric, and the trend line's metric and values."""
from __future__ import annotations

from pytest_gpuutil.history.series import TREND_RUNS, history_document, trend_of, trends
from pytest_gpuutil.history.store import open_history
from pytest_gpuutil.records import TestRecord


def rec(test: str = "t::a", **fields) -> TestRecord:
    return TestRecord(test, "passed", **fields)


def test_the_document_has_every_runs_values_with_none_where_missing(tmp_path):
    path = tmp_path / "h.sqlite"
    with open_history(path, create=True) as history:
        history.append({"gpu_model": "X"}, [rec(busy_pct=1.0), rec("t::b", wall_ms=2.0)], "2026-01-01")
        history.append({"gpu_model": "X"}, [rec(kernel_bench={"mm": {"median": 3.0, "unit": "ms"}})], "2026-01-02")
        doc = history_document(history)
        only_b = history_document(history, ["t::b"])
    assert [r["id"] for r in doc["runs"]] == [1, 2] and doc["db"] == str(path)
    a = doc["tests"]["t::a"]
    assert a["runs"] == [1, 2] and a["machine_ids"] == ["X", "X"] and a["outcomes"] == ["passed", "passed"]
    assert a["metrics"] == {"busy_pct": [1.0, None], "kernel_bench[mm].median": [None, 3.0]}
    assert list(only_b["tests"]) == ["t::b"] and len(only_b["runs"]) == 2


def test_the_trend_shows_the_first_metric_the_test_has_this_run_last():
    earlier = [rec(gpu_busy_ms=float(v), busy_pct=50.0) for v in (1, 2, 3)]
    trend = trend_of(rec(gpu_busy_ms=4.0, busy_pct=40.0), earlier)
    assert (trend.metric, trend.values, trend.unit) == ("gpu_busy_ms", (1.0, 2.0, 3.0, 4.0), "ms")
    assert trend_of(rec(gpu_busy_ms=4.0, busy_pct=40.0), earlier, ["busy_pct"]).values == (50.0, 50.0, 50.0, 40.0)
    assert trend_of(rec(gpu_busy_ms=4.0), []) is None  # no earlier run: no line


def test_kernel_bench_trends_follow_one_label_and_its_unit():
    earlier = [rec(kernel_bench={"fwd": {"median": 1.0, "unit": "ms"}, "bwd": {"median": 2.0, "unit": "ms"}}),
               rec(kernel_bench={"fwd": {"median": 1000.0, "unit": "us"}})]
    now = rec(kernel_bench={"fwd": {"median": 1.5, "unit": "ms"}, "bwd": {"median": 2.5, "unit": "ms"}})
    assert trend_of(now, earlier).values == (1.0, None, 1.5)  # the other unit leaves a gap
    assert trend_of(now, earlier, ["kernel_bench[bwd].median"]).values == (2.0, None, 2.5)


def test_a_regressed_metric_comes_first_and_the_line_is_cut_to_its_runs():
    earlier = [rec(gpu_busy_ms=1.0, wall_ms=float(v)) for v in range(40)]
    found = trends([rec(gpu_busy_ms=1.0, wall_ms=99.0), rec("t::new", wall_ms=1.0)], {"t::a": earlier},
                   first={"t::a": "wall_ms"})
    assert list(found) == ["t::a"] and found["t::a"].metric == "wall_ms"
    assert len(found["t::a"].values) == TREND_RUNS and found["t::a"].values[-1] == 99.0
