"""The HTML report as a string: what the page holds for a run document, with and without a baseline."""
from __future__ import annotations

import gzip
import html
import json
import re
from pathlib import Path

from pytest_gpuutil.gates.regression import (
    DEFAULT_FAIL_EXPRS,
    compare_records,
    parse_fail_exprs,
)
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.report.html_report import (
    baseline_view,
    record_extra_html,
    render_report,
    trace_links,
    write_html_report,
)
from tests.helpers.synthetic_run import synthetic_baseline, synthetic_document

EXPRS = parse_fail_exprs(DEFAULT_FAIL_EXPRS)


def record(test: str, **fields) -> dict:
    values = dict(outcome="passed", wall_ms=10.0, gpu_busy_ms=4.0, busy_pct=40.0, mm_conv_pct=30.0, kernel_count=12,
                  top_kernel="nvjet_sm90_tst_256x128", devices=("0",),
                  categories={"gemm": {"time_us": 3000.0, "share_of_busy": 75.0, "pct_of_window": 30.0, "count": 10},
                              "elementwise": {"time_us": 1000.0, "share_of_busy": 25.0, "pct_of_window": 10.0, "count": 2}})
    values.update(fields)
    return TestRecord(test=test, **values).to_dict()


def doc(*tests: dict, **extra) -> dict:
    return {"format": "pytest-gpuutil", "version": 1, "created": "2026-11-22T10:00:00+00:00",
            "machine_info": {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "driver": "580.1", "cuda": "13.0",
                             "torch": "2.11.0", "git_commit": "abcdef0123456789"},
            "tests": list(tests), **extra}


def rows(page: str) -> list[str]:
    """The test ids in the table, in the page's order."""
    body = page[page.index('<table id="tests">'):]
    body = body[: body.index("</section>")]  # the table and its <template> of more rows
    return [html.unescape(m) for m in re.findall(r'<tr tabindex="0"[^>]*><td>(.*?)</td>', body)]


def data(page: str) -> dict:
    text = re.search(r'<script type="application/json" id="gu-data">(.*?)</script>', page, re.S).group(1)
    return json.loads(text)


def test_every_test_has_a_row_largest_gpu_time_first():
    page = render_report(doc(record("t.py::test_small", gpu_busy_ms=1.0), record("t.py::test_big", gpu_busy_ms=9.0),
                             record("t.py::test_none", gpu_busy_ms=None, busy_pct=None, categories={}, kernel_count=None)))
    assert rows(page) == ["t.py::test_big", "t.py::test_small", "t.py::test_none"]
    assert len(data(page)["tests"]) == 3
    assert "NVIDIA H100 80GB HBM3" in page and "abcdef012345" in page and "driver 580.1" in page


def test_the_page_loads_nothing_from_anywhere():
    page = render_report(synthetic_document(30))
    assert not re.search(r"https?://", page)
    assert not re.search(r"<(script|img|iframe)[^>]* src=|<link |@import|url\(", page)


def test_header_totals_and_session_charts():
    totals = {"tests": 2, "profiled": 2, "with_gpu_work": 2, "gpu_busy_ms": 5.0, "profiled_wall_ms": 20.0, "busy_pct": 25.0,
              "startup_s": 0.321, "measure_ms": 12.0, "measure_share_pct": 3.5, "test_s": 0.4}
    page = render_report(doc(record("t.py::a"), record("t.py::b", gpu_busy_ms=1.0), totals=totals))
    assert "25.0%" in page and "5.000 ms" in page and "0.321 s" in page and "0.012 s" in page
    for caption in ("GPU time by category", "Top tests by GPU time", "Busy % distribution (2 tests with GPU work)"):
        assert caption in page
    assert 'aria-label="GPU time by category"' in page


def test_no_gpu_work_says_so():
    page = render_report(doc(record("t.py::a", gpu_busy_ms=None, busy_pct=None, kernel_count=None, categories={},
                                    note="no CUDA device")))
    assert "No GPU work was measured" in page
    assert data(page)["tests"][0]["note"] == "no CUDA device"


def test_memory_when_measured_and_not_measured_otherwise():
    measured = {**record("t.py::mem"), "peak_alloc_mb": 1536.25, "peak_reserved_mb": 2048.0, "leaked_mb": 0.0, "ooms": 0}
    page = render_report(doc(measured, record("t.py::nomem")))
    details = {t: d for t, d in zip(rows(page), data(page)["tests"])}
    assert details["t.py::mem"]["m"] == {"peak_alloc_mb": 1536.2, "peak_reserved_mb": 2048.0, "leaked_mb": 0.0, "ooms": 0}
    assert "m" not in details["t.py::nomem"]
    assert "<td>1536.2</td>" in page and "<td>–</td>" in page
    assert '"not measured"' in page  # what the detail view says without memory figures


