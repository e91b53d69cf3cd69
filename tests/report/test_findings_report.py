"""The run's findings grouped by rule (terminal and HTML), and a test's findings in the page's detail view."""
from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.analysis.finding_records import Floor
from pytest_gpuutil.analysis.findings import findings_summary, rank_fixes, records_findings_summary
from pytest_gpuutil.report.findings_report import finding_lines, findings_section, group_findings
from pytest_gpuutil.report.html_report import render_report
from tests.helpers.headless_chromium import find_chromium, run_page


def finding(rule: str, impact: float, message: str = "m", severity: str = "low", saving: float = -1.0) -> dict:
    return {"rule": rule, "severity": severity, "message": message, "fix": f"fix {rule} <now>", "impact_pct": impact,
            "saving_ms": impact if saving < 0 else saving, "saving_pct": 50.0, "saving_basis": f"basis {rule}",
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
    assert [t for t, _ in idle.tests] == ["t.py::b", "t.py::a"] and idle.by_severity() == {"high": 2}  # by saving
    assert idle.fix == "fix gpu-idle <now>"  # the worst test's


def test_terminal_lines_rank_the_fixes_and_name_the_worst_tests() -> None:
    lines = finding_lines(RECORDS)
    assert lines[0] == "7 of 8 tests have findings worth 1 ms and 2 % of their time (8 in all)"
    assert lines[1] == "top fixes for this run, by the time they would save (about 180 ms in all):"
    assert lines[2:5] == ["   140 ms  cut the host work around the GPU work in t.py: 2 tests",
                          "    30 ms  read GPU values once, after the loop in t.py: 1 test",
                          "    10 ms  capture the launch loops in a CUDA graph in t.py: 5 tests"]
    assert lines[5].startswith("worst tests") and lines[6] == "tests in t.py::"  # the file they share, once
    assert lines[7:] == ["    90 ms  a  gpu-idle", "    80 ms  b  gpu-idle", "   4.0 ms  e4  launch-bound"]
    assert finding_lines([TestRecord("t", "passed", findings=())]) == [
        "no findings worth 1 ms and 2 % of a test's time in 1 tests"]
    assert finding_lines([TestRecord("t", "passed")]) == []  # none looked for: no section
    under = [TestRecord("t", "passed", findings=(), below_floor=(finding("gpu-idle", 0.5),))]
    assert finding_lines(under) == ["no findings worth 1 ms and 2 % of a test's time in 1 tests; 1 under the floor "
                                    "in gpu_util.json"]


def big_suite() -> list:
    """300 tests in 12 files, each with three or four findings of different savings."""
    rules = ("pageable-memcpy", "host-sync", "launch-bound", "fp32-matmul", "gpu-idle")
    records = []
    for i in range(300):
        found = tuple(finding(rules[(i + k) % 5], 1.0 + (i * 7 + k * 13) % 50) for k in range(3 + i % 2))
        records.append(TestRecord(f"tests/models/test_family_{i % 12}_with_a_long_name.py::test_model_forward"
                                  f"[model_{i}_with_a_very_long_parametrization_id-224]", "passed", findings=found,
                                  below_floor=(finding("gpu-idle", 0.2),)))
    return records


def test_a_big_suite_takes_at_most_12_lines_at_80_columns_and_all_with_v() -> None:
    records = big_suite()
    lines = finding_lines(records, 80)
    assert len(lines) <= 12 and max(map(len, lines)) <= 80, lines
    assert sum(1 for line in lines if " in tests/" in line or " in ..." in line) == 5  # the ranking: five lines
    assert any(line.startswith("  ... and ") for line in lines) and any("worst tests" in line for line in lines)
    verbose = finding_lines(records, 80, verbose=True)
    fixes = rank_fixes((r.test, r.findings) for r in records)
    assert len(fixes) == 60 and sum(1 for line in verbose if "test" in line and " in " in line) >= 60
    assert max(map(len, verbose)) <= 80


def test_the_ranking_groups_by_rule_and_file_largest_summed_saving_first() -> None:
    pairs = [("a.py::x", [finding("host-sync", 5)]), ("a.py::y", [finding("host-sync", 6), finding("gpu-idle", 20)]),
             ("b.py::z", [finding("host-sync", 12)]), ("b.py::w", None)]
    fixes = rank_fixes(pairs)
    assert [(f.rule, f.scope, f.tests, f.saving_ms) for f in fixes] == [
        ("gpu-idle", "a.py", 1, 20.0), ("host-sync", "b.py", 1, 12.0), ("host-sync", "a.py", 2, 11.0)]
    assert fixes[0].to_dict() == {"rule": "gpu-idle", "scope": "a.py", "tests": 1, "saving_ms": 20.0,
                                  "action": "cut the host work around the GPU work"}
    summary = findings_summary([{"test": t, "findings": f, "below_floor": [finding("gpu-idle", 0.3)]}
                                for t, f in pairs], Floor(2.0, 5.0))
    assert summary["floor"] == {"ms": 2.0, "pct": 5.0} and summary["tests"] == 3
    assert (summary["tests_with_findings"], summary["findings"], summary["below_floor"]) == (3, 4, 3)
    assert summary["saving_ms"] == 43.0 and summary["top"][0]["saving_ms"] == 20.0
    assert summary["worst_tests"][0] == {"test": "a.py::y", "saving_ms": 26.0, "rule": "gpu-idle"}
    assert findings_summary([{"test": "t"}]) is None


def test_the_records_summary_is_the_summary_of_their_dicts() -> None:
    """records_findings_summary (the session's end, a column at a time) says what findings_summary of
    the records' findings_part says, with or without tests not looked at and findings under the floor."""
    odd = [TestRecord("u.py::g", "passed", findings=[finding("host-sync", 3)], below_floor=[finding("gpu-idle", 0.1)]),
           TestRecord("u.py::h", "passed", findings=(), below_floor=(finding("gpu-idle", 0.4),))]
    for records in (RECORDS, big_suite(), odd, odd + RECORDS, RECORDS[2:4], RECORDS[3:4], []):
        for floor in (None, Floor(2.0, 5.0)):
            want = findings_summary([r.findings_part() for r in records], floor)
            assert records_findings_summary(records, floor) == want
    assert records_findings_summary(RECORDS)["tests"] == 8 and records_findings_summary(RECORDS[3:4]) is None


def test_the_html_section_ranks_fixes_is_escaped_and_absent_when_none_were_looked_for() -> None:
    docs = [r.to_dict() for r in RECORDS] + [TestRecord("t.py::f", "passed", findings=(),
                                                        below_floor=(finding("host-sync", 0.2),)).to_dict()]
    html = findings_section(docs)
    assert html.startswith('<section id="findings"><h2>Findings: what to fix</h2>')
    assert "7 of 9 tests have findings worth 1 ms and 2 %" in html and "1 finding under the floor" in html
    assert "fix gpu-idle &lt;now&gt;" in html and "<now>" not in html
    ranking = html[html.index('<table id="findings-ranking">'):html.index("<h3>By rule")]
    assert ranking.index("cut the host work") < ranking.index("read GPU values once") < ranking.index("capture the")
    rules = html[html.index("<h3>By rule"):]
    assert rules.index("host-sync") < rules.index("launch-bound") < rules.index("gpu-idle")
    assert "t.py::b" in html and "and 2 more" in html and "basis gpu-idle" in html
    assert findings_section([TestRecord("t", "passed").to_dict()]) == ""
    assert "No findings worth 1 ms and 2 % of a test's time in the 1 tests" in findings_section(
        [TestRecord("t", "passed", findings=()).to_dict()])
    floor = findings_section(docs, {"floor": {"ms": 5, "pct": 10}})
    assert "worth 5 ms and 10 %" in floor


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


def test_the_terminal_reuses_the_summary_gpu_util_json_got() -> None:
    made = findings_summary([r.findings_part() for r in RECORDS])
    assert made is not None
    assert finding_lines(RECORDS, summary=made) == finding_lines(RECORDS)
    assert finding_lines(RECORDS, summary=None) == []  # the summary says no test was looked at: no section
