"""A finding's places in the outputs (issue 42): gpu_util.json's summary, the terminal's worst tests,
the HTML detail view."""
from __future__ import annotations

from pytest_gpuutil.analysis.findings import findings_summary, rank_fixes
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.report.findings_report import finding_lines
from pytest_gpuutil.report.html_report.table import finding_detail

PLACE = {"file": "tests/test_loop.py", "line": 14, "function": "test_loop", "text": "loss.item()",
         "what": "300 syncs, 60 ms of host time", "count": 300, "ms": 60.0}


def finding(rule: str, saving: float, places: tuple = ()) -> dict:
    found = {"rule": rule, "severity": "high", "message": "m", "fix": "f", "impact_pct": 10.0, "saving_ms": saving,
             "saving_pct": 30.0, "saving_basis": "b", "evidence": {}}
    return {**found, "places": list(places)} if places else found


RECORDS = [
    TestRecord("tests/test_loop.py::test_loop", "passed", findings=(finding("host-sync", 50.0, (PLACE,)),)),
    TestRecord("tests/test_loop.py::test_other", "passed", findings=(finding("host-sync", 5.0),)),
    TestRecord("tests/test_loop.py::test_idle", "passed", findings=(finding("gpu-idle", 20.0),)),
]


def test_the_summary_gives_each_fix_and_worst_test_its_first_place() -> None:
    summary = findings_summary([r.findings_part() for r in RECORDS])
    top = {t["rule"]: t for t in summary["top"]}
    assert top["host-sync"]["first_place"] == "tests/test_loop.py:14" and "first_place" not in top["gpu-idle"]
    worst = {w["test"]: w for w in summary["worst_tests"]}
    assert worst["tests/test_loop.py::test_loop"]["first_place"] == "tests/test_loop.py:14"
    assert "first_place" not in worst["tests/test_loop.py::test_idle"]
    assert rank_fixes([(r.test, r.findings) for r in RECORDS])[0].first_place == "tests/test_loop.py:14"


def test_the_terminal_s_top_fixes_and_worst_tests_name_the_first_place() -> None:
    lines = finding_lines(RECORDS, width=100)
    assert "    50 ms  test_loop  host-sync  at tests/test_loop.py:14" in lines
    # the ranking's line names the place of its largest finding (a line of the fix's file: its number)
    assert "    55 ms  read GPU values once, after the loop in tests/test_loop.py: 2 tests, line 14" in lines
    assert any(line.startswith("    20 ms  cut the host work") and line.endswith(": 1 test") for line in lines)
    from pytest_gpuutil.analysis.findings import Fix
    from pytest_gpuutil.report.findings_report import _fix_line, _place_text

    helper = Fix("host-sync", "tests/test_loop.py", 3, 12.0, "src/model/helpers.py:7")  # the place is in called code
    assert _fix_line(helper, 120).endswith("in tests/test_loop.py: 3 tests, at src/model/helpers.py:7")
    # narrow: the file goes first, then the place's start; its line number stays
    timm = Fix("gpu-idle", "tests/test_models.py", 46, 52800.0, ".timm/timm/layers/weight_init.py:52")
    assert _fix_line(timm, 80) == "   52.8 s  cut the host work around the GPU work: 46 tests, at ...ght_init.py:52"
    same_file = Fix("launch-bound", "examples/test_gpu_workloads.py", 1, 49.0, "examples/test_gpu_workloads.py:75")
    assert _fix_line(same_file, 80) == "    49 ms  capture the launch loops in a CUDA graph: 1 test, at ...rkloads.py:75"
    assert _fix_line(same_file, 110).endswith("in examples/test_gpu_workloads.py: 1 test, line 75")
    assert _fix_line(same_file, 100).endswith("in ...les/test_gpu_workloads.py: 1 test, line 75")
    for width in (80, 100, 120):
        assert len(_fix_line(timm, width)) <= width and _fix_line(timm, width).endswith(":52")
    assert _place_text(".timm/timm/layers/weight_init.py:52", 25) == "  at ...weight_init.py:52"


def test_the_detail_view_gets_the_places_with_their_source_line() -> None:
    row = finding_detail(finding("host-sync", 50.0, (PLACE,)))
    assert row[5] == [["tests/test_loop.py", 14, "test_loop", "loss.item()", "300 syncs, 60 ms of host time"]]
    assert len(finding_detail(finding("gpu-idle", 1.0))) == 5  # no places: the row as before


CHROMIUM = None
try:
    from tests.helpers.headless_chromium import find_chromium, run_page

    CHROMIUM = find_chromium()
except ImportError:  # pragma: no cover
    pass

HARNESS = r"""
window.addEventListener("load", function () {
  var out = {};
  try {
    var rows = Array.prototype.slice.call(document.querySelectorAll("#tests tbody tr"));
    var row = rows.filter(function (r) { return r.cells[0].textContent.indexOf("test_loop") >= 0; })[0];
    row.click();
    var places = row.nextSibling.querySelectorAll(".places li");
    out.places = Array.prototype.map.call(places, function (li) { return li.textContent; });
    out.code = Array.prototype.map.call(row.nextSibling.querySelectorAll(".places pre"), function (p) { return p.textContent; });
  } catch (e) {
    guHarness.errors.push("harness: " + e);
  }
  guHarness.done(out);
});
"""


def test_the_detail_view_shows_each_place_with_its_source_line(tmp_path) -> None:
    import pytest

    if CHROMIUM is None:
        pytest.skip("chromium is not installed")
    from pytest_gpuutil.report.html_report import render_report

    doc = {"tests": [r.to_dict() for r in RECORDS[:1]], "machine_info": {}, "created": "2026-11-27T08:00:00"}
    seen = run_page(CHROMIUM, render_report(doc), HARNESS, tmp_path)
    assert seen["errors"] == []
    assert seen["places"] == ["tests/test_loop.py:14 in test_loop: 300 syncs, 60 ms of host timeloss.item()"]
    assert seen["code"] == ["loss.item()"]


def test_at_80_columns_every_ranking_and_worst_test_line_keeps_its_line_number() -> None:
    """The H200 sample (examples/, 80 columns) cut the worst tests' places at the line's end."""
    def placed(rule: str, saving: float, line: int) -> dict:
        return finding(rule, saving, ({**PLACE, "file": "examples/test_gpu_workloads.py", "line": line},))

    records = [TestRecord("examples/test_gpu_workloads.py::test_copy_pageable_batches", "passed",
                          findings=(placed("pageable-memcpy", 43.0, 75),)),
               TestRecord("examples/test_gpu_workloads.py::test_matmul_fp32", "passed",
                          findings=(placed("fp32-matmul", 38.0, 33),)),
               TestRecord("examples/test_gpu_workloads.py::test_steps_launched_one_by_one", "passed",
                          findings=(placed("launch-bound", 20.0, 149),))]
    lines = finding_lines(records, width=80)
    placed_lines = [line for line in lines if line.startswith("    ")]
    assert len(placed_lines) == 6 and all(len(line) <= 80 for line in lines)
    for line, number in zip(placed_lines, (75, 33, 149, 75, 33, 149)):
        assert line.endswith((f"line {number}", f":{number}")), line