def test_threshold_states_and_outcomes_in_the_table():
    page = render_report(doc(record("t.py::a", outcome="failed"), record("t.py::b"), record("t.py::c"),
                             thresholds={"t.py::a": "failed", "t.py::b": "not_checked"}))
    assert '<tr tabindex="0" class="o-failed">' in page
    assert "<td>limits failed</td>" in page and "<td>limits not checked</td>" in page


def test_a_stacked_bar_of_categories_per_test():
    page = render_report(doc(record("t.py::a")))
    bar = re.search(r'<svg class="bar".*?</svg>', page).group(0)
    assert '<rect class="k0" x="0" width="30" height="1"/>' in bar  # gemm: 30 % of the window
    assert '<rect class="k1" x="30" width="10" height="1"/>' in bar
    assert "<title>gemm 30.0% · elementwise 10.0%</title>" in bar
    assert ".k0{fill:#4e79a7" in page


def test_names_are_escaped_everywhere():
    nasty = 't.py::test_x[<script>alert(1)</script>"&]'
    page = render_report(doc(record(nasty, top_kernel="</script><b>k</b>", note="<i>n</i>", categories={
        "<img>": {"time_us": 1.0, "share_of_busy": 100.0, "pct_of_window": 5.0, "count": 1}})))
    assert "<script>alert" not in page and "<b>k</b>" not in page and "<img>" not in page
    assert rows(page) == [nasty]
    assert data(page)["tests"][0]["note"] == "<i>n</i>"


def test_odd_documents_still_render():
    weird = doc(
        {"test": "t.py::a", "outcome": None, "categories": ["not", "a", "mapping"], "busy_pct": float("nan"),
         "kernel_bench": {"x": {"median": float("inf"), "unit": "ms"}}, "devices": None},
        {"test": 5}, "not a record",
        {"test": "t.py::b", "categories": {"gemm": "oops", "conv": {"time_us": "x"}}},
        totals="nope", gpus=[None, {"gpu": "0"}], thresholds=["x"],
    )
    page = render_report(weird)
    assert rows(page) == ["t.py::a", "t.py::b"]
    assert json.dumps(data(page))  # valid JSON: no NaN or Infinity
    render_report({})  # nothing at all


def test_baseline_regressions_first_and_highlighted():
    # a 20 ms window: the 9 points stand for 1.8 ms, over the gates' 1 ms noise floor
    base = [TestRecord.from_dict(record("t.py::a", wall_ms=20.0)), TestRecord.from_dict(record("t.py::b")),
            TestRecord.from_dict(record("t.py::gone"))]
    now = [TestRecord.from_dict(record("t.py::a", busy_pct=31.0, gpu_busy_ms=4.1, wall_ms=20.0)),
           TestRecord.from_dict(record("t.py::b", busy_pct=39.0)), TestRecord.from_dict(record("t.py::new"))]
    view = baseline_view("base.json", base, now, EXPRS, machine_id="NVIDIA_H100-x1")
    assert [(r.test, r.metric) for r in view.regressions] == [("t.py::a", "busy_pct")]
    assert view.regressions == tuple(r for r in view.rows[:1])  # regressions first
    assert view.compared == 2 and view.new_tests == 1 and view.missing_tests == 1
    a = view.rows[0]
    assert (a.baseline, a.current, a.change_text, a.limit_text) == (40.0, 31.0, "-9.0 pts", "-5 pts")
    page = render_report(doc(*(r.to_dict() for r in now)), view)
    section = page[page.index('id="baseline"'):page.index('id="session"')]
    assert '<tr class="reg"><td class="t">t.py::a</td><td>busy_pct<b class="badge">regression</b>' in section
    assert "→ 31" in section and "-9.0 pts" in section and "1 regression(s) in 1 test(s)" in section
    assert "5 compared metric(s) within their limits" in section
    assert "2 tests compared, 1 without a baseline record, 1 only in the baseline" in section
    details = dict(zip(rows(page), data(page)["tests"]))
    assert ["busy_pct", 40.0, 31.0, "-9.0 pts", "-5 pts", 1] == details["t.py::a"]["cmp"][0][:6]
    assert "<td>regressed</td>" in page


def test_baseline_view_agrees_with_the_gate():
    current = synthetic_document(200, seed=5)
    base = synthetic_baseline(current, regressions=7)
    now = [TestRecord.from_dict(t) for t in current["tests"]]
    view = baseline_view("b", base, now, EXPRS)
    gate = compare_records(base, now, EXPRS)
    assert {(r.test, r.metric) for r in view.regressions} == {(r.test, r.metric) for r in gate.regressions}
    assert len(view.regressions) >= 7
    kernel_bench = baseline_view("b", base, now, parse_fail_exprs("kernel_bench.median:0"))
    assert all(r.metric.startswith("kernel_bench[") and r.metric.endswith("].median") for r in kernel_bench.rows)


