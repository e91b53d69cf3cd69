"""The HTML report benchmark runs and writes its figures (no timing is asserted: timings flake)."""
from __future__ import annotations

import json
from pathlib import Path

from benchmarks import bench_html


def test_the_benchmark_writes_its_figures(tmp_path: Path):
    assert bench_html.main(["--tests", "50", "--repeats", "1", "--no-browser", "--out", str(tmp_path)]) == 0
    figures = json.loads((tmp_path / "html_report.json").read_text())
    case = figures["cases"]["with baseline"]
    assert case["bytes"] > 10_000 and case["best_render_ms"] > 0
    assert "| with baseline" in (tmp_path / "html_report.md").read_text()


def test_the_timeline_sizes_are_written_as_the_issue_asks(tmp_path: Path):
    assert bench_html.main(["--timelines", "--sizes", "20,60", "--repeats", "1", "--no-browser", "--out", str(tmp_path)]) == 0
    figures = json.loads((tmp_path / "timeline.json").read_text())
    assert [(r["tests"], sorted(r)) for r in figures["sizes"]] == [
        (20, ["bytes", "first_paint_ms", "tests", "timelines"]), (60, ["bytes", "first_paint_ms", "tests", "timelines"])]
    small, large = figures["sizes"]
    assert 0 < small["timelines"] <= 20 and large["bytes"] > small["bytes"]  # worst tests only, never more than asked
