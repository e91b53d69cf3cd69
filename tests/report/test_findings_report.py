"""The run's findings grouped by rule (terminal and HTML), and a test's findings in the page's detail view."""
from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.report.findings_report import finding_lines, findings_section, group_findings
from pytest_gpuutil.report.html_report import render_report
from tests.helpers.headless_chromium import find_chromium, run_page


def finding(rule: str, impact: float, message: str = "m", severity: str = "low") -> dict:
    return {"rule": rule, "severity": severity, "message": message, "fix": f"fix {rule} <now>", "impact_pct": impact,
            "evidence": {"n": impact}}


RECORDS = [
    TestRecord("t.py::a", "passed", findings=(finding("gpu-idle", 60, "idle a", "high"), finding("host-sync", 30))),
    TestRecord("t.py::b", "passed", findings=(finding("gpu-idle", 80, "idle b", "high"),)),
    TestRecord("t.py::c", "passed", findings=()),
    TestRecord("t.py::d", "passed"),  # not looked at (findings off, or an old file)
    *(TestRecord(f"t.py::e{i}", "failed", findings=(finding("launch-bound", i),)) for i in range(5)),
]


def test_groups_follow_the_rules_order_worst_test_first() -> None:
    groups = group_findings(RECORDS)
    assert [g.rule for g in groups] == ["host-sync", "launch-bound", "gpu-idle"]
    idle = groups[2]
    assert [t for t, _ in idle.tests] == ["t.py::b", "t.py::a"] and idle.by_severity() == {"high": 2}
    assert idle.fix == "fix gpu-idle <now>"  # the worst test's


def test_terminal_lines_count_tests_and_list_the_worst_three() -> None:
    lines = finding_lines(RECORDS)
    assert lines[0] == ("7 of 8 tests have findings (8 in all; each finding's evidence is in gpu_util.json and "
                        "the HTML report)")
    assert lines[1] == "tests in t.py::"  # the file the listed tests share, once
    at = lines.index("launch-bound: 5 tests (5 low): fix: fix launch-bound <now>")
    assert lines[at + 1:at + 5] == ["    e4  [low] m", "    e3  [low] m", "    e2  [low] m", "    ... and 2 more"]
    assert finding_lines([TestRecord("t", "passed", findings=())]) == ["no findings in 1 tests"]
    assert finding_lines([TestRecord("t", "passed")]) == []  # none looked for: no section


def test_the_html_section_is_escaped_and_absent_when_none_were_looked_for() -> None:
    docs = [r.to_dict() for r in RECORDS]
    html = findings_section(docs)
    assert html.startswith('<section id="findings"><h2>Findings: what to fix</h2>')
    assert "7 of 8 tests have findings" in html and "fix gpu-idle &lt;now&gt;" in html and "<now>" not in html
    assert html.index("host-sync") < html.index("launch-bound") < html.index("gpu-idle")
    assert "t.py::b" in html and "and 2 more" in html
    assert findings_section([TestRecord("t", "passed").to_dict()]) == ""
    assert "No findings in the 1 tests" in findings_section([TestRecord("t", "passed", findings=()).to_dict()])


CHROMIUM = find_chromium()

HARNESS = r"""
window.addEventListener("load", function () {
  var out = {};
  try {
    var rows = Array.prototype.slice.call(document.querySelectorAll("#tests tbody tr"));
    var row = rows.filter(function (r) { return r.cells[0].textContent === "t.py::a"; })[0];
    row.click();
    out.detail = row.nextSibling.textContent;
    out.findings_blocks = row.nextSibling.querySelectorAll(".finding").length;
    out.high = row.nextSibling.querySelectorAll(".finding.sev-high").length;
    var only = document.getElementById("filter-only");
    only.value = "findings";
    only.dispatchEvent(new Event("change"));
    out.shown = document.getElementById("shown").textContent;
  } catch (e) {
    guHarness.errors.push("harness: " + e);
  }
  guHarness.done(out);
});
"""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_a_tests_findings_show_in_its_detail_view_and_filter_the_table(tmp_path: Path) -> None:
    doc = {"tests": [r.to_dict() for r in RECORDS], "machine_info": {}, "created": "2026-11-23T12:00:00"}
    seen = run_page(CHROMIUM, render_report(doc), HARNESS, tmp_path)
    assert seen["errors"] == []
    assert "Findings: what to fix" in seen["detail"] and "idle a" in seen["detail"] and "fix host-sync <now>" in seen["detail"]
    assert seen["findings_blocks"] == 2 and seen["high"] == 1
    assert seen["shown"] == "7 of 9 tests"