def test_trace_links_only_for_files_that_exist(tmp_path: Path):
    traces = tmp_path / "out" / "traces"
    traces.mkdir(parents=True)
    with gzip.open(traces / "t.py_test_a.json.gz", "wt") as handle:
        handle.write("{}")
    name = lambda test: test.replace("::", "_")  # noqa: E731
    assert trace_links(["t.py::test_a", "t.py::test_b"], traces, tmp_path / "out", name) == {
        "t.py::test_a": "traces/t.py_test_a.json.gz"}
    assert trace_links(["t.py::test_a"], traces, tmp_path / "elsewhere", name) == {
        "t.py::test_a": "../out/traces/t.py_test_a.json.gz"}
    assert trace_links(["t.py::test_a"], tmp_path / "missing", tmp_path, name) == {}
    path = write_html_report(tmp_path / "out" / "report.html", doc(record("t.py::test_a")), traces_dir=traces, trace_name=name)
    assert data(path.read_text(encoding="utf-8"))["tests"][0]["tr"] == "traces/t.py_test_a.json.gz"


def test_pytest_html_fragment():
    fragment = record_extra_html({**record("t.py::a", note="warm-up"), "peak_alloc_mb": 12.5})
    assert "GPU 4.000 ms · busy 40.0% · mm/conv 30.0%" in fragment and "peak 12.5 MiB" in fragment
    assert 'fill="#4e79a7"' in fragment and "<svg" in fragment and "note: warm-up" in fragment


def test_a_thousand_tests_fit_the_size_budget():
    current = synthetic_document(1000)
    now = [TestRecord.from_dict(t) for t in current["tests"]]
    plain = render_report(current)
    compared = render_report(current, baseline_view("b", synthetic_baseline(current), now, EXPRS))
    assert len(rows(plain)) == 1000
    assert len(plain.encode()) <= 2_000_000 and len(compared.encode()) <= 2_000_000


def test_rows_beyond_the_first_hundred_wait_in_a_template():
    page = render_report(synthetic_document(150))
    table = page[page.index('<table id="tests">'):page.index("</table>", page.index('<table id="tests">'))]
    template = page[page.index('<template id="more-rows">'):page.index("</template>")]
    assert table.count('<tr tabindex="0"') == 100 and template.count('<tr tabindex="0"') == 50
    assert "Showing the first 100 tests: the other 50 need JavaScript." in page
    assert '<template id="more-rows">' not in render_report(synthetic_document(100))


def test_trend_lines_in_a_last_column_only_with_a_history():
    from pytest_gpuutil.history.series import Trend
    from pytest_gpuutil.report.html_report.svg import sparkline

    tests = (record("t.py::a", gpu_busy_ms=9.0), record("t.py::b", gpu_busy_ms=1.0))
    assert "trend" not in render_report(doc(*tests))  # no history: the table as it always was
    trends = {"t.py::a": Trend("gpu_busy_ms", (4.0, None, 4.2, 3.9, 9.0), "ms")}
    page = render_report(doc(*tests), trends=trends)
    head = page[page.index('<table id="tests">'):page.index("</thead>")]
    assert len(re.findall(r"<th[ >]", head)) == 14 and head.endswith(">trend</th></tr>")  # after the 13 the script indexes
    row_a = page[page.index("<td>t.py::a</td>"):]
    row_a = row_a[: row_a.index("</tr>")]
    assert row_a.count("<td>") == 14 and '<svg class="spark"' in row_a
    assert "gpu_busy_ms over 5 runs, oldest first: 4.000 … now 9.000 ms (min 3.900, max 9.000)" in row_a
    row_b = page[page.index("<td>t.py::b</td>"):]
    assert row_b[: row_b.index("</tr>")].endswith("<td></td>")  # no earlier runs: an empty cell
    line = sparkline((1.0, None, 3.0, 2.0), "t", width=90, height=18)
    assert '<polyline points="2,16 59.3,2 88,9"' in line and 'cx="88" cy="9" r="2" fill="#4e79a7"' in line
    assert 'fill="#e15759"' in sparkline((1.0, 2.0), "t", bad=True)
    assert sparkline((1.0,), "t") == "" and sparkline((None, 2.0), "t") == ""
    assert 'points="2,9 88,9"' in sparkline((5.0, 5.0), "t")  # flat: across the middle
