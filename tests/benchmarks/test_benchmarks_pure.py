"""CPU tests of the benchmark helpers: reports, the synthetic trace generator, the speed report."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks import bench_analyze_speed, report
from benchmarks.data.make_synthetic_trace import write_synthetic_trace
from pytest_gpuutil import analyze, read_trace
from validation import seed_reference


# --- report helpers ---------------------------------------------------------------------------


def test_statistics_helpers():
    assert report.median([3.0, 1.0, 2.0]) == 2.0
    assert report.cv([2.0, 2.0, 2.0]) == 0.0
    assert report.cv([1.0, 3.0]) == pytest.approx(math.sqrt(2) / 2)
    assert report.cv([5.0]) == 0.0
    assert report.ratio(1.0, 4.0) == 0.25 and report.ratio(1.0, 0) is None and report.ratio(None, 1) is None
    assert report.error_points(26.5, 25.0) == pytest.approx(1.5)
    assert report.error_points(None, 25.0) is None
    assert report.share_pct(1.0, 4.0) == 25.0
    stats = report.summarize_repeats([1.0, 2.0, 4.0])
    assert (stats["median"], stats["min"], stats["max"]) == (2.0, 1.0, 4.0)
    with pytest.raises(ValueError):
        report.median([])


def test_markdown_table_formats_cells():
    text = report.markdown_table(["a", "b"], [[1.23456, None], ["x", 2]], digits=2)
    lines = text.splitlines()
    assert lines[0].startswith("| a") and set(lines[1]) <= {"|", "-", ":"}
    assert "1.23" in lines[2] and "1.2346" not in lines[2] and "-" in lines[2]
    assert "| x" in lines[3]


def test_attempt_records_errors_and_goes_on(capsys):
    errors: list = []
    assert report.attempt(errors, "ok", lambda: 5) == 5
    assert report.attempt(errors, "boom", lambda: 1 / 0) is None
    assert errors[0]["what"] == "boom" and "ZeroDivisionError" in errors[0]["error"]
    assert "boom" in capsys.readouterr().err


def test_write_results(tmp_path):
    json_path, md_path = report.write_results(str(tmp_path / "out"), "x", {"v": 1.5, "nan": float("nan")}, "# hi")
    assert json.loads(Path(json_path).read_text().replace("NaN", "null"))["v"] == 1.5
    assert Path(md_path).read_text() == "# hi\n"


# --- synthetic trace --------------------------------------------------------------------------


@pytest.mark.parametrize("gzipped", [False, True])
def test_synthetic_trace_reads_back(tmp_path, gzipped):
    path = tmp_path / ("synthetic_trace.json.gz" if gzipped else "synthetic_trace.json")
    stats = write_synthetic_trace(str(path), steps=1000, gzipped=gzipped)
    assert stats.events >= 5 * 1000 and stats.kernels >= 1000
    parsed = read_trace(str(path))
    assert len(parsed.events) == stats.gpu_work_events
    assert parsed.profiler_span is not None
    summary = analyze(parsed)
    assert 0 < summary.busy_pct < 100 and summary.mm_conv_pct > 0
    # the seed counts the gpu_user_annotation ranges over idle gaps too
    _, _, seed_busy_us = seed_reference.seed_compute_utilization(str(path))
    assert seed_busy_us > 1.5 * summary.busy_us


def test_synthetic_trace_default_size_is_big_enough():
    # events per step are fixed by the generator: check the default reaches the benchmark's floor
    from benchmarks.data.make_synthetic_trace import DEFAULT_STEPS, iter_events

    per_1000 = sum(1 for _ in iter_events(1000))
    assert per_1000 * DEFAULT_STEPS / 1000 >= 150_000


def test_bench_analyze_speed_report_flags_goals(tmp_path):
    sides = {
        side: {"best_wall_s": wall, "wall_s": [wall], "peak_rss_mb": rss, "rss_after_imports_mb": 20.0,
               "tracemalloc_peak_mb": rss - 20, "maxrss_mb": [rss],
               "result": {"busy_us": 1.0, "busy_pct": 2.0, "mm_conv_pct": 0.5}}
        for side, wall, rss in (("ours", 0.1, 100.0), ("seed", 1.0, 200.0))
    }
    path = tmp_path / "synthetic_trace.json"
    path.write_text("{}")
    data, markdown, table = bench_analyze_speed.build_report(str(path), "synthetic", sides)
    assert data["time_ratio"] == pytest.approx(0.1) and data["verdict"]["time_ratio_ok"]
    assert data["verdict"]["peak_rss_ok"] and "synthetic" in markdown and "0.100" in table
